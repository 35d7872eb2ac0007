"""A frequency release puts exact noise of scale 2/epsilon on every histogram entry *before*
debiasing, charges the ledger once, keeps none of the noise, and its intervals cover the truth at
their stated level on a log whose counts stay below k.

Statistical checks use fixed trial counts and state their false-failure probability (<= 1e-6);
none retries.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import panstream as ps
from panstream.estimators.frequency import merge_partitioned
from panstream.release import frequency as rf
from panstream.release.incidence import IncidenceModel, plan_frequency, sum_half_width
from panstream.release.noise import NoiseLaw

ROOT = Path(__file__).parents[2]


def _log(n: int, counts: dict[int, int], seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """``counts[c]`` cells seen exactly c times, spread over the universe; (indices, per-cell)."""
    rng = np.random.default_rng(seed)  # synthetic log only
    per_cell = np.zeros(n, dtype=np.int64)
    cells = rng.permutation(n)
    start = 0
    for c, m in counts.items():
        per_cell[cells[start : start + m]] = c
        start += m
    idx = np.repeat(np.arange(n), per_cell)
    rng.shuffle(idx)
    return idx, per_cell


def estimator(n: int = 4096, k: int = 16, **kw: object) -> ps.FrequencyEstimator:
    """2700 of 4096 cells present (1500 once): the estimate of present stays > 13 sd from 0, so the
    ratios are always defined."""
    est = ps.FrequencyEstimator(f"range:{n}", modulus=k, **kw)  # type: ignore[arg-type]
    est.update_indices(_log(n, {1: 1500, 2: 800, 3: 400})[0])
    return est


# ---------------------------------------------------------------------- what a release is
def test_release_fields_realized_epsilons_and_one_ledger_charge() -> None:
    est = estimator(epsilon=1.0, budget=1.0)
    r1 = est.release(0.25)
    assert isinstance(r1, ps.FrequencyRelease) and r1.mechanism == "laplace"
    assert r1.epsilon == 0.25 and r1.sensitivity == 2 and r1.epsilon_state == est.epsilon_state
    assert est.ledger.releases == 1  # one charge for all k noisy counts
    r2 = est.release(0.5, "geometric", t=3)
    assert r2.epsilon_total == pytest.approx(est.epsilon_state + 0.75)
    assert r2.budget_remaining == pytest.approx(0.25) and r2.stats.t == 3
    assert r2.noise_granularity == 1.0 and r1.noise_granularity == 2.0**-10
    assert all(float(h).is_integer() and 0 <= h <= 4096 for h in r2.noisy_histogram)
    assert r2.cells == 4096 and r2.universe == "range:4096" and r2.alpha == str(est.alpha)
    d = r2.to_dict()
    assert json.loads(json.dumps(d, allow_nan=False)) == d
    assert r2.group_privacy(2) == 2 * r2.epsilon_total


def test_a_release_keeps_no_noise_and_no_exact_count() -> None:
    names = {f.name for f in dataclasses.fields(rf.FrequencyRelease)}
    assert not any("noise" in n and n not in ("noisy_histogram", "noise_granularity")
                   for n in names)
    assert not {"histogram", "counts", "true_histogram"} & names


def test_the_budget_is_checked_before_any_noise_is_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    est = estimator(budget=0.3)

    def boom(*_a: object, **_k: object) -> float:
        raise AssertionError("noise drawn")

    monkeypatch.setattr(rf, "noisy_count", boom)
    with pytest.raises(ps.BudgetExhaustedError, match="0.3 has 0.3 left"):
        est.release(0.5)
    with pytest.raises(ps.ConfigurationError, match="threshold"):
        est.release(0.1, t=0)
    assert est.ledger.releases == 0


def test_noise_goes_on_the_histogram_before_debiasing() -> None:
    est = estimator(k=8, budget=2.0)
    for mech in ("laplace", "geometric"):
        r = est.release(0.5, mech)
        a = float(est.alpha)
        beta = (1 - a) / 8
        want = [(h - beta * 4096) / a for h in r.noisy_histogram]
        assert [iv.value for iv in r.stats.incidence] == pytest.approx(want, rel=1e-12)
        assert r.stats.present.value == pytest.approx(4096 - want[0])
        again = r.model()
        assert again.cropped_mean(r.stats.t).value == pytest.approx(r.stats.cropped_mean.value)


def test_the_noise_on_each_count_is_laplace_of_scale_two_over_epsilon() -> None:
    """600 laplace releases at epsilon 0.5 of one fixed table (budget raised for the experiment):
    9,600 noise draws. Scale: the fraction with |noise| > 4 = 2/epsilon is e^-1 for scale 2/eps
    (exactly, up to the 2**-10 lattice: computed from the law) and e^-2 for the wrong scale 1/eps;
    exact two-sided binomial test at 5e-7. Mean: |mean| < 5.3 sd of the mean (a sum of 16,000
    i.i.d. Laplace variables is normal to within 1e-9 here), 1.2e-7. Total below 1e-6."""
    est = estimator(k=16, budget=1e9)
    h = est.histogram().astype(float)
    noise = np.concatenate([np.array(est.release(0.5).noisy_histogram) - h for _ in range(600)])
    law = NoiseLaw.for_mechanism("laplace", Fraction(1, 4))  # the per-count law: epsilon / 2
    g = float(law.granularity)
    p_far = 2 * (1 - law.cdf(int(math.floor(4 / g))))
    assert p_far == pytest.approx(math.exp(-1), rel=1e-3)
    far = int(np.sum(np.abs(noise) > 4))
    assert stats.binomtest(far, noise.size, p_far).pvalue > 5e-7
    assert abs(noise.mean()) < 5.3 * math.sqrt(law.variance / noise.size)


# ---------------------------------------------------------------------- coverage
# Each check below: covers ~ Bin(TRIALS, c) with c the interval's true coverage. If every c lies in
# [0.94, 0.96] (nominal 0.95; the intervals are approximations), a check fails with probability at
# most 1e-6 / CHECKS on each side, so the whole test at most 1e-6.
TRIALS = 1000
CHECKS = 2 * 14


def _coverage_bounds() -> tuple[int, int]:
    tail = 1e-6 / (2 * CHECKS)
    lo = int(stats.binom.ppf(tail, TRIALS, 0.94))
    hi = int(stats.binom.isf(tail, TRIALS, 0.96))
    return lo, hi


@pytest.mark.slow
@pytest.mark.parametrize("mechanism", ["laplace", "geometric"])
def test_released_intervals_cover_the_truth_at_their_stated_level(mechanism: str) -> None:
    """1024 cells modulo 8, state epsilon 2, output epsilon 0.5: counter noise and release noise
    are of the same size (sd about 23 and 20 counts on each N_hat_j). 400 clients seen 1..6 times
    (all below k). Checked: N_hat_0..N_hat_7, present, once, fraction once, returning, the
    4-cropped mean and the fraction seen >= 4 times (14 intervals, 1000 fresh tables each)."""
    n, k = 1024, 8
    idx, per_cell = _log(n, {1: 160, 2: 100, 3: 60, 4: 40, 5: 25, 6: 15})
    truth_n = np.bincount(per_cell % k, minlength=k)
    present = int((per_cell > 0).sum())
    truths = {
        "present": present,
        "once": int(truth_n[1]),
        "fraction_once": truth_n[1] / present,
        "returning": int((per_cell >= 2).sum()),
        "cropped_mean": float(np.minimum(per_cell[per_cell > 0], 4).mean()),
        "heavy": float((per_cell >= 4).sum() / present),
    }
    covers = dict.fromkeys([*truths, *(f"N_{j}" for j in range(k))], 0)
    for _ in range(TRIALS):
        est = ps.FrequencyEstimator(ps.Universe.range(n), epsilon=2.0, modulus=k, budget=1.0)
        est.update_indices(idx.copy())
        s = est.release(0.5, mechanism, t=4).stats
        for name, truth in truths.items():
            iv = getattr(s, name)
            covers[name] += iv.low <= truth <= iv.high
        for j in range(k):
            covers[f"N_{j}"] += s.incidence[j].low <= truth_n[j] <= s.incidence[j].high
    lo, hi = _coverage_bounds()
    assert lo >= 890 and hi <= 995  # i.e. coverage measured within [0.89, 0.995]
    bad = {name: c for name, c in covers.items() if not lo <= c <= hi}
    assert not bad, (bad, lo, hi)


def test_the_quantile_of_normal_plus_laplaces_matches_simulation() -> None:
    """sum_half_width against 400,000 simulated sums (synthetic NumPy draws; the simulation's own
    error on a 95 % quantile is about 0.3 %, so a 2 % tolerance is over 6 of its sd)."""
    rng = np.random.default_rng(11)
    m = 400_000
    for sigma, scales in [(0.0, [2.0, 2.0]), (1.0, [3.0, 1.0, 0.5]), (0.0, [1.0] * 8),
                          (5.0, [1.0, 1.0]), (0.0, [4.0, 0.01])]:
        s = rng.normal(0.0, sigma, m) if sigma else np.zeros(m)
        for b in scales:
            s += rng.laplace(0.0, b, m)
        want = float(np.quantile(np.abs(s), 0.95))
        assert sum_half_width(sigma, scales, 0.95) == pytest.approx(want, rel=0.02)
    assert sum_half_width(0.0, [1.0], 0.95) == pytest.approx(math.log(20), rel=1e-6)
    assert sum_half_width(2.0, [], 0.95) == pytest.approx(1.959964 * 2, rel=1e-6)


def test_undefined_ratios_are_nan_and_null_in_json() -> None:
    m = IncidenceModel((64.0, 0.0, 0.0, 0.0), 64, 4, Fraction(1, 2))
    assert m.present().value <= 0.5
    assert math.isnan(m.fraction_once().value)
    assert m.fraction_once().to_dict() == {"value": None, "stderr": None, "low": None, "high": None}


# ---------------------------------------------------------------------- the human summary
def test_the_human_summary_names_every_statistic_and_the_aliasing() -> None:
    est = estimator(k=16)
    text = rf.format_frequency_release(est.release(0.5, t=3))
    for needle in ("present (seen >= 1)", "seen exactly once", "returning (seen >= 2)",
                   "fraction seen once", "mean count cropped at 3", "fraction seen >= 3",
                   "a count of 16 or more is seen modulo 16", "pan-private epsilon_total",
                   "0.5 of 1 spent"):
        assert needle in text, needle


# ---------------------------------------------------------------------- keyed consumer groups
def test_summed_keyed_shards_estimate_the_groups_frequencies() -> None:
    """Three shards over one universe, each cell's arrivals in one shard (keyed). The sum's N_hat_1
    is within 5.5 reported standard errors of the truth (normal sum of 3 x 4096 independent
    counters: false failure 4e-8), and a release needs the group's ledger."""
    n, k = 4096, 16
    idx, per_cell = _log(n, {1: 900, 2: 400, 3: 200})
    owner = np.arange(n) % 3
    shards = []
    for part in range(3):
        est = ps.FrequencyEstimator(ps.Universe.range(n), epsilon=1.0, modulus=k)
        est.update_indices(idx[owner[idx] == part].copy())
        shards.append(est)
    merged = rf.sum_histograms(shards)
    assert merged.size == 3 * n and int(merged.histogram().sum()) == 3 * n
    once = IncidenceModel(tuple(map(float, merged.histogram())), merged.size, k,
                          merged.alpha).count(1)
    assert abs(once.value - 900) < 5.5 * once.stderr
    with pytest.raises(ps.StateError, match="shard"):
        merged.release(0.5)
    merged.ledger = ps.PrivacyLedger(1.0)
    r = merged.release(0.5)
    assert r.cells == 3 * n and merged.ledger.releases == 1
    other = ps.FrequencyEstimator(ps.Universe.range(n), epsilon=1.0, modulus=8)
    with pytest.raises(ps.StateError, match="disagree"):
        rf.sum_histograms([shards[0], other])
    with pytest.raises(ps.StateError, match="no shard"):
        rf.sum_histograms([])


