"""A zombie member on a real broker: stopped past its session, woken after the group moved on.

The first test runs the routed layout (slices), the second the per-partition layout
(``--layout partition``: one full table per source partition, each fenced the same way).

Two members of a routed group read a log shipper's topic. Member A is stopped with SIGSTOP (a
stop-the-world pause) once the group has committed work; the broker evicts it after its session,
B takes all partitions and slices, and the rest of the stream arrives and is applied and
checkpointed by B. Then A gets SIGCONT and B is killed with ``kill -9`` at once: if A's stale
snapshot of a slice could replace B's, the arrivals B applied after A's last checkpoint would be
gone, since a restore replays only from B's commit. Then:

* A meets the fence: its save (or its claim) is refused, it says so in one line, drops the
  slices unsaved and goes on (before this round it stopped with exit 1 on that line): it rejoins
  the group, takes B's slices over once B's session expires, and a SIGTERM then stops it with its
  final checkpoint and exit 0. The line must be the fence's, not a commit Kafka refused nor an
  eviction A noticed in time, which would pass without the fence. A runs on kafka-python (``--source-client kafka-python``; B and the later member on
  the default, librdkafka: both clients assign by range, so they share a group): kafka-python,
  woken, checkpoints before it learns of its eviction, while librdkafka notices the expired
  session first and drops its slices unsaved (safe, but the fence would go untested). The
  per-partition layout runs on kafka-python only;
* a fresh bounded member drains what is left, and the store is then exactly one table of every
  client (``assert_one_table`` of ``test_group_law.py``: at epsilon 30 every client's cell reads 1
  and no other, up to 2 flips each way, false-failure rate below 1e-16; the release's distinct
  count within ln(1e7)/0.5 of the truth, 1e-7).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _kafka_helpers import Broker, Producer, all_exit_0, committed_offsets, free_port
from test_broker import assert_nothing_lost, consumer_argv, ips, metric, start, wait_for
from test_group_law import _argv, _messages, _topic, assert_one_table
from test_routed import IDLE, send_round_robin

from panstream.state.files import LOCK_SUFFIX
from panstream.state.stores import DirectoryStore

pytestmark = pytest.mark.kafka

#: The zombie's client. kafka-python's consumer, woken, checkpoints before it learns that it was
#: evicted, so its first save meets the fence; librdkafka (the routed default) notices the expired
#: session first and drops its slices unsaved, which is safe but leaves the fence untested.
#: Members of both clients share a group (both assign by range).
ZOMBIE_CLIENT = ("--source-client", "kafka-python")

#: The fence's one-line notices (panstream.sources.kafka.group): a save refused (the tasks
#: dropped unsaved), or a claim refused (it waits for the member's rejoin).
FENCE_LINES = ("another member claimed them since", "was refused: a newer owner claimed it")


def met_the_fence(log: Path) -> bool:
    return any(f in log.read_text() for f in FENCE_LINES)


def assert_fenced_and_went_on(code: int, text: str) -> None:
    """The zombie met the fence (its one line: not a commit Kafka refused, not an eviction noticed
    in time, both of which would pass without the fence), went on, and exited 0 when stopped."""
    assert code == 0, text[-3000:]
    assert "Traceback" not in text and "panstream: error: " not in text, text[-3000:]
    assert any(f in line for line in text.splitlines() for f in FENCE_LINES), text[-3000:]


def pause_outside_a_save(proc: Any, state: Path) -> None:
    """Stop ``proc`` (SIGSTOP) at a moment it holds no state lock: a member paused inside a save
    keeps its ``flock`` on that file, and the new owner's claim of it is refused ("in use by
    another panstream process", exit 1) before the fence is ever reached, which is not what
    these tests play. A lock's sidecar file exists while it is held (and a moment before and
    after), so a pause that finds one (the member's, or the other member's) is undone and made
    again a little later."""
    for _ in range(200):
        proc.send_signal(signal.SIGSTOP)
        if not any(state.glob(f".*{LOCK_SUFFIX}")):
            return
        proc.send_signal(signal.SIGCONT)
        time.sleep(0.02)
    raise AssertionError("the member held a state lock at every try of its pause")


def evict_the_first(procs: list[Any], logs: list[Path], admin: Any, group: str, state: Path,
                    rest: Callable[[], Any]) -> Any:
    """Two routed members A and B (``procs``, ``logs``) hold 4 of 8 slices each and have
    checkpointed every slice; then A is paused (SIGSTOP, outside a save), ``rest()`` sends the
    rest of the stream, and the broker evicts A after its session: B takes every slice over.
    Returns what ``rest()`` returned."""
    wait_for(lambda: all("now holds 4 of 8" in log.read_text() for log in logs), 120,
             "both members holding slices", procs)
    wait_for(lambda: len(committed_offsets(admin, f"{group}-slices")) == 8, 120,
             "a checkpoint of every slice", procs)
    pause_outside_a_save(procs[0], state)                # the pause
    out = rest()
    wait_for(lambda: "now holds 8 of 8" in logs[1].read_text(), 120,  # A evicted (its
             "B holding every slice", procs[1:])         # session), B takes everything over
    return out


def wake_the_zombie_as_the_owner_dies(a: Any, b: Any, zombie_log: Path,
                                      took_over: Callable[[], bool], timeout: float) -> int:
    """The zombie A wakes (SIGCONT) as the owner B dies (``kill -9``); A meets the fence, goes on
    and rejoins, takes B's partitions over (``took_over``) and is stopped by SIGTERM (its final
    checkpoint): A's exit code."""
    a.send_signal(signal.SIGCONT)
    os.kill(b.pid, signal.SIGKILL)
    b.wait(timeout=10)
    wait_for(lambda: met_the_fence(zombie_log), timeout, "the zombie meeting the fence", [a])
    wait_for(took_over, timeout, "the zombie rejoining and taking the partitions over", [a])
    a.send_signal(signal.SIGTERM)
    return int(a.wait(timeout=timeout))


