"""plan_split: one total pan-private epsilon, split between the state and R releases.

The planner's promise, checked here: the split it returns never spends more than the total
(realized epsilons), no other split of the same total gives one release a smaller standard
deviation (up to the 3-digit rounding of the per-release epsilon), and the standard deviation it
reports is what releases made with that split show. The one statistical test states its
false-failure probability; nothing is retried.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

import panstream as ps
from panstream.calibration import calibrate
from panstream.cli.main import cli
from panstream.planning import _asked_for, release_error


@pytest.mark.parametrize(("total", "releases", "cells"), [(2.0, 1, 1 << 16), (2.0, 4, 1 << 16),
                                                          (0.5, 1, 1 << 12), (4.0, 10, 1 << 20)])
def test_the_best_split_spends_at_most_the_total_and_beats_every_other(total: float, releases: int,
                                                                        cells: int) -> None:
    sp = ps.plan_split(total, f"range:{cells}", releases=releases)
    b = sp.best
    assert b.releases == releases and b.budget == releases * b.epsilon_release
    assert b.epsilon_total == b.epsilon_state + b.budget <= total
    assert b.epsilon_state == calibrate(b.epsilon_state_asked).epsilon_state  # realized
    assert sp.naive.epsilon_release == total / (2 * releases)
    assert b.stderr_density < sp.naive.stderr_density
    # brute force over 2000 splits of the same total: none is better by more than the rounding
    best_other = math.inf
    for i in range(1, 2000):
        t = total * i / 2000
        cal = calibrate(t)
        s, r = release_error(cal, cells, (total - cal.epsilon_state) / releases)
        best_other = min(best_other, math.hypot(s, r))
    assert b.stderr_density <= best_other * 1.001


def test_the_reported_error_adds_the_state_and_the_release_noise() -> None:
    """rr: state sd 1/(2 sinh(eps_s/2) sqrt|X|), Laplace release sd sqrt(2)/(eps_out |X| (p - q))."""
    sp = ps.plan_split(2.0, "range:65536", releases=4)
    b, m = sp.best, 65536
    assert b.state_sd_density == pytest.approx(1 / (2 * math.sinh(b.epsilon_state / 2) * 256),
                                               rel=1e-6)
    assert b.release_sd_density == pytest.approx(
        math.sqrt(2) / (b.epsilon_release * m * math.tanh(b.epsilon_state / 2)), rel=1e-3)
    assert b.stderr_density == pytest.approx(math.hypot(b.state_sd_density, b.release_sd_density))
    assert b.stderr_distinct == pytest.approx(m * b.stderr_density)
    assert b.stderr_density < b.density_95 < 2.5 * b.stderr_density
    d = sp.to_dict()
    assert json.loads(json.dumps(d)) == d and d["improvement"] == sp.improvement > 1.5


def test_paper_is_planned_by_its_realized_epsilon() -> None:
    """paper realizes -ln(1 - eps/2): the split asks 2(1 - e^-target) so the realized total holds,
    which makes its (q, p) exactly tight's at the same realized epsilon."""
    sp = ps.plan_split(1.5, "range:4096", calibration="paper")
    assert sp.best.epsilon_total <= 1.5 and sp.naive.epsilon_total <= 1.5
    assert sp.best.epsilon_state_asked == pytest.approx(_asked_for(1.5 - sp.best.budget, "paper"))
    tight = ps.plan_split(1.5, "range:4096", calibration="tight")
    assert sp.best.stderr_density == pytest.approx(tight.best.stderr_density, rel=1e-6)


