"""The law of one table, on a real broker: whatever the group does, once it has drained its store
is one table fed every arrival whose source offset was committed, and no bounded run exits 0 while
work is pending.

A log shipper's topic (whole CLF lines, 500 a message, no key, round robin over 8 partitions) is
read by routed groups of 1, 2, 3 and 4 members started together; by two members killed with
``kill -9`` at random moments and restarted; by two members, one stopped by SIGTERM mid-stream;
and by one member whose group holds slices that
nobody applies (a consumer squatting in ``<group>-slices`` without committing: a stuck member). In
every case:

* every bounded run that exits 0 has left its group drained: every source offset committed at the
  topic's end, every routed record of ``<group>-cells`` applied and committed (asked of the broker
  afterwards, from fetch high-water marks);
* the store is then exactly one table: at ``--epsilon 30`` every client's cell reads 1 and no other
  does, up to 2 flips each way (a per-bit flip probability of 1 - p ~ 1e-13: failing falsely has
  probability below 1e-16, as in tests/kafka/test_routed.py);
* ``panstream release -b`` says the internal topic is drained, and its distinct count is within
  ``ln(1e7) / 0.5`` of the truth (Laplace noise alone: false-failure rate 1e-7);
* the stuck group's member exits 1 with one line saying what is pending, its release is refused
  (the squatter's slices were never saved, and the broker shows records routed to them), and once
  the squatter leaves a rerun applies everything: nothing was lost.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _kafka_helpers import GROUP_SETTINGS, Broker, committed_offsets, kill_left, panstream_cmd
from test_broker import start, wait_for
from test_routed import clf, member_argv, send_round_robin

from panstream.sources.kafka.progress import GroupProgress
from panstream.state.stores import DirectoryStore, merge_store
from panstream.universe import Universe

pytestmark = pytest.mark.kafka

UNIVERSE = Universe.parse("ipv4:10.9.0.0/16")
SLICES = 8
IDLE = "3"
#: Laplace noise of a release at epsilon 0.5 exceeds this with probability 1e-7.
NOISE = math.log(1e7) / 0.5


def _messages(seed: int, clients: int, lines: int) -> tuple[np.ndarray, list[bytes]]:
    rng = np.random.default_rng(seed)
    who = rng.choice(UNIVERSE.size, clients, replace=False)
    stream = rng.permutation(np.concatenate([who, rng.choice(who, lines - clients)]))
    text = [clf(UNIVERSE.item_of(int(c)), i) for i, c in enumerate(stream)]
    return who, ["\n".join(text[i:i + 500]).encode() for i in range(0, len(text), 500)]


def _topic(admin: Any, name: str, partitions: int = 8) -> str:
    from kafka.admin import NewTopic

    name = f"{name}-{os.getpid()}"
    admin.create_topics([NewTopic(name, partitions, 1)])
    return name


@pytest.fixture(scope="module")
def shipped(kafka_broker: Broker, admin: Any, producer: Any) -> Iterator[dict[str, Any]]:
    """One topic for the group sizes: 60,000 lines from 12,000 clients in 120 messages."""
    topic = _topic(admin, "law-sizes")
    clients, msgs = _messages(26, 12_000, 60_000)
    hw = send_round_robin(producer, topic, msgs, 8, {})
    yield {"topic": topic, "clients": clients, "hw": hw}


def _argv(broker: Broker, topic: str, group: str, state: Path, idle: str = IDLE) -> list[str]:
    return member_argv(broker, topic, group, UNIVERSE.spec, state, "--epsilon", "30",
                       "--value-format", "lines", "-f", "clf", "--slices", str(SLICES),
                       "--idle-timeout", idle)


def _release(broker: Broker, state: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(panstream_cmd("release", "--state-dir", str(state), "-b",
                                        broker.bootstrap, "--epsilon", "0.5", "--json"),
                          capture_output=True, timeout=60)


def _finish(procs: list[subprocess.Popen[bytes]], logs: list[Path], timeout: float = 180) -> None:
    """Every member ends, with exit 0 (a bounded run exits 0 only once its group has drained)."""
    try:
        for p, log in zip(procs, logs, strict=True):
            assert p.wait(timeout=timeout) == 0, log.read_text()[-3000:]
    finally:
        kill_left(*procs)


def assert_one_table(broker: Broker, admin: Any, group: str, topic: str, hw: dict[int, int],
                     clients: np.ndarray, state: Path) -> None:
    """The group has drained and its store is exactly one table of every client (module doc)."""
    assert committed_offsets(admin, group) == hw  # every source message routed, then committed
    probe = GroupProgress({"bootstrap_servers": broker.bootstrap}, group, [topic],
                          f"{group}-cells")
    try:
        pending = probe.pending()
    finally:
        probe.close()
    assert not pending, pending.describe()
    store = DirectoryStore(state)
    assert sorted(store.keys()) == [f"{group}-cells/{r}" for r in range(SLICES)]
    g = merge_store(store)
    assert (g.method, g.state_tables, g.sensitivity) == ("slices", 1, 1)
    bits = g.estimator.bits()
    zeros = int((bits[clients] == 0).sum())
    extra = int(bits.sum()) - int(bits[clients].sum())
    g.estimator.wipe()
    assert zeros <= 2, f"{zeros} of {clients.size:,} clients read 0: arrivals were lost"
    assert extra <= 2, f"{extra} cells nobody sent read 1"
    rel = _release(broker, state)
    assert rel.returncode == 0, rel.stderr.decode()
    out = json.loads(rel.stdout)
    assert out["internal_topic"]["drained"] and out["internal_topic"]["missing"] == []
    assert abs(out["distinct"] - clients.size) <= NOISE + 3, out


@pytest.mark.parametrize("members", [1, 2, 3, 4])
def test_members_started_together_make_one_table(
        kafka_broker: Broker, admin: Any, shipped: dict[str, Any], tmp_path: Path,
        members: int) -> None:
    group = f"g-law-{members}"
    state = tmp_path / "state"
    argv = _argv(kafka_broker, shipped["topic"], group, state)
    logs = [tmp_path / f"m{i}.log" for i in range(members)]
    procs = [start(argv, log) for log in logs]
    _finish(procs, logs)
    assert_one_table(kafka_broker, admin, group, shipped["topic"], shipped["hw"],
                     shipped["clients"], state)


def test_members_killed_at_random_moments_and_restarted(
        kafka_broker: Broker, admin: Any, producer: Any, tmp_path: Path) -> None:
    """Two members; twice a random one is killed with kill -9 at a random moment (drawn from the
    OS CSPRNG: a different schedule each run, so many runs cover many moments) and restarted,
    while the second part of the stream is produced."""
    topic = _topic(admin, "law-kill")
    clients, msgs = _messages(27, 10_000, 50_000)
    hw = send_round_robin(producer, topic, msgs[:40], 8, {})
    group, state = "g-law-kill", tmp_path / "state"
    argv = _argv(kafka_broker, topic, group, state)
    rng = random.SystemRandom()
    logs = [tmp_path / "a0.log", tmp_path / "b0.log"]
    procs = [start(argv, log) for log in logs]
    try:
        for k in range(2):
            time.sleep(rng.uniform(0.5, 8.0))
            i = rng.randrange(2)
            os.kill(procs[i].pid, signal.SIGKILL)
            procs[i].wait(timeout=10)
            if k == 0:
                hw = send_round_robin(producer, topic, msgs[40:], 8, hw)
            logs[i] = tmp_path / f"{'ab'[i]}{k + 1}.log"
            procs[i] = start(argv, logs[i])
    except BaseException:
        for p in procs:
            p.kill()
        raise
    _finish(procs, logs)
    assert_one_table(kafka_broker, admin, group, topic, hw, clients, state)


def test_a_member_stopped_by_sigterm_mid_stream_hands_over_its_work(
        kafka_broker: Broker, admin: Any, producer: Any, tmp_path: Path) -> None:
    """SIGTERM on one of two members while the stream arrives: it drains its own slices, makes its
    final checkpoint and exits 0; the other takes over its partitions and slices, applies what
    was routed to them, and exits 0 once the group has drained."""
    topic = _topic(admin, "law-term")
    clients, msgs = _messages(29, 6_000, 30_000)
    hw = send_round_robin(producer, topic, msgs[:20], 8, {})
    group, state = "g-law-term", tmp_path / "state"
    argv = _argv(kafka_broker, topic, group, state)
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    procs = [start(argv, log) for log in logs]
    try:
        wait_for(lambda: sum(committed_offsets(admin, group).values()) > 0, 90,
                 "a first routed commit", procs)
        procs[0].send_signal(signal.SIGTERM)
        hw = send_round_robin(producer, topic, msgs[20:], 8, hw)
    except BaseException:
        for p in procs:
            p.kill()
        raise
    _finish(procs, logs)
    assert '"stopped_by": "signal"' in logs[0].read_text()
    assert_one_table(kafka_broker, admin, group, topic, hw, clients, state)


class _Squatter:
    """A consumer in ``<group>-slices`` that polls (so it keeps its partitions) but never applies
    or commits anything: a stuck member holding slices."""

    def __init__(self, broker: Broker, group: str, topic: str) -> None:
        from kafka import KafkaConsumer

        self.consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=f"{group}-slices",
                                      enable_auto_commit=False, auto_offset_reset="earliest",
                                      **{k: int(v) for k, v in GROUP_SETTINGS.items()})
        self.consumer.subscribe([topic])
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            self.consumer.poll(timeout_ms=200)

    def held(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def leave(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        self.consumer.close(autocommit=False)


def test_a_member_whose_group_cannot_drain_exits_1_and_loses_nothing(
        kafka_broker: Broker, admin: Any, producer: Any, tmp_path: Path) -> None:
    from kafka.admin import NewTopic

    topic = _topic(admin, "law-stuck", 4)
    clients, msgs = _messages(28, 3_000, 10_000)
    hw = send_round_robin(producer, topic, msgs, 4, {})
    group, state = "g-law-stuck", tmp_path / "state"
    admin.create_topics([NewTopic(f"{group}-cells", SLICES, 1)])
    squatter = _Squatter(kafka_broker, group, f"{group}-cells")
    try:
        wait_for(lambda: len(squatter.held()) == SLICES, 60, "the squatter's slices")
        run = subprocess.run(_argv(kafka_broker, topic, group, state) + ["--drain-timeout", "15"],
                             capture_output=True, timeout=180)
        stuck = sorted(squatter.held())
        err = [ln for ln in run.stderr.decode().splitlines() if ln.startswith("panstream: error:")]
        assert run.returncode == 1, run.stderr.decode()[-3000:]
        assert len(err) == 1 and err[0].startswith(
            "panstream: error: stopped by --idle-timeout with work pending for the group: "), err
        assert f"routed records unapplied in {group}-cells (slices " in err[0], err
        assert "idle, but the group has not drained" in run.stderr.decode()
        assert committed_offsets(admin, group) == hw  # routed: the records wait in the topic
        # what a release says now: the squatter's slices were never saved, and received records
        plain = subprocess.run(panstream_cmd("release", "--state-dir", str(state), "--epsilon",
                                             "0.5"), capture_output=True, timeout=60)
        assert plain.returncode == 1 and "without -b the release cannot tell" in \
            plain.stderr.decode()
        asked = _release(kafka_broker, state)
        assert asked.returncode == 1 and f"but {group}-cells has held records routed to them" in \
            asked.stderr.decode(), asked.stderr.decode()
        ins = subprocess.run(panstream_cmd("inspect", "--state-dir", str(state), "-b",
                                           kafka_broker.bootstrap, "--json"),
                             capture_output=True, timeout=60)
        info = json.loads(ins.stdout)["internal_topic"]
        assert not info["drained"] and set(info["slices_pending"]) <= set(stuck), info
        assert info["routed_records_unapplied"] > 0
        # (the member's exit rebalanced the squatter onto every slice: let that finish, since a
        # LeaveGroup in the middle of a rebalance stalls Tansu's group for minutes)
        wait_for(lambda: len(squatter.held()) == SLICES, 60, "the squatter alone")
    finally:
        squatter.leave()
    # the squatter gone, a rerun takes every slice and applies what waited: nothing was lost
    log = tmp_path / "rerun.log"
    _finish([start(_argv(kafka_broker, topic, group, state), log)], [log])
    assert_one_table(kafka_broker, admin, group, topic, hw, clients, state)
