"""From a requested state epsilon to the exact D0 and D1 probabilities q and p, and back to the
realized epsilon.

The state of a pan-private density estimator is a table of bits; a cell never seen holds a draw of
D0 = Bernoulli(q), a cell seen at least once holds a draw of D1 = Bernoulli(p), p > q. One person
changes at most one cell's law between D0 and D1, so the table is epsilon-DP with

    epsilon_state = max(|ln(p / q)|, |ln((1 - p) / (1 - q))|)

(Dwork's CACM survey, "Pan-Privacy", with q = 1/2; any q works, see README "Sources"). The
density estimate ``(theta - q) / (p - q)`` has standard deviation
``sqrt(f p(1-p) + (1-f) q(1-q)) / ((p - q) sqrt|X|)``, so what a calibration buys is signal
``p - q`` per unit of noise. Three calibrations choose (q, p) for a requested epsilon:

* ``"rr"`` (the default): randomized response, q = 1/(1 + e^epsilon), p = 1 - q, so
  p/q = (1-q)/(1-p) = e^epsilon and p - q = tanh(epsilon/2), the largest signal any pair of
  Bernoulli laws allows at this epsilon. Binary randomized response is the optimal epsilon-DP
  randomizer of one bit (Kairouz, Oh and Viswanath, "Extremal Mechanisms for Local Differential
  Privacy", NeurIPS 2014 / JMLR 2016). Its state standard deviation does not depend on the density:
  ``sqrt(pq) / ((p - q) sqrt|X|) = 1 / (2 sinh(epsilon/2) sqrt|X|)``, e^(epsilon/2) times smaller
  than tight's at density 0 (1.28x at epsilon 0.5, 1.65x at 1, 2.72x at 2).
* ``"tight"``: q = 1/2 and the largest p whose state is exactly epsilon-DP, p = 1 - e^(-epsilon)/2.
  At epsilon = 1 that is p = 0.816, a signal p - 1/2 of 0.316.
* ``"paper"``: q = 1/2 and p = 1/2 + epsilon/4, as in the pan-privacy paper (Dwork et al.). At
  epsilon = 1, p = 0.75, a signal of 0.25 and a realized state epsilon of only ln 2 = 0.693; for
  epsilon above about 1.59 it is *not* epsilon-DP (at epsilon = 1.9 the realized value is 3.0), and
  it needs epsilon < 2.

Every probability is a dyadic rational ``k / 2**32`` (the precision of the samplers in
:mod:`panstream.randomness`), rounded so that the realized epsilon is at most the one asked for
(except "paper", whose formula can exceed it): "tight" rounds p down; "rr" rounds q *up* to the
smallest dyadic at or above 1/(1+e^epsilon) and sets p = 1 - q exactly, so its realized epsilon is
``ln(p/q)`` of those dyadics, at most epsilon (about 1e-9 below it). :func:`realized_epsilon` reports
the epsilon of the exact (p, q) used; nothing printed is a nominal value.

>>> c = calibrate(1.0)
>>> c.calibration, round(float(c.q), 6), round(float(c.p - c.q), 6), c.epsilon_state <= 1.0
('rr', 0.268941, 0.462117, True)
>>> c = calibrate(1.0, "tight")
>>> round(float(c.p), 6), round(c.epsilon_state, 6), c.q
(0.81606, 1.0, Fraction(1, 2))
>>> c = calibrate(1.0, "paper")
>>> float(c.p), round(c.epsilon_state, 6)
(0.75, 0.693147)
"""

from __future__ import annotations

import decimal
import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from panstream.errors import ConfigurationError
from panstream.randomness import P_BITS, dyadic_at_most, probability

Calibration = Literal["rr", "tight", "paper"]
CALIBRATIONS: tuple[str, ...] = ("rr", "tight", "paper")
DEFAULT_CALIBRATION: Calibration = "rr"

_ONE = 1 << P_BITS
_HALF = 1 << (P_BITS - 1)

#: Largest epsilon "rr" realizes: beyond ln(2**32 - 1) = 22.18, 1/(1+e^epsilon) is below the smallest
#: positive 32-bit dyadic, so q stays at 2**-32 (never 0: q is rounded up) and the realized epsilon
#: at 22.18, as "tight" caps p at 1 - 2**-32.
RR_MAX_EPSILON = math.log(_ONE - 1)


@dataclass(frozen=True)
class Calibrated:
    """The exact D0 and D1 probabilities for a requested epsilon, and the epsilon they really give.

    Attributes:
        epsilon: the epsilon asked for.
        calibration: ``"rr"``, ``"tight"`` or ``"paper"``.
        numerator: p * 2**32, an integer.
        p: the exact D1 probability used, a :class:`~fractions.Fraction`.
        epsilon_state: the realized state epsilon of ``p`` and ``q``.
        q_numerator: q * 2**32, the exact D0 probability's numerator (2**31: a fair coin).
        q: the exact D0 probability.
    """

    epsilon: float
    calibration: str
    numerator: int
    p: Fraction
    epsilon_state: float
    q_numerator: int = _HALF

    @property
    def q(self) -> Fraction:
        """The exact D0 probability ``q_numerator / 2**32``."""
        return probability(self.q_numerator)


