"""When a routed member may stop: its group drained, every wait bounded, nothing lost.

A member of a routed group (the default layout, and ``--window``) runs a routing stage and a
slice stage (``_layouts.py`` builds the member of either kind, a routed slice or a window slice,
on a fake broker). A bounded run (``--idle-timeout``) must not end while records routed to a
slice wait unapplied in the internal topic, and must not wait forever without saying why. What
each test proves, for both kinds unless it names none:

* The drain decision. A quiet member exits 0 only when the broker says nothing is pending
  (``..._stops_only_when_the_group_has_drained``); otherwise it waits, says once what it waits
  for, and gives up with one line (exit 1) after ``--drain-timeout`` without progress
  (``..._waits_for_orphaned_slices_then_gives_up_with_one_line``); only a count that goes down
  is progress (``test_progress_restarts_the_wait``, ``..._only_grows_is_no_progress``); a topic
  re-created under the group is no work to wait for (issue 35, ``..._topics_changed_...``);
  a give-up line promises nothing of records that expired; the default wait outlasts a dead
  member's session; a member that never got a partition does not exit 0.
* Every wait is bounded and says where it hangs (issue 26: a draining member once neither exited
  nor printed a line for 240 s): a drain question the broker never answers; answers that all
  predate a rebalance; a group that rebalances too often to be quiet (said once); a routing
  consumer that does not leave its group, a routing stage that cannot make its final commit, a
  slice consumer that does not leave its group.
* Routed records are never lost to retention (no task kind): the internal topic keeps records
  as long as the longest-lived source topic and its segments roll, so a 20-minute outage of the
  whole group loses nothing; records that expired unapplied anyway are said loudly.
* A release of slices (no task kind) refuses a store missing a slice unless the broker shows the
  slice never received a record; a directory-only release says that it could not check.

A per-partition shard has no group drain: each member's final checkpoint commits exactly its own
partitions (``test_commit_rebalance.py``), and ``test_a_per_partition_member_stops_on_its_own_idle_timeout``
shows what its bounded run waits for instead. The stall watch's own tests are in
``test_watch.py``.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from _group_fakes import Group
from _layouts import Draining, Layout, drain_member
from click.testing import CliRunner

from panstream.cli.main import cli
from panstream.cli.routed_check import require_releasable
from panstream.errors import SourceError, StateError
from panstream.estimators.density import DensityEstimator
from panstream.sources.kafka.member import default_drain_timeout
from panstream.sources.kafka.progress import Pending
from panstream.sources.kafka.route import SEGMENT_BYTES, ensure_internal_topic, internal_retention
from panstream.state.slices import SliceLayout, encode_slice
from panstream.state.stores import DirectoryStore, ensure_ledger
from panstream.universe import Universe

MINUTE = 60_000
GIVE_UP = 22.0  # --drain-timeout 22


@pytest.fixture(params=["slice", "window"])
def lay(request: pytest.FixtureRequest, tmp_path: Path) -> Layout:
    """A routed group's member of either kind; ``lay.tp.topic`` is its internal topic."""
    return Layout(request.param, tmp_path)


def drained(lay: Layout) -> Pending:
    return Pending(internal_topic=lay.tp.topic)


def orphans(lay: Layout, n: int = 40) -> Pending:
    """Records routed to slices 8 and 9, which no member holds."""
    return Pending({}, {8: n, 9: 2}, lay.tp.topic)


def _ask_and_wait(m: Draining, now: float) -> bool:
    """One check of a quiet member; then the question it started is let finish (determinism)."""
    out = m.may_stop(now)
    if m.asking is not None:
        m.asking.join(timeout=10)
    return out


# ------------------------------------------------------------------ the drain decision
def test_a_quiet_member_stops_only_when_the_group_has_drained(lay: Layout) -> None:
    m, _, _, _ = drain_member(lay, [drained(lay)])
    assert m.may_stop(100.0) and m.failure is None  # drained: exit 0


