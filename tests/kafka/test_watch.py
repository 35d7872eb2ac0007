"""The stall watch: any step of a member's threads that lasts a minute is said once, with the code
line it waits on; and which frames are panstream's (the package directory, not any directory
named ``panstream``).

Issue 26: a draining member once neither exited nor printed a line for 240 s. The member's waits
themselves are bounded (``test_drain.py``); the watch says where a thread hangs meanwhile.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from _layouts import Layout, drain_member

from panstream.sources.kafka.progress import Pending
from panstream.sources.kafka.watch import PACKAGE, StallWatch, ours, where


# ------------------------------------------------------------------ the stall watch
def test_a_step_that_lasts_a_minute_is_said_once_with_its_code_line() -> None:
    clock = [0.0]
    said: list[str] = []
    watch = StallWatch(said.append, after=60.0, clock=lambda: clock[0])
    release = threading.Event()
    marked = threading.Event()

    def hang_in_a_commit() -> None:
        watch.step("making the final checkpoint")
        marked.set()
        release.wait()

    t = threading.Thread(target=hang_in_a_commit, name="panstream-main-test", daemon=True)
    t.start()
    try:
        assert marked.wait(10)
        clock[0] = 59.0
        assert watch.check() == []
        clock[0] = 61.0
        lines = watch.check()
        assert len(lines) == 1 and said == lines
        assert lines[0].startswith("still making the final checkpoint after 61 s: the "
                                   "panstream-main-test thread waits in wait (")
        assert "called from hang_in_a_commit (" not in lines[0]  # a test's frame is not panstream's
        clock[0] = 200.0
        assert watch.check() == []  # said once
    finally:
        release.set()
        t.join(timeout=10)


def test_a_loop_that_turns_never_grows_old() -> None:
    clock = [0.0]
    watch = StallWatch(lambda _: None, after=60.0, clock=lambda: clock[0])
    for turn in range(100):
        clock[0] = turn * 1.0
        watch.step("polling")  # every turn marks the step again
        assert watch.check() == []


def test_where_names_the_innermost_frame_and_the_panstream_caller(tmp_path: Path) -> None:
    """A drain question hanging on the broker: ``where`` names the wait and the member's frame
    that asked (a routed member of ``_layouts.py``)."""
    m, _, _, progress = drain_member(Layout("slice", tmp_path), [Pending(internal_topic="g-cells")],
                                     asynchronous=True)
    progress.hold.clear()
    try:
        m.may_stop(100.0)
        assert m.asking is not None
        deadline = time.monotonic() + 10
        while "_ask_broker" not in where(m.asking) and time.monotonic() < deadline:
            time.sleep(0.01)
        line = where(m.asking)
        assert line.startswith("in wait (")
        assert "called from _ask_broker (panstream/sources/kafka/member.py:" in line
    finally:
        progress.hold.set()
        assert m.asking is not None
        m.asking.join(timeout=10)


# ------------------------------------------------------------------ the frame rule
def test_the_frame_rule_is_the_package_directory_not_any_directory_named_panstream() -> None:
    """Issue 37: ``git clone .../panstream`` makes a checkout named ``panstream``; its tests lie
    under ``.../panstream/tests``. Only files of the package's own directory are panstream's
    frames, whatever the directories above it are called."""
    root = "/home/me/panstream"  # a clone named panstream
    package = f"{root}/panstream"
    assert ours(f"{package}/sources/kafka/member.py", package)
    assert ours(f"{package}/state/checkpoint.py", package)
    assert not ours(f"{root}/tests/kafka/test_watch.py", package)  # the clone's tests
    assert not ours(f"{root}/.venv/lib/python3.12/threading.py", package)  # its virtualenv
    assert not ours(f"{root}/panstream-extra/x.py", package)  # a sibling sharing the prefix
    assert not ours(f"{package}/sources/kafka/watch.py", package)  # the watch itself
    assert not ours("/usr/lib/python3/dist-packages/panstream_plugin/panstream/x.py", package)
    # and the rule in use here: the package this test imports, not this test's own file
    assert ours(os.path.join(PACKAGE, "sources", "kafka", "member.py"))
    assert not ours(__file__)


def test_a_checkout_named_panstream_names_no_test_frame_as_panstream_s(tmp_path: Path) -> None:
    """The package copied into ``tmp_path/panstream/panstream`` and a script of that checkout's
    ``tests/`` hanging in a function of its own: ``where`` names the innermost wait and no
    'called from' the script (before the fix: 'called from hang (panstream/tests/hang.py:...)')."""
    checkout = tmp_path / "panstream"
    shutil.copytree(PACKAGE, checkout / "panstream",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (checkout / "tests").mkdir()
    script = checkout / "tests" / "hang.py"
    script.write_text(textwrap.dedent("""
        import threading, time
        import panstream
        from panstream.sources.kafka.watch import where
        gate = threading.Event()
        def hang():
            gate.wait()
        t = threading.Thread(target=hang, daemon=True)
        t.start()
        deadline = time.monotonic() + 10
        while "hang" not in str(t) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        print(panstream.__file__)
        print(where(t))
        gate.set()
    """))
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         env=env, cwd=checkout, timeout=60, check=True).stdout.splitlines()
    assert out[0] == str(checkout / "panstream" / "__init__.py")  # the copy, not this tree
    assert out[1].startswith("in wait (") and "threading.py:" in out[1]
    assert "called from" not in out[1]
