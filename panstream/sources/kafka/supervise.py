"""A librdkafka member runs in a supervised child process, so that a crash inside librdkafka ends
``panstream kafka`` with one line and exit 1, never a death by signal (issue 35).

**Why.** librdkafka 2.16.0 (confluent-kafka 2.16.1) dies of SIGSEGV in its main thread when a
topic its consumer fetches is deleted (``rd_kafka_metadata_update_op`` ->
``rd_kafka_metadata_cache_find`` -> ``strcmp`` on a null topic name, after Fetch responses for a
topic id it can no longer name: docs/kafka.md, *Topology changes*). Nothing inside the process
can catch it (librdkafka's threads block every signal, so the kernel kills the process whatever
its handler), and no setting avoids it: the trackers know nearby crashes
(confluentinc/librdkafka#5280, #4778, #5093) but no workaround, and ``api.version.request=false``
with ``broker.version.fallback`` (which would cap the Fetch version) no longer caps anything for a
fallback of 0.10 or later (tried on Tansu: the same SIGSEGV). Before this, a watcher process said
one line while the member still died of the signal (:func:`~.rdkafka.say_native_crash`).

**How.** :func:`supervise` forks once, before the member has a thread or a client: the child
returns and runs the member as ever (its stdout and stderr are the command's own, so every line it
prints reaches the user unchanged); the parent only waits. It forwards SIGINT, SIGTERM, SIGHUP
and SIGQUIT to the child, each exactly once (the child has a process group of its own, so a
terminal's Ctrl+C reaches it through the parent only: a second Ctrl+C is still a second), and
exits with the child's exit status. When the child dies of a signal it did not forward, the
parent says so in one line (:func:`death_line`: what happened, that offsets are committed only
after the snapshots are durable so nothing committed is lost, what to do) and exits 1. A child
that dies of a signal the parent forwarded (a second Ctrl+C) makes the parent die of the same, as
the member did before. The child dies with its parent (``PR_SET_PDEATHSIG`` SIGKILL): ``kill -9``
of the command still ends the member at once, as before, and a pause of the command (SIGSTOP,
Ctrl+Z) pauses the member within 0.1 s (:func:`_follow_pauses`; SIGCONT continues both).

Where the command's stdio are not files (an in-process ``CliRunner``), nothing is forked: the
child's output could not reach the caller; the member then runs in the process, with the watcher.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

#: The signals the supervisor forwards to its child.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)

#: Deaths that are crashes of the process itself (what librdkafka's bug gives: SIGSEGV).
CRASHES = (signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGILL, signal.SIGFPE)

_state: dict[str, Any] = {"supervised": False}


def supervised() -> bool:
    """Whether this process is a supervised child (:func:`supervise` returned in it)."""
    return bool(_state["supervised"])


def _stdio_are_files() -> bool:
    try:
        sys.stdout.fileno()
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    return True


def _versions() -> str:
    try:
        import confluent_kafka as ck

        return f"confluent-kafka {ck.__version__}, librdkafka {ck.libversion()[0]}"
    except Exception:  # noqa: BLE001 - the versions are a courtesy
        return "confluent-kafka"


def death_line(sig: int, versions: str | None = None) -> str:
    """The one line said when the member process died of ``sig``.

    >>> death_line(signal.SIGSEGV, "librdkafka 2.16.0")[:72]
    'the member process died of SIGSEGV, a crash inside librdkafka (librdkafk'
    >>> death_line(signal.SIGKILL).split(";")[0]
    'the member process was killed by SIGKILL (kill -9, or the out-of-memory killer)'
    """
    name = {int(s): s.name for s in signal.Signals}.get(int(sig), f"signal {sig}")
    kept = ("offsets are committed only after the snapshots they cover are durable, so nothing "
            "committed is lost: a restart replays what followed the last checkpoint")
    if sig in CRASHES:
        return (f"the member process died of {name}, a crash inside librdkafka "
                f"({versions or _versions()}), which crashes so when a topic it fetches is "
                "deleted under it (a source topic deleted or re-created, or the broker restarted "
                f"without its topics: docs/kafka.md, Topology changes); {kept}. Check the group's "
                "topics (panstream inspect -b HOST:PORT with the group's state), then restart; "
                "--source-client kafka-python stops with one line instead of a crash")
    if sig == signal.SIGKILL:
        return (f"the member process was killed by SIGKILL (kill -9, or the out-of-memory "
                f"killer); {kept}. Restart it (with more memory if the system log names the "
                "out-of-memory killer)")
    return f"the member process died of {name}; {kept}. Restart it"


def supervise(say: Callable[[str], None] | None = None) -> int | None:
    """Run the rest of this command in a child process (module docstring).

    Returns:
        ``None`` in the child (go on and run the member), and where nothing is forked (stdio not
        files, no ``fork``); in the parent, once the child has ended, the exit status the command
        should end with (the child printed its own lines; a death by signal is said through
        ``say``, by default on stderr as ``panstream: error: ...``).
    """
    if supervised() or not hasattr(os, "fork") or not _stdio_are_files():
        return None
    say = say or (lambda line: print(f"panstream: error: {line}", file=sys.stderr, flush=True))
    child: list[int] = []
    early: list[int] = []
    forwarded: set[int] = set()

    def forward(signum: int, frame: FrameType | None) -> None:
        forwarded.add(signum)
        if not child:
            early.append(signum)
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(child[0], signum)

    resend = [0]

    def resume(signum: int, frame: FrameType | None) -> None:
        # this process was stopped and goes on: so does the child (which stopped itself when it
        # saw this process stopped, _follow_pauses), now and twice more half a second apart (a
        # child that saw the stop just before this SIGCONT may stop itself just after it)
        if signum == signal.SIGCONT:
            resend[0] = 2
        elif resend[0]:
            resend[0] -= 1
        if child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child[0], signal.SIGCONT)
        if resend[0]:
            signal.setitimer(signal.ITIMER_REAL, 0.5)

    sys.stdout.flush()
    sys.stderr.flush()
    saved = {s: signal.signal(s, forward) for s in FORWARDED}
    saved.update({s: signal.signal(s, resume) for s in (signal.SIGCONT, signal.SIGALRM)})
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: the member
        for s, h in saved.items():
            signal.signal(s, h)
        _state["supervised"] = True
        _die_with(parent)
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)  # a terminal's signals reach the member through the parent only
        _follow_pauses(parent)
        return None
    child.append(pid)
    for s in early:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, s)
    try:
        _, status = os.waitpid(pid, 0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for s, h in saved.items():
            signal.signal(s, h)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    sig = os.WTERMSIG(status)
    if sig in forwarded:  # the child died of what it was sent (a second Ctrl+C): so does this
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    say(death_line(sig))
    return 1


def _follow_pauses(parent: int, every: float = 0.1) -> None:
    """Stop this child whenever its parent is stopped (SIGSTOP or Ctrl+Z on the command: an
    operator pausing the member, e.g. past its session), from a daemon thread that reads the
    parent's state in ``/proc`` every ``every`` seconds; the parent's SIGCONT continues it."""
    import threading

    try:  # kept open: each look is one pread (a fresh open and a text read cost 4-5x its CPU)
        fd = os.open(f"/proc/{parent}/stat", os.O_RDONLY)
    except OSError:
        return

    def watch() -> None:
        while True:
            try:
                stat = os.pread(fd, 1024, 0)  # the kernel writes it afresh at each read
                state = stat[stat.rindex(b")") + 2:][:1]
            except (OSError, ValueError):  # the parent is gone
                os.close(fd)
                return
            if state == b"T":  # a job-control stop; not "t", a tracer's (gdb, py-spy), which
                os.kill(os.getpid(), signal.SIGSTOP)  # ends without the SIGCONT that resumes
            time.sleep(every)

    threading.Thread(target=watch, name="panstream-pauses", daemon=True).start()


def _die_with(parent: int) -> None:
    """Make this child die (SIGKILL) when its parent does, as one process did (Linux)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(1)


__all__ = ["CRASHES", "FORWARDED", "death_line", "supervise", "supervised"]
