"""From a requested state epsilon to the exact D1 probability p, and back to the realized epsilon.

The state of a pan-private density estimator is a table of bits; a cell never seen holds a draw of
D0 = Bernoulli(1/2), a cell seen at least once holds a draw of D1 = Bernoulli(p). One person changes at
most one cell's law between D0 and D1, so the table is epsilon-DP with

    epsilon_state = max(|ln(p / (1/2))|, |ln((1 - p) / (1/2))|) = max(|ln 2p|, |ln 2(1 - p)|),

which for p > 1/2 equals ``-ln(2(1 - p))`` (Dwork's CACM survey, "Pan-Privacy"; see README "Sources").

Two calibrations choose p for a requested epsilon:

* ``"tight"`` (the default): the largest p whose state is exactly epsilon-DP, p = 1 - e^(-epsilon)/2.
  At epsilon = 1 that is p = 0.816, a signal p - 1/2 of 0.316.
* ``"paper"``: p = 1/2 + epsilon/4, as in the pan-privacy paper (Dwork et al.). At epsilon = 1, p = 0.75, a
  signal of 0.25 and a realized state epsilon of only ln 2 = 0.693; for epsilon above about 1.59 it is
  *not* epsilon-DP (at epsilon = 1.9 the realized value is 3.0), and it needs epsilon < 2.

The tight calibration is the default because the estimator's standard error is inversely
proportional to p - 1/2: for the same promised privacy it gives up to twice the signal (1.27x at
epsilon = 1, 2x as epsilon -> 0 since 1 - e^-eps/2 ~ 1/2 + eps/2), and its realized epsilon matches the
promise instead of silently exceeding it for large epsilon.

Either way p is rounded *down* to a dyadic rational ``k / 2**32`` (the precision of the samplers in
:mod:`panstream.randomness`), and :func:`realized_epsilon` reports the epsilon of that exact p.

>>> c = calibrate(1.0, "tight")
>>> round(float(c.p), 6), round(c.epsilon_state, 6)
(0.81606, 1.0)
>>> c = calibrate(1.0, "paper")
>>> float(c.p), round(c.epsilon_state, 6)
(0.75, 0.693147)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from panstream.errors import ConfigurationError
from panstream.randomness import P_BITS, dyadic_at_most, probability

Calibration = Literal["tight", "paper"]
CALIBRATIONS: tuple[str, ...] = ("tight", "paper")
DEFAULT_CALIBRATION: Calibration = "tight"


@dataclass(frozen=True)
class Calibrated:
    """The exact D1 probability for a requested epsilon, and the epsilon it really gives.

    Attributes:
        epsilon: the epsilon asked for.
        calibration: ``"tight"`` or ``"paper"``.
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
    q_numerator: int = 1 << (P_BITS - 1)

    @property
    def q(self) -> Fraction:
        """The exact D0 probability ``q_numerator / 2**32``."""
        return probability(self.q_numerator)


def realized_epsilon(p: Fraction | float, q: Fraction | float = Fraction(1, 2)) -> float:
    """``max(|ln(p/q)|, |ln((1-p)/(1-q))|)``: the state epsilon of D0 = Bernoulli(q) against
    D1 = Bernoulli(p) (one person moves one cell between the two laws). With the default q = 1/2
    it is ``max(|ln 2p|, |ln 2(1-p)|)``.

    >>> round(realized_epsilon(Fraction(3, 4)), 6)
    0.693147
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


def calibrate(epsilon: float, calibration: str = DEFAULT_CALIBRATION) -> Calibrated:
    """Choose the exact dyadic p for ``epsilon`` under ``calibration`` (see the module docstring).

    Raises:
        ConfigurationError: epsilon is not positive and finite, too small to give any signal at 32
            bits of precision, or (for ``"paper"``) at least 2; or the calibration is unknown.
    """
    eps = validate_epsilon(epsilon)
    if calibration == "tight":
        # 1 - e^-eps/2, rounded down; computed from expm1 to keep precision for small epsilon.
        target: Fraction | float = Fraction(0.5) - Fraction(math.expm1(-eps)) / 2
        target = min(target, Fraction((1 << P_BITS) - 1, 1 << P_BITS))
    elif calibration == "paper":
        if eps >= 2:
            msg = (f"the paper calibration p = 1/2 + epsilon/4 needs epsilon < 2, got {eps}; "
                   "use calibration 'tight'")
            raise ConfigurationError(msg)
        target = Fraction(1, 2) + Fraction(eps) / 4
    else:
        msg = f"unknown calibration {calibration!r}: use one of {', '.join(CALIBRATIONS)}"
        raise ConfigurationError(msg)
    num = dyadic_at_most(target)
    if num <= 1 << (P_BITS - 1):
        msg = (f"epsilon {eps} is too small: p rounds to 1/2 at {P_BITS}-bit precision and the table "
               "would carry no signal")
        raise ConfigurationError(msg)
    p = probability(num)
    return Calibrated(eps, calibration, num, p, realized_epsilon(p))