def test_a_quiet_member_waits_for_orphaned_slices_then_gives_up_with_one_line(
        lay: Layout) -> None:
    m, _, task, _ = drain_member(lay, [orphans(lay)])
    cells = lay.tp.topic
    assert m.give_up_seconds == GIVE_UP
    assert not m.may_stop(100.0)
    assert task.said == []  # what the next checkpoint would settle is not worth a line
    assert not m.may_stop(110.0)
    assert task.said == [f"idle, but the group has not drained: 42 routed records unapplied in "
                         f"{cells} (slices 8-9); waiting for it (a rebalance may hand this "
                         "member their partitions; giving up after 22 s without progress)"]
    assert not m.may_stop(121.0)  # no progress, not yet 22 s
    assert len(task.said) == 1  # said once
    assert m.may_stop(122.5)  # stops (final checkpoint), then fails
    assert m.failure is not None and "\n" not in m.failure
    assert m.failure.startswith(f"stopped by --idle-timeout with work pending for the group: 42 "
                                 f"routed records unapplied in {cells} (slices 8-9); nothing is "
                                 "lost")


def test_progress_restarts_the_wait(lay: Layout) -> None:
    less = Pending({}, {8: 10}, lay.tp.topic)
    m, _, _, _ = drain_member(lay, [orphans(lay), orphans(lay), less, less])
    assert not m.may_stop(100.0) and not m.may_stop(120.0)
    assert not m.may_stop(121.0)  # the slices moved: 22 s more from here
    assert not m.may_stop(142.0) and m.may_stop(143.5)


def test_pending_work_that_only_grows_is_no_progress(lay: Layout) -> None:
    """Records keep arriving for slices nobody holds: the count changes at every answer, which
    reset the give-up clock before; only a count that goes down is progress."""
    growing = [Pending({("logs", 0): 3 * n}, {8: 40 + n}, lay.tp.topic) for n in range(1, 60)]
    m, _, _, _ = drain_member(lay, growing)
    assert not m.may_stop(100.0)
    for t in range(101, 122):
        assert not m.may_stop(float(t))
    assert m.may_stop(122.0)
    assert m.failure is not None and m.failure.startswith(
        "stopped by --idle-timeout with work pending for the group: ")


def test_a_group_whose_topics_changed_is_not_drained_and_stops_at_once(lay: Layout) -> None:
    """Issue 35: commits above a re-created source topic's ends once read as "drained" (nothing
    past the commits). A change is no pending work to wait for: the member stops at once, and the
    line says what changed and promises nothing."""
    changed = Pending({}, {}, lay.tp.topic, changed=(
        "logs ends below the offsets the group committed (partition 0: end 7, committed 8): it "
        "was deleted and re-created, or emptied",))
    assert changed and not changed.to_dict()["drained"]
    m, _, _, _ = drain_member(lay, [changed])
    assert m.may_stop(100.0)
    assert m.failure is not None and "\n" not in m.failure
    assert m.failure.startswith("the group's topics changed under it: logs ends below the offsets")
    assert "nothing is lost" not in m.failure


def test_a_give_up_line_promises_nothing_of_records_that_expired(lay: Layout) -> None:
    lost = Pending({}, {8: 40}, lay.tp.topic, expired={8: 5})
    m, _, _, _ = drain_member(lay, [lost])
    assert not m.may_stop(100.0) and m.may_stop(123.0)
    assert m.failure is not None and "nothing is lost" not in m.failure
    assert f"expired from {lay.tp.topic} unapplied (lost)" in m.failure


def test_the_default_wait_outlasts_a_dead_members_session(lay: Layout) -> None:
    """Tansu moves a kill -9'd member's partitions about a minute after its death with
    kafka-python's default 10 s session: the default wait is 2 minutes, or two sessions + 10 s."""
    m, _, _, _ = drain_member(lay, [orphans(lay)], drain_timeout=None)
    assert m.give_up_seconds == 120
    assert default_drain_timeout({"session_timeout_ms": 90_000}) == 190


