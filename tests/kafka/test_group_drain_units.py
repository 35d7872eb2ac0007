"""When a routed member may stop, how long the internal topic keeps records, and what a release of
slices refuses: the decisions behind the law of one table, without a broker.

* A quiet member stops with exit 0 only when its *group* has drained (the broker says nothing is
  pending); otherwise it waits, says once what it waits for, and gives up with one line (exit 1)
  only after :attr:`Member.give_up_seconds` without progress. A member that never got a partition
  does not exit 0 either.
* The internal topic keeps records at least as long as the longest-lived source topic, and its
  segments roll so that the retention applies: a 20-minute outage of the whole group (or any outage
  shorter than the sources' retention) loses no routed record.
* A release of a store missing a slice is refused unless the broker shows the slice never received
  a record; a directory-only release says that it could not check.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from panstream.cli.main import cli
from panstream.cli.routed_check import require_releasable
from panstream.errors import StateError
from panstream.estimators.density import DensityEstimator
from panstream.sources.kafka.member import Member
from panstream.sources.kafka.progress import Pending
from panstream.sources.kafka.route import (
    SEGMENT_BYTES,
    ensure_internal_topic,
    internal_retention,
)
from panstream.state.slices import SliceLayout, encode_slice
from panstream.state.stores import DirectoryStore, ensure_ledger
from panstream.universe import Universe

MINUTE = 60_000


# ------------------------------------------------------------------ the idle decision
@dataclass
class _Cfg:
    consumer: dict[str, Any] = field(default_factory=lambda: {"group_id": "g",
                                                              "session_timeout_ms": 6000})
    topics: list[str] = field(default_factory=lambda: ["logs"])
    internal_topic: str = "g-cells"
    idle_timeout: float | None = 5.0
    checkpoint_interval: float = 1.0
    poll_timeout_ms: int = 200


class _Stage:
    def __init__(self) -> None:
        self.config = _Cfg()
        self.notices: list[str] = []
        self.notice = self.notices.append
        self.summary = type("S", (), {"stopped_by": ""})()
        self.metrics = None
        self._ever_assigned = True
        self.assignments = 1
        self.count: Any = None


class _Progress:
    def __init__(self, answers: list[Pending]) -> None:
        self.answers = answers

    def pending(self) -> Pending:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def close(self) -> None:
        pass


def _member(answers: list[Pending]) -> tuple[Member, _Stage]:
    stage = _Stage()
    m = Member(stage, stage, {}, progress=_Progress(answers),  # type: ignore[arg-type]
               drain_timeout=22)
    return m, stage


ORPHANS = Pending({}, {8: 40, 9: 2}, "g-cells")


def test_a_quiet_member_stops_only_when_the_group_has_drained() -> None:
    m, stage = _member([Pending(internal_topic="g-cells")])
    assert m._may_stop(100.0) and m._failure is None  # drained: exit 0


def test_a_quiet_member_waits_for_orphaned_slices_then_gives_up_with_one_line() -> None:
    m, stage = _member([ORPHANS])
    assert m.give_up_seconds == 22  # --drain-timeout 22
    assert not m._may_stop(100.0)
    assert stage.notices == []  # what the next checkpoint would settle is not worth a line
    assert not m._may_stop(110.0)
    assert stage.notices == ["idle, but the group has not drained: 42 routed records unapplied in "
                             "g-cells (slices 8-9); waiting for it (a rebalance may hand this "
                             "member their partitions; giving up after 22 s without progress)"]
    assert not m._may_stop(121.0)  # no progress, not yet 22 s
    assert len(stage.notices) == 1  # said once
    assert m._may_stop(122.5)  # stops (final checkpoint), then fails
    assert m._failure is not None and "\n" not in m._failure
    assert m._failure.startswith("stopped by --idle-timeout with work pending for the group: 42 "
                                 "routed records unapplied in g-cells (slices 8-9); nothing is "
                                 "lost")


def test_a_group_whose_topics_changed_is_not_drained_and_stops_at_once() -> None:
    """Issue 35: commits above a re-created source topic's ends once read as "drained" (nothing
    past the commits). A change is no pending work to wait for: the member stops at once, and the
    line says what changed and promises nothing."""
    changed = Pending({}, {}, "g-cells", changed=(
        "logs ends below the offsets the group committed (partition 0: end 7, committed 8): it "
        "was deleted and re-created, or emptied",))
    assert changed and not changed.to_dict()["drained"]
    m, _ = _member([changed])
    assert m._may_stop(100.0)
    assert m._failure is not None and "\n" not in m._failure
    assert m._failure.startswith("the group's topics changed under it: logs ends below the offsets")
    assert "nothing is lost" not in m._failure


def test_a_give_up_line_promises_nothing_of_records_that_expired() -> None:
    lost = Pending({}, {8: 40}, "g-cells", expired={8: 5})
    m, _ = _member([lost])
    assert not m._may_stop(100.0) and m._may_stop(123.0)
    assert m._failure is not None and "nothing is lost" not in m._failure
    assert "expired from g-cells unapplied (lost)" in m._failure


def test_progress_restarts_the_wait() -> None:
    moving = [ORPHANS, ORPHANS, Pending({}, {8: 10}, "g-cells"), Pending({}, {8: 10}, "g-cells")]
    m, _ = _member(moving)
    assert not m._may_stop(100.0) and not m._may_stop(120.0)
    assert not m._may_stop(121.0)  # the slices moved: 22 s more from here
    assert not m._may_stop(142.0) and m._may_stop(143.5)


def test_the_default_wait_outlasts_a_dead_members_session() -> None:
    """Tansu moves a kill -9'd member's partitions about a minute after its death with
    kafka-python's default 10 s session: the default wait is 2 minutes, or two sessions + 10 s."""
    from panstream.sources.kafka.member import default_drain_timeout

    stage = _Stage()
    assert Member(stage, stage, {}, progress=_Progress([ORPHANS])).give_up_seconds == 120  # type: ignore[arg-type]
    assert default_drain_timeout({"session_timeout_ms": 90_000}) == 190


def test_a_member_that_never_got_a_partition_does_not_exit_0() -> None:
    m, stage = _member([Pending(internal_topic="g-cells")])
    stage._ever_assigned, stage.assignments = False, 0
    assert m._may_stop(100.0)
    assert m._failure is not None and m._failure.startswith(
        "stopped by --idle-timeout without ever getting a partition of logs or g-cells")


# ------------------------------------------------------------------ retention
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
