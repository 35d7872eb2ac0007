"""The report page: one self-contained HTML document of what may be published.

:func:`render` takes released results only (series records and release JSON objects, already
read) and returns the page as a string. It draws every estimate with its interval, marks the
noise-dominated ones (:func:`panstream.release.honesty.noise_dominated`), adds up what a person is
covered at, and says what the deployment keeps and what it never keeps. It never sees a table and
spends no budget: anyone may run it on the published files.

The page has no script, no stylesheet, font or image to fetch, and no link outside itself: CSS is
inline, charts are inline SVG (:mod:`panstream.report.svg`), and every chart has a table of the same
numbers under it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from html import escape
from typing import Any

from panstream import __version__
from panstream.errors import ConfigurationError
from panstream.release.honesty import count_cap
from panstream.report.fields import (
    Bucket,
    Figure,
    calibration_text,
    family_of,
    figure,
    get,
    is_country,
    is_map,
    map_buckets,
    map_rule,
)
from panstream.report.svg import ChartPoint, hilbert_map, interval_chart, ranked_chart
from panstream.windows import duration_text, horizon_line
from panstream.windows.eventtime import label as iso_label

__all__ = ["MAX_MAP_BUCKETS", "PARTIAL_NOTE", "ReleaseInput", "SeriesInput", "check_same_state",
           "column_text", "number_text", "render"]

#: Buckets a map may have to be drawn and tabulated on the page (a page stays light enough to mail).
MAX_MAP_BUCKETS = 4096

#: What panstream never keeps, whatever the deployment (the privacy invariants, in plain words).
NEVER_KEPT = (
    "no client address, user ID or other item, in memory beyond a batch, on disk or in logs",
    "no count per item or per client, and no count of lines or arrivals (unless an operator opted "
    "in to noisy or exact counts, announced when it ran)",
    "no stream length, no timestamps of arrivals",
    "no random seed or generator state: every draw comes from the operating system's CSPRNG",
    "no drawn noise: a released number cannot be turned back into the table's exact count",
    "nothing of a closed window: its table is wiped once its one release is in the series",
)

#: Tables of at most this many rows are shown open; longer ones are folded (a click opens them).
_OPEN_ROWS = 32

_NOISE_NOTE = ("noise-dominated: the interval is wider than the value itself, so the number says "
               "little beyond \u201csmall\u201d; a larger epsilon, a smaller universe or a longer "
               "window would make it usable")


@dataclass(frozen=True)
class SeriesInput:
    """A released series (the records of one series file), named as the page shows it."""

    name: str
    records: Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class ReleaseInput:
    """One release JSON object (a single figure or a map), named as the page shows it."""

    name: str
    data: Mapping[str, Any]


@dataclass
class _Cost:
    what: str
    name: str
    eps_state: str
    eps_release: str
    total: float | None
    note: str = ""


@dataclass
class _Keep:
    name: str
    family: str
    universe: str
    calibration: str
    eps_state: str
    budget: str


@dataclass
class _Page:
    sections: list[str] = field(default_factory=list)
    toc: list[tuple[str, str]] = field(default_factory=list)
    costs: list[_Cost] = field(default_factory=list)
    keeps: list[_Keep] = field(default_factory=list)
    telemetry: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _f(v: float | None, digits: int = 6) -> str:
    return "not stated" if v is None else f"{v:.{digits}g}"


def number_text(v: float) -> str:
    """How the page prints an estimate: whole numbers from 100, two decimals from 1, else four.

    >>> number_text(19983.4), number_text(-2.345), number_text(0.30535), number_text(0.0)
    ('19,983', '-2.35', '0.3054', '0')
    """
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 1:
        return f"{v:,.2f}"
    return f"{v:.4f}"


def column_text(values: Sequence[float]) -> Any:
    """One way to print every number of a table column (so ``64.52`` does not sit among whole
    counts): whole numbers when its largest value is 100 or more, two decimals from 1, else four,
    as :func:`number_text` prints that largest value.

    >>> f = column_text([5204.3, 64.52, -3.1])
    >>> f(64.52), f(5204.3), column_text([0.5, 2.25])(0.5)
    ('65', '5,204', '0.50')
    """
    top = max((abs(v) for v in values if math.isfinite(v)), default=0.0)
    digits = 0 if top >= 100 else 2 if top >= 1 else 4
    return lambda v: f"{v:,.{digits}f}"


#: What the report says of a series' first and last windows (issue 37).
PARTIAL_NOTE = ("† the first and last windows may be partial: a window holds only what the "
                "input held within it (a log that starts at 10:05 gives its first day's window the "
                "rest of that day only, a run stopped early its last), and panstream does not read "
                "that off the data (it would tell when clients came); compare them with care")


def _tr(nd: bool) -> str:
    return '<tr class="ndrow">' if nd else "<tr>"


def _nd_cell(nd: bool) -> str:
    return ('<td class="nd" title="' + escape(_NOISE_NOTE) + '">noise-dominated</td>' if nd
            else "<td>no</td>")


def _shown(v: float, hi: float = math.inf, lo: float = 0.0) -> float:
    """What the page shows of a released value: clamped to the possible range ``[lo, hi]``
    (docs/release.md, "Negative estimates": released values stay unbiased, shown ones do not
    leave the range)."""
    return min(max(v, lo), hi)


def _cell(v: float, hi: float = math.inf, fmt: Any = number_text) -> str:
    """A table cell of a released value, shown clamped; a clamped cell is marked ``*`` and its
    tooltip gives the released (unbiased) value."""
    s = _shown(v, hi)
    if s == v:
        return f"<td>{fmt(v)}</td>"
    return (f'<td class="cl" title="released {escape(fmt(v))} (unbiased, kept in the published '
            f'file); shown at the edge of the possible range">{fmt(s)}*</td>')


def _inline(v: float, hi: float = math.inf) -> str:
    """A released value in running text, shown clamped as in a table cell (:func:`_cell`): a
    clamped one is marked ``*`` and its tooltip gives the released (unbiased) value."""
    s = _shown(v, hi)
    if s == v:
        return number_text(v)
    return (f'<span class="cl" title="released {escape(number_text(v))} (unbiased, kept in the '
            f'published file); shown at the edge of the possible range">{number_text(s)}*</span>')


_CLAMP_NOTE = ("* shown at the edge of the possible range (never below 0): the released value, "
               "unbiased and kept as it is in the published file, lies outside it (hover the "
               "cell for it).")


def _cap(d: Mapping[str, Any]) -> float:
    """The largest count a release's figure can have: its universe's size where the file says
    it, else unbounded. A hashed table's linear count may exceed its size (up to ``size ln
    size``, where the release itself caps it), so it is unbounded here."""
    return count_cap(str(get(d, "universe") or ""), _finite(get(d, "size")))


def render(series: Sequence[SeriesInput] = (), releases: Sequence[ReleaseInput] = (), *,
           title: str = "panstream report", horizon: int | None = None,
           same_state: bool = False, generated: float | None = None) -> str:
    """The page for ``series`` and ``releases`` (each a single figure or a map).

    Args:
        series: released series (per window, with intervals).
        releases: release JSON objects; a map (rows per bucket) is drawn as a map.
        title: the page's heading.
        horizon: seconds; adds "any HORIZON" to each series' accounting (``--horizon 7d``).
        same_state: the releases were all drawn from one state (one ledger), so the largest of
            their totals covers them all; otherwise their totals add up (an upper bound).
        generated: UNIX time printed as the page's date (default: now).

    Raises:
        ConfigurationError: nothing to show, or an input without an estimate and interval.
    """
    if not series and not releases:
        raise ConfigurationError("nothing to report: give --series, --release or --map")
    page = _Page()
    if same_state:
        unchecked = check_same_state(releases)
        if unchecked:
            page.warnings.append(unchecked)
    for i, s in enumerate(series):
        _series_section(page, s, f"series-{i + 1}", horizon)
    for i, r in enumerate(releases):
        if is_country(r.data):
            _country_section(page, r, f"countries-{i + 1}")
        elif is_map(r.data):
            _map_section(page, r, f"map-{i + 1}")
        else:
            _release_section(page, r, f"release-{i + 1}")
    body = [_cost_section(page, same_state), *page.sections, _keeps_section(page),
            _reading_section()]
    body = [b.replace("<th>", '<th scope="col">').replace('<th class="t">',
                                                          '<th scope="col" class="t">')
            for b in body]
    when = iso_label(time.time() if generated is None else generated)
    toc = "".join(f'<li><a href="#{a}">{escape(t)}</a></li>' for a, t in
                  [("privacy", "Privacy cost per person"), *page.toc,
                   ("kept", "What is kept, and what never is"), ("reading", "How to read this page")])
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body><main>"
        f"<h1>{escape(title)}</h1>"
        '<p class="lead">Published results of a pan-private measurement: every number is noisy, '
        "comes with its interval, and was paid for from a privacy budget. This page was made from "
        "the released files only: it never read a stored table and spent no budget.</p>"
        f'<nav aria-label="Contents"><ul>{toc}</ul></nav>'
        + "".join(body)
        + f'<footer>Made by panstream report {escape(__version__)} on {escape(when)} from: '
        + escape(", ".join([s.name for s in series] + [r.name for r in releases]))
        + ". The page is self-contained: no script, font, image or link to fetch.</footer>"
        "</main></body></html>\n")


def check_same_state(releases: Sequence[ReleaseInput]) -> str | None:
    """Refuse ``--same-state`` for releases that were not charged to one state, and return a
    warning (else ``None``) when some cannot be checked.

    Every release JSON since issue 37 carries its state's ``state_id``: the random label of the
    ledger it was charged to (created with the state from the OS CSPRNG, never from data; a
    rotation starts a new one). Releases with different ids come from different states (or
    epochs), whose totals add up. A file without an id (written before issue 37) is checked by
    its public parameters only, as before, and the warning says so: two states with equal
    parameters cannot be told apart that way.

    Raises:
        ConfigurationError: two ids differ, or public parameters show different tables.
    """
    ids: dict[str, str] = {}
    missing: list[str] = []
    for r in releases:
        sid = get(r.data, "state_id")
        if isinstance(sid, str) and sid:
            ids.setdefault(sid, r.name)
        else:
            missing.append(r.name)
    if len(ids) > 1:
        (a, x), (b, y) = list(ids.items())[:2]
        msg = (f"--same-state: {x} and {y} were charged to different states (state ids {a} and "
               f"{b}): their privacy costs add up; leave --same-state out")
        raise ConfigurationError(msg)
    _same_parameters(releases)
    if not missing:
        return None
    return (f"--same-state could not be checked for {', '.join(missing)}: written before "
            "releases named their state (no state_id), so only their public parameters were "
            "compared; two states with equal parameters would pass. Release again to check it")


def _same_parameters(releases: Sequence[ReleaseInput]) -> None:
    """Refuse ``--same-state`` for releases whose public parameters show different tables."""
    keys = ("universe", "p", "q", "alpha", "epsilon_state", "budget")
    seen: dict[tuple[Any, ...], str] = {}
    for r in releases:
        f = figure(r.data) if not is_map(r.data) or r.data.get("total") else None
        sig = tuple(get(r.data, k) for k in keys if k != "epsilon_state") + (
            None if f is None else f.epsilon_state,)
        seen.setdefault(sig, r.name)
    if len(seen) > 1:
        a, b = list(seen.values())[:2]
        msg = (f"--same-state: {a} and {b} cannot come from one state (their universe, "
               "calibration, state epsilon or budget differ); leave --same-state out")
        raise ConfigurationError(msg)


def _day_label(start: float, size: int) -> str:
    text = iso_label(start)
    if size % 86400 == 0 and int(start) % 86400 == 0:
        return text[:10]
    return text[5:16].replace("T", " ")


def _series_section(page: _Page, s: SeriesInput, anchor: str, horizon: int | None) -> None:
    recs = sorted(s.records, key=lambda r: float(r.get("start") or 0))
    if not recs:
        raise ConfigurationError(f"{s.name}: the series has no released window yet")
    figs: list[Figure] = []
    for n, r in enumerate(recs, start=1):
        try:
            figs.append(figure(r))
        except ConfigurationError as exc:
            raise ConfigurationError(f"{s.name}, window {n}: {exc}") from None
    for r in recs:
        if r.get("start") is None or r.get("end") is None:
            raise ConfigurationError(f"{s.name}: a record has no start/end: not a window series")
    size = int(float(recs[-1]["end"]) - float(recs[-1]["start"]))
    late = [r for r in recs if r.get("late_records") is not None]
    if late:
        exact = any(_finite(r.get("late_sd")) in (None, 0.0) for r in late)
        page.telemetry.append(
            f"{s.name} also published late and untimed line counts for {len(late)} window(s) "
            + ("EXACTLY (--exact-counts: epsilon infinity for those counts)" if exact else
               "with noise per ARRIVAL (--telemetry-epsilon E: k x E for a person with k late "
               "arrivals; E is not in the series)")
            + ", on top of the total above")
    f0 = figs[0]
    stat = f0.statistic
    pct = f"{100 * f0.confidence:g} %"
    nd = sum(f.noise_dominated for f in figs)
    title = f"{stat} per {duration_text(size)} window: {f0.universe or s.name}"
    page.toc.append((anchor, f"Series: {s.name}"))
    caps = [_cap(r) for r in recs]
    pts = [ChartPoint(x=(float(r["start"]) + float(r["end"])) / 2, value=_shown(f.estimate, c),
                      low=_shown(f.low, c), high=_shown(f.high, c),
                      label=_day_label(float(r["start"]), size), noise_dominated=f.noise_dominated)
           for r, f, c in zip(recs, figs, caps, strict=True)]
    edge = {0, len(pts) - 1} if len(pts) > 1 else set()
    pts = [replace(p, label=p.label + "†") if i in edge else p for i, p in enumerate(pts)]
    chart = interval_chart(pts, title=title, xlabel=f"window (UTC), {duration_text(size)} each",
                           ylabel=f"{stat} (noisy)", band=True)
    rows = []
    clamped = False
    fmt = column_text([v for f in figs for v in (f.estimate, f.low, f.high)])
    for i, (r, f, c) in enumerate(zip(recs, figs, caps, strict=True)):
        clamped |= any(_shown(v, c) != v for v in (f.estimate, f.low, f.high))
        rows.append(f"{_tr(f.noise_dominated)}"
                    f"<td>{escape(str(r.get('window', '')))}</td>"
                    f"<td>{escape(iso_label(float(r['end'])))}"
                    + (' <span title="may be partial">†</span>' if i in edge else "")
                    + f"</td>{_cell(f.estimate, c, fmt)}{_cell(f.low, c, fmt)}"
                    f"{_cell(f.high, c, fmt)}"
                    f"<td>{_f(f.epsilon_total)}</td>{_nd_cell(f.noise_dominated)}</tr>")
    eps = [f.epsilon_total for f in figs]
    known = all(e is not None for e in eps)
    total = math.fsum(e for e in eps if e is not None) if known else None
    ew = max((e for e in eps if e is not None), default=None)
    hline = ("" if horizon is None or ew is None else
             f"<p>Over a horizon: {escape(horizon_line(ew, size, horizon))} (the largest window "
             "epsilon of the series).</p>")
    page.costs.append(_Cost("series", s.name, _f(figs[-1].epsilon_state),
                            f"{_f(figs[-1].epsilon_release)} per window", total,
                            f"{len(figs)} windows x up to {_f(ew)} each (state + release): a "
                            "person seen in every window"))
    for key in {(f.family, f.universe) for f in figs}:
        r0 = next(r for r, f in zip(recs, figs, strict=True) if (f.family, f.universe) == key)
        page.keeps.append(_Keep(s.name, key[0], key[1], calibration_text(r0),
                                f"{_f(figure(r0).epsilon_state)} per window table",
                                "one release per window (the window's whole budget)"))
    page.sections.append(
        f'<section id="{anchor}"><h2>Series: {escape(s.name)}</h2>'
        f"<p>{len(recs)} windows of {escape(duration_text(size))} from "
        f"{escape(str(recs[0].get('window', '')))} to {escape(iso_label(float(recs[-1]['end'])))}; "
        f"{escape(stat)} per window ({escape(f0.family)} family, universe "
        f"<code>{escape(f0.universe)}</code>), with {pct} intervals. "
        f"{nd} of {len(recs)} noise-dominated. Each window had its own table, released once.</p>"
        f'<figure>{chart}<figcaption>Each dot is a window\'s noisy estimate; the bar and the band '
        f"show its {pct} interval, clamped to the possible range (never below 0); a ring marks a "
        "noise-dominated window."
        + (f" {escape(PARTIAL_NOTE)}." if edge else "") + "</figcaption></figure>"
        f"<details{' open' if len(recs) <= _OPEN_ROWS else ''}><summary>Table: the "
        f"{len(recs):,} windows (the numbers of the chart)</summary>"
        f"<table><caption>The windows of {escape(s.name)}</caption>"
        f"<thead><tr><th>window</th><th>end (UTC)</th><th>{escape(stat)}</th><th>low</th>"
        f"<th>high</th><th>epsilon (window)</th><th>noise</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
        + (f'<p class="note">{escape(_CLAMP_NOTE)}</p>' if clamped else "")
        + (f'<p class="note">{escape(PARTIAL_NOTE)}.</p>' if edge else "")
        + f"</details>{hline}</section>")


def _release_figures(d: Mapping[str, Any]) -> list[tuple[str, Figure]]:
    """The headline and, for a frequency release, its other counts (seen once, returning)."""
    head = figure(d)
    out = [(head.statistic, head)]
    stats = get(d, "stats")
    if isinstance(stats, Mapping):
        for name in ("once", "returning"):
            v = stats.get(name)
            if not isinstance(v, Mapping):
                continue
            val, lo, hi = (_finite(v.get(k)) for k in ("value", "low", "high"))
            if val is None or lo is None or hi is None:
                continue
            out.append((name, replace(head, statistic=name, estimate=val, low=lo, high=hi,
                                      stderr=_finite(v.get("stderr")))))
    return out


def _finite(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _release_section(page: _Page, r: ReleaseInput, anchor: str) -> None:
    try:
        figs = _release_figures(r.data)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{r.name}: {exc}") from None
    head = figs[0][1]
    pct = f"{100 * head.confidence:g} %"
    c = _cap(r.data)
    page.toc.append((anchor, f"Release: {r.name}"))
    pts = [ChartPoint(x=float(i), value=_shown(f.estimate, c), low=_shown(f.low, c),
                      high=_shown(f.high, c), label=name, noise_dominated=f.noise_dominated)
           for i, (name, f) in enumerate(figs)]
    chart = interval_chart(pts, title=f"{head.statistic}: {head.universe or r.name}",
                           xlabel="statistic", ylabel="estimate (noisy)", width=560, height=300)
    clamped = any(_shown(v, c) != v for _, f in figs for v in (f.estimate, f.low, f.high))
    rows = "".join(
        f"{_tr(f.noise_dominated)}<td>{escape(name)}</td>"
        f"{_cell(f.estimate, c)}{_cell(f.low, c)}{_cell(f.high, c)}"
        f"<td>{'' if f.stderr is None else number_text(f.stderr)}</td>{_nd_cell(f.noise_dominated)}</tr>"
        for name, f in figs)
    _add_release_cost(page, r, head, "release")
    mech = get(r.data, "mechanism")
    page.sections.append(
        f'<section id="{anchor}"><h2>Release: {escape(r.name)}</h2>'
        f"<p><strong>{escape(head.statistic)} {_inline(head.estimate, c)}</strong>, "
        f"{pct} interval [{_inline(head.low, c)}, {_inline(head.high, c)}]"
        + (" \u2014 <span class=\"ndtag\">noise-dominated</span>" if head.noise_dominated else "")
        + f" ({escape(head.family)} family, universe <code>{escape(head.universe)}</code>"
        + (f", {escape(str(mech))} noise" if mech else "")
        + f", epsilon {_f(head.epsilon_release)} for this release).</p>"
        f"<figure>{chart}<figcaption>The released estimate(s) with their {pct} intervals, "
        "shown within the possible range (never below 0).</figcaption></figure>"
        f"<table><caption>The numbers of {escape(r.name)}</caption><thead><tr><th>statistic</th>"
        "<th>estimate</th><th>low</th><th>high</th><th>stderr</th><th>noise</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
        + (f'<p class="note">{escape(_CLAMP_NOTE)}</p>' if clamped else "")
        + "</section>")


def _add_release_cost(page: _Page, r: ReleaseInput, head: Figure, what: str,
                      eps_release: str | None = None, note: str = "") -> None:
    budget, left = get(r.data, "budget"), get(r.data, "budget_remaining")
    page.costs.append(_Cost(what, r.name, _f(head.epsilon_state),
                            eps_release or _f(head.epsilon_release), head.epsilon_total,
                            note + "the table's total after this release (state + everything "
                            "its ledger had spent)"))
    page.keeps.append(_Keep(r.name, family_of(r.data), head.universe, calibration_text(r.data),
                            _f(head.epsilon_state),
                            "not stated" if budget is None else
                            f"{float(budget):g}, {float(left or 0):g} left after this release"))


def _is_ip_map(universe: str, n: int) -> bool:
    return universe.startswith(("ipv4:", "ipv6:")) and n > 1 and n & (n - 1) == 0


def _rule_text(rule: Any, n_coloured: int) -> tuple[str, str]:
    """The sentence of the map's summary and the caption that say which buckets are coloured."""
    if rule.map_wide:
        fdr = f"{100 * rule.fdr:g} %"
        name = ("Benjamini-Hochberg" if rule.name == "benjamini-hochberg" else rule.name)
        summary = (f"Coloured: the {n_coloured:,} bucket(s) the release told from empty by one "
                   f"rule over the whole map ({name}, false-discovery rate {fdr}, from the "
                   f"file): on average at most {fdr} of the coloured buckets are empty, and a map "
                   f"of nobody shows any colour at most {fdr} of the time. Grey: the rest, "
                   "which could be empty.")
        caption = (f"coloured where the release's map-wide rule ({name}, false-discovery rate "
                   f"{fdr}) tells the bucket from empty, by its density (clamped to 0..1); grey: "
                   "could be empty; an orange ring: coloured but noise-dominated")
    else:
        summary = (f"This file predates the map-wide rule (its rows carry no signal): the "
                   f"{n_coloured:,} coloured bucket(s) follow the old per-bucket rule (interval "
                   "above 0 and not noise-dominated), under which some empty buckets are "
                   "coloured by chance (about 2.5 % of them). Release the map again for the "
                   "map-wide rule.")
        caption = ("coloured by density (clamped to 0..1) where the bucket's own interval is "
                   "above 0 and not wider than the value (the old per-bucket rule of this file: "
                   "some colours are chance); grey: the rest")
    return summary, caption


