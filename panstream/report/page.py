"""The report page: one self-contained HTML document of what may be published.

:func:`render` takes released results only (series records and release JSON objects, already
read) and returns the page as a string. It draws every estimate with its interval, marks the
noise-dominated ones (:func:`panstream.release.honesty.noise_dominated`), adds up what a person is
covered at, and says what the deployment keeps and what it never keeps. It never sees a table and
spends no budget: anyone may run it on the published files.

The page has no script, no stylesheet, font or image to fetch, and no link outside itself: CSS is
inline, charts are inline SVG (:mod:`panstream.report.svg`), and every chart has a table of the same
numbers under it.

This module lays the page out (the privacy cost at the top, the sections, what is kept, how to
read it); the sections are :mod:`panstream.report.sections` (series, single releases) and
:mod:`panstream.report.buckets` (maps, countries), made of :mod:`panstream.report.parts`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from html import escape
from typing import Any

from panstream import __version__
from panstream.errors import ConfigurationError
from panstream.report.buckets import MAX_MAP_BUCKETS, MAX_RANKED, country_section, map_section
from panstream.report.fields import figure, get, is_country, is_map
from panstream.report.parts import (
    NOISE_NOTE,
    PARTIAL_NOTE,
    Page,
    ReleaseInput,
    SeriesInput,
    column_text,
    number_text,
    stated,
)
from panstream.report.sections import release_section, series_section
from panstream.windows.eventtime import label as iso_label

__all__ = ["MAX_MAP_BUCKETS", "MAX_RANKED", "PARTIAL_NOTE", "ReleaseInput", "SeriesInput",
           "check_same_state", "column_text", "number_text", "render"]


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
    page = Page()
    if same_state:
        unchecked = check_same_state(releases)
        if unchecked:
            page.warnings.append(unchecked)
    for i, s in enumerate(series):
        series_section(page, s, f"series-{i + 1}", horizon)
    for i, r in enumerate(releases):
        if is_country(r.data):
            country_section(page, r, f"countries-{i + 1}")
        elif is_map(r.data):
            map_section(page, r, f"map-{i + 1}")
        else:
            release_section(page, r, f"release-{i + 1}")
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


def _cost_section(page: Page, same_state: bool) -> str:
    rows = "".join(f"<tr><td>{escape(c.what)}</td><td>{escape(c.name)}</td>"
                   f"<td>{escape(c.eps_state)}</td><td>{escape(c.eps_release)}</td>"
                   f"<td><strong>{stated(c.total)}</strong></td>"
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
        f"<strong>epsilon {stated(grand) if grand is not None else 'unknown (an input does not state it)'}"
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


def _keeps_section(page: Page) -> str:
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
        f"{escape(NOISE_NOTE)}.</li>"
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
