"""A routed member's consumers on librdkafka (confluent-kafka): ``--source-client librdkafka``, the
default.

Why: a routed member spends most of its CPU in kafka-python moving the source topic's bytes
(socket reads of 4 KiB into Python buffers, fetch-response and record-batch decoding in Python):
0.36 µs of about 0.6 µs a line in ``bench/bench_kafka_group.py``, against 0.08 µs for a librdkafka
consumer reading the same topic (docs/kafka.md, Throughput). librdkafka fetches, decompresses and
decodes in C threads of its own, outside the GIL.

:class:`RdKafkaConsumer` offers exactly the part of kafka-python's ``KafkaConsumer`` that the
routing stage (:class:`~panstream.sources.kafka.route.RouteStage`) and the slice stage
(:class:`~panstream.sources.kafka.slices.SliceStage`, through
:class:`~panstream.sources.kafka.tail.KafkaTail` and the member's drain check) use: ``subscribe``
with an ``AsyncConsumerRebalanceListener``, ``poll``, ``commit``, ``commit_async``, ``close``,
``assignment``, ``position``, ``highwater``, ``committed``, ``beginning_offsets``, ``pause`` and
``resume``. So both stages, the commit orders (routed records acknowledged, then source offsets
committed; slices durable, then internal offsets committed) and the rebalance handling are the
same code for both clients. The routed records are still produced with kafka-python, and the
admin, drain-check and state-topic clients are kafka-python's; a group may mix members of both
clients (both use the ``range`` assignor, the consumer protocol being the same). (Until issue 26's
third round only the routing stage's source consumer could be librdkafka, and kafka-python was
the default.)

Pausing: the slice stage pauses a newly assigned partition inside the assignment callback and
resumes it once the slice is restored. The adapter assigns the partitions itself before calling
the listener (confluent-kafka would only after it), so the pause acts on assigned partitions; and
a record of a paused partition that librdkafka hands out all the same is kept back and the
partition sought back to it, so nothing is skipped.

Threading: librdkafka calls the rebalance callbacks from inside ``consume()``, on the thread that
polls (the routing thread), not on an IO thread as kafka-python does. The listener's coroutines are
therefore run to completion right there; ``commit_async`` commits synchronously (the routing
thread is the one waiting for it either way).

Settings: the kafka-python names panstream and ``-C`` use are translated to librdkafka's
(:data:`SETTINGS`); a ``-C`` key without an equivalent is an error naming the supported ones.
``-C`` also takes librdkafka's own names of those settings (``fetch.wait.max.ms``,
``sasl.username``: :func:`panstream.sources.kafka.config.parse_overrides`, issue 37).
What librdkafka buffers (its prefetch queue, ``queued.max.messages.kbytes``) holds raw source
values in C memory, as kafka-python's fetch buffers hold them in Python bytes: neither can be
overwritten by panstream; both are freed as the records are consumed.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Coroutine, Mapping
from types import SimpleNamespace
from typing import Any

from kafka import TopicPartition
from kafka.errors import CommitFailedError, KafkaError, RebalanceInProgressError

from panstream.errors import ConfigurationError

log = logging.getLogger("panstream.kafka.librdkafka")

#: kafka-python consumer setting -> librdkafka property (``None``: handled here or not needed).
SETTINGS: dict[str, str | None] = {
    "bootstrap_servers": "bootstrap.servers", "group_id": "group.id",
    "enable_auto_commit": "enable.auto.commit", "auto_offset_reset": "auto.offset.reset",
    "client_id": "client.id", "session_timeout_ms": "session.timeout.ms",
    "heartbeat_interval_ms": "heartbeat.interval.ms",
    "max_poll_interval_ms": "max.poll.interval.ms", "fetch_max_wait_ms": "fetch.wait.max.ms",
    "fetch_min_bytes": "fetch.min.bytes", "fetch_max_bytes": "fetch.max.bytes",
    "max_partition_fetch_bytes": "max.partition.fetch.bytes", "check_crcs": "check.crcs",
    "receive_buffer_bytes": "socket.receive.buffer.bytes",
    "send_buffer_bytes": "socket.send.buffer.bytes", "request_timeout_ms": "socket.timeout.ms",
    "retry_backoff_ms": "retry.backoff.ms", "reconnect_backoff_ms": "reconnect.backoff.ms",
    "reconnect_backoff_max_ms": "reconnect.backoff.max.ms",
    "security_protocol": "security.protocol", "sasl_mechanism": "sasl.mechanism",
    "sasl_plain_username": "sasl.username", "sasl_plain_password": "sasl.password",
    "sasl_kerberos_service_name": "sasl.kerberos.service.name",
    "ssl_cafile": "ssl.ca.location", "ssl_certfile": "ssl.certificate.location",
    "ssl_keyfile": "ssl.key.location", "ssl_password": "ssl.key.password",
    "ssl_crlfile": "ssl.crl.location",
    # off on every client panstream makes (issue 35, :mod:`.topology`); a -C that asks for it
    # reaches the source consumer only, never a client of the internal topic
    "allow_auto_create_topics": "allow.auto.create.topics",
    "max_poll_records": None,  # the batch size of consume()
    "bootstrap_timeout_ms": None,  # the member's topic check (kafka-python) finds a dead broker
    "api_version": None, "key_deserializer": None, "value_deserializer": None,
}

#: Unless ``-C`` says otherwise: kafka-python's assignor (members of both clients may share a
#: group), and no librdkafka statistics (they count messages per partition). And a fetch queue
#: that refills 10 ms after it drained, not librdkafka's 1,000 ms (``fetch.queue.backoff.ms``): the
#: queue holds at most ``queued.max.messages.kbytes`` (64 MiB) of prefetched values, a topic of log
#: lines fills it within a second, and then every partition's fetcher slept a second each time.
#: Measured on Tansu, 10 M lz4 CLF lines on 16 partitions, one bare consumer: 2.8-3.7 M lines/s
#: with the default, 12.2-13.5 M with 10 ms (0.07 against 0.10 µs of CPU a line: less, since
#: fewer wake-ups find an empty queue); 0 ms busy-loops (7.2 M, 0.10 µs). The bound on what is
#: buffered is unchanged.
#: And no topic auto-created by a metadata request (issue 35: :mod:`.topology`).
_FIXED = {"partition.assignment.strategy": "range", "enable.auto.offset.store": False,
          "fetch.queue.backoff.ms": 10, "allow.auto.create.topics": False}


def rdkafka_config(cfg: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
    """librdkafka properties for kafka-python consumer settings, and the batch size to consume.

    Raises:
        ConfigurationError: a setting without a librdkafka equivalent here.

    Example:
        >>> conf, batch = rdkafka_config({"bootstrap_servers": ["h:9092"], "group_id": "g",
        ...                               "session_timeout_ms": 6000, "max_poll_records": 500})
        >>> conf["bootstrap.servers"], conf["session.timeout.ms"], batch
        ('h:9092', 6000, 500)
    """
    conf: dict[str, Any] = dict(_FIXED)
    batch = 5000
    for key, value in cfg.items():
        if key not in SETTINGS:
            known = ", ".join(k for k, v in SETTINGS.items() if v)
            msg = (f"-C {key} has no librdkafka equivalent in panstream (--source-client "
                   f"librdkafka): drop it, or use --source-client kafka-python; supported: {known}")
            raise ConfigurationError(msg)
        name = SETTINGS[key]
        if key == "max_poll_records":
            batch = int(value)
        elif name is not None and value is not None:
            conf[name] = ",".join(value) if key == "bootstrap_servers" and not isinstance(
                value, str) else value
    return conf, batch


class _Record:
    """The two fields of a source record the routing stage reads."""

    __slots__ = ("_message", "offset", "value")

    def __init__(self, value: bytes | None, offset: int, message: Any = None) -> None:
        self.value = value
        self.offset = offset
        self._message = message

    @property
    def headers(self) -> list[tuple[str, bytes]] | None:
        """The record's headers, read only when asked (the slice stage's group stamp)."""
        return None if self._message is None else self._message.headers()


def _finish(coro: Coroutine[Any, Any, Any]) -> None:
    """Run a listener coroutine that never truly suspends (its awaits are synchronous here)."""
    try:
        coro.send(None)
    except StopIteration:
        return
    coro.close()
    msg = "a rebalance listener awaited something asynchronous under librdkafka"
    raise RuntimeError(msg)


#: The magic of librdkafka's serialized consumer group metadata (rd_kafka_consumer_group_metadata_write).
_CGMD = b"CGMDv2:"


class _Done:
    """An awaitable that is already complete (``commit_async`` under librdkafka)."""

    def __await__(self) -> Any:
        return iter(())


class RdKafkaConsumer:
    """A confluent-kafka ``Consumer`` that looks like the part of kafka-python's ``KafkaConsumer``
    the routing stage uses (module docstring).

    Args:
        **cfg: kafka-python consumer settings (:func:`panstream.sources.kafka.consumer_config`).

    Raises:
        ConfigurationError: a setting without a librdkafka equivalent, or confluent-kafka missing.
    """

    def __init__(self, **cfg: Any) -> None:
        try:
            import confluent_kafka
        except ImportError:  # pragma: no cover - a dependency
            msg = ("--source-client librdkafka (the default) needs the confluent-kafka package, a "
                   "dependency of panstream: pip install confluent-kafka, or use --source-client "
                   "kafka-python")
            raise ConfigurationError(msg) from None
        self._ck = confluent_kafka
        conf, self._batch = rdkafka_config(cfg)
        conf["logger"] = log
        try:
            self._consumer = confluent_kafka.Consumer(conf)
        except confluent_kafka.KafkaException as exc:
            raise KafkaError(f"librdkafka consumer: {exc}") from None
        self._listener: Any = None
        self._paused: set[TopicPartition] = set()

    # ------------------------------------------------------------- group
    def subscribe(self, topics: list[str], listener: Any = None) -> None:
        """Join the group on ``topics``; ``listener`` gets kafka-python ``TopicPartition`` sets."""
        self._listener = listener

        def tps(parts: list[Any]) -> set[TopicPartition]:
            return {TopicPartition(p.topic, p.partition) for p in parts}

        def on_assign(consumer: Any, parts: list[Any]) -> None:
            # assign first (confluent-kafka would after the callback), so that a listener's
            # pause() acts on assigned partitions: the slice stage pauses new ones until restored
            consumer.assign(parts)
            if self._listener is not None:
                _finish(self._listener.on_partitions_assigned(tps(parts)))

        def on_revoke(_: Any, parts: list[Any]) -> None:
            if self._listener is not None:
                _finish(self._listener.on_partitions_revoked(tps(parts)))
            self._paused.difference_update(tps(parts))

        def on_lost(_: Any, parts: list[Any]) -> None:
            if self._listener is not None:
                _finish(self._listener.on_partitions_lost(tps(parts)))
            self._paused.difference_update(tps(parts))

        self._consumer.subscribe(list(topics), on_assign=on_assign, on_revoke=on_revoke,
                                 on_lost=on_lost)

    def generation(self) -> int | None:
        """This member's generation in its group (``None`` before it joined or if librdkafka
        cannot say): what the slice stage's snapshot fencing claims with. Read from
        ``consumer_group_metadata()``, librdkafka's serialized group metadata (``CGMDv2:``, then
        the generation as a native ``int32``, then the group and member ids), pinned against
        Tansu in ``tests/kafka/test_librdkafka.py``."""
        try:
            meta = self._consumer.consumer_group_metadata()
        except Exception:  # noqa: BLE001 - not in a group (yet)
            return None
        if not isinstance(meta, bytes) or not meta.startswith(_CGMD) or len(meta) < len(_CGMD) + 4:
            return None
        (gen,) = struct.unpack_from("=i", meta, len(_CGMD))
        return gen if gen >= 0 else None

    @property
    def _coordinator(self) -> Any:
        """kafka-python's ``consumer._coordinator._generation.generation_id``, which the slice
        stage's fencing reads (``KafkaTail._generation``), answered from :meth:`generation`."""
        return SimpleNamespace(_generation=SimpleNamespace(generation_id=self.generation()))

    # ------------------------------------------------------------- records
    @property
    def max_records(self) -> int:
        """The most messages one poll of the routing stage takes (``max_poll_records``); it may
        take them in pieces (``poll(max_records=...)``, :meth:`RouteStage._poll_pieces`)."""
        return self._batch

    def poll(self, timeout_ms: int = 0, max_records: int | None = None
             ) -> dict[TopicPartition, list[_Record]]:
        """Up to ``max_records`` (``max_poll_records``) records, by partition, as kafka-python's
        ``poll`` returns them.

        Raises:
            KafkaError: librdkafka reported a consumer error.
        """
        try:
            msgs = self._take(max(timeout_ms, 0) / 1000, max_records or self._batch)
        except self._ck.KafkaException as exc:
            raise KafkaError(f"librdkafka consumer: {exc}") from None
        out: dict[TopicPartition, list[_Record]] = {}
        rewind: dict[TopicPartition, int] = {}
        last: Any = None
        bucket: list[_Record] = []
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() == self._ck.KafkaError._PARTITION_EOF:
                    continue
                raise KafkaError(f"librdkafka consumer: {err.str()}")
            key = (m.topic(), m.partition())
            if key != last:
                tp = TopicPartition(*key)
                if tp in self._paused:  # fetched before the pause took effect: not handed out
                    bucket = []
                    rewind.setdefault(tp, m.offset() or 0)
                else:
                    bucket = out.setdefault(tp, [])
                last = key
            bucket.append(_Record(m.value(), m.offset() or 0, m))  # set on every message
        msgs.clear()
        for tp, offset in rewind.items():  # read again from there once resumed
            self._consumer.seek(self._ck.TopicPartition(tp.topic, tp.partition, offset))
        return out

    def _take(self, timeout: float, batch: int) -> list[Any]:
        """What is queued now (up to the batch), or else the first message within ``timeout``
        and what is queued behind it. librdkafka's ``consume(n, timeout)`` waits until ``n``
        messages are queued or the timeout ends, and its queue (64 MiB) holds fewer than the
        5,000-message batch of 500-line messages: every poll slept its whole 200 ms, and a
        member read its source at half speed (docs/kafka.md, Throughput)."""
        c = self._consumer
        msgs = c.consume(batch, timeout=0)
        if msgs or timeout <= 0:
            return msgs  # a fresh list of librdkafka's: poll() clears it
        first = c.poll(timeout)
        if first is None:
            return []
        return [first, *c.consume(batch - 1, timeout=0)] if batch > 1 else [first]

    # ------------------------------------------------------------- positions
    def assignment(self) -> set[TopicPartition]:
        """The partitions this member holds now."""
        return {TopicPartition(p.topic, p.partition) for p in self._consumer.assignment()}

    def position(self, tp: TopicPartition, timeout_ms: int | None = None) -> int | None:
        """The next offset this consumer will hand out for ``tp`` (``None`` before the first)."""
        got = self._consumer.position([self._ck.TopicPartition(tp.topic, tp.partition)])
        off = got[0].offset if got else -1
        return off if off >= 0 else None

    def highwater(self, tp: TopicPartition) -> int | None:
        """The high-water mark of ``tp`` from the last fetch response (no ListOffsets request:
        Tansu answers those wrongly), ``None`` before one."""
        try:
            _, high = self._consumer.get_watermark_offsets(
                self._ck.TopicPartition(tp.topic, tp.partition), cached=True)
        except self._ck.KafkaException:
            return None
        return high if high is not None and high >= 0 else None

    def pause(self, *tps: TopicPartition) -> None:
        """Stop handing out records of ``tps`` until :meth:`resume` (a record librdkafka had
        already fetched is not handed out either: :meth:`poll` seeks back to it)."""
        self._paused.update(tps)
        self._consumer.pause([self._ck.TopicPartition(t.topic, t.partition) for t in tps])

    def resume(self, *tps: TopicPartition) -> None:
        self._consumer.resume([self._ck.TopicPartition(t.topic, t.partition) for t in tps])
        self._paused.difference_update(tps)

    def committed(self, tp: TopicPartition, timeout_ms: int = 10_000) -> int | None:
        """The group's committed offset of ``tp`` (``None``: none)."""
        got = self._consumer.committed([self._ck.TopicPartition(tp.topic, tp.partition)],
                                       timeout=timeout_ms / 1000)
        off = got[0].offset if got else -1
        return off if off >= 0 else None

    def beginning_offsets(self, tps: list[TopicPartition], timeout_ms: int = 10_000
                          ) -> dict[TopicPartition, int]:
        """The log-start offset of each of ``tps``, in one ListOffsets round (``offsets_for_times``
        with the EARLIEST sentinel): asking the watermarks partition by partition took 0.5 s each
        against Tansu, 8 s for 16 slices at every assignment.

        Raises:
            KafkaError: the broker did not answer.
        """
        if not tps:
            return {}
        ask = [self._ck.TopicPartition(tp.topic, tp.partition, self._ck.OFFSET_BEGINNING)
               for tp in tps]
        try:
            got = self._consumer.offsets_for_times(ask, timeout=timeout_ms / 1000)
        except self._ck.KafkaException as exc:
            raise KafkaError(f"librdkafka list offsets: {exc}") from None
        bad = [g for g in got if g.error is not None or g.offset < 0]
        if bad:
            raise KafkaError(f"librdkafka list offsets: {bad[0].topic}[{bad[0].partition}]: "
                             f"{bad[0].error or 'no offset'}")
        return {TopicPartition(g.topic, g.partition): int(g.offset) for g in got}

    # ------------------------------------------------------------- offsets
    def commit(self, offsets: Mapping[TopicPartition, Any]) -> None:
        """Commit ``offsets`` (next offset to read, as ``OffsetAndMetadata`` or int) synchronously.

        Raises:
            KafkaError: the commit failed, for the request or for a partition.
        """
        if not offsets:
            return
        parts = [self._ck.TopicPartition(tp.topic, tp.partition,
                                         int(getattr(off, "offset", off)))
                 for tp, off in offsets.items()]
        try:
            done = self._consumer.commit(offsets=parts, asynchronous=False)
        except self._ck.KafkaException as exc:
            err: Any = exc.args[0] if exc.args else None
            code = err.code() if err is not None and hasattr(err, "code") else None
            if code == self._ck.KafkaError.REBALANCE_IN_PROGRESS:
                # the group rebalances now (librdkafka joins on its own thread): what kafka-python
                # raises while its member rejoins; neither current nor evicted can be told yet
                raise RebalanceInProgressError(f"librdkafka commit: {exc}") from None
            if code in (self._ck.KafkaError.ILLEGAL_GENERATION, self._ck.KafkaError.UNKNOWN_MEMBER_ID):
                # librdkafka rebalances on its own thread, so a commit can meet a newer generation:
                # what kafka-python raises for the same case (the routing stage retries or hands over)
                raise CommitFailedError(f"librdkafka commit: {exc}") from None
            raise KafkaError(f"librdkafka commit: {exc}") from None
        bad = [p for p in done or () if p.error is not None]
        if bad:
            raise KafkaError(f"librdkafka commit: {bad[0].topic}[{bad[0].partition}]: {bad[0].error}")

    def commit_async(self, offsets: Mapping[TopicPartition, Any]) -> _Done:
        """Commit now (callbacks run on the polling thread) and return a completed awaitable."""
        self.commit(offsets)
        return _Done()

    def close(self, autocommit: bool = False) -> None:
        """Leave the group (revoking first, so the listener commits) and free the client."""
        self._consumer.close()


