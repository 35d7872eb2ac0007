"""``panstream release``: load a state, release, record the release in the state's ledger, save,
then print a human summary or one JSON object; user mistakes give one line and an exit code."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import panstream as ps
from panstream.cli.main import cli
from panstream.release.density import format_release


@pytest.fixture
def state(tmp_path: Path) -> Path:
    est = ps.DensityEstimator("ipv4:10.0.0.0/20", epsilon=1.0, budget=1.0)
    est.update_indices(np.arange(1500))
    path = tmp_path / "s.pst"
    est.save(path)
    return path


def run(*args: str, env: dict[str, str] | None = None) -> object:
    return CliRunner().invoke(cli, ["release", *args], env=env, catch_exceptions=False)


def test_format_release_is_a_readable_summary() -> None:
    est = ps.DensityEstimator("range:4096", budget=1.0)
    text = format_release(est.release(0.25, "geometric"))
    lines = text.splitlines()
    assert lines[0] == ("panstream release: geometric mechanism, epsilon 0.25 over range:4096 "
                        "(4,096 cells)")
    # An empty table: about 2.4 % of releases have the whole interval below 0, which the summary
    # says in words instead of an interval (measured: 36 of 1,500); both are the readable form.
    assert lines[1].lstrip().startswith("distinct")
    assert "95% CI [" in lines[1] or "indistinguishable from 0" in lines[1]
    assert "pan-private epsilon_total 1.25" in text  # 0.25 + realized state epsilon 0.9999999992
    assert "0.25 of 1 spent, 0.75 left" in text


def test_release_records_in_the_state_ledger_and_prints_json(state: Path) -> None:
    res = run("--state", str(state), "--epsilon", "0.25", "--mechanism", "geometric", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["epsilon"]["release"] == 0.25 and out["mechanism"] == "geometric"
    assert out["universe"] == "ipv4:10.0.0.0/20" and out["budget_remaining"] == 0.75
    led = ps.DensityEstimator.load(state).ledger
    assert [(e.epsilon, e.mechanism) for e in led.entries] == [(0.25, "geometric")]

    res = run("--state", str(state), "--epsilon", "0.5")  # human summary, laplace by default
    assert res.exit_code == 0, res.output
    assert res.output.startswith("panstream release: laplace mechanism, epsilon 0.5 over ipv4:")
    assert "0.75 of 1 spent, 0.25 left" in res.output
    assert ps.DensityEstimator.load(state).ledger.spent == 0.75


def test_exhausted_budget_is_one_line_and_leaves_the_state_alone(state: Path) -> None:
    before = state.read_bytes()
    res = CliRunner().invoke(cli, ["release", "--state", str(state), "--epsilon", "2"])
    assert res.exit_code == 1
    assert res.output.count("\n") == 1
    assert res.output.startswith("panstream: error: release of epsilon 2 refused")
    assert "1 left" in res.output
    assert state.read_bytes() == before


def test_environment_variables_and_help(state: Path) -> None:
    env = {"PANSTREAM_STATE": str(state), "PANSTREAM_RELEASE_EPSILON": "0.125",
           "PANSTREAM_MECHANISM": "geometric", "PANSTREAM_JSON": "1"}
    res = run(env=env)
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["epsilon"]["release"] == 0.125
    help_text = CliRunner().invoke(cli, ["release", "--help"]).output
    for var in ["PANSTREAM_STATE", "PANSTREAM_RELEASE_EPSILON", "PANSTREAM_MECHANISM",
                "PANSTREAM_JSON"]:
        assert var in help_text


def test_user_mistakes(tmp_path: Path, state: Path) -> None:
    missing = CliRunner().invoke(cli, ["release", "--state", str(tmp_path / "none.pst"),
                                       "--epsilon", "0.1"])
    assert missing.exit_code != 0 and "Traceback" not in missing.output
    assert missing.output.startswith("panstream: error:")
    bad_eps = CliRunner().invoke(cli, ["release", "--state", str(state), "--epsilon", "0"])
    assert bad_eps.exit_code == 2
    bad_mech = CliRunner().invoke(cli, ["release", "--state", str(state), "--epsilon", "0.1",
                                        "--mechanism", "gaussian"])
    assert bad_mech.exit_code == 2
