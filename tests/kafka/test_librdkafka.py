"""Topics written by real producers: librdkafka, in every compression codec.

rsyslog's omkafka, Fluent Bit, Vector and many Filebeat-like shippers produce with librdkafka, not
kafka-python. Its defaults differ from kafka-python's in the ways that matter to a consumer: an
unkeyed record goes to a partition chosen by the sticky partitioner (many records in one batch to
one partition, then another), so partitions are uneven and batches hold hundreds of records; and a
shipper usually compresses, with gzip, snappy, lz4 or zstd. kafka-python decodes snappy, lz4 and
zstd batches only with their Python packages (panstream depends on all three); without one it
raises ``UnsupportedCodecError``, which a member turns into one line naming the package.

What these tests pin:

* every record librdkafka acknowledged is read back by kafka-python exactly once, with
  consecutive offsets, in every codec; the high-water mark of the fetch responses (what
  panstream's lag and drain use) is the acknowledged end. (Tansu 0.6 answers ListOffsets LATEST
  with the *base* offset of a partition's last batch + 1, e.g. 1 for a partition holding hundreds
  of records written as one batch: a broker bug, which is why nothing in panstream or these tests
  asks ListOffsets for an end.)
* one ``panstream kafka`` member reading five such topics (one per codec) routes and applies every
  line: every source offset committed equals the acknowledged end, and every client's cell reads 1
  in the group's one table, nothing else does (at ``--epsilon 30``, where a seen cell reads 0 with
  probability 2**-32: at most 2 zeros among 1,500 clients fails falsely with probability below
  1e-16, as in tests/kafka/test_routed.py).
* a missing codec package stops the member with one line naming the package (no broker needed).

Members of one group reading with both clients through a ``kill -9``, and transactional topics,
are in ``test_librdkafka_group.py`` (apart so that the suite's workers share the broker time).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _kafka_helpers import GROUP_SETTINGS, Broker, panstream_cmd
from kafka.errors import UnsupportedCodecError

from panstream.errors import ConfigurationError, SourceError
from panstream.sources.kafka.tail import CODEC_PACKAGES, codec_message, kafka_errors
from panstream.state.stores import DirectoryStore, merge_store
from panstream.universe import Universe

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
UNIVERSE = Universe.parse("ipv4:10.9.0.0/16")
CLIENTS_PER_CODEC = 300
LINES_PER_CODEC = 1_200
PARTITIONS = 4


def clf(addr: str, i: int) -> str:
    return (f'{addr} - - [24/Nov/2026:10:{i // 60 % 60:02d}:{i % 60:02d} +0000] "GET /a/{i % 89} '
            f'HTTP/1.1" 200 {300 + i % 2000} "-" "curl/8.5.0"')


# ------------------------------------------------------------------ without a broker
def test_a_missing_codec_package_is_one_line_naming_it() -> None:
    """kafka-python's ``UnsupportedCodecError`` becomes a SourceError (exit 1) that says which
    package to install, for every codec that needs one."""
    for codec, package in CODEC_PACKAGES.items():
        exc = UnsupportedCodecError(f"Libraries for {codec} compression codec not found")
        with pytest.raises(SourceError) as err, kafka_errors():
            raise exc
        line = str(err.value)
        assert "\n" not in line and f"pip install {package}" in line and codec in line
    assert "cannot decode" in codec_message(UnsupportedCodecError("Unrecognized compression type: 7"))


def test_the_codec_packages_are_installed() -> None:
    """panstream depends on them (pyproject.toml), so every librdkafka codec decodes."""
    import kafka.codec as codecs

    assert codecs.has_snappy() and codecs.has_lz4() and codecs.has_zstd()


def test_librdkafka_settings_are_kafka_pythons_translated() -> None:
    """``--source-client librdkafka`` takes the same settings (defaults, security, ``-C``) under
    librdkafka's names, and refuses a ``-C`` key it cannot translate, in one line."""
    from panstream.sources.kafka.config import consumer_config
    from panstream.sources.kafka.rdkafka import rdkafka_config

    cfg = consumer_config("127.0.0.1:9092,h2:9093", "g", {"fetch_max_wait_ms": 100},
                          {"security_protocol": "SASL_SSL", "sasl_plain_username": "u"})
    conf, batch = rdkafka_config(cfg)
    assert conf["bootstrap.servers"] == "127.0.0.1:9092,h2:9093" and conf["group.id"] == "g"
    assert conf["enable.auto.commit"] is False and conf["auto.offset.reset"] == "earliest"
    assert conf["session.timeout.ms"] == 6000 and conf["heartbeat.interval.ms"] == 1000
    assert conf["fetch.wait.max.ms"] == 100 and conf["security.protocol"] == "SASL_SSL"
    assert conf["sasl.username"] == "u" and batch == 5000
    assert conf["partition.assignment.strategy"] == "range"  # mixes with kafka-python members
    # a drained fetch queue refills after 10 ms, not librdkafka's 1 s: a member of a busy topic
    # read 2.8-3.7 M lines/s with the default, 12-13.5 M with this (docs/kafka.md, Throughput)
    assert conf["fetch.queue.backoff.ms"] == 10 and "queued.max.messages.kbytes" not in conf
    with pytest.raises(ConfigurationError) as err:
        rdkafka_config({**cfg, "metadata_max_age_ms": 1000})
    assert "\n" not in str(err.value) and "-C metadata_max_age_ms" in str(err.value)