def _map_section(page: _Page, r: ReleaseInput, anchor: str) -> None:
    d = r.data
    try:
        buckets = map_buckets(d)
        head = figure(d) if (d.get("total") or d.get("estimate") is not None) else None
    except ConfigurationError as exc:
        raise ConfigurationError(f"{r.name}: {exc}") from None
    n = len(buckets)
    if n > MAX_MAP_BUCKETS:
        msg = (f"{r.name}: {n:,} buckets are too many for one page (at most "
               f"{MAX_MAP_BUCKETS:,}): release the map with a coarser --by")
        raise ConfigurationError(msg)
    universe = str(get(d, "universe", ""))
    by = str(get(d, "by", ""))
    conf = float(get(d, "confidence", 0.95))
    pct = f"{100 * conf:g} %"
    rule = map_rule(d)
    coloured = [b.coloured for b in buckets]
    nd = sum(b.noise_dominated for b in buckets)
    n_col = sum(coloured)
    page.toc.append((anchor, f"Map: {r.name}"))
    title = f"{universe} by {by}: noisy density per bucket" if by else f"{r.name}: per bucket"
    tips = [f"{b.label}: density {_shown(b.value, 1.0):.3f} [{_shown(b.low, 1.0):.3f}, "
            f"{_shown(b.high, 1.0):.3f}]"
            + (" (told from empty)" if c else " (could be empty)")
            + (" (noise-dominated)" if b.noise_dominated else "")
            for b, c in zip(buckets, coloured, strict=True)]
    summary, caption = _rule_text(rule, n_col)
    if _is_ip_map(universe, n):
        chart = hilbert_map([b.label for b in buckets], [_shown(b.value, 1.0) for b in buckets],
                            [_shown(b.low, 1.0) for b in buckets],
                            [_shown(b.high, 1.0) for b in buckets], title=title, tips=tips,
                            coloured=coloured, marked=[b.noise_dominated for b in buckets],
                            rule=caption)
        how = ("Buckets lie on a Hilbert curve (neighbouring prefixes stay neighbours; every "
               f"square block is one shorter prefix), {caption}. Hover a bucket for its numbers.")
    else:
        pts = [ChartPoint(x=float(i), value=_shown(b.value, 1.0), low=_shown(b.low, 1.0),
                          high=_shown(b.high, 1.0), label=b.label,
                          noise_dominated=b.noise_dominated) for i, b in enumerate(buckets)]
        chart = interval_chart(pts, title=title, xlabel="bucket", ylabel="density (noisy)")
        how = ("Each dot is a bucket's noisy density (clamped to 0..1); the bar is its interval. "
               + summary)
    half = get(d, "halfwidth")
    rows = "".join(_bucket_row(b, c) for b, c in zip(buckets, coloured, strict=True))
    clamped = any(_shown(v, 1.0) != v for b in buckets for v in (b.value, b.low, b.high)) or any(
        b.distinct is not None and b.cells is not None and _shown(b.distinct, b.cells) != b.distinct
        for b in buckets)
    if head is not None:
        _add_release_cost(page, r, head, "map", f"{_f(head.epsilon_release)} once for {n:,} "
                          "buckets", "one charge for the whole map (a person is in one bucket: "
                          "parallel composition); ")
    cells = [b.cells for b in buckets]
    cap = math.inf if any(c is None for c in cells) else float(sum(c or 0 for c in cells))
    total = ("" if head is None else
             f" The whole map adds up to {escape(head.statistic)} "
             f"{_inline(head.estimate, cap)} [{_inline(head.low, cap)}, {_inline(head.high, cap)}].")
    total_clamped = head is not None and any(_shown(v, cap) != v
                                             for v in (head.estimate, head.low, head.high))
    open_attr = " open" if n <= _OPEN_ROWS else ""
    page.sections.append(
        f'<section id="{anchor}"><h2>Map: {escape(r.name)}</h2>'
        f"<p>{n:,} buckets of <code>{escape(universe)}</code>"
        + (f" by {escape(by)}" if by else "")
        + f", one epsilon ({_f(head.epsilon_release if head else None)}) for the whole map "
        "(one person is in one bucket)."
        + ("" if half is None else
           f" A bucket's density is \u00b1{float(half):.3f} at {pct} from noise alone: smaller "
           "differences between buckets are not signal.")
        + f" {nd} bucket(s) are noise-dominated.{total}</p>"
        + (f'<p class="note">{escape(_CLAMP_NOTE)}</p>' if total_clamped else "")
        + f'<p class="rule">{escape(summary)}</p>'
        f"<figure>{chart}<figcaption>{escape(how)}</figcaption></figure>"
        f"<details{open_attr}><summary>Table: the {n:,} buckets (the numbers of the map)</summary>"
        f"<table><caption>Buckets of {escape(r.name)}, {pct} intervals</caption><thead><tr>"
        "<th>bucket</th><th>density</th><th>low</th><th>high</th><th>distinct</th>"
        "<th>p (empty)</th><th>map</th>"
        f"<th>noise</th></tr></thead><tbody>{rows}</tbody></table>"
        + (f'<p class="note">{escape(_CLAMP_NOTE)}</p>' if clamped else "")
        + "</details></section>")


