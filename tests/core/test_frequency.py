"""The frequency estimator: exact calibration, unbiased incidence, honest covariance, the same update
conventions as the density estimator, and no state beyond the counters.

Statistical checks use fixed run counts and state their false-failure probability; none retries.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import panstream as ps
from panstream.calibration import MODULI, calibrate_frequency, frequency_epsilon
from panstream.estimators.counters import CounterTable
from panstream.release.incidence import incidence_covariance

# ---------------------------------------------------------------------- calibration


@pytest.mark.parametrize("k", MODULI)
@pytest.mark.parametrize("eps", [0.05, 0.5, 1.0, 2.0, 4.0])
def test_alpha_is_the_formula_rounded_down_and_realizes_at_most_epsilon(k: int, eps: float) -> None:
    c = calibrate_frequency(eps, k)
    em1 = Fraction(math.expm1(eps))
    target = em1 / (em1 + k)
    assert c.alpha == Fraction(c.numerator, 1 << 32)
    assert c.alpha <= target < c.alpha + Fraction(2, 1 << 32)  # down, by at most one step (+rounding)
    # max D / min D, from the exact alpha, is e^epsilon_state; and never above e^epsilon
    beta = (1 - c.alpha) / k
    ratio = (c.alpha + beta) / beta
    assert ratio == 1 + c.alpha * k / (1 - c.alpha)
    assert c.epsilon_state == pytest.approx(math.log(ratio), rel=1e-12)
    assert c.epsilon_state <= eps
    assert eps - c.epsilon_state < 1e-6
    assert frequency_epsilon(c.alpha, k) == c.epsilon_state


def test_bad_moduli_and_tiny_epsilons_are_refused() -> None:
    for bad in (2, 3, 12, 512, 16.0, True, "16"):
        with pytest.raises(ps.ConfigurationError, match="modulus must be a power of two"):
            calibrate_frequency(1.0, bad)  # type: ignore[arg-type]
    with pytest.raises(ps.ConfigurationError, match="too small"):
        calibrate_frequency(1e-9, 16)
    with pytest.raises(ps.ConfigurationError):
        ps.FrequencyEstimator("range:10", epsilon=-1)


# ---------------------------------------------------------------------- estimation
def _log(n: int, counts: dict[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """A synthetic stream: ``counts[c]`` cells seen exactly c times; returns (indices, true N)."""
    per_cell = np.zeros(n, dtype=np.int64)
    start = 0
    for c, m in counts.items():
        per_cell[start : start + m] = c
        start += m
    idx = np.repeat(np.arange(n), per_cell)
    np.random.default_rng(3).shuffle(idx)  # arrival order: synthetic only
    return idx, per_cell


def test_incidence_is_unbiased_and_its_reported_stderr_is_the_spread() -> None:
    """200 runs, 2**12 cells modulo 8 at epsilon 1 (alpha ~ 0.177), counts 1..5.

    The mean over runs of each N_hat_j is compared with the truth using the exact covariance of the
    model (not the plug-in): 8 z-tests at 5.7 sd (N_hat_j is affine in a sum of 4096 independent
    counters per run, 819,200 in all: normal), false failure 8 x 1.2e-8 < 1e-7. The spread of
    N_hat_1 over the runs matches the reported (plug-in) standard error within 30 %: a sample sd of
    200 near-normal values is within 30 % of the true one except with probability 4.2e-9, and the
    plug-in differs from the true sd by well under 3 % at these sizes. Total below 1e-6.
    """
    n, k, runs = 1 << 12, 8, 200
    idx, per_cell = _log(n, {1: 600, 2: 300, 3: 150, 5: 50})
    truth = np.bincount(per_cell % k, minlength=k).astype(float)
    ests, reported = [], []
    for _ in range(runs):
        est = ps.FrequencyEstimator(ps.Universe.range(n), epsilon=1.0, modulus=k)
        est.update_indices(idx.copy())
        e = est.estimate()
        ests.append(e.incidence)
        reported.append(e.stderr_incidence[1])
    x = np.array(ests)
    cov = incidence_covariance(truth, n, est.alpha)
    z = (x.mean(axis=0) - truth) / np.sqrt(np.diag(cov) / runs)
    assert np.all(np.abs(z) < 5.7), z
    assert np.allclose(x.sum(axis=1), n)  # the estimates always sum to |X|
    assert 0.7 < np.std(x[:, 1], ddof=1) / np.mean(reported) < 1.3


def test_the_covariance_formula_matches_the_spread_of_linear_statistics() -> None:
    """4000 runs of 64 cells modulo 4 (epsilon 1.5): the sample variance of four linear statistics
    (N_hat_0, N_hat_1, N_hat_0 + N_hat_1, the 3-cropped total's weights) is within 15 % of the
    formula's. Each N_hat is affine in a sum of 64 independent categorical counters (excess kurtosis
    below 0.3), so a sample variance of 4000 runs has relative sd about sqrt(2.3/4000) = 0.024:
    15 % is 6.2 sd, false failure below 4 x 1e-9. A wrong covariance sign (as if the counts were
    independent) would move the sum's variance by far more than 15 %."""
    n, k, runs = 64, 4, 4000
    idx, per_cell = _log(n, {1: 20, 2: 10, 3: 6})
    truth = np.bincount(per_cell % k, minlength=k).astype(float)
    x = np.empty((runs, k))
    for r in range(runs):
        est = ps.FrequencyEstimator(ps.Universe.range(n), epsilon=1.5, modulus=k)
        est.update_indices(idx.copy())
        x[r] = est.estimate().incidence
    cov = incidence_covariance(truth, n, est.alpha)
    for w in ([1, 0, 0, 0], [0, 1, 0, 0], [1, 1, 0, 0], [-3, -2, -1, 0]):
        wv = np.array(w, dtype=float)
        assert np.var(x @ wv, ddof=1) == pytest.approx(wv @ cov @ wv, rel=0.15), w


