"""Fenced slice snapshots: a zombie's late snapshot is never the one restored or released.

The interleaving that used to lose arrivals (issue 26), played here with two slice stages on one
store and a fake group coordinator that, like Kafka, accepts commits only from the current
generation:

1. member Z owns slice 0, checkpoints arrivals A (commits offset 5), applies B (through offset 9)
   and stops (a stop-the-world pause longer than its session);
2. the group rebalances (generation 2): N restores the slice (A), replays from offset 5 (B) and
   applies C, checkpoints (through offset 14) and commits 15;
3. Z wakes and checkpoints its table (A and B, not C);
4. N dies with ``kill -9`` before its next checkpoint; M restores the slice and replays from 15.

Without the fence Z's snapshot replaced N's and M's table lacked C (the first test shows it).
With it, the directory store refuses Z's save and the state topic's readers ignore it: M's table,
and a release of the store, hold A, B and C.

Tables are density bit tables at epsilon 30: an arrived cell reads 1 and an unseen cell 0, each
wrong with probability 1/(1 + e^30) < 1e-13, so a test reading 500 cells a few times fails falsely
with probability below 1e-9.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from _group_fakes import Consumer, Group, Rec, Unfenced, read_from_commit, released_ones, store_factory
from fakes import MemoryLog
from kafka import TopicPartition

from panstream import estimators
from panstream.errors import FencedError, SourceError
from panstream.sources.kafka import Metrics, TailConfig
from panstream.sources.kafka.slices import SliceStage
from panstream.state.checkpoint import ShardStore
from panstream.state.slices import SliceLayout
from panstream.state.stores import (
    DirectoryStore,
    TopicStore,
    encode_slice,
    rotate_slice_store,
)
from panstream.universe import Universe

U = Universe.parse("range:1000")
LAYOUT = SliceLayout(U, 2)  # slice 0: cells 0..499
TP = TopicPartition("g-cells", 0)
KEY = "g-cells/0"
A, B, C = range(0, 50), range(100, 150), range(200, 250)  # arrivals, 10 cells a record


def records(cells: range, first_offset: int) -> list[Rec]:
    """The routed records of ``cells``, 10 cells a record, from ``first_offset`` on."""
    out = []
    for i, lo in enumerate(range(cells.start, cells.stop, 10)):
        ((r, data),) = LAYOUT.route(np.arange(lo, lo + 10, dtype=np.intp))
        assert r == 0
        out.append(Rec(first_offset + i, bytes(data)))
    return out


def member(store: ShardStore, group: Group) -> SliceStage:
    """A slice stage assigned slice 0 in the group's current generation (claim, then restore)."""
    s = SliceStage(TailConfig({}, ["g-cells"], U, 30.0, "rr", store), LAYOUT, Metrics())
    s.consumer = Consumer(group)
    s._assigned({TP})
    s._restore_pending()
    return s


def replay(s: SliceStage, stream: list[Rec], group: Group) -> None:
    """What the member's consumer reads: the records from the committed offset on."""
    read_from_commit(s, TP, stream, group)


def ones(s: SliceStage) -> set[int]:
    return set(np.flatnonzero(s.shards[TP].estimator.bits()).tolist())


Stores = Callable[[], DirectoryStore | TopicStore]