@pytest.mark.parametrize(("code", "raised"), [
    ("REBALANCE_IN_PROGRESS", "RebalanceInProgressError"),
    ("ILLEGAL_GENERATION", "CommitFailedError"),
    ("UNKNOWN_MEMBER_ID", "CommitFailedError"),
])
def test_a_librdkafka_commit_refused_by_the_group_says_why_as_kafka_python_does(
        code: str, raised: str) -> None:
    """A commit refused while the group rebalances is kafka-python's
    ``RebalanceInProgressError`` (the member is current, and a claim's proof of that waits for
    the rebalance); one from a generation the group has left, or a member it forgot, is
    ``CommitFailedError`` (a claim's proof fails: an evicted member). Both wait for the next
    checkpoint in a commit of the checkpointer. Before, the adapter said ``CommitFailedError``
    for all three, and a current librdkafka member whose claim needed proof during a rebalance
    stopped on the fence."""
    import confluent_kafka
    from kafka import TopicPartition
    from kafka import errors as kafka_errors_module

    from panstream.sources.kafka.rdkafka import RdKafkaConsumer

    class Refusing:
        def commit(self, offsets: Any, asynchronous: bool) -> None:
            err = confluent_kafka.KafkaError(getattr(confluent_kafka.KafkaError, code))
            raise confluent_kafka.KafkaException(err)

    consumer = RdKafkaConsumer.__new__(RdKafkaConsumer)  # no broker: only commit() is asked
    consumer._ck = confluent_kafka
    consumer._consumer = Refusing()
    with pytest.raises(getattr(kafka_errors_module, raised)) as err:
        consumer.commit({TopicPartition("t", 0): 5})
    assert type(err.value) is getattr(kafka_errors_module, raised)


def test_librdkafka_source_client_is_for_the_routed_layout_only(tmp_path: Path) -> None:
    """The per-partition layout and --window keep kafka-python: one line, exit 2 or 1."""
    run = subprocess.run(panstream_cmd(
        "kafka", "-b", "127.0.0.1:9", "-t", "t", "-g", "g", "-u", UNIVERSE.spec, "--epsilon", "1",
        "--state-dir", str(tmp_path), "--layout", "partition", "--source-client", "librdkafka"),
        capture_output=True, timeout=60)
    assert run.returncode != 0
    err = run.stderr.decode().strip().splitlines()[-1]
    assert "--source-client librdkafka is for the routed layout" in err


