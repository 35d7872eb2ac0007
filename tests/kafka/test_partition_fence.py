"""Fenced per-partition shards (``kafka --layout partition``): a zombie's late shard is never
restored or released.

The per-partition layout keeps one full table per source partition, checkpointed under
``<topic>/<partition>``. The interleaving that loses arrivals (issue 26) is the routed slices'
(``test_slice_fence.py``), played here with two :class:`KafkaTail` members of one group on one
store and a fake group coordinator that, like Kafka, accepts commits only from the current
generation:

1. member Z owns ``events/0``, checkpoints arrivals A (commits offset 5), applies B (through
   offset 9) and stops (a stop-the-world pause longer than its session);
2. the group rebalances (generation 2): N restores the shard (A), replays from offset 5 (B) and
   applies C, checkpoints (through offset 14) and commits 15;
3. Z wakes and checkpoints its table (A and B, not C);
4. N dies with ``kill -9`` before its next checkpoint; M restores the shard and replays from 15.

Without the fence (before this change) Z's shard replaced N's and M's table lacked C: the first
test shows it. With it, the directory store refuses Z's save and the state topic's readers ignore
it: M's table, and a release of the store, hold A, B and C.

Tables are density bit tables at epsilon 30: an arrived cell reads 1 and an unseen cell 0, each
wrong with probability 1/(1 + e^30) < 1e-13, so a test reading 1,000 cells a few times fails
falsely with probability below 1e-9.
"""

from __future__ import annotations

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
from panstream.sources.kafka.tail import KafkaTail
from panstream.state.checkpoint import ShardStore
from panstream.state.stores import DirectoryStore, TopicStore, encode_shard
from panstream.universe import Universe

U = Universe.parse("range:1000")
TP = TopicPartition("events", 0)
KEY = "events/0"
A, B, C = range(0, 50), range(100, 150), range(200, 250)  # arrivals, one item a message


def messages(items: range, first_offset: int) -> list[Rec]:
    """One message per item (``-V item``), from ``first_offset`` on."""
    return [Rec(first_offset + i, str(x).encode()) for i, x in enumerate(items)]


STREAM = messages(A, 0) + messages(B, 50) + messages(C, 100)
A_END, B_END, C_END = 50, 100, 150  # the offset after each


def member(store: ShardStore, group: Group) -> KafkaTail:
    """A member assigned ``events/0`` in the group's current generation (claim, then restore)."""
    t = KafkaTail(TailConfig({}, ["events"], U, 30.0, "rr", store, partitioner="murmur2"), Metrics())
    t.consumer = Consumer(group)
    t._assigned({TP})
    t._restore_pending()
    return t


def replay(t: KafkaTail, group: Group) -> None:
    """What the member's consumer reads: the messages from the committed offset on."""
    read_from_commit(t, TP, STREAM, group)


def ones(t: KafkaTail) -> set[int]:
    return set(np.flatnonzero(t.shards[TP].estimator.bits()).tolist())


Stores = Callable[[], DirectoryStore | TopicStore]


