"""The law of one table through crashes (the law: ``test_group_law.py``): two members, killed
with ``kill -9`` at random moments and restarted, one stopped by SIGTERM mid-stream, or one
stalled past its session (evicted while it sleeps, then woken), leave a drained group whose store
is exactly one table of every client, and every run exits 0.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from _kafka_helpers import Broker, all_exit_0, committed_offsets
from test_broker import start, wait_for
from test_group_law import _argv, _messages, _topic, assert_one_table
from test_routed import send_round_robin

pytestmark = pytest.mark.kafka


class _Trickle:
    """The stream's messages, sent one at a time round robin (as a log shipper sends them)."""

    def __init__(self, producer: Any, topic: str, msgs: list[bytes], hw: dict[int, int],
                 sent: int) -> None:
        self.producer, self.topic, self.msgs, self.hw, self.sent = producer, topic, msgs, hw, sent

    def one(self) -> None:
        if self.sent < len(self.msgs):
            md = self.producer.send(self.topic, value=self.msgs[self.sent],
                                    partition=self.sent % 8).get(timeout=30)
            self.hw[md.partition] = max(self.hw.get(md.partition, 0), md.offset + 1)
            self.sent += 1

    def during(self, seconds: float, until: Any = None) -> None:
        """Send one message every 0.5 s for ``seconds`` (or, with ``until``, until it holds)."""
        deadline = time.monotonic() + seconds
        while (until is None or not until()) and time.monotonic() < deadline:
            self.one()
            time.sleep(0.5)

    def rest(self) -> dict[int, int]:
        self.hw = send_round_robin(self.producer, self.topic, self.msgs[self.sent:], 8, self.hw)
        self.sent = len(self.msgs)
        return dict(self.hw)


class _TwoMembers(NamedTuple):
    topic: str
    clients: Any
    msgs: list[bytes]
    hw: dict[int, int]
    group: str
    state: Path
    logs: list[Path]
    procs: list[Any]


def _two_members(broker: Broker, admin: Any, producer: Any, tmp_path: Path, name: str,
                 seed: int, first: tuple[str, ...] = ()) -> _TwoMembers:
    """A topic ``name`` of 30,000 lines from 6,000 clients, its first 20 messages sent, and two
    bounded members A and B of group ``g-<name>`` started on it (``first``: A's extra options)."""
    topic = _topic(admin, name)
    clients, msgs = _messages(seed, 6_000, 30_000)
    hw = send_round_robin(producer, topic, msgs[:20], 8, {})
    group, state = f"g-{name}", tmp_path / "state"
    argv = _argv(broker, topic, group, state)
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    procs = [start(argv + list(extra), log) for log, extra in zip(logs, (first, ()), strict=True)]
    return _TwoMembers(topic, clients, msgs, hw, group, state, logs, procs)


def test_members_killed_at_random_moments_and_restarted(
        kafka_broker: Broker, admin: Any, producer: Any, tmp_path: Path) -> None:
    """Two members; twice a random one is killed with kill -9 at a random moment (drawn from the
    OS CSPRNG: a different schedule each run, so many runs cover many moments) and restarted,
    while the stream goes on arriving.

    The stream keeps arriving (a message every 0.5 s, three to an idle time) until the last
    restarted member holds its slices: so the surviving member never finds the group drained,
    and never stops and leaves, while a restarted member's join is pending. Tansu 0.6.0 wedges a
    group whose only member leaves then: it keeps the departed member as the leader of the round
    the joiner waits in, so the joiner is never assigned (docs/kafka.md, Tansu quirks); a Kafka
    broker elects another leader."""
    topic = _topic(admin, "law-kill")
    clients, msgs = _messages(27, 10_000, 50_000)
    hw = send_round_robin(producer, topic, msgs[:20], 8, {})
    stream = _Trickle(producer, topic, msgs, hw, 20)
    group, state = "g-law-kill", tmp_path / "state"
    argv = _argv(kafka_broker, topic, group, state)
    rng = random.SystemRandom()
    logs = [tmp_path / "a0.log", tmp_path / "b0.log"]
    procs = [start(argv, log) for log in logs]
    try:
        for k in range(2):
            stream.during(rng.uniform(0.5, 8.0))
            i = rng.randrange(2)
            os.kill(procs[i].pid, signal.SIGKILL)
            procs[i].wait(timeout=10)
            logs[i] = tmp_path / f"{'ab'[i]}{k + 1}.log"
            procs[i] = start(argv, logs[i])
        restarted = logs[i]
        stream.during(120, lambda: "this member now holds" in restarted.read_text())
        stream.during(2.0)  # its routing join, concurrent with the slice join, is done too
        hw = stream.rest()
    except BaseException:
        for p in procs:
            p.kill()
        raise
    all_exit_0(procs, logs)
    assert_one_table(kafka_broker, admin, group, topic, hw, clients, state)


def test_a_member_stopped_by_sigterm_mid_stream_hands_over_its_work(
        kafka_broker: Broker, admin: Any, producer: Any, tmp_path: Path) -> None:
    """SIGTERM on one of two members while the stream arrives: it drains its own slices, makes its
    final checkpoint and exits 0; the other takes over its partitions and slices, applies what
    was routed to them, and exits 0 once the group has drained."""
    topic, clients, msgs, hw, group, state, logs, procs = _two_members(
        kafka_broker, admin, producer, tmp_path, "law-term", 29)
    try:
        wait_for(lambda: sum(committed_offsets(admin, group).values()) > 0, 90,
                 "a first routed commit", procs)
        procs[0].send_signal(signal.SIGTERM)
        hw = send_round_robin(producer, topic, msgs[20:], 8, hw)
    except BaseException:
        for p in procs:
            p.kill()
        raise
    all_exit_0(procs, logs)
    assert '"stopped_by": "signal"' in logs[0].read_text()
    assert_one_table(kafka_broker, admin, group, topic, hw, clients, state)


def test_a_member_stalled_past_its_session_rejoins_and_the_group_makes_one_table(
        kafka_broker: Broker, admin: Any, producer: Any, tmp_path: Path) -> None:
    """The shape of issue 38's failed CI run: a live member whose CPU stalls past its 3 s session
    (here SIGSTOP, mid-stream) is evicted and its slices move to the other member, which goes on.
    Woken, the stalled member finds its slices claimed by a newer owner: it drops them with one
    line and rejoins (before, its refused save stopped it with exit 1). Both exit 0 once the
    group has drained, and the store is one table of every client. The stalled member runs
    kafka-python, which checkpoints before it learns of its eviction (``test_zombie.py``), so
    its save usually meets the fence; the line is printed (``-s``), not required."""
    from test_zombie import FENCE_LINES, ZOMBIE_CLIENT, evict_the_first

    topic, clients, msgs, hw, group, state, logs, procs = _two_members(
        kafka_broker, admin, producer, tmp_path, "law-stall", 33, ZOMBIE_CLIENT)
    a, _ = procs
    try:
        hw = evict_the_first(procs, logs, admin, group, state,  # the stall
                             lambda: send_round_robin(producer, topic, msgs[20:], 8, hw))
        a.send_signal(signal.SIGCONT)                    # A wakes while B goes on
    except BaseException:
        for p in procs:
            p.send_signal(signal.SIGCONT)
            p.kill()
        raise
    all_exit_0(procs, logs)
    text = logs[0].read_text()
    print(f"stalled member met the fence: {any(f in text for f in FENCE_LINES)}")
    assert_one_table(kafka_broker, admin, group, topic, hw, clients, state)
