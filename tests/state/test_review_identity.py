"""File identity, not path (issue 21, section 3): every alias of a state is the same state.

Locks, ledger histories and temporary files were named after the path *string* given, and a group
directory or a Python session could start a new ledger over tables that had already spent their
budget. Each test below is an attack a reviewer ran against the code before this fix (each failed
there: it released 2 from a budget of 1, or left two snapshots of one epoch on disk) and is now
refused, with one line saying what to do:

* a symlinked state path: a checkpoint replaced the link with a regular file and left the older
  snapshot at the link's target;
* a symlink alias got round the ingest lock and the rollback history;
* a hard link (a second name of the same file) did the same;
* ``release --new-ledger`` on a group directory after its ledger was deleted;
* ``save()`` of a ledger with a new epoch label over the same table.

What copies still do is pinned down in tests/state/test_review_one_ledger.py
(``test_a_state_copied_elsewhere_is_the_documented_limit``) and docs/threat-model.md.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import panstream as ps
from panstream import estimators
from panstream.cli.main import cli
from panstream.release.ledger import PrivacyLedger, RolledBackStateError, new_label
from panstream.state.files import state_lock
from panstream.state.stores import LEDGER_FILE, DirectoryStore, encode_shard, ensure_ledger

U = "range:1024"


def spent_state(tmp_path: Path) -> tuple[Path, bytes]:
    """A state whose budget of 1 is spent, and a backup of it taken before the release."""
    real = tmp_path / "real.pst"
    ps.DensityEstimator(U, budget=1.0).save(real)
    backup = real.read_bytes()
    estimators.release_file(real, 1.0)
    return real, backup


# ---------------------------------------------------------------------- symbolic links
def test_a_save_through_a_symlink_writes_the_target_and_keeps_one_snapshot(tmp_path: Path) -> None:
    real = tmp_path / "real.pst"
    est = ps.DensityEstimator(U)
    est.save(real)
    link = tmp_path / "link.pst"
    link.symlink_to(real)
    est = ps.DensityEstimator.load(link)
    est.update_indices(np.arange(0, 1024, 3))
    est.save(link)  # a checkpoint through the link
    assert link.is_symlink()  # not replaced by a second, regular file
    snapshots = [p for p in tmp_path.iterdir() if p.is_file() and not p.is_symlink()]
    assert snapshots == [real]  # one snapshot on disk, the newest
    assert (ps.DensityEstimator.load(real).bits() == est.bits()).all()


def test_a_symlink_alias_shares_the_lock_of_its_target(tmp_path: Path) -> None:
    real = tmp_path / "real.pst"
    ps.DensityEstimator(U).save(real)
    link = tmp_path / "alias.pst"
    link.symlink_to(real)
    with state_lock(real, "ingest"):  # a running ingest of the real path
        res = CliRunner().invoke(cli, ["release", "-s", str(link), "--epsilon", "0.5"])
    assert res.exit_code == 1 and "in use by another panstream process" in res.output
    assert res.output.count("\n") == 1


def test_a_symlink_alias_cannot_release_a_rolled_back_state_again(tmp_path: Path) -> None:
    """The old attack: put the backup back and release through an alias that had no history."""
    real, backup = spent_state(tmp_path)
    real.write_bytes(backup)  # the backup put back: 1.0 "left" again
    link = tmp_path / "alias.pst"
    link.symlink_to(real)
    with pytest.raises(RolledBackStateError, match="lacks 1 of the 1 release"):
        estimators.release_file(link, 1.0)
    res = CliRunner().invoke(cli, ["release", "-s", str(link), "--epsilon", "1"])
    assert res.exit_code == 1 and "rolled back" in res.output


# ---------------------------------------------------------------------- hard links
def test_a_hard_link_is_refused_with_what_to_do(tmp_path: Path) -> None:
    """A second name of the state file: its own lock and history under the old code (2 from 1
    after a rollback through it); now refused while the file has two names."""
    real, backup = spent_state(tmp_path)
    real.write_bytes(backup)
    other = tmp_path / "other.pst"
    os.link(real, other)
    res = CliRunner().invoke(cli, ["release", "-s", str(other), "--epsilon", "1"])
    assert res.exit_code == 1 and "hard links" in res.output and res.output.count("\n") == 1
    with pytest.raises(ps.StateError, match="hard links"):
        ps.DensityEstimator.load(other).save(other)


# ---------------------------------------------------------------------- a new ledger, same tables
def test_new_ledger_after_deleting_a_group_ledger_with_history_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "state"
    store = DirectoryStore(d)
    ensure_ledger(store, 1.0)
    store.save("t/0", encode_shard(ps.DensityEstimator(U)))
    args = ["release", "--state-dir", str(d), "--keyed", "--merge", "sum", "--epsilon", "1"]
    assert CliRunner().invoke(cli, args).exit_code == 0  # the budget of 1 is spent
    (d / LEDGER_FILE).unlink()  # the attack: delete the ledger, start a new one
    res = CliRunner().invoke(cli, [*args, "--new-ledger"])
    assert res.exit_code == 1 and "--new-ledger refused" in res.output
    assert res.output.count("\n") == 1
    # Nor does a ledger of an epoch the history never saw (a consumer restarted on the directory
    # after the shards were removed and put back, say).
    (d / LEDGER_FILE).unlink(missing_ok=True)
    store.create_ledger(b'{"budget": 1.0, "entries": [], "epoch": "0123456789abcdef"}')
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 1 and "records releases of epoch" in res.output


def test_save_refuses_a_new_epoch_label_over_the_same_table(tmp_path: Path) -> None:
    real, _ = spent_state(tmp_path)
    est = ps.DensityEstimator.load(real)
    with pytest.raises(ps.StateError, match="rotate"):
        est.ledger = PrivacyLedger(1.0)  # a fresh budget over the spent table
    est.ledger.epoch = new_label()  # the same, by relabelling the ledger in place
    est.ledger.entries.clear()
    with pytest.raises(ps.StateError, match="rotate"):
        est.save(real)
    with pytest.raises(ps.StateError, match="rotate"):
        est.release(1.0)
    with pytest.raises(ps.BudgetExhaustedError):
        estimators.release_file(real, 1.0)  # the file still holds the spent epoch


def test_rotate_is_the_way_to_a_fresh_budget(tmp_path: Path) -> None:
    real, _ = spent_state(tmp_path)
    est = ps.DensityEstimator.load(real)
    old = est.rotate()
    assert est.ledger.epoch != old.epoch and est.ledger.spent == 0
    est.save(real)
    assert estimators.release_file(real, 1.0).budget_remaining == 0.0


def test_a_symlinked_group_ledger_is_appended_through_the_link(tmp_path: Path) -> None:
    d = tmp_path / "state"
    store = DirectoryStore(d)
    ensure_ledger(store, 1.0)
    store.save("t/0", encode_shard(ps.DensityEstimator(U)))
    elsewhere = tmp_path / "ledger.log"
    (d / LEDGER_FILE).rename(elsewhere)
    (d / LEDGER_FILE).symlink_to(elsewhere)
    args = ["release", "--state-dir", str(d), "--keyed", "--merge", "sum", "--epsilon", "1"]
    assert CliRunner().invoke(cli, args).exit_code == 0
    assert (d / LEDGER_FILE).is_symlink() and b'"kind":"reserve"' in elsewhere.read_bytes()
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 1 and "refused" in res.output
