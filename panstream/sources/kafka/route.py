"""The routing stage: source topics (any keying) to cell indices, routed by cell range to the
group's internal topic ``<group>-cells``.

A member consumes the source topics in the consumer group ``<group>``, parses each batch with the
formats of ``panstream ingest`` (:class:`~panstream.sources.kafka.decode.Decoder`), splits the
cell indices by slice (:meth:`panstream.state.slices.SliceLayout.route`: one sort, each part the
raw little-endian local offsets, multiplicities kept) and produces part ``r`` to partition ``r``
of the internal topic. The slice stage (:mod:`.slices`) applies them to the one table they belong
to.

**Commit order.** Source offsets are committed only after every routed record of the messages
they cover is acknowledged by the broker (``acks=all``, :meth:`RouteStage.commit`: flush, then
commit), on the checkpoint clock and before a rebalance takes partitions away. A crash replays
the messages after the last commit: their cells are routed again, and a replayed arrival is a
fresh D1 draw of a cell already drawn (harmless for the bit table; the counter family counts it
twice, as on the per-partition layout).

**Malformed topics fail loudly.** Until the first :data:`SAMPLE_LINES` lines (values in the
``item`` format) are decided, exact counts of the accepted and malformed ones are kept in this
process only, and nothing is routed or committed. If more than :data:`MAX_MALFORMED` of them are
malformed, the member stops with one line naming the fraction and the ``-f``/``--value-format``
that parses the sample best; the counts are then forgotten.

**The internal topic** (:func:`ensure_internal_topic`) is as sensitive as the raw topic: a
record says which cells arrived in one batch. panstream creates it with ``R`` partitions and
``retention.ms`` short (10 minutes by default); the slice stage deletes consumed records once
the slice checkpoint covering them is durable, where the broker supports DeleteRecords.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener
from kafka.errors import KafkaError, TopicAlreadyExistsError
from kafka.structs import OffsetAndMetadata

from panstream.errors import ConfigurationError, SourceError
from panstream.sources.kafka.config import unreachable_message
from panstream.sources.kafka.decode import Decoded, Decoder
from panstream.sources.kafka.metrics import Metrics
from panstream.state.slices import SliceLayout

log = logging.getLogger("panstream.kafka")

#: Lines (or values) whose exact parse counts decide whether a topic parses at all.
SAMPLE_LINES = 1000
#: A first sample with more malformed lines than this fraction stops the member.
MAX_MALFORMED = 0.5
#: Largest routed record (bytes; below the brokers' default 1 MiB message limit).
RECORD_BYTES = 512 << 10
#: Default retention of the internal topic (ms): it is as sensitive as the raw topic.
DEFAULT_RETENTION_MS = 600_000


def internal_topic(group: str) -> str:
    """The internal topic of a routed group: ``<group>-cells``."""
    return f"{group}-cells"


def ensure_internal_topic(client: Mapping[str, Any], topic: str, layout: SliceLayout,
                          retention_ms: int, consumer: Any) -> None:
    """Create ``topic`` with ``layout.count`` partitions and ``retention.ms`` if missing; check the
    partition count of an existing one.

    Raises:
        SourceError: the topic cannot be created.
        ConfigurationError: it exists with another partition count.
    """
    try:
        admin = KafkaAdminClient(**client)
    except KafkaError as exc:
        raise SourceError(unreachable_message(dict(client), exc, f" (for topic {topic!r})")) from None
    try:
        if topic not in admin.list_topics():
            cfg = {"retention.ms": str(retention_ms), "cleanup.policy": "delete"}
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics([NewTopic(topic, layout.count, -1, topic_configs=cfg)])
    except KafkaError as exc:
        msg = (f"cannot create the internal topic {topic!r}: {exc}; create it with "
               f"{layout.count} partitions and retention.ms={retention_ms} yourself")
        raise SourceError(msg) from None
    finally:
        admin.close()
    deadline = time.monotonic() + 30
    parts = None
    while time.monotonic() < deadline:
        parts = consumer.partitions_for_topic(topic)
        if parts:
            break
        time.sleep(0.1)
    if parts and len(parts) != layout.count:
        msg = (f"the internal topic {topic!r} has {len(parts)} partitions but --slices is "
               f"{layout.count}: run the group with --slices {len(parts)} (its state was written "
               "that way), or delete the topic and the group's state to start over")
        raise ConfigurationError(msg)


@dataclass
class RouteConfig:
    """What :class:`RouteStage` runs with (built by ``panstream kafka``)."""

    consumer: dict[str, Any]
    producer: dict[str, Any]
    topics: list[str]
    layout: SliceLayout
    internal_topic: str
    value_format: str = "item"
    fmt: str = "auto"


class _Rebalance(AsyncConsumerRebalanceListener):
    """On revoke: routed records acknowledged, then the revoked partitions' offsets committed."""

    def __init__(self, stage: RouteStage) -> None:
        self.stage = stage

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.stage.last_activity = time.monotonic()  # a rebalance is not idleness
        offsets = self.stage._take(revoked, flush=True)
        if offsets:
            try:
                await self.stage.consumer.commit_async(offsets)
            except Exception as exc:  # noqa: BLE001 - a failed commit only means a replay
                log.warning("routing commit on revoke failed (%s): the next owner routes a few "
                            "messages again, which is harmless", exc)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.stage.assignments += 1
        self.stage.last_activity = time.monotonic()

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.stage._take(lost, flush=False)


