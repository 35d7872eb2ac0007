"""The group loop: one consumer-group member's life, for every layout (issue 35).

:class:`GroupLoop` is the one owner of a member's group protocol, in the shape of Kafka Streams'
``TaskManager``: it subscribes, takes the rebalance callbacks, claims each assigned partition with
its generation (the fence, :mod:`panstream.state.fence`), holds one task per partition behind
:class:`~panstream.sources.kafka.task.Task` (restore, apply, snapshot, close), runs the one
checkpoint clock (:class:`~panstream.state.checkpoint.Checkpointer`'s fixed grid; the routing
stage's commits follow it: :meth:`GroupLoop.commit_clock`), commits or defers, makes the final
checkpoint, and leaves. It does not know which layout it runs: a
:class:`~panstream.sources.kafka.task.TaskKind` makes the tasks (a partition shard, :mod:`.tail`;
a routed slice, :mod:`.slices`; a window slice, :mod:`.windows`). The records of the internal
topic pass the group's identity check (:attr:`GroupLoop.gate`, :mod:`.identity`) before a task
decodes them.

The life of a member (see also the package docstring):

* **Assign** (IO thread, in the listener): each new partition is paused and waits.
* **Claim and restore** (main thread, after the poll): claim the partition's state with the
  generation of its assignment, then the task reads its snapshot (``CREATED`` -> ``RESTORING``
  -> ``RUNNING``) and the partition is resumed. A claim that meets a rebalance
  (:class:`~panstream.errors.ClaimDeferredError`) leaves it paused until the next poll.
* **Apply**: each poll's records go to their partition's task.
* **Checkpoint** on the fixed clock: every task's snapshot durable, then the offsets committed
  (:meth:`Checkpointer.run <panstream.state.checkpoint.Checkpointer.run>`); a commit that meets a
  rebalance is deferred to the next checkpoint where the store is fenced; then the kind's steps
  (records deleted, windows released).
* **Revoke**: the revoked tasks made durable, their offsets committed (asynchronously, from the
  listener), the tasks wiped (``SUSPENDED`` -> ``CLOSED``); **lost**: wiped without a save.
* **Drain** (a stopping routed member, :meth:`GroupLoop.drain`): what waits in its partitions is
  applied, bounded; whether the whole group has drained is :mod:`.member`'s question.
* **Stop**: the final checkpoint (exit 1 if its commit met a rebalance and the broker's offsets
  are behind), then leave the group and wipe every task.

**Fenced snapshots** (issue 26). On assignment the loop claims each new partition's state in the
store with its generation in the consumer group, before the snapshot is read, and every later
save carries the claimed epoch: a member evicted while it went on running (a "zombie", e.g.
SIGSTOPped past its session) can no longer write its older table over the new owner's (a state
directory refuses the save with :class:`~panstream.errors.FencedError`; readers of a state topic
ignore it). A claim not higher than the stored epoch is allowed only if a commit proves the member
current (:meth:`GroupLoop._still_current`); a proof that meets a rebalance proves neither, so the
partition stays unclaimed, unread and paused and is claimed after the next poll.

**A member evicted** (issue 38's last round; before, exit 1): a save the fence refuses drops that
task unsaved, its offsets uncommitted (:meth:`GroupLoop._migrated`), and a claim it refuses waits
paused like a claim that met a rebalance; either says one line and the member goes on. Its
consumer learns of the eviction at its next poll and rejoins, as a Kafka Streams member does after
a ``TaskMigratedException``. Nothing is lost: the new owner holds the state and re-applies the
records after the last commit. Before, the member stopped, and a member evicted only by a starved
CPU (a 2-core machine under load) ended a bounded run with exit 1.

**A commit that meets a rebalance** (kafka-python's ``RebalanceInProgressError``, or
``CommitFailedError`` for a generation the group has left: librdkafka's ``ILLEGAL_GENERATION``)
does not stop the member where the store is fenced: the tasks were made durable under the
member's claimed epoch first, so the checkpointer leaves the offsets uncommitted
(:class:`~panstream.errors.CommitDeferredError`), the member says so once per checkpoint and goes
on. If it keeps the partition, its next checkpoint (or the save on revoke) commits them; if the
partition moves, its next owner restores the snapshot and re-reads the records after the last
commit: a replay, harmless for the bit table, counted twice by the counter family, as after a
crash. The final checkpoint's commit meeting a rebalance exits 0 only if the broker already holds
offsets at least as far (:meth:`GroupLoop.final_checkpoint`), else one line, exit 1. Without a
fenced store (tests) the member stops as before.

Before issue 35 the three layouts were a subclass chain (``KafkaTail`` <- ``SliceStage`` <-
``WindowSliceStage``), the last overriding most of its parents' steps and drifting from them (its
revoke left the lag gauges). They are now one loop and three task kinds; the old names are thin
constructors of it, and the state they write is unchanged.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka import KafkaAdminClient, TopicPartition
from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener
from kafka.errors import (
    CommitFailedError,
    KafkaError,
    RebalanceInProgressError,
    UnsupportedCodecError,
)
from kafka.structs import OffsetAndMetadata

from panstream.calibration import DEFAULT_MODULUS
from panstream.errors import (
    ClaimDeferredError,
    CommitDeferredError,
    FencedError,
    PanstreamError,
    SourceError,
)
from panstream.sources.kafka.config import unreachable_message
from panstream.sources.kafka.identity import RecordGate
from panstream.sources.kafka.joins import commit_on_revoke, group_consumer
from panstream.sources.kafka.metrics import Metrics
from panstream.sources.kafka.progress import ranges
from panstream.sources.kafka.task import Task, TaskKind, TaskState
from panstream.state.checkpoint import Checkpointer, CommitClock, Shard, ShardStore
from panstream.state.fence import FencedSaves, FencedStore
from panstream.state.files import one_directory_sync
from panstream.universe import Universe

log = logging.getLogger("panstream.kafka")

@dataclass
class TailConfig:
    """What a :class:`GroupLoop` (:class:`~.tail.KafkaTail`, the slice stages) runs with (built
    by ``panstream kafka``): ``estimator`` names the shards' family (``density``: ``calibration``
    applies; ``frequency``: ``modulus``); ``fmt`` the line format of the items (``panstream
    ingest -f``: plain, clf, field:N, auto)."""

    consumer: dict[str, Any]
    topics: list[str]
    universe: Universe
    epsilon: float
    calibration: str
    store: ShardStore
    value_format: str = "item"
    checkpoint_interval: float = 5.0
    idle_timeout: float | None = None
    poll_timeout_ms: int = 200
    estimator: str = "density"
    modulus: int = DEFAULT_MODULUS
    fmt: str = "plain"
    #: The per-partition layout (``--layout partition``): the producers' partitioner every applied
    #: message is checked against (``murmur2`` or ``crc32``, :mod:`~panstream.sources.kafka.keyed`),
    #: recorded in the shards; ``None``: nothing checked or recorded (the routed stages).
    partitioner: str | None = None


@dataclass
class RunSummary:
    """Operational summary of one run (printed; never stored).

    ``messages``, ``items``, ``malformed`` and ``outside`` are sums of the per-window telemetry
    releases (noisy unless ``exact_counts``; ``count_sd`` is the sd of each such total).
    """

    partitions: list[str] = field(default_factory=list)
    messages: int = 0
    items: int = 0
    malformed: int = 0
    outside: int = 0
    exact_counts: bool = False
    telemetry_epsilon: float | None = None
    count_sd: float = 0.0
    checkpoints: int = 0
    rebalances: int = 0
    seconds: float = 0.0
    stopped_by: str = ""


#: The Python package kafka-python needs to read records of each compression codec (gzip is in
#: the standard library). panstream depends on all three, so a topic written by any producer
#: (librdkafka's shippers compress with any of them) decodes.
CODEC_PACKAGES = {"snappy": "python-snappy", "lz4": "lz4", "zstd": "zstandard"}


def codec_message(exc: Exception) -> str:
    """One line for records whose compression codec kafka-python cannot decode here.

    Example:
        >>> codec_message(UnsupportedCodecError("Libraries for lz4 compression codec not found"))[:60]
        'a source topic holds lz4-compressed records and the Python p'
    """
    text = str(exc)
    name = next((c for c in CODEC_PACKAGES if c in text), None)
    if name is None:
        return (f"a source topic holds records in a compression codec kafka-python cannot decode "
                f"({text}); nothing after the last checkpoint was committed")
    return (f"a source topic holds {name}-compressed records and the Python package "
            f"{CODEC_PACKAGES[name]!r} (a panstream dependency) is not installed: pip install "
            f"{CODEC_PACKAGES[name]} (or reinstall panstream), then restart; nothing after the "
            "last checkpoint was committed")


@contextlib.contextmanager
def kafka_errors() -> Iterator[None]:
    """Turn a ``KafkaError`` of the consumer loop into a one-line :class:`SourceError` (or the
    panstream error that caused it, e.g. a shard that could not be saved on revoke)."""
    try:
        yield
    except UnsupportedCodecError as exc:
        raise SourceError(codec_message(exc)) from None
    except KafkaError as exc:
        cause = exc.__cause__ if isinstance(exc.__cause__, Exception) else exc
        if isinstance(cause, PanstreamError):
            raise cause from None
        msg = (f"Kafka consumer failed: {exc}; offsets after the last checkpoint were not "
               "committed, a restart replays them (harmless)")
        raise SourceError(msg) from None


class _Rebalance(AsyncConsumerRebalanceListener):
    """Runs on kafka-python's IO thread while the main thread waits in ``poll()``/``close()``."""

    def __init__(self, tail: GroupLoop) -> None:
        self.tail = tail

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        offsets = self.tail._release(revoked, save=True)
        await commit_on_revoke(self.tail.consumer, offsets, "commit",
                               "replays a few messages from the previous commit")

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.tail._assigned(assigned)

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.tail._release(lost, save=False)


