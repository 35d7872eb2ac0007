"""A release puts exact noise on the count of ones *before* debiasing, reports realized epsilons and
an interval that covers the truth, and keeps nothing of the noise.

Statistical checks use fixed trial counts; each states its false-failure probability (<= 1e-6,
normal approximation of a mean of i.i.d. terms where said); none retries.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics

import numpy as np
import pytest
from scipy import stats

import panstream as ps
from panstream.errors import ConfigurationError
from panstream.estimators.density import distinct_from_density
from panstream.release.density import Release, noise_quantile
from panstream.release.noise import NoiseLaw


def estimator(size: int = 4096, arrivals: int = 1000, **kw: object) -> ps.DensityEstimator:
    est = ps.DensityEstimator(f"range:{size}", **kw)  # type: ignore[arg-type]
    est.update_indices(np.arange(arrivals))
    return est


def test_release_fields_and_realized_epsilons() -> None:
    est = estimator(epsilon=1.0, budget=1.0)
    r1 = est.release(0.25)
    assert isinstance(r1, ps.Release) and r1.mechanism == "laplace"
    assert r1.epsilon == 0.25 and r1.epsilon_state == est.epsilon_state
    assert r1.epsilon_total == pytest.approx(est.epsilon_state + 0.25)
    r2 = est.release(0.5, mechanism="geometric")
    assert r2.epsilon_total == pytest.approx(est.epsilon_state + 0.75)  # all outputs so far
    assert r2.budget == 1.0 and r2.budget_remaining == pytest.approx(0.25)
    assert r2.noise_granularity == 1.0 and r1.noise_granularity == 2.0**-10
    assert r2.density_low < r2.density < r2.density_high
    assert r2.distinct_low < r2.distinct < r2.distinct_high
    assert r2.universe == "range:4096" and r2.size == 4096
    d = r2.to_dict()
    assert json.loads(json.dumps(d)) == d


def test_release_keeps_no_noise() -> None:
    names = {f.name for f in dataclasses.fields(Release)}
    assert not any("noise" in n and n != "noise_granularity" for n in names)
    assert not {"ones", "theta", "true_density", "count"} & names
    est = estimator()
    r = est.release(0.5)
    d = r.to_dict()  # the common JSON shape (docs/schema) adds only names for the same fields
    common = {"family", "statistic", "estimate", "low", "high", "stderr", "noise_dominated",
              "extras"}
    assert set(d) == names | common and set(d["extras"]) <= names
    assert d["noise_dominated"] in (True, False)  # a flag about the interval, not the noise


def test_noise_goes_on_the_count_before_debiasing() -> None:
    est = estimator(budget=1.0)
    p, q = float(est.p), float(est.q)
    assert q != 0.5  # the default (rr) D0 is not a fair coin: debiasing must use q
    for mech in ("laplace", "geometric"):
        r = est.release(0.5, mech)
        assert r.density == ((r.noisy_ones / r.size) - q) / (p - q)
        assert r.distinct == distinct_from_density(r.density, r.size, hashed=False)


def test_noisy_density_is_unbiased_with_noise_scale_one_over_eps_size_on_theta() -> None:
    """4000 laplace releases of one fixed table at eps = 0.5 (budget raised for the experiment).

    Mean: |mean error| <= 5.5 sd / sqrt(n) fails with probability 4.1e-8 (computed for a sum of 4000
    Laplace variables by FFT; the normal tail says 3.8e-8). Scale: the mean of the 4000 squared
    noises within 20 % of 2/eps^2. A squared Laplace(b) is b^2 E^2 with E ~ Exp(1), a skewed law
    (upper tail heavier than normal), so the computed false failure is 1.1e-7 (above) + 2e-10
    (below), not the ~1e-8 of a normal approximation. In all: 1.5e-7.
    """
    n, eps, size = 4000, 0.5, 4096
    est = estimator(size=size, budget=1e9)
    truth = est.estimate()
    rels = [est.release(eps, "laplace") for _ in range(n)]
    err = [r.density - truth.density for r in rels]
    noise_on_theta = [r.noisy_ones / size - truth.theta for r in rels]
    sd_theta = math.sqrt(2) / (eps * size)  # Lap(1/(eps |X|)) on theta
    sd_density = sd_theta / (float(est.p) - 0.5)
    assert abs(statistics.fmean(err)) <= 5.5 * sd_density / math.sqrt(n)
    ratio = statistics.pvariance(noise_on_theta, mu=0.0) / sd_theta**2
    assert 0.8 < ratio < 1.2, ratio


def test_geometric_release_is_an_integer_count_clamped_to_the_universe() -> None:
    est = ps.DensityEstimator("range:4", budget=1e9)
    vals = {est.release(0.2, "geometric").noisy_ones for _ in range(300)}
    assert vals <= {0.0, 1.0, 2.0, 3.0, 4.0}
    # Pr[never clamped to 0 or 4 in 300 draws] < 1e-6 (each draw lands at an end w.p. > 0.3).
    assert {0.0, 4.0} & vals


@pytest.mark.parametrize(("mech", "eps"), [("laplace", 0.02), ("geometric", 2.0)])
def test_interval_covers_the_truth_at_its_level(mech: str, eps: float) -> None:
    """1500 fresh tables, one release each, against the true density 1000/4096.

    The release noise dominates at eps = 0.02 (laplace tail), the binomial state noise at eps = 2.
    Coverage of a 95 % interval lies in [0.925, 0.975] except with probability ~1e-7 (binomial,
    5.1 standard errors each side), allowing for the plug-in approximation.
    """
    trials, size, arrivals = 1500, 4096, 1000
    hits = 0
    for _ in range(trials):
        est = estimator(size=size, arrivals=arrivals, epsilon=1.0, budget=eps)
        r = est.release(eps, mech)
        hits += r.density_low <= arrivals / size <= r.density_high
    lo, hi = stats.binom.ppf(5e-7, trials, 0.95), stats.binom.isf(5e-7, trials, 0.95)
    assert lo - 0.01 * trials <= hits <= hi + 0.01 * trials, hits / trials


def test_noise_quantile_matches_known_limits() -> None:
    lap = NoiseLaw.for_mechanism("laplace", 1.0)
    # Pure Laplace(1): 97.5 % quantile ln(20); pure normal: 1.96 sigma.
    assert noise_quantile(0.0, lap) == pytest.approx(math.log(20), rel=1e-3)
    big = 1e4
    assert noise_quantile(big, lap) == pytest.approx(1.959964 * math.sqrt(big**2 + 2), rel=1e-4)
    geo = NoiseLaw.for_mechanism("geometric", 3.0)  # mass 0.905 at 0: a 95 % interval of [-1, 1]
    assert noise_quantile(0.0, geo) == pytest.approx(1.0, abs=1e-9)


def test_hashed_universe_uses_linear_counting() -> None:
    est = ps.DensityEstimator("hashed:65536", budget=1.0)
    est.update([f"user-{i}" for i in range(20_000)])
    r = est.release(1.0)
    assert r.distinct == distinct_from_density(r.density, 65536, hashed=True)
    assert r.distinct_low <= r.distinct <= r.distinct_high


def test_bad_arguments_charge_nothing() -> None:
    est = estimator(budget=1.0)
    for eps in [0, -1, float("nan"), float("inf"), "x"]:
        with pytest.raises(ConfigurationError):
            est.release(eps)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="unknown mechanism"):
        est.release(0.5, "gaussian")
    with pytest.raises(ConfigurationError, match="confidence"):
        est.release(0.5, confidence=1.5)
    assert est.ledger.releases == 0