def test_a_member_that_never_got_a_partition_does_not_exit_0(lay: Layout) -> None:
    m, _, _, _ = drain_member(lay, [drained(lay)], assigned=False)
    assert m.may_stop(100.0)
    assert m.failure is not None and m.failure.startswith(
        f"stopped by --idle-timeout without ever getting a partition of logs or {lay.tp.topic}")


def test_a_per_partition_member_stops_on_its_own_idle_timeout(tmp_path: Path) -> None:
    """A per-partition shard reads its source partition directly: there is no internal topic to
    drain, so a quiet member stops after ``--idle-timeout`` (its final checkpoint commits its own
    partitions); before its first assignment it waits 30 s more (a group join is not idleness)."""
    lay = Layout("partition", tmp_path)
    waiting = lay.member(Group(), join=False, idle_timeout=5.0)
    t0 = time.monotonic()
    assert not waiting.stage.idle(t0 + 6.0) and waiting.stage.idle(t0 + 36.0)
    quiet = lay.member(Group(), idle_timeout=5.0)
    t0 = time.monotonic()
    assert not quiet.stage.idle(t0 + 4.0) and quiet.stage.idle(t0 + 6.0)


# ------------------------------------------------------------------ every wait is bounded
def test_a_drain_question_the_broker_never_answers_gives_up_saying_where_it_waits(
        lay: Layout) -> None:
    m, _, _, progress = drain_member(lay, [drained(lay)], asynchronous=True)
    progress.hold.clear()  # the broker never answers
    try:
        assert not m.may_stop(100.0)  # asked (on its own thread): no answer yet
        assert not m.may_stop(110.0)
        assert not m.may_stop(121.0)  # not yet --drain-timeout without an answer
        assert m.may_stop(122.5)  # stops (final checkpoint first), then fails
        assert m.failure is not None and "\n" not in m.failure
        assert m.failure.startswith(
            "stopped by --idle-timeout without knowing whether the group has drained: the broker "
            "has not answered the drain check for 22 s (it waits in wait (")
        assert "called from _ask_broker (panstream/sources/kafka/member.py:" in m.failure
    finally:
        progress.hold.set()
        assert m.asking is not None
        m.asking.join(timeout=10)


def test_answers_that_all_predate_a_rebalance_give_up_instead_of_waiting_forever(
        lay: Layout) -> None:
    """Each question meets a rebalance (it bumps the member's last activity after the question
    started), so no answer is usable, not even a 'drained' one: before the fix, such a member
    asked forever and said nothing."""
    routers: list[Any] = []

    def rebalance() -> None:
        routers[0].last_activity = time.monotonic() + 1.0
        routers[0].assignments += 1

    m, router, _, _ = drain_member(lay, [drained(lay)], on_ask=rebalance, asynchronous=True)
    routers.append(router)
    for now in (100.0, 101.0, 110.0, 121.0):
        assert not _ask_and_wait(m, now)
    assert _ask_and_wait(m, 122.5)
    assert m.failure is not None
    assert m.failure.startswith(
        "stopped by --idle-timeout without knowing whether the group has drained: for 22 s every "
        "answer of the broker predated this member's last activity (4 dropped; 4 rebalances "
        "meanwhile); nothing of this member is lost")


def test_a_usable_answer_ends_the_wait_for_one(lay: Layout) -> None:
    m, _, _, _ = drain_member(lay, [drained(lay)], asynchronous=True)
    assert not _ask_and_wait(m, 100.0)  # asked: no answer yet
    assert _ask_and_wait(m, 130.0)  # then drained: exit 0, however long the first took
    assert m.failure is None


