"""Pan-private density maps: one noisy release of the count of ones of every bucket of a universe.

Why one epsilon pays for the whole map (parallel composition). Cut the universe into disjoint
buckets (the /24s of a /16, ranges of an ID space). One person's arrivals only ever redraw *their*
cell, so between neighbouring streams exactly one cell's law differs, hence exactly one bucket's count
of ones, by at most 1 (times ``sensitivity`` when shards are laid end to end). The vector of
per-bucket counts therefore has L1 sensitivity 1, and adding independent noise of scale
``1/epsilon`` to *each* bucket's count is ``epsilon``-DP for the whole vector: the ledger is charged
``epsilon`` once, before any noise is drawn, not once per bucket. Debiasing each bucket,

    density = (noisy_ones / cells - q) / (p - q),

and summing the noisy counts into a consistent global total are post-processing.

Accuracy: a bucket is a small table. Its density error is the single-table error with |X| replaced by
the bucket's cells, about ``sqrt(pq) / ((p - q) sqrt(cells))`` from the state (randomized response;
``1 / (2 (p - q) sqrt(cells))`` for a fair-coin D0 at density 0) plus ``sqrt(2) / (epsilon cells
(p - q))`` from the release: a /24 (256 cells) with state and output epsilon 1 is +-0.12 density at
95 % (+-0.20 with the tight calibration). Small buckets are noisy; :func:`bucket_halfwidth` tells
before ingesting.

Everything in a :class:`MapRelease` is computed from the noisy counts and public parameters only.

>>> import panstream as ps
>>> est = ps.DensityEstimator("ipv4:10.0.0.0/22", epsilon=1.0, budget=1.0)
>>> m = est.release_map(0.5, by="/24", mechanism="geometric")
>>> [row.label for row in m.rows]
['10.0.0.0/24', '10.0.1.0/24', '10.0.2.0/24', '10.0.3.0/24']
>>> len(est.ledger.entries), est.ledger.remaining
(1, 0.5)
"""

from __future__ import annotations

import csv
import io
import ipaddress
import math
from dataclasses import asdict, dataclass
from fractions import Fraction
from os import PathLike
from statistics import NormalDist
from typing import IO, Any

import numpy as np

from panstream.errors import ConfigurationError
from panstream.release.discovery import TellsFromEmpty, discoveries, empty_p_values
from panstream.release.honesty import (
    BELOW_ZERO,
    advice,
    fdr_rule,
    flag_line,
    noise_dominated,
    shown,
)
from panstream.release.noise import NoiseLaw, exact_epsilon
from panstream.release.plot import plot_map
from panstream.release.schema import estimate_fields
from panstream.release.stats import (
    DEFAULT_CONFIDENCE,
    CountingTable,
    charge,
    debias,
    noise_quantile,
    noisy_count,
    output_law,
    stderr_state,
)
from panstream.release.telemetry import TOTAL_TELEMETRY_NOTE
from panstream.universe import Universe

# The interval's plug-in density is replaced by the end of its 1/_DENSITY_GRID cell where the state
# variance is larger (the variance is linear in the density: falling for q = 1/2, rising when q is
# further from 1/2 than p), so the grid only widens an interval, and one quantile computation serves
# every bucket of the same size and grid cell.
_DENSITY_GRID = 64


def bucket_halfwidth(cells: int, epsilon: float, p: Fraction | float,
                     q: Fraction | float, mechanism: str = "laplace",
                     confidence: float = DEFAULT_CONFIDENCE, density: float = 0.0) -> float:
    """Half-width of a bucket's density interval at ``confidence`` (state and release noise), for a
    bucket of ``cells`` cells at output ``epsilon`` and true ``density`` (0 is the widest).

    >>> round(bucket_halfwidth(256, 1.0, Fraction(3, 4), Fraction(1, 2)), 3)
    0.249
    """
    law = NoiseLaw.for_mechanism(mechanism, exact_epsilon(epsilon))
    scale = cells * (float(p) - float(q))
    sigma = stderr_state(density, cells, p, q) * scale
    return noise_quantile(sigma, law, confidence) / scale


