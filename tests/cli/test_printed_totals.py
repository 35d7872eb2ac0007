"""Every printed total is the deployment's, telemetry included (issue 21 §1).

`ingest` (its summary and --total-epsilon's split), `release`, `inspect` and `plan` each print a
pan-private total. By default nothing counts arrivals, so the telemetry adds 0 and each total says
so; `release`, `inspect` and `plan` cannot know how the stream was read, so they also say what the
counting opt-ins would add.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from panstream.cli.main import cli

pytestmark = pytest.mark.usefixtures("clean_env")
U = "ipv4:10.0.0.0/24"
DATA = b"".join(b"10.0.0.%d\n" % i for i in range(100))


def run(args: list[str], data: bytes | None = None):  # type: ignore[no-untyped-def]
    r = CliRunner().invoke(cli, args, input=data, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r


def test_each_printed_total_covers_the_telemetry(tmp_path: Path) -> None:
    state = str(tmp_path / "s.pst")
    r = run(["ingest", "-u", U, "-s", state, "--total-epsilon", "2"], DATA)
    assert "telemetry 0 (nothing counted): 2.000000 per person in all" in r.stderr
    assert "pan-private total" in r.stderr and "+ telemetry 0 (nothing counted)" in r.stderr
    rel = run(["release", "-s", state, "--epsilon", "0.1"]).output
    assert "pan-private epsilon_total" in rel and "+ telemetry 0 (nothing counted by default" in rel
    ins = run(["inspect", "-s", state]).output
    assert "+ telemetry 0 (nothing counted by default" in ins and "once the budget is spent" in ins
    j = json.loads(run(["inspect", "-s", state, "--json"]).output)
    assert j["telemetry"].startswith("nothing counted") and j["epsilon_total_at_budget"] == \
        pytest.approx(2.0, abs=1e-6)
    plan = run(["plan", "-u", U, "--total-epsilon", "2"]).output
    assert "the total is per person + telemetry 0" in plan
    assert "telemetry 0" in run(["plan", "-u", U, "--epsilon", "1"]).output


def test_a_counting_opt_in_says_the_total_does_not_cover_it(tmp_path: Path) -> None:
    r = run(["ingest", "-u", U, "--total-epsilon", "2", "--telemetry-epsilon", "0.1"], DATA)
    assert "WARNING: the counts you opted into are not in this total" in r.stderr
    assert "k x 0.1 for a person with k arrivals" in r.stderr
    assert "no per-person total while counts are on" in r.stderr
    r = run(["ingest", "-u", U, "--exact-counts"], DATA)
    assert "exact counts (infinity" in r.stderr
