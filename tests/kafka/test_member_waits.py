"""Every wait of a quiet or stopping routed member is bounded, and a wait that hangs says where.

Issue 26: once, in ``tests/kafka/test_zombie.py``, a fresh draining member took every slice and
then neither exited nor printed a line for 240 s. These tests play each way a quiet member could
wait forever without saying so, with fakes instead of a broker, and show that it now gives up
after ``--drain-timeout`` with one line naming the wait (and, for a thread that hangs, the code
line it hangs on):

* a drain question the broker never answers (the question runs on a thread of its own);
* answers that all predate the member's last activity (a group that rebalances during every
  question); a group that rebalances so often that the member is never quiet at all is said;
* pending work that only grows (records arriving that nobody applies: a changing count is not
  progress);
* at the stop: a routing consumer that does not leave its group, a routing stage that cannot make
  its final commit, a slice consumer that does not leave;
* and the stall watch: any step of the member's threads that lasts a minute is said once.
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
from dataclasses import dataclass, field
from typing import Any

from panstream.errors import SourceError
from panstream.sources.kafka.member import Member
from panstream.sources.kafka.progress import Pending
from panstream.sources.kafka.watch import PACKAGE, StallWatch, ours, where

DRAINED = Pending(internal_topic="g-cells")
GIVE_UP = 22.0


@dataclass
class _Cfg:
    consumer: dict[str, Any] = field(default_factory=lambda: {"group_id": "g",
                                                              "session_timeout_ms": 6000})
    topics: list[str] = field(default_factory=lambda: ["logs"])
    internal_topic: str = "g-cells"
    idle_timeout: float | None = 5.0
    checkpoint_interval: float = 1.0
    poll_timeout_ms: int = 20


class _Summary:
    stopped_by = ""
    rebalances = 0


class _Stage:
    """Both stages of a member, as far as its waits read them."""

    def __init__(self) -> None:
        self.config = _Cfg()
        self.notices: list[str] = []
        self.notice = self.notices.append
        self.summary = _Summary()
        self.metrics = None
        self._ever_assigned = True
        self.assignments = 1
        self.count: Any = None
        self.last_activity = self._last_activity = 0.0  # quiet since long ago
        self.last_records = 0.0
        self.closing = threading.Event()  # set: close() returns
        self.finishing = threading.Event()  # set: finish() returns
        self.closing.set()
        self.finishing.set()

    # the routing stage's loop
    def open(self) -> None:
        pass

    def poll_once(self, timeout_ms: int) -> bool:
        time.sleep(timeout_ms / 1000)
        return False

    def settle(self) -> None:
        pass

    def commit(self) -> None:
        pass

    def finish(self) -> None:
        self.finishing.wait()

    def close(self) -> None:
        self.closing.wait()


class _Progress:
    """The broker's answers; ``hold`` set: the question hangs until it is released."""

    def __init__(self, answers: list[Pending], on_ask: Any = None) -> None:
        self.answers = answers
        self.on_ask = on_ask
        self.hold = threading.Event()
        self.hold.set()

    def pending(self) -> Pending:
        self.hold.wait()
        if self.on_ask is not None:
            self.on_ask()
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def close(self) -> None:
        pass


def _member(answers: list[Pending], on_ask: Any = None, asynchronous: bool = False
            ) -> tuple[Member, _Stage, _Progress]:
    stage = _Stage()
    progress = _Progress(answers, on_ask)
    m = Member(stage, stage, {}, progress=progress,  # type: ignore[arg-type]
               drain_timeout=GIVE_UP)
    m._async = asynchronous  # as in a run: the question is asked from a thread of its own
    return m, stage, progress


def _ask_and_wait(m: Member, now: float) -> bool:
    """One check of a quiet member; then the question it started is let finish (determinism)."""
    out = m._may_stop(now)
    if m._asking is not None:
        m._asking.join(timeout=10)
    return out


