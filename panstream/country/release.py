"""Distinct clients by country from a by-country sketch, for one output epsilon.

Why one epsilon pays for every country (parallel composition). A by-country state
(:mod:`panstream.sketch.country`) is one grid per country slot. One person is one address, in one
country, whose hash names one bit: with or without them, and for any fixed draws of every other
bit, only that bit differs, so the vector of all slots' per-level counts of ones changes in one
entry by at most 1 (L1 sensitivity 1). The release charges the ledger ``epsilon`` once, before any
noise is drawn, adds independent exact noise of scale ``1/epsilon`` to **every** count of every
slot (:func:`panstream.release.stats.noisy_count`), and only then estimates each country from its
own noisy counts, as a one-sketch release does (:func:`panstream.sketch.release.release_sketch`):
the maximum pseudo-likelihood estimate, its state standard error, the release part by the delta
method, and the interval of a normal plus a Laplace. Every slot is published; ordering, the total
and the "noise-dominated" flags are post-processing.

Negative estimates (docs/release.md, "one rule for every family"). What is released -- every
row's ``distinct``, ``low`` and ``high``, the total's, ``to_dict()`` (``--json``) and
``csv_text()`` (``--csv``) -- is the unbiased estimate and its interval, **unclamped**: an empty
country's estimate is centred on 0, so about half of them fall below 0. Only the printout
(:func:`format_country_release`) and the report show them clamped at 0, and say so. Until this
change the rows and the total were clamped at 0 in the release itself, unlike every other family.

The total is the sum of the countries' unclamped estimates (a person is in one country; clamping
each at 0 first would bias the sum up by about 250 x 21 at 1024 x 24 and epsilon 1); its variance
is the sum of theirs (the slots' bits and noise are independent), and its interval is the normal
plus Laplace interval of those summed variances.

>>> from panstream.sketch.country import CountrySketchEstimator
>>> est = CountrySketchEstimator(epsilon=2.0, buckets=256, levels=8, budget=1.0)
>>> _ = est.update(["8.8.8.8", "1.0.16.1", "10.0.0.1"])
>>> r = est.release(1.0)
>>> len(r.rows), est.ledger.remaining
(253, 0.0)
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from panstream.country import table as geo
from panstream.errors import ConfigurationError
from panstream.release.discovery import TellsFromEmpty, discoveries, empty_p_values
from panstream.release.honesty import clamp_note, flag_line, interval_text, noise_dominated
from panstream.release.ledger import group_privacy
from panstream.release.schema import estimate_fields
from panstream.release.stats import (
    DEFAULT_CONFIDENCE,
    charge,
    debias,
    linear_count,
    noise_quantile,
    occupancy_stderr,
    output_law,
    stderr_distinct,
    stderr_state,
)
from panstream.estimators.sketch.release import fit_noisy_levels, interval_halfwidth, noisy_ones
from panstream.release.telemetry import TOTAL_TELEMETRY_NOTE

__all__ = ["CountryRelease", "CountryRow", "format_country_release", "release_by_country",
           "release_hashed_by_country"]

#: L1 sensitivity of all slots' per-level counts to one person.
SENSITIVITY = 1


@dataclass(frozen=True)
class CountryRow:
    """One country's published distinct count (from noisy counts and public parameters only).

    ``estimate``, ``low`` and ``high`` are released unclamped (an empty country's estimate is
    below 0 about half the time); ``noise_dominated`` is the shared rule on them. ``p_empty`` is
    the exact p-value of "this country has no client" and ``signal`` whether the rule over all
    slots told it from an empty one (:mod:`panstream.release.discovery`, at the release's
    ``fdr``). Until issue 37 ``estimate`` was named ``distinct`` (still readable as
    :attr:`distinct`; a JSON or CSV row now says ``estimate``).
    """

    country: str
    estimate: float
    low: float
    high: float
    stderr: float
    noise_dominated: bool
    p_empty: float = 1.0
    signal: bool = False

    @property
    def distinct(self) -> float:
        """The old name of :attr:`estimate` (files before issue 37 wrote ``distinct``)."""
        return self.estimate


@dataclass(frozen=True)
class CountryRelease(TellsFromEmpty):
    """Distinct clients of every country slot, and their total, for one output epsilon.

    Attributes:
        rows: every slot of :data:`panstream.geo.COUNTRIES`, in that order.
        buckets, levels: the grid per country (a ``hashed-ip-country:M`` table: ``M`` cells, 1
            level; its ``noisy_ones`` hold one count per slot).
        distinct, low, high, stderr: the total over slots: the sum of the rows' unclamped
            estimates and its interval (unclamped too); cardinality: the total rounded, at
            least 0 (Presto's style).
        noisy_ones: the released noisy per-level counts, one tuple per slot.
        fdr, rule: the false-discovery rate of the rows' ``signal`` over all slots and how it is
            decided (Benjamini-Hochberg on exact p-values of "empty": on average at most ``fdr``
            of the countries told from empty have no client; with no client anywhere, the chance
            that any country is told from empty is at most ``fdr``).
        epsilon, epsilon_state, epsilon_total, mechanism, confidence, buckets, levels, universe,
        geo, budget, budget_remaining, time: as for a sketch release.
    """

    rows: tuple[CountryRow, ...]
    distinct: float
    cardinality: int
    low: float
    high: float
    stderr: float
    noisy_ones: tuple[tuple[float, ...], ...]
    epsilon: float
    epsilon_state: float
    epsilon_total: float
    mechanism: str
    confidence: float
    buckets: int
    levels: int
    universe: str
    geo: str | None
    budget: float
    budget_remaining: float
    time: float
    fdr: float = 0.05
    rule: str = "benjamini-hochberg"
    state_id: str | None = None  # as MapRelease.state_id: the ledger's random epoch label

    def ranked(self) -> list[CountryRow]:
        """The countries told from empty, largest estimate first (what a printout or a report
        ranks; the other slots cannot be told from countries without a client)."""
        return sorted((r for r in self.rows if r.signal), key=lambda r: (-r.estimate, r.country))

    def group_privacy(self, k: int) -> float:
        """Pan-private guarantee for a group of ``k`` people: ``k * epsilon_total``."""
        return group_privacy(k, self.epsilon_total)

    @property
    def family(self) -> str:
        """The estimator family: ``"sketch"`` (``sketch:BxP:ip-country``) or ``"density"``
        (``hashed-ip-country:M``)."""
        return "sketch" if self.universe.startswith("sketch:") else "density"

    def to_dict(self) -> dict[str, Any]:
        """The common JSON shape (:mod:`panstream.release.schema`): the total as ``estimate``,
        ``low``, ``high`` (unclamped), every slot's row under ``extras.rows`` (unclamped), and
        the old top-level names (``rows``, ``distinct``, ``epsilon_state``, ...) beside them."""
        old = asdict(self)
        old["rows"] = [asdict(r) for r in self.rows]
        old["noisy_ones"] = [list(x) for x in self.noisy_ones]
        old["signals"] = self.signals
        extras = {k: old[k] for k in ("rows", "cardinality", "noisy_ones", "buckets", "levels",
                                      "geo", "mechanism", "fdr", "rule", "signals")}
        extras["by"] = "country"
        return estimate_fields(
            family=self.family, universe=self.universe, statistic="distinct",
            estimate=self.distinct, low=self.low, high=self.high, stderr=self.stderr,
            confidence=self.confidence, epsilon_state=self.epsilon_state,
            epsilon_release=self.epsilon, epsilon_total=self.epsilon_total, extras=extras,
            aliases=old)

    def top(self, k: int = 20) -> list[CountryRow]:
        """The ``k`` rows of largest estimate (post-processing of the release)."""
        return sorted(self.rows, key=lambda r: -r.estimate)[:k]

    def csv_text(self) -> str:
        """One CSV line per slot: country, estimate, low, high, stderr, noise_dominated, p_empty,
        signal (the released values: unclamped; ``estimate`` was ``distinct`` before issue 37)."""
        out = io.StringIO()
        w = csv.writer(out, lineterminator="\n")
        w.writerow(["country", "estimate", "low", "high", "stderr", "noise_dominated", "p_empty",
                    "signal"])
        for r in self.rows:
            w.writerow([r.country, f"{r.estimate:.1f}", f"{r.low:.1f}", f"{r.high:.1f}",
                        f"{r.stderr:.1f}", int(r.noise_dominated), f"{r.p_empty:.3g}",
                        int(r.signal)])
        return out.getvalue()


def release_by_country(est: Any, epsilon: float, mechanism: str = "laplace", *,
                       confidence: float = DEFAULT_CONFIDENCE,
                       fdr: float | None = None) -> CountryRelease:
    """Publish distinct clients per country of ``est`` (a
    :class:`~panstream.sketch.country.CountrySketchEstimator`), charged once to its ledger.

    Steps, in this order: validate; charge the ledger (refusing before any noise is drawn if the
    budget is short); read every slot's per-level counts; add exact noise to each; estimate each
    slot from its noisy counts; derive intervals, the rule over all slots (:func:`_told_from_empty`)
    and the total from them and public parameters.

    Args:
        fdr: the false-discovery rate of the rows' ``signal`` (default ``1 - confidence``).

    Raises:
        ConfigurationError: invalid epsilon, mechanism, confidence or fdr.
        BudgetExhaustedError: the budget does not cover ``epsilon``; nothing is charged.
    """
    law, eps_out = output_law(epsilon, mechanism, confidence, SENSITIVITY, 1)
    rate = _rate(fdr, confidence)
    entry = charge(est, eps_out, mechanism)  # raises before any noise is drawn
    buckets, r = est.buckets, float(est.q)
    noisy = noisy_ones(est.ones_by_country_level(), law, mechanism, buckets)
    # an empty country's level 0 (half of any country's clients land there) is B first draws
    pvals, signal = _told_from_empty([c[0] for c in noisy], buckets, est.q, law, mechanism, rate)
    rows = []
    var_state = var_rel_total = 0.0
    raw: list[float] = []
    for i, (code, counts) in enumerate(zip(est.countries, noisy, strict=True)):
        fit, var_rel, h = fit_noisy_levels(counts, buckets, r, law.variance, confidence)
        n = fit.n  # unbiased, unclamped: the one rule for every family (panstream.release.honesty)
        rows.append(CountryRow(code, n, n - h, n + h, math.sqrt(fit.stderr**2 + var_rel),
                               noise_dominated(n, n - h, n + h), float(pvals[i]),
                               bool(signal[i])))
        var_state += fit.stderr**2
        var_rel_total += var_rel
        raw.append(n)
    table = _table_name(est)
    total = math.fsum(raw)  # unclamped: clamping 253 near-zero estimates at 0 would bias the sum
    h = interval_halfwidth(math.sqrt(var_state), var_rel_total, confidence)
    return CountryRelease(
        rows=tuple(rows), distinct=total, cardinality=max(0, int(np.floor(total + 0.5))),
        low=total - h, high=total + h, stderr=math.sqrt(var_state + var_rel_total),
        noisy_ones=noisy, epsilon=eps_out, epsilon_state=est.epsilon_state,
        epsilon_total=est.ledger.epsilon_total(est.epsilon_state), mechanism=mechanism,
        confidence=float(confidence), buckets=buckets, levels=est.levels,
        universe=est.universe.spec, geo=table, budget=est.ledger.budget,
        budget_remaining=est.ledger.remaining, time=entry.time, fdr=rate,
        state_id=est.ledger.epoch)


def _rate(fdr: float | None, confidence: float) -> float:
    """The false-discovery rate of a release by country: ``fdr``, else ``1 - confidence`` (as a
    map's).

    Raises:
        ConfigurationError: not in (0, 1).
    """
    rate = round(1.0 - float(confidence), 12) if fdr is None else fdr
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate < 1:
        msg = f"the false-discovery rate must lie strictly between 0 and 1, got {fdr!r}"
        raise ConfigurationError(msg)
    return float(rate)


def _told_from_empty(counts: list[float], cells: int, q: Any, law: Any, mechanism: str,
                     rate: float) -> tuple[np.ndarray, np.ndarray]:
    """Every slot's exact p-value of "no client" from one released noisy count of ``cells``
    first draws when empty (``Binomial(cells, q)`` plus the release noise), and the slots
    Benjamini-Hochberg tells from empty at ``rate`` over all of them: the rule a map's buckets
    follow (:mod:`panstream.release.discovery`), post-processing of the released counts."""
    pvals = empty_p_values(counts, cells, q, law, mechanism)
    return pvals, discoveries(pvals, rate)


def _table_name(est: Any) -> str | None:
    table = est.universe.geo
    if table is None:  # a state no arrival reached yet in this process (e.g. a window's table)
        try:
            table = geo.database()
        except ConfigurationError:
            table = None
    return table


def release_hashed_by_country(est: Any, epsilon: float, mechanism: str = "laplace", *,
                              confidence: float = DEFAULT_CONFIDENCE, sensitivity: int = 1,
                              state_tables: int = 1, fdr: float | None = None) -> CountryRelease:
    """Distinct clients per country of a ``hashed-ip-country:M`` density table
    (:class:`~panstream.estimators.hashed_country.CountryDensityEstimator`), charged once.

    Each country is a hashed table of ``M`` cells: one person is one cell, so the vector of the
    253 blocks' counts of ones has L1 sensitivity 1 (``sensitivity`` for shards laid end to end)
    and noise of scale ``1/epsilon`` on each count costs ``epsilon`` once. Each block is then
    released as a ``hashed-ip`` table is (:func:`panstream.release.density.release`): debiased
    density, linear counting, an interval with the randomized response's and the hash
    collisions' (occupancy) errors and the release noise; each block's count and interval are
    released unclamped below 0 (:func:`~panstream.release.stats.linear_count`, the same linear
    counting as a ``hashed-ip`` release). The total sums the blocks' unclamped linear counts; its
    interval is a normal of the summed state variances plus a Laplace of the summed release
    variances. The rule over all slots reads each block's noisy count (:func:`_told_from_empty`).

    Raises:
        ConfigurationError: invalid epsilon, mechanism, confidence or fdr.
        BudgetExhaustedError: the budget does not cover ``epsilon``; nothing is charged.
    """
    law, eps_out = output_law(epsilon, mechanism, confidence, sensitivity, state_tables)
    rate = _rate(fdr, confidence)
    eps_state = est.epsilon_state * state_tables
    entry = charge(est, eps_out, mechanism)  # raises before any noise is drawn
    m, p, q = est.universe.block, est.p, est.q
    noisy = noisy_ones(est.ones_by_country(), law, mechanism, m)
    pvals, signal = _told_from_empty(list(noisy), m, q, law, mechanism, rate)
    scale = m * (float(p) - float(q))
    rows = []
    raw: list[float] = []
    var_state = var_rel_total = 0.0
    for i, (code, k) in enumerate(zip(est.countries, noisy, strict=True)):
        density = debias(k, m, p, q)
        se_state = stderr_state(density, m, p, q)
        se_occ = occupancy_stderr(density, m)
        h = noise_quantile(math.hypot(se_state, se_occ) * scale, law, confidence) / scale
        n = linear_count(density, m)  # unclamped below 0: an empty block is centred on 0
        low, high = linear_count(density - h, m), linear_count(density + h, m)
        var_s = stderr_distinct(density, math.hypot(se_state, se_occ), m, True) ** 2
        var_r = stderr_distinct(density, math.sqrt(law.variance) / scale, m, True) ** 2
        rows.append(CountryRow(code, n, low, high, math.sqrt(var_s + var_r),
                               noise_dominated(n, low, high), float(pvals[i]), bool(signal[i])))
        raw.append(n)
        var_state += var_s
        var_rel_total += var_r
    total = math.fsum(raw)  # unclamped, as the rows
    h = interval_halfwidth(math.sqrt(var_state), var_rel_total, confidence)
    return CountryRelease(
        rows=tuple(rows), distinct=total, cardinality=max(0, int(np.floor(total + 0.5))),
        low=total - h, high=total + h,
        stderr=math.sqrt(var_state + var_rel_total), noisy_ones=tuple((k,) for k in noisy),
        epsilon=eps_out, epsilon_state=eps_state,
        epsilon_total=est.ledger.epsilon_total(eps_state), mechanism=mechanism,
        confidence=float(confidence), buckets=m, levels=1, universe=est.universe.spec,
        geo=_table_name(est), budget=est.ledger.budget, budget_remaining=est.ledger.remaining,
        time=entry.time, fdr=rate, state_id=est.ledger.epoch)


def rule_words(r: CountryRelease) -> str:
    """The rule over all slots in words (a printout's, a report's)."""
    pct = f"{100 * r.fdr:g} %"
    return (f"a {pct} false-discovery rate over all {len(r.rows)} slots, Benjamini-Hochberg on "
            f"exact p-values: on average at most {pct} of the countries listed have no client")


def format_country_release(r: CountryRelease, top: int = 20) -> str:
    """A human summary: the total, then up to ``top`` countries told from empty by the rule over
    all slots (:attr:`CountryRelease.fdr`), largest first, and how many slots it hides (no
    trailing newline).

    Figures are shown clamped at 0 (a count is never negative), and a line says so whenever a
    figure shown was clamped; ``--json`` and ``--csv`` keep the released, unbiased values of
    every slot.
    """
    pct = f"{100 * r.confidence:g}%"
    told = r.ranked()
    rows = told[:top]
    figures = [(r.distinct, r.low, r.high), *((x.estimate, x.low, x.high) for x in rows)]
    clamped = any(v < 0 for f in figures for v in f)
    flag = flag_line(r.distinct, r.low, r.high, r.confidence,
                     f"every one of the {len(r.rows)} slots adds its noise to the total; a larger "
                     "epsilon (release or state) narrows it")
    lines = [
        f"panstream release: {r.mechanism} mechanism, epsilon {r.epsilon:g} once for "
        f"{len(r.rows)} country slots ({r.universe}, countries from {r.geo or 'no arrivals yet'}: "
        "the registries' assignment)",
        f"  distinct (all countries) {interval_text(r.distinct, r.low, r.high, f'{pct} CI ')}"
        " (the sum of every slot's unbiased estimate)",
        *([flag] if flag else []),
        f"  {len(told)} of {len(r.rows)} country slots told from empty ({rule_words(r)})"
        + (f"; the largest {len(rows)}" if len(rows) < len(told) else "")
        + (f", {pct} intervals, * = noise-dominated (the interval is wider than the value):"
           if rows else ""),
    ]
    for row in rows:
        flag = " *" if row.noise_dominated else ""
        lines.append(f"    {row.country}  {interval_text(row.estimate, row.low, row.high)}{flag}")
    lines.append(f"  {len(r.rows) - len(told)} slots not told from an empty one are not listed "
                 "(--json and --csv list every slot)")
    if clamped:
        lines.append(clamp_note("--json and --csv"))
    lines += [
        f"  privacy               output epsilon {r.epsilon:g} (all countries: one person is in "
        f"one) + state epsilon {r.epsilon_state:.6g} -> pan-private epsilon_total "
        f"{r.epsilon_total:.6g} {TOTAL_TELEMETRY_NOTE}",
        f"  output budget         {r.budget - r.budget_remaining:g} of {r.budget:g} spent, "
        f"{r.budget_remaining:g} left",
    ]
    return "\n".join(lines)
