"""A per-partition checkpoint whose commit meets a rebalance: the member goes on, nothing is lost.

The per-partition layout (``--layout partition``, :class:`~panstream.sources.kafka.tail.KafkaTail`)
keeps one shard table per source partition and commits the source offsets only after every
shard is durable under the member's fenced epoch. So when Kafka refuses that commit because the
group rebalances under it (kafka-python's ``RebalanceInProgressError``; librdkafka's adapter
raises ``CommitFailedError`` for ``ILLEGAL_GENERATION``) the member may wait, as the routed slice
stage does (``test_slice_commit_rebalance.py``), instead of stopping with exit 1:

1. the shard stays durable, the offsets stay uncommitted, the member says so in one line;
2. if the member keeps the partition, its next checkpoint commits the offsets: nothing replayed;
3. if the partition moves, its next owner restores the shard and re-reads the source messages
   after the last commit: harmless for the bit table (a fresh D1 draw of a cell already drawn),
   counted twice by the counter family, exactly as after a crash (docs/kafka.md, "Replays after
   a crash"); nothing is lost either way, since the committed offset never passes the durable
   shard (the sketch family has no per-partition layout);
4. a final checkpoint whose commit meets a rebalance exits 0 only if the broker already holds
   the offsets, else stops with one line (exit 1): no exit 0 with work pending;
5. only with a fenced store: without one the member stops as before.

Before this change every one of these stopped the member (``offset commit failed``, exit 1), so
each test below fails without it. Tables are density bit tables at epsilon 30 (a cell reads its
truth except with probability 1/(1 + e^30) < 1e-13; a few hundred cells read a few times: false
failure below 1e-9) or modular counters (no randomness after the initial draw: exact
differences).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _group_fakes import Consumer, Group, Unfenced, assert_counted_once_more, released_ones
from test_partition_fence import A_END, B_END, C_END, KEY, STREAM, TP, A, B, C, U, replay

from panstream.errors import SourceError
from panstream.sources.kafka import Metrics, TailConfig
from panstream.sources.kafka.tail import KafkaTail
from panstream.state.checkpoint import ShardStore
from panstream.state.stores import DirectoryStore


def member(store: ShardStore, group: Group, kind: str = "density") -> KafkaTail:
    """A per-partition member owning ``events/0`` in the group's current generation, its notices
    kept in ``t.said``."""
    t = KafkaTail(TailConfig({}, ["events"], U, 30.0, "rr", store, estimator=kind,
                             partitioner="murmur2"), Metrics())
    t.said = []  # type: ignore[attr-defined]
    t.notice = t.said.append  # type: ignore[attr-defined]
    t.consumer = Consumer(group)
    t._assigned({TP})
    t._restore_pending()
    return t


def ones(t: KafkaTail) -> set[int]:
    return set(np.flatnonzero(t.shards[TP].estimator.bits()).tolist())


def stored_ones(state: Path) -> set[int]:
    """The cells the stored shards read as 1 (what a release, or a restore, of them reads)."""
    return released_ones(DirectoryStore(state))


def test_a_commit_that_meets_a_rebalance_waits_for_the_next_checkpoint(tmp_path: Path) -> None:
    group = Group()
    t = member(DirectoryStore(tmp_path), group)
    t._apply({TP: STREAM[:A_END]})
    t.checkpoint()                                       # A durable, commit 50
    t._apply({TP: STREAM[A_END:B_END]})                  # B
    group.rebalancing = True
    t.checkpoint()                                       # 1. not raised: the member goes on
    assert group.committed[TP] == A_END                  #    nothing committed,
    assert stored_ones(tmp_path) == set(A) | set(B)      #    but B is durable
    assert t._deferred == {TP: B_END}
    (line,) = t.said
    assert "\n" not in line
    assert line.startswith("a commit of events partitions 0 met a rebalance (")
    assert "retried at the next checkpoint" in line
    group.rebalancing = False                            # 2. the member kept its partition
    t._apply({TP: STREAM[B_END:]})                       #    C
    t.checkpoint()                                       #    this commit covers B too
    assert group.committed[TP] == C_END and t._deferred == {}
    assert ones(t) == stored_ones(tmp_path) == set(A) | set(B) | set(C)
    assert len(t.said) == 1                              #    said once, for the one checkpoint


def test_librdkafkas_illegal_generation_is_the_same_case(tmp_path: Path) -> None:
    """librdkafka rebalances on its own thread: its commit meets a generation the member has not
    joined yet (``CommitFailedError`` from the adapter); the member waits as well."""
    group = Group()
    t = member(DirectoryStore(tmp_path), group)
    t._apply({TP: STREAM[:A_END]})
    group.generation += 1                                # a generation this consumer lacks
    t.checkpoint()
    assert TP not in group.committed and t._deferred == {TP: A_END}
    assert stored_ones(tmp_path) == set(A)


@pytest.mark.parametrize("kind", ["density", "frequency"])
def test_a_partition_that_moves_is_reread_by_its_next_owner(tmp_path: Path, kind: str) -> None:
    """3. The partition moves after the deferred commit (the revoke's commit meets the same
    rebalance): N restores the shard (A and B) and re-reads B (after the last commit, 50), then
    C. Every arrival is in N's table; the bit table cannot tell, the counters count B twice."""
    group = Group()
    z = member(DirectoryStore(tmp_path), group, kind)
    z._apply({TP: STREAM[:A_END]})
    z.checkpoint()
    z._apply({TP: STREAM[A_END:B_END]})
    group.rebalancing = True
    z.checkpoint()                                       # B durable, its commit deferred
    held = (z.shards[TP].estimator.counters().astype(np.int64) if kind == "frequency"
            else None)
    revoke = z._release({TP}, save=True)                 # the revoke saves, and would commit
    assert {tp: om.offset for tp, om in revoke.items()} == {TP: B_END}  # the deferred offsets,
    group.rebalancing = False                            # but that commit met the rebalance
    group.rebalance()                                    # too: the offsets stay at 50
    n = member(DirectoryStore(tmp_path), group, kind)
    replay(n, group)                                     # B again, then C
    n.checkpoint()
    assert group.committed[TP] == C_END
    est = n.shards[TP].estimator
    if kind == "density":
        assert ones(n) == set(A) | set(B) | set(C)       # nothing lost, nothing extra
    else:
        # N's counters minus the shard Z held: C counted once (new), B once more (replayed: B is
        # now counted twice in all), every other cell untouched. Nothing lost.
        assert_counted_once_more(est, held, list(B) + list(C))