def test_estimate_fields_are_consistent() -> None:
    # 2000 of 4096 cells present, epsilon 3: present is 2000 +- 44, never near the ratios' pole.
    est = ps.FrequencyEstimator("range:4096", epsilon=3.0, modulus=16)
    est.update_indices(np.repeat(np.arange(2000), 3))
    e = est.estimate()
    s = e.stats
    assert e.histogram == tuple(est.histogram().tolist()) and sum(e.histogram) == 4096
    assert sum(e.incidence) == pytest.approx(4096)
    assert s.present.value == pytest.approx(4096 - e.incidence[0])
    assert s.once.value == pytest.approx(e.incidence[1])
    assert s.fraction_once.value == pytest.approx(e.incidence[1] / s.present.value)
    assert s.returning.value == pytest.approx(s.present.value - e.incidence[1])
    assert s.fraction_once.value + s.fraction_returning.value == pytest.approx(1.0)
    assert s.t == 4 and e.model().cropped_mean(4).value == pytest.approx(s.cropped_mean.value)
    for iv in (s.present, s.once, s.cropped_mean, *s.incidence):
        assert iv.low < iv.value < iv.high and iv.stderr > 0
    assert e.to_dict()["alpha"] == str(est.alpha)
    with pytest.raises(ps.ConfigurationError, match="threshold"):
        est.estimate(t=16)


# ---------------------------------------------------------------------- updates and state
def test_update_reports_rejected_items_and_keeps_no_count() -> None:
    est = ps.FrequencyEstimator("ipv4:10.0.0.0/24", epsilon=1.0)
    r = est.update(["10.0.0.1", "10.0.0.1", "10.0.1.1", "garbage", b"\x00\xff"])
    assert (r.accepted, r.outside, r.malformed, r.rejected) == (2, 1, 2, 3)
    # The whole state: public parameters, ledger and the counter table. No item count anywhere.
    assert set(vars(est)) == {"universe", "epsilon", "modulus", "_numerator", "alpha",
                              "epsilon_state", "_ledger", "_epoch_of_table", "_table"}


def test_arrivals_add_their_multiplicity_mod_k_and_nothing_else() -> None:
    """From a table of zeros (a test fixture, never a real initial state)."""
    for layout in ("bytes", "packed"):
        zeros = CounterTable.from_counters(np.zeros(16, dtype=np.uint8), 8, layout)
        est = ps.FrequencyEstimator("range:16", modulus=8, _table=zeros)
        est.update_indices(np.array([3] * 5 + [4] * 8 + [5] * 9 + [6]))
        est.update(["6", "6"])
        assert est.counters().tolist() == [0, 0, 0, 5, 0, 1, 3] + [0] * 9


def test_bad_indices_apply_nothing() -> None:
    """(Batches are wiped after use: ``tests/core/test_estimator.py``, for both families.)"""
    est = ps.FrequencyEstimator("range:1000", epsilon=1.0)
    est.update_indices(np.array([1, 2, 3, 999, 5, 6, 7]))
    before = est.counters()
    with pytest.raises(ps.ItemError, match="out of range"):
        est.update_indices(np.array([1, 2, 1000]))
    with pytest.raises(TypeError):
        est.update_indices(np.array([0.5]))
    with pytest.raises(ps.ArgumentTypeError):
        est.update("10.0.0.1")
    assert est.counters().tolist() == before.tolist()


def test_counters_is_a_copy_of_what_an_intruder_sees() -> None:
    est = ps.FrequencyEstimator("range:64", epsilon=1.0, modulus=4)
    c = est.counters()
    c[:] = 3
    assert est.histogram().tolist() == np.bincount(est.counters(), minlength=4).tolist()
    assert est.counters().dtype == np.uint8


def test_rotate_draws_a_fresh_table_and_ledger() -> None:
    est = ps.FrequencyEstimator("range:4096", epsilon=1.0, budget=1.0)
    est.release(0.25)
    before = est.counters()
    old = est.rotate()
    assert old.spent == 0.25 and est.ledger.spent == 0 and est.ledger.budget == 1.0
    assert (est.counters() != before).mean() > 0.5  # two independent draws of D mostly differ


def test_public_parameters_and_repr() -> None:
    est = ps.FrequencyEstimator("range:100", epsilon=2.0, modulus=32)
    assert est.params() == {"kind": "frequency", "universe": "range:100", "cells": 100,
                            "epsilon": 2.0, "modulus": 32, "p_bits": 32,
                            "alpha_numerator": est.alpha_numerator}
    assert est.describe()["alpha"] == str(est.alpha) and est.layout == "bytes"
    assert "modulus=32" in repr(est) and est.size == 100
    assert isinstance(est, ps.FrequencyEstimator) and est.kind == "frequency"
