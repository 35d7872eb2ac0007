"""One table, one ledger: every way to spend a table's budget twice, tried and refused.

Issue 10, section 1. Each test is an attack a reviewer ran against panstream 0.1 (which it let
through), now refused:

* releasing a Kafka shard file on its own, then letting the consumer's next checkpoint rewrite the
  shard with its in-memory ledger (refunding the charge) — repeated, the noise averages away;
* four threads releasing from one table at once, more than one fitting into a budget for one;
* a process saving its older copy of a state's ledger over the newer one on disk;
* putting an old copy of a state file (or of a group's ledger file) back.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from fakes import MemoryLog

import panstream as ps
from panstream import estimators
from panstream.cli.main import cli
from panstream.release.ledger import RolledBackStateError, ShardReleaseError
from panstream.state.checkpoint import Checkpointer, Shard
from panstream.state.keying import Keying
from panstream.state.stores import (
    LEDGER_FILE,
    DirectoryStore,
    TopicStore,
    encode_shard,
    ensure_ledger,
    release_state_dir,
)

U = "range:1024"


def group_dir(tmp_path: Path, shards: int = 2) -> Path:
    """A state directory as 'panstream kafka' leaves it: shard files and the group's ledger."""
    d = tmp_path / "state"
    store = DirectoryStore(d)
    ensure_ledger(store, 1.0)
    for i in range(shards):
        est = ps.DensityEstimator(U)
        est.update_indices(np.arange(i, 1024, 7))
        store.save(f"t/{i}", encode_shard(est, Keying("murmur2", shards)))  # a verified member's
    return d


# ---------------------------------------------------------------------- shards have no budget
def test_a_shard_file_is_refused_by_release_s_with_a_pointer_to_the_group(tmp_path: Path) -> None:
    d = group_dir(tmp_path)
    shard = d / "t@0.shard"
    before = shard.read_bytes()
    res = CliRunner().invoke(cli, ["release", "-s", str(shard), "--epsilon", "0.5"])
    assert res.exit_code == 1
    assert "one shard of a Kafka consumer group" in res.output and "--state-dir" in res.output
    assert res.output.count("\n") == 1  # one line, no traceback
    assert shard.read_bytes() == before  # nothing charged, nothing written


def test_a_shard_restored_on_its_own_has_no_budget_to_spend(tmp_path: Path) -> None:
    d = group_dir(tmp_path)
    est = estimators.load(d / "t@0.shard")
    assert est.ledger.shard and est.ledger.budget == 0
    with pytest.raises(ShardReleaseError, match="--state-dir"):
        est.release(0.1)
    with pytest.raises(ShardReleaseError):
        est.rotate().charge(0.1, "laplace")  # a rotated shard is still a shard
    with pytest.raises(ShardReleaseError):
        est.release(0.1)
    res = CliRunner().invoke(cli, ["inspect", "-s", str(d / "t@0.shard")])
    assert res.exit_code == 0 and "none of its own" in res.output


def test_a_consumer_checkpoint_cannot_refund_the_groups_charges(tmp_path: Path) -> None:
    """The old attack's second half: the consumer rewrote the shard with its own ledger. Shards
    now carry none, so the group's ledger is the only record, and checkpoints never touch it."""
    d = group_dir(tmp_path)
    rel, _ = release_state_dir(d, 0.4, "laplace", keyed=True)
    assert rel.budget_remaining == pytest.approx(0.6)
    running = [Shard(f"t/{i}", i, estimators.load(d / f"t@{i}.shard")) for i in range(2)]
    checked = Keying("murmur2", 2)  # the record a checking member's saves carry (issue 39)
    Checkpointer(DirectoryStore(d), lambda offs: None,
                 lambda est: encode_shard(est, checked)).checkpoint(running)  # the consumer saves
    rel, _ = release_state_dir(d, 0.4, "laplace", keyed=True)
    assert rel.budget_remaining == pytest.approx(0.2)  # the first charge still counts
    with pytest.raises(ps.BudgetExhaustedError):
        release_state_dir(d, 0.4, "laplace", keyed=True)


# ---------------------------------------------------------------------- atomic charges
def at_once(n: int, release: Callable[[], object]) -> list[str]:
    """``release`` called by ``n`` threads released at the same instant (a barrier): each
    outcome, ``released``, ``refused`` (budget spent) or ``in use`` (the state file's lock)."""
    start = threading.Barrier(n)
    outcome: list[str] = []

    def one() -> None:
        start.wait()
        try:
            release()
            outcome.append("released")
        except ps.StateError as exc:  # in use by the other release, or budget already spent
            outcome.append("in use" if "in use" in str(exc) else "refused")
        except ps.BudgetExhaustedError:
            outcome.append("refused")

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcome


def test_threads_releasing_at_once_never_overspend() -> None:
    """Four threads call release(1.0) on a budget of 1.0 at the same moment, 200 times over:
    exactly one release gets through every time (the old check-then-append let 19 of 200 trials
    through twice). Deterministic: the charge is one step under the ledger's lock."""
    for _ in range(200):
        est = ps.DensityEstimator("range:256", budget=1.0)
        outcome = at_once(4, lambda est=est: est.release(1.0))
        assert sorted(outcome) == ["refused", "refused", "refused", "released"]
        assert est.ledger.spent == 1.0


