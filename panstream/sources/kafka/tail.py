"""The per-partition layout (``--layout partition``): one shard table per assigned partition.

:class:`PartitionTask` is the :class:`~panstream.sources.kafka.task.Task` of one source partition
(a shard of the whole table, keyed ``<topic>/<partition>`` in the store), :class:`PartitionTasks`
its kind (the decoder, the keying check every applied message passes, :mod:`.keyed`), and
:class:`KafkaTail` the member: a :class:`~panstream.sources.kafka.group.GroupLoop` holding
partition tasks (the group's life, fencing, the checkpoint clock and the commits are the loop's).

Before issue 35 ``KafkaTail`` was the loop itself and the base class of the slice stage; the name,
its constructor and its methods (``run``, ``open``, ``poll_once``, ``maintain``, ``checkpoint``,
``final_checkpoint``, ``close``, ``idle``) stay, and its shards are written as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kafka import TopicPartition

from panstream import estimators
from panstream.errors import SourceError, StateError
from panstream.estimators.base import Estimator
from panstream.release.ledger import ShardLedger
from panstream.sources.kafka.decode import Decoder
from panstream.sources.kafka.group import (
    CODEC_PACKAGES,
    GroupLoop,
    RunSummary,
    TailConfig,
    codec_message,
    kafka_errors,
)
from panstream.sources.kafka.joins import group_consumer
from panstream.sources.kafka.keyed import KeyCheck, require_keyable
from panstream.sources.kafka.metrics import Metrics
from panstream.sources.kafka.task import Counts, KindSteps, TaskState
from panstream.state.checkpoint import Shard, restore_shard, save_durable, shard_key
from panstream.state.keying import Keying, keying_of
from panstream.state.slices import head_params
from panstream.state.stores import decode_shard, encode_shard

__all__ = ["CODEC_PACKAGES", "KafkaTail", "PartitionTask", "PartitionTasks", "RunSummary",
           "TailConfig", "codec_message", "kafka_errors"]


class PartitionTasks(KindSteps):
    """The kind of the per-partition layout: its tasks share the decoder and the keying check
    (``config.partitioner``: every applied message sits in the partition its item's key puts
    it in; ``None``: nothing checked or recorded)."""

    unit = "partitions"
    counts = True
    every_checkpoint = False
    one_sync = True

    def __init__(self, config: TailConfig) -> None:
        self.config = config
        self.decoder = Decoder(config.universe, config.value_format, config.fmt)
        self.keyed: KeyCheck | None = None
        if config.partitioner is not None:
            require_keyable(config.value_format)
            self.keyed = KeyCheck(config.universe, config.partitioner)
        self._announced = False

    def task(self, tp: TopicPartition) -> PartitionTask:
        return PartitionTask(self, tp)

    def claim_key(self, tp: TopicPartition) -> str:
        return shard_key(tp.topic, tp.partition)

    def fresh(self) -> Estimator:
        # A shard has no budget of its own: the group's ledger (ensure_ledger) is the only one.
        c = self.config
        return estimators.new(c.estimator, c.universe, c.epsilon, calibration=c.calibration,
                              modulus=c.modulus, ledger=ShardLedger())

    def decode(self, data: bytes | bytearray) -> Estimator:
        c = self.config
        return decode_shard(data, c.universe, c.epsilon, c.calibration, kind=c.estimator,
                            modulus=c.modulus)

    def partitions(self, topic: str) -> int:
        """The partition count of ``topic``, as the consumer's metadata has it (read at each
        restore: a topic that grew since a shard's record stops the member there)."""
        parts = self.loop.consumer.partitions_for_topic(topic)
        if not parts:
            msg = (f"the broker did not say how many partitions {topic} has; the per-partition "
                   "layout checks every message against it: retry when the topic is known")
            raise SourceError(msg)
        return len(parts)

    def announce(self) -> None:
        """``-f auto``: the format detected, decided once and said once for this member."""
        det = self.decoder.detection
        if det is not None and not self._announced:
            self._announced = True
            self.loop.notice(f"{', '.join(self.config.topics)}: format {det.name} detected, "
                             f"decided once for this member (-f {det.spec} pins it)")



class PartitionTask:
    """One source partition's shard: restored from ``<topic>/<partition>`` (with its keying
    record, where the layout checks keys), each poll decoded, checked and applied."""

    def __init__(self, kind: PartitionTasks, tp: TopicPartition) -> None:
        self.kind = kind
        self.tp = tp
        self.shard = Shard(shard_key(tp.topic, tp.partition), tp, None)  # type: ignore[arg-type]
        self.state = TaskState.CREATED
        #: The placement checked against (its topic's partition count at restore) and the record
        #: the snapshots carry (``None``: a shard restored without one stays without).
        self.checked: Keying | None = None
        self.record: Keying | None = None

    def restore(self) -> None:
        """The shard's snapshot, or a fresh table; under the keying check, its record compared
        with the topic's partition count now.

        Raises:
            StateError: the snapshot is corrupt, has other parameters, or was checked against
                another partition count or partitioner.
        """
        k, tp = self.kind, self.tp
        store = k.config.store
        if k.keyed is None:
            self.shard = restore_shard(store, self.shard.key, tp, k.fresh, k.decode)
            return
        found: list[Keying | None] = []

        def decode(data: bytes | bytearray) -> Estimator:
            found.append(keying_of(head_params(data)))
            return k.decode(data)

        shard = restore_shard(store, self.shard.key, tp, k.fresh, decode)
        now = k.keyed.keying(k.partitions(tp.topic))
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
            k.loop.notice(f"{shard.key} was written before panstream checked the keying (issue "
                          "39): this member checks every message from now on, but 'release "
                          "--merge partitioned' refuses the shard (its earlier arrivals were "
                          "never checked): release with --merge sum, or re-read the topic into a "
                          "new --state-dir")
        self.shard, self.record, self.checked = shard, rec, now

    def apply(self, records: list[Any]) -> Counts:
        """Decode the poll's messages, check their keying (before any is applied), apply."""
        k = self.kind
        values = [r.value for r in records]
        dec = k.decoder(values)
        values.clear()
        try:
            k.announce()
            if k.keyed is not None and self.checked is not None:
                k.keyed.check(self.tp.partition, self.checked.partitions, dec.indices, records,
                              k.decoder, self.tp.topic)
        except BaseException:
            dec.indices.fill(0)
            raise
        n = self.shard.estimator.update_indices(dec.indices)  # wipes the index array
        return len(records), n, dec.malformed, dec.outside

    def snapshot(self, now: float | None) -> None:
        save_durable(self.kind.loop.saves, self.shard.key,
                     encode_shard(self.shard.estimator, self.record))

    def close(self) -> None:
        if self.shard.estimator is not None:
            self.shard.estimator.wipe()


class KafkaTail(GroupLoop):
    """A consumer-group member keeping one shard table per assigned partition: a
    :class:`~panstream.sources.kafka.group.GroupLoop` of :class:`PartitionTask`\\ s.

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
        self.partitions = PartitionTasks(config)
        super().__init__(config, self.partitions, metrics, consumer_factory)
        self.decoder = self.partitions.decoder
        self.keyed = self.partitions.keyed
