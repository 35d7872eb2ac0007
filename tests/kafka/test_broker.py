"""panstream kafka against a real broker (Tansu on 127.0.0.1, started by conftest.py), in the
per-partition layout (``--layout partition``: one full table per source partition, kept readable
for existing deployments); the routed default layout is tested in test_routed.py.

Group joins take about 3 s with these settings, so each test keeps its joins few. Statistical checks
state their false-failure probability. "Nothing lost" checks run with ``--epsilon 30``: p is then the
largest 32-bit dyadic below 1, so a seen cell reads 0 with probability 2**-32, while a lost arrival
leaves a D0 bit that reads 0 with probability 1 - 2**-32 (rr, the default: q = 2**-32; at least 1/2
for any calibration). Allowing at most 2 zeros among n <= 30,000 seen
cells fails falsely with probability below C(n,3) 2**-96 < 1e-16, and a loss of a 100-message batch
goes unnoticed with probability below 1e-25.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _kafka_helpers import (
    Broker,
    Producer,
    committed_offsets,
    free_port,
    group_options,
    panstream_cmd,
)

from panstream.calibration import calibrate
from panstream.sources.kafka import client_config, consumer_config, topic_store
from panstream.state.stores import DirectoryStore, TopicStore, decode_shard, merge_store
from panstream.universe import Universe

pytestmark = pytest.mark.kafka

U = Universe.parse("ipv4:10.0.0.0/16")
Z = 5.33  # two-sided normal tail 1e-7
#: Bounded runs stop after this many seconds without a message. It must exceed any stall of a
#: consumer that still has a backlog (a fetch round trip on a loaded 2-core machine), or the run
#: stops early and the offset checks fail: 3 s is over ten times the slowest gap seen under load.
IDLE = "3"


def ips(cells: np.ndarray) -> list[bytes]:
    return [U.item_of(int(c)).encode() for c in cells]


def consumer_argv(broker: Broker, topic: str, group: str, *extra: str) -> list[str]:
    args = ["kafka", "-b", broker.bootstrap, "-t", topic, "-g", group, "-u", U.spec,
            "--epsilon", "1", "--checkpoint-interval", "0.5", "--json", "--layout", "partition",
            *group_options()]
    return panstream_cmd(*args, *extra)


def start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    out = open(log, "wb")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)


def wait_for(cond: Callable[[], Any], timeout: float, what: str,
             procs: Sequence[subprocess.Popen[bytes]] = ()) -> Any:
    """Poll ``cond`` every 0.1 s until it holds; fail after ``timeout`` seconds, or at once if one
    of ``procs`` (consumers that should keep running) has exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        for proc in procs:
            if proc.poll() is not None:
                raise AssertionError(f"{proc.args!r} exited with {proc.returncode} while waiting "
                                     f"for {what}")
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def metric(port: int, name: str) -> float | None:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def all_committed(admin: Any, group: str, highwater: dict[int, int]) -> bool:
    return committed_offsets(admin, group) == highwater


def assert_nothing_lost(store: Any, topic: str, seen: np.ndarray) -> None:
    """At epsilon 30 every seen cell reads 1 in its owner's shard, up to 2 (see the docstring)."""
    group = merge_store(store, "partitioned")
    bits = group.estimator.bits()
    zeros = int((bits[seen] == 0).sum())
    assert zeros <= 2, f"{zeros} of {seen.size} seen cells read 0: arrivals were lost"
    assert group.topics == (topic,)


def test_consume_release_and_malformed(kafka_broker: Broker, topic_factory: Callable[..., str],
                                       produce: Producer, admin: Any, tmp_path: Path) -> None:
    """Keyed IPs plus junk; one bounded run keeps its shards in a chunked state topic.

    The merged estimate is within 5.33 standard errors of the truth (false failure < 1e-7).
    """
    topic = topic_factory(4)
    rng = np.random.default_rng(7)
    cells = rng.choice(U.size, 3000, replace=False)
    stream = np.concatenate([cells, rng.choice(cells, 1000)])        # with repeats
    produce(topic, ips(stream), keys=ips(stream))
    produce(topic, [b"junk", b"10.0.0.999", b"", b"::1x"])             # 4 malformed
    hw = produce(topic, [b"192.168.1.1", b"11.0.0.1"])                  # 2 outside
    state_topic = f"{topic}-state"
    run = subprocess.run(consumer_argv(kafka_broker, topic, "g-release", "--state-topic",
                                       state_topic, "--state-chunk-bytes", "2048",
                                       "--idle-timeout", IDLE, "--exact-counts"),
                         capture_output=True, timeout=60)
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    out = json.loads(run.stdout)
    assert committed_offsets(admin, "g-release") == hw, out             # last processed + 1
    assert (out["malformed_skipped"], out["outside_universe_skipped"]) == (4, 2), out
    assert out["stopped_by"] == "idle-timeout"
    assert committed_offsets(admin, "g-release") == hw                 # last processed + 1
    store = topic_store(state_topic, client_config(consumer_config(kafka_broker.bootstrap, "x")),
                        2048)
    assert isinstance(store, TopicStore) and len(store.keys()) == 4    # 8 KiB shards, chunked
    for method in ("partitioned", "sum"):
        est = merge_store(store, method).estimator.estimate()
        assert abs(est.distinct - 3000) <= Z * est.stderr_distinct, (method, est)


