"""Exact, secure noise samplers for the release stage.

Every sampler here draws its randomness from the OS CSPRNG (:func:`panstream.randomness.
secure_uniform_below`) and computes with Python integers only: no floating point touches a random
value, so the output law is *exactly* the one stated, and the low-order-bits leak that Mironov (2012)
found in floating-point Laplace samplers cannot occur.

The construction follows Canonne, Kamath and Steinke, "The Discrete Gaussian for Differential
Privacy" (NeurIPS 2020), Algorithms 1 and 2:

* :func:`bernoulli_exp_neg` draws Bernoulli(exp(-gamma)) exactly for a rational gamma >= 0, using only
  Bernoulli(a/b) coins, each one uniform integer compared with a numerator.
* :func:`discrete_laplace` draws Z on the integers with ``Pr[Z = z] = (1-a)/(1+a) * a**|z|``,
  ``a = exp(-1/scale)``, for a rational ``scale``. This is the two-sided geometric distribution of seed
  002 ("Laplace mechanism ... t is an integer") and seed 003 (Example 2.1).

A float epsilon is a dyadic rational, so ``Fraction(epsilon)`` is exact and the samplers realize that
epsilon *exactly*: the realized epsilon of every mechanism below equals the float given (no rounding).

Two output laws are offered through :class:`NoiseLaw`:

``"geometric"``
    integer noise Z with ``a = exp(-epsilon)`` (the epsilon-geometric mechanism). A neighbouring count
    differs by 1, one lattice step, so the pmf ratio is at most ``exp(epsilon)``: epsilon-DP.
``"laplace"``
    discretized Laplace: noise ``g * Z`` on the lattice ``g Z``, ``g = 2**-LAPLACE_GRANULARITY_BITS``,
    with ``Pr[Z = z]`` proportional to ``exp(-epsilon * g * |z|)``. Since ``1/g`` is an integer, a count
    ``c`` and its neighbour ``c +- 1`` produce outputs on the same lattice and
    ``Pr[c + gZ = y] / Pr[c' + gZ = y] = exp(-epsilon (|y - c| - |y - c'|)) <= exp(epsilon)``: exactly
    epsilon-DP. Its law is within a factor ``exp(+-epsilon g / 2)`` of the continuous Laplace(1/epsilon)
    mass of each lattice cell, i.e. indistinguishable from it at any resolution that matters for a
    count. The output is a multiple of ``g`` and (for counts below 2**42) exactly representable as a
    float, so printing it does not round a data-dependent value.

Side channel note: the samplers run in time that depends on the value drawn (rejection sampling). A
release is one draw, made offline, so this is not exploitable remotely in panstream's setting.

>>> law = NoiseLaw.for_mechanism("geometric", 1.0)
>>> law.epsilon, law.granularity
(1.0, Fraction(1, 1))
>>> isinstance(law.sample(), Fraction)
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

from panstream.errors import ConfigurationError
from panstream.randomness import secure_uniform_below

#: The output mechanisms the release stage offers.
MECHANISMS: tuple[str, ...] = ("laplace", "geometric")

#: Lattice of the discretized Laplace mechanism: noise is a multiple of 2**-10 of one count.
LAPLACE_GRANULARITY_BITS = 10

#: Smallest epsilon a release accepts (noise scale 1e9 counts); below, outputs are pure noise.
MIN_EPSILON = 1e-9


def _check_rational(num: int, den: int) -> None:
    if den <= 0 or num < 0:
        msg = f"need a non-negative rational num/den with den > 0, got {num}/{den}"
        raise ConfigurationError(msg)


def bernoulli_rational(num: int, den: int) -> bool:
    """One exact draw of Bernoulli(``num/den``) for integers ``0 <= num <= den``, ``den > 0``.

    Example:
        >>> bernoulli_rational(0, 7), bernoulli_rational(7, 7)
        (False, True)
    """
    _check_rational(num, den)
    return secure_uniform_below(den) < num


def _bernoulli_exp_neg_unit(num: int, den: int) -> bool:
    # CKS Algorithm 1 for gamma = num/den in [0, 1]: K = first k with Bernoulli(gamma/k) = 0;
    # Pr[K odd] = exp(-gamma).
    k = 1
    while secure_uniform_below(den * k) < num:
        k += 1
    return k % 2 == 1


def bernoulli_exp_neg(gamma: Fraction | int) -> bool:
    """One exact draw of Bernoulli(exp(-``gamma``)) for a rational ``gamma >= 0``.

    Args:
        gamma: a non-negative rational (``Fraction`` or ``int``).

    Returns:
        ``True`` with probability exactly ``exp(-gamma)``.

    Raises:
        ValueError: ``gamma`` is negative.

    Example:
        >>> bernoulli_exp_neg(Fraction(0))
        True
    """
    g = Fraction(gamma)
    _check_rational(g.numerator, g.denominator)
    num, den = g.numerator, g.denominator
    while num > den:  # exp(-gamma) = exp(-1)**floor(gamma) * exp(-frac(gamma))
        if not _bernoulli_exp_neg_unit(1, 1):
            return False
        num -= den
    return _bernoulli_exp_neg_unit(num, den)


def discrete_laplace(scale: Fraction | int) -> int:
    """One exact draw from the discrete Laplace law with ``Pr[Z=z]`` proportional to ``exp(-|z|/scale)``.

    CKS 2020 Algorithm 2 with ``scale = t/s``: draw ``X = U + t V`` (``U`` uniform in ``0..t-1``
    accepted with probability ``exp(-U/t)``, ``V`` geometric with ratio ``exp(-1)``), so ``X`` is
    geometric with ratio ``exp(-1/t)``; ``Y = X // s`` is geometric with ratio ``exp(-s/t)``; a random
    sign, rejecting ``-0``, makes it two-sided. The expected number of CSPRNG calls is a small
    constant whatever the scale.

    Args:
        scale: the positive rational scale ``1/epsilon`` in lattice steps.

    Returns:
        An integer.

    Raises:
        ValueError: ``scale`` is not positive.
    """
    sc = Fraction(scale)
    if sc <= 0:
        msg = f"scale must be positive, got {scale}"
        raise ConfigurationError(msg)
    t, s = sc.numerator, sc.denominator
    while True:
        u = secure_uniform_below(t)
        if not _bernoulli_exp_neg_unit(u, t):
            continue
        v = 0
        while _bernoulli_exp_neg_unit(1, 1):
            v += 1
        y = (u + t * v) // s
        negative = secure_uniform_below(2) == 1
        if negative and y == 0:
            continue
        return -y if negative else y


def exact_epsilon(epsilon: float | Fraction) -> Fraction:
    """``epsilon`` as the exact rational the samplers use (a float is a dyadic rational).

    Raises:
        ValueError: ``epsilon`` is not a finite number >= :data:`MIN_EPSILON`.
    """
    if isinstance(epsilon, float) and not math.isfinite(epsilon):
        msg = f"epsilon must be finite, got {epsilon!r}"
        raise ConfigurationError(msg)
    e = Fraction(epsilon)
    if e < Fraction(MIN_EPSILON):
        msg = f"epsilon must be at least {MIN_EPSILON:g}, got {float(e):g}"
        raise ConfigurationError(msg)
    return e


@dataclass(frozen=True)
class NoiseLaw:
    """The exact law of the release noise added to a count of ones.

    The noise is ``granularity * Z`` with ``Pr[Z = z] = (1-a)/(1+a) * a**|z|``,
    ``a = exp(-epsilon * granularity)``.

    Attributes:
        mechanism: ``"laplace"`` or ``"geometric"``.
        epsilon_exact: the exact rational epsilon the sampler realizes.
        granularity: lattice step of the noise in counts (1 for geometric, 2**-10 for laplace).
    """

    mechanism: str
    epsilon_exact: Fraction
    granularity: Fraction

    @classmethod
    def for_mechanism(cls, mechanism: str, epsilon: float | Fraction) -> NoiseLaw:
        """The law of ``mechanism`` at ``epsilon`` (sensitivity 1 on the count).

        Raises:
            ValueError: unknown mechanism or invalid epsilon.
        """
        e = exact_epsilon(epsilon)
        if mechanism == "geometric":
            return cls(mechanism, e, Fraction(1))
        if mechanism == "laplace":
            return cls(mechanism, e, Fraction(1, 1 << LAPLACE_GRANULARITY_BITS))
        msg = f"unknown mechanism {mechanism!r}: use one of {', '.join(MECHANISMS)}"
        raise ConfigurationError(msg)

    @property
    def epsilon(self) -> float:
        """The realized epsilon (equal to the float asked for: it is used exactly)."""
        return float(self.epsilon_exact)

    @cached_property  # exact rational arithmetic, once per law rather than once per draw
    def step_scale(self) -> Fraction:
        """Scale of ``Z`` in lattice steps: ``1 / (epsilon * granularity)``."""
        return 1 / (self.epsilon_exact * self.granularity)

    @property
    def ratio(self) -> float:
        """``a = exp(-epsilon * granularity)``, the ratio of neighbouring lattice probabilities."""
        return math.exp(-float(self.epsilon_exact * self.granularity))

    @property
    def variance(self) -> float:
        """Variance of the noise in counts squared: ``g**2 * 2a / (1-a)**2``."""
        x = float(self.epsilon_exact * self.granularity)
        # 2a/(1-a)^2 = 1 / (2 sinh^2(x/2)), stable for small x.
        return float(self.granularity) ** 2 / (2 * math.sinh(x / 2) ** 2)

    def pmf(self, z: int) -> float:
        """``Pr[Z = z]`` for the lattice index ``z`` (noise ``granularity * z``)."""
        x = float(self.epsilon_exact * self.granularity)
        return math.tanh(x / 2) * math.exp(-x * abs(z))

    def cdf(self, z: int) -> float:
        """``Pr[Z <= z]`` for the lattice index ``z``."""
        x = float(self.epsilon_exact * self.granularity)
        a1 = 1 + math.exp(-x)
        if z >= 0:
            return 1 - math.exp(-x * (z + 1)) / a1
        return math.exp(-x * (-z)) / a1

    def sample_steps(self) -> int:
        """One draw of ``Z`` (lattice steps)."""
        return discrete_laplace(self.step_scale)

    def sample(self) -> Fraction:
        """One draw of the noise in counts, ``granularity * Z``, exactly."""
        return self.granularity * self.sample_steps()
