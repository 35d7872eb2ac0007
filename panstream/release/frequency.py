"""The output stage of the frequency estimator: a noisy counter histogram, charged to the ledger.

Where the noise goes. One person is one cell: with or without their arrivals, and for any fixed
initial table, only their counter differs (by their count mod k), so the histogram H (H(j) = number
of counters equal to j) changes in at most two entries, by one each: L1 sensitivity 2. The release
adds independent exact noise of scale ``2/epsilon`` (:func:`panstream.release.stats.output_law`
with sensitivity 2) to **every** H(j), which makes the vector epsilon-DP (Laplace mechanism on an
L1-sensitivity-2 vector), charges the ledger once, and only then debiases
(:mod:`panstream.release.incidence`): every statistic and interval in a :class:`FrequencyRelease`
is post-processing of the noisy histogram and public parameters.

``"geometric"`` clamps each noisy count to ``[0, cells]`` (post-processing; near 0 this biases the
small counts up). ``"laplace"`` leaves them unbiased.

The release reads the table through :class:`CounterHistogram` and imports no estimator;
:meth:`panstream.FrequencyEstimator.release` calls :func:`release_frequency`. Shards of a consumer
group keyed by the item can be released together with :func:`sum_histograms`.

>>> import panstream as ps
>>> est = ps.FrequencyEstimator("range:4096", epsilon=1.0, modulus=16)
>>> _ = est.update_indices(np.repeat(np.arange(600), 2))   # 600 cells seen twice
>>> r = est.release(0.5)
>>> r.epsilon, r.sensitivity, len(r.noisy_histogram), est.ledger.remaining
(0.5, 2, 16, 0.5)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any, Protocol

import numpy as np

from panstream.errors import ConfigurationError, StateError
from panstream.release.honesty import advice, flag_line, interval_text, noise_dominated, shown
from panstream.release.incidence import IncidenceModel, Interval
from panstream.release.ledger import PrivacyLedger, ShardLedger, group_privacy
from panstream.release.schema import estimate_fields
from panstream.release.stats import DEFAULT_CONFIDENCE, accounting, charge, noisy_count, output_law
from panstream.release.telemetry import TOTAL_TELEMETRY_NOTE
from panstream.universe import Universe

__all__ = ["CounterHistogram", "FrequencyRelease", "FrequencySummary", "MergedHistograms",
           "format_frequency_release", "release_frequency", "summarize", "sum_histograms"]

#: L1 sensitivity of the counter histogram to one person (one counter moves between two values).
SENSITIVITY = 2

#: Default threshold t of the cropped mean and the heavy fraction (``min(4, k - 1)``): each count
#: below t adds its own noisy estimate to them, so a small t keeps their intervals narrow.
DEFAULT_THRESHOLD = 4


class CounterHistogram(Protocol):
    """What a frequency release reads: a :class:`~panstream.FrequencyEstimator`, or the summed
    histograms of a keyed consumer group (:class:`MergedHistograms`). Everything but the histogram
    is public."""

    universe: Universe
    ledger: PrivacyLedger
    alpha: Fraction
    modulus: int
    epsilon_state: float

    @property
    def size(self) -> int:
        """Number of counters the histogram counts."""
        ...

    def histogram(self) -> np.ndarray:
        """H(0..k-1) (``int64``; the caller zeroes it once used)."""
        ...


@dataclass(frozen=True)
class FrequencySummary:
    """The standard frequency statistics of a histogram, each an :class:`Interval`.

    Attributes:
        t: the threshold of ``cropped_mean`` and ``heavy`` (1 <= t < k).
        incidence: ``N_hat_j`` for j = 0..k-1 (cells whose count is j mod k; j = 0 includes cells
            never seen).
        present: cells seen at least once (``|X| - N_hat_0``).
        once: cells seen exactly once (``N_hat_1``); fraction_once: ``once / present``.
        returning: cells seen at least twice; fraction_returning: ``returning / present``.
        cropped_mean: mean of min(count, t) over present cells.
        heavy: fraction of present cells seen at least t times.
    """

    t: int
    incidence: tuple[Interval, ...]
    present: Interval
    once: Interval
    fraction_once: Interval
    returning: Interval
    fraction_returning: Interval
    cropped_mean: Interval
    heavy: Interval

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (intervals as dicts, ``nan`` as ``None``)."""
        out: dict[str, Any] = {"t": self.t,
                               "incidence": [iv.to_dict() for iv in self.incidence]}
        for name in ("present", "once", "fraction_once", "returning", "fraction_returning",
                     "cropped_mean", "heavy"):
            out[name] = getattr(self, name).to_dict()
        return out