# ------------------------------------------------------------------ the drain question
def test_a_drain_question_the_broker_never_answers_gives_up_saying_where_it_waits() -> None:
    m, stage, progress = _member([DRAINED], asynchronous=True)
    progress.hold.clear()  # the broker never answers
    try:
        assert not m._may_stop(100.0)  # asked (on its own thread): no answer yet
        assert not m._may_stop(110.0)
        assert not m._may_stop(121.0)  # not yet --drain-timeout without an answer
        assert m._may_stop(122.5)  # stops (final checkpoint first), then fails
        assert m._failure is not None and "\n" not in m._failure
        assert m._failure.startswith(
            "stopped by --idle-timeout without knowing whether the group has drained: the broker "
            "has not answered the drain check for 22 s (it waits in wait (")
        assert "called from _ask_broker (panstream/sources/kafka/member.py:" in m._failure
    finally:
        progress.hold.set()
        assert m._asking is not None
        m._asking.join(timeout=10)


def test_answers_that_all_predate_a_rebalance_give_up_instead_of_waiting_forever() -> None:
    """Each question meets a rebalance (it bumps the member's last activity after the question
    started), so no answer is usable, not even a 'drained' one: before the fix, such a member
    asked forever and said nothing."""
    stage_ref: list[_Stage] = []

    def rebalance() -> None:
        stage_ref[0].last_activity = time.monotonic() + 1.0
        stage_ref[0].assignments += 1

    m, stage, _ = _member([DRAINED], on_ask=rebalance, asynchronous=True)
    stage_ref.append(stage)
    for now in (100.0, 101.0, 110.0, 121.0):
        assert not _ask_and_wait(m, now)
    assert _ask_and_wait(m, 122.5)
    assert m._failure is not None
    assert m._failure.startswith(
        "stopped by --idle-timeout without knowing whether the group has drained: for 22 s every "
        "answer of the broker predated this member's last activity (4 dropped; 4 rebalances "
        "meanwhile); nothing of this member is lost")


def test_a_usable_answer_ends_the_wait_for_one() -> None:
    m, _, _ = _member([DRAINED], asynchronous=True)
    assert not _ask_and_wait(m, 100.0)  # asked: no answer yet
    assert _ask_and_wait(m, 130.0)  # then drained: exit 0, however long the first took
    assert m._failure is None


def test_a_group_that_rebalances_too_often_to_be_quiet_says_so() -> None:
    """No records and no usable answer for idle_timeout + --drain-timeout, and not quiet now:
    every rebalance counts as activity, so the member never even asked. Before, it said nothing;
    now it says so once (a notice, not a failure: one long restore after one rebalance looks the
    same for a while)."""
    m, stage, _ = _member([DRAINED])
    m._records_at, m._rebalances_mark = 0.0, m._rebalances()
    stage.last_activity = 26.0  # the latest rebalance, a second ago: not quiet
    m._restless(27.1)
    assert stage.notices == []  # no rebalance seen since the last records: nothing to say
    stage.summary.rebalances = 40
    m._restless(26.9)  # 5 s idle + 22 s not yet
    assert stage.notices == []
    m._restless(27.1)
    m._restless(40.0)
    assert stage.notices == [
        "no records for 27 s, but not quiet: its groups rebalanced 40 times meanwhile (a "
        "rebalance counts as activity, so this member has not asked whether the group has "
        "drained); a bounded run stops only once the group has drained"]
    assert m._failure is None


def test_a_member_waiting_on_others_that_progress_is_not_restless() -> None:
    """Usable answers that show the others progressing keep a record-less member waiting."""
    moving = [Pending({}, {8: n}, "g-cells") for n in range(400, 0, -1)]
    m, _, _ = _member(moving)
    m._records_at = 0.0
    for t in range(100, 300, 2):
        assert not m._may_stop(float(t))
        m._restless(float(t))
    assert m.slices.notices == [  # type: ignore[attr-defined]
        "idle, but the group has not drained: 398 routed records unapplied in g-cells (slices "
        "8); waiting for it (a rebalance may hand this member their partitions; giving up after "
        "22 s without progress)"]


