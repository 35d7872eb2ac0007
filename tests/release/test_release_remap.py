"""Theorem 3.1 of seed 003 (Ghosh, Roughgarden, Sundararajan), checked numerically.

For a user with a prior over the true count ``i`` in ``{0..n}`` and a loss nondecreasing in
``|i - r|``, the user-specific LP of the paper (Section 5) is

    minimize    sum_i prior(i) sum_r x[i, r] loss(i, r)
    subject to  x[i, r] - e^eps x[i+1, r] <= 0,  x[i+1, r] - e^eps x[i, r] <= 0   (eps-DP)
                sum_r x[i, r] = 1                                                  (a mechanism)
                x[i, r] >= 0,    i, r in {0..n}

whose optimum is the best oblivious eps-DP mechanism with range {0..n} for that user. The theorem says
the eps-geometric mechanism (clamped to {0..n}) followed by the user's Bayes-optimal remap attains it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import linprog

import panstream as ps
from panstream.release.remap import _loss_matrix, posterior, remap_table


def lp_optimum(n: int, eps: float, prior: np.ndarray, loss: np.ndarray) -> float:
    m = n + 1
    nv = m * m  # x[i, r] at i * m + r
    c = (prior[:, None] * loss).reshape(-1)
    rows = []
    e = math.exp(eps)
    for i in range(n):
        for r in range(m):
            for a, b in ((i, i + 1), (i + 1, i)):
                row = np.zeros(nv)
                row[a * m + r] = 1.0
                row[b * m + r] = -e
                rows.append(row)
    a_ub = np.array(rows) if rows else None
    b_ub = np.zeros(len(rows)) if rows else None
    a_eq = np.zeros((m, nv))
    for i in range(m):
        a_eq[i, i * m : (i + 1) * m] = 1.0
    res = linprog(c, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=np.ones(m), bounds=(0, None),
                  method="highs")
    assert res.status == 0, res.message
    return float(res.fun)


def clamped_geometric(n: int, eps: float) -> np.ndarray:
    """G[i, r] = Pr[output r | true i] of the eps-geometric mechanism clamped to {0..n}."""
    a = math.exp(-eps)
    g = np.empty((n + 1, n + 1))
    for i in range(n + 1):
        for r in range(n + 1):
            if n == 0:
                g[i, r] = 1.0
            elif r == 0:
                g[i, r] = a**i / (1 + a)
            elif r == n:
                g[i, r] = a ** (n - i) / (1 + a)
            else:
                g[i, r] = (1 - a) / (1 + a) * a ** abs(r - i)
    return g


def priors(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(20240603 + n)  # synthetic test data only, not a privacy draw
    i = np.arange(n + 1)
    return {
        "uniform": np.full(n + 1, 1 / (n + 1)),
        "skewed": np.exp(-0.8 * i) / np.exp(-0.8 * i).sum(),
        "bimodal": (w := np.where((i == 0) | (i == n), 5.0, 1.0)) / w.sum(),
        "random": (d := rng.dirichlet(np.ones(n + 1))) / d.sum(),
    }


def capped(true: int, est: int) -> float:  # a monotone callable loss: |i - r| capped at 2
    return float(min(abs(true - est), 2))


LOSSES = ["absolute", "squared", "binary", capped]


@pytest.mark.parametrize("n", [1, 2, 4, 6, 8])
@pytest.mark.parametrize("eps", [0.3, 1.0, 2.0])
def test_geometric_plus_remap_attains_the_user_lp_optimum(n: int, eps: float) -> None:
    g = clamped_geometric(n, eps)
    assert np.allclose(g.sum(axis=1), 1.0)
    for pname, prior in priors(n).items():
        for loss in LOSSES:
            lmat = _loss_matrix(n, loss)
            remap = remap_table(eps, n, prior, loss)
            induced = g @ np.eye(n + 1)[remap]  # mechanism induced by geometric then remap
            achieved = float(prior @ (induced * lmat).sum(axis=1))
            optimum = lp_optimum(n, eps, prior, lmat)
            assert achieved == pytest.approx(optimum, rel=1e-6, abs=1e-9), (pname, loss)
            # Face value (no remap) is never better than the optimum.
            assert float(prior @ (g * lmat).sum(axis=1)) >= optimum - 1e-9


def test_remap_is_the_bayes_decision() -> None:
    n, eps = 6, 0.7
    prior = priors(n)["random"]
    for r in range(n + 1):
        post = posterior(r, eps, n, prior)
        like = clamped_geometric(n, eps)[:, r]
        assert np.allclose(post, prior * like / (prior * like).sum())
        for loss in LOSSES:
            expected = post @ _loss_matrix(n, loss)
            assert expected[ps.remap(r, eps, n, prior, loss)] == pytest.approx(expected.min())


def test_remap_arguments() -> None:
    assert ps.remap(-3, 1.0, 4) == ps.remap(0, 1.0, 4)  # unclamped outputs are clamped first
    assert ps.remap(9, 1.0, 4, loss="binary") == 4
    assert ps.remap(0, 1.0, 0) == 0
    with pytest.raises(ValueError, match="n \\+ 1 = 5"):
        ps.remap(1, 1.0, 4, prior=[1, 2, 3])
    with pytest.raises(ValueError, match="unknown loss"):
        ps.remap(1, 1.0, 4, loss="hinge")
    for bad in [0.0, -1.0, float("inf")]:
        with pytest.raises(ValueError):
            ps.remap(1, bad, 4)
    with pytest.raises(ValueError):
        ps.remap(1, 1.0, 4, prior=[0, 0, 0, 0, 0])


def test_remap_of_a_real_release_with_a_prior() -> None:
    """A user who knows the count of ones is near 1000 +- 30 remaps a geometric release."""
    est = ps.DensityEstimator("range:2048", budget=1.0)
    r = est.release(0.05, "geometric")
    n = r.size
    i = np.arange(n + 1)
    prior = np.exp(-0.5 * ((i - 1000) / 30.0) ** 2)
    out = ps.remap(int(r.noisy_ones), r.epsilon, n, prior, "squared")
    assert 0 <= out <= n