def _density(v: float) -> str:
    return f"{v:.4f}"


def _bucket_row(b: Bucket, coloured: bool) -> str:
    distinct = ("<td></td>" if b.distinct is None else
                _cell(b.distinct, math.inf if b.cells is None else float(b.cells)))
    p = "" if b.p_empty is None else f"{b.p_empty:.2g}"
    col = ("told from empty" if coloured else "grey") if b.signal is not None else (
        "coloured" if coloured else "grey")
    return (f"{_tr(b.noise_dominated)}<td>{escape(b.label)}</td>"
            f"{_cell(b.value, 1.0, _density)}{_cell(b.low, 1.0, _density)}"
            f"{_cell(b.high, 1.0, _density)}{distinct}<td>{p}</td><td>{col}</td>"
            f"{_nd_cell(b.noise_dominated)}</tr>")


#: The countries a per-country chart draws at most (the table lists every slot).
MAX_RANKED = 40
#: An older file (rows without ``signal``): when fewer countries than this are not
#: noise-dominated, the chart draws the largest estimates.
_MIN_RANKED = 5
_TOP = 20


def _country_section(page: _Page, r: ReleaseInput, anchor: str) -> None:
    """A per-country release (``release --by country --json``): a ranked chart of the countries
    the release told from empty by its rule over all slots (a false-discovery rate, from the
    file), how many slots that hides, the total (the sum of every slot's unbiased estimate) and a
    folded table of every slot; one charge for all of them. A file written before that rule
    (issue 37: rows named ``distinct``, no ``signal``) is drawn as it was then, and says so."""
    d = r.data
    try:
        buckets = map_buckets(d)
        head = figure(d)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{r.name}: {exc}") from None
    n = len(buckets)
    pct = f"{100 * head.confidence:g} %"
    ranked = sorted(buckets, key=lambda b: (-b.value, b.label))
    rule = map_rule(d)
    if rule.map_wide:
        told = [b for b in ranked if b.signal]
        drawn = told[:MAX_RANKED]
        fdr = f"{100 * (rule.fdr or 0):g} %"
        which = (f"the {len(told)} countr{'y' if len(told) == 1 else 'ies'} told from an empty "
                 f"one at a {fdr} false-discovery rate over all {n} slots (Benjamini-Hochberg, "
                 "from the file)"
                 + (f"; the largest {MAX_RANKED} drawn" if len(told) > MAX_RANKED else ""))
        summary = (f"{len(told)} of {n} slots are told from an empty one by one rule over all of "
                   f"them (false-discovery rate {fdr}: on average at most {fdr} of the countries "
                   f"ranked have no client). The other {n - len(told)} slots are not ranked: "
                   "each could hold no client (they are in the table).")
    else:
        # told from noise by the old per-row reading: not noise-dominated, and above 0
        clear = [b for b in ranked if not b.noise_dominated and _shown(b.value) > 0]
        drawn = clear[:MAX_RANKED] if len(clear) >= _MIN_RANKED else ranked[:_TOP]
        which = (f"the {len(clear)} countries whose estimate is above 0 and not noise-dominated"
                 + (f" (the largest {MAX_RANKED} drawn)" if len(clear) > MAX_RANKED else "")
                 if len(clear) >= _MIN_RANKED else
                 f"the {len(drawn)} largest estimates (only {len(clear)} countr"
                 f"{'y is' if len(clear) == 1 else 'ies are'} not noise-dominated)")
        summary = (f"{len(clear)} of {n} are above 0 and not noise-dominated. This file predates "
                   "the rule over all slots (its rows carry no signal): some of those are empty "
                   "countries by chance; release again for the rule.")
    universe = head.universe
    geo = get(d, "geo")
    page.toc.append((anchor, f"Countries: {r.name}"))
    pts = [ChartPoint(x=float(i), value=_shown(b.value), low=_shown(b.low), high=_shown(b.high),
                      label=b.label, noise_dominated=b.noise_dominated)
           for i, b in enumerate(drawn)]
    chart = ("<p>No country is told from an empty one: nothing is ranked.</p>" if not pts else
             ranked_chart(pts, title=f"distinct clients by country: {universe or r.name}",
                          xlabel=f"distinct clients (noisy), {pct} interval"))
    clamped = any(_shown(v) != v for b in buckets for v in (b.value, b.low, b.high))
    total_clamped = any(_shown(v) != v for v in (head.estimate, head.low, head.high))
    told_col = rule.map_wide
    fmt = column_text([v for b in buckets for v in (b.value, b.low, b.high)])
    rows = "".join(
        f"{_tr(b.noise_dominated)}<td>{i}</td><td>{escape(b.label)}</td>"
        f"{_cell(b.value, fmt=fmt)}{_cell(b.low, fmt=fmt)}{_cell(b.high, fmt=fmt)}"
        + (f"<td>{'told from empty' if b.signal else 'could be empty'}</td>" if told_col else "")
        + f"{_nd_cell(b.noise_dominated)}</tr>"
        for i, b in enumerate(ranked, start=1))
    _add_release_cost(page, r, head, "countries", f"{_f(head.epsilon_release)} once for {n} "
                      "countries", f"one charge for all {n} country slots (a person is one "
                      "address in one country: parallel composition); ")
    if geo:
        page.keeps[-1].universe += f" (countries from {geo})"
    page.sections.append(
        f'<section id="{anchor}"><h2>Countries: {escape(r.name)}</h2>'
        f"<p>Distinct clients in each of {n} country slots of <code>{escape(universe)}</code>"
        + (f" (countries from {escape(str(geo))}: the registries' assignment of each address)"
           if geo else "")
        + f", released together for <strong>one epsilon ({_f(head.epsilon_release)})</strong>: "
        "one person is one address in one country, so the slots are disjoint and one charge "
        "covers them all (parallel composition). "
        f"All countries: <strong>{escape(head.statistic)} {_inline(head.estimate)}"
        f"</strong>, {pct} interval [{_inline(head.low)}, {_inline(head.high)}]"
        + (" — <span class=\"ndtag\">noise-dominated</span>" if head.noise_dominated else "")
        + ": the sum of every slot's unbiased estimate, empty ones included (each adds its noise; "
        "summing them clamped at 0 would bias the total up).</p>"
        + (f'<p class="note">{escape(_CLAMP_NOTE)}</p>' if total_clamped else "")
        + f'<p class="rule">{escape(summary)}</p>'
        + f"<figure>{chart}<figcaption>Ranked: {escape(which)}. Each dot is a country's noisy "
        f"estimate, the bar its {pct} interval (never below 0); a ring marks a noise-dominated "
        "one. Every slot is in the table.</figcaption></figure>"
        f"<details><summary>Table: all {n} country slots, largest first</summary>"
        f"<table><caption>Countries of {escape(r.name)}, {pct} intervals</caption><thead><tr>"
        "<th>rank</th><th>country</th><th>estimate</th><th>low</th><th>high</th>"
        + ("<th>rule</th>" if told_col else "")
        + f"<th>noise</th></tr></thead><tbody>{rows}</tbody></table>"
        + (f'<p class="note">{escape(_CLAMP_NOTE)}</p>' if clamped else "")
        + "</details></section>")