def test_a_group_that_rebalances_too_often_to_be_quiet_says_so(lay: Layout) -> None:
    """No records and no usable answer for idle_timeout + --drain-timeout, and not quiet now:
    every rebalance counts as activity, so the member never even asked. Before, it said nothing;
    now it says so once (a notice, not a failure: one long restore after one rebalance looks the
    same for a while)."""
    m, router, task, _ = drain_member(lay, [drained(lay)])
    m.no_records_since(0.0, rebalances_seen=True)
    router.last_activity = 26.0  # the latest rebalance, a second ago: not quiet
    m.restless(27.1)
    assert task.said == []  # no rebalance seen since the last records: nothing to say
    task.stage.summary.rebalances += 40  # the slice group rebalanced 40 times since
    m.restless(26.9)  # 5 s idle + 22 s not yet
    assert task.said == []
    m.restless(27.1)
    m.restless(40.0)
    assert task.said == [
        "no records for 27 s, but not quiet: its groups rebalanced 40 times meanwhile (a "
        "rebalance counts as activity, so this member has not asked whether the group has "
        "drained); a bounded run stops only once the group has drained"]
    assert m.failure is None


def test_a_member_waiting_on_others_that_progress_is_not_restless(lay: Layout) -> None:
    """Usable answers that show the others progressing keep a record-less member waiting."""
    moving = [Pending({}, {8: n}, lay.tp.topic) for n in range(400, 0, -1)]
    m, _, task, _ = drain_member(lay, moving)
    m.no_records_since(0.0)
    for t in range(100, 300, 2):
        assert not m.may_stop(float(t))
        m.restless(float(t))
    assert task.said == [
        f"idle, but the group has not drained: 398 routed records unapplied in {lay.tp.topic} "
        "(slices 8); waiting for it (a rebalance may hand this member their partitions; giving "
        "up after 22 s without progress)"]


def test_a_routing_consumer_that_does_not_leave_its_group_is_left_behind_with_a_notice(
        lay: Layout) -> None:
    m, router, task, _ = drain_member(lay, [drained(lay)])
    m.close_seconds = 0.3
    router.closing.clear()  # close() hangs (a consumer that never leaves its group)
    thread: threading.Thread | None = None
    try:
        thread = m.stop_routing()  # before the fix: router.join() without a bound, forever
        assert m.route_error is None and m.router_left  # its final commit was made
        assert len(task.said) == 1
        assert task.said[0].startswith(
            "the routing consumer has not left group g 0.3 s after its last commit (its thread "
            "waits in wait (")
        assert "called from _route_loop (panstream/sources/kafka/member.py:" in task.said[0]
    finally:
        router.closing.set()
        if thread is not None:
            thread.join(timeout=10)


def test_a_routing_stage_that_cannot_make_its_final_commit_fails_the_run(lay: Layout) -> None:
    m, router, _, _ = drain_member(lay, [drained(lay)])
    m.give_up_seconds = 0.3
    router.finishing.clear()  # the final commit hangs
    thread: threading.Thread | None = None
    try:
        thread = m.stop_routing()
        assert isinstance(m.route_error, SourceError)
        assert str(m.route_error).startswith(
            "the routing stage did not make its final commit within 0.3 s (its thread waits in ")
        assert str(m.route_error).endswith("nothing is lost: the routed records are durable and "
                                            "a restart routes those messages again")
    finally:
        router.finishing.set()
        if thread is not None:
            thread.join(timeout=10)


def test_a_slice_consumer_that_does_not_leave_its_group_does_not_hold_the_exit(
        lay: Layout) -> None:
    m, _, task, _ = drain_member(lay, [drained(lay)])
    m.close_seconds = 0.3
    task.consumer.leaving.clear()  # the slice stage's consumer never leaves its group
    try:
        m.close_slices()  # returns, with its notice, though close() still hangs
        assert task.said and task.said[0].startswith(
            "the slice consumer has not left its group 0.3 s after its final checkpoint")
    finally:
        task.consumer.leaving.set()


