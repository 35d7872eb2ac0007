"""Tail Kafka topics with kafka-python into one pan-private shard table per partition.

This is the only module of panstream that imports ``kafka``. It wires a ``KafkaConsumer`` in a
consumer group to the pure parts: :mod:`panstream.state.checkpoint` (the commit order),
:mod:`panstream.state.stores` (where shards live) and the estimator.

Life of a consumer (:class:`KafkaTail`):

* **Assign.** The rebalance listener pauses each newly assigned partition; the main loop then
  restores that partition's shard from the store (or starts a fresh D0 table) and resumes it. The
  consumer reads on from the group's committed offset.
* **Process.** ``poll()`` returns batches per partition; each batch is decoded into cell indices
  (``item``: one item per message; ``lines``: newline-separated items per message), applied to the
  partition's shard with fresh D1 draws, and the working buffers are overwritten with zeros.
  Malformed messages (lines) are skipped. Their counts, like every count of messages and items,
  live only in the current 1-s telemetry window and are published with geometric noise
  (:class:`Metrics`, :mod:`panstream.telemetry`); nothing exact about the items is kept longer.
* **Checkpoint** every ``checkpoint_interval`` seconds: every owned shard's snapshot durable
  (whether or not its partition received anything: the writes must not say who arrived), then
  commit offsets (last processed + 1). Auto-commit is always off.
* **Revoke.** Before a rebalance takes partitions away, the listener checkpoints their shards and
  commits their offsets, then wipes them; the next owner restores them. Partitions *lost* (this
  member was evicted) are wiped without saving: another member may already own them.
* **Stop** (SIGTERM/SIGINT, or ``idle_timeout`` seconds without messages): final checkpoint and
  commit, leave the group (``close()``), return.

Threading: kafka-python 3 runs the group protocol on its own IO thread, and rebalance listener
callbacks run there, but only while the main thread is blocked inside ``poll()`` or ``close()``; the
shards are therefore never touched by two threads at once. Blocking calls that need the IO loop
(``commit()``) cannot be made from the listener, so it commits with ``commit_async`` and awaits the
returned future (:class:`_Rebalance` is an ``AsyncConsumerRebalanceListener``).
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import math
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener
from kafka.errors import KafkaError, TopicAlreadyExistsError
from kafka.structs import OffsetAndMetadata

from panstream import estimators
from panstream.calibration import DEFAULT_MODULUS
from panstream.errors import ConfigurationError, PanstreamError, SourceError, StateError
from panstream.estimators.base import Estimator
from panstream.parse import LineParser
from panstream.release.ledger import ShardLedger
from panstream.state.checkpoint import Checkpointer, Shard, ShardStore, restore_shard, shard_key
from panstream.state.stores import DEFAULT_CHUNK_BYTES, TopicStore, decode_shard
from panstream.telemetry import CountWindow, TelemetryPolicy
from panstream.universe import Universe

log = logging.getLogger("panstream.kafka")

VALUE_FORMATS = ("item", "lines")

#: The lines format parses about this many bytes at a time (the parser's working arrays stay in
#: cache; one big buffer per poll is several times slower).
_LINES_CHUNK = 1 << 20

#: Settings panstream always sets itself; ``-C`` may not change them.
_FIXED = {"enable_auto_commit": False, "group_id": None, "bootstrap_servers": None,
          "key_deserializer": None, "value_deserializer": None}

#: Defaults panstream uses unless ``-C`` overrides them.
CONSUMER_DEFAULTS: dict[str, Any] = {"auto_offset_reset": "earliest", "max_poll_records": 5000,
                                     "client_id": "panstream"}


# ---------------------------------------------------------------------- configuration
def _coerce(key: str, raw: str, default: Any) -> Any:
    text = raw.strip()
    if key == "api_version":
        try:
            return tuple(int(x) for x in text.split("."))
        except ValueError:
            msg = f"-C api_version={raw!r}: expected a version such as 3.7 or 2.8.1"
            raise ConfigurationError(msg) from None
    if isinstance(default, bool):
        low = text.lower()
        if low in ("true", "1", "yes", "on"):
            return True
        if low in ("false", "0", "no", "off"):
            return False
        msg = f"-C {key}={raw!r}: expected true or false"
        raise ConfigurationError(msg)
    if isinstance(default, int):
        try:
            return int(text)
        except ValueError:
            msg = f"-C {key}={raw!r}: expected an integer"
            raise ConfigurationError(msg) from None
    if isinstance(default, float):
        try:
            return float(text)
        except ValueError:
            msg = f"-C {key}={raw!r}: expected a number"
            raise ConfigurationError(msg) from None
    if default is None or isinstance(default, str):
        if default is None and text.lstrip("-").isdigit():
            return int(text)
        return None if text.lower() in ("none", "null") else text
    msg = (f"-C {key}: kafka-python expects a Python object ({type(default).__name__}) here, which "
           "cannot be given on the command line")
    raise ConfigurationError(msg)


def parse_overrides(pairs: Sequence[str]) -> dict[str, Any]:
    """Turn ``-C key=value`` pairs into kafka-python ``KafkaConsumer`` settings.

    Keys are checked against ``KafkaConsumer.DEFAULT_CONFIG`` (dashes and dots may be used for
    underscores, as in Java client names: ``session.timeout.ms``); values are converted to the type
    of the default.

    Raises:
        ConfigurationError: malformed pair, unknown key (with the closest known keys), a key
            panstream sets itself, or a value of the wrong type.

    Example:
        >>> parse_overrides(["session.timeout.ms=6000", "check_crcs=false"])
        {'session_timeout_ms': 6000, 'check_crcs': False}
    """
    known = KafkaConsumer.DEFAULT_CONFIG
    out: dict[str, Any] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            msg = f"-C {pair!r}: expected key=value, e.g. -C session_timeout_ms=6000"
            raise ConfigurationError(msg)
        name = key.strip().replace(".", "_").replace("-", "_")
        if name not in known:
            close = difflib.get_close_matches(name, list(known), n=3)
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            msg = (f"unknown Kafka consumer setting {key.strip()!r} in -C{hint} (settings are "
                   "kafka-python KafkaConsumer options, see its DEFAULT_CONFIG)")
            raise ConfigurationError(msg)
        if name in _FIXED:
            msg = (f"-C {name} cannot be set: panstream sets it itself (auto-commit is always off; "
                   "use -b/-g for servers and group)")
            raise ConfigurationError(msg)
        out[name] = _coerce(name, value, known[name])
    return out


def consumer_config(bootstrap: str | Sequence[str], group: str, overrides: Mapping[str, Any]
                    | None = None, security: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The full ``KafkaConsumer`` settings: panstream's defaults, then security, then ``-C``."""
    servers = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    cfg: dict[str, Any] = dict(CONSUMER_DEFAULTS)
    cfg.update({k: v for k, v in (security or {}).items() if v is not None})
    cfg.update(overrides or {})
    cfg.update(bootstrap_servers=[s.strip() for s in servers if s.strip()], group_id=group,
               enable_auto_commit=False)
    return cfg


