"""`panstream audit` and `panstream rotate` from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import panstream as ps
from panstream import audit as A
from panstream.cli import cmd_audit
from panstream.cli.main import cli


def test_audit_prints_claimed_and_empirical_epsilon_and_exits_zero() -> None:
    # Exit 0 fails falsely with probability <= 5 x 1e-6 whatever the trials: the fewest (100) do.
    res = CliRunner().invoke(cli, ["audit", "-u", "range:8", "--trials", "100"])
    assert res.exit_code == 0, res.output
    assert "claimed epsilon_state = 1.000000" in res.output
    assert "one dump, target arrives once" in res.output and "No violation" in res.output


def test_audit_json_reports_every_scenario() -> None:
    res = CliRunner().invoke(cli, ["audit", "--universe", "range:8", "--trials", "100", "--json",
                                   "--calibration", "paper", "--epsilon", "0.5"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["violation"] is False and len(out["scenarios"]) == 6  # 4 single-arrival, 2 heavy-user
    assert out["claimed_epsilon_state"] == pytest.approx(ps.calibrate(0.5, "paper").epsilon_state)
    assert [s["covered"] for s in out["scenarios"]] == [True, True, True, False, True, True]


def test_audit_exits_3_on_a_violation(monkeypatch: pytest.MonkeyPatch) -> None:
    bad = A.AuditResult("a broken state", 1.0, 5.0, 1 - 1e-6, 100, (), True, "x")
    monkeypatch.setattr(cmd_audit, "audit_estimator", lambda *a, **k: [bad])
    res = CliRunner().invoke(cli, ["audit", "--trials", "100"])
    assert res.exit_code == 3 and "VIOLATION" in res.output


def test_audit_refuses_a_huge_universe_in_one_line() -> None:
    res = CliRunner().invoke(cli, ["audit", "-u", "ipv4:0.0.0.0/0"])
    assert res.exit_code == 2
    assert res.output.count("\n") == 1 and "use a small universe such as range:64" in res.output


def test_rotate_replaces_the_table_keeps_parameters_and_starts_a_fresh_ledger(tmp_path: Path) -> None:
    path = tmp_path / "s.pst"
    est = ps.DensityEstimator("range:65536", epsilon=0.5, budget=2.0)
    est.update_indices(np.arange(30000))
    est.ledger.charge(1.5, "laplace")
    est.save(path)
    res = CliRunner().invoke(cli, ["rotate", "--state", str(path), "-u", "range:65536"])
    assert res.exit_code == 0, res.output
    assert "1 release(s), epsilon 1.5 spent" in res.output
    new = ps.DensityEstimator.load(path, expect={"universe": "range:65536", "epsilon": 0.5})
    assert new.ledger.spent == 0 and new.ledger.budget == 2.0
    # fresh D0 table: 65536 fair coins agree with the old bits on Binomial(65536, 1/2) cells;
    # a band of 5.5 standard deviations (5.5 * 128) fails with probability < 4e-8
    assert abs(int((new.bits() == est.bits()).sum()) - 32768) < 5.5 * 128
    # One snapshot on disk; beside it only the ledger history (no table), which now records the
    # old epoch as rotated away, so putting the old file back would be refused for releases.
    assert sorted(p.name for p in tmp_path.iterdir()) == [".s.pst.panstream-ledger", "s.pst"]
    history = json.loads((tmp_path / ".s.pst.panstream-ledger").read_text())
    assert history["retired"] == [est.ledger.epoch] and history["epoch"] == new.ledger.epoch


def test_rotate_refuses_a_contradicting_universe(tmp_path: Path) -> None:
    path = tmp_path / "s.pst"
    ps.DensityEstimator("range:64").save(path)
    before = path.read_bytes()
    res = CliRunner().invoke(cli, ["rotate", "--state", str(path), "-u", "range:128"])
    # rotate does not resume anything: the message says what the file holds and how to rotate it.
    assert res.exit_code == 1 and "holds universe range:64, not range:128" in res.output
    assert "resume" not in res.output and "without -u (or with -u range:64)" in res.output
    assert path.read_bytes() == before
