"""Debiasing, error bars and noisy counts: what the noiseless estimates and the releases share.

Functions of public parameters and (noisy) counts, used by :mod:`panstream.estimators` (the
noiseless diagnostics) and the release stage (:mod:`panstream.release.density`,
:mod:`panstream.release.maps`), so each formula exists once; and the two steps every release of a
count takes (:func:`output_law` to validate and build the noise law, :func:`noisy_count` to add it).
Nothing here imports an estimator: a release reads a table through the :class:`CountingTable`
protocol.

A table over ``cells`` cells starts every bit as D0 = Bernoulli(q) and redraws the bit of every
arrival from D1 = Bernoulli(p), p > q. If a fraction ``f`` of the cells appeared, the fraction of
ones ``theta`` has

    E[theta] = f p + (1 - f) q,   Var[theta] = (f p (1-p) + (1 - f) q (1-q)) / cells,

so ``(theta - q) / (p - q)`` is an unbiased density with standard error
``sqrt(f p(1-p) + (1-f) q(1-q)) / ((p - q) sqrt(cells))`` (binomial model: independent bits). For
randomized response (p = 1 - q) the two variances are equal and the error is
``sqrt(pq) / ((p - q) sqrt(cells))`` at every density. Every function takes q explicitly: no
formula here assumes a fair-coin D0.

>>> debias(192, 256, Fraction(3, 4), HALF)
1.0
>>> round(stderr_state(0.0, 256, Fraction(3, 4), HALF), 4)
0.125
>>> round(stderr_state(0.0, 256, Fraction(3, 4), Fraction(1, 4)), 4)  # rr at epsilon ln 3
0.0541
"""

from __future__ import annotations

import math
from dataclasses import asdict
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol, cast

from panstream.calibration import validate_epsilon
from panstream.errors import ConfigurationError
from panstream.release.noise import MECHANISMS, NoiseLaw, exact_epsilon

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from panstream.release.ledger import PrivacyLedger
    from panstream.universe import Universe

#: Default confidence level of the intervals reported with a release.
DEFAULT_CONFIDENCE = 0.95

HALF = Fraction(1, 2)

# A laplace count is clamped to [-_FAR, cells + _FAR] (post-processing) so it stays a float-exact
# multiple of 2**-10; leaving that range needs noise of 2**40 counts, probability exp(-eps 2**40).
_FAR = 1 << 40


class Figures:
    """Mixin of a frozen dataclass of public figures (an estimate, a merged estimate, a plan):
    :meth:`to_dict` gives every field in declaration order, JSON-ready. Written once here, the
    lowest module those records share.

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Pair(Figures):
    ...     a: int
    ...     b: float
    >>> Pair(1, 0.5).to_dict()
    {'a': 1, 'b': 0.5}
    """

    def to_dict(self) -> dict[str, Any]:
        """All fields as a JSON-ready dict."""
        return asdict(cast(Any, self))  # every subclass is a dataclass


class CountingTable(Protocol):
    """What a density release reads of a table: a :class:`~panstream.DensityEstimator`, or the
    merged table of a consumer group. Everything but the counts is public."""

    universe: Universe
    ledger: PrivacyLedger
    p: Fraction
    q: Fraction
    epsilon_state: float

    @property
    def size(self) -> int:
        """Number of cells |X|."""
        ...

    def count_ones(self) -> int:
        """Number of ones in the table (sensitivity 1 per person)."""
        ...

    def count_ones_by(self, bucket_cells: int) -> np.ndarray:
        """Number of ones in each run of ``bucket_cells`` consecutive cells."""
        ...


def debias(ones: float, cells: int, p: Fraction | float, q: Fraction | float) -> float:
    """Density of a table or bucket of ``cells`` cells from its (noisy) count of ones:
    ``(ones / cells - q) / (p - q)``.

    >>> debias(192, 256, Fraction(3, 4), Fraction(1, 4))
    1.0
    """
    pf, qf = float(p), float(q)
    return (ones / cells - qf) / (pf - qf)


def stderr_state(density: float, cells: int, p: Fraction | float, q: Fraction | float) -> float:
    """Binomial-model standard error of the density of a table or bucket from the table alone
    (plug-in density clamped to [0, 1]): ``sqrt((f p (1-p) + (1-f) q (1-q)) / cells) / (p - q)``."""
    f = min(1.0, max(0.0, density))
    pf, qf = float(p), float(q)
    return math.sqrt((f * pf * (1 - pf) + (1 - f) * qf * (1 - qf)) / cells) / (pf - qf)