def stop_all(procs: list[Any]) -> None:
    """Whatever still runs (a stopped one woken first) is killed."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.kill()
            p.wait()


def fenced_then_drained(code: int, zombie_log: Path, argv: list[str], log: Path,
                        timeout: float) -> None:
    """The woken zombie met the fence and went on; then a fresh member (``argv``) drains whatever
    is left, and exits 0."""
    text = zombie_log.read_text()
    assert_fenced_and_went_on(code, text)
    all_exit_0([start(argv, log)], [log], timeout)
    print(f"zombie exit {code}: {[ln for ln in text.splitlines() if 'claimed' in ln][:2]}")


def test_a_zombie_woken_after_a_rebalance_loses_nothing(
        kafka_broker: Broker, admin: Any, producer: Any, tmp_path: Path) -> None:
    topic = _topic(admin, "zombie")
    clients, msgs = _messages(31, 6_000, 30_000)
    hw = send_round_robin(producer, topic, msgs[:20], 8, {})
    group, state = "g-zombie", tmp_path / "state"
    argv = _argv(kafka_broker, topic, group, state, idle="30")
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    # A on kafka-python (ZOMBIE_CLIENT), B on the default client: librdkafka would notice the
    # expired session on waking and drop A's slices unsaved, never attacking the fence
    procs = [start(argv + list(extra), log) for log, extra in zip(logs, (ZOMBIE_CLIENT, ()),
                                                                  strict=True)]
    a, b = procs
    try:
        hw = evict_the_first(procs, logs, admin, group, state,
                             lambda: send_round_robin(producer, topic, msgs[20:], 8, hw))
        wait_for(lambda: committed_offsets(admin, group) == hw, 120, "B routing everything",
                 [b])
        time.sleep(3.0)                                  # B's checkpoints cover the rest
        code = wake_the_zombie_as_the_owner_dies(
            a, b, logs[0], lambda: "now holds 8 of 8" in logs[0].read_text(), 180)
    finally:
        stop_all(procs)
    # A fresh member drains whatever is left (A's slices were replayed, not lost).
    fenced_then_drained(code, logs[0], _argv(kafka_broker, topic, group, state, idle=IDLE),
                        tmp_path / "c.log", 240)
    assert_one_table(kafka_broker, admin, group, topic, hw, clients, state)


def test_a_zombie_of_the_partition_layout_loses_nothing(
        kafka_broker: Broker, topic_factory: Callable[..., str], produce: Producer, admin: Any,
        tmp_path: Path) -> None:
    """The same pause on the per-partition layout: A and B split 4 partitions of a keyed topic;
    A is stopped once every partition is committed, B takes all four and checkpoints the second
    batch, A wakes and B is killed at once. A meets the fence, goes on and rejoins, takes the
    four partitions over and is stopped with SIGTERM; a fresh member drains; every cell of both batches reads 1 in the shards (at epsilon 30, up
    to 2 zeros: false-failure rate below 1e-16, see test_broker.py)."""
    topic = topic_factory(4)
    rng = np.random.default_rng(26)
    cells = rng.choice(1 << 16, 4000, replace=False)
    first, second = np.array_split(cells, 2)
    hw = produce(topic, ips(first), keys=ips(first))
    group, state = "g-zombie-part", tmp_path / "state"
    ports = [free_port(), free_port()]
    common = ("--state-dir", str(state), "--epsilon", "30")
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    # B waits out A's pause without messages; A, woken, stops soon if it is not fenced first
    procs = [start(consumer_argv(kafka_broker, topic, group, *common, "--metrics-port", str(p),
                                 "--idle-timeout", idle), log)
             for p, log, idle in zip(ports, logs, ("10", "60"), strict=True)]
    a, b = procs
    try:
        wait_for(lambda: all(metric(p, "panstream_kafka_assigned_partitions") == 2
                             for p in ports), 60, "a 2/2 split", procs)
        wait_for(lambda: committed_offsets(admin, group) == hw, 60, "the first batch committed",
                 procs)
        pause_outside_a_save(a, state)                   # the pause
        hw = produce(topic, ips(second), keys=ips(second))
        wait_for(lambda: metric(ports[1], "panstream_kafka_assigned_partitions") == 4, 60,
                 "B taking all four partitions", [b])
        wait_for(lambda: committed_offsets(admin, group) == hw, 60, "B committing everything",
                 [b])
        time.sleep(1.0)                                  # B's checkpoints go on (every 0.5 s)
        code = wake_the_zombie_as_the_owner_dies(
            a, b, logs[0],
            lambda: metric(ports[0], "panstream_kafka_assigned_partitions") == 4, 120)
    finally:
        stop_all(procs)
    fenced_then_drained(code, logs[0], consumer_argv(kafka_broker, topic, group, *common,
                                                      "--idle-timeout", "3"),
                        tmp_path / "c.log", 120)
    assert committed_offsets(admin, group) == hw
    assert_nothing_lost(DirectoryStore(state), topic, cells)