# ------------------------------------------------------------------ retention (no task kind)
def test_the_internal_topic_keeps_records_as_long_as_the_sources() -> None:
    week, day = 7 * 24 * 60 * MINUTE, 24 * 60 * MINUTE
    assert internal_retention({"a": day, "b": week}, None).ms == week
    assert internal_retention({"a": day, "b": -1}, None).ms == -1  # one source keeps forever
    assert internal_retention({"a": day}, 10 * MINUTE).ms == day  # the old 10 minutes: raised
    assert internal_retention({"a": day}, 2 * day).ms == 2 * day  # longer is allowed
    unknown = internal_retention({"a": None}, None)
    assert unknown.ms is None and "broker's default" in unknown.why  # as a source without one
    cfg = internal_retention({"a": week}, None).configs()
    # Kafka deletes closed segments only: they roll at least hourly and at 64 MiB
    assert cfg == {"cleanup.policy": "delete", "retention.ms": str(week), "segment.ms": "3600000",
                   "segment.bytes": str(SEGMENT_BYTES)}
    short = internal_retention({"a": 20 * MINUTE}, None).configs()
    assert short["segment.ms"] == str(20 * MINUTE)  # a record outlives 20 min by <= 20 min


class _Admin:
    """A broker's admin API as far as ensure_internal_topic uses it."""

    def __init__(self, topics: dict[str, dict[str, str]]) -> None:
        self.topics = topics
        self.created: list[Any] = []
        self.altered: list[Any] = []

    def describe_configs(self, resources: list[Any], config_filter: str = "all") -> Any:
        return {"topic": {r.name: {k: {"value": v} for k, v in self.topics[r.name].items()}
                          for r in resources}}

    def list_topics(self) -> list[str]:
        return list(self.topics)

    def create_topics(self, new: list[Any]) -> None:
        self.created += new
        for t in new:
            self.topics[t.name] = dict(t.topic_configs)

    def alter_configs(self, resources: list[Any]) -> None:
        self.altered += resources
        for r in resources:
            self.topics[r.name].update(r.configs)

    def close(self) -> None:
        pass


class _Probe:
    def partitions_for_topic(self, topic: str) -> set[int]:
        return set(range(4))