def check_threshold(t: int | None, modulus: int) -> int:
    """``t`` (default ``min(4, modulus - 1)``) checked to be an integer in ``1..modulus-1``.

    Raises:
        ConfigurationError: out of range or not an integer.
    """
    if t is None:
        return min(DEFAULT_THRESHOLD, modulus - 1)
    if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 1 <= t < modulus:
        msg = (f"the threshold t must be an integer in 1..{modulus - 1} for modulus {modulus} "
               f"(counts of {modulus} or more alias), got {t!r}")
        raise ConfigurationError(msg)
    return int(t)


def summarize(model: IncidenceModel, t: int | None = None) -> FrequencySummary:
    """The :class:`FrequencySummary` of a model, at threshold ``t`` (default ``min(4, k - 1)``)."""
    t = check_threshold(t, model.modulus)
    return FrequencySummary(
        t=t,
        incidence=tuple(model.incidence_intervals()),
        present=model.present(),
        once=model.count(1),
        fraction_once=model.fraction_once(),
        returning=model.at_least(2),
        fraction_returning=model.fraction_at_least(2),
        cropped_mean=model.cropped_mean(t),
        heavy=model.fraction_at_least(t),
    )


@dataclass(frozen=True)
class FrequencyRelease:
    """A published, noisy frequency release (safe to print, store and share).

    Attributes:
        noisy_histogram: the released noisy H(0..k-1); everything else derives from it and public
            parameters.
        stats: the :class:`FrequencySummary` (incidence, present, once, returning, cropped mean,
            heavy fraction), each with a ``confidence`` interval combining the counters' own noise
            (plug-in, normal) and the release noise (see :mod:`panstream.release.incidence`).
        modulus: k; alpha: the exact alpha (a string); cells: counters in the histogram.
        universe: the universe spec.
        epsilon: realized output epsilon of this release; epsilon_state: realized state epsilon
            (times ``state_tables``); epsilon_total: state epsilon plus all output epsilon spent by
            this state, this release included.
        mechanism, confidence, noise_granularity: as for the density release.
        budget, budget_remaining, time: the ledger after this release.
        sensitivity: L1 sensitivity the noise is scaled to (2 for one table, or a keyed group).
        state_tables: stored tables one person can change (1 for one table or a keyed group).
    """

    noisy_histogram: tuple[float, ...]
    stats: FrequencySummary
    modulus: int
    alpha: str
    cells: int
    universe: str
    epsilon: float
    epsilon_state: float
    epsilon_total: float
    mechanism: str
    confidence: float
    noise_granularity: float
    budget: float
    budget_remaining: float
    time: float
    sensitivity: int = SENSITIVITY
    state_tables: int = 1
    #: The random id of the state (its ledger's epoch label, :data:`~panstream.release.ledger.
    #: PrivacyLedger.epoch`) this release was charged to: ``report --same-state`` checks it.
    #: ``None`` for a state of panstream 0.1 (no label).
    state_id: str | None = None

    def model(self) -> IncidenceModel:
        """The :class:`IncidenceModel` of this release, for any other statistic
        (``r.model().at_least(5)``, ``r.model().cropped_mean(3)``): post-processing, free."""
        law, _ = output_law(self.epsilon, self.mechanism, self.confidence, self.sensitivity)
        return IncidenceModel(self.noisy_histogram, self.cells, self.modulus, Fraction(self.alpha),
                              law, self.confidence)

    def group_privacy(self, k: int) -> float:
        """Pan-private guarantee for a group of ``k`` people: ``k * epsilon_total``."""
        return group_privacy(k, self.epsilon_total)

    @property
    def noise_dominated(self) -> bool:
        """True when the present cells' interval is wider than their count."""
        p = self.stats.present
        return noise_dominated(p.value, p.low, p.high)

    def advice(self) -> str:
        """What would make a noise-dominated count of present cells usable (``""`` if it is not).
        The release's part of the present count is ``sd(noise) / alpha`` (it enters through
        ``N_hat_0``); the rest of the interval is the counters' own noise."""
        p = self.stats.present
        if not noise_dominated(p.value, p.low, p.high):
            return ""
        law, _ = output_law(self.epsilon, self.mechanism, self.confidence, self.sensitivity)
        half = (p.high - p.low) / 2
        z = half / p.stderr if p.stderr > 0 else 1.96
        rel = z * math.sqrt(law.variance) / float(Fraction(self.alpha))
        state = math.sqrt(max(0.0, half * half - rel * rel))
        return advice(p.value, p.low, p.high, state_half=state, release_half=rel,
                      epsilon_state=self.epsilon_state / self.state_tables,
                      epsilon_release=self.epsilon, cells=self.cells, unit="present")

    def to_dict(self) -> dict[str, Any]:
        """The common JSON shape (:mod:`panstream.release.schema`): the present cells as
        ``estimate``, the other statistics under ``extras["stats"]`` (``nan`` as ``None``), and
        the old top-level names as aliases."""
        d = asdict(self)
        d["noisy_histogram"] = list(self.noisy_histogram)
        d["stats"] = self.stats.to_dict()
        p = self.stats.present
        extras = {k: d[k] for k in ("stats", "noisy_histogram", "modulus", "alpha", "cells",
                                    "noise_granularity", "sensitivity", "state_tables",
                                    "mechanism")}
        return estimate_fields(
            family="frequency", universe=self.universe, statistic="present", estimate=p.value,
            low=p.low, high=p.high, stderr=p.stderr, confidence=self.confidence,
            epsilon_state=self.epsilon_state, epsilon_release=self.epsilon,
            epsilon_total=self.epsilon_total, extras=extras, aliases=d)