# ------------------------------------------------------------------ progress
def test_pending_work_that_only_grows_is_no_progress() -> None:
    """Records keep arriving for slices nobody holds: the count changes at every answer, which
    reset the give-up clock before; only a count that goes down is progress."""
    growing = [Pending({("logs", 0): 3 * n}, {8: 40 + n}, "g-cells") for n in range(1, 60)]
    m, stage, _ = _member(growing)
    assert not m._may_stop(100.0)
    for t in range(101, 122):
        assert not m._may_stop(float(t))
    assert m._may_stop(122.0)
    assert m._failure is not None and m._failure.startswith(
        "stopped by --idle-timeout with work pending for the group: ")


# ------------------------------------------------------------------ the stop
def _router(m: Member) -> threading.Thread:
    m._route_stop.set()  # the member stops: the routing loop finishes and closes at once
    t = threading.Thread(target=m._route_loop, name="panstream-route", daemon=True)
    t.start()
    return t


def test_a_routing_consumer_that_does_not_leave_its_group_is_left_behind_with_a_notice() -> None:
    m, stage, _ = _member([DRAINED])
    m.close_seconds = 0.3
    stage.closing.clear()  # close() hangs (a consumer that never leaves its group)
    router = _router(m)
    try:
        m._join_router(router)  # before the fix: router.join() without a bound, forever
        assert m._route_error is None and m._router_left  # its final commit was made
        assert len(stage.notices) == 1
        assert stage.notices[0].startswith(
            "the routing consumer has not left group g 0.3 s after its last commit (its thread "
            "waits in wait (")
        assert "called from _route_loop (panstream/sources/kafka/member.py:" in stage.notices[0]
    finally:
        stage.closing.set()
        router.join(timeout=10)


def test_a_routing_stage_that_cannot_make_its_final_commit_fails_the_run() -> None:
    m, stage, _ = _member([DRAINED])
    m.give_up_seconds = 0.3
    stage.finishing.clear()  # the final commit hangs
    router = _router(m)
    try:
        m._join_router(router)
        assert isinstance(m._route_error, SourceError)
        assert str(m._route_error).startswith(
            "the routing stage did not make its final commit within 0.3 s (its thread waits in ")
        assert str(m._route_error).endswith("nothing is lost: the routed records are durable and "
                                            "a restart routes those messages again")
    finally:
        stage.finishing.set()
        router.join(timeout=10)


def test_a_slice_consumer_that_does_not_leave_its_group_does_not_hold_the_exit() -> None:
    m, stage, _ = _member([DRAINED])
    m.close_seconds = 0.3
    stage.closing.clear()
    try:
        m._close_slices()  # returns, with its notice, though close() still hangs
        assert stage.notices and stage.notices[0].startswith(
            "the slice consumer has not left its group 0.3 s after its final checkpoint")
    finally:
        stage.closing.set()


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


def test_where_names_the_innermost_frame_and_the_panstream_caller() -> None:
    m, _, progress = _member([DRAINED], asynchronous=True)
    progress.hold.clear()
    try:
        m._may_stop(100.0)
        assert m._asking is not None
        deadline = time.monotonic() + 10
        while "_ask_broker" not in where(m._asking) and time.monotonic() < deadline:
            time.sleep(0.01)
        line = where(m._asking)
        assert line.startswith("in wait (")
        assert "called from _ask_broker (panstream/sources/kafka/member.py:" in line
    finally:
        progress.hold.set()
        assert m._asking is not None
        m._asking.join(timeout=10)


# ------------------------------------------------------------------ the frame rule
def test_the_frame_rule_is_the_package_directory_not_any_directory_named_panstream() -> None:
    """Issue 37: ``git clone .../panstream`` makes a checkout named ``panstream``; its tests lie
    under ``.../panstream/tests``. Only files of the package's own directory are panstream's
    frames, whatever the directories above it are called."""
    root = "/home/me/panstream"  # a clone named panstream
    package = f"{root}/panstream"
    assert ours(f"{package}/sources/kafka/member.py", package)
    assert ours(f"{package}/state/checkpoint.py", package)
    assert not ours(f"{root}/tests/kafka/test_member_waits.py", package)  # the clone's tests
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