def _cost_section(page: _Page, same_state: bool) -> str:
    rows = "".join(f"<tr><td>{escape(c.what)}</td><td>{escape(c.name)}</td>"
                   f"<td>{escape(c.eps_state)}</td><td>{escape(c.eps_release)}</td>"
                   f"<td><strong>{_f(c.total)}</strong></td>"
                   f'<td class="t">{escape(c.note)}</td></tr>'
                   for c in page.costs)
    series = [c for c in page.costs if c.what == "series"]
    rels = [c for c in page.costs if c.what != "series"]
    parts: list[float | None] = [c.total for c in series]
    if rels:
        tot = [c.total for c in rels if c.total is not None]
        if len(tot) < len(rels):
            parts.append(None)
        else:
            parts.append(max(tot) if same_state else math.fsum(tot))
    known = all(p is not None for p in parts)
    grand = math.fsum(p for p in parts if p is not None) if known else None
    how = ("the releases come from one state, as stated (--same-state), so the largest of their "
           "totals covers them all" if same_state else
           "each release's total is counted in full, as if each came from its own table (an upper "
           "bound: if they share a state, give --same-state)")
    return (
        '<section id="privacy"><h2>Privacy cost per person</h2>'
        f'<p class="total">A person who appears in everything shown here is covered at '
        f"<strong>epsilon {_f(grand) if grand is not None else 'unknown (an input does not state it)'}"
        "</strong> in total (pan-private: against the published numbers plus one leak of the "
        "stored state).</p>"
        + "<p>"
        + ("Series: a person seen in every window pays each window's epsilon (state + release). "
           if series else "")
        + (f"Releases: {escape(how)}. " if rels else "")
        + ("Telemetry adds 0: nothing that counts arrivals is kept or served by default.</p>"
           if not page.telemetry else
           '<strong class="ndtag">Telemetry:</strong> ' + escape("; ".join(page.telemetry))
           + ".</p>")
        + "".join(f'<p class="note"><strong class="ndtag">Unchecked:</strong> {escape(w)}.</p>'
                  for w in page.warnings)
        + "<table><caption>Epsilon of each input</caption><thead><tr><th>kind</th><th>input</th>"
        "<th>epsilon (state)</th><th>epsilon (release)</th><th>total per person</th>"
        '<th class="t">how</th>'
        f"</tr></thead><tbody>{rows}</tbody></table></section>")