def test_the_default_client_leaves_the_partition_layout_on_kafka_python(tmp_path: Path) -> None:
    """librdkafka is the routed member's default (``--source-client`` not given); the per-partition
    layout, which has no librdkafka consumer, quietly keeps kafka-python: no refusal, the member
    goes on to connect (and says the broker is unreachable)."""
    run = subprocess.run(panstream_cmd(
        "kafka", "-b", "127.0.0.1:9", "-t", "t", "-g", "g", "-u", UNIVERSE.spec, "--epsilon", "1",
        "--state-dir", str(tmp_path), "--layout", "partition", "-C", "request_timeout_ms=3000",
        "-C", "bootstrap_timeout_ms=2000"), capture_output=True, timeout=60)
    err = run.stderr.decode()
    assert run.returncode != 0 and "--source-client" not in err
    assert "127.0.0.1:9" in err.strip().splitlines()[-1]


# ------------------------------------------------------------------ against Tansu

@pytest.fixture(scope="module")
def librdkafka_topics(kafka_broker: Broker, admin: Any) -> Iterator[dict[str, Any]]:
    """Five topics of whole CLF lines, one per codec, written by librdkafka (confluent-kafka) with
    its default partitioner (unkeyed: sticky) and the codec; each codec has its own clients, drawn
    over the whole universe (so over every slice), each seen at least once."""
    ck = pytest.importorskip("confluent_kafka")
    from kafka.admin import NewTopic

    rng = np.random.default_rng(26)
    pool = rng.choice(UNIVERSE.size, CLIENTS_PER_CODEC * len(CODECS), replace=False)
    out: dict[str, Any] = {"topics": {}, "ends": {}, "clients": {}, "lines": {}}
    stamp = int(time.time() * 1000) % 10**9
    for k, codec in enumerate(CODECS):
        topic = f"librdkafka-{codec}-{stamp}"
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
        clients = pool[k * CLIENTS_PER_CODEC:(k + 1) * CLIENTS_PER_CODEC]
        stream = rng.permutation(np.concatenate(
            [clients, rng.choice(clients, LINES_PER_CODEC - CLIENTS_PER_CODEC)]))
        producer = ck.Producer({"bootstrap.servers": kafka_broker.bootstrap,
                                "compression.type": codec, "linger.ms": 20})
        acked: dict[int, list[int]] = {}
        failed: list[str] = []

        def report(err: Any, msg: Any, acked: dict[int, list[int]] = acked,
                   failed: list[str] = failed) -> None:
            if err is not None:
                failed.append(str(err))
            else:
                acked.setdefault(msg.partition(), []).append(msg.offset())

        for i, c in enumerate(stream):
            producer.produce(topic, value=clf(UNIVERSE.item_of(int(c)), i).encode(),
                             on_delivery=report)
            producer.poll(0)
        assert producer.flush(30) == 0 and not failed, failed
        assert sum(map(len, acked.values())) == LINES_PER_CODEC
        out["topics"][codec] = topic
        out["ends"][codec] = {p: max(offs) + 1 for p, offs in acked.items()}
        out["clients"][codec] = clients
    yield out


@pytest.mark.kafka
def test_kafka_python_reads_every_librdkafka_record_once_in_every_codec(
        kafka_broker: Broker, librdkafka_topics: dict[str, Any]) -> None:
    """Multi-record compressed batches decode to consecutive offsets, each record once; the fetch
    high-water mark is the acknowledged end (ListOffsets is not asked: Tansu answers it wrongly)."""
    from kafka import KafkaConsumer, TopicPartition

    for codec in CODECS:
        topic, ends = librdkafka_topics["topics"][codec], librdkafka_topics["ends"][codec]
        c = KafkaConsumer(bootstrap_servers=kafka_broker.bootstrap, enable_auto_commit=False,
                          auto_offset_reset="earliest")
        try:
            tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            c.assign(tps)
            c.seek_to_beginning(*tps)
            seen: dict[int, list[int]] = {}
            deadline = time.monotonic() + 30
            while sum(map(len, seen.values())) < LINES_PER_CODEC and time.monotonic() < deadline:
                for tp, recs in c.poll(timeout_ms=500).items():
                    seen.setdefault(tp.partition, []).extend(r.offset for r in recs)
            for p in range(PARTITIONS):
                assert seen.get(p, []) == list(range(ends.get(p, 0))), (codec, p)
                if p in ends:
                    assert c.highwater(TopicPartition(topic, p)) == ends[p], (codec, p)
        finally:
            c.close()


