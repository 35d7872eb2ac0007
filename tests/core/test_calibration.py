"""Every epsilon printed is the realized one, computed from the exact p the sampler uses."""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import pytest

import panstream as ps
from panstream.calibration import calibrate, realized_epsilon
from panstream.randomness import P_BITS
from panstream.release.stats import stderr_state


@pytest.mark.parametrize("eps", [0.01, 0.1, 0.5, 1.0, 2.0, 5.0])
def test_tight_calibration_realizes_the_promise_from_below(eps: float) -> None:
    """Tight (q = 1/2) behaves exactly as before rr became the default."""
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


def test_rr_gives_more_signal_than_tight_and_tight_more_than_paper() -> None:
    for eps in (0.1, 0.5, 1.0):
        rr, tight, paper = (calibrate(eps, c) for c in ("rr", "tight", "paper"))
        assert rr.p - rr.q > tight.p - tight.q > paper.p - paper.q
        assert tight.q == paper.q == Fraction(1, 2)


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


# ---------------------------------------------------------------------- randomized response
def _rr_target(eps: float) -> Decimal:
    """1/(1+e^eps) to 60 digits (an independent computation of the rr target)."""
    with localcontext() as ctx:
        ctx.prec = 60
        return Decimal(1) / (1 + Decimal(eps).exp())


def test_the_default_is_randomized_response_with_tanh_half_signal() -> None:
    """Done-when of issue 11: DensityEstimator(u, epsilon=1.0) is rr, p - q = tanh(1/2) to 32-bit
    precision (q rounded up by < 2**-32, p = 1 - q: the signal moves by < 2**-31), realized <= 1."""
    est = ps.DensityEstimator("ipv4:10.0.0.0/16", epsilon=1.0)
    assert est.calibration == "rr" == ps.calibrate(1.0).calibration
    assert est.p + est.q == 1
    assert abs(float(est.p - est.q) - math.tanh(0.5)) <= 2.0 ** -(P_BITS - 1)
    assert est.epsilon_state <= 1.0


@pytest.mark.parametrize("eps", [1e-6, 0.01, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0])
def test_rr_rounds_q_up_to_the_smallest_dyadic_and_realizes_at_most_epsilon(eps: float) -> None:
    c = calibrate(eps, "rr")
    k, one = c.q_numerator, 1 << P_BITS
    assert c.q == Fraction(k, one) and c.p == 1 - c.q and c.numerator == one - k
    target = _rr_target(eps)
    assert Decimal(k - 1) / one < target <= Decimal(k) / one  # the smallest dyadic >= target
    # realized = ln(p/q) from the exact dyadics (the other ratio is the same since p = 1 - q; the
    # two float logs may differ in the last bit)
    assert c.epsilon_state == realized_epsilon(c.p, c.q)
    assert c.epsilon_state == pytest.approx(math.log(c.p / c.q), rel=1e-15, abs=0)
    assert c.epsilon_state <= eps
    with localcontext() as ctx:  # and exactly, not only in floats: ln(p/q) <= eps
        ctx.prec = 60
        assert (Decimal(c.numerator) / Decimal(k)).ln() <= Decimal(eps)
    # q moved by < 2**-32 changes ln(p/q) by < 2**-32 / (p q): the realized epsilon is that close
    assert eps - c.epsilon_state < 2.0**-P_BITS / float(c.p * c.q) + 1e-15


def test_rr_q_never_rounds_to_zero() -> None:
    """Above ln(2**32 - 1) = 22.18 the target q is below 2**-32; rounding up keeps q = 2**-32, so the
    state stays DP with the realized epsilon 22.18 (printed), never less private than asked."""
    for eps in (22.2, 30.0, 1e6):
        c = calibrate(eps, "rr")
        assert c.q_numerator == 1 and c.epsilon_state == pytest.approx(math.log((1 << P_BITS) - 1))
        assert c.epsilon_state <= eps


def test_rr_refuses_an_epsilon_whose_q_rounds_up_to_one_half() -> None:
    with pytest.raises(ps.ConfigurationError, match="too small.*rounds up to 1/2"):
        calibrate(1e-10, "rr")


@pytest.mark.parametrize("eps", [0.25, 0.5, 1.0, 2.0])
def test_rr_state_error_is_e_to_half_epsilon_times_tights_at_density_zero(eps: float) -> None:
    """sd ratio tight/rr = [1/(2(p_t - 1/2))] / [sqrt(pq)/(p - q)] = e^(eps/2) (issue 11)."""
    rr, tight = calibrate(eps, "rr"), calibrate(eps, "tight")
    sd_rr = stderr_state(0.0, 1 << 16, rr.p, rr.q)
    sd_tight = stderr_state(0.0, 1 << 16, tight.p, tight.q)
    assert sd_tight / sd_rr == pytest.approx(math.exp(eps / 2), rel=1e-6)
    # and rr's sd is the same at every density: p(1-p) = q(1-q)
    assert stderr_state(0.7, 1 << 16, rr.p, rr.q) == pytest.approx(sd_rr, rel=1e-12)
    assert sd_rr == pytest.approx(1 / (2 * math.sinh(eps / 2) * 256), rel=1e-6)