def test_a_release_made_with_the_split_has_the_planned_error() -> None:
    """400 independent states over range:4096 (1000 cells seen), each split from a total of 1.5
    for 1 release and released once (laplace). The sample variance of the 400 released densities,
    divided by the planned variance, is about chi-square(399)/399 if the plan is right, whose
    quantiles at 5e-7 each side are 0.691 and 1.385. The release noise is 12 % of the variance and
    Laplace (excess kurtosis 3), which adds 3 * 0.12**2 / 400 to the variance of the ratio, about
    1 % to its spread: the band widened by 2 %, [0.68, 1.40], fails with probability < 1e-6. A
    plan off by 20 % in sd (44 % in variance) fails it.
    """
    total, size, seen = 1.5, 4096, 1000
    sp = ps.plan_split(total, f"range:{size}", releases=1, density=seen / size)
    b = sp.best
    out = []
    for _ in range(400):
        est = ps.DensityEstimator(f"range:{size}", b.epsilon_state_asked, budget=b.budget)
        est.update_indices(np.arange(seen))
        out.append(est.release(b.epsilon_release).density)
    ratio = float(np.var(out, ddof=1)) / b.stderr_density**2
    assert 0.68 < ratio < 1.40, ratio


@pytest.mark.parametrize(("kw", "match"), [
    ({"releases": 0}, "releases"), ({"releases": 1.5}, "releases"), ({"density": 1.5}, "density"),
    ({"calibration": "loose"}, "unknown calibration"), ({"mechanism": "gauss"}, "mechanism"),
])
def test_bad_arguments_are_configuration_errors(kw: dict, match: str) -> None:
    with pytest.raises(ps.ConfigurationError, match=match):
        ps.plan_split(2.0, "range:1024", **kw)


# ---------------------------------------------------------------------- the command line
def _invoke(args: list[str], input: bytes | None = None) -> object:
    return CliRunner().invoke(cli, args, input=input)


def test_plan_total_epsilon_prints_the_split_and_the_half_half_error() -> None:
    r = _invoke(["plan", "-u", "ipv4:10.0.0.0/16", "--total-epsilon", "2", "--releases", "4"])
    assert r.exit_code == 0, r.output
    sp = ps.plan_split(2.0, "ipv4:10.0.0.0/16", releases=4)
    assert f"epsilon_state = {sp.best.epsilon_state:.6f}" in r.output
    assert f"4 x release epsilon {sp.best.epsilon_release:.6g}" in r.output
    assert "half/half" in r.output and f"{sp.improvement:.2f}x smaller" in r.output
    d = json.loads(_invoke(["plan", "-u", "ipv4:10.0.0.0/16", "--total-epsilon", "2", "--releases",
                            "4", "--json"]).stdout)
    assert d["split"]["best"]["epsilon_release"] == sp.best.epsilon_release


def test_ingest_total_epsilon_sets_the_state_epsilon_and_the_budget(tmp_path) -> None:
    state = str(tmp_path / "s.pst")
    args = ["ingest", "-u", "ipv4:10.0.0.0/16", "-s", state, "--total-epsilon", "2",
            "--releases", "4"]
    r = _invoke(args, input=b"10.0.0.1\n")
    assert r.exit_code == 0, r.output
    sp = ps.plan_split(2.0, "ipv4:10.0.0.0/16", releases=4)
    assert "split for 4 release(s)" in r.output
    est = ps.DensityEstimator.load(state)
    assert est.epsilon_state == sp.best.epsilon_state and est.ledger.budget == sp.best.budget
    assert est.epsilon_state + est.ledger.budget <= 2.0
    # the same command resumes it; another split of the total is refused, the state unchanged
    assert _invoke(args, input=b"10.0.0.2\n").exit_code == 0
    before = (tmp_path / "s.pst").read_bytes()
    r = _invoke([*args[:-1], "2"], input=b"10.0.0.3\n")
    assert r.exit_code == 1 and "resume with" in r.output
    assert (tmp_path / "s.pst").read_bytes() == before
    # four releases at the split's epsilon fit the budget; a fifth does not
    for _ in range(4):
        est.release(sp.best.epsilon_release)
    with pytest.raises(ps.BudgetExhaustedError):
        est.release(sp.best.epsilon_release)
