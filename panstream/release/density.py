"""The output stage: publish a noisy density and distinct count, charged to the privacy ledger.

Where the noise goes. One person changes at most one cell, hence the number of ones by at most 1:
the count of ones has sensitivity 1. The release adds noise of scale ``1/epsilon`` to that *count*
(equivalently ``Lap(1/(epsilon |X|))`` to ``theta``) and only then debiases:

    density = ((ones + noise) / |X| - 1/2) / (p - 1/2).

Debiasing is post-processing, so the density is exactly as private as the noisy count: epsilon-DP.
Adding ``Lap(1/(epsilon |X|))`` *after* the ``1/(p - 1/2)`` debiasing, as the survey's
``4(theta - 1/2)/epsilon + Lap(1/(epsilon |X|))`` reads literally, would give a statistic of
sensitivity ``4/(epsilon |X|)`` with noise of scale ``1/(epsilon |X|)``: only about 4-DP whatever
epsilon is. See docs/release.md for the derivation.

Mechanisms (exact samplers in :mod:`panstream.release.noise`): ``"laplace"`` (discretized Laplace on a
2**-10 lattice, unclamped so the density stays unbiased) and ``"geometric"`` (two-sided geometric,
integer noise, released count clamped to ``[0, |X|]``). The epsilon reported is the realized one.

Everything in a :class:`Release` is computed from the noisy count and public parameters only; the
noise itself is not kept.

>>> import panstream as ps
>>> est = ps.DensityEstimator(ps.Universe.range(1 << 12), epsilon=1.0, budget=1.0)
>>> _ = est.update(range(1024))
>>> r = est.release(epsilon=0.5, mechanism="geometric")
>>> r.epsilon, r.epsilon_total == r.epsilon_state + 0.5, est.ledger.remaining
(0.5, True, 0.5)
>>> r.group_privacy(2) == 2 * r.epsilon_total
True
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from panstream.calibration import validate_epsilon
from panstream.errors import ConfigurationError
from panstream.estimators.density import distinct_from_density, stderr_density
from panstream.release.ledger import group_privacy
from panstream.release.noise import MECHANISMS, NoiseLaw, exact_epsilon

if TYPE_CHECKING:  # pragma: no cover
    from panstream.estimators.density import DensityEstimator

#: Default confidence level of the interval reported with a release.
DEFAULT_CONFIDENCE = 0.95

# The laplace release is clamped to [-_FAR, |X| + _FAR] (post-processing) so it stays a float-exact
# multiple of 2**-10; leaving that range needs noise of 2**40 counts, probability exp(-eps 2**40).
_FAR = 1 << 40


@dataclass(frozen=True)
class Release:
    """A published, noisy estimate (safe to print, store and share).

    Attributes:
        density: debiased noisy density ``((noisy_ones/|X|) - 1/2) / (p - 1/2)``; unbiased for
            ``laplace``, so it may fall slightly outside [0, 1] (clamp it yourself if needed).
        distinct: distinct count from ``density`` (linear counting for hashed universes).
        noisy_ones: the noisy count of ones that was released (all else derives from it).
        epsilon: realized output epsilon of this release.
        epsilon_state: realized state epsilon of the table.
        epsilon_total: pan-private epsilon after this release: ``epsilon_state`` plus all output
            epsilon spent by this state, this release included.
        mechanism: ``"laplace"`` or ``"geometric"``.
        confidence: level of the intervals below (0.95 by default).
        density_low, density_high: interval for the density combining the binomial state noise
            and the release noise (approximate: plug-in density, no boundary correction).
        distinct_low, distinct_high: the same interval mapped to distinct counts.
        stderr_density: standard deviation of ``density`` from both noise sources.
        size: number of cells |X|; universe: its spec; p: the exact D1 probability (as a string).
        noise_granularity: lattice step of the release noise in counts (1 or 2**-10).
        budget, budget_remaining: the output budget and what is left after this release.
        time: UNIX time of the release (as recorded in the ledger).
        sensitivity: how much one person can change the released count of ones (1 for one table;
            more for a sum merge of shards an item may reach several of); the noise is scaled to it,
            so ``epsilon`` holds whatever it is.
        state_tables: how many stored tables one person's arrivals can change (1 for one table; the
            number of shards when one item's messages may reach several partitions). The reported
            ``epsilon_state`` already includes this factor (group privacy over the tables).
    """

    density: float
    distinct: float
    noisy_ones: float
    epsilon: float
    epsilon_state: float
    epsilon_total: float
    mechanism: str
    confidence: float
    density_low: float
    density_high: float
    distinct_low: float
    distinct_high: float
    stderr_density: float
    size: int
    universe: str
    p: str
    noise_granularity: float
    budget: float
    budget_remaining: float
    time: float
    sensitivity: int = 1
    state_tables: int = 1

    def group_privacy(self, k: int) -> float:
        """Pan-private guarantee for a group of ``k`` people: ``k * epsilon_total``.

        Raises:
            ValueError: ``k`` is not a positive integer.
        """
        return group_privacy(k, self.epsilon_total)

    def to_dict(self) -> dict[str, Any]:
        """All fields as a JSON-serializable dict."""
        return asdict(self)


def noise_quantile(sigma: float, law: NoiseLaw, confidence: float = DEFAULT_CONFIDENCE) -> float:
    """Half-width ``h`` with ``Pr[|N + noise| <= h] = confidence``, ``N ~ Normal(0, sigma**2)``.

    ``noise`` follows ``law`` (counts). Coarse lattices (``epsilon * granularity >= 1/2``, at most
    121 points carry all but 1e-13 of the mass) are summed exactly; a finer lattice is replaced by
    the continuous Laplace(1/epsilon) it approximates, through the closed-form normal-Laplace tail.

    Args:
        sigma: standard deviation of the Gaussian part (counts), >= 0.
        law: the release noise law.
        confidence: in (0, 1).

    Returns:
        The half-width in counts.
    """
    tail = (1 - confidence) / 2
    x_step = float(law.epsilon_exact * law.granularity)
    g = float(law.granularity)
    b = 1 / float(law.epsilon_exact)
    if x_step >= 0.5:
        zmax = math.ceil(30 / x_step)
        zs = range(-zmax, zmax + 1)
        ws = [law.pmf(z) for z in zs]

        def survival(h: float) -> float:
            if sigma == 0:
                return math.fsum(w for z, w in zip(zs, ws, strict=True) if g * z > h)
            return math.fsum(w * _phic((h - g * z) / sigma) for z, w in zip(zs, ws, strict=True))
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


def release(est: DensityEstimator, epsilon: float, mechanism: str = "laplace", *,
            confidence: float = DEFAULT_CONFIDENCE, sensitivity: int = 1,
            state_tables: int = 1) -> Release:
    """Publish a noisy density and distinct count of ``est``, charged to ``est.ledger``.

    Steps, in this order: validate; charge the ledger (refusing, before any noise is drawn, if the
    budget is short); read the count of ones; add exact noise to the count; debias; derive the
    interval from the noisy count and public parameters only.

    Args:
        est: the estimator.
        epsilon: output epsilon of this release (realized exactly by the samplers).
        mechanism: ``"laplace"`` or ``"geometric"``.
        confidence: level of the reported interval, in (0, 1).
        sensitivity: bound on how much one person changes ``est``'s count of ones (1 for a table
            fed a stream; ``K`` for shards laid end to end when an item may reach ``K`` of them).
            The noise is calibrated to it (scale ``sensitivity/epsilon``), so the release stays
            ``epsilon``-DP and the ledger is charged ``epsilon``.
        state_tables: how many stored tables one person can change; the reported state epsilon is
            ``state_tables * est.epsilon_state`` (group privacy over independent tables).

    Returns:
        The :class:`Release`.

    Raises:
        ConfigurationError: invalid epsilon, mechanism or confidence.
        BudgetExhaustedError: the release would exceed the output budget; nothing is charged
            and no noise is drawn. The message says how much is left.

    Example:
        >>> import panstream as ps
        >>> est = ps.DensityEstimator("range:1000", budget=0.5)
        >>> est.release(1.0)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        panstream.errors.BudgetExhaustedError: release of epsilon 1 refused: ...
    """
    eps = validate_epsilon(epsilon, "release epsilon")
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
        # Noise for sensitivity s at epsilon: the sensitivity-1 law at epsilon/s (exact rational),
        # whose pmf ratio over a shift of s lattice counts is exp(epsilon).
        law = NoiseLaw.for_mechanism(mechanism, exact_epsilon(eps) / sensitivity)
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from None
    eps_out = float(law.epsilon_exact * sensitivity)  # == eps exactly (a float is dyadic)
    eps_state = est.epsilon_state * state_tables

    entry = est.ledger.charge(eps_out, mechanism)  # raises before any noise is drawn
    size = est.size
    noisy = est.count_ones() + law.sample()  # exact Fraction; the noise is not kept
    if mechanism == "geometric":
        noisy = min(max(noisy, Fraction(0)), Fraction(size))  # post-processing
    else:
        noisy = min(max(noisy, Fraction(-_FAR)), Fraction(size + _FAR))
    noisy_ones = float(noisy)  # exact: a multiple of 2**-10 below 2**42
    del noisy

    pf = float(est.p)
    hashed = est.universe.kind == "hashed"
    scale = size * (pf - 0.5)  # counts per unit of density
    density = (noisy_ones / size - 0.5) / (pf - 0.5)
    se_state = stderr_density(density, est.p, size)
    sigma_count = se_state * scale
    h = noise_quantile(sigma_count, law, confidence) / scale
    se_total = math.sqrt(se_state**2 + law.variance / scale**2)
    lo, hi = density - h, density + h
    return Release(
        density=density,
        distinct=distinct_from_density(density, size, hashed),
        noisy_ones=noisy_ones,
        epsilon=eps_out,
        epsilon_state=eps_state,
        epsilon_total=est.ledger.epsilon_total(eps_state),
        mechanism=mechanism,
        confidence=float(confidence),
        density_low=lo,
        density_high=hi,
        distinct_low=distinct_from_density(lo, size, hashed),
        distinct_high=distinct_from_density(hi, size, hashed),
        stderr_density=se_total,
        size=size,
        universe=est.universe.spec,
        p=str(est.p),
        noise_granularity=float(law.granularity),
        budget=est.ledger.budget,
        budget_remaining=est.ledger.remaining,
        time=entry.time,
        sensitivity=sensitivity,
        state_tables=state_tables,
    )


def format_release(r: Release) -> str:
    """A human summary of a release (several lines, no trailing newline).

    Example:
        >>> import panstream as ps
        >>> est = ps.DensityEstimator("range:4096")
        >>> print(format_release(est.release(0.5)).splitlines()[0])  # doctest: +ELLIPSIS
        panstream release: laplace mechanism, epsilon 0.5 over range:4096 (4,096 cells)
    """
    pct = f"{100 * r.confidence:g}%"
    lines = [
        f"panstream release: {r.mechanism} mechanism, epsilon {r.epsilon:g} over {r.universe} "
        f"({r.size:,} cells)",
        f"  distinct (estimated)  {r.distinct:>14,.0f}   {pct} CI [{r.distinct_low:,.0f}, "
        f"{r.distinct_high:,.0f}]",
        f"  density               {r.density:>14.6f}   {pct} CI [{r.density_low:.6f}, "
        f"{r.density_high:.6f}]",
        f"  noisy count of ones   {r.noisy_ones:>14,.3f}",
        f"  privacy               output epsilon {r.epsilon:g} + state epsilon "
        f"{r.epsilon_state:.6g} -> pan-private epsilon_total {r.epsilon_total:.6g}",
        f"  group of k people     k x {r.epsilon_total:.6g} (e.g. k = 2: {r.group_privacy(2):.6g})",
        *([f"  merged shards         one person changes up to {r.state_tables} stored table(s) "
           f"(state epsilon counted {r.state_tables}x) and the count of ones by up to "
           f"{r.sensitivity} (noise scaled to it)"] if r.sensitivity > 1 or r.state_tables > 1
          else []),
        f"  output budget         {r.budget - r.budget_remaining:g} of {r.budget:g} spent, "
        f"{r.budget_remaining:g} left",
    ]
    return "\n".join(lines)