@dataclass(frozen=True)
class MapCounts:
    """The figures of a count of ones over some cells: a map's bucket, or the whole map.

    Attributes:
        noisy_ones: the released noisy count of ones (everything else derives from it).
        density, density_low, density_high: debiased density and its interval.
        distinct, distinct_low, distinct_high: the same times the cells counted.
    """

    noisy_ones: float
    density: float
    density_low: float
    density_high: float
    distinct: float
    distinct_low: float
    distinct_high: float


@dataclass(frozen=True)
class _Bucket:
    """Where a map's bucket lies (the fields a :class:`MapRow` starts with)."""

    label: str
    first: int
    cells: int


# The fields of a row, in the order they are published: _Bucket's, MapCounts', then its own
# (a dataclass takes its bases' fields from the last base of its MRO to the first).
@dataclass(frozen=True)
class MapRow(MapCounts, _Bucket):
    """One bucket of a map (safe to print, store and share).

    Attributes:
        label: ``10.0.3.0/24``, ``2001:db8:0:100::/56`` or ``0–1023`` (range buckets, inclusive).
        first: index of the bucket's first cell in the universe.
        cells: number of cells of the bucket.
        noisy_ones: the released noisy count of ones (everything else derives from it).
        density, density_low, density_high: debiased density and its interval (state binomial noise
            plus release noise; plug-in density moved to the end of its 1/64 cell with the larger
            state variance, which only widens it).
        distinct, distinct_low, distinct_high: the same times ``cells``.
        note: ``""``, or why this row differs (the last range bucket may be shorter).
        p_empty: the one-sided p-value of "this bucket is empty" (exact null law of its noisy
            count, :func:`empty_p_values`).
        signal: told from empty by the map-wide rule (Benjamini-Hochberg at the map's
            false-discovery rate, :func:`discoveries`): the buckets a picture colours.
        noise_dominated: the distinct count's interval is wider than the count.
    """

    note: str = ""
    p_empty: float = 1.0
    signal: bool = False
    noise_dominated: bool = False

    @property
    def indistinct_from_zero(self) -> bool:
        """True when this bucket's own interval contains density 0 (a per-bucket statement: over
        a map, use :attr:`signal`, which controls the error over all buckets together)."""
        return self.density_low <= 0.0


@dataclass(frozen=True)
class MapTotal(MapCounts):
    """The consistent global figures: the sum of the noisy bucket counts, debiased over the universe.

    Its interval uses a normal approximation for the sum of the buckets' release noises (exact law
    when the map has one bucket).
    """


