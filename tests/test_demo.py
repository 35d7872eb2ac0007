"""The README's first command: `panstream demo` runs the main job on an embedded synthetic log."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

from panstream.cli.main import cli


def test_demo_estimate_matches_truth_within_its_interval() -> None:
    """The noiseless estimate lies within 5.3 standard errors of the truth (false failure < 1e-7)."""
    res = CliRunner().invoke(cli, ["demo", "--lines", "300000", "--distinct", "8000", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["true_distinct"] == 8000
    assert abs(out["estimated_distinct"] - 8000) < 5.3 * out["stderr_distinct"]
    assert out["epsilon_state"] <= out["epsilon_requested"] == 1.0
    # How often: the frequency release's "returning" covers the truth within 5.33 of its standard
    # errors (false failure < 1e-7) when no client's count aliases.
    f = out["frequency"]
    returning = f["release"]["stats"]["returning"]
    if f["true_aliased"] == 0:
        assert abs(returning["value"] - f["true_returning"]) <= 5.33 * returning["stderr"]
    assert f["true_once"] + f["true_returning"] == 8000


def test_demo_rejects_bad_universe_with_usage_error() -> None:
    res = CliRunner().invoke(cli, ["demo", "--universe", "range:100"])
    assert res.exit_code == 2 and "ipv4" in res.output
    res = CliRunner().invoke(cli, ["demo", "--universe", "ipv4:10.0.0.0/33"])
    assert res.exit_code == 2 and "Traceback" not in res.output


def test_python_dash_m_panstream_and_env_configuration() -> None:
    env = {"PANSTREAM_EPSILON": "0.5", "PANSTREAM_DEMO_LINES": "50000", "PANSTREAM_DEMO_DISTINCT": "1000"}
    proc = subprocess.run([sys.executable, "-m", "panstream", "demo", "--json"], capture_output=True,
                          text=True, env={**__import__("os").environ, **env}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["epsilon_requested"] == 0.5 and out["lines"] == 50000


def test_the_demo_prints_the_total_that_holds_for_what_it_keeps_and_releases() -> None:
    """Issue 21 §4: the demo keeps a density *and* a frequency table over one stream and releases
    three times (density, map, frequency at 0.5 each). One person is in both tables, so a dump of
    both is 1 + 1 = 2-DP and the pan-private total is 1 + 1 + 0.5 + 0.5 + 0.5 = 3.5; it used to
    print "pan-private total 1.5" and "2" and "a dump of it is epsilon_state-DP"."""
    args = ["demo", "--lines", "50000", "--distinct", "1000", "--audit-trials", "0"]
    text = CliRunner().invoke(cli, args).output
    assert re.findall(r"pan-private total\s+([\d.]+)", text) == ["3.5"], text
    assert "a dump of both is 2.000000-DP" in text and "epsilon_state-DP" not in text
    assert "telemetry 0 (nothing counted)" in text
    out = json.loads(CliRunner().invoke(cli, [*args, "--json"]).output)
    parts = (out["epsilon_state_density"], out["epsilon_state_frequency"],
             out["released_density"], out["released_frequency"])
    assert parts == pytest.approx((1.0, 1.0, 1.0, 0.5), abs=1e-6)
    assert out["epsilon_total"] == pytest.approx(sum(parts)) == pytest.approx(3.5, abs=1e-6)
    assert out["epsilon_dump"] == pytest.approx(2.0, abs=1e-6)