@pytest.fixture(params=["directory", "topic"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    """A factory of store handles on one store: each member opens its own, as processes do."""
    yield store_factory(request.param, tmp_path)


STREAM = records(A, 0) + records(B, 5) + records(C, 10)


def zombie_interleaving(open_store: Callable[[], ShardStore]) -> tuple[SliceStage, Group]:
    """Steps 1-3 of the module docstring; returns the woken zombie's stage (not yet checkpointed
    again) and the group. N is dropped without a checkpoint (``kill -9``)."""
    group = Group()
    z = member(open_store(), group)                      # 1. Z owns slice 0
    z._apply({TP: STREAM[:5]})                           #    A
    z.checkpoint()                                       #    durable, commit 5
    assert group.committed[TP] == 5
    z._apply({TP: STREAM[5:10]})                         #    B (through offset 9): Z pauses here
    group.rebalance()                                    # 2. Z evicted, N assigned
    n = member(open_store(), group)
    assert ones(n) == set(A)                             #    restored from Z's checkpoint
    replay(n, STREAM, group)                             #    B again, then C
    n.checkpoint()                                       #    through offset 14, commit 15
    assert group.committed[TP] == 15
    return z, group                                      # 4. N killed: no close, no checkpoint


def test_without_the_fence_a_zombie_loses_the_new_owners_arrivals(tmp_path: Path) -> None:
    """The attack, before issue 26's fence: Z's late save replaces N's snapshot; its commit
    fails, but M restores Z's table and replays from N's commit: C is gone."""
    for store in (DirectoryStore(tmp_path / "d"), TopicStore(MemoryLog(), chunk_bytes=40)):
        z, group = zombie_interleaving(lambda s=store: Unfenced(s))  # type: ignore[misc]
        with pytest.raises(SourceError, match="offset commit failed"):
            z.checkpoint()                               # 3. the save lands, the commit fails
        group.rebalance()
        m = member(Unfenced(store), group)
        replay(m, STREAM, group)
        assert ones(m) == set(A) | set(B)                # C lost
        assert released_ones(store) == set(A) | set(B)


def test_a_zombies_late_snapshot_is_never_restored_nor_released(stores: Stores) -> None:
    z, group = zombie_interleaving(stores)
    fenced = isinstance(stores(), DirectoryStore)
    # 3. Z wakes. The directory refuses its save (one line, exit 1 for the member); the topic
    # takes it, but under Z's older epoch (readers ignore it), and Kafka refuses Z's commit,
    # which Z leaves to its next checkpoint as any commit that meets a rebalance (its next poll
    # tells it that it was evicted; every later save of its is refused or ignored the same way).
    if fenced:
        with pytest.raises(FencedError) as err:
            z.checkpoint()
        assert "\n" not in str(err.value)
    else:
        z.checkpoint()
        assert z._deferred == {TP: 10}
    assert group.committed[TP] == 15                     # nothing of Z's was committed
    # A release meanwhile reads N's table, not Z's
    assert released_ones(stores()) == set(A) | set(B) | set(C)
    # 4. M takes the slice and replays from N's commit: it holds (Pz, C'] = C too
    group.rebalance()
    m = member(stores(), group)
    replay(m, STREAM, group)
    assert ones(m) == set(A) | set(B) | set(C)


def test_the_topic_store_stays_right_through_compaction_and_forgets_the_zombie() -> None:
    """Compaction keeps the newest record of each key: Z's manifest has a key of its own epoch,
    so it cannot supersede N's; M's first save then tombstones every older epoch's records."""
    log = MemoryLog()
    z, group = zombie_interleaving(lambda: TopicStore(log, chunk_bytes=40))
    z.checkpoint()                                       # saved under epoch 1, not committed
    assert group.committed[TP] == 15
    log.compact()
    assert released_ones(TopicStore(log)) == set(A) | set(B) | set(C)
    stems = {k.decode().split("#", 1)[0] for k, _ in log.records if not k.startswith(b"#")}
    assert stems == {f"{KEY}@1", f"{KEY}@2"}             # Z's (ignored) and N's
    group.rebalance()
    m = member(TopicStore(log, chunk_bytes=40), group)
    m.checkpoint()
    log.compact()
    stems = {k.decode().split("#", 1)[0] for k, _ in log.records if not k.startswith(b"#")}
    assert stems == {f"{KEY}@3"}                          # one snapshot left: M's
    assert released_ones(TopicStore(log)) == set(A) | set(B) | set(C)


def test_a_member_that_claims_late_is_refused(stores: Stores) -> None:
    """Z is assigned in generation 1 but claims only after N (generation 2) claimed and saved:
    its claim is lower than the store's, and the commit that would prove it current fails."""
    group = Group()
    late = SliceStage(TailConfig({}, ["g-cells"], U, 30.0, "rr", stores()), LAYOUT, Metrics())
    late.consumer = Consumer(group)
    late._assigned({TP})                                 # generation 1, then a pause
    group.rebalance()
    n = member(stores(), group)
    n._apply({TP: STREAM[:5]})
    n.checkpoint()
    with pytest.raises(FencedError, match="claimed at epoch 2 by a newer owner"):
        late._restore_pending()
    assert not late.shards
    n.checkpoint()                                       # the owner goes on saving
    assert released_ones(stores()) == set(A)


def test_a_recreated_group_whose_generations_restart_takes_its_slices_back(
        stores: Stores) -> None:
    """Kafka forgets a group a week after its last member left; the next incarnation counts
    generations from 1 again. Its member's claim is lower than the stored epoch, but a commit
    proves it current: it rebases above the stored epoch and its saves win."""
    old = Group()
    old.generation = 7
    a = member(stores(), old)
    a._apply({TP: STREAM[:5]})
    a.checkpoint()
    new = Group()                                        # generation 1, nothing committed
    b = member(stores(), new)
    assert ones(b) == set(A)
    b._apply({TP: STREAM[5:10]})
    b.checkpoint()
    new.rebalance()
    c = member(stores(), new)                            # generation 2: epoch 7 + 2
    assert ones(c) == set(A) | set(B)
    assert b._epochs[KEY] == 8 and c._epochs[KEY] == 9
    c.close()                                            # the base survives a rotation too
    rotate_slice_store(stores())
    new.rebalance()
    assert member(stores(), new)._epochs[KEY] == 10     # 7 + 3, no second rebase


def test_a_store_written_before_fencing_restores_and_is_taken_over(stores: Stores) -> None:
    """A slice saved without an epoch (panstream before the fence) has epoch 0: it restores, and
    the first fenced save replaces it."""
    est = estimators.new("density", LAYOUT.slice_universe(0), 30.0,
                         layout=LAYOUT.table_layout)
    est.update_indices(np.arange(300, 310, dtype=np.intp))
    stores().save(KEY, encode_slice(est, LAYOUT, 0))     # the old way: no claim, no epoch
    group = Group()
    s = member(stores(), group)
    assert ones(s) == set(range(300, 310))
    s._apply({TP: STREAM[:5]})
    s.checkpoint()
    assert released_ones(stores()) == set(range(300, 310)) | set(A)


def test_a_rotation_replaces_the_fenced_slices(stores: Stores) -> None:
    """``rotate`` (members stopped) writes fresh slices without a claim: under the highest epoch,
    so the next owner restores the fresh table, not the rotated-away one."""
    group = Group()
    s = member(stores(), group)
    s._apply({TP: STREAM[:5]})
    s.checkpoint()
    s.close()
    rotate_slice_store(stores())
    group.rebalance()
    assert not ones(member(stores(), group))


def test_a_current_member_whose_proof_meets_a_rebalance_waits_and_claims_after_it(
        stores: Stores) -> None:
    """Tansu counts generations from 0, and the claim counts 0 as 1: the member assigned slice 0
    in generation 1 claims no higher than its owner of generation 0, so it must prove itself
    current with a commit. If a rebalance has begun meanwhile (another member joins), that commit
    fails with ``RebalanceInProgressError``, which says nothing of eviction: before, the claim read
    it as "not current" and stopped a current member on the fence (exit 1). It now leaves the
    slice unclaimed, unread and paused, and claims it after the rebalance."""
    group = Group()
    group.generation = 0
    a = member(stores(), group)                          # generation 0: epoch 1
    a._apply({TP: STREAM[:5]})
    a.checkpoint()
    group.rebalance()                                    # generation 1: slice 0 moves to B
    b = SliceStage(TailConfig({}, ["g-cells"], U, 30.0, "rr", stores()), LAYOUT, Metrics())
    said: list[str] = []
    b.notice = said.append
    b.consumer = Consumer(group)
    b._assigned({TP})
    group.rebalancing = True                             # a third member joins
    b._restore_pending()                                 # before: FencedError
    b._restore_pending()                                 # still rebalancing: said once
    assert not b.shards and b._pending == {TP} and KEY not in b._epochs
    assert len(said) == 1 and "claim of g-cells slices 0 met a rebalance" in said[0], said
    group.rebalancing = False                            # B stays current, slice 0 with it
    b._restore_pending()
    assert ones(b) == set(A) and b._epochs[KEY] == 2     # proved current: rebased, 1 + 1
    replay(b, STREAM, group)
    b.checkpoint()
    with contextlib.suppress(FencedError):               # the old owner's late save: refused
        a.checkpoint()                                   # (directory) or ignored (topic)
    assert released_ones(stores()) == set(A) | set(B) | set(C)