def release_frequency(table: CounterHistogram, epsilon: float, mechanism: str = "laplace", *,
                      confidence: float = DEFAULT_CONFIDENCE, t: int | None = None,
                      sensitivity: int = SENSITIVITY, state_tables: int = 1) -> FrequencyRelease:
    """Publish the noisy counter histogram of ``table`` and its statistics, charged to its ledger.

    Steps, in this order: validate; charge the ledger once (refusing, before any noise is drawn,
    if the budget is short); read the histogram; add exact noise of scale ``sensitivity/epsilon`` to
    every entry and zero the exact histogram; debias and derive the intervals from the noisy
    histogram and public parameters only.

    Args:
        table: the estimator (or summed group histograms).
        epsilon: output epsilon of this release (realized exactly by the samplers).
        mechanism: ``"laplace"`` or ``"geometric"``.
        confidence: level of the intervals, in (0, 1).
        t: threshold of the cropped mean and the heavy fraction, ``1..k-1`` (default
            ``min(4, k - 1)``).
        sensitivity: L1 change of the histogram one person can cause (2 for one table or a keyed
            group; more when one person's arrivals may reach several shards).
        state_tables: stored tables one person can change (reported epsilon_state is times this).

    Raises:
        ConfigurationError: invalid epsilon, mechanism, confidence, t or sensitivity.
        BudgetExhaustedError: the release would exceed the output budget; nothing is charged and no
            noise is drawn.

    Example (one noisy count per counter value; a refused release is as for the density family,
    :func:`panstream.release.density.release`):
        >>> import panstream as ps
        >>> est = ps.FrequencyEstimator("range:1000", modulus=16, budget=1.0)
        >>> r = est.release(1.0)
        >>> len(r.noisy_histogram), r.epsilon, est.ledger.remaining
        (16, 1.0, 0.0)
    """
    law, eps_out = output_law(epsilon, mechanism, confidence, sensitivity, state_tables)
    k = table.modulus
    t = check_threshold(t, k)
    eps_state = table.epsilon_state * state_tables

    entry = charge(table, eps_out, mechanism)  # raises before any noise is drawn
    cells = table.size
    hist = table.histogram()
    try:
        noisy = tuple(noisy_count(int(h), law, mechanism, cells) for h in hist)
    finally:
        hist.fill(0)
    model = IncidenceModel(noisy, cells, k, table.alpha, law, float(confidence))
    return FrequencyRelease(
        noisy_histogram=noisy,
        stats=summarize(model, t),
        modulus=k,
        alpha=str(table.alpha),
        cells=cells,
        universe=table.universe.spec,
        **accounting(table, entry, law, eps_out, eps_state, mechanism, confidence, sensitivity,
                     state_tables),
    )