@dataclass(frozen=True)
class MapRelease(TellsFromEmpty):
    """A published density map: rows per bucket, the consistent total and the privacy accounting.

    Attributes:
        rows: one :class:`MapRow` per bucket, in universe order.
        total: the :class:`MapTotal`.
        universe: the universe spec; by: the bucket spec (``/24`` or ``1024 cells``); bucket_cells:
            cells of a full bucket.
        epsilon: realized output epsilon of the whole map (charged once); epsilon_state: realized
            state epsilon (times ``state_tables``); epsilon_total: pan-private epsilon after this map.
        mechanism, confidence, p, q (exact, as strings), budget, budget_remaining, time: as for a
        :class:`~panstream.release.Release`.
        halfwidth: 95 %-style half-width (at ``confidence``) of the density of an empty full bucket:
            differences smaller than this between buckets are noise.
        fdr: the false-discovery rate of :attr:`MapRow.signal` over the whole map (``1 -
            confidence``): on average at most this share of the buckets marked as signal are empty,
            and on a map with no signal at all the chance that any bucket is marked is at most it.
        rule: how ``signal`` is decided (``"benjamini-hochberg"`` on exact p-values).
    """

    rows: tuple[MapRow, ...]
    total: MapTotal
    universe: str
    by: str
    bucket_cells: int
    epsilon: float
    epsilon_state: float
    epsilon_total: float
    mechanism: str
    confidence: float
    p: str
    q: str
    budget: float
    budget_remaining: float
    time: float
    halfwidth: float
    sensitivity: int = 1
    state_tables: int = 1
    fdr: float = 0.05
    rule: str = "benjamini-hochberg"
    #: The random id of the state (its ledger's epoch label, :data:`~panstream.release.ledger.
    #: PrivacyLedger.epoch`) this release was charged to: ``report --same-state`` checks it.
    #: ``None`` for a state of panstream 0.1 (no label).
    state_id: str | None = None

    @property
    def noise_dominated(self) -> bool:
        """True when the total's distinct count has an interval wider than itself."""
        t = self.total
        return noise_dominated(t.distinct, t.distinct_low, t.distinct_high)

    def to_dict(self) -> dict[str, Any]:
        """The common JSON shape (:mod:`panstream.release.schema`): the map's total distinct
        count as ``estimate``, the rows and bucket figures under ``extras``, and the old
        top-level names (``rows``, ``total``, ``by``, ...) as aliases."""
        d = asdict(self)
        d["rows"] = [asdict(r) for r in self.rows]
        d["signals"] = self.signals
        t = self.total
        z = NormalDist().inv_cdf(0.5 + self.confidence / 2)
        cells = sum(r.cells for r in self.rows)
        extras = {k: d[k] for k in ("rows", "total", "by", "bucket_cells", "halfwidth", "fdr",
                                    "rule", "signals", "p", "q", "mechanism", "sensitivity",
                                    "state_tables")}
        return estimate_fields(
            family="density", universe=self.universe, statistic="distinct",
            estimate=t.distinct, low=t.distinct_low, high=t.distinct_high,
            stderr=(t.distinct_high - t.distinct) / z if cells else 0.0,
            confidence=self.confidence, epsilon_state=self.epsilon_state,
            epsilon_release=self.epsilon, epsilon_total=self.epsilon_total, extras=extras,
            aliases=d)

    def to_csv(self, path_or_file: str | PathLike[str] | IO[str]) -> None:
        """Write one CSV line per bucket (header first) to a path or an open text file."""
        names = list(MapRow.__dataclass_fields__)
        if isinstance(path_or_file, (str, PathLike)):
            with open(path_or_file, "w", newline="", encoding="utf-8") as fh:
                self._write_csv(fh, names)
        else:
            self._write_csv(path_or_file, names)

    def _write_csv(self, fh: IO[str], names: list[str]) -> None:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(names)
        for r in self.rows:
            w.writerow([_csv_value(getattr(r, n)) for n in names])

    def plot(self, path: str | PathLike[str]) -> None:
        """Write the map as a PNG (Hilbert heat map for IP universes, step plot for ranges); needs
        the ``plot`` extra (matplotlib). See :mod:`panstream.release.plot`."""
        plot_map(self, path)

    def csv_text(self) -> str:
        """The CSV of :meth:`to_csv` as a string."""
        buf = io.StringIO()
        self.to_csv(buf)
        return buf.getvalue()


def _csv_value(v: object) -> object:
    return f"{v:.12g}" if isinstance(v, float) else v


def parse_by(universe: Universe, by: int | str) -> tuple[int, str]:
    """Cells per bucket and a label for ``by``: a prefix length (``24``/``"/24"``) for IP universes,
    a number of cells for ``range:N``.

    Raises:
        ConfigurationError: hashed universe, or a ``by`` outside what the universe allows.
    """
    kind = universe.kind
    if universe.is_hashed:
        msg = (f"a map needs an ordered universe: {universe.spec} holds hash buckets, and a bucket of "
               "hashes has no meaning; use an ipv4:, ipv6: or range: universe for maps")
        raise ConfigurationError(msg)
    text = by.strip() if isinstance(by, str) else by
    if kind in ("ipv4", "ipv6"):
        if isinstance(text, str):
            text = text.removeprefix("/")
            if not text.isdigit():
                msg = f"--by {by!r}: give a prefix length such as /24"
                raise ConfigurationError(msg)
            text = int(text)
        if isinstance(text, bool) or not isinstance(text, (int, np.integer)):
            msg = f"by must be a prefix length such as 24 or '/24', got {by!r}"
            raise ConfigurationError(msg)
        length = int(text)
        prefix = universe._prefix
        finest = 32 if kind == "ipv4" else universe._granularity
        if not prefix <= length <= finest:
            msg = (f"map prefix /{length} must lie between the universe's own prefix /{prefix} "
                   f"and its cell size /{finest} ({universe.spec})")
            raise ConfigurationError(msg)
        return 1 << (finest - length), f"/{length}"
    if isinstance(text, str):
        if not text.isdigit():
            msg = f"--by {by!r}: for {universe.spec} give a number of cells per bucket, e.g. 1024"
            raise ConfigurationError(msg)
        text = int(text)
    if isinstance(text, bool) or not isinstance(text, (int, np.integer)) or not 1 <= text <= universe.size:
        msg = f"by must be a number of cells per bucket from 1 to {universe.size}, got {by!r}"
        raise ConfigurationError(msg)
    return int(text), f"{int(text)} cells"


