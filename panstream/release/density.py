"""The output stage: publish a noisy density and distinct count, charged to the privacy ledger.

Where the noise goes. One person changes at most one cell, hence the number of ones by at most 1:
the count of ones has sensitivity 1. The release adds noise of scale ``1/epsilon`` to that *count*
(equivalently ``Lap(1/(epsilon |X|))`` to ``theta``) and only then debiases:

    density = ((ones + noise) / |X| - q) / (p - q).

Debiasing is post-processing, so the density is exactly as private as the noisy count: epsilon-DP.
Adding ``Lap(1/(epsilon |X|))`` *after* the ``1/(p - q)`` debiasing, as the survey's
``4(theta - 1/2)/epsilon + Lap(1/(epsilon |X|))`` reads literally, would give a statistic of
sensitivity ``4/(epsilon |X|)`` with noise of scale ``1/(epsilon |X|)``: only about 4-DP whatever
epsilon is. See docs/release.md for the derivation.

Mechanisms (exact samplers in :mod:`panstream.release.noise`): ``"laplace"`` (discretized Laplace on a
2**-10 lattice, unclamped so the density stays unbiased) and ``"geometric"`` (two-sided geometric,
integer noise, released count clamped to ``[0, |X|]``). The epsilon reported is the realized one.

Everything in a :class:`Release` is computed from the noisy count and public parameters only; the
noise itself is not kept. Nothing in it is clamped below 0 (the one rule of
:mod:`panstream.release.honesty`): sums and averages of releases stay unbiased;
:func:`format_release` shows the figures clamped and says so. The release reads its table through
the :class:`~panstream.release.stats.CountingTable` protocol and imports no estimator: estimators
call it (``est.release``).

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
from statistics import NormalDist
from typing import Any

from panstream.release.honesty import (
    advice,
    clamp_note,
    count_cap,
    flag_line,
    interval_text,
    noise_dominated,
)
from panstream.release.ledger import group_privacy
from panstream.release.schema import estimate_fields
from panstream.release.stats import (
    DEFAULT_CONFIDENCE,
    CountingTable,
    accounting,
    charge,
    debias,
    distinct_from_density,
    noise_quantile,
    noisy_count,
    occupancy_stderr,
    output_law,
    stderr_distinct,
    stderr_state,
)
from panstream.release.telemetry import TOTAL_TELEMETRY_NOTE


@dataclass(frozen=True)
class Release:
    """A published, noisy estimate (safe to print, store and share).

    Attributes:
        density: debiased noisy density ``((noisy_ones/|X|) - q) / (p - q)``; unbiased for
            ``laplace``, so it may fall slightly outside [0, 1] (clamp it yourself if needed).
        distinct: distinct count from ``density`` (linear counting for hashed universes), never
            clamped: below 0 when the density is (an empty table's, about half the time); a
            hashed table's is capped only where it saturates, at ``size ln size``.
        noisy_ones: the noisy count of ones that was released (all else derives from it).
        epsilon: realized output epsilon of this release.
        epsilon_state: realized state epsilon of the table.
        epsilon_total: pan-private epsilon after this release: ``epsilon_state`` plus all output
            epsilon spent by this state, this release included.
        mechanism: ``"laplace"`` or ``"geometric"``.
        confidence: level of the intervals below (0.95 by default).
        density_low, density_high: interval for the density combining the binomial state noise
            and the release noise (approximate: plug-in density, no boundary correction).
        distinct_low, distinct_high: the same interval mapped to distinct counts (unclamped, as
            ``distinct``); for a hashed universe it also includes the hash-collision (occupancy)
            error of linear counting.
        stderr_density: standard deviation of ``density`` from both noise sources.
        size: number of cells |X|; universe: its spec; p, q: the exact D1 and D0 probabilities (as
            strings).
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
    q: str
    noise_granularity: float
    budget: float
    budget_remaining: float
    time: float
    sensitivity: int = 1
    state_tables: int = 1
    #: The random id of the state (its ledger's epoch label, :data:`~panstream.release.ledger.
    #: PrivacyLedger.epoch`) this release was charged to: ``report --same-state`` checks it.
    #: ``None`` for a state of panstream 0.1 (no label).
    state_id: str | None = None

    def group_privacy(self, k: int) -> float:
        """Pan-private guarantee for a group of ``k`` people: ``k * epsilon_total``.

        Raises:
            ValueError: ``k`` is not a positive integer.
        """
        return group_privacy(k, self.epsilon_total)

    @property
    def noise_dominated(self) -> bool:
        """True when the distinct count's interval is wider than the count
        (:func:`panstream.release.honesty.noise_dominated`)."""
        return noise_dominated(self.distinct, self.distinct_low, self.distinct_high)

    @property
    def stderr_distinct(self) -> float:
        """Standard deviation of ``distinct`` (``stderr_density`` through linear counting if hashed)."""
        return stderr_distinct(self.density, self.stderr_density, self.size,
                               self.universe.startswith("hashed"))

    def noise_halves(self) -> tuple[float, float]:
        """Half-widths (distinct counts, at ``confidence``) of the table's noise alone and of the
        release's noise alone: the two parts of the interval, for :func:`advice`."""
        law, _ = output_law(self.epsilon, self.mechanism, self.confidence, self.sensitivity)
        p, q = Fraction(self.p), Fraction(self.q)
        scale = self.size * float(p - q)
        z = NormalDist().inv_cdf(0.5 + self.confidence / 2)
        hashed = self.universe.startswith("hashed")
        state = stderr_distinct(self.density, z * stderr_state(self.density, self.size, p, q),
                                self.size, hashed)
        rel = stderr_distinct(self.density, noise_quantile(0.0, law, self.confidence) / scale,
                              self.size, hashed)
        return state, rel

    def advice(self) -> str:
        """What would make a noise-dominated count usable (``""`` when it is not)."""
        if not self.noise_dominated:
            return ""
        state, rel = self.noise_halves()
        return advice(self.distinct, self.distinct_low, self.distinct_high, state_half=state,
                      release_half=rel, epsilon_state=self.epsilon_state / self.state_tables,
                      epsilon_release=self.epsilon, cells=self.size)

    def to_dict(self) -> dict[str, Any]:
        """The common JSON shape (:mod:`panstream.release.schema`): the distinct count as
        ``estimate``, the density under ``extras``, and the old top-level names as aliases."""
        old = asdict(self)
        extras = {k: old[k] for k in ("density", "density_low", "density_high", "stderr_density",
                                      "noisy_ones", "size", "p", "q", "noise_granularity",
                                      "sensitivity", "state_tables", "mechanism")}
        return estimate_fields(
            family="density", universe=self.universe, statistic="distinct",
            estimate=self.distinct, low=self.distinct_low, high=self.distinct_high,
            stderr=self.stderr_distinct, confidence=self.confidence,
            epsilon_state=self.epsilon_state, epsilon_release=self.epsilon,
            epsilon_total=self.epsilon_total, extras=extras, aliases=old)


def release(est: CountingTable, epsilon: float, mechanism: str = "laplace", *,
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
    law, eps_out = output_law(epsilon, mechanism, confidence, sensitivity, state_tables)
    eps_state = est.epsilon_state * state_tables

    entry = charge(est, eps_out, mechanism)  # raises before any noise is drawn
    size = est.size
    noisy_ones = noisy_count(est.count_ones(), law, mechanism, size)

    p, q = est.p, est.q
    hashed = est.universe.is_hashed
    scale = size * (float(p) - float(q))  # counts per unit of density
    density = debias(noisy_ones, size, p, q)
    se_state = stderr_state(density, size, p, q)
    h = noise_quantile(se_state * scale, law, confidence) / scale
    se_total = math.sqrt(se_state**2 + law.variance / scale**2)
    lo, hi = density - h, density + h
    dlo, dhi = lo, hi
    if hashed:
        # The distinct count of a hashed table also carries the hash-collision (occupancy) error:
        # N items occupy a random number of buckets, sd sqrt(e^-t (1 - (1 + t) e^-t) / m) in
        # density at load t = N/m (plug-in t from the noisy density). Linear counting maps it to
        # the variance m (e^t - t - 1) that 'panstream plan' reports (Whang et al. 1990).
        se_occ = occupancy_stderr(density, size)
        h2 = noise_quantile(math.hypot(se_state, se_occ) * scale, law, confidence) / scale
        dlo, dhi = density - h2, density + h2
    return Release(
        density=density,
        distinct=distinct_from_density(density, size, hashed),
        noisy_ones=noisy_ones,
        density_low=lo,
        density_high=hi,
        distinct_low=distinct_from_density(dlo, size, hashed),
        distinct_high=distinct_from_density(dhi, size, hashed),
        stderr_density=se_total,
        size=size,
        universe=est.universe.spec,
        p=str(est.p),
        q=str(est.q),
        **accounting(est, entry, law, eps_out, eps_state, mechanism, confidence, sensitivity,
                     state_tables),
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
    top = count_cap(r.universe, r.size)
    clamped = (r.distinct_low < 0 or r.distinct_high > top or r.density_low < 0
               or r.density_high > 1)
    flag = flag_line(r.distinct, r.distinct_low, r.distinct_high, r.confidence, r.advice())
    ci = f"{pct} CI "
    lines = [
        f"panstream release: {r.mechanism} mechanism, epsilon {r.epsilon:g} over {r.universe} "
        f"({r.size:,} cells)",
        "  distinct (estimated)  "
        + interval_text(r.distinct, r.distinct_low, r.distinct_high, ci, width=14, top=top),
        *([flag] if flag else []),
        "  density               "
        + interval_text(r.density, r.density_low, r.density_high, ci, width=14, fmt=".6f", top=1),
        *([clamp_note("--json", upper=math.isfinite(top) or r.density_high > 1)] if clamped else []),
        f"  noisy count of ones   {r.noisy_ones:>14,.3f}",
        f"  privacy               output epsilon {r.epsilon:g} + state epsilon "
        f"{r.epsilon_state:.6g} -> pan-private epsilon_total {r.epsilon_total:.6g} "
        f"{TOTAL_TELEMETRY_NOTE}",
        f"  group of k people     k x {r.epsilon_total:.6g} (e.g. k = 2: {r.group_privacy(2):.6g})",
        *([f"  merged shards         one person changes up to {r.state_tables} stored table(s) "
           f"(state epsilon counted {r.state_tables}x) and the count of ones by up to "
           f"{r.sensitivity} (noise scaled to it)"] if r.sensitivity > 1 or r.state_tables > 1
          else []),
        f"  output budget         {r.budget - r.budget_remaining:g} of {r.budget:g} spent, "
        f"{r.budget_remaining:g} left",
    ]
    return "\n".join(lines)
