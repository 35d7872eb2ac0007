"""The law of one table through crashes (the law: ``test_group_law.py``): two members, killed
with ``kill -9`` at random moments and restarted, or one stopped by SIGTERM mid-stream, leave a
drained group whose store is exactly one table of every client, and every run exits 0.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from _kafka_helpers import Broker, all_exit_0, committed_offsets
from test_broker import start, wait_for
from test_group_law import _argv, _messages, _topic, assert_one_table
from test_routed import send_round_robin

pytestmark = pytest.mark.kafka


def test_members_killed_at_random_moments_and_restarted(
        kafka_broker: Broker, admin: Any, producer: Any, tmp_path: Path) -> None:
    """Two members; twice a random one is killed with kill -9 at a random moment (drawn from the
    OS CSPRNG: a different schedule each run, so many runs cover many moments) and restarted,
    while the second part of the stream is produced."""
    topic = _topic(admin, "law-kill")
    clients, msgs = _messages(27, 10_000, 50_000)
    hw = send_round_robin(producer, topic, msgs[:40], 8, {})
    group, state = "g-law-kill", tmp_path / "state"
    # Kafka's own minimum session (6 s) and an idle time of 3 s, as before issue 36 shortened the
    # tests' sessions to 3 s: with those, one -n 6 suite run saw the member restarted after the
    # second kill never assigned within its idle time + 30 s (not reproduced; kept as it was).
    argv = _argv(kafka_broker, topic, group, state, "-C", "session_timeout_ms=6000",
                 "-C", "heartbeat_interval_ms=1000", idle="3")
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
    all_exit_0(procs, logs)
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
    all_exit_0(procs, logs)
    assert '"stopped_by": "signal"' in logs[0].read_text()
    assert_one_table(kafka_broker, admin, group, topic, hw, clients, state)