def bucket_label(universe: Universe, first: int, cells: int, by: str) -> str:
    """The label of the bucket starting at cell ``first``."""
    if universe.kind == "ipv4":
        return f"{ipaddress.IPv4Address(universe._base + first)}{by}"
    if universe.kind == "ipv6":
        addr = (universe._base + first) << (128 - universe._granularity)
        return f"{ipaddress.IPv6Address(addr)}{by}"
    return f"{first}\u2013{first + cells - 1}"


def release_map(est: CountingTable, epsilon: float, by: int | str, mechanism: str = "laplace", *,
                confidence: float = DEFAULT_CONFIDENCE, sensitivity: int = 1,
                state_tables: int = 1) -> MapRelease:
    """Publish a noisy density per bucket of ``est``'s universe, charged once to ``est.ledger``.

    Steps, in this order: validate; charge the ledger once for the whole map (refusing, before any
    noise is drawn, if the budget is short); count the ones of every bucket; add independent exact
    noise to each count; debias; derive intervals from noisy counts and public parameters only.

    Args:
        est: the estimator.
        epsilon: output epsilon of the whole map (parallel composition: disjoint buckets).
        by: prefix length (``24`` or ``"/24"``) for ipv4/ipv6 universes, cells per bucket for range.
        mechanism: ``"laplace"`` or ``"geometric"``.
        confidence: level of the intervals, in (0, 1).
        sensitivity, state_tables: as for :func:`panstream.release.release` (merged shards).

    Raises:
        ConfigurationError: invalid epsilon, mechanism, confidence or ``by``; a hashed universe.
        BudgetExhaustedError: the map would exceed the output budget; nothing charged, no noise.
    """
    law, eps_out = output_law(epsilon, mechanism, confidence, sensitivity, state_tables,
                              "map epsilon")
    universe = est.universe
    bucket_cells, by_label = parse_by(universe, by)
    eps_state = est.epsilon_state * state_tables
    p: Fraction = est.p
    q: Fraction = est.q

    entry = charge(est, eps_out, f"{mechanism} map {by_label}")  # raises before any noise
    size = est.size
    counts = est.count_ones_by(bucket_cells)
    n = counts.size
    noisy = np.empty(n, dtype=np.float64)
    for i in range(n):
        cells = min(bucket_cells, size - i * bucket_cells)
        noisy[i] = noisy_count(int(counts[i]), law, mechanism, cells)
    counts.fill(0)
    del counts

    pf, qf = float(p), float(q)
    cache: dict[tuple[int, int], float] = {}

    def halfwidth(density: float, cells: int) -> float:
        g = math.floor(min(1.0, max(0.0, density)) * _DENSITY_GRID)
        key = (cells, g)
        if key not in cache:
            scale = cells * (pf - qf)
            sigma = max(stderr_state(g / _DENSITY_GRID, cells, p, q),
                        stderr_state(min(g + 1, _DENSITY_GRID) / _DENSITY_GRID, cells, p, q)) * scale
            cache[key] = noise_quantile(sigma, law, confidence) / scale
        return cache[key]

    # The map-wide rule (docs/maps.md, "Colours that do not lie"): exact p-values of "empty",
    # then Benjamini-Hochberg over all buckets at the false-discovery rate 1 - confidence.
    pvals = np.empty(n)
    full = n if size % bucket_cells == 0 else n - 1
    if full:
        pvals[:full] = empty_p_values(noisy[:full], bucket_cells, q, law, mechanism)
    if full < n:
        pvals[full:] = empty_p_values(noisy[full:], size - full * bucket_cells, q, law, mechanism)
    rate = 1.0 - float(confidence)
    signal = discoveries(pvals, rate)

    rows = []
    for i in range(n):
        first = i * bucket_cells
        cells = min(bucket_cells, size - first)
        d = debias(noisy[i], cells, p, q)
        h = halfwidth(d, cells)
        note = (f"last bucket: {cells} cells, not {bucket_cells}" if cells < bucket_cells else "")
        rows.append(MapRow(
            label=bucket_label(universe, first, cells, by_label), first=first, cells=cells,
            noisy_ones=float(noisy[i]), density=d, density_low=d - h, density_high=d + h,
            distinct=d * cells, distinct_low=(d - h) * cells, distinct_high=(d + h) * cells,
            note=note, p_empty=float(pvals[i]), signal=bool(signal[i]),
            noise_dominated=noise_dominated(d * cells, (d - h) * cells, (d + h) * cells)))

    total_ones = math.fsum(noisy.tolist())
    td = debias(total_ones, size, p, q)
    if n == 1:
        th = rows[0].density_high - rows[0].density
    else:
        z = NormalDist().inv_cdf(0.5 + confidence / 2)
        scale = size * (pf - qf)
        th = z * math.sqrt(stderr_state(td, size, p, q) ** 2 + n * law.variance / scale**2)
    total = MapTotal(noisy_ones=total_ones, density=td, density_low=td - th, density_high=td + th,
                     distinct=td * size, distinct_low=(td - th) * size,
                     distinct_high=(td + th) * size)
    return MapRelease(
        rows=tuple(rows), total=total, universe=universe.spec, by=by_label,
        bucket_cells=bucket_cells, epsilon=eps_out, epsilon_state=eps_state,
        epsilon_total=est.ledger.epsilon_total(eps_state), mechanism=mechanism,
        confidence=float(confidence), p=str(p), q=str(q), budget=est.ledger.budget,
        budget_remaining=est.ledger.remaining, time=entry.time, state_id=est.ledger.epoch,
        halfwidth=halfwidth(0.0, bucket_cells), sensitivity=sensitivity, state_tables=state_tables,
        fdr=rate)