def linear_count(density: float, size: int) -> float:
    """Linear counting of a hashed table (or block) of ``size`` cells, ``-size ln(1 - density)``,
    **unclamped below density 0** and capped where the table saturates.

    A density below 0 is what the noise gave an (almost) empty table: the count extends
    naturally to negative values (near 0 it is ``size * density``, the unbiased scale), so an
    empty table's count is centred on 0 and sums and averages of releases stay unbiased
    (docs/release.md, "Negative estimates"). Only printouts and reports show it clamped at 0.
    Above, a density at or beyond ``1 - 1/size`` saturates: the count is capped at
    ``size * ln(size)`` (the table is too small for the stream; plan a larger one).

    >>> [round(linear_count(d, 1024), 2) for d in (-0.01, 0.0, 0.01)]
    [-10.19, 0.0, 10.29]
    >>> linear_count(1.5, 1024) == linear_count(1 - 1 / 1024, 1024) == 1024 * math.log(1024)
    True
    """
    return -size * math.log1p(-min(density, 1.0 - 1.0 / size))


def distinct_from_density(density: float, size: int, hashed: bool) -> float:
    """Distinct-item count from a density: ``density * size``, or :func:`linear_count` if
    ``hashed``. Never clamped below 0 (either way a negative density gives a negative count);
    a hashed table's count is capped where it saturates, at ``size * ln(size)``.

    >>> distinct_from_density(-0.01, 1024, False), round(distinct_from_density(-0.01, 1024, True), 2)
    (-10.24, -10.19)
    """
    if not hashed:
        return density * size
    return linear_count(density, size)


def stderr_distinct(density: float, se_density: float, size: int, hashed: bool) -> float:
    """Standard error of :func:`distinct_from_density` (delta method for linear counting).

    The slope of linear counting, ``size / (1 - f)``, is taken at the plug-in density ``f``
    clamped to ``[0, 1 - 1/size]``: below 0 it stays ``size``, the slope at an empty table's true
    density 0 (the estimate itself is not clamped, :func:`linear_count`).
    """
    if not hashed:
        return se_density * size
    f = min(max(density, 0.0), 1.0 - 1.0 / size)
    return se_density * size / (1.0 - f)


def occupancy_stderr(density: float, size: int) -> float:
    """Standard deviation of the fraction of occupied buckets of a hashed table of ``size``
    buckets whose expected occupied fraction is ``density``: ``N`` distinct items at load
    ``t = N/size = -ln(1 - density)`` occupy ``size (1 - e^-t)`` buckets on average, with variance
    ``size e^-t (1 - (1 + t) e^-t)`` (Whang, Vander-Zanden and Taylor 1990). Through linear counting
    this is the collision error ``sqrt(size (e^t - t - 1))`` of the distinct count.

    >>> m = 1 << 16  # at load t = 1, through linear counting's slope m e^t:
    >>> round(occupancy_stderr(1 - math.exp(-1), m) * m * math.e, 1), round(math.sqrt(m * (math.e - 2)), 1)
    (217.0, 217.0)
    """
    f = min(max(density, 0.0), 1.0 - 1.0 / size)
    t = -math.log1p(-f)
    e = math.exp(-t)
    return math.sqrt(max(e * (1.0 - (1.0 + t) * e), 0.0) / size)


def noise_quantile(sigma: float, law: NoiseLaw, confidence: float = DEFAULT_CONFIDENCE) -> float:
    """Half-width ``h`` with ``Pr[|N + noise| <= h] = confidence``, ``N ~ Normal(0, sigma**2)``.

    ``noise`` follows ``law`` (counts). Coarse lattices (``epsilon * granularity >= 1/2``, at most
    121 points carry all but 1e-13 of the mass) are summed exactly; a finer lattice is replaced by
    the continuous Laplace(1/epsilon) it approximates, through the closed-form normal-Laplace tail.

    A pure function of public figures (a standard error derived from a released or planned value,
    the law, the level), so its answers are remembered (:func:`functools.lru_cache`, 4,096 of
    them): a map asks for the same few half-widths bucket after bucket and map after map.

    Args:
        sigma: standard deviation of the Gaussian part (counts), >= 0.
        law: the release noise law.
        confidence: in (0, 1).

    Returns:
        The half-width in counts.
    """
    return _noise_quantile(float(sigma), law, float(confidence))


@lru_cache(maxsize=4096)
def _noise_quantile(sigma: float, law: NoiseLaw, confidence: float) -> float:
    tail = (1 - confidence) / 2
    x_step = float(law.epsilon_exact * law.granularity)
    g = float(law.granularity)
    b = 1 / float(law.epsilon_exact)
    if x_step >= 0.5:
        zmax = math.ceil(30 / x_step)
        zs = range(-zmax, zmax + 1)
        terms = [(g * z, law.pmf(z)) for z in zs]  # (lattice point, its mass)

        def survival(h: float) -> float:
            if sigma == 0:
                return math.fsum(w for gz, w in terms if gz > h)
            return math.fsum([w * _phic((h - gz) / sigma) for gz, w in terms])
    else:

        def survival(h: float) -> float:
            return _normal_laplace_survival(h, sigma, b)

    lo, hi = 0.0, 10 * sigma + 40 * b + 1
    for _ in range(64):
        mid = (lo + hi) / 2
        if survival(mid) > tail:
            lo = mid
        else:
            hi = mid
    return hi


def _phic(x: float) -> float:
    return 0.5 * math.erfc(x / math.sqrt(2))