def _keeps_section(page: _Page) -> str:
    rows = "".join(f"<tr><td>{escape(k.name)}</td><td>{escape(k.family)}</td>"
                   f"<td class=\"t\"><code>{escape(k.universe)}</code></td>"
                   f"<td class=\"t\">{escape(k.calibration)}</td>"
                   f"<td>{escape(k.eps_state)}</td><td class=\"t\">{escape(k.budget)}</td></tr>"
                   for k in page.keeps)
    never = "".join(f"<li>{escape(x)}</li>" for x in NEVER_KEPT)
    return (
        '<section id="kept"><h2>What is kept, and what never is</h2>'
        "<p>The deployment keeps one randomized table per state over a public universe (bits, "
        "modular counters or a sketch grid; every arrival overwrites its entry with a fresh "
        "random draw) and public parameters: the family, the universe, the calibration and the "
        "privacy ledger. A leaked or subpoenaed table is covered at its state epsilon.</p>"
        "<table><caption>What each input's deployment keeps</caption><thead><tr><th>input</th>"
        "<th>family</th><th class=\"t\">universe</th><th class=\"t\">calibration</th>"
        '<th>epsilon (state)</th><th class="t">budget</th></tr></thead>'
        f"<tbody>{rows}</tbody></table>"
        f"<p>It never keeps:</p><ul>{never}</ul></section>")