def rule_text(m: MapRelease) -> str:
    """The map-wide rule in words, for a caption or a legend (:func:`~panstream.release.honesty.fdr_rule`)."""
    return fdr_rule(m.fdr)


def format_map(m: MapRelease, limit: int = 20) -> str:
    """A human summary of a map: header, up to ``limit`` rows, the total and the accounting.

    Figures are shown clamped to their possible range (density 0..1, distinct 0..cells); the
    JSON and CSV keep the unbiased values.
    """
    pct = f"{100 * m.confidence:g}%"
    dominated = sum(r.noise_dominated for r in m.rows)
    lines = [
        f"panstream map: {m.mechanism} mechanism, epsilon {m.epsilon:g} over {m.universe} by "
        f"{m.by} ({len(m.rows):,} buckets of {m.bucket_cells:,} cells)",
        f"  a bucket's density is +-{m.halfwidth:.3f} at {pct} from noise alone: smaller "
        "differences are not signal",
        f"  '*' = {rule_text(m)}; '~' = could be empty. {m.signals:,} of {len(m.rows):,} "
        f"bucket(s) marked '*'; {dominated:,} bucket estimate(s) noise-dominated (interval "
        "wider than the value)",
        "  figures shown clamped to their possible range (--json and --csv keep the unbiased "
        "values)",
        f"  {'bucket':<28} {'density':>9} {pct + ' CI':>21} {'distinct':>12}",
    ]
    for r in m.rows[:limit]:
        mark = "*" if r.signal else "~"
        extra = [x for x in (r.note, "noise-dominated" if r.noise_dominated and r.signal else "",
                             BELOW_ZERO if r.density_high < 0 else "") if x]
        lines.append(f" {mark}{r.label:<28} {shown(r.density, 0, 1):>9.4f} "
                     f"[{shown(r.density_low, 0, 1):>8.4f}, {shown(r.density_high, 0, 1):>8.4f}] "
                     f"{shown(r.distinct, 0, r.cells):>12,.0f}"
                     + (f"  ({'; '.join(extra)})" if extra else ""))
    if len(m.rows) > limit:
        lines.append(f"  ... {len(m.rows) - limit:,} more buckets (use --csv for all)")
    t = m.total
    size = float(sum(r.cells for r in m.rows))
    flag = flag_line(t.distinct, t.distinct_low, t.distinct_high, m.confidence, total_advice(m))
    lines += [
        f"  total (sum of buckets)  density {shown(t.density, 0, 1):.6f} "
        f"[{shown(t.density_low, 0, 1):.6f}, {shown(t.density_high, 0, 1):.6f}], distinct "
        f"{shown(t.distinct, 0, size):,.0f} [{shown(t.distinct_low, 0, size):,.0f}, "
        f"{shown(t.distinct_high, 0, size):,.0f}]" + (f" ({BELOW_ZERO})" if t.distinct_high < 0
                                                      else ""),
        *([flag] if flag else []),
        f"  privacy               output epsilon {m.epsilon:g} for the whole map (disjoint buckets) "
        f"+ state epsilon {m.epsilon_state:.6g} -> pan-private epsilon_total {m.epsilon_total:.6g} "
        f"{TOTAL_TELEMETRY_NOTE}",
        f"  output budget         {m.budget - m.budget_remaining:g} of {m.budget:g} spent, "
        f"{m.budget_remaining:g} left",
    ]
    return "\n".join(lines)


