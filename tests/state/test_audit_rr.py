"""The subpoena simulation of the randomized-response calibration (issue 11), and a mis-rounded q.

rr draws D0 = Bernoulli(q) with q the smallest 32-bit dyadic >= 1/(1+e^epsilon) and D1 =
Bernoulli(1 - q): rounding q *up* is what keeps the realized epsilon, ln(p/q), at or below the one
asked for. The audit must (1) certify a bound at or below that realized epsilon for the real
estimator, and (2) catch an implementation that rounds q the wrong way. Rounding down at 32-bit
precision moves epsilon by about 1e-9, which no audit can measure, so the broken variant here rounds
q down on a coarse grid, to a multiple of 1/16: at epsilon 0.52, q = 0.3729 becomes 5/16 and the
true realized epsilon is ln(11/5) = 0.788, 1.52 times the claim.

Every bound holds with probability at least 1 - alpha (alpha = 1e-6, split over the scenarios of a
test by a union bound), so each "stays within the claim" assertion fails falsely with probability at
most 1e-6. The broken variant lives in this file only, never in panstream.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import panstream as ps
from panstream import audit as A
from panstream.estimators.bittable import BitTable

from .test_audit_learned import miss_probability

ALPHA = 1e-6
ONE = 1 << 32


# ---------------------------------------------------------------------- the real rr estimator
@pytest.fixture(scope="module")
def rr_results() -> list[A.AuditResult]:
    """One dump with the target once, two dumps with a rotation between them (both covered), and
    two dumps of one epoch (not covered). alpha / 3 per scenario: at most 1e-6 for any test below.
    2000 runs per world and scenario (4000 before issue 36: the power asserted below holds at 2000
    with the margins computed there), with the classic fixed tests (named below); the learned
    default is exercised on rr by test_the_default_audit_is_of_rr and the CLI."""
    sc = A.standard_scenarios()
    return A.audit_estimator("range:64", 1.0, "rr", trials=2000, alpha=ALPHA / 3,
                             scenarios=(sc[0], sc[2], sc[3]), distinguisher="classic")


def test_the_default_audit_is_of_rr() -> None:
    (r,) = A.audit_estimator("range:16", 1.0, trials=200, scenarios=A.standard_scenarios()[:1])
    assert r.claimed == ps.calibrate(1.0, "rr").epsilon_state


def test_rr_dumps_stay_within_the_realized_epsilon(rr_results: list[A.AuditResult]) -> None:
    """Covered scenarios: the certified bound stays at or below ln(p/q) = 0.9999999992.

    It also gets close: the target's bit is the optimal test and for rr *both* its values carry the
    full ratio e^epsilon (P[1|B]/P[1|A] = p/q = P[0|A]/P[0|B]). At 2000 runs per world the bound is
    about 0.73; it falls below 0.5 with probability 1.8e-13 (exact over both binomials, alpha / 6
    per distinguisher: ``miss_probability`` of test_audit_learned.py; 1.5e-41 at 4000 runs).
    """
    claim = ps.calibrate(1.0, "rr").epsilon_state
    one_dump, rotated, _ = rr_results
    for r in (one_dump, rotated):
        assert r.covered and r.claimed == claim
        assert not r.exceeded, r
    assert one_dump.best == "target bit of dump 1 is 1"
    assert one_dump.empirical > 0.5
    # After the rotation the second epoch is independent of the first dump. (Unlike a fair-coin D0,
    # "the bit changed" is not uninformative here: the second dump's bit alone is D0 or D1, and
    # with q != 1/2 a change is likelier next to a D1 bit; that is the one-dump loss, within the
    # claim, which is what "not exceeded" above certifies.)
    for r in rr_results:
        ev = {e.name: e for e in r.evidence}
        assert ev["non-table bytes differ from world A"].hits_a == 0
        assert ev["non-table bytes differ from world A"].hits_b == 0


def test_the_stated_power_rates_are_exact() -> None:
    """The rates quoted for the fixture's 2000 runs per world, recomputed (alpha / 3 per scenario,
    split over 2 fixed tests for one dump and 4 for two)."""
    c = ps.calibrate(1.0, "rr")
    q, p = float(c.q), float(c.p)
    assert miss_probability(q, p, 2000, ALPHA / 6, 0.5) < 1.9e-13
    assert miss_probability(0.0, p * p + q * q, 2000, ALPHA / 12, 3.0) == 0.0


def test_two_rr_dumps_of_one_epoch_still_reveal_the_target(rr_results: list[A.AuditResult]) -> None:
    """Not covered, as for every calibration: a touched cell was redrawn (it changes with
    probability q(1-p) + (1-q)p = p^2 + q^2 = 0.61), an untouched one never changes: the bound is
    above 3 at 2000 runs except with probability 0 to double precision (``miss_probability``)."""
    same_epoch = rr_results[2]
    assert not same_epoch.covered and same_epoch.exceeded and not same_epoch.violation
    assert same_epoch.best == "target bit changed between dumps 1 and 2"
    assert same_epoch.empirical > 3


# ---------------------------------------------------------------------- q rounded the wrong way
EPS = 0.52
GRID = 16


class RoundedDownRR(ps.DensityEstimator):
    """BROKEN on purpose: rr with q rounded *down* to a multiple of 1/GRID (p = 1 - q), so the
    realized epsilon exceeds the one it claims. Claims what the real rr estimator claims."""

    def __init__(self, universe: ps.Universe, epsilon: float) -> None:
        q_num = math.floor(ps.calibrate(epsilon, "rr").q * GRID) * (ONE // GRID)
        super().__init__(universe, epsilon, "rr", _table=BitTable.random(universe.size, "auto", q_num))
        claimed = self.epsilon_state
        self._q_numerator, self._numerator = q_num, ONE - q_num
        self.q, self.p = Fraction(q_num, ONE), Fraction(ONE - q_num, ONE)
        self.epsilon_state = claimed  # the lie: it still reports the rr claim


def _runner(u: ps.Universe) -> A.Runner:
    def run(batches: Sequence[np.ndarray], dumps: Sequence[int]) -> list[Any]:
        est = RoundedDownRR(u, EPS)
        out: list[Any] = []
        for i, batch in enumerate(batches):
            est.update(batch.copy())
            if i in dumps:
                out.append(est.snapshot())
        return out

    return run


def test_the_broken_variant_really_exceeds_the_claim_by_half() -> None:
    """Exactly, from the dyadics: q = 5/16 instead of 0.37285, true epsilon ln(11/5) = 0.788."""
    est = RoundedDownRR(ps.Universe.parse("range:16"), EPS)
    assert est.q == Fraction(5, 16) and est.p == Fraction(11, 16)
    true_eps = ps.realized_epsilon(est.p, est.q)
    assert true_eps == pytest.approx(math.log(11 / 5))
    assert true_eps >= 1.5 * ps.calibrate(EPS, "rr").epsilon_state
    # It really draws D0 = Bernoulli(5/16), not the correct 0.373: 3200 cells, a band of 5.4 sd
    # (0.044) fails falsely with probability < 1e-7.
    bits = np.stack([RoundedDownRR(ps.Universe.parse("range:64"), EPS).bits() for _ in range(50)])
    assert abs(bits.mean() - 5 / 16) < 0.044


def test_the_audit_catches_q_rounded_down_with_the_default_trials() -> None:
    """10,000 runs per world (panstream audit's default), one dump, target arriving once.

    The certified bound is above the claim 0.52 unless the bit-is-1 counts stray far: with
    alpha = 1e-6 split over the 2 distinguishers, the bound ln(CP_lo(hits_b) / CP_hi(hits_a))
    exceeds the claim whenever hits_a <= a_star and hits_b >= b_star computed below (both CP bounds
    are monotone in their counts), so the test fails falsely with probability at most
    P[Bin(n, 5/16) > a_star] + P[Bin(n, 11/16) < b_star], computed exactly and asserted < 1e-12.
    """
    stats = pytest.importorskip("scipy.stats")
    u = ps.Universe.parse("range:16")
    claim = ps.calibrate(EPS, "rr").epsilon_state
    n = 10_000
    worlds = A.neighbouring_worlds(u.size, occurrences=1, background=2, batches=4)
    run = _runner(u)
    tests = A.snapshot_distinguishers(worlds.target, 1, run(worlds.a, worlds.dumps))
    tail = ALPHA / len(tests) / 4  # the per-tail level epsilon_lower_bound uses
    q, p = 5 / 16, 11 / 16
    margin = 0
    while math.log(A.clopper_pearson_lower(round(p * n) - margin - 1, n, tail)
                   / A.clopper_pearson_upper(round(q * n) + margin + 1, n, tail)) > claim:
        margin += 1
    a_star, b_star = round(q * n) + margin, round(p * n) - margin
    miss = stats.binom.sf(a_star, n, q) + stats.binom.cdf(b_star - 1, n, p)
    assert margin > 300 and miss < 1e-12  # 6.8e-14: more than 7 standard deviations each side

    result = A.audit(run, worlds, tests, trials=n, claimed=claim)
    assert result.exceeded and result.violation, result
    assert result.best == "target bit of dump 1 is 1"
    # and, being a lower bound (confidence 1 - 1e-6), stays below the true epsilon
    assert claim < result.empirical < ps.realized_epsilon(Fraction(11, 16), Fraction(5, 16))