def _reading_section() -> str:
    return (
        '<section id="reading"><h2>How to read this page</h2><ul>'
        "<li><strong>Every number is noisy.</strong> The interval (usually 95 %) covers the "
        "truth in that share of releases; the bars, bands and low/high columns draw it.</li>"
        f"<li><strong>Noise-dominated</strong> (a ring on a chart or on a map's bucket, the "
        "column marked in a table): "
        f"{escape(_NOISE_NOTE)}.</li>"
        "<li><strong>Distinct clients</strong> are distinct client addresses over what the "
        "table saw (a whole log, or one window): not GoAccess's \u201cunique visitors\u201d, which "
        "count each address once per day and per user agent, so they run higher (docs/logs.md "
        "compares them). Several people behind one address are one client.</li>"
        "<li><strong>Epsilon</strong> measures how much the published numbers (plus one leaked "
        "table) can reveal about one person; smaller is more private. Epsilons of separate "
        "releases add up for a person who is in all of them.</li>"
        "<li><strong>Maps</strong> colour only the buckets told from empty by one rule over the "
        "whole map (a false-discovery rate, stated with each map); grey buckets could be "
        "empty.</li>"
        "<li>Released estimates are unbiased, so near 0 they can be negative; this page shows "
        "every figure within its possible range (never below 0). A table cell marked * was "
        "clamped; the published file keeps the released value.</li>"
        "</ul></section>")