@pytest.mark.kafka
def test_the_librdkafka_consumer_answers_as_kafka_python_does(
        kafka_broker: Broker, librdkafka_topics: dict[str, Any]) -> None:
    """The adapter's records, positions and high-water marks (from fetch responses) agree with the
    acknowledged ends; its listener gets kafka-python ``TopicPartition`` sets; its committed
    offsets and log starts are the broker's."""
    from kafka import TopicPartition
    from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener

    from panstream.sources.kafka.config import consumer_config
    from panstream.sources.kafka.rdkafka import RdKafkaConsumer

    topic, ends = librdkafka_topics["topics"]["zstd"], librdkafka_topics["ends"]["zstd"]
    seen: list[set[TopicPartition]] = []

    class Listener(AsyncConsumerRebalanceListener):
        async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            seen.append(set(assigned))

        async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            pass

        async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
            pass

    c = RdKafkaConsumer(**consumer_config(kafka_broker.bootstrap, f"g-adapter-{time.time()}"))
    try:
        c.subscribe(topics=[topic], listener=Listener())
        offsets: dict[int, list[int]] = {}
        deadline = time.monotonic() + 60
        while sum(map(len, offsets.values())) < LINES_PER_CODEC and time.monotonic() < deadline:
            for tp, recs in c.poll(timeout_ms=200).items():
                assert tp.topic == topic and all(r.value for r in recs)
                offsets.setdefault(tp.partition, []).extend(r.offset for r in recs)
        assert seen and seen[0] == {TopicPartition(topic, p) for p in range(PARTITIONS)}
        assert c.assignment() == seen[0]
        for p, end in ends.items():
            tp = TopicPartition(topic, p)
            assert offsets[p] == list(range(end))
            assert c.position(tp) == end and c.highwater(tp) == end
        c.commit({TopicPartition(topic, p): end for p, end in ends.items()})
        # what the slice stage asks of a newly assigned slice (records expired unapplied?)
        for p, end in ends.items():
            assert c.committed(TopicPartition(topic, p)) == end
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        assert c.beginning_offsets(tps) == dict.fromkeys(tps, 0)
    finally:
        c.close()


@pytest.mark.kafka
def test_the_librdkafka_producer_answers_as_kafka_pythons_futures_do(
        kafka_broker: Broker, topic_factory: Any) -> None:
    """The routing stage produces its routed records with librdkafka by default and commits the
    source offsets only once every record's future says acknowledged: after ``flush`` each future
    is done, and a record the broker refused (a partition the topic does not have) is done *and*
    failed, with its error, so the stage commits nothing."""
    from panstream.sources.kafka.rdkafka import RdKafkaProducer

    topic = topic_factory(2)
    p = RdKafkaProducer(bootstrap_servers=[kafka_broker.bootstrap], acks="all", linger_ms=5,
                        batch_size=1 << 20, max_request_size=1 << 20)
    good = [p.send(topic, value=bytes([i]) * 100, partition=i % 2) for i in range(50)]
    # Refused in its delivery report while librdkafka has no metadata of the topic yet, or at
    # once when it has: either way a future that is done and failed, never an exception.
    bad = p.send(topic, value=b"x", partition=7)
    p.flush(timeout=30)
    assert all(f.is_done and not f.failed() for f in good)
    assert bad.is_done and bad.failed() and "librdkafka producer" in str(bad.exception)
    known = p.send(topic, value=b"x", partition=7)  # the metadata is known by now: refused at once
    assert known.is_done and known.failed() and "librdkafka producer" in str(known.exception)
    p.close(timeout=5)