_CLIENT_KEYS = ("bootstrap_servers", "bootstrap_timeout_ms", "client_id", "request_timeout_ms",
                "security_protocol",
                "ssl_context", "ssl_check_hostname", "ssl_cafile", "ssl_certfile", "ssl_keyfile",
                "ssl_password", "ssl_crlfile", "ssl_ciphers", "sasl_mechanism", "sasl_plain_username",
                "sasl_plain_password", "sasl_kerberos_service_name", "sasl_kerberos_domain_name",
                "sasl_oauth_token_provider", "api_version")


def client_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The connection and security settings of a consumer config, for admin/producer clients."""
    return {k: cfg[k] for k in _CLIENT_KEYS if k in cfg}


def bootstrap_seconds(cfg: Mapping[str, Any]) -> float:
    """How long a client built from ``cfg`` waits for a first broker before it gives up."""
    default = KafkaConsumer.DEFAULT_CONFIG["bootstrap_timeout_ms"]
    return float(cfg.get("bootstrap_timeout_ms", default)) / 1000


def connecting_notice(cfg: Mapping[str, Any]) -> str:
    """The line printed before the first connection, so an unreachable broker is not a silent wait.

    Example:
        >>> connecting_notice(consumer_config("127.0.0.1:9092", "g"))[:63]
        'connecting to Kafka at 127.0.0.1:9092 (waiting up to 30 s for a'
    """
    servers = ",".join(cfg.get("bootstrap_servers") or [])
    return (f"connecting to Kafka at {servers} (waiting up to {bootstrap_seconds(cfg):g} s for a "
            "broker to answer; -C bootstrap_timeout_ms=MS changes the wait)")


def unreachable_message(cfg: Mapping[str, Any], exc: Exception, what: str = "") -> str:
    """One line for a broker that did not answer: where, how long, what to check."""
    servers = ",".join(cfg.get("bootstrap_servers") or [])
    return (f"no Kafka broker answered at {servers}{what} within {bootstrap_seconds(cfg):g} s "
            f"({type(exc).__name__}): check -b HOST:PORT, that the broker is running and reachable "
            "from this host, and the security options")


# ---------------------------------------------------------------------- decoding
@dataclass
class Decoded:
    """Cell indices of a batch and its operational counts (never stored)."""

    indices: np.ndarray
    malformed: int = 0
    outside: int = 0


class Decoder:
    """Turn a batch of message values into cell indices (``item`` or ``lines`` format).

    ``item``: each message value is one item (text of an address, an integer, an identifier); a
    value that cannot be parsed (or a null or blank value) is one malformed message. For IPv4 universes the
    batch is joined with newlines and parsed by the vectorized :class:`~panstream.parse.LineParser`.

    ``lines``: each value holds newline-separated items (as log shippers batch them); every
    malformed line is counted. Empty lines are ignored.

    The joined buffer is overwritten with zeros after parsing.
    """

    def __init__(self, universe: Universe, value_format: str = "item") -> None:
        if value_format not in VALUE_FORMATS:
            msg = f"unknown value format {value_format!r}: use {' or '.join(VALUE_FORMATS)}"
            raise ConfigurationError(msg)
        self.universe = universe
        self.value_format = value_format
        self._parser = LineParser(universe, "plain")

    def __call__(self, values: list[bytes | None]) -> Decoded:
        if self.value_format == "item":
            return self._items(values)
        return self._lines(values)

    def _items(self, values: list[bytes | None]) -> Decoded:
        if self.universe.kind == "ipv4" and None not in values:
            # bytearray.join builds the mutable buffer directly (no immutable copy of the items
            # left behind); the trailing b"" gives the final newline without a reallocation.
            buf = bytearray(b"\n").join([*values, b""])  # type: ignore[list-item]
            try:
                if buf.count(b"\n") == len(values):  # no value holds a newline of its own
                    r = self._parser.parse(buf)
                    return Decoded(r.indices, r.malformed + r.empty, r.outside)
            finally:
                buf[:] = bytes(len(buf))
        res = self.universe.indices(values)
        return Decoded(res.indices, res.malformed + res.empty, res.outside)

    def _lines(self, values: list[bytes | None]) -> Decoded:
        nulls = sum(v is None for v in values)
        parts = [v for v in values if v] if nulls else values
        out: list[np.ndarray] = []
        malformed, outside = nulls, 0
        start = size = 0
        for i, v in enumerate(parts):
            size += len(v)  # type: ignore[arg-type]
            if size >= _LINES_CHUNK or i == len(parts) - 1:
                r = self._parse_joined(parts[start:i + 1])  # type: ignore[arg-type]
                out.append(r.indices)
                malformed += r.malformed
                outside += r.outside
                start, size = i + 1, 0
        idx = np.concatenate(out) if len(out) > 1 else (out[0] if out else np.empty(0, np.intp))
        for a in out:
            if a is not idx:
                a.fill(0)
        return Decoded(idx, malformed, outside)

    def _parse_joined(self, parts: list[bytes]) -> Any:
        buf = bytearray(b"\n").join([*parts, b""])  # mutable from the start, wiped below
        try:
            return self._parser.parse(buf)
        finally:
            buf[:] = bytes(len(buf))


# ---------------------------------------------------------------------- metrics
#: The counts of one telemetry window. One item (a message in the ``item`` format, a line in
#: ``lines``) adds at most one message and one of items/malformed/outside: L1 sensitivity 2.
COUNT_FIELDS = ("messages", "items", "malformed", "outside")
KAFKA_TELEMETRY_SENSITIVITY = 2


class Metrics:
    """Prometheus metrics (``prometheus_client``), operational figures only.

    Every figure that counts messages or items is a per-window release of
    :class:`~panstream.telemetry.CountWindow`: the exact counts of a 1-s window get two-sided
    geometric noise at the telemetry epsilon (sensitivity 2: a message and its item) and are then
    forgotten; the gauges show the noisy rates of the last window (which may dip below zero when
    traffic is near zero), and :attr:`window` keeps only noisy totals. Nothing cumulative and
    exact is kept or exported. The other figures do not count items: per-partition consumer lag
    (the broker exposes it to any client), seconds since the last durable checkpoint,
    rebalances, checkpoints, partitions owned, and the telemetry epsilon and noise sd themselves.
    ``port=None`` disables the HTTP endpoint (figures still kept).

    Args:
        port, host: where to serve ``/metrics``.
        telemetry: the release policy of the counts (default: noisy at
            :data:`~panstream.telemetry.DEFAULT_TELEMETRY_EPSILON`, sensitivity 2).
        clock: monotonic clock (for tests).
    """

    def __init__(self, port: int | None = None, host: str = "127.0.0.1",
                 telemetry: TelemetryPolicy | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.telemetry = telemetry or TelemetryPolicy(sensitivity=KAFKA_TELEMETRY_SENSITIVITY)
        self._clock = clock
        self.window = CountWindow(self.telemetry, COUNT_FIELDS, now=clock())
        self.registry = CollectorRegistry()
        r = self.registry
        noisy = ("" if self.telemetry.exact else
                 ", noisy: geometric noise at panstream_kafka_telemetry_epsilon")
        self.messages_rate = Gauge("panstream_kafka_messages_per_second",
                                   f"Messages consumed per second (last window{noisy})", registry=r)
        self.items_rate = Gauge("panstream_kafka_items_per_second",
                                f"Items applied to the tables per second (last window{noisy})",
                                registry=r)
        self.malformed_rate = Gauge("panstream_kafka_malformed_per_second",
                                    f"Malformed messages (or lines) skipped per second (last "
                                    f"window{noisy})", registry=r)
        self.outside_rate = Gauge("panstream_kafka_outside_per_second",
                                  f"Well-formed items outside the universe skipped per second "
                                  f"(last window{noisy})", registry=r)
        self.telemetry_epsilon = Gauge("panstream_kafka_telemetry_epsilon",
                                       "Event-level epsilon of the per-window counts (+Inf: exact "
                                       "counts, --exact-counts)", registry=r)
        self.telemetry_epsilon.set(math.inf if self.telemetry.epsilon is None
                                   else self.telemetry.epsilon)
        self.noise_sd = Gauge("panstream_kafka_telemetry_noise_sd",
                              "Noise sd of each count of one window (divide by the window's "
                              "seconds for the rates)", registry=r)
        self.noise_sd.set(self.telemetry.noise_sd)
        self.lag = Gauge("panstream_kafka_consumer_lag",
                         "Messages behind the partition's high-water mark", ["topic", "partition"],
                         registry=r)
        self.since_checkpoint = Gauge("panstream_kafka_seconds_since_checkpoint",
                                      "Seconds since the last durable checkpoint", registry=r)
        self.rebalances = Counter("panstream_kafka_rebalances", "Partition assignments received",
                                  registry=r)
        self.checkpoints = Counter("panstream_kafka_checkpoints", "Durable checkpoints made",
                                   registry=r)
        self.assigned = Gauge("panstream_kafka_assigned_partitions", "Partitions owned",
                              registry=r)
        self.server: Any = None
        if port is not None:
            from prometheus_client import start_http_server

            try:
                self.server, _ = start_http_server(port, addr=host, registry=r)
            except OSError as exc:
                msg = f"cannot serve metrics on {host}:{port}: {exc.strerror}; pick a free port"
                raise ConfigurationError(msg) from None

    def batch(self, messages: int, items: int, malformed: int = 0, outside: int = 0) -> None:
        """Add one applied batch's exact counts to the current window (released at its close)."""
        self.window.add(messages=messages, items=items, malformed=malformed, outside=outside)

    def tick(self, now: float | None = None) -> None:
        """Close the window if it is due (call often, traffic or not: the schedule is the clock's)."""
        now = self._clock() if now is None else now
        if self.window.due(now):
            self.close_window(now)

    def close_window(self, now: float | None = None) -> None:
        """Release the current window's counts to the gauges and forget the exact ones."""
        now = self._clock() if now is None else now
        out = self.window.close(now)
        dt = max(self.window.last_seconds, 1e-9)
        self.messages_rate.set(out["messages"] / dt)
        self.items_rate.set(out["items"] / dt)
        self.malformed_rate.set(out["malformed"] / dt)
        self.outside_rate.set(out["outside"] / dt)

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server = None


