"""The consumer-group member: one shard table per assigned partition (see the package docstring).

**Fenced snapshots** (:mod:`panstream.state.fence`, issue 26). On assignment :class:`KafkaTail`
claims each new partition's state in the store with its generation in the consumer group, before
it reads the snapshot, and every later save of that state carries the claimed epoch: a member
evicted while it went on running (a "zombie", e.g. SIGSTOPped past its session) can no longer
write its older table over the new owner's (a state directory refuses the save with
:class:`~panstream.errors.FencedError`, exit 1; readers of a state topic ignore it). A claim not
higher than the stored epoch is allowed only if a commit proves the member current
(:meth:`KafkaTail._still_current`); a proof that meets a rebalance (``RebalanceInProgressError``)
proves neither, so the partition stays unclaimed, unread and paused and is claimed after the next
poll (:class:`~panstream.errors.ClaimDeferredError`; before, a current member stopped on the
fence). The per-partition layout, the routed slice stage
(:class:`~panstream.sources.kafka.slices.SliceStage`) and the window slices
(:class:`~panstream.sources.kafka.windows.WindowSliceStage`) all inherit this.

**A commit that meets a rebalance** (kafka-python's ``RebalanceInProgressError``, or
``CommitFailedError`` for a generation the group has left: librdkafka's ``ILLEGAL_GENERATION``)
does not stop the member where the store is fenced: the shards were made durable under the
member's claimed epoch first, so the :class:`~panstream.state.checkpoint.Checkpointer` leaves the
offsets uncommitted (:class:`~panstream.errors.CommitDeferredError`), the member says so once per
checkpoint and goes on. If it keeps the partition, its next checkpoint (or the save on revoke)
commits them; if the partition moves, its next owner restores the shard and re-reads the records
after the last commit: a replay, harmless for the bit table, counted twice by the counter family,
as after a crash. The final checkpoint's commit meeting a rebalance exits 0 only if the broker
already holds offsets at least as far (:meth:`KafkaTail.final_checkpoint`), else one line, exit 1.
The routed slices (:mod:`~panstream.sources.kafka.slices`) and the window-slices
(:mod:`~panstream.sources.kafka.windows`, where a replay into a window closed since is dropped)
inherit this. Without a fenced store (tests) the member stops as before.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka import TopicPartition
from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener
from kafka.errors import (
    CommitFailedError,
    KafkaError,
    RebalanceInProgressError,
    UnsupportedCodecError,
)
from kafka.structs import OffsetAndMetadata

from panstream import estimators
from panstream.calibration import DEFAULT_MODULUS
from panstream.errors import (
    ClaimDeferredError,
    CommitDeferredError,
    PanstreamError,
    SourceError,
    StateError,
)
from panstream.estimators.base import Estimator
from panstream.release.ledger import ShardLedger
from panstream.sources.kafka.config import unreachable_message
from panstream.sources.kafka.decode import Decoder
from panstream.sources.kafka.joins import group_consumer
from panstream.sources.kafka.keyed import KeyCheck, require_keyable
from panstream.sources.kafka.metrics import Metrics
from panstream.sources.kafka.progress import ranges
from panstream.state.checkpoint import Checkpointer, Shard, ShardStore, restore_shard, shard_key
from panstream.state.fence import FencedSaves, FencedStore
from panstream.state.keying import Keying, keying_of
from panstream.state.slices import head_params
from panstream.state.stores import decode_shard, encode_shard
from panstream.universe import Universe

log = logging.getLogger("panstream.kafka")

@dataclass
class TailConfig:
    """What :class:`KafkaTail` runs with (built by ``panstream kafka``): ``estimator`` names the
    shards' family (``density``: ``calibration`` applies; ``frequency``: ``modulus``); ``fmt``
    the line format of the items (``panstream ingest -f``: plain, clf, field:N, auto)."""

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

    def __init__(self, tail: KafkaTail) -> None:
        self.tail = tail

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        offsets = self.tail._release(revoked, save=True)
        if offsets:
            try:
                await self.tail.consumer.commit_async(offsets)
            except Exception as exc:  # noqa: BLE001 - a failed commit only means a replay
                log.warning("commit on revoke failed (%s): the next owner replays a few messages "
                            "from the previous commit, which is harmless", exc)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.tail._assigned(assigned)

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.tail._release(lost, save=False)


class KafkaTail:
    """A consumer-group member keeping one shard table per assigned partition.

    Args:
        config: :class:`TailConfig`.
        metrics: a :class:`Metrics` (a private one without HTTP endpoint if ``None``).
        consumer_factory: builds the ``KafkaConsumer`` from settings (tests, benchmarks).

    Example:
        (needs a broker; see ``tests/kafka/``)::

            tail = KafkaTail(TailConfig(consumer_config("127.0.0.1:9092", "g"), ["events"],
                             Universe.parse("ipv4:10.0.0.0/16"), 1.0, "rr",
                             DirectoryStore("state")))
            summary = tail.run(stop=threading.Event())
    """

    def __init__(self, config: TailConfig, metrics: Metrics | None = None,
                 consumer_factory: Callable[..., Any] = group_consumer) -> None:
        self.config = config
        self.metrics = metrics or Metrics()
        self.decoder = Decoder(config.universe, config.value_format, config.fmt)
        self.shards: dict[TopicPartition, Shard] = {}
        self._pending: set[TopicPartition] = set()
        self._consumer_factory = consumer_factory
        self.consumer: Any = None
        #: The fenced store (None: a store without claims, e.g. a test's dict): its claims by key,
        #: and the generation each new partition was assigned in (read on the IO thread).
        self._fenced: FencedStore | None = (config.store if isinstance(config.store, FencedStore)
                                            else None)
        self._epochs: dict[str, int] = {}
        self._generations: dict[TopicPartition, int] = {}
        #: Partitions whose claim met a rebalance and waits (said once each).
        self._claim_waits: set[TopicPartition] = set()
        #: What the checkpointer saves through: every save carries its key's claimed epoch.
        self.saves: ShardStore = (config.store if self._fenced is None
                                  else FencedSaves(self._fenced, self._epochs))
        #: The keying check of the per-partition layout (None: not checked); the placement each
        #: shard's messages are checked against (its topic's partition count read at its
        #: restore), and the record its snapshots carry (None: a shard restored without one; it
        #: stays without, its earlier arrivals were never checked).
        self.keyed: KeyCheck | None = None
        if config.partitioner is not None:
            require_keyable(config.value_format)
            self.keyed = KeyCheck(config.universe, config.partitioner)
        self._checked: dict[TopicPartition, Keying] = {}
        self._records: dict[TopicPartition, Keying | None] = {}
        self.checkpointer = Checkpointer(self.saves, self._commit_sync, self._encode)
        self.summary = RunSummary()
        self._last_activity = time.monotonic()
        #: Where one-line operational notices go (the CLI prints them on stderr).
        self.notice: Callable[[str], None] = log.info
        self._announced = False
        self._ever_assigned = False
        self._last_lag = 0.0
        self._final_checkpoint_done = False
        #: The offsets of the last checkpoint whose commit met a rebalance, and why (else empty).
        self._deferred: dict[Any, int] = {}
        self._deferred_why = ""

    # -------------------------------------------------------------- estimators
    def _fresh(self) -> Estimator:
        # A shard has no budget of its own: the group's ledger (ensure_ledger) is the only one.
        c = self.config
        return estimators.new(c.estimator, c.universe, c.epsilon, calibration=c.calibration,
                              modulus=c.modulus, ledger=ShardLedger())

    def _decode(self, data: bytes | bytearray) -> Estimator:
        c = self.config
        return decode_shard(data, c.universe, c.epsilon, c.calibration, kind=c.estimator,
                            modulus=c.modulus)

    def _encode(self, est: Estimator) -> bytearray:
        """A shard's snapshot (:func:`~panstream.state.stores.encode_shard`), with its keying
        record where it has one."""
        tp = next((tp for tp, s in self.shards.items() if s.estimator is est), None)
        return encode_shard(est, self._records.get(tp) if tp is not None else None)

    # -------------------------------------------------------------- commits
    @staticmethod
    def _offsets(offsets: Mapping[Hashable, int]) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: OffsetAndMetadata(off, "", -1) for tp, off in offsets.items()}

    #: Whether a checkpoint's commit that meets a rebalance waits for the next checkpoint
    #: (:class:`~panstream.errors.CommitDeferredError`) instead of stopping the member, where the
    #: store is fenced (module docstring, "A commit that meets a rebalance"): every layout's
    #: choice (per-partition shards, routed slices, ``--window`` window-slices); a subclass may
    #: turn it off to stop with exit 1 as before.
    defers_rebalanced_commits = True

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

    def _claim_key(self, tp: TopicPartition) -> str:
        """The store key a partition's claim is held under (its shard's or slice's key)."""
        return shard_key(tp.topic, tp.partition)

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
        key = self._claim_key(tp)
        self._epochs[key] = self._fenced.claim(key, gen, lambda: self._still_current(tp))
        self._generations.pop(tp, None)
        self._claim_waits.discard(tp)

    # -------------------------------------------------------------- rebalance (IO thread)
    def _assigned(self, assigned: set[TopicPartition]) -> None:
        gen = self._generation()  # the generation of this assignment (IO thread, in the callback)
        new = [tp for tp in assigned if tp not in self.shards]
        self._generations.update(dict.fromkeys(new, gen))
        if new:
            self.consumer.pause(*new)
            self._pending.update(new)
        self._ever_assigned = True
        self._last_activity = time.monotonic()
        self.summary.rebalances += 1
        self.metrics.rebalances.inc()

    def _release(self, tps: set[TopicPartition], save: bool) -> dict[TopicPartition, OffsetAndMetadata]:
        """Drop the shards of ``tps``; with ``save``, make them durable first and return offsets."""
        shards = [self.shards[tp] for tp in tps if tp in self.shards]
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        # On close() after the final checkpoint every shard is durable and nothing was processed
        # since: no second write (the same whatever arrived: this is the close path, always).
        if save and shards and not self._final_checkpoint_done:
            offsets = self._offsets(self.checkpointer.durable(shards))  # snapshots durable first
            self.checkpointer.done()
            self.metrics.checkpoints.inc()
        for tp in tps:
            shard = self.shards.pop(tp, None)
            if shard is not None:
                shard.estimator.wipe()
            self._pending.discard(tp)
            self._records.pop(tp, None)
            self._checked.pop(tp, None)
            self._unclaim(tp)
        self.metrics.forget(tps)
        self.metrics.assigned.set(len(self.shards))
        return offsets

    def _unclaim(self, tp: TopicPartition) -> None:
        """Forget this member's claim of a partition it gave up (a later assignment claims
        again); the store keeps the claim, so a save of this member's is refused from now on."""
        self._epochs.pop(self._claim_key(tp), None)
        self._generations.pop(tp, None)
        self._claim_waits.discard(tp)

    # -------------------------------------------------------------- main thread
    def _restore_pending(self) -> None:
        if not self._pending:
            return
        refresh = getattr(self.config.store, "refresh", None)
        if refresh is not None:
            refresh()  # one replay of a state topic for the whole batch
        waiting: set[TopicPartition] = set()
        for tp in sorted(self._pending):
            try:
                self.shards[tp] = self._restore(tp)
            except ClaimDeferredError as exc:  # nothing claimed, read or written: try again
                waiting.add(tp)
                if tp in self._claim_waits:
                    continue
                self._claim_waits.add(tp)
                self.notice(f"the claim of {self._where([tp])} met a rebalance ({exc}); it stays "
                            "paused and is claimed after the next poll, unless the rebalance "
                            "moves it")
        ready = [tp for tp in self._pending if tp not in waiting]
        self._pending = waiting
        self.consumer.resume(*ready)
        self.metrics.assigned.set(len(self.shards))
        self._last_activity = time.monotonic()  # idle time counts from when reading can start

    def _restore(self, tp: TopicPartition) -> Shard:
        """The shard of a newly assigned partition, claimed first: its snapshot, or a fresh
        table.

        Raises:
            FencedError: a newer owner claimed the partition (this member is a zombie).
            StateError: the snapshot is corrupt or has other parameters.
        """
        self._claim(tp)
        if self.keyed is None:
            return restore_shard(self.config.store, shard_key(tp.topic, tp.partition), tp,
                                 self._fresh, self._decode)
        found: list[Keying | None] = []

        def decode(data: bytes | bytearray) -> Estimator:
            found.append(keying_of(head_params(data)))
            return self._decode(data)

        shard = restore_shard(self.config.store, shard_key(tp.topic, tp.partition), tp,
                              self._fresh, decode)
        now = self.keyed.keying(self._partitions(tp.topic))
        rec = found[0] if found else now
        if rec is not None and rec != now:
            shard.estimator.wipe()
            msg = (f"{shard.key} was verified against {rec.describe()}, but this member checks "
                   f"{now.describe()} (the topic's partition count or --partitioner changed): "
                   "its items may now sit in other partitions, so the per-partition layout cannot "
                   "go on with this state; release it with --merge sum and count the topic with "
                   "the routed layout (the default) on a new --state-dir")
            raise StateError(msg)
        if rec is None:
            self.notice(f"{shard.key} was written before panstream checked the keying (issue "
                        "39): this member checks every message from now on, but 'release --merge "
                        "partitioned' refuses the shard (its earlier arrivals were never "
                        "checked): release with --merge sum, or re-read the topic into a new "
                        "--state-dir")
        self._records[tp], self._checked[tp] = rec, now
        return shard

    def _partitions(self, topic: str) -> int:
        """The partition count of ``topic``, as the consumer's metadata has it (read at each
        restore: a topic that grew since a shard's record stops the member there)."""
        parts = self.consumer.partitions_for_topic(topic)
        if not parts:
            msg = (f"the broker did not say how many partitions {topic} has; the per-partition "
                   "layout checks every message against it: retry when the topic is known")
            raise SourceError(msg)
        return len(parts)

    def _apply(self, records: Mapping[TopicPartition, list[Any]]) -> None:
        """Decode the poll, check its keying (the per-partition layout: the whole poll before any
        of it is applied), then apply it."""
        msgs = items = malformed = outside = 0
        batches: list[tuple[TopicPartition, Shard, list[Any], Any]] = []
        try:
            for tp, recs in records.items():
                shard = self.shards.get(tp)
                if shard is None or not recs:
                    continue
                values = [r.value for r in recs]
                dec = self.decoder(values)
                values.clear()
                batches.append((tp, shard, recs, dec))
                det = self.decoder.detection
                if det is not None and not self._announced:  # -f auto: decided once, said once
                    self._announced = True
                    self.notice(f"{', '.join(self.config.topics)}: format {det.name} detected, "
                                f"decided once for this member (-f {det.spec} pins it)")
            if self.keyed is not None:
                for tp, _, recs, dec in batches:
                    self.keyed.check(tp.partition, self._checked[tp].partitions, dec.indices,
                                     recs, self.decoder, tp.topic)
        except BaseException:
            for *_, dec in batches:
                dec.indices.fill(0)
            raise
        for tp, shard, recs, dec in batches:
            n = shard.estimator.update_indices(dec.indices)  # wipes the index array
            shard.applied(recs[-1].offset)
            msgs += len(recs)
            items += n
            malformed += dec.malformed
            outside += dec.outside
        self.metrics.batch(msgs, items, malformed, outside)

    def _update_lag(self) -> None:
        self.metrics.show_lag(self.consumer, self.shards)
        self.metrics.since_checkpoint.set(self.checkpointer.seconds_since_durable())

    def checkpoint(self) -> None:
        """Snapshots durable, then commit (see :mod:`panstream.state.checkpoint`); a commit that
        met a rebalance is said and left to the next checkpoint (module docstring)."""
        res = self.checkpointer.checkpoint(list(self.shards.values()))
        if res.saved:
            self.metrics.checkpoints.inc()
            self.summary.checkpoints += 1
        self.metrics.show_committed(res.committed)  # what the broker shows any group client
        self._defer(res.deferred, res.why)

    # -------------------------------------------------------------- a commit that met a rebalance
    #: What the notices call the partitions this stage owns (``slices`` in the routed stages).
    _unit = "partitions"

    def _where(self, tps: Iterable[Any]) -> str:
        """``events partitions 0-3`` (per topic, ``; `` between topics): public names."""
        by: dict[str, list[int]] = {}
        for tp in tps:
            by.setdefault(tp.topic, []).append(tp.partition)
        return "; ".join(f"{t} {self._unit} {ranges(ps)}" for t, ps in sorted(by.items()))

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

    def _final_deferred(self) -> None:
        """After the final checkpoint: exit 0 only if nothing is pending. A final commit that met
        a rebalance leaves work pending unless the broker already holds offsets at least as far
        (a drained member commits what was committed already).

        Raises:
            SourceError: the final commit met a rebalance and the broker's offsets are behind.
        """
        behind = self._behind(self._deferred)
        if behind:
            msg = (f"the final commit of {self._where(behind)} met a rebalance "
                   f"({self._deferred_why}); their snapshots are durable and nothing is lost, but "
                   "their records after the last commit are pending: their next owner re-applies "
                   "them (the frequency family counts those twice); run the group's members "
                   "until it drains, then release")
            raise SourceError(msg)

    def run(self, stop: threading.Event | None = None) -> RunSummary:
        """Consume until ``stop`` is set or ``idle_timeout`` passes without messages.

        Always ends with a final checkpoint and commit and leaves the group.

        Raises:
            SourceError: the broker is unreachable or a commit failed.
            StateError: a shard could not be saved or restored.
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
        """Create the consumer and join the group (subscribe).

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

    def poll_once(self, timeout_ms: int | None = None) -> bool:
        """One poll: restore newly assigned shards, apply the records. Whether any came."""
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
        """Checkpoint if due; refresh the lag gauges once a second."""
        if self.checkpointer.due(self.config.checkpoint_interval):
            self.checkpoint()
        if now - self._last_lag >= 1.0:
            self._update_lag()
            self._last_lag = now

    def final_checkpoint(self) -> None:
        """The last checkpoint (snapshots durable, then commit) before leaving the group. If its
        commit met a rebalance, the member exits 0 only if the broker already holds offsets at
        least as far; otherwise it says what is pending and stops with exit 1.

        Raises:
            SourceError: the final commit met a rebalance and the broker's offsets are behind.
        """
        self.checkpoint()
        self._final_checkpoint_done = True  # durable: close() writes nothing more
        self.summary.partitions = sorted(s.key for s in self.shards.values())
        self._final_deferred()

    def close(self) -> None:
        """Leave the group and wipe every table (after :meth:`final_checkpoint`, or on error)."""
        with contextlib.suppress(Exception):
            if self.consumer is not None:
                self.consumer.close(autocommit=False)  # leaves the group; revoke finds nothing dirty
        for shard in self.shards.values():
            shard.estimator.wipe()
        self.shards.clear()
        self._records.clear()
        self._checked.clear()
        self._epochs.clear()

    def _summarize_counts(self) -> None:
        """Copy the released (noisy unless opted out) totals into the summary."""
        w, s = self.metrics.window, self.summary
        if w is None:  # the default: nothing counted
            return
        s.messages, s.items = w.totals["messages"], w.totals["items"]
        s.malformed, s.outside = w.totals["malformed"], w.totals["outside"]
        s.exact_counts, s.telemetry_epsilon = w.policy.exact, w.policy.epsilon
        s.count_sd = w.total_sd()
