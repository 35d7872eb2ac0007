"""Pictures of density maps (needs matplotlib: ``pip install 'panstream[plot]'``).

IP maps are heat maps on a Hilbert curve (adjacent prefixes stay adjacent; every aligned block of
4**j buckets is a square); range maps are a step plot of density per bucket with its interval band.
Only the buckets told from empty by the map-wide rule (:attr:`~panstream.release.maps.MapRow.signal`:
Benjamini-Hochberg at the map's false-discovery rate) are coloured; the others are grey. The caption
states that rule, and the title the universe, epsilon and the half-width of one bucket, so a reader
does not mistake noise for signal. Densities are drawn clamped to 0..1 (the JSON keeps them as
released).
"""

from __future__ import annotations

import math
import textwrap
from os import PathLike
from typing import Any

import numpy as np

from panstream.errors import ConfigurationError
from panstream.release.hilbert import d2xy
from panstream.release.honesty import fdr_rule

#: What a picture draws: a :class:`panstream.release.maps.MapRelease` (maps imports this module to
#: draw itself, so this one names no map class: issue 36 broke the maps <-> plot circle).
MapRelease = Any

#: Size of every picture, in pixels (width, height).
PIXELS = (800, 700)
_DPI = 100


def require_matplotlib() -> None:
    """Raise the error naming the ``plot`` extra now (before a release spends budget)."""
    _matplotlib()


def _matplotlib() -> Any:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        msg = ("plotting a map needs matplotlib: install the plot extra, "
               "pip install 'panstream[plot]' (or write the rows with --csv instead)")
        raise ConfigurationError(msg) from None
    return Figure, FigureCanvasAgg


def hilbert_grid(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lay ``values`` (length a power of two) on Hilbert squares: one square for a power of 4, two
    side by side otherwise. Returns the 2-D image and each value's ``(x, y)``."""
    n = values.size
    k = max(0, (n.bit_length() - 1) // 2)
    side = 1 << k
    tiles = n // (side * side)
    pos = np.arange(n)
    xy = d2xy(k, pos % (side * side))
    xy[:, 0] += (pos // (side * side)) * side
    img = np.full((side, side * tiles), np.nan)
    img[xy[:, 1], xy[:, 0]] = values
    return img, xy


def plot_map(m: MapRelease, path: str | PathLike[str]) -> Any:
    """Write ``m`` as a PNG of :data:`PIXELS` pixels to ``path``; return the matplotlib figure
    (its axes' title is the caption that states the map-wide rule).

    Raises:
        ConfigurationError: matplotlib is missing (names the ``plot`` extra) or the path cannot be
            written.
    """
    figure_cls, canvas_cls = _matplotlib()
    fig = figure_cls(figsize=(PIXELS[0] / _DPI, PIXELS[1] / _DPI), dpi=_DPI)
    canvas_cls(fig)
    ax = fig.add_subplot(1, 1, 1)
    density = np.array([r.density for r in m.rows])
    low = np.array([r.density_low for r in m.rows])
    high = np.array([r.density_high for r in m.rows])
    pct = f"{100 * m.confidence:g}%"
    is_ip = m.universe.startswith(("ipv4:", "ipv6:"))
    signal = np.array([r.signal for r in m.rows], dtype=bool)
    caption = (fdr_rule(m.fdr) + ("; grey = could be empty" if is_ip
                               else "; dots mark them, band = interval")
               + f". {int(signal.sum()):,} of {len(m.rows):,} bucket(s) told from empty")
    title = "\n".join([f"{m.universe} by {m.by}: noisy density per bucket, epsilon {m.epsilon:g} "
                       f"(total {m.epsilon_total:.3g}); one bucket is +-{m.halfwidth:.3f} at "
                       f"{pct} from noise alone", *textwrap.wrap(caption, 120)])
    n = density.size
    if is_ip and n & (n - 1) == 0 and n > 1:
        shown = np.where(signal, np.clip(density, 0, 1), np.nan)
        img, xy = hilbert_grid(shown)
        filled, _ = hilbert_grid(np.ones(n))
        img = np.where(np.isnan(filled), np.nan, img)
        import matplotlib as mpl

        cmap = mpl.colormaps["viridis"].with_extremes(bad="#d0d0d0")
        im = ax.imshow(img, cmap=cmap, vmin=0, vmax=1, interpolation="nearest", origin="upper")
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="density (noisy, clipped to 0-1)")
        ax.set_xticks([])
        ax.set_yticks([])
        block = 4 ** max(0, int(math.log(n, 4)) - 2) if n >= 16 else 1
        for b in range(0, n, block):
            cx, cy = xy[b:b + block].mean(axis=0)
            ax.text(cx, cy, m.rows[b].label, ha="center", va="center", fontsize=6, color="white",
                    bbox={"facecolor": "black", "alpha": 0.35, "pad": 1, "linewidth": 0})
    else:
        edges = np.array([r.first for r in m.rows] + [m.rows[-1].first + m.rows[-1].cells])
        ax.stairs(np.clip(density, 0, 1), edges, color="C0", label="density (noisy, clipped to 0-1)")
        ax.stairs(np.clip(high, 0, 1), edges, baseline=np.clip(low, 0, 1), fill=True, alpha=0.25,
                  color="C0", label=f"{pct} interval")
        if signal.any():
            mid = (edges[:-1] + edges[1:]) / 2
            ax.plot(mid[signal], np.clip(density, 0, 1)[signal], "o", color="C3", markersize=3,
                    label="told from empty (map-wide rule)")
        ax.axhline(0, color="grey", linewidth=0.8)
        ax.set_xlabel(f"cell of {m.universe}")
        ax.set_ylabel("density")
        ax.legend(loc="upper right")
    ax.set_title(title, fontsize=8)
    try:
        fig.savefig(path, dpi=_DPI, format="png")
    except OSError as exc:
        msg = f"cannot write the map picture {path}: {exc.strerror or exc}"
        raise ConfigurationError(msg) from None
    return fig


_SHADES = " .:-=+*#%@"


def text_map(m: MapRelease, max_buckets: int = 1024) -> str:
    """A compact text picture of an IP map on its Hilbert layout (no matplotlib needed): one
    character per bucket, ``.`` to ``@`` for density 0.1 to 1 where the map-wide rule tells the
    bucket from empty, ``~`` where it could be empty. Range maps and maps over ``max_buckets``
    buckets give one line saying so."""
    n = len(m.rows)
    if not m.universe.startswith(("ipv4:", "ipv6:")) or n & (n - 1) or n > max_buckets:
        return f"(no text picture for {n:,} buckets of {m.universe}: use --csv or --plot)"
    codes = np.array([0 if not r.signal else 1 + min(8, int(min(max(r.density, 0), 1) * 9))
                      for r in m.rows], dtype=float)
    img, _ = hilbert_grid(codes)
    chars = "~" + _SHADES[1:]
    lines = ["".join(chars[int(v)] for v in row) for row in img]
    pct = f"{100 * m.fdr:g} %"
    return "\n".join(lines) + (f"\n(Hilbert layout from {m.rows[0].label}, one character per "
                               f"{m.by}; '.' to '@' = density 0.1 to 1 (clamped), drawn only where "
                               f"the bucket is told from empty at a {pct} false-discovery rate "
                               f"over the whole map; '~' = could be empty)")