# ---------------------------------------------------------------------- state topic
class KafkaRecordLog:
    """A :class:`~panstream.statestore.RecordLog` on partition 0 of a (compacted) Kafka topic.

    Creates the topic if missing with ``cleanup.policy=compact`` and settings that let the broker
    drop superseded snapshots soon (``segment.ms``, ``min.cleanable.dirty.ratio``,
    ``delete.retention.ms``).
    """

    TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.ms": "600000",
                    "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "600000"}

    def __init__(self, topic: str, client: Mapping[str, Any], chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                 create: bool = True, timeout: float = 30.0) -> None:
        self.topic = topic
        self._client = dict(client)
        self._timeout = timeout
        if create:
            self._ensure_topic()
        else:
            self._require_topic()
        try:
            self._producer = KafkaProducer(**self._client, acks="all", linger_ms=0,
                                           max_request_size=max(1 << 20, chunk_bytes + (64 << 10)))
        except KafkaError as exc:
            raise self._unreachable(exc) from None
        self._tp = TopicPartition(topic, 0)

    def _unreachable(self, exc: Exception) -> SourceError:
        return SourceError(unreachable_message(self._client, exc,
                                               f" (for state topic {self.topic!r})"))

    def _admin(self) -> Any:
        try:
            return KafkaAdminClient(**self._client)
        except KafkaError as exc:
            raise self._unreachable(exc) from None

    def _ensure_topic(self) -> None:
        admin = self._admin()
        try:
            if self.topic in admin.list_topics():
                return
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics([NewTopic(self.topic, 1, -1, topic_configs=self.TOPIC_CONFIG)])
        except KafkaError as exc:
            msg = f"cannot create state topic {self.topic!r}: {exc}; create it (compacted) yourself"
            raise SourceError(msg) from None
        finally:
            admin.close()

    def _require_topic(self) -> None:
        """A reader never creates the topic: a mistyped name must not leave an empty state topic."""
        admin = self._admin()
        try:
            exists = self.topic in admin.list_topics()
        except KafkaError as exc:
            raise self._unreachable(exc) from None
        finally:
            admin.close()
        if not exists:
            msg = (f"state topic {self.topic!r} does not exist: give the --state-topic the "
                   "consumers ('panstream kafka') write to")
            raise StateError(msg)

    def append(self, key: bytes, value: bytes | None) -> None:
        self._producer.send(self.topic, key=key, value=value, partition=0)

    def flush(self) -> None:
        try:
            self._producer.flush(timeout=self._timeout)
        except KafkaError as exc:
            msg = f"state topic {self.topic!r} did not acknowledge a snapshot: {exc}"
            raise SourceError(msg) from None

    def read_all(self) -> Iterator[tuple[bytes, bytes | None]]:
        """Read partition 0 from the beginning up to its high-water mark (from fetch responses)."""
        consumer = KafkaConsumer(**self._client, enable_auto_commit=False, group_id=None,
                                 fetch_max_bytes=64 << 20, max_partition_fetch_bytes=64 << 20,
                                 auto_offset_reset="earliest")
        try:
            consumer.assign([self._tp])
            consumer.seek_to_beginning(self._tp)
            deadline = time.monotonic() + self._timeout
            while True:
                batch = consumer.poll(timeout_ms=200).get(self._tp, [])
                for rec in batch:
                    yield rec.key or b"", rec.value
                hw = consumer.highwater(self._tp)
                if hw is not None and consumer.position(self._tp) >= hw:
                    return
                if time.monotonic() > deadline:
                    msg = f"timed out reading state topic {self.topic!r}; is the broker reachable?"
                    raise SourceError(msg)
        finally:
            consumer.close(autocommit=False)

    def close(self) -> None:
        self._producer.close()

    def __repr__(self) -> str:
        return f"KafkaRecordLog({self.topic!r})"