@pytest.mark.kafka
def test_the_librdkafka_consumer_tells_its_generation_as_kafka_python_does(
        kafka_broker: Broker, topic_factory: Any) -> None:
    """Slice snapshots are fenced by the member's generation in ``GROUP-slices`` (read, as from
    kafka-python, at ``consumer._coordinator._generation.generation_id``). A librdkafka member and
    a kafka-python member of one group, after the kafka-python one joined and the group
    rebalanced, report the same generation, higher than the librdkafka member's first one."""
    from kafka import KafkaConsumer

    from panstream.sources.kafka.config import consumer_config
    from panstream.sources.kafka.rdkafka import RdKafkaConsumer

    topic = topic_factory(4)
    cfg = consumer_config(kafka_broker.bootstrap, f"g-gen-{time.time()}", GROUP_SETTINGS)
    rd = RdKafkaConsumer(**cfg)
    kp: Any = None
    try:
        assert rd.generation() is None  # not in a group yet
        rd.subscribe(topics=[topic])
        deadline = time.monotonic() + 60
        while not rd.assignment() and time.monotonic() < deadline:
            rd.poll(timeout_ms=200)
        first = rd._coordinator._generation.generation_id
        assert isinstance(first, int) and first >= 0
        kp = KafkaConsumer(**cfg)
        kp.subscribe([topic])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            # the thread waits in kafka-python's poll: kafka-python 3.0.12 discards a JoinGroup
            # that completes between two of its polls and joins again (a new rebalance), and
            # librdkafka joins on its own threads whatever the caller does (member.py's docstring)
            rd.poll(timeout_ms=0)
            kp.poll(timeout_ms=200)
            gen = kp._coordinator._generation
            if (kp.assignment() and gen is not None and gen.generation_id > first
                    and rd.generation() == gen.generation_id):
                break  # both members in the new generation (waiting for a 4-way split could run
                # to the deadline: the test's claim is the generation, not the split)
        theirs = kp._coordinator._generation.generation_id
        assert rd.generation() == theirs and theirs > first
    finally:
        if kp is not None:
            kp.close()
        rd.close()


@pytest.mark.kafka
def test_a_paused_partition_hands_out_nothing_until_resumed(
        kafka_broker: Broker, librdkafka_topics: dict[str, Any]) -> None:
    """The slice stage pauses a newly assigned partition inside the assignment callback and
    resumes it once its slice is restored: records that arrive meanwhile must wait, not be handed
    out (the stage has no table for them yet) nor skipped. The adapter assigns before calling the
    listener (so the pause acts on an assigned partition); should librdkafka hand out a record it
    fetched before a pause took effect, the adapter keeps it back and seeks to it (not seen here:
    librdkafka 2.16 holds them back itself). Pausing again in the middle of the topic loses and
    repeats nothing either."""
    from kafka import TopicPartition
    from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener

    from panstream.sources.kafka.config import consumer_config
    from panstream.sources.kafka.rdkafka import RdKafkaConsumer

    topic, ends = librdkafka_topics["topics"]["lz4"], librdkafka_topics["ends"]["lz4"]
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    c = RdKafkaConsumer(**consumer_config(kafka_broker.bootstrap, f"g-pause-{time.time()}",
                                          {"max_poll_records": 50}))

    class Listener(AsyncConsumerRebalanceListener):
        async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            c.pause(*assigned)

        async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            pass

        async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
            pass

    offsets: dict[int, list[int]] = {}

    def read(seconds: float) -> int:
        n, deadline = 0, time.monotonic() + seconds
        while time.monotonic() < deadline and sum(map(len, offsets.values())) < LINES_PER_CODEC:
            for tp, recs in c.poll(timeout_ms=100).items():
                offsets.setdefault(tp.partition, []).extend(r.offset for r in recs)
                n += len(recs)
        return n

    try:
        c.subscribe(topics=[topic], listener=Listener())
        deadline = time.monotonic() + 60
        while c.assignment() != set(tps) and time.monotonic() < deadline:
            assert not c.poll(timeout_ms=200), "a paused partition handed out records"
        assert read(3.0) == 0  # assigned and paused: nothing, though the topic is full
        c.resume(*tps)
        deadline = time.monotonic() + 30
        while sum(map(len, offsets.values())) < LINES_PER_CODEC // 3 and time.monotonic() < deadline:
            read(0.1)
        c.pause(*tps)  # mid-topic: what librdkafka prefetched must wait too
        before = sum(map(len, offsets.values()))
        assert read(1.0) == 0 and sum(map(len, offsets.values())) == before
        c.resume(*tps)
        read(30.0)
        for p, end in ends.items():
            assert offsets[p] == list(range(end)), p  # nothing skipped, nothing twice
    finally:
        c.close()


