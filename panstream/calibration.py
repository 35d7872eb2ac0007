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
    eps = validate_epsilon(epsilon)
    k = validate_modulus(modulus)
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
