"""The frequency family on the command line: ingest from stdin, inspect, release, plan, audit.

Statistical checks compare a released figure with the truth within 5.33 of its standard errors
(normal tail 1e-7 each).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from click.testing import CliRunner

import panstream as ps
from panstream.cli.main import cli

Z = 5.33


def log_with_known_counts(seed: int = 3) -> tuple[str, dict[str, int]]:
    """Addresses of 10.0.0.0/16: 2,000 seen once, 1,000 twice, 500 five times (all < 8)."""
    rng = np.random.default_rng(seed)
    cells = rng.choice(1 << 16, 3500, replace=False)
    counts = np.repeat([1, 2, 5], [2000, 1000, 500])
    stream = rng.permutation(np.repeat(cells, counts))
    text = "".join(f"10.0.{c >> 8}.{c & 255}\n" for c in stream)
    return text, {"present": 3500, "once": 2000, "returning": 1500}


def test_ingest_inspect_release_round_trip_from_stdin(tmp_path: Path) -> None:
    state = tmp_path / "freq.pst"
    text, truth = log_with_known_counts()
    run = CliRunner().invoke(cli, ["ingest", "-u", "ipv4:10.0.0.0/16", "-s", str(state),
                                   "--estimator", "frequency", "--modulus", "8", "--epsilon", "2"],
                             input=text)
    assert run.exit_code == 0, run.output
    assert isinstance(ps.load(state), ps.FrequencyEstimator)

    shown = CliRunner().invoke(cli, ["inspect", "-s", str(state), "--json"])
    d = json.loads(shown.output)
    assert (d["estimator"], d["modulus"], d["budget_spent"]) == ("frequency", 8, 0)

    rel = CliRunner().invoke(cli, ["release", "-s", str(state), "--epsilon", "1", "--json"])
    assert rel.exit_code == 0, rel.output
    out = json.loads(rel.output)
    for name, want in truth.items():
        iv = out["stats"][name]
        assert abs(iv["value"] - want) <= Z * iv["stderr"], (name, iv)
    assert ps.load(state).ledger.spent == 1.0  # charged before printing

    human = CliRunner().invoke(cli, ["inspect", "-s", str(state)])
    assert "modulus = 8" in human.output and "spent 1" in human.output


def test_a_resumed_frequency_state_keeps_its_family_and_modulus(tmp_path: Path) -> None:
    state = tmp_path / "f.pst"
    ps.FrequencyEstimator("ipv4:10.0.0.0/24", modulus=8).save(state)
    wrong = CliRunner().invoke(cli, ["ingest", "-s", str(state), "--modulus", "16",
                                     "--estimator", "frequency"], input="10.0.0.1\n")
    assert wrong.exit_code == 1 and "modulus 8" in wrong.output and "--modulus 8" in wrong.output
    wrong = CliRunner().invoke(cli, ["ingest", "-s", str(state), "--estimator", "density"],
                               input="10.0.0.1\n")
    assert wrong.exit_code == 1 and "frequency estimator" in wrong.output
    ok = CliRunner().invoke(cli, ["ingest", "-s", str(state)], input="10.0.0.1\n")
    assert ok.exit_code == 0, ok.output  # no family given: the state's own


def test_options_of_the_other_family_are_refused(tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, ["ingest", "-u", "range:64", "--modulus", "8"], input="1\n")
    assert r.exit_code == 2 and "add --estimator frequency" in r.output
    r = CliRunner().invoke(cli, ["ingest", "-u", "range:64", "--estimator", "frequency",
                                 "--calibration", "tight"], input="1\n")
    assert r.exit_code == 2 and "--calibration concerns the density estimator" in r.output
    density = tmp_path / "d.pst"
    ps.DensityEstimator("range:64").save(density)
    r = CliRunner().invoke(cli, ["release", "-s", str(density), "--epsilon", "0.5", "--crop", "3"])
    assert r.exit_code == 2 and "nothing was released" in r.output
    assert ps.load(density).ledger.spent == 0


def test_plan_and_audit_know_the_frequency_family() -> None:
    plan = CliRunner().invoke(cli, ["plan", "-u", "ipv4:10.0.0.0/16", "--epsilon", "1",
                                    "--estimator", "frequency", "-n", "20000",
                                    "--release-epsilon", "0.5", "--json"])
    assert plan.exit_code == 0, plan.output
    fp = json.loads(plan.output)["frequency"]
    assert fp["modulus"] == 16 and 0 < fp["once"] < 20000
    audit = CliRunner().invoke(cli, ["audit", "-u", "range:16", "--estimator", "frequency",
                                     "--modulus", "4", "--trials", "100", "--json"])
    # no violation (false failure at most 5 x 1e-6 at any trial count; 100 is the fewest allowed)
    assert audit.exit_code == 0, audit.output
    a = json.loads(audit.output)
    assert a["estimator"] == "frequency" and a["modulus"] == 4
    assert "counters mod" not in a  # JSON names the family, the text says it
    assert [s["scenario"] for s in a["scenarios"]][1] == "one dump, target arrives 3 times"
