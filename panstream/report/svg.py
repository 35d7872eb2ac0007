"""Hand-written inline SVG for the report: an interval chart and a Hilbert map.

No library, no script, no external reference: every chart is a ``<svg role="img">`` with a
``<title>`` and ``<desc>`` (read by screen readers), axis labels in text, and a ``<title>`` on every
mark (a tooltip in every browser, without JavaScript). The same numbers are in the table the page
puts under each chart.

Colours are fixed and named here, so a test can find the marks in a screenshot:
:data:`INK` (estimates and their whiskers), :data:`BAND` (the interval band of a series),
:data:`NOISE` (the ring around a noise-dominated estimate), :data:`EMPTY` (a map bucket that is
noise-dominated or whose interval reaches 0) and :func:`viridis` (a map bucket's density).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

import numpy as np

from panstream.release.plot import hilbert_grid

__all__ = ["BAND", "EMPTY", "INK", "NOISE", "ChartPoint", "hilbert_map", "interval_chart",
           "nice_ticks", "ranked_chart", "viridis"]

#: Width of one character of an 11 px axis label, in px (for thinning the labels).
X_CHAR = 6.6
INK = "#1f5fa8"
BAND = "#a9c9ec"
NOISE = "#d95f02"
EMPTY = "#d0d0d0"
_AXIS = "#444444"
_GRID = "#e4e4e4"

# Five anchors of matplotlib's viridis colour map (perceptually uniform, readable in greyscale
# and by most colour-blind readers), interpolated linearly.
_VIRIDIS = ((0x44, 0x01, 0x54), (0x3b, 0x52, 0x8b), (0x21, 0x91, 0x8c), (0x5e, 0xc9, 0x62),
            (0xfd, 0xe7, 0x25))


def viridis(t: float) -> str:
    """The colour of density ``t`` (clipped to 0..1) as ``#rrggbb``.

    >>> viridis(0.0), viridis(1.0)
    ('#440154', '#fde725')
    """
    t = min(1.0, max(0.0, float(t))) * (len(_VIRIDIS) - 1)
    i = min(int(t), len(_VIRIDIS) - 2)
    f = t - i
    a, b = _VIRIDIS[i], _VIRIDIS[i + 1]
    return "#" + "".join(f"{round(x + (y - x) * f):02x}" for x, y in zip(a, b, strict=True))


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About ``n`` round tick values covering ``[lo, hi]`` (steps of 1, 2 or 5 times 10^k).

    >>> nice_ticks(0, 1000)
    [0.0, 200.0, 400.0, 600.0, 800.0, 1000.0]
    """
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(1, n)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step) * step
    out = []
    v = first
    while v <= hi + step * 1e-9:
        out.append(float(round(v, 12)))
        v += step
    if out[-1] < hi:
        out.append(float(round(v, 12)))
    return out


def _fmt(v: float) -> str:
    a = abs(v)
    if a >= 1000 or (a >= 10 and float(v).is_integer()):
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:,.1f}"
    return f"{v:.3g}"


@dataclass(frozen=True)
class ChartPoint:
    """One estimate to draw: position ``x`` (any unit), value, interval, hover label."""

    x: float
    value: float
    low: float
    high: float
    label: str
    noise_dominated: bool = False


def _head(cls: str, width: int, height: int, title: str, desc: str, left: float,
          title_y: int = 22) -> list[str]:
    """The opening of every chart: the ``<svg>`` element (class ``cls``) with its accessible name,
    ``<title>`` and ``<desc>``, and the title drawn at ``(left, title_y)``."""
    return [f'<svg class="{cls}" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'role="img" aria-label="{escape(title)}">',
            f"<title>{escape(title)}</title><desc>{escape(desc)}</desc>",
            f'<text x="{left}" y="{title_y}" font-size="14" font-weight="bold" fill="#222">'
            f"{escape(title)}</text>"]


def _interval_desc(lead: str, points: Sequence[ChartPoint]) -> str:
    """The ``<desc>`` of a chart of estimates with intervals, after its ``lead``."""
    return (f"{lead}, each with its interval; {sum(p.noise_dominated for p in points)} "
            "noise-dominated. The table below gives the same numbers.")


def _tip(p: ChartPoint) -> str:
    """The tooltip of one estimate: its value, interval and, if so, that noise dominates it."""
    return (f"{p.label}: {_fmt(p.value)} [{_fmt(p.low)}, {_fmt(p.high)}]"
            + (" (noise-dominated: the interval is wider than the value)"
               if p.noise_dominated else ""))