class RecordDeletes:
    """DeleteRecords of the internal records a commit covers (module docstring): ``state`` is
    ``on``, ``off`` (no admin client) or ``unsupported`` (the broker refused once: retention).

    Args:
        client: connection settings of the admin client (``None``: never delete).
        notice: where the one line about a broker without DeleteRecords goes.
    """

    def __init__(self, client: Mapping[str, Any] | None, notice: Callable[[str], None]) -> None:
        self.client = dict(client) if client is not None else None
        self.admin: Any = None
        self.state = "on" if client is not None else "off"
        self.notice = notice

    def __call__(self, committed: Mapping[Any, int]) -> None:
        """Delete the internal records before the committed offsets (durable in a slice)."""
        if self.state != "on" or self.client is None:
            return
        try:
            if self.admin is None:
                self.admin = KafkaAdminClient(**self.client)
            self.admin.delete_records({tp: off for tp, off in committed.items()})
        except Exception as exc:  # noqa: BLE001 - retention is the fallback; never fail on it
            self.state = "unsupported"
            self.notice(f"the broker did not delete consumed internal records "
                        f"({type(exc).__name__}); they expire with the internal topic's "
                        "retention.ms instead (never shorter than the source topics')")
            self.close()

    def close(self) -> None:
        if self.admin is not None:
            with contextlib.suppress(Exception):  # closing a broken client
                self.admin.close()
            self.admin = None


