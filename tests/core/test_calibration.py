"""Every epsilon printed is the realized one, computed from the exact p the sampler uses."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

import panstream as ps
from panstream.calibration import calibrate, realized_epsilon
from panstream.randomness import P_BITS


@pytest.mark.parametrize("eps", [0.01, 0.1, 0.5, 1.0, 2.0, 5.0])
def test_tight_calibration_realizes_the_promise_from_below(eps: float) -> None:
    c = calibrate(eps, "tight")
    assert c.p == Fraction(c.numerator, 1 << P_BITS)
    assert c.epsilon_state == realized_epsilon(c.p) == -math.log(2 * (1 - float(c.p)))
    assert c.epsilon_state <= eps
    assert eps - c.epsilon_state < 1e-8 * max(1.0, math.exp(eps))  # rounding of p to 2**-32 only


@pytest.mark.parametrize("eps", [0.1, 0.5, 1.0, 1.5])
def test_paper_calibration_uses_half_plus_eps_over_four(eps: float) -> None:
    c = calibrate(eps, "paper")
    assert abs(float(c.p) - (0.5 + eps / 4)) <= 2.0**-P_BITS
    assert c.epsilon_state == pytest.approx(-math.log(1 - eps / 2), abs=1e-8)


def test_paper_calibration_can_exceed_its_nominal_epsilon_and_says_so() -> None:
    c = calibrate(1.9, "paper")
    assert c.epsilon_state > 2.9  # realized, not nominal: 1/2 + 1.9/4 is not 1.9-DP
    with pytest.raises(ps.ConfigurationError, match="epsilon < 2"):
        calibrate(2.0, "paper")


def test_tight_gives_more_signal_than_paper() -> None:
    for eps in (0.1, 0.5, 1.0):
        assert calibrate(eps, "tight").p > calibrate(eps, "paper").p


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "x", None, 1e-12])
def test_bad_epsilon_is_a_configuration_error(bad: object) -> None:
    with pytest.raises(ps.ConfigurationError):
        calibrate(bad, "tight")  # type: ignore[arg-type]


def test_unknown_calibration() -> None:
    with pytest.raises(ps.ConfigurationError, match="unknown calibration"):
        ps.DensityEstimator("range:10", epsilon=1.0, calibration="loose")


def test_estimator_exposes_exact_p_and_realized_epsilon() -> None:
    est = ps.DensityEstimator("ipv4:10.0.0.0/16", epsilon=1.0, calibration="paper")
    assert est.p == Fraction(3, 4) and est.p_numerator == 3 << (P_BITS - 2)
    assert est.epsilon_state == pytest.approx(math.log(2))
