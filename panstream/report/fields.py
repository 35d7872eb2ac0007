"""Read a published figure out of any release JSON, before and after the unified schema.

The report reads what ``panstream release --json``, ``release --by ... --json`` and a windowed
``ingest``/``kafka`` series write. Those files name their figures per family today:

* density: ``distinct``, ``distinct_low``, ``distinct_high``, ``stderr_density`` (times ``size``);
* sketch: ``distinct``, ``low``, ``high``, ``stderr``;
* frequency: ``stats.present.{value, low, high, stderr}``;
* a series record: ``estimate``, ``low``, ``high``, ``statistic``, the window's epsilons, and the
  whole release nested under ``release``;
* a map: ``rows`` of ``label``, ``density``, ``density_low``, ``density_high``, ... and ``total``
  (:meth:`panstream.release.maps.MapRelease.to_dict`).

The unified schema puts one figure at the top of every release: ``family``, ``universe``,
``statistic``, ``estimate``, ``low``, ``high``, ``stderr``, ``confidence``, ``noise_dominated``,
``epsilon: {state, release, total}`` and family details under ``extras``. :func:`figure` reads those
names first and falls back to today's, so one report serves files written before and after.

Nothing here is computed from anything but the published numbers: the report never sees a table.

>>> f = figure({"distinct": 300.0, "distinct_low": 240.0, "distinct_high": 360.0,
...             "stderr_density": 0.03, "size": 1024, "epsilon": 0.5, "epsilon_state": 1.0,
...             "epsilon_total": 1.5, "universe": "ipv4:10.0.0.0/22", "confidence": 0.95})
>>> f.family, f.statistic, f.estimate, (f.low, f.high), f.epsilon_total, f.noise_dominated
('density', 'distinct', 300.0, (240.0, 360.0), 1.5, False)
>>> figure({"family": "sketch", "statistic": "distinct", "estimate": 10.0, "low": 0.0,
...         "high": 40.0, "epsilon": {"state": 1.0, "release": 0.5, "total": 1.5}}).noise_dominated
True
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from panstream.errors import ConfigurationError
from panstream.release.honesty import noise_dominated

__all__ = ["Bucket", "Figure", "MapRule", "calibration_text", "family_of", "figure", "get",
           "is_country", "is_map", "map_buckets", "map_rule"]


def get(d: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """``d[key]``, else ``d["extras"][key]``, else ``d["release"][key]`` (a series record nests
    its release), else ``default``."""
    if key in d and d[key] is not None:
        return d[key]
    for nest in ("extras", "release"):
        inner = d.get(nest)
        if isinstance(inner, Mapping) and inner.get(key) is not None:
            return inner[key]
    return default


def finite(v: Any) -> float | None:
    """``v`` as a finite float, else ``None`` (a missing, textual or infinite field)."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


@dataclass(frozen=True)
class Figure:
    """One published estimate with its interval and what it cost.

    Attributes:
        family: ``density``, ``frequency``, ``sketch`` (or what the file names).
        universe: the public universe spec.
        statistic: what ``estimate`` counts (``distinct``, ``present``, ...).
        estimate, low, high: the noisy value and its interval.
        stderr: its standard error, where the file gives one.
        confidence: the interval's level (0.95 when the file does not say).
        epsilon_state, epsilon_release, epsilon_total: the realized epsilons the file reports
            (``None`` where it reports none); ``epsilon_total`` is the pan-private total of the
            table after this release (a series record: the window's state + release).
    """

    family: str
    universe: str
    statistic: str
    estimate: float
    low: float
    high: float
    stderr: float | None
    confidence: float
    epsilon_state: float | None
    epsilon_release: float | None
    epsilon_total: float | None

    @property
    def noise_dominated(self) -> bool:
        """The interval is wider than the value (:func:`panstream.release.honesty.noise_dominated`)."""
        return noise_dominated(self.estimate, self.low, self.high)


def family_of(d: Mapping[str, Any]) -> str:
    """The estimator family a release or record came from (named, or recognised by its fields)."""
    named = d.get("family")
    if isinstance(named, str) and named:
        return named
    universe = str(get(d, "universe", ""))
    if universe.startswith("sketch:"):  # a sketch, or a by-country sketch (rows per country)
        return "sketch"
    if "rows" in d or "rows" in (d.get("extras") or {}):
        return "density"  # maps are released from bit tables
    if get(d, "modulus") is not None or isinstance(get(d, "stats"), Mapping):
        return "frequency"
    if universe.startswith("sketch:") or get(d, "levels") is not None:
        return "sketch"
    if get(d, "density") is not None or get(d, "distinct_low") is not None:
        return "density"
    return "unknown"


def _epsilons(d: Mapping[str, Any]) -> tuple[float | None, float | None, float | None]:
    eps = d.get("epsilon")
    if isinstance(eps, Mapping):  # the unified schema
        return finite(eps.get("state")), finite(eps.get("release")), finite(eps.get("total"))
    if "epsilon_window" in d:  # a series record
        return (finite(d.get("epsilon_state")), finite(d.get("epsilon_release")),
                finite(d.get("epsilon_window")))
    return finite(d.get("epsilon_state")), finite(eps), finite(d.get("epsilon_total"))