@pytest.mark.kafka
@pytest.mark.parametrize("client", ["kafka-python", "librdkafka"])
def test_one_member_counts_every_line_of_every_codec(
        kafka_broker: Broker, librdkafka_topics: dict[str, Any], admin: Any,
        tmp_path: Path, client: str) -> None:
    """One member, default group settings, five librdkafka topics: every offset committed, every
    client's cell 1 in the one table, nothing else, exit 0; with the source topics read by
    kafka-python (the default) and by librdkafka (``--source-client librdkafka``)."""
    topics = librdkafka_topics["topics"]
    group = f"g-{client}-{int(time.time() * 1000) % 10**9}"
    state = tmp_path / "state"
    argv = ["kafka", "-b", kafka_broker.bootstrap, "-g", group, "-u", UNIVERSE.spec,
            "--epsilon", "30", "--value-format", "lines", "-f", "clf", "--slices", "8",
            "--state-dir", str(state), "--checkpoint-interval", "0.5", "--idle-timeout", "5",
            "--source-client", client, "--json"]
    for codec in CODECS:
        argv += ["-t", topics[codec]]
    run = subprocess.run(panstream_cmd(*argv), capture_output=True, timeout=180)
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    com = committed_offsets_by_topic(admin, group)
    for codec in CODECS:
        # A partition the producer left empty may be committed at 0 (kafka-python's position
        # there: the member commits up to its position for every partition it owns).
        got = {p: off for p, off in (com.get(topics[codec]) or {}).items()
               if off or p in librdkafka_topics["ends"][codec]}
        assert got == librdkafka_topics["ends"][codec], codec
    g = merge_store(DirectoryStore(state))
    try:
        bits = g.estimator.bits()
        everyone = np.concatenate([librdkafka_topics["clients"][c] for c in CODECS])
        for codec in CODECS:
            zeros = int((bits[librdkafka_topics["clients"][codec]] == 0).sum())
            assert zeros <= 2, f"{codec}: {zeros} of {CLIENTS_PER_CODEC} clients read 0"
        assert int(bits.sum()) - int(bits[everyone].sum()) <= 2  # nothing else was seen
    finally:
        g.estimator.wipe()


def committed_offsets_by_topic(admin: Any, group: str) -> dict[str, dict[int, int]]:
    """Committed offsets of a group, by topic and partition."""
    res = admin.list_group_offsets(group)
    res = res.get(group, res)
    out: dict[str, dict[int, int]] = {}
    for tp, om in res.items():
        off = om.offset if hasattr(om, "offset") else om[0]
        if off is not None and off >= 0:
            out.setdefault(tp.topic, {})[tp.partition] = off
    return out