def realized_epsilon(p: Fraction | float, q: Fraction | float = Fraction(1, 2)) -> float:
    """``max(|ln(p/q)|, |ln((1-p)/(1-q))|)``: the state epsilon of D0 = Bernoulli(q) against
    D1 = Bernoulli(p) (one person moves one cell between the two laws). With the default q = 1/2
    it is ``max(|ln 2p|, |ln 2(1-p)|)``; with p = 1 - q it is ``|ln(p/q)|``.

    >>> round(realized_epsilon(Fraction(3, 4)), 6)
    0.693147
    >>> round(realized_epsilon(Fraction(3, 4), Fraction(1, 4)), 6)  # ln 3
    1.098612
    """
    f, g = Fraction(p), Fraction(q)
    if not (0 < f < 1 and 0 < g < 1):
        return math.inf
    return max(abs(math.log(f / g)), abs(math.log((1 - f) / (1 - g))))


def validate_epsilon(epsilon: object, what: str = "epsilon") -> float:
    """Return ``epsilon`` as a positive finite float or raise :class:`ConfigurationError`."""
    try:
        e = float(epsilon)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        msg = f"{what} must be a number, got {epsilon!r}"
        raise ConfigurationError(msg) from None
    if not math.isfinite(e) or e <= 0:
        msg = f"{what} must be a positive finite number, got {epsilon!r}"
        raise ConfigurationError(msg)
    return e


def rr_q_numerator(epsilon: float) -> int:
    """``2**32`` times the smallest dyadic ``k / 2**32 >= 1 / (1 + e^epsilon)``.

    Computed in 60-digit decimal arithmetic (``Decimal.exp`` is correctly rounded), so the ceiling
    is exact unless 1/(1+e^epsilon) lies within 1e-50 of a multiple of 2**-32. At least 1: q is
    never 0 (above :data:`RR_MAX_EPSILON` it is 2**-32).

    >>> rr_q_numerator(math.log(3)) == 1 << 30   # q = 1/4 exactly, p = 3/4
    True
    >>> rr_q_numerator(30.0), rr_q_numerator(1e300)
    (1, 1)
    """
    if epsilon > RR_MAX_EPSILON + 1:
        return 1  # 2**32 / (1 + e^epsilon) < 1/e: the ceiling is 1 (and Decimal.exp would overflow)
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        target = decimal.Decimal(1) / (1 + decimal.Decimal(epsilon).exp())
        return int((target * _ONE).to_integral_value(rounding=decimal.ROUND_CEILING))


def _too_small(eps: float, what: str) -> ConfigurationError:
    return ConfigurationError(f"epsilon {eps} is too small: {what} at {P_BITS}-bit precision and "
                              "the table would carry no signal")


def calibrate(epsilon: float, calibration: str = DEFAULT_CALIBRATION) -> Calibrated:
    """Choose the exact dyadic q and p for ``epsilon`` under ``calibration`` (see the module
    docstring).

    Raises:
        ConfigurationError: epsilon is not positive and finite, too small to give any signal at 32
            bits of precision, or (for ``"paper"``) at least 2; or the calibration is unknown.
    """
    eps = validate_epsilon(epsilon)
    if calibration not in CALIBRATIONS:
        msg = f"unknown calibration {calibration!r}: use one of {', '.join(CALIBRATIONS)}"
        raise ConfigurationError(msg)
    return _calibrated(eps, str(calibration))


@functools.lru_cache(maxsize=256)
def _calibrated(eps: float, calibration: str) -> Calibrated:
    """:func:`calibrate` of a valid epsilon and calibration, remembered: a pure function of public
    parameters (its result is immutable), and every estimator, restore and audit run asks for it
    again; the 60-digit ``Decimal.exp`` of rr cost a third of a small estimator's construction."""
    if calibration == "rr":
        return _calibrate_rr(eps)
    if calibration == "tight":
        # 1 - e^-eps/2, rounded down; computed from expm1 to keep precision for small epsilon.
        target: Fraction | float = Fraction(0.5) - Fraction(math.expm1(-eps)) / 2
        target = min(target, Fraction(_ONE - 1, _ONE))
    elif calibration == "paper":
        if eps >= 2:
            msg = (f"the paper calibration p = 1/2 + epsilon/4 needs epsilon < 2, got {eps}; "
                   "use calibration 'rr' (the default) or 'tight'")
            raise ConfigurationError(msg)
        target = Fraction(1, 2) + Fraction(eps) / 4
    else:  # pragma: no cover - calibrate() checked the name
        raise AssertionError(calibration)
    num = dyadic_at_most(target)
    if num <= _HALF:
        raise _too_small(eps, "p rounds to 1/2")
    p = probability(num)
    return Calibrated(eps, calibration, num, p, realized_epsilon(p))