def figure(d: Mapping[str, Any]) -> Figure:
    """The headline figure of a release JSON or a series record (any family, either schema).

    Raises:
        ConfigurationError: the object names no estimate with an interval.
    """
    if not isinstance(d, Mapping):
        raise ConfigurationError("a release must be a JSON object")
    stat: str
    stderr: float | None = None
    if d.get("estimate") is not None and d.get("low") is not None and d.get("high") is not None:
        stat = str(d.get("statistic") or "estimate")
        est, lo, hi = d["estimate"], d["low"], d["high"]
        stderr = finite(d.get("stderr"))
        if stderr is None and isinstance(d.get("release"), Mapping):
            stderr = _stderr_of(d["release"])
    elif "distinct" in d and "distinct_low" in d:  # density release
        stat, est, lo, hi = "distinct", d["distinct"], d["distinct_low"], d["distinct_high"]
        stderr = _stderr_of(d)
    elif "distinct" in d and "low" in d:  # sketch release
        stat, est, lo, hi = "distinct", d["distinct"], d["low"], d["high"]
        stderr = finite(d.get("stderr"))
    elif isinstance(d.get("stats"), Mapping) and isinstance(d["stats"].get("present"), Mapping):
        v = d["stats"]["present"]
        stat, est, lo, hi, stderr = "present", v.get("value"), v.get("low"), v.get("high"), \
            finite(v.get("stderr"))
    elif isinstance(d.get("total"), Mapping) and "distinct" in d["total"]:  # a map's total
        t = d["total"]
        stat, est, lo, hi = "distinct", t["distinct"], t["distinct_low"], t["distinct_high"]
    else:
        msg = ("no estimate with an interval in this JSON (looked for estimate/low/high, "
               "distinct/distinct_low/distinct_high, distinct/low/high, stats.present and a map's "
               "total): give a file written by 'panstream release --json'")
        raise ConfigurationError(msg)
    values = [finite(x) for x in (est, lo, hi)]
    if any(v is None for v in values):
        raise ConfigurationError(f"the {stat} estimate or its interval is not a finite number")
    e, lo_, hi_ = (float(v) for v in values)  # type: ignore[arg-type]
    s, r, t = _epsilons(d)
    return Figure(family=family_of(d), universe=str(get(d, "universe", "") or ""), statistic=stat,
                  estimate=e, low=lo_, high=hi_, stderr=stderr,
                  confidence=finite(get(d, "confidence")) or 0.95,
                  epsilon_state=s, epsilon_release=r, epsilon_total=t)


def _stderr_of(rel: Mapping[str, Any]) -> float | None:
    if rel.get("stderr") is not None:
        return finite(rel["stderr"])
    sd, size = finite(rel.get("stderr_density")), finite(rel.get("size"))
    return None if sd is None or size is None else sd * size


def is_map(d: Mapping[str, Any]) -> bool:
    """Whether ``d`` is a map release (rows per bucket, at the top or under ``extras``)."""
    return isinstance(_rows(d), list)


@dataclass(frozen=True)
class Bucket:
    """One row of a map (or of any release by bucket: a prefix, a range, a country).

    Attributes:
        label: the bucket's public name; value, low, high: its noisy density (or the estimate a
        row names, a country's distinct count) and interval, as released (unclamped);
        cells: cells of the bucket (``None`` if not given); distinct, distinct_low,
        distinct_high: the same in clients, where given; signal: whether the release's map-wide
        rule told this bucket from an empty one (``None`` in a file written before that rule);
        p_empty: the bucket's p-value of "empty" (``None`` where not given); flagged: the row's
        own ``noise_dominated`` flag (``None`` where not given).
    """

    label: str
    value: float
    low: float
    high: float
    cells: int | None = None
    distinct: float | None = None
    distinct_low: float | None = None
    distinct_high: float | None = None
    signal: bool | None = None
    p_empty: float | None = None
    flagged: bool | None = None

    @property
    def contains_zero(self) -> bool:
        """The interval reaches 0: this bucket cannot be told from an empty one on its own."""
        return self.low <= 0.0

    @property
    def noise_dominated(self) -> bool:
        """The row's own flag where the file gives one, else the shared rule on its numbers."""
        if self.flagged is not None:
            return self.flagged
        return noise_dominated(self.value, self.low, self.high)

    @property
    def coloured(self) -> bool:
        """Whether a map colours this bucket: the release's map-wide ``signal`` where the file
        has it; in an older file, the per-bucket rule it was drawn with then (interval above 0
        and not noise-dominated)."""
        if self.signal is not None:
            return self.signal
        return not self.contains_zero and not noise_dominated(self.value, self.low, self.high)


def _rows(d: Mapping[str, Any]) -> Any:
    rows = d.get("rows")
    if rows is None and isinstance(d.get("extras"), Mapping):
        rows = d["extras"].get("rows")
    return rows


