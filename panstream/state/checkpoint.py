"""Checkpoints: make every shard's snapshot durable first, then commit the stream offsets.

This module is the one place where state durability and offset commits meet (in the manner of
quixstreams' ``checkpointing/checkpoint.py``). It imports nothing from Kafka: a source hands it an
:class:`OffsetCommitter` (commit offsets for some partitions) and a :class:`ShardStore` (durable
key -> bytes), both tiny protocols, so the order below can be tested without a broker.

A *shard* is the bit table of one input partition (:class:`Shard`). A consumer owns one shard per
assigned partition; shard and partition move together on a rebalance. Kafka's group members
(every layout) hand the checkpointer a fenced view of their store
(:class:`panstream.state.fence.FencedSaves`), so step 3 refuses (directory) or tags (state topic)
the save of a shard or slice another member has claimed since; the order below is the same.

:meth:`Checkpointer.checkpoint` runs these steps, in this order:

1. **Select.** Take *every* shard this consumer owns, whether or not its partition received
   anything since the last checkpoint. What is written, and when, must not depend on who arrived:
   saving only the shards that changed would let a file's mtime or inode (or a state-topic
   record's timestamp) tell whether a partition had traffic in each interval. Every checkpoint
   therefore writes the same files (or records) of the same sizes, on the clock's schedule.
2. **Serialize.** Snapshot each shard's estimator (:func:`panstream.state.stores.encode_shard`): the
   table and public parameters only, and no ledger (a shard has no budget of its own). No offset,
   no message count, no item goes into a snapshot.
3. **Make durable.** Write each snapshot to the store and return only when it is durable: the
   directory store writes a temporary file, fsyncs it, renames it over the old one, and fsyncs the
   directory once all of them are renamed (:func:`~panstream.state.files.one_directory_sync`);
   the topic store waits for ``acks=all``. Each store keeps only a shard's newest
   snapshot (invariant 5: two snapshots of one run would reveal who arrived in between).
4. **Commit.** Only when *every* write of step 3 succeeded, commit for every shard that has
   processed a message the offset of its last processed message + 1 (kafka-python's convention;
   committing an unchanged offset again is harmless). If a write fails, nothing is committed and
   the error propagates: the consumer stops with a one-line message. If the commit fails, the
   error propagates too (the snapshots stay: a replay follows), except a
   :class:`~panstream.errors.CommitDeferredError`: the committer says the commit met a
   consumer-group rebalance and may wait. The checkpoint then counts as durable (step 5 runs),
   nothing counts as committed (:attr:`CheckpointResult.deferred` holds the offsets), and since
   a shard's ``next_offset`` stays in memory the next checkpoint, or the save on revoke, commits
   them again; a partition that moved is re-applied by its next owner from the last commit.
5. **Record** the time of this durable checkpoint (served as a metric).

**When.** Periodic checkpoints run on a fixed clock (:mod:`panstream.schedule`): the k-th is due at
``start + k * interval`` from the :class:`Checkpointer`'s creation, whatever arrived, and a late one
(a batch in hand when it came due) does not move the next. A consumer should wait for messages no
longer than :meth:`Checkpointer.seconds_until_due`, so that it wakes at the instant rather than at
the next message or poll timeout. (Planning the next checkpoint from the last one's end, as before,
let an arrival that ended a poll early shift every later checkpoint: issue 21 §2.)

A rebalance that revokes partitions runs the same steps for their shards: :meth:`Checkpointer.durable`
(steps 1-3), then the source commits the returned offsets (kafka-python's rebalance listener must do
that asynchronously, awaiting the commit), then the shards are wiped and handed over.

What a crash at each point does on restart (restore the newest snapshot, resume from the committed
offset):

* before step 3 completes: the store holds the previous snapshot and the committed offsets are the
  previous ones (or older): messages after them are processed again;
* between steps 3 and 4: the store holds the new snapshot but the offsets are old: a few messages
  whose arrivals the snapshot already contains are processed again;
* after step 4: nothing is replayed.

The order guarantees that a committed offset never runs ahead of the durable state, so no arrival
is ever lost. Replays are harmless: an arrival of ``x`` only *overwrites* ``b[x]`` with a fresh draw
of D1, so processing it twice leaves ``b[x] ~ D1`` exactly as processing it once would; the table's
law depends only on the *set* of cells seen. At-least-once delivery therefore gives exact results
(``tests/kafka/test_checkpoint.py`` checks this).

Example:
    >>> from panstream.estimators import DensityEstimator
    >>> class Memory:                       # a ShardStore
    ...     def __init__(self): self.data = {}
    ...     def save(self, key, data): self.data[key] = bytes(data)
    ...     def load(self, key): return self.data.get(key)
    ...     def keys(self): return sorted(self.data)
    >>> commits = []
    >>> store = Memory()
    >>> cp = Checkpointer(store, commits.append)
    >>> shard = Shard("events/0", 0, DensityEstimator("range:64", epsilon=1.0))
    >>> shard.applied(last_offset=41)       # messages up to offset 41 were applied
    >>> cp.checkpoint([shard]).committed
    {0: 42}
    >>> list(store.data), commits
    (['events/0'], [{0: 42}])
    >>> cp.checkpoint([shard]).saved        # nothing new arrived: the same write all the same
    ('events/0',)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from panstream.errors import CommitDeferredError
from panstream.estimators.base import Estimator, wipe_buffer
from panstream.schedule import Schedule
from panstream.state.files import one_directory_sync


class ShardStore(Protocol):
    """Durable storage of shard snapshots, newest only, by key (e.g. ``"topic/3"``)."""

    def save(self, key: str, data: bytes | bytearray) -> None:
        """Store ``data`` under ``key``, replacing the previous value; durable on return."""

    def load(self, key: str) -> bytes | bytearray | None:
        """The newest value stored under ``key``, or ``None``."""

    def keys(self) -> list[str]:
        """All keys holding a snapshot."""


class OffsetCommitter(Protocol):
    """Commits ``{partition: next offset to read}`` to the stream (Kafka's consumer group)."""

    def __call__(self, offsets: dict[Hashable, int], /) -> None: ...


Encoder = Callable[[Estimator], bytes | bytearray]


def _default_encoder(est: Estimator) -> bytearray:
    from panstream.state.stores import encode_shard

    return encode_shard(est)


@dataclass
class Shard:
    """The table of one input partition, and where this consumer is in that partition.

    Attributes:
        key: the store key of the shard's snapshot (``"<topic>/<partition>"``).
        partition: the source's partition handle (a kafka ``TopicPartition``; opaque here).
        estimator: the shard's estimator; its table is the only state.
        next_offset: offset of the last message applied + 1, in memory only and never stored in
            a snapshot (Kafka holds committed offsets itself); ``None`` before the first message.

    There is deliberately no "changed since the last checkpoint" flag: every checkpoint writes
    every shard (see the module docstring).
    """

    key: str
    partition: Hashable
    estimator: Estimator
    next_offset: int | None = None

    def applied(self, last_offset: int) -> None:
        """Record that every message up to ``last_offset`` (inclusive) has been applied."""
        self.next_offset = last_offset + 1


@dataclass(frozen=True)
class CheckpointResult:
    """What one checkpoint did: snapshot keys written and offsets committed (operational only)."""

    saved: tuple[str, ...] = ()
    committed: dict[Hashable, int] = field(default_factory=dict)
    seconds: float = 0.0
    #: Offsets whose commit met a rebalance (:class:`~panstream.errors.CommitDeferredError`): the
    #: snapshots are durable, the offsets are not committed; empty otherwise.
    deferred: dict[Hashable, int] = field(default_factory=dict)
    #: The committer's one line for :attr:`deferred` (empty when nothing was deferred).
    why: str = ""


class Checkpointer:
    """Owns the order "snapshots durable, then commit offsets" (see the module docstring).

    Args:
        store: where snapshots go (:class:`ShardStore`).
        commit: the offset committer, called once per checkpoint with ``{partition: offset}``.
        encode: estimator -> snapshot bytes (default :func:`panstream.state.stores.encode_shard`).
        clock: a monotonic clock (for tests).
    """

    def __init__(self, store: ShardStore, commit: OffsetCommitter, encode: Encoder | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self._commit = commit
        self._encode = encode or _default_encoder
        self._clock = clock
        #: Monotonic time of the last durable checkpoint (start time until the first one).
        self.last_durable = self.started = clock()
        self.checkpoints = 0
        self._schedule: Schedule | None = None

    def durable(self, shards: Iterable[Shard]) -> dict[Hashable, int]:
        """Steps 1-3: make every shard's snapshot durable; return the offsets to commit next.

        The caller must commit the returned offsets only after this returns (the rebalance
        listener does so asynchronously on revoke), then call :meth:`done`.
        """
        offsets: dict[Hashable, int] = {}
        with one_directory_sync():  # a directory store syncs its directory once, at the end
            for shard in shards:                                        # step 1: all of them
                save_durable(self.store, shard.key, self._encode(shard.estimator))  # steps 2-3
                if shard.next_offset is not None:
                    offsets[shard.partition] = shard.next_offset
        return offsets

    def done(self) -> None:
        """Step 5: record the time of this durable checkpoint."""
        self.last_durable = self._clock()
        self.checkpoints += 1

    def checkpoint(self, shards: Iterable[Shard]) -> CheckpointResult:
        """Run steps 1-5 of the module docstring for ``shards``.

        Returns:
            The keys saved (all shards) and the offsets committed.

        Raises:
            StateError, SourceError or OSError: a snapshot could not be made durable (nothing is
                committed then) or the commit failed (the snapshots stay; a replay follows). A
                :class:`~panstream.errors.CommitDeferredError` of the committer is not raised:
                the result's ``deferred`` holds those offsets (step 4 of the module docstring).
        """
        shards = list(shards)
        return self.run(lambda: self.durable(shards), tuple(s.key for s in shards))

    def run(self, durable: Callable[[], dict[Hashable, int]],
            saved: tuple[str, ...] = ()) -> CheckpointResult:
        """Steps 1-5 with the caller's own steps 1-3: ``durable`` makes every snapshot durable
        and returns the offsets to commit (a task manager whose tasks write their own snapshots,
        :mod:`panstream.sources.kafka.group`); ``saved`` names the snapshots, for the result.

        Raises:
            as :meth:`checkpoint`.
        """
        t0 = self._clock()
        if self._schedule is not None and self._schedule.due(t0):
            self._schedule.advance(t0)                                  # this instant is served
        committed, deferred, why = self.commit(durable())               # steps 1-3, then 4
        self.done()                                                     # step 5: durable
        return CheckpointResult(saved, committed, self._clock() - t0, deferred, why)

    def commit(self, offsets: dict[Hashable, int]
               ) -> tuple[dict[Hashable, int], dict[Hashable, int], str]:
        """Step 4: commit ``offsets`` (made durable by :meth:`durable` or the caller's own saves).

        Returns:
            ``(committed, deferred, why)``: a :class:`~panstream.errors.CommitDeferredError` of
            the committer (a rebalance) defers the offsets instead of raising.
        """
        if not offsets:
            return {}, {}, ""
        try:
            self._commit(dict(offsets))
        except CommitDeferredError as exc:                              # a rebalance: not now
            return {}, offsets, str(exc)
        return offsets, {}, ""

    def _grid(self, interval: float) -> Schedule:
        if self._schedule is None or self._schedule.interval != interval:
            self._schedule = Schedule(self.started, interval)
        return self._schedule

    def due(self, interval: float) -> bool:
        """Whether the next instant ``started + k * interval`` has come (a fixed grid: neither
        arrivals nor the time the last checkpoint took can move it). ``interval <= 0``: always."""
        if interval <= 0:
            return True
        return self._grid(interval).due(self._clock())

    def seconds_until_due(self, interval: float) -> float:
        """Seconds until the next checkpoint is due (0 if it is): the longest a consumer should
        wait for messages."""
        if interval <= 0:
            return 0.0
        return max(0.0, self._grid(interval).next - self._clock())

    def seconds_since_durable(self) -> float:
        """Seconds since the last durable checkpoint (a metric)."""
        return self._clock() - self.last_durable

    def follower(self, interval: float) -> CommitClock:
        """The same grid ``started + k * interval`` for another committer (the routing stage's
        source commits follow the slices' checkpoints: one clock for the group)."""
        return CommitClock(self.started, interval, self._clock)


class CommitClock:
    """A committer's turns on a :class:`Checkpointer`'s fixed grid (:meth:`Checkpointer.
    follower`): due at the same instants, served on its own (a late turn skips, never shifts).

    Example:
        >>> t = [0.0]
        >>> cp = Checkpointer({}, print, clock=lambda: t[0])
        >>> route = cp.follower(5.0)
        >>> t[0] = 5.2; route.due(), cp.due(5.0)
        (True, True)
        >>> route.served(); route.due(), route.seconds_until_due()
        (False, 4.8)
    """

    def __init__(self, started: float, interval: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._schedule = Schedule(started, interval) if interval > 0 else None

    def due(self) -> bool:
        """Whether this committer's next instant has come (always, for an interval <= 0)."""
        return self._schedule is None or self._schedule.due(self._clock())

    def served(self) -> None:
        """The instant due is served (the commit made)."""
        if self._schedule is not None:
            self._schedule.advance(self._clock())

    def seconds_until_due(self) -> float:
        """The longest this committer should wait for records (0 if due)."""
        if self._schedule is None:
            return 0.0
        return max(0.0, self._schedule.next - self._clock())


def save_durable(store: ShardStore, key: str, data: bytes | bytearray) -> None:
    """Steps 2-3 for one snapshot: ``data`` durable under ``key``, then wiped (a bytearray)."""
    try:
        store.save(key, data)
    finally:
        if isinstance(data, bytearray):
            wipe_buffer(data)


def restore_shard(store: ShardStore, key: str, partition: Hashable,
                  fresh: Callable[[], Estimator],
                  decode: Callable[[bytes | bytearray], Estimator]) -> Shard:
    """Build the shard of a newly assigned partition: its newest snapshot, or a fresh table.

    Args:
        store: the shard store.
        key: the shard's store key.
        partition: the source's partition handle.
        fresh: makes a new estimator (fresh D0 table) with the configured parameters.
        decode: snapshot bytes -> estimator, checked against the configured parameters.

    Raises:
        StateError: the stored snapshot is corrupt or contradicts the configured parameters.
    """
    data = store.load(key)
    if data is None:
        return Shard(key, partition, fresh())
    try:
        return Shard(key, partition, decode(data))
    finally:
        if isinstance(data, bytearray):  # no copy of the restored table left in freed memory
            wipe_buffer(data)


def shard_key(topic: str, partition: int) -> str:
    """The store key of a partition's shard: ``"<topic>/<partition>"``."""
    return f"{topic}/{partition}"


def offsets_of(shards: Mapping[Hashable, Shard]) -> dict[Hashable, int]:
    """``{partition: next_offset}`` of the shards that processed anything (for logs/metrics)."""
    return {k: s.next_offset for k, s in shards.items() if s.next_offset is not None}