def test_kill9_mid_stream_then_resume_loses_nothing(kafka_broker: Broker,
                                                    topic_factory: Callable[..., str],
                                                    produce: Producer, admin: Any,
                                                    tmp_path: Path) -> None:
    """kill -9 while consuming; the restart restores the shards and reads on from the commits:
    every offset is consumed in the end and every arrival is in the tables.

    The kill lands at the first commit the test sees, with most of the first part still unread
    (100 messages per poll, checkpoints every 0.2 s); the second part is produced only after the
    kill, so the crash is mid-stream however fast the consumer is.
    """
    topic = topic_factory(2)
    cells = np.arange(0, U.size, 2)[:12_000]
    first, second = cells[:8000], cells[8000:]
    produce(topic, ips(first), keys=ips(first))
    state = tmp_path / "state"
    argv = consumer_argv(kafka_broker, topic, "g-crash", "--state-dir", str(state),
                         "--epsilon", "30", "-C", "max_poll_records=100",
                         "--checkpoint-interval", "0.2")
    proc = start(argv, tmp_path / "first.log")
    wait_for(lambda: sum(committed_offsets(admin, "g-crash").values()) > 0, 60,
             "a first commit", [proc])
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    hw = produce(topic, ips(second), keys=ips(second))
    assert sum(committed_offsets(admin, "g-crash").values()) < sum(hw.values())
    run = subprocess.run(argv + ["--idle-timeout", IDLE], capture_output=True, timeout=120)
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    assert committed_offsets(admin, "g-crash") == hw
    assert_nothing_lost(DirectoryStore(state), topic, cells)