def topic_store(topic: str, client: Mapping[str, Any], chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                create: bool = True) -> TopicStore:
    """A :class:`~panstream.statestore.TopicStore` on a Kafka topic.

    The store also holds the group's release ledger (``panstream.statestore.LEDGER_KEY``), so
    :func:`panstream.statestore.ensure_ledger` and :func:`panstream.statestore.release_store`
    work on it as on a directory.

    Args:
        topic: the state topic.
        client: connection and security settings (:func:`client_config`, :func:`state_client`).
        chunk_bytes: largest snapshot chunk in one message.
        create: create the topic, compacted, if it is missing (consumers). Readers such as
            ``panstream release`` pass ``False``: a missing topic is then an error, so a mistyped
            name does not leave an empty state topic behind.

    Raises:
        SourceError: the brokers cannot be reached, or the topic cannot be created.
        StateError: ``create`` is false and the topic does not exist.

    Example:
        (needs a broker)::

            store = topic_store("panstream-state", state_client("127.0.0.1:9092"), create=False)
            rel, group = release_store(store, 0.5, keyed=True)
    """
    return TopicStore(KafkaRecordLog(topic, client, chunk_bytes, create=create), chunk_bytes)


def state_client(bootstrap: str | Sequence[str], overrides: Mapping[str, Any] | None = None,
                 security: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Connection and security settings for state-topic clients outside a consumer group
    (``panstream release --state-topic``): the client part of :func:`consumer_config`, so ``-C``
    and the SASL/TLS options mean the same as for ``panstream kafka``.

    Example:
        >>> state_client("127.0.0.1:9092", {"request_timeout_ms": 5000})["request_timeout_ms"]
        5000
    """
    return client_config(consumer_config(bootstrap, "", overrides, security))


# ---------------------------------------------------------------------- the consumer
@dataclass
class TailConfig:
    """What :class:`KafkaTail` runs with (built by ``panstream kafka``): ``estimator`` names the
    shards' family (``density``: ``calibration`` applies; ``frequency``: ``modulus``)."""

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
                 consumer_factory: Callable[..., Any] = KafkaConsumer) -> None:
        self.config = config
        self.metrics = metrics or Metrics()
        self.decoder = Decoder(config.universe, config.value_format)
        self.shards: dict[TopicPartition, Shard] = {}
        self._pending: set[TopicPartition] = set()
        self._consumer_factory = consumer_factory
        self.consumer: Any = None
        self.checkpointer = Checkpointer(config.store, self._commit_sync)
        self.summary = RunSummary()
        self._last_activity = time.monotonic()
        self._ever_assigned = False
        self._final_checkpoint_done = False

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

    # -------------------------------------------------------------- commits
    @staticmethod
    def _offsets(offsets: Mapping[Hashable, int]) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: OffsetAndMetadata(off, "", -1) for tp, off in offsets.items()}

    def _commit_sync(self, offsets: dict[Hashable, int]) -> None:
        try:
            self.consumer.commit(self._offsets(offsets))
        except KafkaError as exc:
            msg = (f"offset commit failed: {exc}; the snapshots are durable, so a restart replays "
                   "a few messages, which is harmless")
            raise SourceError(msg) from None

    # -------------------------------------------------------------- rebalance (IO thread)
    def _assigned(self, assigned: set[TopicPartition]) -> None:
        new = [tp for tp in assigned if tp not in self.shards]
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
            with contextlib.suppress(Exception):
                self.metrics.lag.remove(tp.topic, str(tp.partition))
        self.metrics.assigned.set(len(self.shards))
        return offsets

    # -------------------------------------------------------------- main thread
    def _restore_pending(self) -> None:
        if not self._pending:
            return
        refresh = getattr(self.config.store, "refresh", None)
        if refresh is not None:
            refresh()  # one replay of a state topic for the whole batch
        for tp in sorted(self._pending):
            self.shards[tp] = restore_shard(self.config.store, shard_key(tp.topic, tp.partition),
                                            tp, self._fresh, self._decode)
        ready = list(self._pending)
        self._pending.clear()
        self.consumer.resume(*ready)
        self.metrics.assigned.set(len(self.shards))
        self._last_activity = time.monotonic()  # idle time counts from when reading can start

    def _apply(self, records: Mapping[TopicPartition, list[Any]]) -> None:
        msgs = items = malformed = outside = 0
        for tp, recs in records.items():
            shard = self.shards.get(tp)
            if shard is None or not recs:
                continue
            values = [r.value for r in recs]
            dec = self.decoder(values)
            values.clear()
            n = shard.estimator.update_indices(dec.indices)  # wipes the index array
            shard.applied(recs[-1].offset)
            msgs += len(recs)
            items += n
            malformed += dec.malformed
            outside += dec.outside
        self.metrics.batch(msgs, items, malformed, outside)

    def _update_lag(self) -> None:
        for tp in self.shards:
            with contextlib.suppress(Exception):
                hw = self.consumer.highwater(tp)
                pos = self.consumer.position(tp, timeout_ms=0)
                if hw is not None and pos is not None:
                    self.metrics.lag.labels(tp.topic, str(tp.partition)).set(max(0, hw - pos))
        self.metrics.since_checkpoint.set(self.checkpointer.seconds_since_durable())

    def checkpoint(self) -> None:
        """Snapshots durable, then commit (see :mod:`panstream.state.checkpoint`)."""
        res = self.checkpointer.checkpoint(list(self.shards.values()))
        if res.saved:
            self.metrics.checkpoints.inc()
            self.summary.checkpoints += 1

    def run(self, stop: threading.Event | None = None) -> RunSummary:
        """Consume until ``stop`` is set or ``idle_timeout`` passes without messages.

        Always ends with a final checkpoint and commit and leaves the group.

        Raises:
            SourceError: the broker is unreachable or a commit failed.
            StateError: a shard could not be saved or restored.
        """
        stop = stop or threading.Event()
        cfg = self.config
        t0 = time.monotonic()
        try:
            self.consumer = self._consumer_factory(**cfg.consumer)
        except KafkaError as exc:
            raise SourceError(unreachable_message(cfg.consumer, exc)) from None
        self.consumer.subscribe(topics=list(cfg.topics), listener=_Rebalance(self))
        self._last_activity = time.monotonic()
        last_lag = 0.0
        try:
            while not stop.is_set():
                records = self.consumer.poll(timeout_ms=cfg.poll_timeout_ms)
                self._restore_pending()
                now = time.monotonic()
                if records:
                    self._apply(records)
                    records = None
                    self._last_activity = now
                elif cfg.idle_timeout is not None:
                    grace = 0.0 if self._ever_assigned else 30.0
                    if now - self._last_activity >= cfg.idle_timeout + grace:
                        self.summary.stopped_by = "idle-timeout"
                        break
                self.metrics.tick(now)
                if self.checkpointer.due(cfg.checkpoint_interval):
                    self.checkpoint()
                if now - last_lag >= 1.0:
                    self._update_lag()
                    last_lag = now
            else:
                self.summary.stopped_by = "signal"
            self.checkpoint()  # final: snapshots durable, then commit
            self._final_checkpoint_done = True
            self.summary.partitions = sorted(s.key for s in self.shards.values())
        except KafkaError as exc:
            cause = exc.__cause__ if isinstance(exc.__cause__, Exception) else exc
            if isinstance(cause, PanstreamError):
                raise cause from None  # e.g. a shard could not be saved on revoke
            msg = (f"Kafka consumer failed: {exc}; offsets after the last checkpoint were not "
                   "committed, a restart replays them (harmless)")
            raise SourceError(msg) from None
        finally:
            with contextlib.suppress(Exception):
                self.consumer.close(autocommit=False)  # leaves the group; revoke finds nothing dirty
            for shard in self.shards.values():
                shard.estimator.wipe()
            self.shards.clear()
            self.metrics.close_window()  # the last (partial) window, released like the others
            self._summarize_counts()
            self.summary.seconds = time.monotonic() - t0
        return self.summary

    def _summarize_counts(self) -> None:
        """Copy the released (noisy unless opted out) totals into the summary."""
        w, s = self.metrics.window, self.summary
        s.messages, s.items = w.totals["messages"], w.totals["items"]
        s.malformed, s.outside = w.totals["malformed"], w.totals["outside"]
        s.exact_counts, s.telemetry_epsilon = w.policy.exact, w.policy.epsilon
        s.count_sd = w.total_sd()
