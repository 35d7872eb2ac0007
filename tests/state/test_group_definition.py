"""A Kafka group's definition (issue 35): written once, first writer wins, compared field by field.

The definition is what every member of a group must agree on. These tests walk through it without
a broker: its encoding round-trips and is canonical, two members' definitions differ in exactly the
fields their options differ in (most telling first), a source topic re-created under its name is
another topic, and both stores keep the *first* definition written, also when members race.
"""

from __future__ import annotations

import multiprocessing
from dataclasses import replace
from pathlib import Path

import pytest
from fakes import MemoryLog

from panstream.errors import ConfigurationError, StateError
from panstream.sources.kafka.identity import RecordGate, decoded, settle, stamp_of
from panstream.state.group_definition import GroupDefinition, SourceTopic, Window
from panstream.state.stores import DEFINITION_FILE, DirectoryStore, TopicStore

ROUTED = GroupDefinition(group="g", layout="routed", universe="ipv4:10.9.0.0/16",
                         family="density", epsilon=8.0, calibration="tight", slices=16,
                         internal_topic="g-cells", sources=(SourceTopic("logs", 8, "id-1"),))


def test_the_encoding_is_canonical_and_round_trips() -> None:
    assert GroupDefinition.decode(ROUTED.encode()) == ROUTED
    shuffled = replace(ROUTED, sources=(SourceTopic("z", 1), SourceTopic("a", 2)))
    again = replace(ROUTED, sources=(SourceTopic("a", 2), SourceTopic("z", 1)))
    assert shuffled.encode() == again.encode() and shuffled.digest == again.digest
    assert ROUTED.digest != replace(ROUTED, epsilon=2.0).digest


@pytest.mark.parametrize(("change", "field"), [
    ({"universe": "hashed-ip:65536"}, "universe"),
    ({"universe": "ipv4:10.0.0.0/15"}, "universe"),
    ({"family": "sketch", "universe": "sketch:4096x24:ip", "calibration": "rr"}, "universe"),
    ({"layout": "windows", "internal_topic": "g-wcells", "window": Window(3600, 300, 0.5)},
     "layout"),
    ({"epsilon": 2.0}, "epsilon"),
    ({"calibration": "rr"}, "calibration"),
    ({"group": "other"}, "group"),
    ({"slices": 4}, "slices"),
])
def test_a_member_that_differs_is_named_by_its_first_difference(change: dict, field: str) -> None:
    mine = replace(ROUTED, **change)
    diffs = ROUTED.differences(mine)
    assert diffs and diffs[0].field == field
    line = diffs[0].line("/state/group-definition.json")
    assert "\n" not in line and "nothing was routed, committed or produced" in line


def test_a_source_topic_may_grow_but_a_recreated_one_is_another_topic() -> None:
    grown = replace(ROUTED, sources=(SourceTopic("logs", 12, "id-1"),))
    assert ROUTED.differences(grown) == []
    recreated = replace(ROUTED, sources=(SourceTopic("logs", 8, "id-2"),))
    (d,) = ROUTED.differences(recreated)
    assert d.field == "topic_id:logs" and "re-created" in d.line("x")
    shrunk = replace(ROUTED, sources=(SourceTopic("logs", 4, None),))  # a broker without IDs
    assert [d.field for d in ROUTED.differences(shrunk)] == ["partitions:logs"]


def test_a_recreated_source_topic_is_said_not_refused_at_start(tmp_path: Path) -> None:
    """The definition keeps the first topic ID; a member that finds another one says so and goes
    on: what the group's offsets then mean is the topology checks' to decide (they stop the
    group if its commits lie beyond the new topic's ends)."""
    store = DirectoryStore(tmp_path)
    settle(store, ROUTED)
    said: list[str] = []
    recreated = replace(ROUTED, sources=(SourceTopic("logs", 8, "id-2"),))
    assert settle(store, recreated, said.append) == ROUTED  # the stored identity stays
    (line,) = said
    assert line.startswith("warning: source topic logs's topic ID (id-2) differs") and \
        "re-created" in line


def test_a_newer_definition_is_refused_with_the_way_out() -> None:
    raw = ROUTED.encode().replace(b'"version":1', b'"version":9')
    with pytest.raises(StateError, match="upgrade panstream"):
        GroupDefinition.decode(raw)
    with pytest.raises(StateError, match="corrupt"):
        GroupDefinition.decode(b"{}")


def _put(directory: str, epsilon: float) -> bytes:
    return DirectoryStore(directory).put_definition(replace(ROUTED, epsilon=epsilon).encode())


def test_members_racing_on_a_directory_agree_on_the_first_definition(tmp_path: Path) -> None:
    """Eight processes write eight definitions at once: every one reads back the same file."""
    with multiprocessing.get_context("fork").Pool(8) as pool:
        got = pool.starmap(_put, [(str(tmp_path), float(e)) for e in range(1, 9)])
    assert len(set(got)) == 1
    assert (tmp_path / DEFINITION_FILE).read_bytes() == got[0]
    assert [p.name for p in tmp_path.iterdir()] == [DEFINITION_FILE]  # no temporary left
    assert oct((tmp_path / DEFINITION_FILE).stat().st_mode & 0o777) == "0o600"