@pytest.fixture(params=["directory", "topic"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    """A factory of store handles on one store: each member opens its own, as processes do."""
    yield store_factory(request.param, tmp_path)


def zombie_interleaving(open_store: Callable[[], ShardStore]) -> tuple[KafkaTail, Group]:
    """Steps 1-3 of the module docstring; returns the woken zombie (not yet checkpointed again)
    and the group. N is dropped without a checkpoint (``kill -9``)."""
    group = Group()
    z = member(open_store(), group)                      # 1. Z owns events/0
    z._apply({TP: STREAM[:A_END]})                       #    A
    z.checkpoint()                                       #    durable, commit 50
    assert group.committed[TP] == A_END
    z._apply({TP: STREAM[A_END:B_END]})                  #    B: Z pauses here
    group.rebalance()                                    # 2. Z evicted, N assigned
    n = member(open_store(), group)
    assert ones(n) == set(A)                             #    restored from Z's checkpoint
    replay(n, group)                                     #    B again, then C
    n.checkpoint()                                       #    commit 150
    assert group.committed[TP] == C_END
    return z, group                                      # 4. N killed: no close, no checkpoint


def test_without_the_fence_a_zombie_loses_the_new_owners_arrivals(tmp_path: Path) -> None:
    """The attack, as the per-partition layout stood before: Z's late save replaces N's shard;
    its commit fails, but M restores Z's table and replays from N's commit: C is gone."""
    for store in (DirectoryStore(tmp_path / "d"), TopicStore(MemoryLog(), chunk_bytes=40)):
        z, group = zombie_interleaving(lambda s=store: Unfenced(s))  # type: ignore[misc]
        with pytest.raises(SourceError, match="offset commit failed"):
            z.checkpoint()                               # 3. the save lands, the commit fails
        group.rebalance()
        m = member(Unfenced(store), group)
        replay(m, group)
        assert ones(m) == set(A) | set(B)                # C lost
        assert released_ones(store) == set(A) | set(B)


def test_a_zombies_late_shard_is_never_restored_nor_released(stores: Stores) -> None:
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
        assert str(err.value).startswith(f"snapshot {KEY} not saved: the store shows epoch 2")
    else:
        z.checkpoint()
        assert z._deferred == {TP: B_END}
    assert group.committed[TP] == C_END                  # nothing of Z's was committed
    # A release meanwhile reads N's table, not Z's
    assert released_ones(stores()) == set(A) | set(B) | set(C)
    # 4. M takes the partition and replays from N's commit: it holds (Pz, C'] = C too
    group.rebalance()
    m = member(stores(), group)
    replay(m, group)
    assert ones(m) == set(A) | set(B) | set(C)


def test_a_zombie_that_saves_on_revoke_is_refused_too(tmp_path: Path) -> None:
    """kafka-python may tell a woken zombie its partitions were *revoked* (not lost): the
    listener then saves them before handing them over. That save is fenced like a checkpoint's:
    refused, so the member stops (the listener's error surfaces as the run's) and nothing of
    it lands."""
    store = DirectoryStore(tmp_path / "state")
    z, group = zombie_interleaving(lambda: store)
    with pytest.raises(FencedError):
        z._release({TP}, save=True)
    assert released_ones(store) == set(A) | set(B) | set(C)


def test_a_member_that_claims_late_is_refused(stores: Stores) -> None:
    """Z is assigned in generation 1 but claims only after N (generation 2) claimed and saved:
    its claim is lower than the store's, and the commit that would prove it current fails."""
    group = Group()
    late = KafkaTail(TailConfig({}, ["events"], U, 30.0, "rr", stores(), partitioner="murmur2"), Metrics())
    late.consumer = Consumer(group)
    late._assigned({TP})                                 # generation 1, then a pause
    group.rebalance()
    n = member(stores(), group)
    n._apply({TP: STREAM[:A_END]})
    n.checkpoint()
    with pytest.raises(FencedError, match="claimed at epoch 2 by a newer owner"):
        late._restore_pending()
    assert not late.shards
    n.checkpoint()                                       # the owner goes on saving
    assert released_ones(stores()) == set(A)


def test_a_store_written_before_fencing_restores_and_is_taken_over(stores: Stores) -> None:
    """A shard saved without an epoch (panstream before this change) has epoch 0: it restores,
    and the first fenced save replaces it (on a state topic, its records get tombstones)."""
    est = estimators.new("density", U, 30.0)
    est.update_indices(np.arange(300, 310, dtype=np.intp))
    stores().save(KEY, encode_shard(est))                # the old way: no claim, no epoch
    group = Group()
    t = member(stores(), group)
    assert ones(t) == set(range(300, 310))
    t._apply({TP: STREAM[:A_END]})
    t.checkpoint()
    # written before the keying check too (issue 39): it keeps no record, so only the sum merge
    # releases it (one shard: the same cells)
    assert released_ones(stores(), "sum") == set(range(300, 310)) | set(A)
    assert stores().keys() == [KEY]                      # one shard, whatever its epochs


def test_the_state_topic_forgets_the_zombie_with_the_next_claim() -> None:
    """On a state topic Z's ignored snapshot has a key of its own epoch (``events/0@1``), so
    compaction cannot let it supersede N's (``events/0@2``); M's first save tombstones both."""
    log = MemoryLog()
    z, group = zombie_interleaving(lambda: TopicStore(log, chunk_bytes=40))
    z.checkpoint()                                       # saved under epoch 1, not committed
    assert group.committed[TP] == C_END
    log.compact()
    stems = {k.decode().split("#", 1)[0] for k, _ in log.records if not k.startswith(b"#")}
    assert stems == {f"{KEY}@1", f"{KEY}@2"}
    group.rebalance()
    m = member(TopicStore(log, chunk_bytes=40), group)
    m.checkpoint()
    log.compact()
    stems = {k.decode().split("#", 1)[0] for k, _ in log.records if not k.startswith(b"#")}
    assert stems == {f"{KEY}@3"}
    assert released_ones(TopicStore(log)) == set(A) | set(B) | set(C)


def test_a_claim_writes_only_public_parameters(tmp_path: Path) -> None:
    """The claim file beside a shard holds the epoch and its base (the group's rebalances), and
    nothing of the stream: no offset, no count. A busy and an idle member leave the same one."""
    claims = []
    for traffic in (STREAM, []):
        d = tmp_path / ("busy" if traffic else "idle")
        group = Group()
        t = member(DirectoryStore(d), group)
        if traffic:
            t._apply({TP: traffic})
        t.checkpoint()
        claims.append((d / ".events@0.shard.panstream-fence").read_bytes())
        assert sorted(p.name for p in d.iterdir() if p.name.startswith(".")) == \
            [".events@0.shard.panstream-fence"]          # the lock file is gone after each use
    assert claims[0] == claims[1] == b'{"base": 0, "epoch": 1}'
