"""Topology changes under a routed group are noticed and said, never survived silently (issue 35).

On the real broker (Tansu, loopback), with member subprocesses as an operator runs them:

* **a source topic deleted and re-created under the same name** while the group runs: a
  kafka-python member sees the new topic id and stops with exit 1 and one line naming the change
  and the way out; a librdkafka member dies of SIGSEGV inside librdkafka 2.16 (no handler in the
  process can run: docs/kafka.md, *Topology changes*), and a watcher process says so in one line.
  Afterwards ``inspect -b`` never says "drained" while the group's offsets belong to the old
  topic, and ``release -b`` refuses rather than release a table that misses an unknown part;
* **the broker restarted empty** (a lost cluster): the member stops with one line saying that the
  internal topic is gone and routed-but-unapplied records with it (no "nothing is lost"), no
  client of panstream auto-creates ``GROUP-cells`` with the broker's default count, a restarted
  member re-creates it with the slice count and says what was lost, and one that finds a
  ``GROUP-cells`` of another count (as a broker's auto-create made it) refuses, naming the topic
  as the wrong side (no advice to follow its count);
* **a source topic that does not exist yet** is waited for with a line saying so, then consumed.

Each test asserts outcomes (exit status, the one line, what the broker holds), never times. The
broker restarted empty, and a source topic re-created while no member ran, are played in
``test_topology_restarts.py`` with this file's helpers (apart so that the suite's workers share
the broker time).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _kafka_helpers import (
    ROUTED_IDLE,
    Broker,
    committed_offsets,
    group_options,
    kill_left,
    panstream_cmd,
)

from panstream.sources.kafka.topology import no_auto_create, wait_for_topics

pytestmark = pytest.mark.kafka

ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


def _lines(base: int, n: int) -> list[bytes]:
    """``n`` messages of 50 whole CLF lines each, clients ``10.9.<m % 200>.<j>``."""
    return [("\n".join(f'10.9.{(base + m) % 200}.{j} - - [10/Oct/2024:13:55:36 +0000] "GET / '
                       f'HTTP/1.1" 200 1' for j in range(50))).encode() for m in range(n)]


def _produce(bootstrap: str, topic: str, values: list[bytes],
             keys: list[bytes] | None = None) -> None:
    """Send and flush with a producer of its own that never auto-creates a topic (the session
    producer's metadata refreshes would re-create a deleted topic behind the test's back); keyed
    by ``keys`` where given (kafka-python's murmur2 placement, as ``--layout partition`` checks)."""
    from kafka import KafkaProducer

    p = no_auto_create(KafkaProducer(bootstrap_servers=bootstrap, acks="all"))
    try:
        for v, k in zip(values, keys or [None] * len(values), strict=True):
            p.send(topic, v, key=k)
        p.flush()
    finally:
        p.close()


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    a = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        a.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        a.close()


def _member(bootstrap: str, topic: str, state: Path, client: str, idle: float | str,
            slices: int = 4) -> list[str]:
    return panstream_cmd("kafka", "-b", bootstrap, "-t", topic, "-g", f"g-{topic}",
                         "--value-format", "lines", "-f", "clf", "-u", "ipv4:10.9.0.0/16",
                         "--epsilon", "4", "--state-dir", str(state), "--slices", str(slices),
                         "--checkpoint-interval", "0.5", "--source-client", client,
                         "--idle-timeout", str(idle), "--drain-timeout", "20", *group_options())


@contextlib.contextmanager
def _running(argv: list[str], log: Path) -> Iterator[subprocess.Popen[str]]:
    """A member subprocess (stderr to ``log``), killed at the end if still running."""
    with open(log, "w") as err:
        member = subprocess.Popen(argv, env=ENV, stdout=subprocess.DEVNULL, stderr=err, text=True)
    try:
        yield member
    finally:
        kill_left(member)


def _errors(log: Path) -> list[str]:
    """The member's error lines (librdkafka's own log lines, ``panstream: ERROR: FAIL ...``
    while a broker is away, are not among them)."""
    return [ln for ln in log.read_text().splitlines() if ln.startswith("panstream: error:")]


def _crashed_saying_so(log: Path, rc: int) -> bool:
    """Whether a librdkafka member died of SIGSEGV inside librdkafka 2.16 (a topic it fetched was
    deleted: docs/kafka.md, *Topology changes*); if so, the command that ran it in a child process
    said it in one line and exited 1: the command itself never dies of the signal."""
    assert rc >= 0, f"the command died of signal {-rc}: {log.read_text()}"
    if "died of SIGSEGV, a crash inside librdkafka" not in log.read_text():
        return False
    [line] = _errors(log)
    assert rc == 1 and "nothing committed is lost" in line, line
    return True


def _until(what: Any, seconds: float = 60) -> None:
    """Wait for a condition the member's progress makes true (a bound, not a timing assertion)."""
    deadline = time.monotonic() + seconds
    while not what():
        assert time.monotonic() < deadline, "the member did not get there"
        time.sleep(0.2)


def _inspect(bootstrap: str, state: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(panstream_cmd("inspect", "--state-dir", str(state), "-b", bootstrap),
                          env=ENV, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("client", ["kafka-python", "librdkafka"])
def test_a_source_topic_deleted_and_recreated_stops_the_group_loudly(
        kafka_broker: Broker, admin: Any, fresh_topic: str, tmp_path: Path, client: str) -> None:
    b, topic, state = kafka_broker.bootstrap, fresh_topic, tmp_path / "state"
    _create(b, topic, 4)
    _produce(b, topic, _lines(0, 40))
    log = tmp_path / "member.err"
    with _running(_member(b, topic, state, client, idle=60), log) as member:
        # the group has routed and committed what it read: the topic's old identity is in use
        _until(lambda: sum(committed_offsets(admin, f"g-{topic}", topic).values()) >= 40)
        admin.delete_topics([topic])
        _until(lambda: topic not in admin.list_topics(), 30)
        _create(b, topic, 4)  # the same name, a new topic, while the group runs
        _produce(b, topic, _lines(100, 12))
        rc = member.wait(timeout=90)
    text = log.read_text()
    if client == "kafka-python":  # a new topic id: the member stops, saying what and the way out
        assert rc == 1
        [line] = _errors(log)
        assert f"the source topic {topic} was deleted" in line
        assert "reset this group's source offsets" in line
        assert "nothing is lost" not in line
    else:  # librdkafka 2.16.0 dies of SIGSEGV in its own thread: the member runs in a child
        # process, whose supervisor (the command) says it in one line and exits 1; or the
        # topology watch saw the change first and the member stopped with its line
        assert _crashed_saying_so(log, rc) or (rc == 1 and len(_errors(log)) == 1), text
    # no silent miss afterwards: a restart either refuses (the group's offsets on the new topic
    # are the old topic's) or reads the new topic from its start, every message of it
    again = subprocess.run(_member(b, topic, state, client, idle=ROUTED_IDLE), env=ENV,
                           capture_output=True, text=True, timeout=180)
    ends = sum(_ends(admin, topic).values())
    shown = _inspect(b, state)
    if again.returncode == 0:
        assert sum(committed_offsets(admin, f"g-{topic}", topic).values()) == ends
    else:
        [line] = [ln for ln in again.stderr.splitlines() if "error" in ln]
        assert "changed under it" in line and "ends below the offsets" in line
        assert ": drained (" not in shown.stdout, shown.stdout
        released = subprocess.run(panstream_cmd("release", "--state-dir", str(state), "-b", b,
                                                "--epsilon", "0.5"),
                                  env=ENV, capture_output=True, text=True, timeout=120)
        assert released.returncode == 1 and "changed under it" in released.stderr


def _ends(admin: Any, topic: str) -> dict[int, int]:
    """High-water marks from a fetch (Tansu answers ListOffsets LATEST wrongly)."""
    from panstream.sources.kafka.progress import GroupProgress

    probe = GroupProgress({"bootstrap_servers": admin.config["bootstrap_servers"]}, "-", None, "")
    try:
        return {tp.partition: e for tp, e in probe.ends(probe.partitions(topic), {}).items()}
    finally:
        probe.close()


def test_a_per_partition_member_stops_loudly_when_its_source_topic_is_recreated(
        kafka_broker: Broker, admin: Any, fresh_topic: str, tmp_path: Path) -> None:
    """``--layout partition`` has the routed member's topology watch: its source topic deleted
    and re-created under it, the member stops with exit 1 and the one line (what changed, the
    way out), and commits none of its old positions onto the new topic."""
    b, topic, state = kafka_broker.bootstrap, fresh_topic, tmp_path / "state"
    group = f"p-{topic}"
    _create(b, topic, 4)
    ips = [f"10.9.0.{i}".encode() for i in range(40)]
    _produce(b, topic, ips, keys=ips)
    argv = panstream_cmd("kafka", "-b", b, "-t", topic, "-g", group, "--layout", "partition",
                         "-f", "plain", "-u", "ipv4:10.9.0.0/16", "--epsilon", "4",
                         "--state-dir", str(state), "--checkpoint-interval", "0.5",
                         "--idle-timeout", "60", *group_options())
    log = tmp_path / "member.err"
    with _running(argv, log) as member:
        _until(lambda: sum(committed_offsets(admin, group, topic).values()) >= 40)
        admin.delete_topics([topic])
        _until(lambda: topic not in admin.list_topics(), 30)
        _create(b, topic, 4)
        _produce(b, topic, ips[:8], keys=ips[:8])
        rc = member.wait(timeout=90)
    assert rc == 1, log.read_text()
    [line] = _errors(log)
    assert f"the group's topics changed under it: the source topic {topic} was deleted" in line
    assert "reset this group's source offsets" in line
    assert "internal topic" not in line and "routed" not in line
    assert committed_offsets(admin, group, topic) == {}  # nothing of the old topic's positions


def test_a_source_topic_that_does_not_exist_yet_is_waited_for(
        kafka_broker: Broker, admin: Any, fresh_topic: str, tmp_path: Path) -> None:
    b, topic, state = kafka_broker.bootstrap, fresh_topic, tmp_path / "state"
    log = tmp_path / "member.err"
    with _running(_member(b, topic, state, "librdkafka", idle=4), log) as member:
        _until(lambda: "does not exist yet: waiting for it" in log.read_text())
        assert member.poll() is None  # no exit 1 at once (a crash loop under a restart policy)
        _create(b, topic, 4)
        _produce(b, topic, _lines(0, 20))
        rc = member.wait(timeout=120)
    assert rc == 0, log.read_text()
    assert sum(committed_offsets(admin, f"g-{topic}", topic).values()) == 20  # all consumed


def test_the_wait_for_a_source_topic_says_so_then_progress_and_honours_the_bound() -> None:
    now = [0.0]
    said: list[str] = []
    appear = 130.0

    def exists(topics: list[str]) -> list[str]:
        return list(topics) if now[0] >= appear else []

    def sleep(s: float) -> None:
        now[0] += s

    assert wait_for_topics(exists, ["logs"], said.append, clock=lambda: now[0], sleep=sleep,
                           every=1.0, say_every=60.0)
    assert said[0].startswith("the source topic logs does not exist yet: waiting for it")
    assert [s.split("(")[1] for s in said[1:-1]] == ["60 s)", "120 s)"]
    assert said[-1] == "logs: the source topics exist now; starting"
    now[0], appear, said[:] = 0.0, 1e9, []
    with pytest.raises(Exception, match="stopped by --idle-timeout after 10 s: the source topic "
                                        "logs does not exist"):
        wait_for_topics(exists, ["logs"], said.append, limit=10, clock=lambda: now[0],
                        sleep=sleep)


def test_no_client_of_panstream_lets_a_broker_auto_create_a_topic(
        kafka_broker: Broker, admin: Any, fresh_topic: str) -> None:
    from kafka import KafkaProducer

    from panstream.sources.kafka import internal_config, parse_overrides, source_config
    from panstream.sources.kafka.joins import group_consumer
    from panstream.sources.kafka.rdkafka import rdkafka_config

    cfg = source_config(kafka_broker.bootstrap, f"g-{fresh_topic}")
    assert cfg["allow_auto_create_topics"] is False
    assert rdkafka_config(cfg)[0]["allow.auto.create.topics"] is False
    # -C allow.auto.create.topics=true (issue 37, for brokers that auto-create a source topic)
    # reaches the source consumer only, never a client of the internal topic
    asked = parse_overrides(["allow.auto.create.topics=true"])
    assert source_config("h:9092", "g", asked)["allow_auto_create_topics"] is True
    internal = internal_config("h:9092", "g-slices", asked)
    assert internal["allow_auto_create_topics"] is False
    assert rdkafka_config(internal)[0]["allow.auto.create.topics"] is False
    # kafka-python 3.0.12 drops the setting on the way to its metadata requests (Tansu created a
    # subscribed or produced-to topic all the same); panstream's clients put it there
    consumer = group_consumer(**cfg)
    consumer.subscribe([fresh_topic])
    for _ in range(6):
        consumer.poll(timeout_ms=500)
    consumer.close()
    producer = no_auto_create(KafkaProducer(bootstrap_servers=kafka_broker.bootstrap,
                                            max_block_ms=2000))
    with pytest.raises(Exception, match="Timeout"):
        producer.send(fresh_topic, b"x").get(timeout=5)
    producer.close()
    assert fresh_topic not in admin.list_topics()


def test_a_release_refuses_a_group_whose_topics_changed() -> None:
    """With -b, a table whose group's offsets no longer belong to its topics is refused before
    anything is spent: what it misses cannot be known (a release without -b says it covers only
    the saved slices)."""
    from panstream.cli.routed_check import require_releasable
    from panstream.errors import StateError

    info = {"name": "g-cells", "slices": 4, "missing": [], "checked": True, "drained": False,
            "never_routed": [], "topology_changed": ["the source topic logs was deleted"]}
    with pytest.raises(StateError, match="changed under it: the source topic logs was deleted"):
        require_releasable(info)


class _Admin:
    """describe_topics answers from a script, one answer per call (the last one repeats)."""

    def __init__(self, answers: list[dict[str, tuple[int, str] | None]]) -> None:
        self.answers = answers

    def describe_topics(self, names: list[str]) -> list[dict[str, Any]]:
        now = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return [{"name": n, "error_code": 0, "topic_id": now[n][1],
                 "partitions": [{}] * now[n][0]} if now.get(n) else
                {"name": n, "error_code": 3, "topic_id": None, "partitions": []} for n in names]

    def close(self) -> None:
        pass


def test_the_watch_keeps_a_change_only_when_a_second_look_confirms_it() -> None:
    """A broker restarting with its data may answer "no such topic" for a moment: that alone does
    not stop a group; a new topic id seen twice does."""
    from panstream.sources.kafka.topology import TopologyWatch

    same = {"logs": (8, "A"), "g-cells": (16, "C")}
    blip = TopologyWatch(lambda: _Admin([same, {"g-cells": (16, "C")}, same]), ["logs"],
                         "g-cells", 16, confirm=0)
    blip.baseline = blip.look()
    assert blip.check() == []
    moved = {"logs": (8, "B"), "g-cells": (16, "C")}
    real = TopologyWatch(lambda: _Admin([same, {"g-cells": (16, "C")}, moved]), ["logs"],
                         "g-cells", 16, confirm=0)
    real.baseline = real.look()
    assert real.check() == ["the source topic logs was deleted and re-created (topic id A, now B)"]


def test_a_commit_looks_at_the_topics_first_and_is_held_once_they_changed() -> None:
    """The watch looks every 2 s; a checkpoint in between must not put the old topic's positions
    on a topic re-created under the same name. So every commit looks first (the per-partition
    layout's and the routing stage's: docs/kafka.md, Topology changes), and once a change is seen
    no commit reaches the broker, whatever follows."""
    from panstream.sources.kafka.topology import TopologyWatch
    from panstream.sources.kafka.watched import LookBeforeCommit

    class Consumer:
        def __init__(self, **settings: Any) -> None:
            self.commits: list[dict[str, int]] = []
            self.closed = False

        def commit(self, offsets: dict[str, int]) -> None:
            self.commits.append(offsets)

        def close(self) -> None:
            self.closed = True

    same, moved = {"logs": (8, "A")}, {"logs": (8, "B")}
    look = LookBeforeCommit(TopologyWatch(lambda: _Admin([same, same, moved]), ["logs"], "", 0,
                                          confirm=0), owns_watch=True)
    consumer = look.wrap(Consumer)(group_id="g")  # its baseline: the first look
    consumer.commit({"logs/0": 5})  # the second look: unchanged, committed
    consumer.commit({"logs/0": 9})  # the third: a new topic id, held
    consumer.commit({"logs/0": 12})
    inner = consumer._consumer
    assert inner.commits == [{"logs/0": 5}]
    assert look.changed.is_set()
    consumer.close()
    assert inner.closed and look.watch._stop.is_set()  # its watch's admin client closed with it