def test_a_final_commit_that_meets_a_rebalance_never_exits_0_with_work_pending(
        tmp_path: Path) -> None:
    """4. The final checkpoint's commit meets a rebalance while the broker's offsets are behind:
    one line, exit 1 (the shard durable); close() writes nothing more after it."""
    group = Group()
    t = member(DirectoryStore(tmp_path), group)
    t._apply({TP: STREAM[:A_END]})
    t.checkpoint()
    t._apply({TP: STREAM[A_END:B_END]})
    group.rebalancing = True
    with pytest.raises(SourceError) as err:
        t.final_checkpoint()
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith("the final commit of events partitions 0 met a rebalance (")
    assert "pending" in line and "nothing is lost" in line
    assert group.committed[TP] == A_END and t._final_checkpoint_done
    assert stored_ones(tmp_path) == set(A) | set(B)
    assert t._release({TP}, save=True) == {}            # the close path: no second write


def test_a_final_commit_of_offsets_already_committed_may_meet_a_rebalance(
        tmp_path: Path) -> None:
    """4. Nothing came since the last commit: the final commit meeting a rebalance (other
    members leaving) leaves nothing pending, so the member exits 0."""
    group = Group()
    t = member(DirectoryStore(tmp_path), group)
    t._apply({TP: STREAM[:B_END]})
    t.checkpoint()                                       # committed 100
    group.rebalancing = True
    t.final_checkpoint()                                 # no error
    assert group.committed[TP] == B_END and t.summary.partitions == [KEY]


def test_without_a_fenced_store_the_member_stops_as_before(tmp_path: Path) -> None:
    """5. The wait is safe because every save carries the member's claimed epoch: a zombie that
    went on could not replace a newer owner's shard. A store without claims: one line, exit 1."""
    group = Group()
    t = member(Unfenced(DirectoryStore(tmp_path)), group)
    t._apply({TP: STREAM[:A_END]})
    group.rebalancing = True
    with pytest.raises(SourceError, match="offset commit failed"):
        t.checkpoint()
