"""The routing stage: source topics (any keying) to cell indices, routed by cell range to the
group's internal topic ``<group>-cells``.

A member consumes the source topics in the consumer group ``<group>``, parses each batch with the
formats of ``panstream ingest`` (:class:`~panstream.sources.kafka.decode.Decoder`), splits the
cell indices by slice (:meth:`panstream.state.slices.SliceLayout.route`: one sort, each part the
raw little-endian local offsets, multiplicities kept; for bit tables each cell of a poll once,
:attr:`RouteConfig.distinct`) and produces part ``r`` to partition ``r``
of the internal topic. The slice stage (:mod:`.slices`) applies them to the one table they belong
to.

**Commit order.** Source offsets are committed only after every routed record of the messages
they cover is acknowledged by the broker (``acks=all``, :meth:`RouteStage.commit`: flush, then
commit), on the checkpoint clock and before a rebalance takes partitions away. A crash replays
the messages after the last commit: their cells are routed again, and a replayed arrival is a
fresh D1 draw of a cell already drawn (harmless for the bit table; the counter family counts it
twice, as on the per-partition layout).

**Topics that parse to (almost) nothing fail loudly**, by the rule ``panstream ingest`` applies to
each input (:func:`panstream.inputs.check.verdict`): until the first
:data:`~panstream.inputs.check.SAMPLE_LINES` non-empty lines (values in the ``item`` format) are
decided, exact counts of the accepted, malformed and outside ones are kept in this process only,
and nothing is routed or committed. If under 1 % of them were accepted (0.1 % for ``sshd`` and
``regex``; values outside the universe count against it too), the member stops with one line:
the verdict's (no count, no share: one bit, docs/threat-model.md) and the ``-f`` that
:func:`panstream.inputs.parser.detect` finds in the sample's first lines (:func:`suggest`); the
counts and the sample's head are then forgotten. A member that stops before its sample is complete is judged on what it had.
``check=False`` (``--keep-going``) routes without judging.

**``-f auto``** is decided once per member, from the first messages it decodes
(:class:`~panstream.sources.kafka.decode.Decoder`), and announced once through :attr:`RouteStage.
notice` with the explicit ``-f`` spelling to pin it with.

**The internal topic** (:func:`ensure_internal_topic`) is as sensitive as the raw topic: a
record says which cells arrived in one batch. panstream creates it with ``R`` partitions, a
``retention.ms`` never shorter than the source topics' (:func:`internal_retention`: a record
that expired unapplied would be an arrival lost, and the source already keeps the raw lines that
long) and segments that roll (``segment.ms``, ``segment.bytes``: Kafka deletes closed segments
only); the slice stage deletes consumed records once the slice checkpoint covering them is
durable, where the broker supports DeleteRecords. (Until issue 26 the retention was 10 minutes:
any group outage longer than that lost the routed-but-unapplied arrivals.)
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener
from kafka.errors import (
    CommitFailedError,
    KafkaError,
    RebalanceInProgressError,
    TopicAlreadyExistsError,
)
from kafka.structs import OffsetAndMetadata

from panstream.errors import ConfigurationError, SourceError
from panstream.estimators.base import wipe_buffer
from panstream.inputs.check import SAMPLE_LINES as _SAMPLE_LINES
from panstream.inputs.check import skipped_notice, verdict
from panstream.sources.kafka.config import unreachable_message
from panstream.sources.kafka.decode import CHUNK_BYTES, Decoded, Decoder
from panstream.sources.kafka.joins import commit_on_revoke, group_consumer
from panstream.sources.kafka.metrics import Metrics
from panstream.sources.kafka.topology import no_auto_create
from panstream.state.slices import SliceLayout

log = logging.getLogger("panstream.kafka")

#: Lines (or values) whose exact parse counts decide whether a topic parses at all (the rule of
#: ``ingest``: :func:`panstream.inputs.check.verdict`).
SAMPLE_LINES = _SAMPLE_LINES
#: Bytes of the sample's first values kept (until the decision) for :func:`suggest`.
HEAD_BYTES = 1 << 18
#: Largest routed record (bytes; below the brokers' default 1 MiB message limit).
RECORD_BYTES = 512 << 10
#: The most bytes of source values one poll read in pieces takes (:meth:`RouteStage.
#: _poll_pieces`): librdkafka's prefetch queue (``queued.max.messages.kbytes``, 64 MiB), the
#: most one ``consume()`` returned when a poll was one call.
POLL_BYTES = 64 << 20


def internal_topic(group: str) -> str:
    """The internal topic of a routed group: ``<group>-cells``."""
    return f"{group}-cells"


def window_topic(group: str) -> str:
    """The internal topic of a windowed group: ``<group>-wcells`` (its records are framed with the
    window, so a group never mixes them with the plain ``<group>-cells`` records)."""
    return f"{group}-wcells"


#: Largest segment of the internal topic (bytes): Kafka deletes whole closed segments only, so
#: segments must roll for retention to apply (the broker's default is 1 GiB).
SEGMENT_BYTES = 64 << 20
#: Longest segment age (ms) of the internal topic, for the same reason (the default is 7 days).
SEGMENT_MS = 3_600_000


@dataclass(frozen=True)
class Retention:
    """How long the internal topic keeps routed records, and why (public settings only).

    Attributes:
        ms: ``retention.ms`` to set (-1: forever), or ``None``: leave the broker's default (what
            source topics without their own setting use too).
        why: one phrase for notices and docs.
    """

    ms: int | None
    why: str

    def configs(self) -> dict[str, str]:
        """The internal topic's settings: delete policy, retention, and segments that roll
        (``segment.ms`` at most the retention, so a record outlives it by at most that much)."""
        seg = SEGMENT_MS if self.ms is None or self.ms < 0 else max(1000, min(self.ms, SEGMENT_MS))
        out = {"cleanup.policy": "delete", "segment.ms": str(seg),
               "segment.bytes": str(SEGMENT_BYTES)}
        if self.ms is not None:
            out["retention.ms"] = str(self.ms)
        return out


def topic_configs(admin: Any, topics: list[str], key: str = "retention.ms"
                  ) -> dict[str, int | None]:
    """An integer setting (``retention.ms`` by default) of each topic as the broker describes it
    (``None``: it did not say; Tansu 0.6 describes no configs)."""
    from kafka.admin import ConfigResource, ConfigResourceType

    out: dict[str, int | None] = dict.fromkeys(topics)
    try:
        res = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, t) for t in topics],
                                     config_filter="all")
    except Exception:  # noqa: BLE001 - a broker without DescribeConfigs: unknown
        return out
    described = res.get("topic", {}) if isinstance(res, dict) else {}
    for t in topics:
        entry = (described.get(t) or {}).get(key)
        value = entry.get("value") if isinstance(entry, dict) else entry
        with contextlib.suppress(TypeError, ValueError):
            out[t] = int(value)  # type: ignore[arg-type]
    return out


def topic_retention(admin: Any, topics: list[str]) -> dict[str, int | None]:
    """``retention.ms`` of each topic (:func:`topic_configs`)."""
    return topic_configs(admin, topics)


def internal_retention(sources: Mapping[str, int | None], asked_ms: int | None) -> Retention:
    """The internal topic's retention: never shorter than any source topic's.

    A routed record is as sensitive as the raw lines it came from, which the source topic keeps
    for its own retention; and a record that expires before its slice applies it is an arrival
    lost for good. So the internal topic keeps its records as long as the longest-lived source
    (forever if one keeps forever); ``asked_ms`` (``--cells-retention``) may only lengthen that.
    Where the broker does not describe a source's retention, the internal topic takes the broker's
    default (as a source without a setting of its own does) unless ``asked_ms`` is given.

    >>> internal_retention({"logs": 604800000}, None).ms
    604800000
    >>> internal_retention({"logs": 604800000, "old": -1}, None).ms
    -1
    >>> r = internal_retention({"logs": 604800000}, 600000)
    >>> r.ms, r.why.endswith("--cells-retention 600000 ms is shorter and was raised")
    (604800000, True)
    >>> internal_retention({"logs": None}, None)
    Retention(ms=None, why="the broker's default (it did not describe the source topics' retention)")
    """
    known = {t: v for t, v in sources.items() if v is not None}
    if len(known) < len(sources) or not sources:
        if asked_ms is not None:
            return Retention(asked_ms, f"--cells-retention {asked_ms} ms (the broker did not "
                                       "describe the source topics' retention: keep it at least "
                                       "theirs)")
        return Retention(None, "the broker's default (it did not describe the source topics' "
                               "retention)")
    top_t = max(known, key=lambda t: (known[t] < 0, known[t]))
    top = -1 if known[top_t] < 0 else known[top_t]
    why = f"the longest source retention ({top_t}: {top} ms)"
    if asked_ms is None:
        return Retention(top, why)
    if top >= 0 and asked_ms > top:
        return Retention(asked_ms, f"--cells-retention {asked_ms} ms")
    if asked_ms < 0 or asked_ms == top:
        return Retention(asked_ms, f"--cells-retention {asked_ms} ms")
    return Retention(top, f"{why}; --cells-retention {asked_ms} ms is shorter and was raised")


def ensure_internal_topic(client: Mapping[str, Any], topic: str, layout: SliceLayout,
                          retention_ms: int | None, consumer: Any,
                          sources: list[str] | None = None,
                          notice: Callable[[str], None] = log.info,
                          stored: Callable[[], int | None] = lambda: None) -> Retention:
    """Create ``topic`` with ``layout.count`` partitions if missing, its retention never shorter
    than the source topics' (:func:`internal_retention`), segments that roll, and delete policy;
    on an existing topic check the partition count and lengthen a shorter retention (an older
    panstream created it with 10 minutes).

    ``stored`` says (when asked, on a mismatch only) the slice count of the group's saved slices
    (``None``: none saved), so the refusal names the side that is wrong: the topic, or
    ``--slices`` (:func:`wrong_count`).

    Returns:
        The retention the topic was given (or should have).

    Raises:
        SourceError: the topic cannot be created.
        ConfigurationError: it exists with another partition count.
    """
    from kafka.admin import ConfigResource, ConfigResourceType

    try:
        admin = KafkaAdminClient(**client)
    except KafkaError as exc:
        raise SourceError(unreachable_message(dict(client), exc, f" (for topic {topic!r})")) from None
    try:
        ret = internal_retention(topic_retention(admin, list(sources or [])), retention_ms)
        cfg = ret.configs()
        if topic not in admin.list_topics():
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics([NewTopic(topic, layout.count, -1, topic_configs=cfg)])
                if ret.ms is None:
                    notice(f"created {topic} with the broker's default retention: the broker did "
                           "not describe the source topics' retention.ms (give --cells-retention "
                           "at least theirs if they set their own)")
                else:
                    notice(f"created {topic}: it keeps routed records at most retention.ms "
                           f"{ret.ms} ({ret.why})")
        else:
            if "raised" in ret.why:
                notice(f"{topic}: {ret.why}")
            have = topic_retention(admin, [topic])[topic]
            short = ret.ms is not None and have is not None and (
                (ret.ms < 0 <= have) or (0 <= have < ret.ms))
            rolls = {k: topic_configs(admin, [topic], k)[topic] for k in ("segment.ms",
                                                                          "segment.bytes")}
            slow = any(v is not None and v > int(cfg[k]) for k, v in rolls.items())
            if short or slow:
                try:
                    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, cfg)])
                    if short:
                        notice(f"{topic}: retention.ms {have} was shorter than {ret.why}: set to "
                               f"{ret.ms}, so no routed record expires before its slice applies "
                               "it")
                except Exception as exc:  # noqa: BLE001 - said loudly; the group still runs
                    if short:
                        notice(f"warning: {topic} keeps routed records only {have} ms, shorter "
                               f"than {ret.why}, and the broker refused to change it ({exc}): "
                               f"set retention.ms={ret.ms} on it, or a long outage loses "
                               "arrivals")
                    else:
                        notice(f"warning: {topic}'s segments roll later than "
                               f"segment.ms={cfg['segment.ms']} / segment.bytes="
                               f"{cfg['segment.bytes']} and the broker refused to change them "
                               f"({exc}): routed records may outlive the retention by a segment")
    except KafkaError as exc:
        msg = (f"cannot create the internal topic {topic!r}: {exc}; create it with "
               f"{layout.count} partitions and {', '.join(f'{k}={v}' for k, v in cfg.items())} "
               "yourself")
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
        raise ConfigurationError(wrong_count(topic, len(parts), layout.count, stored()))
    return ret


def wrong_count(topic: str, have: int, count: int, stored: int | None) -> str:
    """The one line for an internal topic whose partition count is not ``--slices`` (issue 35):
    the group's saved slices say which side is wrong. Only panstream creates the topic, with
    exactly the slice count, so a topic that disagrees with saved slices was made by something
    else (a broker's auto-create, after it restarted empty, or another tool), and the records
    routed before may be gone with the old topic: no promise that nothing is lost, and no advice
    to follow the wrong count.

    >>> wrong_count("g-cells", 4, 16, 4).endswith("restart it with --slices 4 (a group's slice "
    ...                                            "count is fixed for the life of its state)")
    True
    >>> "Delete g-cells and restart with --slices 16" in wrong_count("g-cells", 4, 16, 16)
    True
    """
    head = f"the internal topic {topic} has {have} partitions"
    if stored == have:
        return (f"{head} and the group's saved slices were written with --slices {have}, but "
                f"this member was given --slices {count}: restart it with --slices {have} (a "
                "group's slice count is fixed for the life of its state)")
    if stored is not None:
        return (f"{head}, but the group's saved slices were written with --slices {stored}: "
                f"panstream did not create it so (a broker's auto-create, e.g. after the broker "
                f"restarted empty, or another tool did), and records routed to slices but not "
                f"yet applied may be gone with the topic the group had. Delete {topic} and "
                f"restart with --slices {stored} (panstream creates it with {stored} partitions); "
                "releases of this table miss whatever was lost")
    return (f"{head}, not --slices {count}, and this group has no saved slices: it was not made "
            f"by this group (a broker's auto-create, another tool, or another group under the "
            f"same name): delete {topic} if it holds nothing you need, or choose another -g")


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
    #: Judge the first sample (``False``: ``--keep-going``).
    check: bool = True
    #: Route each poll's distinct cells only (:meth:`SliceLayout.route`): for slices whose arrival
    #: redraws its cell however often it is named (bit tables; never counters). Issue 38.
    distinct: bool = False
    #: Headers every routed record carries: the group definition's digest
    #: (:meth:`panstream.sources.kafka.identity.RecordGate.headers`; ``None``: none).
    headers: list[tuple[str, bytes]] | None = None

    def stamp(self) -> dict[str, Any]:
        """The producer's ``send`` keywords that stamp a routed record (none without headers)."""
        return {"headers": self.headers} if self.headers else {}


class _Rebalance(AsyncConsumerRebalanceListener):
    """On revoke: routed records acknowledged, then the revoked partitions' offsets committed."""

    def __init__(self, stage: RouteStage) -> None:
        self.stage = stage

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.stage.last_activity = time.monotonic()  # a rebalance is not idleness
        self.stage._route_fed()  # a poll in pieces: what it read so far is routed first
        self.stage._past_control_records()  # the next owner must not stop one marker short
        offsets = self.stage._take(revoked, flush=True)
        self.stage._owned.difference_update(revoked)
        self.stage.metrics.forget(revoked)
        await commit_on_revoke(self.stage.consumer, offsets, "routing commit",
                               "routes a few messages again")

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.stage.assignments += 1
        self.stage._owned.update(assigned)
        self.stage.last_activity = time.monotonic()

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.stage._route_fed()  # routed; their offsets are dropped below, as any lost one's
        self.stage._owned.difference_update(lost)
        self.stage._take(lost, flush=False)
        self.stage.metrics.forget(lost)


class RouteStage:
    """Consume the source topics and route their cells to the internal topic (module docstring).

    Args:
        config: :class:`RouteConfig`.
        metrics: the member's :class:`Metrics` (messages, items, malformed, outside per window).
        consumer_factory, producer_factory: build the kafka-python clients (tests, benchmarks).
    """

    def __init__(self, config: RouteConfig, metrics: Metrics,
                 consumer_factory: Callable[..., Any] = group_consumer,
                 producer_factory: Callable[..., Any] = KafkaProducer) -> None:
        self.config = config
        self.metrics = metrics
        self.decoder = Decoder(config.layout.universe, config.value_format, config.fmt)
        self._consumer_factory = consumer_factory
        self._producer_factory = producer_factory
        self.consumer: Any = None
        self.producer: Any = None
        self._next: dict[TopicPartition, int] = {}
        #: The source partitions this member owns (assigned, not yet revoked or lost).
        self._owned: set[TopicPartition] = set()
        self._futures: list[Any] = []  # sends since the last flush, checked before a commit
        #: Exact counts of the first sample (accepted, malformed, outside); None once decided.
        self._sample: dict[str, int] | None = (
            dict.fromkeys(("accepted", "empty", "malformed", "outside"), 0) if config.check
            else None)
        #: The sample's first values (at most HEAD_BYTES), for suggest(); wiped when decided.
        self._head: list[bytearray] = []
        self._head_bytes = 0
        self._held: list[tuple[dict[TopicPartition, int], list[tuple[int, bytearray]]]] = []
        self.assignments = 0
        self._piece = 64  # messages a piece of a poll asks for (:meth:`_poll_pieces`)
        #: The pieces of the poll being read, fed but not yet routed: messages, bytes, offsets.
        self._fed: list[Any] | None = None
        self.last_activity = time.monotonic()  # records or a rebalance
        self.last_records = self.last_activity  # records only
        self.routed_bytes = 0
        #: Adds a batch's counts to the telemetry window (the member wraps it in a lock).
        self.count: Callable[[int, int, int, int], None] = metrics.batch
        #: Where one-line operational notices go (the CLI prints them on stderr): the format
        #: ``-f auto`` chose, once.
        self.notice: Callable[[str], None] = log.info
        self._announced = False
        #: Commit no source offset any more (set when the group's topics changed under it: the
        #: positions belong to the old topic, and a new topic of the same name must not inherit
        #: them, :mod:`.topology`); routed records are still flushed.
        self.hold_commits = False

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
                allow_auto_create_topics=False,
                max_request_size=max(1 << 20, RECORD_BYTES + (64 << 10)))
            self.consumer = self._consumer_factory(**c.consumer)
            no_auto_create(self.producer)  # kafka-python's ignores its own setting
        except KafkaError as exc:
            raise SourceError(unreachable_message(c.consumer, exc)) from None
        self.consumer.subscribe(topics=list(c.topics), listener=_Rebalance(self))

    #: Read a poll in pieces (:meth:`_poll_pieces`) from a consumer that offers it
    #: (``poll(timeout_ms, max_records)`` and ``max_records``: the librdkafka adapter); a stage
    #: that routes a poll otherwise (windows) sets it off.
    pieces = True

    def poll_once(self, timeout_ms: int) -> bool:
        """One poll: decode, route and send. Whether any records came."""
        if self.pieces and getattr(self.consumer, "max_records", None):
            got = self._poll_pieces(timeout_ms)
        else:
            records = self.consumer.poll(timeout_ms=timeout_ms)
            got = bool(records)
            if got:
                self._route(records)
        if got:
            self.last_activity = self.last_records = time.monotonic()
        return got

    def _poll_pieces(self, timeout_ms: int) -> bool:
        """One poll read in pieces of about a parser chunk (:data:`~panstream.sources.kafka.
        decode.CHUNK_BYTES` of values: a count learnt from the last piece's sizes), each decoded
        as it comes (:meth:`Decoder.feed`), until the consumer has nothing queued, or the poll
        holds ``max_records`` messages or :data:`POLL_BYTES` of values (what one ``consume()``
        of librdkafka's 64 MiB queue held at most); then the poll's cells are routed once.

        Why (issue 38): a poll of 1,000 of the bench's 50 KB messages is 50 MB of values, far
        beyond the cache; joining them into the parser's chunks read them back from memory
        (17 ns a line for the copy and the join, 11 ns when each piece is joined while it is
        still cached), and the member's heap grew by a whole poll. No line is kept longer than
        before: each piece's values are dropped once copied, the cells until the poll's end.
        librdkafka runs a rebalance inside a poll, so one can fall between two pieces: the
        pieces fed so far are routed first (:meth:`_route_fed`), and the revoked partitions'
        offsets committed as far as routed, as when a poll was one call."""
        c = self.consumer
        records = c.poll(timeout_ms=timeout_ms, max_records=min(self._piece, c.max_records))
        if not records:
            return False
        try:
            while records:
                taken, size = self._feed(records)
                records = {}
                if taken < c.max_records and size < POLL_BYTES:
                    records = c.poll(timeout_ms=0,
                                     max_records=min(self._piece, c.max_records - taken))
            self._route_fed()
        except BaseException:
            self._fed = None
            self.decoder.discard()
            raise
        return True

    def _feed(self, records: Mapping[TopicPartition, list[Any]]) -> tuple[int, int]:
        """Decode one piece of a poll (its values dropped at once); the poll's messages and
        bytes so far."""
        values, offsets = self._values(records)
        fed = self._fed = self._fed or [0, 0, {}]
        fed[2].update(offsets)
        if self._sample is not None:
            self._keep_head(values)
        size = sum(len(v) for v in values if v)
        if size:  # as many messages as hold about a parser chunk, next time
            self._piece = max(1, min(self.consumer.max_records,
                                     CHUNK_BYTES * len(values) // size))
        fed[0] += len(values)
        fed[1] += size
        self.decoder.feed(values)
        values.clear()
        return fed[0], fed[1]

    def _route_fed(self) -> None:
        """Route the cells of the pieces fed so far (at the poll's end, or before a rebalance
        takes partitions away in the middle of one)."""
        fed, self._fed = self._fed, None
        if fed is not None:
            self._deliver(fed[0], self.decoder.flush(), fed[2])

    def _past_control_records(self) -> None:
        """Before a commit, move each partition's offset to commit up to the consumer's position.
        Between polls they differ only by records a consumer never hands out: the control records
        (commit and abort markers) of transactional producers, which take offsets. Without this a
        partition ending in a marker is committed one offset short of its end forever. Only when
        nothing is held (the first sample decided): every record before the position was routed.

        That includes an assigned partition this member has routed nothing from: its previous
        owner committed up to a marker (a commit on revoke, or one made before it read past the
        marker), and this member read past it without a record to route. Without its position
        committed, the partition stayed a marker short, and a bounded member waited for a drain
        that could not come (issue 26)."""
        if self._sample is not None or self._held:
            return
        for tp in set(self._next) | self._owned:
            try:
                pos = self.consumer.position(tp, timeout_ms=0)
            except Exception:  # noqa: BLE001, S112 - no position (revoked meanwhile): keep ours
                continue
            if pos is not None and pos > self._next.get(tp, -1):
                self._next[tp] = pos

    def commit(self) -> None:
        """Every routed record acknowledged (``acks=all``), then the source offsets committed.

        Raises:
            SourceError: the broker did not acknowledge, or the commit failed (a restart replays).
        """
        self._past_control_records()
        offsets = self._take(set(self._next), flush=True, keep=True)
        self.metrics.show_lag(self.consumer, self._owned)  # on the commit clock (issue 37)
        if not offsets:
            return
        try:
            self.consumer.commit(offsets)
        except (CommitFailedError, RebalanceInProgressError):
            # The group rebalanced under this commit (a member joined, left or was killed;
            # kafka-python raises RebalanceInProgressError while the rebalance runs): the
            # offsets stay pending here and are committed at the next checkpoint if this member
            # still owns the partitions; otherwise their new owner routes those messages again
            # from the last commit (the routed records are durable, a replay is harmless), and a
            # bounded member still exits 0 only once the group has committed every source end.
            self.notice("a source offset commit met a rebalance; it is retried at the next "
                        "checkpoint (or the partition's new owner routes those messages again)")
            return
        except KafkaError as exc:
            msg = (f"source offset commit failed: {exc}; the routed records are durable, so a "
                   "restart routes a few messages again, which is harmless")
            raise SourceError(msg) from None
        self.metrics.show_committed(offsets)  # what the broker shows any client of the group

    def finish(self) -> None:
        """Before leaving: :meth:`settle` (the member then closes the consumer and producer)."""
        self.settle()

    def settle(self) -> None:
        """Decide a still-open first sample on what it holds, then commit: a quiet member leaves
        nothing routed-but-uncommitted or held behind (its group can then drain)."""
        if self._sample is not None and any(self._sample.values()):
            self._decide()
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
        self._forget_head()

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
        out = ({} if self.hold_commits else
               {tp: OffsetAndMetadata(self._next[tp], "", -1) for tp in tps if tp in self._next})
        if not keep:
            for tp in tps:
                self._next.pop(tp, None)
        return out

    # -------------------------------------------------------------- routing
    def _route(self, records: Mapping[TopicPartition, list[Any]]) -> None:
        values, offsets = self._values(records)
        if self._sample is not None:
            self._keep_head(values)
        self._deliver(len(values), self.decoder(values), offsets)
        values.clear()

    @staticmethod
    def _values(records: Mapping[TopicPartition, list[Any]]
                ) -> tuple[list[bytes | None], dict[TopicPartition, int]]:
        """A poll's values, and each partition's next offset."""
        values: list[bytes | None] = []
        offsets: dict[TopicPartition, int] = {}
        for tp, recs in records.items():
            if recs:
                values.extend(r.value for r in recs)
                offsets[tp] = recs[-1].offset + 1
        return values, offsets

    def _deliver(self, messages: int, dec: Decoded, offsets: dict[TopicPartition, int]) -> None:
        """Count a decoded poll, then route its cells: sent, or held with the first sample."""
        if not self._announced and self.decoder.detection is not None:
            self._announced = True
            det = self.decoder.detection
            note = f"; {det.note}" if det.note else ""
            if not det.known:  # no guess: the loud failure follows on the sample
                self.notice(f"{', '.join(self.config.topics)}: no known log format fits the "
                            f"first messages: {det.note}")
            else:
                self.notice(f"{', '.join(self.config.topics)}: format {det.name} detected, "
                            f"decided once for this member (-f {det.spec} pins it){note}")
        self.count(messages, int(dec.indices.size), dec.malformed, dec.outside)
        s = self._sample
        if s is not None:
            s["accepted"] += int(dec.indices.size)
            s["malformed"] += dec.malformed
            s["outside"] += dec.outside
        parts = self.config.layout.route(dec.indices, self.config.distinct)  # wipes the indices
        if s is None:
            self._send(offsets, parts)
        else:
            self._held.append((offsets, parts))
            if s["accepted"] + s["malformed"] + s["outside"] >= SAMPLE_LINES:
                self._decide()

    def _keep_head(self, values: list[bytes | None]) -> None:
        """Copy the sample's first values (up to :data:`HEAD_BYTES`, cut at a line end) for
        :func:`suggest`; they live only until the decision."""
        for v in values:
            room = HEAD_BYTES - self._head_bytes
            if room <= 0:
                return
            if not v:
                continue
            part = bytearray(v[:room])
            if len(v) > room:  # keep whole lines only
                cut = part.rfind(b"\n")
                part[max(cut, 0):] = b""
                room = 0
            if part:
                self._head.append(part)
                self._head_bytes += len(part)
            if not room:
                self._head_bytes = HEAD_BYTES
                return

    def _forget_head(self) -> None:
        for part in self._head:
            part[:] = bytes(len(part))
        self._head.clear()
        self._head_bytes = 0

    def _send(self, offsets: dict[TopicPartition, int], parts: list[tuple[int, bytearray]]) -> None:
        topic, step, stamp = self.config.internal_topic, RECORD_BYTES, self.config.stamp()
        for r, data in parts:
            view = memoryview(data)  # one copy per record (a bytearray slice would be two)
            for i in range(0, len(data), step):
                self._futures.append(self.producer.send(
                    topic, value=bytes(view[i:i + step]), partition=r, **stamp))
            self.routed_bytes += len(data)
            view.release()
            wipe_buffer(data)
        self._next.update(offsets)

    def _decide(self) -> None:
        """Route the held batches if the sample is accepted; else stop with one line (the rule
        and message of :func:`panstream.inputs.check.verdict`, plus :func:`suggest`)."""
        s, self._sample = self._sample, None  # the exact counts are forgotten either way
        assert s is not None
        try:
            c = self.config
            v = verdict(s, self.decoder.format.spec, c.layout.universe,
                        auto=self.decoder.detection is not None or c.fmt == "auto")
            if v is not None:
                # The verdict's line is one bit (no count, no share, not "malformed or outside");
                # the suggestion names a format that parses the sample's first values, in words.
                tail = "; or --keep-going to go on anyway"
                v = v.removesuffix(tail)
                v += f"; {suggest(c.layout, list(self._head), self.decoder)}"
                msg = (f"{', '.join(c.topics)} (--value-format {c.value_format}): the first "
                       f"sample: {v}{tail}. Nothing was routed or committed")
                raise SourceError(msg)
            # a sample let through with some of it unread: one bit more, said (issue 37)
            note = skipped_notice(s, self.decoder.format.spec, c.layout.universe,
                                  exact=self.metrics.telemetry.exact)
            if note is not None:
                self.notice(f"{', '.join(c.topics)} (--value-format {c.value_format}): {note}")
        finally:
            s.clear()
            self._forget_head()
        held, self._held = self._held, []
        for offsets, parts in held:
            self._send(offsets, parts)

def suggest(layout: SliceLayout, values: list[bytes | None] | list[bytearray],
            decoder: Decoder) -> str:
    """The ``-f`` to try for ``values`` (a sample's first messages), as advice for one line.

    It is :func:`panstream.inputs.parser.detect`'s answer on the sample's first lines: the format
    they have (as ``-f auto`` and ``ingest``'s notice would name it), a function of their shape,
    not of how many of them parse under one format or another. A detected format other than the
    one in use is suggested; the one in use, detected too, points at the universe; no known
    format, the detection's own note. (Until issue 37 every format was tried and the best was
    named only if it parsed at least half the sample: one line more or less flipped it, review 5,
    P1k.)
    """
    from panstream.inputs.parser import detect

    vals = [v for v in values if v]
    joined = bytearray(b"\n").join(vals)
    vals.clear()
    try:
        det = detect(memoryview(joined)) if joined else None
    finally:
        joined[:] = bytes(len(joined))
    if det is None:
        return "the sample's values are empty: check --value-format and the topic"
    if not det.known:
        return f"these look like {det.name}: {det.note}"
    if det.spec == decoder.format.spec:
        return (f"-f {det.spec} fits them (detected from the sample's first lines), so their "
                f"addresses may lie outside {layout.universe.spec}: check --universe")
    return f"try -f {det.spec} (it reads addresses in the sample's first lines)"


__all__ = ["HEAD_BYTES", "RECORD_BYTES", "SAMPLE_LINES", "Retention", "RouteConfig", "RouteStage",
           "ensure_internal_topic", "internal_retention", "internal_topic", "suggest",
           "topic_configs", "topic_retention", "window_topic"]