def test_two_releases_of_one_state_file_at_once_are_serialized(tmp_path: Path) -> None:
    """Across processes the state's file lock does the same: release_file holds it from load to
    save, so a second release sees the first one's charge or is refused while it runs."""
    path = tmp_path / "s.pst"
    ps.DensityEstimator(U, budget=1.0).save(path)
    outcome = at_once(2, lambda: estimators.release_file(path, 0.75))
    assert outcome.count("released") == 1
    assert ps.DensityEstimator.load(path).ledger.spent == 0.75


# ---------------------------------------------------------------------- never lower the disk ledger
def test_saving_an_older_copy_never_lowers_the_spent_budget_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "s.pst"
    ps.DensityEstimator(U, budget=1.0).save(path)
    a, b = ps.DensityEstimator.load(path), ps.DensityEstimator.load(path)
    a.release(0.5)
    a.save(path)  # a's charge is on disk
    b.update_indices(np.arange(10))
    b.save(path)  # b never saw it: its save unites the two copies instead of overwriting
    assert ps.DensityEstimator.load(path).ledger.spent == 0.5
    assert b.ledger.spent == 0.5  # and b's own copy now knows it too
    with pytest.raises(ps.BudgetExhaustedError):
        b.release(0.6)


# ---------------------------------------------------------------------- rollbacks are loud
def test_putting_an_old_state_file_back_is_detected_and_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.pst"
    ps.DensityEstimator(U, budget=1.0).save(path)
    estimators.release_file(path, 0.5)
    old = path.read_bytes()  # a backup, taken after the first release
    estimators.release_file(path, 0.5)  # budget now spent
    path.write_bytes(old)  # the attack: the backup is put back, 0.5 "left" again
    with pytest.raises(RolledBackStateError, match="lacks 1 of the 2 release"):
        estimators.release_file(path, 0.5)
    res = CliRunner().invoke(cli, ["release", "-s", str(path), "--epsilon", "0.5"])
    assert res.exit_code == 1 and "rolled back" in res.output and "panstream rotate" in res.output
    shown = CliRunner().invoke(cli, ["inspect", "-s", str(path)])
    assert "ROLLED BACK" in shown.output
    # Resuming it with ingest is refused before any input is read.
    res = CliRunner().invoke(cli, ["ingest", "-s", str(path)], input="1\n2\n")
    assert res.exit_code == 1 and "rolled back" in res.output
    assert path.read_bytes() == old


def test_rotation_recovers_and_the_pre_rotation_file_stays_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.pst"
    ps.DensityEstimator(U, budget=1.0).save(path)
    estimators.release_file(path, 1.0)
    spent_epoch = path.read_bytes()
    assert CliRunner().invoke(cli, ["rotate", "-s", str(path)]).exit_code == 0
    estimators.release_file(path, 0.25)  # a fresh epoch, a fresh budget
    path.write_bytes(spent_epoch)  # the old epoch (its table and budget) put back
    with pytest.raises(RolledBackStateError, match="rotated away"):
        estimators.release_file(path, 0.5)


def test_a_new_state_at_the_same_path_is_accepted(tmp_path: Path) -> None:
    """Deleting a state and starting a new one there is not a rollback: its epoch is new."""
    path = tmp_path / "s.pst"
    ps.DensityEstimator(U).save(path)
    estimators.release_file(path, 0.5)
    path.unlink()
    ps.DensityEstimator(U).save(path)
    assert estimators.release_file(path, 0.5).budget_remaining == 0.5


def test_putting_an_old_group_ledger_back_is_detected(tmp_path: Path) -> None:
    d = group_dir(tmp_path)
    release_state_dir(d, 0.25, "laplace", keyed=True)
    old = (d / LEDGER_FILE).read_bytes()
    release_state_dir(d, 0.5, "laplace", keyed=True)
    (d / LEDGER_FILE).write_bytes(old)
    with pytest.raises(RolledBackStateError, match="release ledger"):
        release_state_dir(d, 0.5, "laplace", keyed=True)
    assert Path(DirectoryStore(d).ledger_history().path).exists()


def test_an_older_ledger_record_appended_to_a_state_topic_does_not_refund(tmp_path: Path) -> None:
    """A state topic has no file history; instead every ledger record still in the log counts:
    the newest is united with the older records of its epoch."""
    log = MemoryLog()
    store = TopicStore(log)
    ensure_ledger(store, 1.0)
    store.save("t/0", encode_shard(ps.DensityEstimator(U), Keying("murmur2", 1)))
    from panstream.state.stores import release_store

    release_store(store, 0.25, keyed=True)
    old = json.loads(store.read_ledger() or b"")
    release_store(store, 0.5, keyed=True)
    store.write_ledger(json.dumps(old).encode())  # an old copy appended (or a racing release)
    store.refresh()
    rel, _ = release_store(store, 0.25, keyed=True)
    assert rel.budget_remaining == pytest.approx(0.0)  # 0.25 + 0.5 + 0.25: nothing refunded


def test_a_state_copied_elsewhere_is_the_documented_limit(tmp_path: Path) -> None:
    """What no file-local design can see (docs/threat-model.md, "one copy"): a copy at a new path
    has no history there, so the copy and the original each spend the rest of the budget. The test
    pins the limitation down so the docs stay true; the defence is operational (keep one copy)."""
    path = tmp_path / "s.pst"
    ps.DensityEstimator(U, budget=1.0).save(path)
    estimators.release_file(path, 0.5)
    copy = tmp_path / "copy.pst"
    shutil.copy(path, copy)
    assert estimators.release_file(copy, 0.5).budget_remaining == 0.0
    assert estimators.release_file(path, 0.5).budget_remaining == 0.0  # 1.5 spent on one table