_CSS = (
    "body{margin:0;background:#fff;color:#1b1b1b;font:15px/1.5 system-ui,-apple-system,"
    "'Segoe UI',Roboto,'Helvetica Neue',Arial,sans-serif}"
    "main{max-width:980px;margin:0 auto;padding:16px 24px 40px}"
    "h1{font-size:26px;margin:8px 0 4px}h2{font-size:20px;margin:28px 0 8px;"
    "border-bottom:1px solid #ddd;padding-bottom:4px}"
    ".lead{color:#333}.total{font-size:17px}"
    "nav ul{margin:4px 0;padding-left:20px;columns:2}"
    "figure{margin:12px 0}figcaption{font-size:13px;color:#444}"
    "svg{max-width:100%;height:auto;font-family:inherit}"
    "table{border-collapse:collapse;margin:8px 0;font-size:13px;"
    "font-variant-numeric:tabular-nums}caption{text-align:left;font-weight:600;padding:4px 0}"
    "th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}"
    "th:first-child,td:first-child,th.t,td.t{text-align:left}th{background:#f2f4f7}"
    "td.nd{color:#8a3a00;font-weight:600}tr.ndrow{background:#fff3e8}"
    ".ndtag{color:#8a3a00;font-weight:600}.cl{color:#555}.note{font-size:13px;color:#444}"
    "code{font-size:13px;background:#f4f4f4;padding:0 3px}"
    "details summary{cursor:pointer;font-weight:600;margin:6px 0}"
    "footer{margin-top:32px;font-size:12px;color:#555}")