class GroupLoop:
    """A consumer-group member holding one task per assigned partition (module docstring).

    Args:
        config: :class:`TailConfig`.
        kind: the layout's :class:`~panstream.sources.kafka.task.TaskKind`.
        metrics: a :class:`Metrics` (a private one without HTTP endpoint if ``None``).
        consumer_factory: builds the ``KafkaConsumer`` from settings (tests, benchmarks).
        wall_clock: the wall clock time-driven tasks run on (windows; tests inject one).
        admin_client: connection settings for DeleteRecords of the records each commit covers
            (the routed layouts' internal topic; ``None``: never delete).
    """

    #: Whether a checkpoint's commit that meets a rebalance waits for the next checkpoint
    #: (:class:`~panstream.errors.CommitDeferredError`) instead of stopping the member, where the
    #: store is fenced (module docstring): every layout's choice; a test may turn it off.
    defers_rebalanced_commits = True

    def __init__(self, config: TailConfig, kind: TaskKind, metrics: Metrics | None = None,
                 consumer_factory: Callable[..., Any] = group_consumer,
                 wall_clock: Callable[[], float] = time.time,
                 admin_client: Mapping[str, Any] | None = None) -> None:
        self.config = config
        self.kind = kind
        self.metrics = metrics or Metrics()
        self.wall_clock = wall_clock
        self.tasks: dict[TopicPartition, Task] = {}
        self._pending: set[TopicPartition] = set()
        self._consumer_factory = consumer_factory
        self.consumer: Any = None
        #: Where one-line operational notices go (the CLI prints them on stderr).
        self.notice: Callable[[str], None] = log.info
        #: Called with the partition numbers held after new tasks were restored (the CLI's
        #: "this member now holds" line; ``None``: nothing).
        self.on_assign: Callable[[list[int]], None] | None = None
        #: Admits the internal records of this group's definition (``None``: every record, as
        #: before issue 35; :mod:`panstream.sources.kafka.identity`).
        self.gate: RecordGate | None = None
        #: DeleteRecords after each commit (:class:`RecordDeletes`).
        self.deleter = RecordDeletes(admin_client, lambda line: self.notice(line))
        kind.bind(self)
        claims = kind.claims()
        store = claims if claims is not None else config.store
        #: The fenced store (None: a store without claims, e.g. a test's dict): its claims by key,
        #: and the generation each new partition was assigned in (read on the IO thread).
        self._fenced: FencedStore | None = store if isinstance(store, FencedStore) else None
        self._epochs: dict[str, int] = {}
        self._generations: dict[TopicPartition, int] = {}
        #: Partitions whose claim met a rebalance and waits (said once each).
        self._claim_waits: set[TopicPartition] = set()
        #: What tasks save through: every save carries its key's claimed epoch.
        self.saves: ShardStore = (config.store if not isinstance(config.store, FencedStore)
                                  else FencedSaves(config.store, self._epochs))
        self.checkpointer = Checkpointer(self.saves, self._commit_sync)
        self.summary = RunSummary()
        self._last_activity = time.monotonic()
        self._ever_assigned = False
        self._last_lag = 0.0
        self._final_checkpoint_done = False
        #: The offsets of the last checkpoint whose commit met a rebalance, and why (else empty).
        self._deferred: dict[Any, int] = {}
        self._deferred_why = ""

    @property
    def deletes(self) -> str:
        """``on``, ``off`` or ``unsupported`` (:class:`RecordDeletes`)."""
        return self.deleter.state

    @property
    def _admin(self) -> Any:
        return self.deleter.admin

    @_admin.setter
    def _admin(self, admin: Any) -> None:  # tests hand in a fake admin client
        self.deleter.admin = admin

    @property
    def shards(self) -> dict[TopicPartition, Shard]:
        """``{partition: its task's shard}`` (a copy: the tasks are the state)."""
        return {tp: t.shard for tp, t in self.tasks.items()}

    def commit_clock(self) -> CommitClock:
        """The checkpoint grid for another committer of this member: the routing stage's source
        commits fall on the same instants as this loop's checkpoints (one clock, issue 35)."""
        return self.checkpointer.follower(self.config.checkpoint_interval)

    # -------------------------------------------------------------- commits
    @staticmethod
    def _offsets(offsets: Mapping[Hashable, int]) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: OffsetAndMetadata(off, "", -1) for tp, off in offsets.items()}

    def _commit_sync(self, offsets: dict[Hashable, int]) -> None:
        """Commit ``offsets`` (the checkpointer's step 4).

        Raises:
            CommitDeferredError: the commit met a rebalance (kafka-python's
                ``RebalanceInProgressError``; ``CommitFailedError`` for a generation the group
                has left behind, librdkafka's ``ILLEGAL_GENERATION`` included), where
                :attr:`defers_rebalanced_commits` and the store is fenced.
            SourceError: any other failed commit (or that one elsewhere).
        """
        try:
            self.consumer.commit(self._offsets(offsets))
        except KafkaError as exc:
            if (isinstance(exc, CommitFailedError | RebalanceInProgressError)
                    and self.defers_rebalanced_commits and self._fenced is not None):
                raise CommitDeferredError(" ".join(str(exc).split())) from None
            msg = (f"offset commit failed: {exc}; the snapshots are durable, so a restart replays "
                   "a few messages, which is harmless")
            raise SourceError(msg) from None

    def _durable(self, tasks: Iterable[Task], now: float | None,
                 fenced: list[Task] | None = None) -> dict[Hashable, int]:
        """Steps 1-3 of a checkpoint: every task's snapshot durable; the offsets to commit.

        A save the fence refuses (another member claimed the partition since: this one was
        evicted) is not fatal where ``fenced`` collects it: the task is left out of the offsets,
        and the caller drops it (:meth:`_migrated`)."""
        offsets: dict[Hashable, int] = {}
        with one_directory_sync() if self.kind.one_sync else contextlib.nullcontext():
            for task in tasks:
                try:
                    task.snapshot(now)
                except FencedError:
                    if fenced is None or self._fenced is None:
                        raise
                    fenced.append(task)
                    continue
                if task.shard.next_offset is not None:
                    offsets[task.shard.partition] = task.shard.next_offset
        return offsets

    def _migrated(self, fenced: list[Task], revoked: bool = False) -> None:
        """Drop the tasks whose save the fence refused (module docstring, *A member evicted*):
        their partitions moved to a newer owner while this member was away, so their tables are
        wiped unsaved, their offsets left uncommitted (the owner re-applies those records from
        the last commit: nothing is lost), and the member goes on: its consumer learns of the
        eviction at its next poll and rejoins the group, as Kafka Streams' members do after a
        ``TaskMigratedException``. Said once per checkpoint. A final checkpoint counts their
        offsets as deferred (:meth:`final_checkpoint`)."""
        tps = [tp for tp, t in self.tasks.items() if any(t is f for f in fenced)]
        if not revoked:  # (a revoke's caller closes them; no later checkpoint reads its offsets)
            with contextlib.suppress(Exception):  # a consumer that already dropped them
                self.consumer.pause(*tps)
            self._release(set(tps), save=False)
            self._deferred.update({f.shard.partition: f.shard.next_offset for f in fenced
                                   if f.shard.next_offset is not None})
            self._deferred_why = self._deferred_why or "another member claimed them since"
        self.notice(f"{self._where(tps)}: another member claimed them since (the store shows a "
                    "newer epoch: this member was evicted from its group, e.g. by a long pause or "
                    "a starved CPU); their tables are dropped unsaved and their records after the "
                    "last commit are left to the new owner (nothing is lost); this member goes on "
                    "and rejoins the group")

    def checkpoint(self, final: bool = False) -> None:
        """Every task durable, then commit (:mod:`panstream.state.checkpoint`), then the records
        the commit covers deleted, then the kind's step (windows released); a commit that met a
        rebalance is said and left to the next checkpoint (module docstring)."""
        tasks = list(self.tasks.values())
        now = self.wall_clock()
        fenced: list[Task] = []
        res = self.checkpointer.run(lambda: self._durable(tasks, now, fenced),
                                    tuple(t.shard.key for t in tasks))
        if res.saved or self.kind.every_checkpoint:
            self.metrics.checkpoints.inc()
            self.summary.checkpoints += 1
        self.metrics.show_committed(res.committed)  # what the broker shows any group client
        if res.committed:
            self.deleter(res.committed)  # nothing deleted while the commit waits
        self._defer(res.deferred, res.why)
        if fenced:
            self._migrated(fenced)
        self.kind.checkpointed(final)

    def _where(self, tps: Iterable[Any]) -> str:
        """``events partitions 0-3`` (per topic, ``; `` between topics): public names."""
        by: dict[str, list[int]] = {}
        for tp in tps:
            by.setdefault(tp.topic, []).append(tp.partition)
        return "; ".join(f"{t} {self.kind.unit} {ranges(ps)}" for t, ps in sorted(by.items()))

    def _defer(self, offsets: Mapping[Any, int], why: str) -> None:
        """Remember the offsets of this checkpoint whose commit met a rebalance (empty: none),
        and say so once for the checkpoint."""
        self._deferred, self._deferred_why = dict(offsets), why
        if offsets:
            self.notice(f"a commit of {self._where(offsets)} met a rebalance ({why}); their "
                        "snapshots are durable: it is retried at the next checkpoint, or their "
                        "next owner re-applies their records from the last commit")

    def _behind(self, offsets: Mapping[Any, int]) -> list[Any]:
        """The partitions of ``offsets`` whose committed offset (asked of the broker) is lower, or
        unknown."""
        out = []
        for tp, off in offsets.items():
            try:
                done = self.consumer.committed(tp)
            except Exception:  # noqa: BLE001 - a broker that cannot say: behind
                done = None
            if done is None or int(done) < int(off):
                out.append(tp)
        return sorted(out)

    # -------------------------------------------------------------- fencing
    def _generation(self) -> int:
        """This member's generation in its consumer group (kafka-python's coordinator, or
        :class:`~panstream.sources.kafka.rdkafka.RdKafkaConsumer`'s view of librdkafka's; 0 if it
        cannot say, which :func:`~panstream.state.fence.claim_epoch` counts as 1)."""
        coordinator = getattr(self.consumer, "_coordinator", None)
        gen = getattr(getattr(coordinator, "_generation", None), "generation_id", None)
        return gen if isinstance(gen, int) and gen > 0 else 0

    def _still_current(self, tp: TopicPartition) -> bool:
        """Whether this member is in the group's current generation: Kafka accepts a commit only
        from one. The offset committed is the partition's committed one again (its log start if
        none: where an uncommitted partition starts anyway), which changes nothing.

        Raises:
            ClaimDeferredError: the commit met a rebalance (kafka-python's
                ``RebalanceInProgressError``, raised while its member rejoins; librdkafka's
                ``REBALANCE_IN_PROGRESS``): neither answer can be given now. Before, that was
                "not current", and a current member stopped on the fence (``FencedError``,
                exit 1) whenever a rebalance began between its assignment and its claim.
        """
        try:
            off = self.consumer.committed(tp)
            if off is None:
                off = self.consumer.beginning_offsets([tp])[tp]
            self.consumer.commit({tp: OffsetAndMetadata(int(off), "", -1)})
        except RebalanceInProgressError as exc:
            raise ClaimDeferredError(" ".join(str(exc).split())) from None
        except KafkaError:
            return False
        return True

    def _claim(self, tp: TopicPartition) -> None:
        """Claim the partition's state for this member before its snapshot is read, with the
        generation of its assignment (module docstring; nothing without a fenced store).

        Raises:
            FencedError: a newer owner claimed it and this member is not current (a zombie).
        """
        if self._fenced is None:
            return
        gen = self._generations.get(tp)  # kept until the claim is made (a deferred one retries)
        if gen is None:
            gen = self._generation()
        key = self.kind.claim_key(tp)
        self._epochs[key] = self._fenced.claim(key, gen, lambda: self._still_current(tp))
        self._generations.pop(tp, None)
        self._claim_waits.discard(tp)

    def _unclaim(self, tp: TopicPartition) -> None:
        """Forget this member's claim of a partition it gave up (a later assignment claims
        again); the store keeps the claim, so a save of this member's is refused from now on."""
        self._epochs.pop(self.kind.claim_key(tp), None)
        self._generations.pop(tp, None)
        self._claim_waits.discard(tp)

    # -------------------------------------------------------------- rebalance (IO thread)
    def _assigned(self, assigned: set[TopicPartition]) -> None:
        gen = self._generation()  # the generation of this assignment (IO thread, in the callback)
        new = [tp for tp in assigned if tp not in self.tasks]
        self._generations.update(dict.fromkeys(new, gen))
        if new:
            self.consumer.pause(*new)
            self._pending.update(new)
        self._ever_assigned = True
        self._last_activity = time.monotonic()
        self.summary.rebalances += 1
        self.metrics.rebalances.inc()

    def _release(self, tps: set[TopicPartition], save: bool
                 ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Close the tasks of ``tps``; with ``save``, make them durable first and return their
        offsets (the listener commits them)."""
        tasks = [self.tasks[tp] for tp in tps if tp in self.tasks]
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        # On close() after the final checkpoint every task is durable and nothing was processed
        # since: no second write (the same whatever arrived: this is the close path, always).
        if save and tasks and not self._final_checkpoint_done:
            fenced: list[Task] = []
            offsets = self._offsets(self._durable(tasks, None, fenced))  # snapshots durable first
            self.checkpointer.done()
            self.metrics.checkpoints.inc()
            if fenced:  # a zombie told of a revoke: those saves refused, nothing of theirs committed
                self._migrated(fenced, revoked=True)
        for tp in tps:
            task = self.tasks.pop(tp, None)
            if task is not None:
                task.state = TaskState.SUSPENDED if save else task.state
                task.close()
                task.state = TaskState.CLOSED
            self._pending.discard(tp)
            self._unclaim(tp)
        self._last_activity = time.monotonic()  # a rebalance is not idleness
        self.metrics.forget(tps)
        self.metrics.assigned.set(len(self.tasks))
        return offsets

    # -------------------------------------------------------------- main thread
    def _restore(self, tp: TopicPartition) -> Shard:
        """Claim a newly assigned partition, restore its task and hold it; its shard.

        Raises:
            ClaimDeferredError: the claim met a rebalance (nothing claimed or read).
            FencedError: a newer owner claimed the partition (this member is a zombie).
            StateError: the snapshot is corrupt or has other parameters.
        """
        self._claim(tp)
        task = self.kind.task(tp)
        task.state = TaskState.RESTORING
        task.restore()
        task.state = TaskState.RUNNING
        self.tasks[tp] = task
        return task.shard

    def _restore_pending(self) -> None:
        if not self._pending:
            return
        fresh = sorted(self._pending)
        refresh = getattr(self.config.store, "refresh", None)
        if refresh is not None:
            refresh()  # one replay of a state topic for the whole batch
        waiting: set[TopicPartition] = set()
        for tp in fresh:
            try:
                self._restore(tp)
            except (ClaimDeferredError, FencedError) as exc:  # nothing claimed, read, written
                waiting.add(tp)                                 # try again after the next poll
                if tp not in self._claim_waits:
                    self._claim_waits.add(tp)
                    self.notice(self._claim_wait_line(tp, exc))
        ready = [tp for tp in self._pending if tp not in waiting]
        self._pending = waiting
        self.consumer.resume(*ready)
        self.metrics.assigned.set(len(self.tasks))
        self._last_activity = time.monotonic()  # idle time counts from when reading can start
        self.kind.restored(fresh)
        if self.on_assign is not None:
            self.on_assign(sorted(tp.partition for tp in self.tasks))

    def _claim_wait_line(self, tp: TopicPartition, exc: Exception) -> str:
        """The one line of a claim that waits: it met a rebalance, or the fence refused it (the
        member was assigned in a generation the group has left: it was evicted, and its consumer
        rejoins at the next poll, which moves the partition)."""
        if isinstance(exc, ClaimDeferredError):
            return (f"the claim of {self._where([tp])} met a rebalance ({exc}); it stays paused "
                    "and is claimed after the next poll, unless the rebalance moves it")
        return (f"the claim of {self._where([tp])} was refused: a newer owner claimed it and this "
                "member is not in the group's current generation (it was evicted, e.g. by a long "
                "pause or a starved CPU); nothing was read or written; it stays paused and is "
                "claimed again after the next poll, until the member's rejoin moves it")

    def _apply(self, records: Mapping[TopicPartition, list[Any]]) -> None:
        """Each partition's records to its task (the group's identity check first, where the
        loop has a :attr:`gate`); the telemetry counts where the kind counts."""
        msgs = items = malformed = outside = 0
        gate = self.gate
        for tp, recs in records.items():
            task = self.tasks.get(tp)
            if task is None or not recs:
                continue
            n, k, m, o = task.apply(recs if gate is None else
                                    [r for r in recs if not r.value or gate.admits(r, tp.partition)])
            task.shard.applied(recs[-1].offset)
            msgs, items, malformed, outside = msgs + n, items + k, malformed + m, outside + o
        if self.kind.counts:
            self.metrics.batch(msgs, items, malformed, outside)

    def _update_lag(self) -> None:
        self.metrics.show_lag(self.consumer, self.shards)
        self.metrics.since_checkpoint.set(self.checkpointer.seconds_since_durable())

    def run(self, stop: threading.Event | None = None) -> RunSummary:
        """Consume until ``stop`` is set or ``idle_timeout`` passes without messages.

        Always ends with a final checkpoint and commit and leaves the group.

        Raises:
            SourceError: the broker is unreachable or a commit failed.
            StateError: a task could not be saved or restored.
        """
        stop = stop or threading.Event()
        t0 = time.monotonic()
        self.open()
        try:
            with kafka_errors():
                while not stop.is_set():
                    now = time.monotonic()
                    if not self.poll_once() and self.idle(now):
                        self.summary.stopped_by = "idle-timeout"
                        break
                    self.metrics.tick(now)
                    self.maintain(now)
                else:
                    self.summary.stopped_by = "signal"
                self.final_checkpoint()
        finally:
            self.close()
            self.metrics.close_window()  # the last (partial) window, released like the others
            self._summarize_counts()
            self.summary.seconds = time.monotonic() - t0
        return self.summary

    # The steps of run(), also driven one at a time by a member running two stages
    # (panstream.sources.kafka.member).
    def open(self) -> None:
        """Create the consumer and join the group (subscribe); then the kind's own opening.

        Raises:
            SourceError: no broker answered.
        """
        cfg = self.config
        try:
            self.consumer = self._consumer_factory(**cfg.consumer)
        except KafkaError as exc:
            raise SourceError(unreachable_message(cfg.consumer, exc)) from None
        self.consumer.subscribe(topics=list(cfg.topics), listener=_Rebalance(self))
        self._last_activity = time.monotonic()
        self._last_lag = 0.0
        self.kind.open()

    def poll_once(self, timeout_ms: int | None = None) -> bool:
        """One poll: restore newly assigned tasks, apply the records. Whether any came."""
        timeout = self.config.poll_timeout_ms if timeout_ms is None else timeout_ms
        # The fixed clock: a poll never waits past the next checkpoint instant, so no arrival
        # (and no quiet spell) can move a checkpoint (see state/checkpoint.py).
        wait = self.checkpointer.seconds_until_due(self.config.checkpoint_interval)
        records = self.consumer.poll(timeout_ms=min(timeout, int(wait * 1000) + 1))
        self._restore_pending()
        if not records:
            return False
        self._apply(records)
        self._last_activity = time.monotonic()
        return True

    def idle(self, now: float) -> bool:
        """Whether ``idle_timeout`` has passed without messages (30 s more before the first
        assignment: a group join is not idleness)."""
        if self.config.idle_timeout is None:
            return False
        grace = 0.0 if self._ever_assigned else 30.0
        return now - self._last_activity >= self.config.idle_timeout + grace

    def maintain(self, now: float) -> None:
        """The kind's turn (windows opened on the clock), the checkpoint if due; the lag gauges
        once a second."""
        self.kind.turn(self.wall_clock())
        if self.checkpointer.due(self.config.checkpoint_interval):
            self.checkpoint()
        if now - self._last_lag >= 1.0:
            self._update_lag()
            self._last_lag = now

    def drain(self, seconds: float) -> None:
        """Apply what waits in this member's partitions until caught up (two quiet polls at the
        high-water marks), at most ``seconds``: a stopping member's last records first."""
        deadline = time.monotonic() + seconds
        quiet = 0
        while time.monotonic() < deadline and quiet < 2:
            quiet = 0 if self.poll_once(200) else quiet + 1
            if quiet and not self._caught_up():
                quiet = 0

    def _caught_up(self) -> bool:
        c = self.consumer
        for tp in self.tasks:
            hw = c.highwater(tp)
            pos = c.position(tp, timeout_ms=0) if hw is not None else None
            if hw is not None and pos is not None and pos < hw:
                return False
        return True

    def final_checkpoint(self) -> None:
        """The last checkpoint (snapshots durable, then commit) before leaving the group. If its
        commit met a rebalance, the member exits 0 only if the broker already holds offsets at
        least as far (a drained member commits what was committed already); otherwise it says
        what is pending and stops with exit 1.

        Raises:
            SourceError: the final commit met a rebalance and the broker's offsets are behind.
        """
        self.checkpoint(final=True)
        self._final_checkpoint_done = True  # durable: close() writes nothing more
        self.summary.partitions = sorted(t.shard.key for t in self.tasks.values())
        behind = self._behind(self._deferred)
        if behind:
            msg = (f"the final commit of {self._where(behind)} met a rebalance "
                   f"({self._deferred_why}); their snapshots are durable and nothing is lost, but "
                   "their records after the last commit are pending: their next owner re-applies "
                   "them (the frequency family counts those twice); run the group's members "
                   "until it drains, then release")
            raise SourceError(msg)

    def close(self) -> None:
        """Leave the group and wipe every task (after :meth:`final_checkpoint`, or on error)."""
        with contextlib.suppress(Exception):
            if self.consumer is not None:
                self.consumer.close(autocommit=False)  # leaves the group; revoke finds nothing dirty
        for task in self.tasks.values():
            task.close()
            task.state = TaskState.CLOSED
        self.tasks.clear()
        self._epochs.clear()
        self.deleter.close()
        self.kind.close()

    def _summarize_counts(self) -> None:
        """Copy the released (noisy unless opted out) totals into the summary."""
        w, s = self.metrics.window, self.summary
        if w is None:  # the default: nothing counted
            return
        s.messages, s.items = w.totals["messages"], w.totals["items"]
        s.malformed, s.outside = w.totals["malformed"], w.totals["outside"]
        s.exact_counts, s.telemetry_epsilon = w.policy.exact, w.policy.epsilon
        s.count_sd = w.total_sd()
