"""The group ledger as an append-only log (issue 19): races, compaction, migration, rollbacks.

A release appends its reservation and proceeds only if the log's replay admits it; every reader
replays the same log to the same answer. These tests race real processes on a state directory
(the state-topic race against the real broker is tests/kafka/test_ledger_race.py), show that the
log order alone decides even where no lock serializes the releases (two hosts on one state topic,
or a shared directory whose file system ignores ``flock``), that no compaction refunds, and that
the ledgers of older versions are read and migrated into the log.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from fakes import MemoryLog

import panstream as ps
from panstream.release.ledger import PrivacyLedger
from panstream.state.keying import Keying
from panstream.state.stores import (
    LEDGER_FILE,
    LEDGER_KEY,
    LEGACY_LEDGER_FILE,
    DirectoryStore,
    Store,
    TopicStore,
    encode_shard,
    ensure_ledger,
    group_ledger,
    release_state_dir,
    release_store,
)

U = "range:1024"
RACER = str(Path(__file__).resolve().parents[1] / "ledger_racer.py")

#: The keying record a checking member's shards carry (issue 39): one partition, murmur2.
ONE = Keying("murmur2", 1)


def group_dir(tmp_path: Path, budget: float = 1.0) -> Path:
    d = tmp_path / "state"
    store = DirectoryStore(d)
    ensure_ledger(store, budget)
    est = ps.DensityEstimator(U)
    est.update_indices(np.arange(0, 1024, 5))
    store.save("t/0", encode_shard(est, ONE))
    return d


def topic_group(budget: float = 1.0) -> MemoryLog:
    log = MemoryLog()
    store = TopicStore(log)
    ensure_ledger(store, budget)
    store.save("t/0", encode_shard(ps.DensityEstimator(U), ONE))
    return log


def spent(store: Store) -> float:
    return sum(e["epsilon"] for e in json.loads(store.read_ledger() or b"")["entries"])


# ---------------------------------------------------------------------- processes racing
def test_six_processes_racing_on_a_directory_never_overspend(tmp_path: Path) -> None:
    """Six processes release 0.3 each at one agreed instant from a budget of 1: three proceed,
    and the log's replay spends exactly what they released."""
    d = group_dir(tmp_path)
    start = time.time() + 4.0
    procs = [subprocess.Popen([sys.executable, RACER, "dir", str(d), "0.3", str(start)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(6)]
    seen = []
    while any(p.poll() is None for p in procs):  # an observer: the spent total never goes down
        seen.append(spent(DirectoryStore(d)))
        time.sleep(0.02)
    results = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err.decode()[-2000:]
        results.append(json.loads(out.decode().splitlines()[-1]))
    assert sorted(r["outcome"] for r in results) == ["refused"] * 3 + ["released"] * 3
    assert spent(DirectoryStore(d)) == pytest.approx(0.9)
    assert all(b >= a for a, b in zip(seen, seen[1:], strict=False))
    assert not list(d.glob(".*panstream-lock")) and not list(d.glob(".*panstream-tmp"))


# ---------------------------------------------------------------------- the log order decides
@pytest.mark.parametrize("kind", ["directory", "topic"])
def test_without_any_lock_the_log_order_admits_one_of_two(tmp_path: Path, kind: str) -> None:
    """Two releases that both read the ledger before either appended (two hosts, no common lock):
    both reservations reach the log, the replay admits the first and refuses the second, and the
    second release is refused before drawing any noise."""
    if kind == "directory":
        d = group_dir(tmp_path)
        a_store: Store = DirectoryStore(d)
        b_store: Store = DirectoryStore(d)
    else:
        log = topic_group()
        a_store, b_store = TopicStore(log), TopicStore(log)
    a, b = group_ledger(a_store), group_ledger(b_store)  # both see 0 of 1 spent
    a.charge(1.0, "laplace")
    with pytest.raises(ps.BudgetExhaustedError, match="reserved the group's budget"):
        b.charge(1.0, "laplace")
    assert spent(a_store) == spent(b_store) == 1.0
    records = ((d / LEDGER_FILE).read_bytes().split(b"\n") if kind == "directory"
               else [v or b"" for _, v in log.records])
    assert sum(b'"kind":"reserve"' in r for r in records) == 2  # both reached the log


def test_an_admitted_release_that_crashes_stays_spent(tmp_path: Path) -> None:
    d = group_dir(tmp_path)
    led = group_ledger(DirectoryStore(d))
    led.charge(0.75, "laplace")  # reserved and admitted; the process then dies before releasing
    with pytest.raises(ps.BudgetExhaustedError):
        release_state_dir(d, 0.5, "laplace", keyed=True)
    assert spent(DirectoryStore(d)) == 0.75


# ---------------------------------------------------------------------- compaction
def test_compacting_the_state_topic_refunds_nothing() -> None:
    """Kafka's log cleaner keeps the newest record of each key. The old design kept the ledger
    under one key, so a compaction could leave a ledger record that lacked a charge; now every
    ledger record has a key of its own and none ever gets a tombstone."""
    log = topic_group()
    for eps in (0.25, 0.25, 0.25):
        release_store(TopicStore(log), eps, keyed=True)
    TopicStore(log).save("t/0", encode_shard(ps.DensityEstimator(U), ONE))  # tombstones old chunks
    before = spent(TopicStore(log))
    log.compact()
    assert spent(TopicStore(log)) == before == 0.75
    release_store(TopicStore(log), 0.25, keyed=True)
    with pytest.raises(ps.BudgetExhaustedError):
        release_store(TopicStore(log), 0.25, keyed=True)
    log.compact()
    assert spent(TopicStore(log)) == 1.0


def test_a_torn_last_line_is_cut_off_and_never_counted(tmp_path: Path) -> None:
    """A crash in the middle of an append leaves a line without its newline: that release never
    got past its fsync, so it never proceeded; the next append cuts the torn line off."""
    d = group_dir(tmp_path)
    release_state_dir(d, 0.25, "laplace", keyed=True)
    with open(d / LEDGER_FILE, "ab") as f:
        f.write(b'PSLG1{"kind":"reserve","epoch":')
    assert spent(DirectoryStore(d)) == 0.25
    release_state_dir(d, 0.25, "laplace", keyed=True)
    assert spent(DirectoryStore(d)) == 0.5
    assert (d / LEDGER_FILE).read_bytes().count(b"\n") == 3  # opening + 2 reservations


# ---------------------------------------------------------------------- older versions
def test_an_old_directory_ledger_is_read_and_migrated_into_the_log(tmp_path: Path) -> None:
    d = tmp_path / "state"
    DirectoryStore(d).save("t/0", encode_shard(ps.DensityEstimator(U), ONE))
    old = PrivacyLedger(1.0)
    old.charge(0.5, "laplace")
    (d / LEGACY_LEDGER_FILE).write_text(json.dumps(old.to_dict()))  # as panstream 0.2 left it
    assert spent(DirectoryStore(d)) == 0.5
    rel, _ = release_state_dir(d, 0.25, "laplace", keyed=True)
    assert rel.budget_remaining == 0.25
    assert not (d / LEGACY_LEDGER_FILE).exists() and (d / LEDGER_FILE).exists()
    led = json.loads(DirectoryStore(d).read_ledger() or b"")
    assert led["epoch"] == old.epoch and [e["epsilon"] for e in led["entries"]] == [0.5, 0.25]


def test_an_old_topic_ledger_survives_compaction_once_migrated() -> None:
    """A state topic of panstream 0.2: charged ledgers under one key, the newest one lacking a
    charge (two releases raced). The union counts; the first new release migrates it into the log
    so a compaction that keeps only the newest old record refunds nothing."""
    log = MemoryLog()
    TopicStore(log).save("t/0", encode_shard(ps.DensityEstimator(U), ONE))
    a, b = PrivacyLedger(1.0), None
    a.charge(0.25, "laplace")
    b = PrivacyLedger(1.0, [], a.epoch)
    b.charge(0.25, "geometric")  # raced a: the newest record lacks a's charge
    for led in (a, b):
        log.append(LEDGER_KEY.encode(), json.dumps(led.to_dict()).encode())
    log.flush()
    assert spent(TopicStore(log)) == 0.5
    release_store(TopicStore(log), 0.25, keyed=True)
    log.compact()  # keeps only b's record of the old key
    assert spent(TopicStore(log)) == 0.75


def test_an_old_consumers_initial_ledger_is_read_as_the_opening() -> None:
    log = MemoryLog()
    TopicStore(log).save("t/0", encode_shard(ps.DensityEstimator(U), ONE))
    initial = PrivacyLedger(0.5)
    log.append(b"#release-ledger-initial", json.dumps(initial.to_dict()).encode())
    log.flush()
    assert not ensure_ledger(TopicStore(log), 1.0)  # a ledger exists: a new consumer leaves it
    rel, _ = release_store(TopicStore(log), 0.5, keyed=True)
    assert rel.budget_remaining == 0.0  # the old record's budget of 0.5, not a new 1.0
    assert json.loads(TopicStore(log).read_ledger() or b"")["epoch"] == initial.epoch


def test_a_store_reads_its_own_appends() -> None:
    log = MemoryLog()
    store = TopicStore(log)
    assert store.keys() == [] and store.read_ledger() is None
    assert ensure_ledger(store, 1.0)
    assert json.loads(store.read_ledger() or b"")["budget"] == 1.0  # the same store object
    store.save("t/0", encode_shard(ps.DensityEstimator(U), ONE))
    release_store(store, 0.25, keyed=True)
    assert spent(store) == 0.25