def _phi(x: float) -> float:
    return math.exp(-x * x / 2) / math.sqrt(2 * math.pi)


def _mills(y: float) -> float:
    """Mills ratio ``Phic(y)/phi(y)`` for ``y >= 0``."""
    if y < 30:
        return _phic(y) / _phi(y)
    r = 1 / (y * y)
    return (1 - r + 3 * r * r - 15 * r**3 + 105 * r**4) / y


def _normal_laplace_survival(h: float, sigma: float, b: float) -> float:
    """``Pr[N + L > h]`` for ``N ~ Normal(0, sigma^2)``, ``L ~ Laplace(b)``, ``h >= 0``."""
    if sigma == 0:
        return 0.5 * math.exp(-h / b)
    x, c = h / sigma, sigma / b
    # Pr = Phic(x) + phi(x) [R(c - x) - R(c + x)] / 2, R the Mills ratio, evaluated without overflow.
    t1 = _phi(x) * _mills(c - x) if c >= x else _phic(c - x) * math.exp(c * (c / 2 - x))
    t2 = _phi(x) * _mills(c + x)
    return _phic(x) + 0.5 * (t1 - t2)


def charge(table: Any, epsilon: float, label: str) -> Any:
    """Charge a release of ``epsilon`` to ``table``'s ledger, the one step every family's release
    takes before it draws any noise: refuse a ledger whose epoch label was changed after the
    table got it (``check_ledger_binding``), then charge (raises, charging nothing, when the
    budget does not cover it). Returns the ledger entry."""
    bound = getattr(table, "check_ledger_binding", None)  # the table's own epoch only
    if bound is not None:
        bound()
    return table.ledger.charge(epsilon, label)


def accounting(table: Any, entry: Any, law: NoiseLaw, epsilon: float, epsilon_state: float,
               mechanism: str, confidence: float, sensitivity: int, state_tables: int
               ) -> dict[str, Any]:
    """What every family's release records of its cost and its noise, after :func:`charge`: the
    output, state and pan-private epsilons, the mechanism and its granularity, the ledger after
    the charge (budget, what is left, the charge's time, the state's id) and the sensitivity and
    state tables the noise and the state epsilon were scaled to. Keyword arguments of the
    family's release record."""
    ledger = table.ledger
    return {"epsilon": epsilon, "epsilon_state": epsilon_state,
            "epsilon_total": ledger.epsilon_total(epsilon_state), "mechanism": mechanism,
            "confidence": float(confidence), "noise_granularity": float(law.granularity),
            "budget": ledger.budget, "budget_remaining": ledger.remaining, "time": entry.time,
            "sensitivity": sensitivity, "state_tables": state_tables, "state_id": ledger.epoch}


def output_law(epsilon: float, mechanism: str, confidence: float = DEFAULT_CONFIDENCE,
               sensitivity: int = 1, state_tables: int = 1, what: str = "release epsilon"
               ) -> tuple[NoiseLaw, float]:
    """Validate a release's arguments and build its noise law.

    The law for sensitivity ``s`` at ``epsilon`` is the sensitivity-1 law at ``epsilon/s`` (an exact
    rational), whose pmf ratio over a shift of ``s`` lattice counts is ``exp(epsilon)``.

    Returns:
        ``(law, epsilon_out)``: the noise law (in counts) and the realized output epsilon
        (``epsilon`` exactly: a float is dyadic).

    Raises:
        ConfigurationError: invalid epsilon, mechanism, confidence, sensitivity or state_tables.
    """
    eps = validate_epsilon(epsilon, what)
    if mechanism not in MECHANISMS:
        msg = f"unknown mechanism {mechanism!r}: use one of {', '.join(MECHANISMS)}"
        raise ConfigurationError(msg)
    if not (isinstance(confidence, (int, float)) and 0 < confidence < 1):
        msg = f"confidence must lie strictly between 0 and 1, got {confidence!r}"
        raise ConfigurationError(msg)
    for name, k in (("sensitivity", sensitivity), ("state_tables", state_tables)):
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            msg = f"{name} must be a positive integer, got {k!r}"
            raise ConfigurationError(msg)
    try:
        law = NoiseLaw.for_mechanism(mechanism, exact_epsilon(eps) / sensitivity)
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from None
    return law, float(law.epsilon_exact * sensitivity)


def noisy_count(count: int, law: NoiseLaw, mechanism: str, cells: int) -> float:
    """``count`` plus one exact draw of ``law``, as a float; the noise itself is not kept.

    ``geometric`` counts are clamped to ``[0, cells]`` and ``laplace`` counts to a range they leave
    with probability ``exp(-epsilon 2**40)`` (both post-processing), so the result is exactly
    representable (a multiple of 2**-10 far below 2**53).
    """
    v = count + law.sample()  # exact Fraction
    if mechanism == "geometric":
        v = min(max(v, Fraction(0)), Fraction(cells))
    else:
        v = min(max(v, Fraction(-_FAR)), Fraction(cells + _FAR))
    out = float(v)
    del v
    return out
