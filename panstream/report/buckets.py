"""The report's sections of releases by bucket: a density map, and distinct clients by country.

:func:`map_section` draws a map (on a Hilbert curve for an address universe, else as intervals),
coloured where the release's map-wide rule told a bucket from empty; :func:`country_section`
ranks the countries told from empty and tabulates every slot. Both cost one charge for all their
buckets (parallel composition), which they add to the :class:`~panstream.report.parts.Page`.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

from panstream.errors import ConfigurationError
from panstream.report.fields import Bucket, figure, get, map_buckets, map_rule
from panstream.report.parts import (
    CLAMP_NOTE,
    OPEN_ROWS,
    Page,
    ReleaseInput,
    add_release_cost,
    cell,
    column_text,
    density_text,
    inline,
    nd_cell,
    shown,
    stated,
    tr,
)
from panstream.report.svg import ChartPoint, hilbert_map, interval_chart, ranked_chart

__all__ = ["MAX_MAP_BUCKETS", "MAX_RANKED", "country_section", "map_section"]


#: Buckets a map may have to be drawn and tabulated on the page (a page stays light enough to mail).
MAX_MAP_BUCKETS = 4096


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


def map_section(page: Page, r: ReleaseInput, anchor: str) -> None:
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
    tips = [f"{b.label}: density {shown(b.value, 1.0):.3f} [{shown(b.low, 1.0):.3f}, "
            f"{shown(b.high, 1.0):.3f}]"
            + (" (told from empty)" if c else " (could be empty)")
            + (" (noise-dominated)" if b.noise_dominated else "")
            for b, c in zip(buckets, coloured, strict=True)]
    summary, caption = _rule_text(rule, n_col)
    if _is_ip_map(universe, n):
        chart = hilbert_map([b.label for b in buckets], [shown(b.value, 1.0) for b in buckets],
                            [shown(b.low, 1.0) for b in buckets],
                            [shown(b.high, 1.0) for b in buckets], title=title, tips=tips,
                            coloured=coloured, marked=[b.noise_dominated for b in buckets],
                            rule=caption)
        how = ("Buckets lie on a Hilbert curve (neighbouring prefixes stay neighbours; every "
               f"square block is one shorter prefix), {caption}. Hover a bucket for its numbers.")
    else:
        pts = [ChartPoint(x=float(i), value=shown(b.value, 1.0), low=shown(b.low, 1.0),
                          high=shown(b.high, 1.0), label=b.label,
                          noise_dominated=b.noise_dominated) for i, b in enumerate(buckets)]
        chart = interval_chart(pts, title=title, xlabel="bucket", ylabel="density (noisy)")
        how = ("Each dot is a bucket's noisy density (clamped to 0..1); the bar is its interval. "
               + summary)
    half = get(d, "halfwidth")
    rows = "".join(_bucket_row(b, c) for b, c in zip(buckets, coloured, strict=True))
    clamped = any(shown(v, 1.0) != v for b in buckets for v in (b.value, b.low, b.high)) or any(
        b.distinct is not None and b.cells is not None and shown(b.distinct, b.cells) != b.distinct
        for b in buckets)
    if head is not None:
        add_release_cost(page, r, head, "map", f"{stated(head.epsilon_release)} once for {n:,} "
                          "buckets", "one charge for the whole map (a person is in one bucket: "
                          "parallel composition); ")
    cells = [b.cells for b in buckets]
    cap = math.inf if any(c is None for c in cells) else float(sum(c or 0 for c in cells))
    total = ("" if head is None else
             f" The whole map adds up to {escape(head.statistic)} "
             f"{inline(head.estimate, cap)} [{inline(head.low, cap)}, {inline(head.high, cap)}].")
    total_clamped = head is not None and any(shown(v, cap) != v
                                             for v in (head.estimate, head.low, head.high))
    open_attr = " open" if n <= OPEN_ROWS else ""
    page.sections.append(
        f'<section id="{anchor}"><h2>Map: {escape(r.name)}</h2>'
        f"<p>{n:,} buckets of <code>{escape(universe)}</code>"
        + (f" by {escape(by)}" if by else "")
        + f", one epsilon ({stated(head.epsilon_release if head else None)}) for the whole map "
        "(one person is in one bucket)."
        + ("" if half is None else
           f" A bucket's density is \u00b1{float(half):.3f} at {pct} from noise alone: smaller "
           "differences between buckets are not signal.")
        + f" {nd} bucket(s) are noise-dominated.{total}</p>"
        + (f'<p class="note">{escape(CLAMP_NOTE)}</p>' if total_clamped else "")
        + f'<p class="rule">{escape(summary)}</p>'
        f"<figure>{chart}<figcaption>{escape(how)}</figcaption></figure>"
        f"<details{open_attr}><summary>Table: the {n:,} buckets (the numbers of the map)</summary>"
        f"<table><caption>Buckets of {escape(r.name)}, {pct} intervals</caption><thead><tr>"
        "<th>bucket</th><th>density</th><th>low</th><th>high</th><th>distinct</th>"
        "<th>p (empty)</th><th>map</th>"
        f"<th>noise</th></tr></thead><tbody>{rows}</tbody></table>"
        + (f'<p class="note">{escape(CLAMP_NOTE)}</p>' if clamped else "")
        + "</details></section>")


def _bucket_row(b: Bucket, coloured: bool) -> str:
    distinct = ("<td></td>" if b.distinct is None else
                cell(b.distinct, math.inf if b.cells is None else float(b.cells)))
    p = "" if b.p_empty is None else f"{b.p_empty:.2g}"
    col = ("told from empty" if coloured else "grey") if b.signal is not None else (
        "coloured" if coloured else "grey")
    return (f"{tr(b.noise_dominated)}<td>{escape(b.label)}</td>"
            f"{cell(b.value, 1.0, density_text)}{cell(b.low, 1.0, density_text)}"
            f"{cell(b.high, 1.0, density_text)}{distinct}<td>{p}</td><td>{col}</td>"
            f"{nd_cell(b.noise_dominated)}</tr>")


#: The countries a per-country chart draws at most (the table lists every slot).
MAX_RANKED = 40


#: An older file (rows without ``signal``): when fewer countries than this are not
#: noise-dominated, the chart draws the largest estimates.
_MIN_RANKED = 5


_TOP = 20


def country_section(page: Page, r: ReleaseInput, anchor: str) -> None:
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
        clear = [b for b in ranked if not b.noise_dominated and shown(b.value) > 0]
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
    pts = [ChartPoint(x=float(i), value=shown(b.value), low=shown(b.low), high=shown(b.high),
                      label=b.label, noise_dominated=b.noise_dominated)
           for i, b in enumerate(drawn)]
    chart = ("<p>No country is told from an empty one: nothing is ranked.</p>" if not pts else
             ranked_chart(pts, title=f"distinct clients by country: {universe or r.name}",
                          xlabel=f"distinct clients (noisy), {pct} interval"))
    clamped = any(shown(v) != v for b in buckets for v in (b.value, b.low, b.high))
    total_clamped = any(shown(v) != v for v in (head.estimate, head.low, head.high))
    told_col = rule.map_wide
    fmt = column_text([v for b in buckets for v in (b.value, b.low, b.high)])
    rows = "".join(
        f"{tr(b.noise_dominated)}<td>{i}</td><td>{escape(b.label)}</td>"
        f"{cell(b.value, fmt=fmt)}{cell(b.low, fmt=fmt)}{cell(b.high, fmt=fmt)}"
        + (f"<td>{'told from empty' if b.signal else 'could be empty'}</td>" if told_col else "")
        + f"{nd_cell(b.noise_dominated)}</tr>"
        for i, b in enumerate(ranked, start=1))
    add_release_cost(page, r, head, "countries", f"{stated(head.epsilon_release)} once for {n} "
                      "countries", f"one charge for all {n} country slots (a person is one "
                      "address in one country: parallel composition); ")
    if geo:
        page.keeps[-1].universe += f" (countries from {geo})"
    page.sections.append(
        f'<section id="{anchor}"><h2>Countries: {escape(r.name)}</h2>'
        f"<p>Distinct clients in each of {n} country slots of <code>{escape(universe)}</code>"
        + (f" (countries from {escape(str(geo))}: the registries' assignment of each address)"
           if geo else "")
        + f", released together for <strong>one epsilon ({stated(head.epsilon_release)})</strong>: "
        "one person is one address in one country, so the slots are disjoint and one charge "
        "covers them all (parallel composition). "
        f"All countries: <strong>{escape(head.statistic)} {inline(head.estimate)}"
        f"</strong>, {pct} interval [{inline(head.low)}, {inline(head.high)}]"
        + (" — <span class=\"ndtag\">noise-dominated</span>" if head.noise_dominated else "")
        + ": the sum of every slot's unbiased estimate, empty ones included (each adds its noise; "
        "summing them clamped at 0 would bias the total up).</p>"
        + (f'<p class="note">{escape(CLAMP_NOTE)}</p>' if total_clamped else "")
        + f'<p class="rule">{escape(summary)}</p>'
        + f"<figure>{chart}<figcaption>Ranked: {escape(which)}. Each dot is a country's noisy "
        f"estimate, the bar its {pct} interval (never below 0); a ring marks a noise-dominated "
        "one. Every slot is in the table.</figcaption></figure>"
        f"<details><summary>Table: all {n} country slots, largest first</summary>"
        f"<table><caption>Countries of {escape(r.name)}, {pct} intervals</caption><thead><tr>"
        "<th>rank</th><th>country</th><th>estimate</th><th>low</th><th>high</th>"
        + ("<th>rule</th>" if told_col else "")
        + f"<th>noise</th></tr></thead><tbody>{rows}</tbody></table>"
        + (f'<p class="note">{escape(CLAMP_NOTE)}</p>' if clamped else "")
        + "</details></section>")