class RouteStage:
    """Consume the source topics and route their cells to the internal topic (module docstring).

    Args:
        config: :class:`RouteConfig`.
        metrics: the member's :class:`Metrics` (messages, items, malformed, outside per window).
        consumer_factory, producer_factory: build the kafka-python clients (tests, benchmarks).
    """

    def __init__(self, config: RouteConfig, metrics: Metrics,
                 consumer_factory: Callable[..., Any] = KafkaConsumer,
                 producer_factory: Callable[..., Any] = KafkaProducer) -> None:
        self.config = config
        self.metrics = metrics
        self.decoder = Decoder(config.layout.universe, config.value_format, config.fmt)
        self._consumer_factory = consumer_factory
        self._producer_factory = producer_factory
        self.consumer: Any = None
        self.producer: Any = None
        self._next: dict[TopicPartition, int] = {}
        self._futures: list[Any] = []  # sends since the last flush, checked before a commit
        #: Exact counts [lines, malformed] of the first sample; None once decided (forgotten).
        self._sample: list[int] | None = [0, 0]
        self._held: list[tuple[dict[TopicPartition, int], list[tuple[int, bytearray]]]] = []
        self.assignments = 0
        self.last_activity = time.monotonic()
        self.routed_bytes = 0
        #: Adds a batch's counts to the telemetry window (the member wraps it in a lock).
        self.count: Callable[[int, int, int, int], None] = metrics.batch

    # -------------------------------------------------------------- lifecycle
    def open(self) -> None:
        """Create the producer and the consumer; subscribe to the source topics.

        Raises:
            SourceError: no broker answered.
        """
        c = self.config
        try:
            self.producer = self._producer_factory(
                **c.producer, acks="all", linger_ms=5, batch_size=1 << 20,
                max_request_size=max(1 << 20, RECORD_BYTES + (64 << 10)))
            self.consumer = self._consumer_factory(**c.consumer)
        except KafkaError as exc:
            raise SourceError(unreachable_message(c.consumer, exc)) from None
        self.consumer.subscribe(topics=list(c.topics), listener=_Rebalance(self))

    def poll_once(self, timeout_ms: int) -> bool:
        """One poll: decode, route and send. Whether any records came."""
        records = self.consumer.poll(timeout_ms=timeout_ms)
        if not records:
            return False
        self._route(records)
        self.last_activity = time.monotonic()
        return True

    def commit(self) -> None:
        """Every routed record acknowledged (``acks=all``), then the source offsets committed.

        Raises:
            SourceError: the broker did not acknowledge, or the commit failed (a restart replays).
        """
        offsets = self._take(set(self._next), flush=True, keep=True)
        if not offsets:
            return
        try:
            self.consumer.commit(offsets)
        except KafkaError as exc:
            msg = (f"source offset commit failed: {exc}; the routed records are durable, so a "
                   "restart routes a few messages again, which is harmless")
            raise SourceError(msg) from None

    def finish(self) -> None:
        """Decide a short stream's sample, commit, leave the group, close the producer."""
        if self._sample is not None and self._sample[0]:
            self._decide(None)
        self.commit()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.consumer is not None:
                self.consumer.close(autocommit=False)
        with contextlib.suppress(Exception):
            if self.producer is not None:
                self.producer.close(timeout=10)
        for _, parts in self._held:
            for _, data in parts:
                data[:] = bytes(len(data))
        self._held.clear()

    # -------------------------------------------------------------- offsets
    def _take(self, tps: set[TopicPartition], flush: bool, keep: bool = False
              ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Flush the producer (when asked), then the offsets of ``tps`` to commit."""
        if flush and self.producer is not None:
            pending, self._futures = self._futures, []
            problem: object = None
            try:
                self.producer.flush(timeout=60)
            except KafkaError as exc:
                problem = exc
            if problem is None:  # flush() returns even when a send failed: ask every record
                problem = next((f.exception or "failed" for f in pending if f.failed()), None)
            if problem is None and not all(f.is_done for f in pending):
                problem = "not acknowledged within 60 s"
            if problem is not None:
                msg = (f"the internal topic {self.config.internal_topic!r} did not acknowledge "
                       f"routed records: {problem}; nothing was committed, a restart replays them")
                raise SourceError(msg)
        out = {tp: OffsetAndMetadata(self._next[tp], "", -1) for tp in tps if tp in self._next}
        if not keep:
            for tp in tps:
                self._next.pop(tp, None)
        return out

    # -------------------------------------------------------------- routing
    def _route(self, records: Mapping[TopicPartition, list[Any]]) -> None:
        values: list[bytes | None] = []
        offsets: dict[TopicPartition, int] = {}
        for tp, recs in records.items():
            if recs:
                values.extend(r.value for r in recs)
                offsets[tp] = recs[-1].offset + 1
        dec = self.decoder(values)
        self.count(len(values), int(dec.indices.size), dec.malformed, dec.outside)
        parts = self.config.layout.route(dec.indices)  # wipes the indices
        if self._sample is None:
            self._send(offsets, parts)
        else:
            self._held.append((offsets, parts))
            self._sample[0] += int(dec.indices.size) + dec.malformed + dec.outside
            self._sample[1] += dec.malformed
            if self._sample[0] >= SAMPLE_LINES:
                self._decide(values)
        values.clear()

    def _send(self, offsets: dict[TopicPartition, int], parts: list[tuple[int, bytearray]]) -> None:
        topic, step = self.config.internal_topic, RECORD_BYTES
        for r, data in parts:
            for i in range(0, len(data), step):
                self._futures.append(
                    self.producer.send(topic, value=bytes(data[i:i + step]), partition=r))
            self.routed_bytes += len(data)
            data[:] = bytes(len(data))
        self._next.update(offsets)

    def _decide(self, values: list[bytes | None] | None) -> None:
        """Route the held batches if the sample parses; else stop with one line."""
        assert self._sample is not None
        lines, bad = self._sample
        self._sample = None  # the exact counts are forgotten either way
        if lines and bad / lines > MAX_MALFORMED:
            msg = (f"{bad / lines:.1%} of the first {lines:,} lines of {', '.join(self.config.topics)}"
                   f" are malformed for -f {self.decoder.format.spec} --value-format "
                   f"{self.config.value_format} (universe {self.config.layout.universe.spec}); "
                   f"{suggest(self.config.layout, values or [], self.decoder)}. Nothing was "
                   "routed or committed")
            raise SourceError(msg)
        held, self._held = self._held, []
        for offsets, parts in held:
            self._send(offsets, parts)


def suggest(layout: SliceLayout, values: list[bytes | None], decoder: Decoder) -> str:
    """The ``-f`` / ``--value-format`` that parses ``values`` best, as advice for one line."""
    from panstream.parse import FORMATS, parse_format

    cands = [f for f in FORMATS if f != "auto"] + [f"field:{n}" for n in range(1, 10)]
    best: tuple[float, str, str] | None = None
    for vf in ("lines", "item"):
        for spec in cands:
            if (vf, spec) == (decoder.value_format, decoder.format.spec):
                continue
            try:
                d: Decoded = Decoder(layout.universe, vf, parse_format(spec))(list(values))
            except Exception:  # noqa: BLE001, S112 - a candidate that cannot run is no advice
                continue
            total = int(d.indices.size) + d.malformed + d.outside
            d.indices.fill(0)
            if total:
                score = d.malformed / total
                if best is None or score < best[0]:
                    best = (score, vf, spec)
    if best is None or best[0] > MAX_MALFORMED:
        return ("no -f of plain, clf or field:N parses them: check --universe, --value-format and "
                "the topic")
    fix = f"-f {best[2]}"
    if best[1] != decoder.value_format:
        fix += f" --value-format {best[1]}"
    return f"try {fix} ({1 - best[0]:.0%} of them parse that way)"


__all__ = ["DEFAULT_RETENTION_MS", "RECORD_BYTES", "SAMPLE_LINES", "RouteConfig",
           "RouteStage", "ensure_internal_topic", "internal_topic", "suggest"]
