"""A consumer group without a broker, for the fencing tests: its generation and committed offsets,
and members' consumers that, like Kafka's, may commit only in the current generation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kafka import TopicPartition
from kafka.errors import CommitFailedError, RebalanceInProgressError


class Group:
    """The broker's side of a consumer group: its generation and committed offsets. A commit from
    a member of an older generation fails, as Kafka's (``ILLEGAL_GENERATION``)."""

    def __init__(self) -> None:
        self.generation = 1
        self.committed: dict[TopicPartition, int] = {}
        #: A rebalance is running: every commit fails, as kafka-python's does
        #: (``RebalanceInProgressError``) until its member has rejoined.
        self.rebalancing = False

    def rebalance(self) -> None:
        self.generation += 1


class Consumer:
    """A member's consumer in ``group`` at its current generation (kafka-python's attributes the
    stages read: ``_coordinator._generation.generation_id``)."""

    def __init__(self, group: Group) -> None:
        self.group = group
        self.generation = group.generation
        self._coordinator = SimpleNamespace(_generation=SimpleNamespace(
            generation_id=self.generation))

    def commit(self, offsets: dict[TopicPartition, Any]) -> None:
        if self.group.rebalancing:
            raise RebalanceInProgressError("the consumer is undergoing a rebalance")
        if self.generation != self.group.generation:
            raise CommitFailedError("the group has already rebalanced")
        self.group.committed.update({tp: om.offset for tp, om in offsets.items()})

    def committed(self, tp: TopicPartition) -> int | None:
        return self.group.committed.get(tp)

    def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return dict.fromkeys(tps, 0)

    def partitions_for_topic(self, topic: str) -> set[int]:
        """The source topics here have one partition (the per-partition layout's keying check
        reads the count, issue 39: every cell is partition 0's)."""
        return {0}

    def pause(self, *tps: TopicPartition) -> None:
        pass

    def resume(self, *tps: TopicPartition) -> None:
        pass


# ------------------------------------------------------------------ stores, as the attacks use them
def released_ones(store: Any, merge: str = "auto") -> set[int]:
    """The cells a release of ``store`` reads as 1 (its ``merge`` of the stored shards or slices;
    ``sum``: for one shard, the same cells as the partition-aware merge)."""
    import numpy as np

    from panstream.state.stores import DirectoryStore, TopicStore, merge_store

    assert isinstance(store, DirectoryStore | TopicStore)
    group = merge_store(store, merge)
    try:
        return set(np.flatnonzero(group.estimator.bits()).tolist())
    finally:
        group.estimator.wipe()


class Unfenced:
    """A store without claims: a member saves as before fencing (the attack's setting)."""

    def __init__(self, store: Any) -> None:
        self.inner = store

    def save(self, key: str, data: bytes | bytearray) -> None:
        self.inner.save(key, data)

    def load(self, key: str) -> bytes | bytearray | None:
        from panstream.state.stores import TopicStore

        if isinstance(self.inner, TopicStore):
            self.inner.refresh()
        return self.inner.load(key)

    def keys(self) -> list[str]:
        return list(self.inner.keys())


def store_factory(kind: str, tmp_path: Path) -> Callable[[], Any]:
    """Handles on one store (``directory`` or ``topic``): each member opens its own, as processes
    do."""
    from fakes import MemoryLog

    from panstream.state.stores import DirectoryStore, TopicStore

    if kind == "directory":
        return lambda: DirectoryStore(tmp_path / "state")
    log = MemoryLog()
    return lambda: TopicStore(log, chunk_bytes=40)


def assert_counted_once_more(est: Any, held: Any, cells: list[int]) -> None:
    """The counter table ``est`` minus the counters ``held`` before: 1 on ``cells`` (each new or
    replayed arrival counted once more), 0 on every other cell: nothing lost, nothing else."""
    import numpy as np

    assert held is not None
    diff = (est.counters().astype(np.int64) - held) % est.modulus
    expect = np.zeros_like(diff)
    expect[cells] = 1
    assert diff.tolist() == expect.tolist()


# ------------------------------------------------------------------ what a member's consumer reads
@dataclass
class Rec:
    """A record as a stage reads it: its offset and value."""

    offset: int
    value: bytes


def read_from_commit(stage: Any, tp: TopicPartition, stream: list[Any], group: Group) -> None:
    """What a member's consumer reads of ``tp``: the records of ``stream`` from the group's
    committed offset on (a new owner's replay), applied by ``stage``."""
    start = group.committed.get(tp, 0)
    todo = [r for r in stream if r.offset >= start]
    if todo:
        stage._apply({tp: todo})


class DeletesAdmin:
    """DeleteRecords, recorded (a stage deletes only the records a durable, committed checkpoint
    covers)."""

    def __init__(self) -> None:
        self.deleted: list[dict[Any, int]] = []

    def delete_records(self, offsets: dict[Any, int]) -> None:
        self.deleted.append(dict(offsets))