def test_the_partitioned_merge_takes_each_cell_from_its_owner() -> None:
    n, k = 1000, 16
    owner = np.arange(n) % 4  # partition 3 was never consumed
    shards = {p: ps.FrequencyEstimator(ps.Universe.range(n), modulus=k) for p in range(3)}
    for p, est in shards.items():
        est.update_indices(np.flatnonzero(owner == p).repeat(2))
    merged = merge_partitioned(shards, owner)
    c = merged.counters()
    for p, est in shards.items():
        cells = owner == p
        assert c[cells].tolist() == est.counters()[cells].tolist()
    assert merged.ledger.shard and merged.modulus == k and merged.alpha == shards[0].alpha
    with pytest.raises(ps.StateError, match="owner map"):
        merge_partitioned(shards, owner[:10])


# ---------------------------------------------------------------------- planning
def test_the_plan_bounds_the_measured_error_of_once() -> None:
    """The planner's 95 % half-width of N_hat_1 is a worst case over frequency profiles: at least
    1.96 times the model's exact standard error for this log."""
    from panstream.calibration import calibrate_frequency
    from panstream.release.incidence import incidence_covariance

    n, k = 1 << 12, 16
    cal = calibrate_frequency(1.0, k)
    _, per_cell = _log(n, {1: 500, 2: 200, 3: 100})
    truth = np.bincount(per_cell % k, minlength=k).astype(float)
    sd = math.sqrt(incidence_covariance(truth, n, cal.alpha)[1, 1])
    plan = plan_frequency(n, 1.0, k, 800, alpha=cal.alpha, epsilon_state=cal.epsilon_state)
    assert 1.96 * sd <= plan.once <= 1.3 * 1.96 * sd
    assert plan.crop == 4 and plan.to_dict()["alpha"] == str(cal.alpha)
    noisy = plan_frequency(n, 1.0, k, 800, alpha=cal.alpha, epsilon_state=cal.epsilon_state,
                           release_epsilon=0.1)
    assert noisy.once > plan.once and noisy.cropped_mean > plan.cropped_mean


# ---------------------------------------------------------------------- layering
@pytest.mark.parametrize("module", ["frequency.py", "incidence.py"])
def test_release_modules_import_no_estimator(module: str) -> None:
    tree = ast.parse((ROOT / "panstream" / "release" / module).read_text())
    names = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    names += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in names if m.startswith("panstream.estimators")]