def test_a_twenty_minute_outage_loses_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A source keeping 1 day, the old 10-minute internal topic: panstream lengthens it to 1 day;
    a new internal topic is created with 1 day. Then a whole-group outage of 20 minutes (a clock
    moved 20 minutes on) leaves every routed record within retention: none expired unapplied."""
    from panstream.sources.kafka import route

    day = 24 * 60 * MINUTE
    lay = SliceLayout(Universe.parse("range:1024"), 4)
    admin = _Admin({"logs": {"retention.ms": str(day)}, "old-cells": {"retention.ms": "600000"}})
    monkeypatch.setattr(route, "KafkaAdminClient", lambda **_: admin)
    said: list[str] = []
    got = ensure_internal_topic({}, "old-cells", lay, None, _Probe(), sources=["logs"],
                                notice=said.append)
    assert got.ms == day and admin.topics["old-cells"]["retention.ms"] == str(day)
    assert said and said[0].startswith("old-cells: retention.ms 600000 was shorter than the "
                                       "longest source retention (logs: 86400000 ms)")
    assert admin.topics["old-cells"]["segment.ms"] == "3600000"  # its segments now roll
    ensure_internal_topic({}, "new-cells", lay, None, _Probe(), sources=["logs"])
    assert admin.topics["new-cells"]["retention.ms"] == str(day)
    # a topic kept long enough but rolling weekly (the broker's default) gets its segments set
    admin.topics["weekly-cells"] = {"retention.ms": str(day), "segment.ms": str(7 * day)}
    ensure_internal_topic({}, "weekly-cells", lay, None, _Probe(), sources=["logs"])
    assert admin.topics["weekly-cells"]["segment.ms"] == "3600000"
    # the outage: records routed at t0, the group down 20 minutes, back at t0 + 20 min
    for name in ("old-cells", "new-cells"):
        kept = int(admin.topics[name]["retention.ms"])
        assert kept > 20 * MINUTE  # a record routed at t0 is still there when the group returns


# ------------------------------------------------------------------ a release of slices
def _slice_store(tmp_path: Path, present: list[int]) -> Path:
    lay = SliceLayout(Universe.parse("ipv4:10.0.0.0/16"), 4)
    d = tmp_path / "s"
    store = DirectoryStore(d)
    ensure_ledger(store, 1.0)
    for r in present:
        store.save(f"g-cells/{r}", encode_slice(DensityEstimator(lay.slice_universe(r)), lay, r))
    return d


def test_a_directory_release_of_a_store_missing_a_slice_is_refused(tmp_path: Path) -> None:
    d = _slice_store(tmp_path, [0, 1, 3])
    res = CliRunner().invoke(cli, ["release", "--state-dir", str(d), "--epsilon", "0.5"])
    assert res.exit_code == 1
    lines = res.stderr.strip().splitlines()
    assert lines == ["panstream: error: slices 2 of 4 have no snapshot, and without -b the "
                     "release cannot tell whether g-cells holds records routed to them: give -b "
                     "HOST:PORT (fresh draws are laid only for slices that never received a "
                     "record), or run the group until every slice is saved"]
    ins = CliRunner().invoke(cli, ["inspect", "--state-dir", str(d), "--json"])
    assert json.loads(ins.stdout)["budget_spent"] == 0  # refused before anything was spent


def test_a_directory_release_says_it_could_not_check_the_internal_topic(tmp_path: Path) -> None:
    d = _slice_store(tmp_path, [0, 1, 2, 3])
    res = CliRunner().invoke(cli, ["release", "--state-dir", str(d), "--epsilon", "0.5", "--json"])
    assert res.exit_code == 0, res.output
    assert ("panstream: note: g-cells was not checked for routed records not yet applied to a "
            "slice (give -b HOST:PORT to check)") in res.stderr
    assert json.loads(res.stdout)["internal_topic"] == {"name": "g-cells", "slices": 4,
                                                        "missing": [], "checked": False}
    ins = CliRunner().invoke(cli, ["inspect", "--state-dir", str(d)])
    assert "internal topic   g-cells: not checked (give -b HOST:PORT" in ins.output


def test_a_missing_slice_is_laid_fresh_only_if_it_never_received_a_record() -> None:
    base = {"name": "g-cells", "slices": 4, "missing": [2], "checked": True, "drained": True,
            "pending_line": "nothing pending"}
    require_releasable({**base, "never_routed": [2]})  # truly never received anything
    with pytest.raises(StateError, match="slices 2 have no snapshot, but g-cells has held "
                                         "records routed to them"):
        require_releasable({**base, "never_routed": []})


# ------------------------------------------------------------------ records that expired unapplied
class _Consumer:
    """Committed offsets and log starts of the internal partitions, as a broker reports them."""

    def __init__(self, committed: dict[int, int | None], start: dict[int, int]) -> None:
        self._committed, self._start = committed, start

    def beginning_offsets(self, tps: list[Any]) -> dict[Any, int]:
        return {tp: self._start[tp.partition] for tp in tps}

    def committed(self, tp: Any) -> int | None:
        return self._committed[tp.partition]


def test_records_that_expired_before_a_slice_applied_them_are_said_loudly() -> None:
    """DeleteRecords never passes a committed offset; only a retention shorter than the group's
    outage (or a hand-made deletion) moves the log start past it. Those arrivals are lost: the
    member that takes the slice says so in one line, and a release -b says the same."""
    from kafka import TopicPartition

    from panstream.sources.kafka.slices import expired, expired_warning

    tps = [TopicPartition("g-cells", r) for r in range(3)]
    broker = _Consumer({0: 40, 1: 10, 2: None}, {0: 40, 1: 25, 2: 7})  # 2: never committed
    assert expired(broker, tps) == {1: 15}
    assert expired_warning("g-cells", {1: 15}).startswith(
        "warning: 15 routed records of slices 1 expired from g-cells before a slice applied them")
    line = Pending({}, {1: 3}, "g-cells", expired={1: 15}).describe()
    assert line == ("3 routed records unapplied in g-cells (slices 1); 15 routed records of "
                    "slices 1 expired from g-cells unapplied (lost)")
    assert not Pending(internal_topic="g-cells", expired={1: 15})  # lost, not pending: drained
