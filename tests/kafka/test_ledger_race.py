"""One ledger for a group, across processes, against the real broker (issue 19).

The attack: several processes release from one state topic at the same instant. Before the group
ledger became a log, four releases of epsilon 1 from a budget of 1 all succeeded (each read the
ledger, charged its copy and wrote it back), and compaction, which keeps only the newest record of
a key, could lower the spent total. Now each release appends a reservation under a key of its own
and proceeds only if the log's replay admits it, so:

* never more than the budget is released, and the releases that proceeded are exactly the admitted
  reservations of the log;
* the spent total read by an observer during the race never goes down;
* compacting the topic (simulated on its real records: the newest record of each key, tombstones
  dropped, as Kafka's log cleaner does; Tansu does not compact) refunds nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _kafka_helpers import Broker, panstream_cmd
from fakes import MemoryLog

from panstream.estimators.density import DensityEstimator
from panstream.sources.kafka import state_client, topic_store
from panstream.state.keying import Keying
from panstream.state.stores import TopicStore, encode_shard, ensure_ledger

RACER = str(Path(__file__).resolve().parents[1] / "ledger_racer.py")
U = "range:1024"

#: The keying record a checking member's shards carry (issue 39): one partition, murmur2.
ONE = Keying("murmur2", 1)


def state_topic(broker: Broker, name: str, budget: float = 1.0) -> None:
    """A state topic as 'panstream kafka' leaves it: an opened ledger and one shard."""
    store = topic_store(name, state_client(broker.bootstrap))
    try:
        assert ensure_ledger(store, budget)
        store.save("ev/0", encode_shard(DensityEstimator(U), ONE))
    finally:
        store.log.close()  # type: ignore[attr-defined]


def spent_of(broker: Broker, name: str) -> tuple[float, list[tuple[bytes, bytes | None]]]:
    """The spent total every reader replays from the topic, and the topic's raw records."""
    store = topic_store(name, state_client(broker.bootstrap), create=False)
    try:
        records = list(store.log.read_all())
    finally:
        store.log.close()  # type: ignore[attr-defined]
    return replayed_spent(records), records


def replayed_spent(records: list[tuple[bytes, bytes | None]]) -> float:
    log = MemoryLog()
    for k, v in records:
        log.append(k, v)
    log.flush()
    ledger = json.loads(TopicStore(log).read_ledger() or b"null")
    return 0.0 if ledger is None else sum(e["epsilon"] for e in ledger["entries"])


class Observer:
    """Reads the spent total over and over while the race runs (its own Kafka clients)."""

    def __init__(self, broker: Broker, name: str) -> None:
        self.seen: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(broker, name))

    def _run(self, broker: Broker, name: str) -> None:
        while not self._stop.is_set():
            self.seen.append(spent_of(broker, name)[0])

    def __enter__(self) -> Observer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


def outcomes(procs: list[subprocess.Popen[bytes]]) -> list[dict[str, object]]:
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, stderr.decode()[-2000:]
        out.append(json.loads(stdout.decode().strip().splitlines()[-1]))
    return out


@pytest.mark.kafka
def test_six_processes_racing_never_overspend_and_compaction_refunds_nothing(
        kafka_broker: Broker) -> None:
    """Six processes (each connected first, then released at one agreed instant) ask for 0.3 each
    from a budget of 1: at most 3 fit. Exactly the admitted ones proceed."""
    name = f"race-topic-{time.time_ns()}"
    state_topic(kafka_broker, name)
    start = time.time() + 6.0  # imports and connections of 6 processes on 2 cores, then go
    with Observer(kafka_broker, name) as obs:
        procs = [subprocess.Popen([sys.executable, RACER, "topic", name, "0.3", str(start),
                                   kafka_broker.bootstrap],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for _ in range(6)]
        results = outcomes(procs)
    released = [r for r in results if r["outcome"] == "released"]
    assert [r["outcome"] for r in results if r not in released] == ["refused"] * (6 - len(released))
    assert len(released) == 3  # 3 x 0.3 fit into 1, the 4th does not: the log admits exactly 3
    spent, records = spent_of(kafka_broker, name)
    reservations = sum(b'"kind":"reserve"' in (v or b"") for _, v in records)
    print(f"{reservations} reservations appended by 6 racers")  # > 3: the replay refused some
    assert spent == pytest.approx(0.9) == sum(float(r["epsilon"]) for r in released)  # type: ignore[arg-type]
    assert obs.seen and all(b >= a for a, b in zip(obs.seen, obs.seen[1:], strict=False))
    assert obs.seen[-1] <= spent
    # Compaction keeps the newest record of each key: every ledger record has a key of its own.
    log = MemoryLog()
    for k, v in records:
        log.append(k, v)
    log.flush()
    log.compact()
    assert replayed_spent(log.records) == pytest.approx(spent)
    # Each prefix of the log (what a reader saw at any moment) spends no more than the whole.
    prefix = [replayed_spent(records[:n]) for n in range(len(records) + 1)]
    assert all(b >= a for a, b in zip(prefix, prefix[1:], strict=False)) and max(prefix) <= 1.0


@pytest.mark.kafka
def test_four_release_commands_at_once_from_a_budget_of_one(kafka_broker: Broker) -> None:
    """The issue's case through the command line: four 'panstream release --state-topic' of
    epsilon 1 started together from a budget of 1; one gets through, three are refused."""
    name = f"race-cli-{time.time_ns()}"
    state_topic(kafka_broker, name)
    procs = [subprocess.Popen(panstream_cmd("release", "--state-topic", name, "-b",
                                            kafka_broker.bootstrap, "--keyed", "--epsilon", "1",
                                            "--json"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(4)]
    codes = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        codes.append(p.returncode)
        if p.returncode == 0:
            assert json.loads(out)["budget_remaining"] == 0.0
        else:
            assert err.decode().startswith("panstream: error: release of epsilon 1 refused")
    assert sorted(codes) == [0, 1, 1, 1]
    assert spent_of(kafka_broker, name)[0] == 1.0