def _noisy(iv: Interval) -> str:
    if iv.high < 0:
        return ""  # interval_text says it: indistinguishable from 0
    return "  (noise-dominated)" if noise_dominated(iv.value, iv.low, iv.high) else ""


def _fmt_count(iv: Interval, pct: str, top: float = math.inf) -> str:
    """A count and its interval, shown clamped to ``[0, top]`` (the release keeps them as drawn)."""
    if math.isnan(iv.value):
        return "undefined (no present cells estimated)"
    return interval_text(iv.value, iv.low, iv.high, f"{pct} CI ", top=top) + _noisy(iv)


def _fmt_frac(iv: Interval, pct: str, digits: int = 3, top: float = 1.0) -> str:
    """A fraction (or mean) and its interval, shown clamped to ``[0, top]``."""
    if math.isnan(iv.value):
        return "undefined (no present cells estimated)"
    return (interval_text(iv.value, iv.low, iv.high, f"{pct} CI ", fmt=f".{digits}f", top=top)
            + _noisy(iv))


def format_frequency_release(r: FrequencyRelease) -> str:
    """A human summary of a frequency release (several lines, no trailing newline).

    Example:
        >>> import panstream as ps
        >>> est = ps.FrequencyEstimator("range:4096")
        >>> print(format_frequency_release(est.release(0.5)).splitlines()[0])  # doctest: +ELLIPSIS
        panstream release (frequency): laplace mechanism, epsilon 0.5 over range:4096 (4,096 counters mod 16)
    """
    pct = f"{100 * r.confidence:g}%"
    s = r.stats
    k = r.modulus
    n = float(r.cells)
    counts = ", ".join(f"{j}: {shown(iv.value, 0, n):,.0f}" for j, iv in enumerate(s.incidence)
                       if j)
    flag = flag_line(s.present.value, s.present.low, s.present.high, r.confidence, r.advice(),
                     indent="    ")
    lines = [
        f"panstream release (frequency): {r.mechanism} mechanism, epsilon {r.epsilon:g} over "
        f"{r.universe} ({r.cells:,} counters mod {k})",
        f"  present (seen >= 1)         {_fmt_count(s.present, pct, n)}",
        *([flag] if flag else []),
        f"  seen exactly once           {_fmt_count(s.once, pct, n)}",
        f"  returning (seen >= 2)       {_fmt_count(s.returning, pct, n)}",
        f"  fraction seen once          {_fmt_frac(s.fraction_once, pct)}",
        f"  fraction returning          {_fmt_frac(s.fraction_returning, pct)}",
        f"  mean count cropped at {s.t:<3}   {_fmt_frac(s.cropped_mean, pct, 2, float(s.t))}",
        f"  fraction seen >= {s.t:<3} times  {_fmt_frac(s.heavy, pct)}",
        f"  seen exactly j times        {counts}",
        "  shown                       clamped to each figure's possible range (--json keeps the "
        "unbiased values)",
        f"  aliasing                    a count of {k} or more is seen modulo {k}: the statistics "
        f"are exact in expectation only if counts stay below {k} (docs/frequency.md)",
        f"  privacy                     output epsilon {r.epsilon:g} + state epsilon "
        f"{r.epsilon_state:.6g} -> pan-private epsilon_total {r.epsilon_total:.6g} "
        f"{TOTAL_TELEMETRY_NOTE}",
        *([f"  merged shards               one person changes up to {r.state_tables} stored "
           f"table(s) and the histogram by up to {r.sensitivity} (noise scaled to it)"]
          if r.sensitivity > SENSITIVITY or r.state_tables > 1 else []),
        f"  output budget               {r.budget - r.budget_remaining:g} of {r.budget:g} spent, "
        f"{r.budget_remaining:g} left",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------- keyed consumer groups
@dataclass
class MergedHistograms:
    """The summed histograms of a keyed consumer group's shards: a :class:`CounterHistogram`.

    With messages keyed by the item, each cell's arrivals all land in one partition, so summing the
    K shards' histograms is the histogram of one table of ``K |X|`` counters laid end to end (as
    the density sum merge): ``N_hat_j`` for ``j >= 1`` estimates the group's cells seen j times
    (mod k), ``N_hat_0`` includes the ``(K - 1) |X|`` counters no arrival could reach, and the
    counters' noise is that of ``K |X|`` cells (error ``sqrt(K)`` times one table's; the
    partition-aware merge, :func:`panstream.estimators.frequency.merge_partitioned`, avoids that
    for ``ipv4``/``range`` universes). One person still moves one counter (sensitivity 2).

    Like the density merges it has no budget of its own: attach the group's ledger (``ledger=``)
    before releasing.
    """

    universe: Universe
    modulus: int
    alpha: Fraction
    epsilon_state: float
    shards: int
    counts: np.ndarray
    ledger: PrivacyLedger = field(default_factory=ShardLedger)

    @property
    def size(self) -> int:
        """Counters in the sum: shards times |X|."""
        return self.shards * self.universe.size

    def histogram(self) -> np.ndarray:
        """A copy of the summed histogram."""
        return self.counts.copy()

    def release(self, epsilon: float, mechanism: str = "laplace", **kwargs: Any) -> FrequencyRelease:
        """:func:`release_frequency` of the sum, charged to :attr:`ledger`."""
        return release_frequency(self, epsilon, mechanism, **kwargs)


def sum_histograms(shards: Sequence[CounterHistogram]) -> MergedHistograms:
    """Add the histograms of a keyed group's shard tables (pure; see :class:`MergedHistograms`).

    Raises:
        StateError: no shards, or shards with different universes, moduli or alphas.

    >>> import panstream as ps
    >>> shards = [ps.FrequencyEstimator("range:100", modulus=8) for _ in range(3)]
    >>> m = sum_histograms(shards)
    >>> m.size, int(m.histogram().sum()), m.ledger.shard
    (300, 300, True)
    """
    if not shards:
        msg = "no shard tables to merge: is the state directory/topic the right one?"
        raise StateError(msg)
    first = shards[0]
    total = np.zeros(first.modulus, dtype=np.int64)
    for s in shards:
        if (s.universe != first.universe or s.modulus != first.modulus or s.alpha != first.alpha):
            msg = (f"shard tables disagree (universe {s.universe.spec}, modulus {s.modulus}, "
                   f"alpha {s.alpha} vs {first.universe.spec}, {first.modulus}, {first.alpha}): "
                   "they were not made by one consumer group configuration")
            raise StateError(msg)
        h = s.histogram()
        total += h
        h.fill(0)
    return MergedHistograms(first.universe, first.modulus, first.alpha, first.epsilon_state,
                            len(shards), total)