def is_country(d: Mapping[str, Any]) -> bool:
    """Whether ``d`` is a per-country release (``release --by country --json``: rows of
    ``country``, ``estimate`` (``distinct`` before issue 37), ``low``, ``high``)."""
    rows = _rows(d)
    return (isinstance(rows, list) and bool(rows) and isinstance(rows[0], Mapping)
            and "country" in rows[0])


@dataclass(frozen=True)
class MapRule:
    """How a map release decided which buckets to colour.

    Attributes:
        name: ``benjamini-hochberg`` (the map-wide false-discovery-rate rule of
            :mod:`panstream.release.maps`), or ``per-bucket`` for a file written before it.
        fdr: the false-discovery rate the release used (``None`` for ``per-bucket``).
    """

    name: str
    fdr: float | None

    @property
    def map_wide(self) -> bool:
        """The file carries the release's own per-bucket ``signal`` decisions."""
        return self.fdr is not None


def map_rule(d: Mapping[str, Any]) -> MapRule:
    """The colouring rule of a map release: the map-wide rule the file records (rows with
    ``signal``, the map's ``fdr`` and ``rule``), else the old per-bucket rule.

    >>> map_rule({"fdr": 0.05, "rule": "benjamini-hochberg", "rows": [{"signal": True}]})
    MapRule(name='benjamini-hochberg', fdr=0.05)
    >>> map_rule({"confidence": 0.95, "rows": [{"density": 0.1}]}).map_wide
    False
    """
    rows = _rows(d)
    if isinstance(rows, list) and rows and all(isinstance(r, Mapping) and "signal" in r
                                               for r in rows):
        fdr = finite(get(d, "fdr"))
        if fdr is None:
            fdr = 1.0 - (finite(get(d, "confidence")) or 0.95)
        return MapRule(str(get(d, "rule", "benjamini-hochberg")), fdr)
    return MapRule("per-bucket", None)


def map_buckets(d: Mapping[str, Any]) -> list[Bucket]:
    """The rows of a map release as :class:`Bucket` (``density*`` names, ``estimate/low/high``,
    or a country's ``estimate/low/high``, named ``distinct/low/high`` in files written before
    issue 37).

    Raises:
        ConfigurationError: no rows, or a row without a value and an interval.
    """
    rows = _rows(d)
    if not isinstance(rows, list) or not rows:
        raise ConfigurationError("this map release has no rows")
    out = []
    for i, r in enumerate(rows):
        if not isinstance(r, Mapping):
            raise ConfigurationError(f"row {i} of the map is not a JSON object")
        if r.get("density") is not None:
            v, lo, hi = r.get("density"), r.get("density_low"), r.get("density_high")
        elif r.get("estimate") is not None:
            v, lo, hi = r.get("estimate"), r.get("low"), r.get("high")
        else:  # a country row of a file written before issue 37
            v, lo, hi = r.get("distinct"), r.get("low"), r.get("high")
        nums = [finite(x) for x in (v, lo, hi)]
        if any(x is None for x in nums):
            raise ConfigurationError(f"row {i} of the map has no finite value and interval")
        cells = r.get("cells")
        sig, nd = r.get("signal"), r.get("noise_dominated")
        out.append(Bucket(label=str(r.get("label", r.get("country", i))),
                          value=float(nums[0]),  # type: ignore[arg-type]
                          low=float(nums[1]), high=float(nums[2]),  # type: ignore[arg-type]
                          cells=int(cells) if isinstance(cells, (int, float)) else None,
                          distinct=finite(r.get("distinct")),
                          distinct_low=finite(r.get("distinct_low")),
                          distinct_high=finite(r.get("distinct_high")),
                          signal=sig if isinstance(sig, bool) else None,
                          p_empty=finite(r.get("p_empty")),
                          flagged=nd if isinstance(nd, bool) else None))
    return out


def calibration_text(d: Mapping[str, Any]) -> str:
    """The table's calibration in words, from the public ``p`` and ``q`` a release carries.

    >>> calibration_text({"p": "3/4", "q": "1/4"})
    'randomized response (p = 1 - q): q = 0.25, p = 0.75'
    >>> calibration_text({"p": "3/4", "q": "1/2"})
    'fair-coin D0 (q = 1/2: tight or paper): q = 0.5, p = 0.75'
    """
    p, q = get(d, "p"), get(d, "q")
    alpha = get(d, "alpha")
    try:
        if p is not None and q is not None:
            fp, fq = Fraction(str(p)), Fraction(str(q))
            kind = ("randomized response (p = 1 - q)" if fp + fq == 1 else
                    "fair-coin D0 (q = 1/2: tight or paper)" if fq == Fraction(1, 2) else
                    "custom")
            return f"{kind}: q = {float(fq):.6g}, p = {float(fp):.6g}"
        if q is not None:  # a sketch: q only (p = 1 - q)
            fq = Fraction(str(q))
            return f"randomized response: q = {float(fq):.6g}, p = {float(1 - fq):.6g}"
        if alpha is not None:
            return f"counters mod {get(d, 'modulus', '?')}, alpha = {float(Fraction(str(alpha))):.6g}"
    except (ValueError, ZeroDivisionError):
        pass
    return "not stated in the file"