#: kafka-python producer setting -> librdkafka property, for the routed records' producer (the
#: connection and security keys are the consumer's, :data:`SETTINGS`).
PRODUCER_SETTINGS: dict[str, str | None] = {
    **{k: v for k, v in SETTINGS.items() if k in (
        "bootstrap_servers", "client_id", "request_timeout_ms", "retry_backoff_ms",
        "reconnect_backoff_ms", "reconnect_backoff_max_ms", "send_buffer_bytes",
        "receive_buffer_bytes", "security_protocol", "sasl_mechanism", "sasl_plain_username",
        "sasl_plain_password", "sasl_kerberos_service_name", "ssl_cafile", "ssl_certfile",
        "ssl_keyfile", "ssl_password", "ssl_crlfile")},
    "acks": "acks", "linger_ms": "linger.ms", "batch_size": "batch.size",
    "allow_auto_create_topics": "allow.auto.create.topics",
    "max_request_size": "message.max.bytes",
    "bootstrap_timeout_ms": None, "api_version": None,
}


class _Refused:
    """A refusal without librdkafka's error object (its ``str()`` is what :class:`_Sent` reads)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def str(self) -> str:  # noqa: A003 - librdkafka's KafkaError spells it so
        return self.text


class _Sent:
    """One routed record's acknowledgement, as the routing stage reads kafka-python's futures:
    ``is_done``, ``failed()``, ``exception``."""

    __slots__ = ("exception", "is_done")

    def __init__(self) -> None:
        self.is_done = False
        self.exception: Any = None

    def __call__(self, err: Any, _msg: Any) -> None:  # librdkafka's delivery report
        self.exception = KafkaError(f"librdkafka producer: {err.str()}") if err is not None else None
        self.is_done = True

    def failed(self) -> bool:
        return self.is_done and self.exception is not None


class RdKafkaProducer:
    """A confluent-kafka ``Producer`` that looks like the part of kafka-python's ``KafkaProducer``
    the routing stage uses: ``send`` (returning a future), ``flush``, ``close``.

    Why: kafka-python's producer keeps a sender thread of its own in Python, which wakes for every
    send and competes for the member's GIL (a fifth of a librdkafka member's busy samples in
    ``bench/bench_kafka_group.py --profile``), and its construction waits for a broker on the
    routing thread. librdkafka's sender runs in C. Delivery reports are served on the routing
    thread (by :meth:`send` and :meth:`flush`), so the routing stage's check "every routed record
    acknowledged, then commit" reads the same futures.

    Args:
        **cfg: kafka-python producer settings (connection and security, ``acks``, ``linger_ms``,
            ``batch_size``, ``max_request_size``).

    Raises:
        ConfigurationError: a setting without a librdkafka equivalent here.
    """

    def __init__(self, **cfg: Any) -> None:
        import confluent_kafka

        self._ck = confluent_kafka
        conf: dict[str, Any] = {"logger": log, "allow.auto.create.topics": False}
        for key, value in cfg.items():
            if key not in PRODUCER_SETTINGS:
                msg = (f"the routed records' producer has no librdkafka equivalent of {key}: use "
                       "--source-client kafka-python")
                raise ConfigurationError(msg)
            name = PRODUCER_SETTINGS[key]
            if name is not None and value is not None:
                conf[name] = ",".join(value) if key == "bootstrap_servers" and not isinstance(
                    value, str) else value
        try:
            self._producer = confluent_kafka.Producer(conf)
        except confluent_kafka.KafkaException as exc:
            raise KafkaError(f"librdkafka producer: {exc}") from None

    def send(self, topic: str, value: bytes, partition: int,
             headers: list[tuple[str, bytes]] | None = None) -> _Sent:
        """Queue one record for ``partition`` of ``topic``; its future completes on a later
        :meth:`send` or :meth:`flush` of this thread. A record librdkafka refuses at once (a
        partition its metadata says the topic lacks; before that metadata came the same record
        fails in its delivery report) gets a future that is already done and failed, as kafka-python
        answers, so the routing stage commits nothing either way."""
        sent = _Sent()
        while True:
            try:
                self._producer.produce(topic, value=value, partition=partition,
                                       on_delivery=sent, **({"headers": headers} if headers
                                                            else {}))
                break
            except BufferError:  # librdkafka's queue is full: serve acknowledgements, then again
                self._producer.poll(0.1)
            except self._ck.KafkaException as exc:
                err = exc.args[0] if exc.args else exc
                sent(err if hasattr(err, "str") else _Refused(str(exc)), None)
                return sent
        self._producer.poll(0)
        return sent

    def flush(self, timeout: float | None = None) -> None:
        """Wait for every queued record's acknowledgement (at most ``timeout`` seconds; a record
        still unacknowledged then has a future that is not done)."""
        self._producer.flush(-1 if timeout is None else timeout)

    def close(self, timeout: float | None = None) -> None:
        """Flush (at most ``timeout`` seconds); librdkafka frees the client with the object."""
        self.flush(timeout)


#: The watcher of :func:`say_native_crash` (a process of its own: a signal death ends every thread
#: of the member). It reads the member's pipe until the member's end closes: ``exit`` written last
#: is a normal exit (silent); otherwise the member died of a signal, which it reads from
#: ``/proc/PID/stat`` (field 52, the exit status, while the member is not yet reaped): silent for
#: SIGKILL (an operator's ``kill -9`` or the OOM killer: the exit status says it), one line for a
#: crash, a hedged one when the member was reaped before it could look.
_WATCHER = r"""
import signal, sys
for s in (signal.SIGINT, signal.SIGTERM):
    signal.signal(s, signal.SIG_IGN)
