"""The commit order and the replay guarantee, without a broker.

Walks through :class:`panstream.checkpoint.Checkpointer`: snapshots become durable before any offset
is committed, a failed save commits nothing, and a crash between the two steps replays messages whose
arrivals are already in the snapshot, which leaves the table's law unchanged.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from panstream.errors import CommitDeferredError, SourceError, StateError
from panstream.estimators.density import DensityEstimator
from panstream.state import format as fmt
from panstream.state.checkpoint import Checkpointer, Shard, restore_shard
from panstream.state.stores import DirectoryStore, decode_shard

U = "range:65536"

# z for a two-sided normal tail of 1e-7 (each statistical check below fails with p < 1e-6).
Z = 5.33


class Memory:
    """An in-memory ShardStore that records the order of events."""

    def __init__(self, events: list[str], fail: bool = False) -> None:
        self.data: dict[str, bytes] = {}
        self.events = events
        self.fail = fail

    def save(self, key: str, data: bytes) -> None:
        if self.fail:
            raise StateError("disk full")
        self.data[key] = bytes(data)
        self.events.append(f"save {key}")

    def load(self, key: str) -> bytes | None:
        return self.data.get(key)

    def keys(self) -> list[str]:
        return sorted(self.data)


def test_snapshots_are_durable_before_offsets_are_committed() -> None:
    events: list[str] = []
    store = Memory(events)
    cp = Checkpointer(store, lambda offs: events.append(f"commit {sorted(offs.items())}"))
    a = Shard("t/0", 0, DensityEstimator(U))
    b = Shard("t/1", 1, DensityEstimator(U))
    a.estimator.update_indices(np.arange(10))
    a.applied(last_offset=9)
    b.applied(last_offset=4)
    res = cp.checkpoint([a, b])
    assert events == ["save t/0", "save t/1", "commit [(0, 10), (1, 5)]"]  # last processed + 1
    assert res.committed == {0: 10, 1: 5}


def test_every_checkpoint_writes_every_shard_whatever_arrived() -> None:
    """What is written, and when, must not say who arrived. The attack: an intruder who watches
    the state directory (mtimes, inodes) or the state topic (record timestamps) learns whether a
    partition received anything in an interval if only changed shards are rewritten. Every
    checkpoint therefore writes every shard and commits the same offsets again."""
    events: list[str] = []
    store = Memory(events)
    cp = Checkpointer(store, lambda offs: events.append(f"commit {sorted(offs.items())}"))
    busy, quiet, silent = (Shard(f"t/{i}", i, DensityEstimator(U)) for i in range(3))
    busy.applied(last_offset=9)
    quiet.applied(last_offset=4)
    cp.checkpoint([busy, quiet, silent])
    busy.estimator.update_indices(np.arange(100))  # only one partition gets traffic
    busy.applied(last_offset=109)
    cp.checkpoint([busy, quiet, silent])
    cp.checkpoint([busy, quiet, silent])  # nothing at all arrived
    shape = ["save t/0", "save t/1", "save t/2", "commit"]
    assert [e.split(" [")[0] for e in events] == shape * 3
    assert {len(store.data[k]) for k in store.data} == {len(store.data["t/0"])}  # equal sizes


def test_checkpoints_of_the_directory_store_rewrite_every_file(tmp_path) -> None:
    """The same with real files: each shard file gets a new inode at every checkpoint."""
    store = DirectoryStore(tmp_path)
    cp = Checkpointer(store, lambda offs: None)
    shards = [Shard(f"t/{i}", i, DensityEstimator(U)) for i in range(2)]
    cp.checkpoint(shards)
    before = {p.name: p.stat().st_ino for p in tmp_path.iterdir()}
    shards[0].estimator.update_indices(np.arange(5))  # traffic on partition 0 only
    shards[0].applied(last_offset=4)
    cp.checkpoint(shards)
    after = {p.name: p.stat().st_ino for p in tmp_path.iterdir()}
    assert set(before) == set(after) == {"t@0.shard", "t@1.shard"}
    assert all(before[k] != after[k] for k in before)  # both replaced, not only the busy one


def test_a_failed_save_commits_nothing() -> None:
    events: list[str] = []
    cp = Checkpointer(Memory(events, fail=True), lambda offs: events.append("commit"))
    s = Shard("t/0", 0, DensityEstimator(U))
    s.applied(last_offset=99)
    with pytest.raises(StateError):
        cp.checkpoint([s])
    assert events == []


def test_a_commit_the_committer_defers_leaves_the_offsets_for_the_next_checkpoint() -> None:
    """A committer may say that its commit met a rebalance (CommitDeferredError): the snapshots
    are durable, so the checkpoint counts (its time is recorded), nothing counts as committed, and
    the next checkpoint commits the same offsets, since a shard keeps its next offset in memory.
    Any other commit error still propagates (below)."""
    events: list[str] = []
    ticks = iter(range(100))
    refuse = [True]

    def commit(offs: dict) -> None:
        if refuse[0]:
            raise CommitDeferredError("the group is rebalancing")
        events.append(f"commit {sorted(offs.items())}")

    cp = Checkpointer(Memory(events), commit, clock=lambda: float(next(ticks)))
    s = Shard("t/0", 0, DensityEstimator(U))
    s.applied(last_offset=9)
    res = cp.checkpoint([s])
    assert events == ["save t/0"] and res.committed == {} and res.deferred == {0: 10}
    assert res.why == "the group is rebalancing" and cp.checkpoints == 1
    refuse[0] = False
    res = cp.checkpoint([s])
    assert events == ["save t/0", "save t/0", "commit [(0, 10)]"] and res.deferred == {}

    def broken(offs: dict) -> None:
        raise SourceError("offset commit failed: the broker is gone")

    with pytest.raises(SourceError, match="broker is gone"):
        Checkpointer(Memory([]), broken).checkpoint([s])


def test_snapshot_holds_no_offset(tmp_path) -> None:
    """The stored shard is the estimator's snapshot and nothing else (no offset, no count), and no
    ledger either: a shard's budget lives in the group's one ledger."""
    store = DirectoryStore(tmp_path)
    est = DensityEstimator(U)
    s = Shard("t/3", 3, est)
    s.applied(last_offset=123_456)
    Checkpointer(store, lambda offs: None).checkpoint([s])
    assert store.keys() == ["t/3"]
    assert store.load("t/3") == est.snapshot_buffer(as_shard=True)
    assert fmt.decode(bytes(store.load("t/3"))).ledger is None


def test_restore_checks_parameters(tmp_path) -> None:
    store = DirectoryStore(tmp_path)
    store.save("t/0", DensityEstimator(U, epsilon=1.0).snapshot())
    with pytest.raises(StateError, match="epsilon"):
        restore_shard(store, "t/0", 0, lambda: DensityEstimator(U, epsilon=2.0),
                      lambda d: decode_shard(d, U, 2.0, "rr"))
    fresh = restore_shard(store, "t/9", 9, lambda: DensityEstimator(U), lambda d: None)  # type: ignore
    assert fresh.key == "t/9" and fresh.next_offset is None


def test_crash_between_save_and_commit_replays_harmlessly() -> None:
    """Crash after the snapshot is durable but before the commit: the restart restores the snapshot
    and replays messages already in it. Replayed cells hold one fresh D1 draw (law Bernoulli(p)),
    unseen cells keep their D0 bits untouched: the table's law is that of a run without the crash.

    False-failure probability: three two-sided z = 5.33 checks, < 1e-6 in all.
    """
    est = DensityEstimator(U, epsilon=1.0)
    d0 = est.bits()
    stream = np.arange(30_000, dtype=np.intp)             # cells 0..29999 arrive, once each
    events: list[str] = []
    store = Memory(events)

    def crash(offsets: dict) -> None:
        raise RuntimeError("killed between save and commit")

    shard = Shard("t/0", 0, est)
    est.update_indices(stream.copy())
    shard.applied(last_offset=29_999)
    with pytest.raises(RuntimeError):
        Checkpointer(store, crash).checkpoint([shard])     # snapshot durable, commit lost
    committed = 20_000                                     # the previous commit
    restored = restore_shard(store, "t/0", 0, lambda: DensityEstimator(U),
                             lambda d: decode_shard(d, U, 1.0, "rr"))
    restored.estimator.update_indices(stream[committed:].copy())  # the replay
    bits = restored.estimator.bits()

    unseen = np.ones(est.size, dtype=bool)
    unseen[stream] = False
    assert np.array_equal(bits[unseen], d0[unseen])       # no unseen cell was touched
    p = float(est.p)
    for cells in (stream[:committed], stream[committed:]):  # seen once / seen and replayed
        n = cells.size
        ones = int(bits[cells].sum())
        assert abs(ones - n * p) <= Z * math.sqrt(n * p * (1 - p)), (ones, n * p)
    # The estimate is unbiased for the 30,000 distinct cells.
    e = restored.estimator.estimate()
    assert abs(e.distinct - 30_000) <= Z * e.stderr_distinct