def _calibrate_rr(eps: float) -> Calibrated:
    """Randomized response: q rounded up to 2**-32, p = 1 - q; realized epsilon <= eps, asserted."""
    k = rr_q_numerator(eps)
    # The ceiling is exact to 1e-50; this loop only guards the float log of the report.
    while k < _HALF and realized_epsilon(probability(_ONE - k), probability(k)) > eps:
        k += 1
    if k >= _HALF:
        raise _too_small(eps, "q = 1/(1+e^epsilon) rounds up to 1/2")
    p, q = probability(_ONE - k), probability(k)
    realized = realized_epsilon(p, q)
    assert realized <= eps, (eps, k)  # q was rounded up: never less private than asked
    return Calibrated(eps, "rr", _ONE - k, p, realized, k)


# ---------------------------------------------------------------------- frequency (modular counters)
#: The moduli a frequency estimator accepts: powers of two from 4 to 256.
MODULI: tuple[int, ...] = (4, 8, 16, 32, 64, 128, 256)
#: The default modulus of the frequency estimator's counters.
DEFAULT_MODULUS = 16


@dataclass(frozen=True)
class FrequencyCalibration:
    """The exact initial law of a modular counter for a requested epsilon.

    A counter of :mod:`panstream.estimators.frequency` starts at 0 with probability ``alpha`` and
    otherwise uniform on Z_k, so its law is D(0) = alpha + (1 - alpha)/k, D(j) = (1 - alpha)/k.

    Attributes:
        epsilon: the epsilon asked for.
        modulus: k, the counter modulus.
        numerator: alpha * 2**32, an integer (alpha rounded *down* to the 32-bit dyadic grid).
        alpha: the exact alpha used, a :class:`~fractions.Fraction`.
        epsilon_state: the realized state epsilon ``ln(max D / min D) = ln(1 + alpha k/(1-alpha))``.
    """

    epsilon: float
    modulus: int
    numerator: int
    alpha: Fraction
    epsilon_state: float


def validate_modulus(modulus: object) -> int:
    """Return ``modulus`` as an int if it is a power of two in 4..256, else raise.

    Raises:
        ConfigurationError: not one of :data:`MODULI`.
    """
    if isinstance(modulus, bool) or not isinstance(modulus, int) or modulus not in MODULI:
        msg = (f"modulus must be a power of two from 4 to 256 ({', '.join(map(str, MODULI))}), got "
               f"{modulus!r}; it must exceed the counts you want to tell apart (see docs/frequency.md)")
        raise ConfigurationError(msg)
    return modulus


def frequency_epsilon(alpha: Fraction | float, modulus: int) -> float:
    """The state epsilon of modular counters with initial law parameter ``alpha``.

    Every shift of D lies within ``max D / min D = 1 + alpha k / (1 - alpha)`` of D, and that ratio
    is attained, so the realized epsilon is its logarithm (computed from the exact ``alpha``).

    >>> round(frequency_epsilon(Fraction(1, 5), 4), 6)   # 1 + (1/5)(4)/(4/5) = 2
    0.693147
    """
    a = Fraction(alpha)
    if not 0 <= a < 1:
        return math.inf
    return math.log1p(float(a * modulus / (1 - a)))


def calibrate_frequency(epsilon: float, modulus: int = DEFAULT_MODULUS) -> FrequencyCalibration:
    """alpha = (e^eps - 1)/(e^eps - 1 + k), rounded down to a dyadic ``n / 2**32``, and the realized
    epsilon of that exact alpha (at most the one asked for: the epsilon grows with alpha).

    >>> c = calibrate_frequency(1.0, 16)
    >>> round(float(c.alpha), 6), round(c.epsilon_state, 6), c.epsilon_state <= 1.0
    (0.096978, 1.0, True)

    Raises:
        ConfigurationError: invalid epsilon or modulus, or an epsilon so small that alpha rounds to
            0 at 32 bits (the counters would carry no signal).
    """
    return _calibrated_frequency(validate_epsilon(epsilon), validate_modulus(modulus))


@functools.lru_cache(maxsize=256)
def _calibrated_frequency(eps: float, k: int) -> FrequencyCalibration:
    """:func:`calibrate_frequency` of a valid epsilon and modulus, remembered (as :func:`_calibrated`)."""
    em1 = Fraction(math.expm1(eps)) if eps < 700 else None
    target = Fraction(1) if em1 is None else em1 / (em1 + k)
    target = min(target, Fraction((1 << P_BITS) - 1, 1 << P_BITS))
    num = dyadic_at_most(target)
    # expm1 is rounded; never let that rounding lift alpha above the asked-for epsilon.
    while num and frequency_epsilon(probability(num), k) > eps:
        num -= 1
    if num == 0:
        msg = (f"epsilon {eps} is too small for modulus {k}: alpha rounds to 0 at {P_BITS}-bit "
               "precision and the counters would carry no signal")
        raise ConfigurationError(msg)
    alpha = probability(num)
    return FrequencyCalibration(eps, k, num, alpha, frequency_epsilon(alpha, k))
