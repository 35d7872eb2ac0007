"""The state topic: shard snapshots and the group's ledger on a compacted Kafka topic."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from panstream.errors import SourceError, StateError
from panstream.sources.kafka.config import client_config, consumer_config, unreachable_message
from panstream.sources.kafka.topology import no_auto_create
from panstream.state.stores import DEFAULT_CHUNK_BYTES, TopicStore


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
            self._producer = no_auto_create(KafkaProducer(
                **self._client, acks="all", linger_ms=0, allow_auto_create_topics=False,
                max_request_size=max(1 << 20, chunk_bytes + (64 << 10))))
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
        consumer = no_auto_create(KafkaConsumer(
            **self._client, enable_auto_commit=False, group_id=None,
            allow_auto_create_topics=False, fetch_max_bytes=64 << 20,
            max_partition_fetch_bytes=64 << 20, auto_offset_reset="earliest"))
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

    The store also holds the group's release ledger (records ``#ledger/...``, an append-only
    log: :mod:`panstream.release.ledger_log`), so
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