def total_advice(m: MapRelease) -> str:
    """What would make a noise-dominated map total usable (``""`` when it is not)."""
    t = m.total
    if not noise_dominated(t.distinct, t.distinct_low, t.distinct_high):
        return ""
    size = sum(r.cells for r in m.rows)
    p, q = Fraction(m.p), Fraction(m.q)
    z = NormalDist().inv_cdf(0.5 + m.confidence / 2)
    law, _ = _law_of(m)
    state = z * stderr_state(t.density, size, p, q) * size
    rel = z * math.sqrt(len(m.rows) * law.variance) / float(p - q)
    return advice(t.distinct, t.distinct_low, t.distinct_high, state_half=state, release_half=rel,
                  epsilon_state=m.epsilon_state / m.state_tables, epsilon_release=m.epsilon,
                  cells=size)


def _law_of(m: MapRelease) -> tuple[NoiseLaw, float]:
    return output_law(m.epsilon, m.mechanism, m.confidence, m.sensitivity, 1, "map epsilon")


#: Output epsilons the planner tabulates when none is given.
PLAN_EPSILONS: tuple[float, ...] = (0.1, 0.5, 1.0, 2.0)


def map_plan(universe: Universe, by: int | str, p: Fraction | float,
             q: Fraction | float, epsilons: tuple[float, ...] = PLAN_EPSILONS,
             confidence: float = DEFAULT_CONFIDENCE) -> dict[str, Any]:
    """The error of one bucket before ingesting: 95 % half-width of a bucket's density (at density
    0, the widest) for ``by`` and its neighbouring bucket sizes, at each output epsilon.

    Returns:
        ``{"by", "bucket_cells", "buckets", "rows": [{"by", "bucket_cells", "halfwidth": {eps: h}}]}``.
    """
    cells, label = parse_by(universe, by)
    sizes: list[tuple[str, int]] = []
    if universe.kind in ("ipv4", "ipv6"):
        length = int(label[1:])
        lo, hi = universe._prefix, 32 if universe.kind == "ipv4" else universe._granularity
        for d in (-4, 0, 4):
            if lo <= length + d <= hi:
                sizes.append((f"/{length + d}", cells >> d if d >= 0 else cells << -d))
    else:
        for c in (cells * 16, cells, cells // 16):
            if 1 <= c <= universe.size:
                sizes.append((f"{c} cells", c))
    rows = [{"by": lab, "bucket_cells": c,
             "halfwidth": {str(e): bucket_halfwidth(c, e, p, q, confidence=confidence)
                           for e in epsilons}} for lab, c in sizes]
    return {"by": label, "bucket_cells": cells, "buckets": -(-universe.size // cells),
            "confidence": confidence, "rows": rows}
