"""A slice checkpoint whose commit meets a rebalance: the member goes on, and nothing is lost.

Kafka refuses a commit made while the group rebalances (kafka-python raises
``RebalanceInProgressError``; librdkafka's adapter ``CommitFailedError`` for ``ILLEGAL_GENERATION``).
The slice stage's checkpointer commits only after the snapshots are durable under the member's
fenced epoch, so such a commit may wait instead of stopping the member (exit 1, as before):

1. the snapshots stay (durable), the offsets stay uncommitted, no internal record is deleted;
2. if the member keeps the slice, its next checkpoint commits the offsets: nothing is replayed;
3. if the slice moves, its next owner restores the snapshot and re-applies the records after the
   last commit: harmless for the bit table (a fresh D1 draw of a cell already drawn), counted
   twice by the counter family, as after a crash (docs/kafka.md, "Replays after a crash");
4. a final checkpoint whose commit meets a rebalance exits 0 only if the broker already holds
   the offsets (a drained group), else stops with one line (exit 1): no exit 0 with work pending;
5. only with a fenced store: without one (a test's plain store) the member stops as before.

Tables are density bit tables at epsilon 30 (a cell reads its truth except with probability
1/(1 + e^30) < 1e-13; a few hundred cells read a few times: false failure below 1e-9) or modular
counters (no randomness after the initial draw: exact differences).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _group_fakes import Consumer, DeletesAdmin, Group, assert_counted_once_more
from test_slice_fence import (
    KEY,
    LAYOUT,
    STREAM,
    TP,
    A,
    B,
    C,
    U,
    Unfenced,
    ones,
    released_ones,
    replay,
)

from panstream.errors import SourceError
from panstream.sources.kafka import Metrics, TailConfig
from panstream.sources.kafka.slices import SliceStage
from panstream.state.checkpoint import ShardStore
from panstream.state.stores import DirectoryStore


def member(store: ShardStore, group: Group, kind: str = "density") -> SliceStage:
    """A slice stage owning slice 0 in the group's current generation, deleting through a fake
    admin client, its notices kept in ``s.said``."""
    s = SliceStage(TailConfig({}, ["g-cells"], U, 30.0, "rr", store, estimator=kind), LAYOUT,
                   Metrics(), admin_client={})
    s._admin = DeletesAdmin()
    s.said = []  # type: ignore[attr-defined]
    s.notice = s.said.append  # type: ignore[attr-defined]
    s.consumer = Consumer(group)
    s._assigned({TP})
    s._restore_pending()
    return s


def stored_ones(state: Path) -> set[int]:
    """The cells the stored snapshots read as 1 (what a release, or a restore, of them reads)."""
    return released_ones(DirectoryStore(state))


def test_a_commit_that_meets_a_rebalance_waits_for_the_next_checkpoint(tmp_path: Path) -> None:
    group = Group()
    s = member(DirectoryStore(tmp_path), group)
    s._apply({TP: STREAM[:5]})
    s.checkpoint()                                       # A durable, commit 5
    assert group.committed[TP] == 5 and s._admin.deleted == [{TP: 5}]
    s._apply({TP: STREAM[5:10]})                         # B, through offset 9
    group.rebalancing = True
    s.checkpoint()                                       # 1. not raised: the member goes on
    assert group.committed[TP] == 5                      #    nothing committed,
    assert s._admin.deleted == [{TP: 5}]                 #    nothing deleted,
    assert stored_ones(tmp_path) == set(A) | set(B)      #    but B is durable
    assert s._deferred == {TP: 10}
    (line,) = s.said
    assert "slices 0 met a rebalance" in line and "retried at the next checkpoint" in line
    group.rebalancing = False                            # the member kept its slice
    s._apply({TP: STREAM[10:]})                          # C, through offset 14
    s.checkpoint()                                       # 2. this commit covers B too
    assert group.committed[TP] == 15 and s._admin.deleted[-1] == {TP: 15}
    assert s._deferred == {}
    assert ones(s) == stored_ones(tmp_path) == set(A) | set(B) | set(C)


def test_librdkafkas_illegal_generation_is_the_same_case(tmp_path: Path) -> None:
    """librdkafka rebalances on its own thread: its commit meets a generation the member has not
    joined yet (CommitFailedError from the adapter); the slice stage waits as well."""
    group = Group()
    s = member(DirectoryStore(tmp_path), group)
    s._apply({TP: STREAM[:5]})
    group.generation += 1                                # a generation this consumer lacks
    s.checkpoint()
    assert TP not in group.committed and s._deferred == {TP: 5}
    assert stored_ones(tmp_path) == set(A)


@pytest.mark.parametrize("kind", ["density", "frequency"])
def test_a_slice_that_moves_is_reapplied_by_its_next_owner(tmp_path: Path, kind: str) -> None:
    """3. The slice moves after the deferred commit: N restores the snapshot (A and B) and
    re-applies B (after the last commit, 5). Every arrival is in N's table. The bit table cannot
    tell (B's cells read 1 either way); the counters count B twice, as after a crash."""
    group = Group()
    z = member(DirectoryStore(tmp_path), group, kind)
    z._apply({TP: STREAM[:5]})
    z.checkpoint()
    z._apply({TP: STREAM[5:10]})
    group.rebalancing = True
    z.checkpoint()                                       # B durable, its commit deferred
    held = (z.shards[TP].estimator.counters().astype(np.int64) if kind == "frequency"
            else None)
    revoke = z._release({TP}, save=True)                 # the revoke saves, and would commit
    assert {tp: om.offset for tp, om in revoke.items()} == {TP: 10}  # the deferred offsets,
    group.rebalancing = False                            # but that commit met the rebalance
    group.rebalance()                                    # too: the offsets stay at 5
    n = member(DirectoryStore(tmp_path), group, kind)
    replay(n, STREAM, group)                             # B again, then C
    n.checkpoint()
    assert group.committed[TP] == 15
    est = n.shards[TP].estimator
    if kind == "density":
        assert ones(n) == set(A) | set(B) | set(C)       # nothing lost, nothing extra
    else:
        # N's counters minus the snapshot Z held: C counted once (new), B once more (replayed:
        # B is now counted twice in all), every other cell untouched. Nothing lost.
        assert_counted_once_more(est, held, list(B) + list(C))


def test_a_final_commit_that_meets_a_rebalance_never_exits_0_with_work_pending(
        tmp_path: Path) -> None:
    """4. The final checkpoint's commit meets a rebalance: the member stops with one line
    (exit 1), its snapshots durable, if the broker's offsets are behind; after it, close() writes
    nothing more."""
    group = Group()
    s = member(DirectoryStore(tmp_path), group)
    s._apply({TP: STREAM[:5]})
    s.checkpoint()
    s._apply({TP: STREAM[5:10]})
    group.rebalancing = True
    with pytest.raises(SourceError) as err:
        s.final_checkpoint()
    line = str(err.value)
    assert "\n" not in line and "final commit of g-cells slices 0 met a rebalance" in line
    assert "pending" in line and "nothing is lost" in line
    assert group.committed[TP] == 5 and s._final_checkpoint_done
    assert stored_ones(tmp_path) == set(A) | set(B)


def test_a_final_commit_of_offsets_already_committed_may_meet_a_rebalance(
        tmp_path: Path) -> None:
    """4. A drained group's member commits at its final checkpoint what is committed already:
    that commit meeting a rebalance (the other members leaving) leaves nothing pending: exit 0."""
    group = Group()
    s = member(DirectoryStore(tmp_path), group)
    s._apply({TP: STREAM[:10]})
    s.checkpoint()                                       # committed 10: the group has drained
    group.rebalancing = True
    s.final_checkpoint()                                 # no error
    assert group.committed[TP] == 10 and s.summary.partitions == [KEY]


def test_without_a_fenced_store_the_member_stops_as_before(tmp_path: Path) -> None:
    """5. The wait is safe because every save carries the member's claimed epoch: a zombie that
    went on could not replace a newer owner's snapshot. A store without claims gets the old
    behaviour: one line, exit 1."""
    group = Group()
    s = member(Unfenced(DirectoryStore(tmp_path)), group)
    s._apply({TP: STREAM[:5]})
    group.rebalancing = True
    with pytest.raises(SourceError, match="offset commit failed"):
        s.checkpoint()