pid, line, unknown = int(sys.argv[1]), sys.argv[2], sys.argv[3]
got = sys.stdin.buffer.read()
if not got.endswith(b"exit\n"):
    try:
        with open(f"/proc/{pid}/stat") as f:
            sig = int(f.read().rpartition(")")[2].split()[49]) & 0x7F
    except (OSError, ValueError, IndexError):
        sig = -1
    if sig not in (0, signal.SIGKILL):  # 0: an exit without atexit (os._exit after Ctrl+C)
        what = {int(s): s.name for s in signal.Signals}.get(sig, "")
        try:  # the versions, read here: the member does not import confluent-kafka for this
            import confluent_kafka as ck
            versions = f"confluent-kafka {ck.__version__}, librdkafka {ck.libversion()[0]}"
        except Exception:
            versions = "confluent-kafka"
        out = line.replace("{what}", what) if what else unknown
        sys.stderr.write(out.replace("{versions}", versions) + "\n")
        sys.stderr.flush()
"""


def crash_line() -> tuple[str, str]:
    """The lines :func:`say_native_crash` prints: a known signal (``{what}``), and a death whose
    signal could not be read, both naming the client versions (``{versions}``, filled in by the
    watcher)."""
    why = ("inside librdkafka ({versions}), which crashes so when a topic it fetches is "
           "deleted under it: a source topic deleted or re-created, or the broker restarted "
           "without its topics (docs/kafka.md, Topology changes). Check the group's topics "
           "(panstream inspect -b); --source-client kafka-python stops with one line instead of "
           "a crash. Nothing after the last checkpoint was committed")
    return (f"panstream: error: the member died of {{what}} {why}",
            "panstream: the member process ended by a signal without its closing line: kill -9, "
            f"the OOM killer, or a crash {why}")


def say_native_crash(lines: tuple[str, str]) -> Any:
    """Make a crash inside librdkafka's C threads say one line (issue 35) instead of nothing.

    librdkafka 2.16.0 (confluent-kafka 2.16.1) dies of SIGSEGV in its main thread when a topic
    its consumer fetches is deleted, on Tansu (docs/kafka.md, *Topology changes*). No handler in
    the member can run then: librdkafka's threads block every signal, and the kernel kills a
    process on a synchronous SIGSEGV in a thread that blocks it whatever its handler
    (``faulthandler`` stays silent). So a small watcher process (:data:`_WATCHER`) says it: the
    member writes ``exit`` into the watcher's pipe at a normal exit; a pipe that closes without
    it is a death by signal, read from ``/proc``. The member still dies of the signal (its exit
    status says so); the line says why and what to do. Since issue 35's last round ``panstream
    kafka`` runs a librdkafka member in a supervised child process instead
    (:mod:`~panstream.sources.kafka.supervise`: one line and exit 1, no death by signal); this
    watcher serves only where nothing is forked (stdio that are not files: an in-process
    ``CliRunner``).

    Returns:
        The watcher process (``None`` where it cannot be started: then nothing changes).
    """
    import atexit
    import os
    import subprocess
    import sys

    try:
        read, write = os.pipe()
        proc = subprocess.Popen([sys.executable, "-c", _WATCHER, str(os.getpid()), *lines],
                                stdin=read, start_new_session=True)
    except OSError:
        return None
    os.close(read)

    def bye() -> None:
        try:
            os.write(write, b"exit\n")
            os.close(write)
            proc.wait(timeout=5)
        except Exception:  # noqa: BLE001, S110 - the watcher is a courtesy; the exit goes on
            pass

    atexit.register(bye)
    return proc
