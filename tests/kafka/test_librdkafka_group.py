"""Groups that read with librdkafka (the clients themselves: ``test_librdkafka.py``).

* Two members whose routing stage reads with librdkafka and one with kafka-python share one group
  through a ``kill -9``: every source offset is committed and every client counted once.
* A transactional producer's topic (control records take offsets nobody is handed) is committed
  to its end by either client, and every client is counted once.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _kafka_helpers import Broker, group_options, kill_left, panstream_cmd
from test_librdkafka import UNIVERSE, clf, committed_offsets_by_topic
from test_routed import IDLE

from panstream.state.stores import DirectoryStore, merge_store


@pytest.mark.kafka
def test_librdkafka_members_share_a_group_through_a_kill(
        kafka_broker: Broker, topic_factory: Any, producer: Any, admin: Any,
        tmp_path: Path) -> None:
    """Two members whose routing stage reads with librdkafka and one with kafka-python share one
    group (both use the range assignor); one librdkafka member is killed with ``kill -9`` after the
    group's first routed commit and restarted while the rest of the topic arrives. The survivors
    take its partitions over (librdkafka's revoke callback flushes the routed records, then
    commits, on the routing thread); every source offset is committed and every client's cell
    reads 1 in the one table (at ``--epsilon 30``: at most 2 zeros among 4,000, false failure
    below 1e-16)."""
    import os
    import signal

    from _kafka_helpers import committed_offsets
    from test_broker import start, wait_for
    from test_routed import clf_messages, send_round_robin

    topic = topic_factory(6)
    clients, msgs = clf_messages(UNIVERSE, 2626, 4_000, 16_000, 100)
    hw: dict[int, int] = {}

    def send(values: list[bytes]) -> None:
        send_round_robin(producer, topic, values, 6, hw)

    send(msgs[:40])
    state = tmp_path / "state"
    group = f"g-mixed-{int(time.time() * 1000) % 10**9}"

    def argv(client: str) -> list[str]:
        return panstream_cmd(
            "kafka", "-b", kafka_broker.bootstrap, "-t", topic, "-g", group, "-u", UNIVERSE.spec,
            "--epsilon", "30", "--value-format", "lines", "-f", "clf", "--slices", "4",
            "--state-dir", str(state), "--checkpoint-interval", "0.5", "-C", "max_poll_records=2",
            "--idle-timeout", IDLE, "--source-client", client, "--json", *group_options())

    a = start(argv("librdkafka"), tmp_path / "a.log")
    b = start(argv("librdkafka"), tmp_path / "b.log")
    c = start(argv("kafka-python"), tmp_path / "c.log")
    try:
        wait_for(lambda: sum(committed_offsets(admin, group).values()) > 0, 90,
                 "a first routed commit", [a, b, c])
        os.kill(a.pid, signal.SIGKILL)
        a.wait(timeout=10)
        send(msgs[40:])
        a = start(argv("librdkafka"), tmp_path / "a2.log")
        for p, log in ((a, "a2.log"), (b, "b.log"), (c, "c.log")):
            assert p.wait(timeout=180) == 0, (tmp_path / log).read_text()[-2000:]
    finally:
        kill_left(a, b, c)
    assert committed_offsets(admin, group) == hw
    g = merge_store(DirectoryStore(state))
    try:
        bits = g.estimator.bits()
        zeros = int((bits[clients] == 0).sum())
        assert zeros <= 2, f"{zeros} of 4,000 clients read 0: arrivals were lost"
        assert int(bits.sum()) - int(bits[clients].sum()) <= 2
    finally:
        g.estimator.wipe()


@pytest.mark.kafka
@pytest.mark.parametrize("client", ["kafka-python", "librdkafka"])
def test_a_transactional_topic_is_committed_to_its_end(
        kafka_broker: Broker, topic_factory: Any, admin: Any, tmp_path: Path, client: str) -> None:
    """A transactional producer (librdkafka, as Kafka Streams or Flink's exactly-once sinks write)
    ends every transaction with a control record that takes an offset and is never handed to a
    consumer. The member commits past it: each partition's committed offset is its high-water
    mark (not the last data record + 1), so "the group has drained the topic" can be checked by
    committed = end; every client is counted once."""
    ck = pytest.importorskip("confluent_kafka")
    from kafka import KafkaConsumer, TopicPartition

    topic = topic_factory(2)
    # 1,200 lines: more than the first sample (1,000), so the lines are routed and applied while
    # the member runs, not decided at its stop (a stop-time drain is issue 26's other half)
    clients = np.random.default_rng(7).choice(UNIVERSE.size, 1_200, replace=False)
    p = ck.Producer({"bootstrap.servers": kafka_broker.bootstrap,
                     "transactional.id": f"tx-{client}-{time.time()}"})
    p.init_transactions(30)
    for half in (clients[:600], clients[600:]):
        p.begin_transaction()
        for i, c in enumerate(half):
            p.produce(topic, value=clf(UNIVERSE.item_of(int(c)), i).encode(), partition=i % 2)
        p.commit_transaction(30)
    reader = KafkaConsumer(bootstrap_servers=kafka_broker.bootstrap, enable_auto_commit=False,
                           auto_offset_reset="earliest")
    tps = [TopicPartition(topic, q) for q in range(2)]
    reader.assign(tps)
    got = 0
    deadline = time.monotonic() + 30
    while got < 1_200 and time.monotonic() < deadline:
        got += sum(len(v) for v in reader.poll(timeout_ms=300).values())
    reader.poll(timeout_ms=300)  # past the last markers
    ends = {tp.partition: reader.highwater(tp) for tp in tps}
    reader.close()
    assert got == 1_200 and all(e == 600 + 2 for e in ends.values())  # 600 records, 2 markers each

    group = f"g-tx-{client}-{int(time.time() * 1000) % 10**9}"
    state = tmp_path / "state"
    run = subprocess.run(panstream_cmd(
        "kafka", "-b", kafka_broker.bootstrap, "-t", topic, "-g", group, "-u", UNIVERSE.spec,
        "--epsilon", "30", "--value-format", "lines", "-f", "clf", "--slices", "4",
        "--state-dir", str(state), "--checkpoint-interval", "0.5", "--idle-timeout", IDLE,
        "--source-client", client, *group_options()), capture_output=True, timeout=180)
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    assert committed_offsets_by_topic(admin, group)[topic] == ends
    g = merge_store(DirectoryStore(state))
    try:
        bits = g.estimator.bits()
        assert int((bits[clients] == 0).sum()) <= 2
        assert int(bits.sum()) - int(bits[clients].sum()) <= 2
    finally:
        g.estimator.wipe()