def test_a_state_topic_keeps_the_first_definition_in_log_order() -> None:
    log = MemoryLog()
    first, second = TopicStore(log), TopicStore(log)
    assert first.definition() is None
    a = first.put_definition(ROUTED.encode())
    b = second.put_definition(replace(ROUTED, epsilon=2.0).encode())
    assert a == b == ROUTED.encode()
    log.append(b"#group/late", replace(ROUTED, epsilon=3.0).encode())  # a racer's late record
    log.compact()  # unique keys: compaction keeps every definition record, in order
    assert TopicStore(log).definition() == ROUTED.encode()
    assert TopicStore(log).keys() == []  # no definition record is taken for a shard


def test_settle_writes_once_then_refuses_a_member_that_differs(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    said: list[str] = []
    assert settle(store, ROUTED, said.append) == ROUTED
    assert len(said) == 1 and ROUTED.digest in said[0]
    assert settle(store, ROUTED, said.append) == ROUTED and len(said) == 1  # read, not rewritten
    with pytest.raises(ConfigurationError, match=r"--epsilon \(2\) differs .* \(8\)"):
        settle(store, replace(ROUTED, epsilon=2.0))
    with pytest.raises(ConfigurationError, match="one state directory or state topic holds one"):
        settle(store, replace(ROUTED, group="other", internal_topic="other-cells"))


class _Rec:
    def __init__(self, value: bytes, headers: list[tuple[str, bytes]] | None) -> None:
        self.value, self.headers = value, headers


def test_the_gate_admits_its_own_and_unstamped_records_and_skips_others_once() -> None:
    said: list[str] = []
    gate = RecordGate(ROUTED.digest, "g-cells", said.append)
    own = _Rec(b"\x01\x00", gate.headers())
    old = _Rec(b"\x01\x00", None)  # a panstream before issue 35
    foreign = _Rec(b"\x01\x00", [("panstream-group", b"0123456789abcdef")])
    assert stamp_of(own) == ROUTED.digest.encode()
    assert gate.admits(own, 0) and gate.admits(old, 0)
    assert not gate.admits(foreign, 3) and not gate.admits(foreign, 4)
    assert len(said) == 1 and "0123456789abcdef" in said[0] and "slice 3" in said[0]

    def bad() -> None:
        raise StateError("not a routed part")

    assert decoded(gate, 5, bad) is None and len(said) == 2  # skipped, said once
    with pytest.raises(StateError):
        decoded(None, 5, bad)  # without a definition: as before


def test_a_store_written_before_definitions_is_adopted_only_by_matching_options(
        tmp_path: Path) -> None:
    """Slices (or shards) without a definition: their public parameters must match the first
    member's options, which then become the definition."""
    from panstream import estimators
    from panstream.release.ledger import ShardLedger
    from panstream.state.slices import SliceLayout, encode_slice
    from panstream.state.stores import encode_shard
    from panstream.universe import Universe

    lay = SliceLayout(Universe.parse("range:64"), 4)
    store = DirectoryStore(tmp_path / "slices")
    for r in range(4):
        est = estimators.new("density", lay.slice_universe(r), 1.0, calibration="rr",
                             ledger=ShardLedger())
        store.save(f"g-cells/{r}", encode_slice(est, lay, r))
    mine = replace(ROUTED, universe="range:64", slices=4, epsilon=1.0, calibration="rr")
    for wrong, word in ((replace(mine, epsilon=2.0), "--epsilon"),
                        (replace(mine, slices=8), "--slices"),
                        (replace(mine, universe="range:65"), "universe"),
                        (replace(mine, layout="partition", slices=None, internal_topic=None),
                         "layout")):
        with pytest.raises(ConfigurationError, match=f"{word}.*snapshots of"):
            settle(store, wrong)
        assert store.definition() is None
    assert settle(store, mine) == mine and store.definition() == mine.encode()

    shards = DirectoryStore(tmp_path / "shards")
    shards.save("other/0", encode_shard(estimators.new("density", Universe.parse("range:64"),
                                                       1.0, calibration="rr")))
    part = replace(mine, layout="partition", slices=None, internal_topic=None)
    with pytest.raises(ConfigurationError, match=r"source topics \(-t\) \(logs\).*\(other\)"):
        settle(shards, part)


def test_the_partition_layout_records_its_keying_check() -> None:
    """Issue 39's --partitioner is part of a per-partition group: a member checking the keying
    against another partitioner is refused."""
    part = replace(ROUTED, layout="partition", slices=None, internal_topic=None,
                   partitioner="murmur2")
    assert GroupDefinition.decode(part.encode()) == part
    (d,) = part.differences(replace(part, partitioner="crc32"))
    assert d.field == "partitioner" and "--partitioner (crc32) differs" in d.line("x")
