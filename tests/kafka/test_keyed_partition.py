"""The per-partition layout checks that its topic is keyed by the item (issue 39), on a real broker.

``panstream kafka --layout partition`` keeps one full table per source partition, and ``release
--merge partitioned`` takes each cell's bit from the partition the producers' partitioner gives
the cell's text. A log shipper's unkeyed topic used to release 43 % low with exit 0. Now:

* an unkeyed ``item`` topic stops the member at its first message, in one line with the
  partition, offset and what was expected (never the item), with nothing applied or committed;
* ``--value-format lines`` (several items a message: no key can name them) is refused at start;
* a topic keyed by the item releases within its interval, whether kafka-python (murmur2, Kafka's
  default) or librdkafka (confluent-kafka's default ``consistent_random``: CRC32, given as
  ``--partitioner crc32``) wrote it; a librdkafka topic checked as murmur2 is refused with a line
  naming ``--partitioner crc32``. Both producers' placements are pinned here against
  :func:`panstream.state.keying.partition_of_key`.

Statistics: each release check allows 5.33 standard errors of its reported stderr (false failure
< 1e-7 each, below 1e-6 for the file).
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _kafka_helpers import Broker, Producer, committed_offsets, group_options, panstream_cmd

from panstream.state.keying import partition_of_key
from panstream.universe import Universe

pytestmark = pytest.mark.kafka

U = Universe.parse("ipv4:10.0.0.0/16")
Z = 5.33
IDLE = "3"
K = 4
DISTINCT = 2000


def ips(cells: np.ndarray) -> list[bytes]:
    return [U.item_of(int(c)).encode() for c in cells]


def member(broker: Broker, topic: str, group: str, state: Path, *extra: str
           ) -> subprocess.CompletedProcess[bytes]:
    """One bounded ``--layout partition`` member (exits after IDLE quiet seconds)."""
    args = ["kafka", "-b", broker.bootstrap, "-t", topic, "-g", group, "-u", U.spec,
            "--epsilon", "2", "--layout", "partition", "--state-dir", str(state),
            "--idle-timeout", IDLE, "--checkpoint-interval", "0.5", "--json", *group_options()]
    return subprocess.run(panstream_cmd(*args, *extra), capture_output=True, timeout=120)


def release(state: Path, *extra: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(panstream_cmd("release", "--state-dir", str(state), "--epsilon", "1",
                                        "--json", *extra), capture_output=True, timeout=60)


def stream() -> np.ndarray:
    rng = np.random.default_rng(39)
    cells = rng.choice(U.size, DISTINCT, replace=False)
    return rng.permutation(np.concatenate([cells, rng.choice(cells, 500)]))  # with repeats


def assert_releases_the_truth(state: Path) -> None:
    rel = release(state, "--merge", "partitioned")
    assert rel.returncode == 0, rel.stderr.decode()
    r = json.loads(rel.stdout)
    assert abs(r["estimate"] - DISTINCT) <= Z * r["stderr"], r


def last_line(run: subprocess.CompletedProcess[bytes]) -> str:
    return run.stderr.decode().strip().splitlines()[-1]


def test_an_unkeyed_item_topic_stops_the_member_before_anything_is_committed(
        kafka_broker: Broker, topic_factory: Callable[..., str], producer: Any, admin: Any,
        tmp_path: Path) -> None:
    """A shipper's topic: no key, each message in some partition other than its item's (every
    message misplaced, so the very first one the member reads stops it)."""
    topic = topic_factory(K)
    cells = stream()
    for i, c in enumerate(cells):
        owner = partition_of_key(ips(cells[i:i + 1])[0], K)
        producer.send(topic, value=ips(cells[i:i + 1])[0], partition=(owner + 1 + i % (K - 1)) % K)
    producer.flush()
    run = member(kafka_broker, topic, "g-unkeyed", tmp_path / "state")
    line = last_line(run)
    assert run.returncode == 1, run.stderr.decode()[-2000:]
    assert " offset 0: --layout partition needs every message keyed by its item" in line, line
    assert "has no key" in line and "murmur2(item) % 4" in line and "routed layout" in line
    err = run.stderr.decode()
    assert "Traceback" not in err
    public = err.replace(U.spec, "")  # the universe's spec (10.0.0.0/16, said by the group's
    assert not any(ip.decode() in public for ip in ips(cells))           # definition): no item
    assert committed_offsets(admin, "g-unkeyed") == {}                   # nothing committed


def test_a_lines_topic_is_refused_at_start_under_the_partition_layout(
        kafka_broker: Broker, topic_factory: Callable[..., str], produce: Producer, admin: Any,
        tmp_path: Path) -> None:
    topic = topic_factory(K)
    produce(topic, [b"\n".join(ips(stream()[:50]))])
    run = member(kafka_broker, topic, "g-lines", tmp_path / "state", "--value-format", "lines")
    assert run.returncode != 0
    lines = [x for x in run.stderr.decode().strip().splitlines() if "connecting" not in x]
    assert len(lines) == 1, lines
    assert "--value-format lines" in lines[0] and "routed layout (the default" in lines[0]
    assert committed_offsets(admin, "g-lines") == {}
    assert not (tmp_path / "state").exists()                              # nothing written


def test_a_topic_keyed_by_kafka_python_releases_within_its_interval(
        kafka_broker: Broker, topic_factory: Callable[..., str], produce: Producer,
        producer: Any, admin: Any, tmp_path: Path) -> None:
    topic = topic_factory(K)
    cells = stream()
    keys = ips(cells)
    # kafka-python's default partitioner is murmur2: pinned on a few keys of this topic
    for key in keys[:20]:
        assert producer.send(topic, value=key, key=key).get(30).partition == \
            partition_of_key(key, K, "murmur2")
    produce(topic, keys[20:], keys=keys[20:])
    run = member(kafka_broker, topic, "g-kp", tmp_path / "state")
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    # every message applied and committed: each partition's end is its murmur2 share of the keys
    ends = Counter(partition_of_key(key, K, "murmur2") for key in keys)
    assert committed_offsets(admin, "g-kp") == dict(ends)
    assert_releases_the_truth(tmp_path / "state")


def test_a_topic_keyed_by_librdkafka_releases_with_partitioner_crc32(
        kafka_broker: Broker, topic_factory: Callable[..., str], admin: Any,
        tmp_path: Path) -> None:
    ck = pytest.importorskip("confluent_kafka")
    topic = topic_factory(K)
    cells = stream()
    p = ck.Producer({"bootstrap.servers": kafka_broker.bootstrap, "linger.ms": 20})
    placed: dict[bytes, set[int]] = {}

    def report(err: Any, msg: Any) -> None:
        assert err is None, err
        placed.setdefault(msg.key(), set()).add(msg.partition())

    for key in ips(cells):
        p.produce(topic, value=key, key=key, on_delivery=report)
        p.poll(0)
    assert p.flush(30) == 0
    # librdkafka's default partitioner is CRC32 of the key, not murmur2: pinned on every key
    assert all(got == {partition_of_key(key, K, "crc32")} for key, got in placed.items())
    assert any(got != {partition_of_key(key, K, "murmur2")} for key, got in placed.items())

    checked_as_murmur2 = member(kafka_broker, topic, "g-rd-m", tmp_path / "m")
    line = last_line(checked_as_murmur2)
    assert checked_as_murmur2.returncode == 1, checked_as_murmur2.stderr.decode()[-2000:]
    assert "is keyed by its item but placed by another partitioner" in line, line
    assert "--partitioner crc32" in line and " offset " in line
    assert committed_offsets(admin, "g-rd-m") == {}

    run = member(kafka_broker, topic, "g-rd-c", tmp_path / "c", "--partitioner", "crc32")
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    assert_releases_the_truth(tmp_path / "c")
    ins = subprocess.run(panstream_cmd("inspect", "--state-dir", str(tmp_path / "c")),
                         capture_output=True, timeout=60)
    assert "crc32 over 4 partitions puts its item" in ins.stdout.decode()


def test_an_existing_keyed_deployment_resumes_and_its_old_shards_keep_no_record(
        kafka_broker: Broker, topic_factory: Callable[..., str], produce: Producer,
        tmp_path: Path) -> None:
    """Shards written before the check (no record: today's main writes them so) resume as
    before; the member checks every new message and says once per shard that the partitioned
    merge will refuse it, since its earlier arrivals were never checked. --merge sum releases."""
    from panstream.estimators.density import DensityEstimator
    from panstream.state.keying import keying_of
    from panstream.state.slices import head_params
    from panstream.state.stores import DirectoryStore, encode_shard, ensure_ledger

    topic = topic_factory(K)
    state = tmp_path / "state"
    store = DirectoryStore(state)
    ensure_ledger(store, 1.0)
    for part in range(K):  # as an older member left them: same parameters, no keying record
        store.save(f"{topic}/{part}", encode_shard(DensityEstimator(U, epsilon=2.0)))
    cells = stream()
    produce(topic, ips(cells), keys=ips(cells))
    run = member(kafka_broker, topic, "g-old", state)
    err = run.stderr.decode()
    assert run.returncode == 0, err[-2000:]
    assert err.count("was written before panstream checked the keying") == K
    assert all(keying_of(head_params(store.load(k))) is None for k in store.keys())
    refused = release(state, "--merge", "partitioned")
    assert refused.returncode != 0 and "--merge sum" in last_line(refused)
    summed = release(state, "--merge", "sum")
    assert summed.returncode == 0, summed.stderr.decode()


def test_a_shard_checked_against_another_partition_count_stops_the_member(tmp_path: Path) -> None:
    """The topic grew (its shards were checked against 4 partitions, it has 1 now): an item's
    messages may now sit in another partition, so the member stops at the restore, in one line."""
    from _group_fakes import Consumer, Group
    from kafka import TopicPartition

    from panstream.errors import StateError
    from panstream.estimators.density import DensityEstimator
    from panstream.sources.kafka import Metrics, TailConfig
    from panstream.sources.kafka.tail import KafkaTail
    from panstream.state.keying import Keying
    from panstream.state.stores import DirectoryStore, encode_shard

    store = DirectoryStore(tmp_path)
    store.save("events/0", encode_shard(DensityEstimator(U, epsilon=2.0), Keying("murmur2", 4)))
    t = KafkaTail(TailConfig({}, ["events"], U, 2.0, "rr", store, partitioner="murmur2"),
                  Metrics())
    t.consumer = Consumer(Group())                       # a one-partition topic
    t._assigned({TopicPartition("events", 0)})
    with pytest.raises(StateError, match=r"verified against murmur2 over 4 partitions, but this "
                                         r"member checks murmur2 over 1 partitions.*--merge sum"):
        t._restore_pending()
