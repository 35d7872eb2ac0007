"""The report's sections of a series and of a single release: a chart, its table, its cost.

:func:`series_section` draws a released series (one estimate per window, with its interval, the
first and last windows marked as possibly partial); :func:`release_section` a single release
(a frequency release's other counts beside its headline). Each adds its privacy cost and what its
deployment keeps to the :class:`~panstream.report.parts.Page`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from html import escape
from typing import Any

from panstream.errors import ConfigurationError
from panstream.report.fields import Figure, calibration_text, figure, finite, get
from panstream.report.parts import (
    CLAMP_NOTE,
    OPEN_ROWS,
    PARTIAL_NOTE,
    Cost,
    Keep,
    Page,
    ReleaseInput,
    SeriesInput,
    add_release_cost,
    cell,
    column_text,
    count_cap_of,
    inline,
    nd_cell,
    number_text,
    shown,
    stated,
    tr,
)
from panstream.report.svg import ChartPoint, interval_chart
from panstream.windows import duration_text, horizon_line
from panstream.windows.eventtime import label as iso_label

__all__ = ["release_section", "series_section"]


def _day_label(start: float, size: int) -> str:
    text = iso_label(start)
    if size % 86400 == 0 and int(start) % 86400 == 0:
        return text[:10]
    return text[5:16].replace("T", " ")


def series_section(page: Page, s: SeriesInput, anchor: str, horizon: int | None) -> None:
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
        exact = any(finite(r.get("late_sd")) in (None, 0.0) for r in late)
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
    caps = [count_cap_of(r) for r in recs]
    pts = [ChartPoint(x=(float(r["start"]) + float(r["end"])) / 2, value=shown(f.estimate, c),
                      low=shown(f.low, c), high=shown(f.high, c),
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
        clamped |= any(shown(v, c) != v for v in (f.estimate, f.low, f.high))
        rows.append(f"{tr(f.noise_dominated)}"
                    f"<td>{escape(str(r.get('window', '')))}</td>"
                    f"<td>{escape(iso_label(float(r['end'])))}"
                    + (' <span title="may be partial">†</span>' if i in edge else "")
                    + f"</td>{cell(f.estimate, c, fmt)}{cell(f.low, c, fmt)}"
                    f"{cell(f.high, c, fmt)}"
                    f"<td>{stated(f.epsilon_total)}</td>{nd_cell(f.noise_dominated)}</tr>")
    eps = [f.epsilon_total for f in figs]
    known = all(e is not None for e in eps)
    total = math.fsum(e for e in eps if e is not None) if known else None
    ew = max((e for e in eps if e is not None), default=None)
    hline = ("" if horizon is None or ew is None else
             f"<p>Over a horizon: {escape(horizon_line(ew, size, horizon))} (the largest window "
             "epsilon of the series).</p>")
    page.costs.append(Cost("series", s.name, stated(figs[-1].epsilon_state),
                            f"{stated(figs[-1].epsilon_release)} per window", total,
                            f"{len(figs)} windows x up to {stated(ew)} each (state + release): a "
                            "person seen in every window"))
    for key in {(f.family, f.universe) for f in figs}:
        r0 = next(r for r, f in zip(recs, figs, strict=True) if (f.family, f.universe) == key)
        page.keeps.append(Keep(s.name, key[0], key[1], calibration_text(r0),
                                f"{stated(figure(r0).epsilon_state)} per window table",
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
        f"<details{' open' if len(recs) <= OPEN_ROWS else ''}><summary>Table: the "
        f"{len(recs):,} windows (the numbers of the chart)</summary>"
        f"<table><caption>The windows of {escape(s.name)}</caption>"
        f"<thead><tr><th>window</th><th>end (UTC)</th><th>{escape(stat)}</th><th>low</th>"
        f"<th>high</th><th>epsilon (window)</th><th>noise</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
        + (f'<p class="note">{escape(CLAMP_NOTE)}</p>' if clamped else "")
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
            val, lo, hi = (finite(v.get(k)) for k in ("value", "low", "high"))
            if val is None or lo is None or hi is None:
                continue
            out.append((name, replace(head, statistic=name, estimate=val, low=lo, high=hi,
                                      stderr=finite(v.get("stderr")))))
    return out


def release_section(page: Page, r: ReleaseInput, anchor: str) -> None:
    try:
        figs = _release_figures(r.data)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{r.name}: {exc}") from None
    head = figs[0][1]
    pct = f"{100 * head.confidence:g} %"
    c = count_cap_of(r.data)
    page.toc.append((anchor, f"Release: {r.name}"))
    pts = [ChartPoint(x=float(i), value=shown(f.estimate, c), low=shown(f.low, c),
                      high=shown(f.high, c), label=name, noise_dominated=f.noise_dominated)
           for i, (name, f) in enumerate(figs)]
    chart = interval_chart(pts, title=f"{head.statistic}: {head.universe or r.name}",
                           xlabel="statistic", ylabel="estimate (noisy)", width=560, height=300)
    clamped = any(shown(v, c) != v for _, f in figs for v in (f.estimate, f.low, f.high))
    rows = "".join(
        f"{tr(f.noise_dominated)}<td>{escape(name)}</td>"
        f"{cell(f.estimate, c)}{cell(f.low, c)}{cell(f.high, c)}"
        f"<td>{'' if f.stderr is None else number_text(f.stderr)}</td>{nd_cell(f.noise_dominated)}</tr>"
        for name, f in figs)
    add_release_cost(page, r, head, "release")
    mech = get(r.data, "mechanism")
    page.sections.append(
        f'<section id="{anchor}"><h2>Release: {escape(r.name)}</h2>'
        f"<p><strong>{escape(head.statistic)} {inline(head.estimate, c)}</strong>, "
        f"{pct} interval [{inline(head.low, c)}, {inline(head.high, c)}]"
        + (" \u2014 <span class=\"ndtag\">noise-dominated</span>" if head.noise_dominated else "")
        + f" ({escape(head.family)} family, universe <code>{escape(head.universe)}</code>"
        + (f", {escape(str(mech))} noise" if mech else "")
        + f", epsilon {stated(head.epsilon_release)} for this release).</p>"
        f"<figure>{chart}<figcaption>The released estimate(s) with their {pct} intervals, "
        "shown within the possible range (never below 0).</figcaption></figure>"
        f"<table><caption>The numbers of {escape(r.name)}</caption><thead><tr><th>statistic</th>"
        "<th>estimate</th><th>low</th><th>high</th><th>stderr</th><th>noise</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
        + (f'<p class="note">{escape(CLAMP_NOTE)}</p>' if clamped else "")
        + "</section>")