def test_two_members_split_partitions_and_state_follows_a_leaver(
        kafka_broker: Broker, topic_factory: Callable[..., str], produce: Producer, admin: Any,
        tmp_path: Path) -> None:
    """A and B split 4 partitions; SIGTERM on B makes a final checkpoint, leaves, exits 0; A takes
    B's partitions with their state. Then `panstream release --state-dir` merges all shards.

    Every wait is a bounded poll on a condition that implies what the next step relies on:

    * "B applied part of batch 2" is B's messages-per-second gauge turning positive: it is set
      only when B applies records (B's first ones are batch 2: A committed batch 1 on revoke), and
      B's rate window (opened at its start, before a ~3 s group join) is over 1 s old by then.
      B's lag gauge cannot say this: before batch 2 reaches B's fetcher it reads 0 too.
    * "B committed on SIGTERM" is B's own summary (its one checkpoint saved dirty shards; a failed
      commit would exit non-zero), not a race against A's rejoin. How much of batch 2 B applied
      before the signal does not matter: A resumes from B's commit with B's snapshots, and the end
      state must hold every arrival.
    """
    topic = topic_factory(4)
    state = tmp_path / "state"
    rng = np.random.default_rng(11)
    cells = rng.choice(U.size, 6000, replace=False)
    batches = np.array_split(cells, 3)
    produce(topic, ips(batches[0]), keys=ips(batches[0]))
    port_a, port_b = free_port(), free_port()
    # Exact counts (an explicit opt-in): the test waits on B's message rate to know it applied.
    common = ("--state-dir", str(state), "--epsilon", "30", "--exact-counts")
    a = start(consumer_argv(kafka_broker, topic, "g-split", *common, "--metrics-port",
                            str(port_a)), tmp_path / "a.log")
    try:
        wait_for(lambda: metric(port_a, "panstream_kafka_assigned_partitions") == 4, 60, "A owns 4",
                 [a])
        # B checkpoints only when its partitions are revoked or it stops (interval 1 hour).
        b = start(consumer_argv(kafka_broker, topic, "g-split", *common, "--metrics-port",
                                str(port_b), "--checkpoint-interval", "3600"), tmp_path / "b.log")
        wait_for(lambda: metric(port_a, "panstream_kafka_assigned_partitions") == 2
                 and metric(port_b, "panstream_kafka_assigned_partitions") == 2, 60, "a 2/2 split",
                 [a, b])
        hw = produce(topic, ips(batches[1]), keys=ips(batches[1]))

        def a_committed() -> bool:
            done = committed_offsets(admin, "g-split")
            return sum(done.get(p) == off for p, off in hw.items()) == 2

        wait_for(a_committed, 60, "A's half of batch 2 committed", [a, b])
        wait_for(lambda: (metric(port_b, "panstream_kafka_messages_per_second") or 0) > 0, 60,
                 "B applied part of batch 2", [a, b])
        before = committed_offsets(admin, "g-split")
        assert before != hw  # B's half: applied, not committed (B checkpoints hourly)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port_b}/metrics").read().decode()
        assert "panstream_kafka_consumer_lag" in text and "10.0." not in text  # no items served
        b.send_signal(signal.SIGTERM)
        assert b.wait(timeout=60) == 0
        out_b = json.loads((tmp_path / "b.log").read_text().splitlines()[-1])
        assert out_b["stopped_by"] == "signal" and len(out_b["partitions_at_exit"]) == 2
        assert out_b["checkpoints"] == 1  # the final one: B's dirty shards saved, then committed
        after = committed_offsets(admin, "g-split")
        assert any(after.get(p, 0) > before.get(p, 0) for p in hw)  # B's commit moved on
        wait_for(lambda: metric(port_a, "panstream_kafka_assigned_partitions") == 4, 60,
                 "A takes over", [a])
        hw = produce(topic, ips(batches[2]), keys=ips(batches[2]))
        wait_for(lambda: all_committed(admin, "g-split", hw), 60, "batch 3 committed", [a])
        # A was assigned at least three times (alone, split, alone again); the broker may insert
        # an extra generation while members join, so the exact count is not asserted.
        assert (metric(port_a, "panstream_kafka_rebalances_total") or 0) >= 3
    finally:
        a.send_signal(signal.SIGTERM)
        assert a.wait(timeout=30) == 0
    assert_nothing_lost(DirectoryStore(state), topic, cells)
    rel = subprocess.run(panstream_cmd("release", "--state-dir", str(state), "--epsilon", "0.5",
                                       "--keyed", "--json"), capture_output=True, timeout=60)
    assert rel.returncode == 0, rel.stderr.decode()
    r = json.loads(rel.stdout)
    assert r["epsilon_state"] == pytest.approx(calibrate(30).epsilon_state)
    assert r["budget_remaining"] == 0.5
    # Unseen cells are fair coins (sd ~ 240 distinct); the Laplace noise (scale 2 counts) is small
    # beside it: within 5.33 standard errors (normal tail 1e-7).
    assert abs(r["distinct"] - 6000) <= Z * r["stderr_density"] * r["size"]


def test_state_topic_on_the_broker_keeps_only_newest(kafka_broker: Broker) -> None:
    """The chunked store on a real topic: versions replace each other; old chunks get tombstones.

    Tansu accepted 8 MiB messages and does not compact (memory engine), so compaction itself is
    not tested here; chunking and tombstones are.
    """
    from kafka import KafkaConsumer, TopicPartition

    client = client_config(consumer_config(kafka_broker.bootstrap, "x"))
    store = topic_store("state-newest", client, chunk_bytes=1000)
    first = decode_shard(DensityEstimator_snapshot(), U.spec, 1.0, "rr")
    store.save("ev/0", first.snapshot())
    second = DensityEstimator_snapshot()
    store.save("ev/0", second)
    assert store.load("ev/0") == second and store.keys() == ["ev/0"]
    c = KafkaConsumer(**client, enable_auto_commit=False)
    tp = TopicPartition("state-newest", 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    recs: list[Any] = []
    deadline = time.monotonic() + 60
    while len(recs) < 2 * 10 + 9 and time.monotonic() < deadline:  # bounded: never hangs
        recs += c.poll(timeout_ms=1000).get(tp, [])
    c.close()
    assert len(recs) >= 2 * 10 + 9, f"read {len(recs)} of 29 records within 60 s"
    tombstones = [r.key for r in recs if r.value is None]
    assert len(tombstones) == 9 and all(b"#" in k for k in tombstones)


def DensityEstimator_snapshot() -> bytes:  # noqa: N802 - reads as the thing it makes
    from panstream.estimators.density import DensityEstimator

    return DensityEstimator(U, epsilon=1.0).snapshot()
