"""The law of one table, on a real broker: whatever the group does, once it has drained its store
is one table fed every arrival whose source offset was committed, and no bounded run exits 0 while
work is pending.

A log shipper's topic (whole CLF lines, 500 a message, no key, round robin over 8 partitions) is
read by routed groups of 1, 2, 3 and 4 members started together (here); by two members killed with
``kill -9`` at random moments and restarted, and by two members, one stopped by SIGTERM
mid-stream (``test_group_law_crashes.py``); and by one member whose group holds slices that nobody
applies (a consumer squatting in ``<group>-slices`` without committing: a stuck member,
``test_group_law_stuck.py``). The three files share this one's helpers; they are apart so that the
suite's workers share their broker time (each file runs on one worker). In every case:

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
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _kafka_helpers import Broker, all_exit_0, committed_offsets, panstream_cmd
from test_broker import start
from test_routed import IDLE, clf, member_argv, send_round_robin

from panstream.sources.kafka.progress import GroupProgress
from panstream.state.stores import DirectoryStore, merge_store
from panstream.universe import Universe

pytestmark = pytest.mark.kafka

UNIVERSE = Universe.parse("ipv4:10.9.0.0/16")
SLICES = 8
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


def _argv(broker: Broker, topic: str, group: str, state: Path, *extra: str,
          idle: str = IDLE) -> list[str]:
    return member_argv(broker, topic, group, UNIVERSE.spec, state, "--epsilon", "30",
                       "--value-format", "lines", "-f", "clf", "--slices", str(SLICES),
                       "--idle-timeout", idle, *extra)


def _release(broker: Broker, state: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(panstream_cmd("release", "--state-dir", str(state), "-b",
                                        broker.bootstrap, "--epsilon", "0.5", "--json"),
                          capture_output=True, timeout=60)


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
    all_exit_0(procs, logs)
    assert_one_table(kafka_broker, admin, group, shipped["topic"], shipped["hw"],
                     shipped["clients"], state)
