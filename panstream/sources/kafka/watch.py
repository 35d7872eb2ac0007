"""Say where a member waits when one of its steps lasts too long (issue 26's silent drain hang).

A routed member (:mod:`.member`) runs three threads: the slice stage's loop (the calling thread),
the routing stage's loop, and the drain question (whether the group has drained). Each marks the
step it is in (:meth:`StallWatch.step`): a loop turning marks the same step again and again, so
only a step that truly hangs grows old. A watch thread looks once a second and, when a step has
lasted :data:`STALL_SECONDS`, says once, in one line, what the member is waiting for and where
that thread waits::

    panstream: still asking the broker whether the group has drained after 60 s: the
    panstream-drain thread waits in wait (threading.py:327), called from committed
    (panstream/sources/kafka/progress.py:164)

Why: once, a fresh draining member held every slice and neither exited nor printed anything for
240 s (docs/kafka.md, "A bounded run ends when the group has drained"); the cause could not be
found from a log that said nothing. A recurrence now names its step and its line.

What it prints is code locations and a duration: no record, offset or count (the member's
printed guarantee covers its notices, docs/threat-model.md).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

#: A step lasting this long is said once (the longest bounded waits of a quiet member: a commit
#: or a broker question, 30 s each; a group join on Tansu, ~a session).
STALL_SECONDS = 60.0


#: The package's own directory (``.../panstream``, where this file's ``sources/kafka`` lies). A
#: frame is panstream's when its file lies under it, whatever the directories above it are called:
#: a clone named ``panstream`` keeps its tests under ``.../panstream/tests``, which are not the
#: package's frames (issue 37: a rule matching any ``/panstream/`` in the path took them for ours).
PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: This watch's own file, relative to :data:`PACKAGE`: its frames never count as the caller.
_SELF = "sources/kafka/watch.py"


def _inside(path: str, package: str) -> str | None:
    """``path`` relative to ``package`` (``/``-separated), or ``None`` when it lies outside."""
    full = os.path.abspath(path).replace(os.sep, "/")
    root = os.path.abspath(package).replace(os.sep, "/").rstrip("/") + "/"
    return full[len(root):] if full.startswith(root) else None


def ours(path: str, package: str = PACKAGE) -> bool:
    """Whether a frame's file ``path`` is panstream's own: a file of the package directory
    ``package`` (:data:`PACKAGE`), this watch's file aside. Only the package's directory decides,
    never a directory named ``panstream`` above it.

    >>> ours("/src/panstream/panstream/sources/kafka/member.py", "/src/panstream/panstream")
    True
    >>> ours("/src/panstream/tests/kafka/test_member_waits.py", "/src/panstream/panstream")
    False
    >>> ours("/src/panstream/panstream/sources/kafka/watch.py", "/src/panstream/panstream")
    False
    """
    rel = _inside(path, package)
    return rel is not None and rel != _SELF


def _short(path: str, package: str = PACKAGE) -> str:
    """``.../site-packages/kafka/admin/client.py`` -> ``kafka/admin/client.py``; a file of the
    package -> ``panstream/sources/...``; any other file -> its directory and name."""
    rel = _inside(path, package)
    if rel is not None:
        return f"{os.path.basename(package.rstrip(os.sep + '/'))}/{rel}"
    parts = path.replace(os.sep, "/").split("/")
    for anchor in ("site-packages", "dist-packages"):
        if anchor in parts:
            return "/".join(parts[parts.index(anchor) + 1:])
    return "/".join(parts[-2:])


def where(thread: threading.Thread | None) -> str:
    """Where ``thread`` waits now, in one line: its innermost frame and, if that is not
    panstream's, the innermost panstream frame that called it.

    >>> where(None)
    'nowhere (no such thread)'
    """
    frame: FrameType | None = None
    if thread is not None and thread.ident is not None:
        frame = sys._current_frames().get(thread.ident)
    if frame is None:
        return "nowhere (no such thread)"
    inner = frame
    caller: FrameType | None = None
    f: FrameType | None = frame
    while f is not None:
        if ours(f.f_code.co_filename):
            caller = f
            break
        f = f.f_back

    def say(fr: FrameType) -> str:
        return f"{fr.f_code.co_name} ({_short(fr.f_code.co_filename)}:{fr.f_lineno})"

    out = f"in {say(inner)}"
    if caller is not None and caller is not inner:
        out += f", called from {say(caller)}"
    return out


class StallWatch:
    """Marks of the steps a member's threads are in; says once when one lasts too long.

    Args:
        notice: where the one-line notices go (the CLI prints them on stderr).
        after: how long a step may last before it is said (:data:`STALL_SECONDS`).
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(self, notice: Callable[[str], None], after: float = STALL_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.notice = notice
        self.after = after
        self.clock = clock
        self._steps: dict[str, tuple[str, float, threading.Thread]] = {}
        self._said: set[tuple[str, str, float]] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def step(self, what: str) -> None:
        """The calling thread is in step ``what`` from now on (a loop marks its step again at
        every turn: only a turn that hangs grows old)."""
        me = threading.current_thread()
        self._steps[me.name] = (what, self.clock(), me)

    def done(self) -> None:
        """The calling thread has left its steps (it ends)."""
        self._steps.pop(threading.current_thread().name, None)

    def since(self, name: str) -> tuple[str, float] | None:
        """The step the thread ``name`` is in and since when (``None``: none)."""
        got = self._steps.get(name)
        return None if got is None else (got[0], got[1])

    def check(self) -> list[str]:
        """Say each step that has lasted :attr:`after` seconds, once. Returns what was said."""
        now = self.clock()
        said = []
        for name, (what, since, thread) in list(self._steps.items()):
            key = (name, what, since)
            if now - since < self.after or key in self._said or not thread.is_alive():
                continue
            self._said.add(key)
            line = (f"still {what} after {now - since:.0f} s: the {name} thread waits "
                    f"{where(thread)}")
            said.append(line)
            self.notice(line)
        return said

    def start(self) -> None:
        """Look once a second, on a daemon thread, until :meth:`stop`."""
        def run() -> None:
            while not self._stop.wait(1.0):
                try:
                    self.check()
                except Exception:  # noqa: BLE001, S112 - a watch never stops the member
                    continue

        self._thread = threading.Thread(target=run, name="panstream-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


__all__ = ["PACKAGE", "STALL_SECONDS", "StallWatch", "ours", "where"]
