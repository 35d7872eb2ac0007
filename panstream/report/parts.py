"""The parts every section of the report page is made of.

The page being built (:class:`Page`: its sections, contents, and the costs and keeps the page
adds up at the top), the inputs it is made from (:class:`SeriesInput`, :class:`ReleaseInput`), and
how a released number is printed: one format per table column (:func:`column_text`), clamped to
its possible range where it is shown and marked where it was (:func:`cell`, :func:`inline`),
noise-dominated rows marked (:func:`tr`, :func:`nd_cell`). The sections are
:mod:`panstream.report.sections` (series, single releases) and :mod:`panstream.report.buckets`
(maps, countries); :mod:`panstream.report.page` lays them out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any

from panstream.release.honesty import count_cap
from panstream.report.fields import Figure, calibration_text, family_of, finite, get

__all__ = ["CLAMP_NOTE", "NOISE_NOTE", "OPEN_ROWS", "PARTIAL_NOTE", "Cost", "Keep", "Page",
           "ReleaseInput", "SeriesInput", "add_release_cost", "cell", "column_text",
           "count_cap_of", "density_text", "inline", "nd_cell", "number_text", "shown", "stated",
           "tr"]


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
class Cost:
    what: str
    name: str
    eps_state: str
    eps_release: str
    total: float | None
    note: str = ""


@dataclass
class Keep:
    name: str
    family: str
    universe: str
    calibration: str
    eps_state: str
    budget: str


@dataclass
class Page:
    sections: list[str] = field(default_factory=list)
    toc: list[tuple[str, str]] = field(default_factory=list)
    costs: list[Cost] = field(default_factory=list)
    keeps: list[Keep] = field(default_factory=list)
    telemetry: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


#: Tables of at most this many rows are shown open; longer ones are folded (a click opens them).
OPEN_ROWS = 32


NOISE_NOTE = ("noise-dominated: the interval is wider than the value itself, so the number says "
               "little beyond \u201csmall\u201d; a larger epsilon, a smaller universe or a longer "
               "window would make it usable")


CLAMP_NOTE = ("* shown at the edge of the possible range (never below 0): the released value, "
               "unbiased and kept as it is in the published file, lies outside it (hover the "
               "cell for it).")


#: What the report says of a series' first and last windows (issue 37).
PARTIAL_NOTE = ("† the first and last windows may be partial: a window holds only what the "
                "input held within it (a log that starts at 10:05 gives its first day's window the "
                "rest of that day only, a run stopped early its last), and panstream does not read "
                "that off the data (it would tell when clients came); compare them with care")


def stated(v: float | None, digits: int = 6) -> str:
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


def density_text(v: float) -> str:
    return f"{v:.4f}"


def tr(nd: bool) -> str:
    return '<tr class="ndrow">' if nd else "<tr>"


def nd_cell(nd: bool) -> str:
    return ('<td class="nd" title="' + escape(NOISE_NOTE) + '">noise-dominated</td>' if nd
            else "<td>no</td>")


def shown(v: float, hi: float = math.inf, lo: float = 0.0) -> float:
    """What the page shows of a released value: clamped to the possible range ``[lo, hi]``
    (docs/release.md, "Negative estimates": released values stay unbiased, shown ones do not
    leave the range)."""
    return min(max(v, lo), hi)


def cell(v: float, hi: float = math.inf, fmt: Any = number_text) -> str:
    """A table cell of a released value, shown clamped; a clamped cell is marked ``*`` and its
    tooltip gives the released (unbiased) value."""
    s = shown(v, hi)
    if s == v:
        return f"<td>{fmt(v)}</td>"
    return (f'<td class="cl" title="released {escape(fmt(v))} (unbiased, kept in the published '
            f'file); shown at the edge of the possible range">{fmt(s)}*</td>')


def inline(v: float, hi: float = math.inf) -> str:
    """A released value in running text, shown clamped as in a table cell (:func:`cell`): a
    clamped one is marked ``*`` and its tooltip gives the released (unbiased) value."""
    s = shown(v, hi)
    if s == v:
        return number_text(v)
    return (f'<span class="cl" title="released {escape(number_text(v))} (unbiased, kept in the '
            f'published file); shown at the edge of the possible range">{number_text(s)}*</span>')


def count_cap_of(d: Mapping[str, Any]) -> float:
    """The largest count a release's figure can have: its universe's size where the file says
    it, else unbounded. A hashed table's linear count may exceed its size (up to ``size ln
    size``, where the release itself caps it), so it is unbounded here."""
    return count_cap(str(get(d, "universe") or ""), finite(get(d, "size")))


def add_release_cost(page: Page, r: ReleaseInput, head: Figure, what: str,
                      eps_release: str | None = None, note: str = "") -> None:
    budget, left = get(r.data, "budget"), get(r.data, "budget_remaining")
    page.costs.append(Cost(what, r.name, stated(head.epsilon_state),
                            eps_release or stated(head.epsilon_release), head.epsilon_total,
                            note + "the table's total after this release (state + everything "
                            "its ledger had spent)"))
    page.keeps.append(Keep(r.name, family_of(r.data), head.universe, calibration_text(r.data),
                            stated(head.epsilon_state),
                            "not stated" if budget is None else
                            f"{float(budget):g}, {float(left or 0):g} left after this release"))