def _tick(t: float, line: tuple[object, object, object, object], at: tuple[object, object],
          anchor: str) -> str:
    """A value axis' tick ``t``: its grid line (``x1, x2, y1, y2``; the axis' colour at 0) and
    its label at ``at``, anchored ``anchor`` (coordinates as the caller prints them)."""
    x1, x2, y1, y2 = line
    return (f'<line x1="{x1}" x2="{x2}" y1="{y1}" y2="{y2}" stroke="{_GRID if t else _AXIS}" '
            f'stroke-width="1"/><text x="{at[0]}" y="{at[1]}" font-size="11" '
            f'text-anchor="{anchor}" fill="{_AXIS}">{escape(_fmt(t))}</text>')


def interval_chart(points: Sequence[ChartPoint], *, title: str, xlabel: str, ylabel: str,
                   xticks: Sequence[tuple[float, str]] | None = None, band: bool = False,
                   width: int = 760, height: int = 330) -> str:
    """An SVG of estimates (dots, :data:`INK`) with an interval on every one (a whisker; with
    ``band``, also a shaded band through the intervals, :data:`BAND`); noise-dominated estimates are
    ringed in :data:`NOISE`. ``xticks``: positions and labels (default: one per point)."""
    left, right, top, bottom = 78, 20, 40, 62
    pw, ph = width - left - right, height - top - bottom
    xs = [p.x for p in points]
    x0, x1 = (min(xs), max(xs)) if xs else (0.0, 1.0)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    pad = (x1 - x0) * 0.06
    x0, x1 = x0 - pad, x1 + pad
    lo = min([p.low for p in points] + [0.0])
    hi = max([p.high for p in points] + [0.0])
    ticks = nice_ticks(lo, hi)
    y0, y1 = ticks[0], ticks[-1]

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def sy(y: float) -> float:
        return top + (y1 - y) / (y1 - y0) * ph

    desc = _interval_desc(f"{len(points)} estimate(s) of {ylabel}", points)
    out = _head("chart", width, height, title, desc, left)
    for t in ticks:
        y = sy(t)
        out.append(_tick(t, (left, left + pw, f"{y:.1f}", f"{y:.1f}"), (left - 6, f"{y + 4:.1f}"),
                         "end"))
    out.append(f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + ph}" stroke="{_AXIS}"/>')
    if xticks is None:
        xticks = [(p.x, p.label) for p in points]
    # at most 12 labels, and no more than fit side by side (11 px text: about 6.6 px a
    # character, 12 px apart): 96 hourly windows get one label in 8 or more, not 96 overlapping
    widest = max((len(lab) for _, lab in xticks), default=1)
    fits = max(1, int(pw // (widest * X_CHAR + 12)))
    step = max(1, math.ceil(len(xticks) / min(12, fits)))
    for i, (x, lab) in enumerate(xticks):
        if i % step:
            continue
        out.append(f'<text x="{sx(x):.1f}" y="{top + ph + 16}" font-size="11" text-anchor="middle" '
                   f'fill="{_AXIS}">{escape(lab)}</text>')
    out.append(f'<text x="{left + pw / 2:.1f}" y="{height - 26}" font-size="12" '
               f'text-anchor="middle" fill="#222">{escape(xlabel)}</text>')
    out.append(f'<text transform="translate(16 {top + ph / 2:.1f}) rotate(-90)" font-size="12" '
               f'text-anchor="middle" fill="#222">{escape(ylabel)}</text>')
    pts = sorted(points, key=lambda p: p.x)
    if band and len(pts) > 1:
        poly = [f"{sx(p.x):.1f},{sy(p.high):.1f}" for p in pts]
        poly += [f"{sx(p.x):.1f},{sy(p.low):.1f}" for p in reversed(pts)]
        out.append(f'<polygon points="{" ".join(poly)}" fill="{BAND}" stroke="none"/>')
        line = " ".join(f"{sx(p.x):.1f},{sy(p.value):.1f}" for p in pts)
        out.append(f'<polyline points="{line}" fill="none" stroke="{INK}" stroke-width="1.5"/>')
    cap = max(3.0, min(10.0, pw / max(1, len(pts)) / 4))
    for p in pts:
        x, yv, yl, yh = sx(p.x), sy(p.value), sy(p.low), sy(p.high)
        out.append(f'<g><title>{escape(_tip(p))}</title>'
                   f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{yl:.1f}" y2="{yh:.1f}" stroke="{INK}" '
                   f'stroke-width="2"/>'
                   f'<line x1="{x - cap:.1f}" x2="{x + cap:.1f}" y1="{yl:.1f}" y2="{yl:.1f}" '
                   f'stroke="{INK}" stroke-width="2"/>'
                   f'<line x1="{x - cap:.1f}" x2="{x + cap:.1f}" y1="{yh:.1f}" y2="{yh:.1f}" '
                   f'stroke="{INK}" stroke-width="2"/>'
                   f'<circle cx="{x:.1f}" cy="{yv:.1f}" r="5" fill="{INK}"/>'
                   + (f'<circle cx="{x:.1f}" cy="{yv:.1f}" r="9" fill="none" stroke="{NOISE}" '
                      f'stroke-width="2.5"/>' if p.noise_dominated else "")
                   + "</g>")
    lx = left + pw - 330
    out.append(f'<g font-size="11" fill="#222"><circle cx="{lx}" cy="{top - 10}" r="4" '
               f'fill="{INK}"/><text x="{lx + 8}" y="{top - 6}">estimate, bar = interval</text>'
               f'<circle cx="{lx + 170}" cy="{top - 10}" r="6" fill="none" stroke="{NOISE}" '
               f'stroke-width="2"/><text x="{lx + 180}" y="{top - 6}">noise-dominated</text></g>')
    out.append("</svg>")
    return "".join(out)


def hilbert_map(labels: Sequence[str], values: Sequence[float], lows: Sequence[float],
                highs: Sequence[float], *, title: str, tips: Sequence[str],
                coloured: Sequence[bool] | None = None, marked: Sequence[bool] | None = None,
                rule: str = "grey: noise-dominated or interval reaching 0",
                size: int = 520) -> str:
    """An SVG heat map of IP buckets on their Hilbert layout (a power-of-two count): adjacent
    prefixes stay adjacent and every aligned block of 4^j buckets is a square.

    A bucket is coloured by its density (:func:`viridis`, clipped to 0..1: what is shown is
    clamped to the possible range) where ``coloured`` says so (the release's map-wide ``signal``),
    :data:`EMPTY` grey elsewhere; without ``coloured``, the old per-bucket rule (grey where the
    interval reaches 0 or is wider than the value). A coloured bucket that is ``marked``
    (noise-dominated) carries a :data:`NOISE` ring. ``rule`` says the rule in the chart's
    description. A colour scale and block labels go beside it."""
    n = len(values)
    img, xy = hilbert_grid(np.ones(n))
    rows_, cols = img.shape
    cell = max(2.0, size / max(rows_, cols))
    w, h = cols * cell, rows_ * cell
    top, left = 34, 10
    width, height = int(left + w + 120), int(top + h + 40)
    if coloured is None:
        coloured = [not (lo <= 0 or hi - lo > abs(v))
                    for v, lo, hi in zip(values, lows, highs, strict=True)]
    if marked is None:
        marked = [False] * n
    desc = (f"{n} buckets on a Hilbert curve, coloured by noisy density from 0 (dark purple) to 1 "
            f"(yellow); {rule}. The table below gives the same numbers.")
    out = _head("map", width, height, title, desc, left)
    for i in range(n):
        cx, cy = float(xy[i, 0]) * cell + left, float(xy[i, 1]) * cell + top
        fill = viridis(float(values[i])) if coloured[i] else EMPTY
        ring = (f'<circle cx="{cx + cell / 2:.2f}" cy="{cy + cell / 2:.2f}" '
                f'r="{max(1.0, cell / 4):.2f}" fill="none" stroke="{NOISE}" stroke-width="2"/>'
                if coloured[i] and marked[i] and cell >= 8 else "")
        out.append(f'<g><title>{escape(tips[i])}</title><rect x="{cx:.2f}" y="{cy:.2f}" '
                   f'width="{cell:.2f}" height="{cell:.2f}" fill="{fill}"/>{ring}</g>')
    if n >= 16:  # label the first bucket of each of up to 16 square blocks
        block = 4 ** max(0, int(math.log(n, 4)) - 2)
        for b in range(0, n, block):
            bx, by = xy[b:b + block].mean(axis=0)
            out.append(f'<text x="{left + (bx + 0.5) * cell:.1f}" y="{top + (by + 0.5) * cell:.1f}" '
                       f'font-size="10" text-anchor="middle" fill="#fff" stroke="#000" '
                       f'stroke-width="2.5" paint-order="stroke">{escape(labels[b])}</text>')
    sx = left + w + 24
    steps = 20
    for k in range(steps):
        t = 1 - k / steps
        out.append(f'<rect x="{sx}" y="{top + k * h / steps:.1f}" width="18" '
                   f'height="{h / steps + 0.5:.1f}" fill="{viridis(t - 0.5 / steps)}"/>')
    for t in (0.0, 0.5, 1.0):
        out.append(f'<text x="{sx + 24}" y="{top + (1 - t) * h + 4:.1f}" font-size="11" '
                   f'fill="#222">{t:g}</text>')
    out.append(f'<text transform="translate({sx + 58} {top + h / 2:.1f}) rotate(-90)" '
               f'font-size="11" text-anchor="middle" fill="#222">density (noisy)</text>')
    ly = top + h + 16  # the legend of what is not a density: grey, and the ring
    out.append(f'<g font-size="11" fill="#222"><rect x="{left}" y="{ly - 9}" width="12" '
               f'height="12" fill="{EMPTY}" stroke="#999"/><text x="{left + 18}" y="{ly + 1}">'
               "grey: could be empty</text>"
               f'<circle cx="{left + 176}" cy="{ly - 3}" r="5" fill="none" stroke="{NOISE}" '
               f'stroke-width="2"/><text x="{left + 186}" y="{ly + 1}">coloured but '
               "noise-dominated</text></g>")
    out.append("</svg>")
    return "".join(out)


def ranked_chart(points: Sequence[ChartPoint], *, title: str, xlabel: str,
                 width: int = 760, row: int = 18) -> str:
    """A horizontal dot-and-interval chart of ranked rows (a country per row, largest first):
    the label at the left, the estimate as a dot (:data:`INK`) with its interval as a bar, the
    number (whole: the rows are counts) at the right, a :data:`NOISE` ring on a noise-dominated
    row. Values are drawn as given (the caller clamps what is shown)."""
    left, right, top, bottom = 56, 84, 44, 44
    n = len(points)
    height = top + bottom + row * max(1, n)
    pw = width - left - right
    hi = max([p.high for p in points] + [p.value for p in points] + [1.0])
    lo = min([p.low for p in points] + [0.0])
    ticks = nice_ticks(lo, hi)
    x0, x1 = ticks[0], ticks[-1]

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    desc = _interval_desc(f"{n} rows ranked by estimate", points)
    out = _head("ranked", width, height, title, desc, left, title_y=20)
    y_end = top + row * n
    for t in ticks:
        x = f"{sx(t):.1f}"
        out.append(_tick(t, (x, x, top - 6, f"{y_end:.1f}"), (x, f"{y_end + 16:.1f}"), "middle"))
    out.append(f'<text x="{left + pw / 2:.1f}" y="{height - 8}" font-size="12" '
               f'text-anchor="middle" fill="#222">{escape(xlabel)}</text>')
    for i, p in enumerate(points):
        y = top + row * i + row / 2
        out.append(f'<g><title>{escape(_tip(p))}</title>'
                   f'<text x="{left - 8}" y="{y + 4:.1f}" font-size="12" text-anchor="end" '
                   f'fill="#222">{escape(p.label)}</text>'
                   f'<line x1="{sx(p.low):.1f}" x2="{sx(p.high):.1f}" y1="{y:.1f}" y2="{y:.1f}" '
                   f'stroke="{INK}" stroke-width="3" stroke-opacity="0.45"/>'
                   f'<circle cx="{sx(p.value):.1f}" cy="{y:.1f}" r="4.5" fill="{INK}"/>'
                   + (f'<circle cx="{sx(p.value):.1f}" cy="{y:.1f}" r="7.5" fill="none" '
                      f'stroke="{NOISE}" stroke-width="2"/>' if p.noise_dominated else "")
                   + f'<text x="{left + pw + 8}" y="{y + 4:.1f}" font-size="11" fill="{_AXIS}">'
                   f"{p.value:,.0f}</text></g>")
    out.append("</svg>")
    return "".join(out)
