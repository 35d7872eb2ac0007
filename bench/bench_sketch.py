#!/usr/bin/env python3
"""Benchmark of the Sketch-Flip-Merge family (issue 22): update throughput and accuracy.

**Throughput**, one process, the same items for every contender, repeats interleaved and the median
reported (a noisy neighbour hits them alike), as ratios against the bit table in the same run:

* ``density``: ``DensityEstimator.update_indices`` on an ``ipv4:0.0.0.0/0`` table's cell indices
  (the bit table's hot path, the baseline; 512 MiB, skipped with ``--quick``: then ipv4 /8);
* ``sketch-int``: ``SketchEstimator.update`` of a NumPy int64 array of IDs (vectorized Murmur3
  hash64, bucket/level, secure D1 redraws);
* ``sketch-hash``: the same minus hashing (``update_hashes`` of precomputed hashes);
* ``sketch-ip-text``: the log path, ``LineParser`` over a plain log of IPv4 and IPv6 text
  (canonical form, batched hashing of distinct tokens);
* ``hll``: Apache DataSketches ``hll_sketch(12)`` ``update`` of the same ints, one Python call per
  item (its Python API has no batch update), if ``datasketches`` is installed.

**Accuracy** of the noiseless estimate at 4096 x 24 from the state's exact law (random hash,
independent D0/D1 bits: :func:`simulate_counts`), n from 10**4 to 10**8: relative sd, the derived
standard error, the ratio, and the coverage of 95 % intervals.

Usage::

    python bench/bench_sketch.py            # full run (about a minute)
    python bench/bench_sketch.py --quick

Results are printed and written as Markdown to ``bench/results/sketch.md``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import panstream as ps
from panstream.estimators.sketch import sfm
from panstream.inputs.parser import LineParser

RESULTS = Path(__file__).parent / "results" / "sketch.md"


def simulate_counts(n: int, q: float, rng: np.random.Generator, buckets: int = 4096,
                    levels: int = 24) -> np.ndarray:
    """Per-level counts of ones of a state of ``n`` distinct items, from the state's exact law:
    items fall on levels geometrically (the top level takes the rest), on buckets uniformly
    (exact multinomial occupancy), hit bits are 1 with probability 1 - q, the others q."""
    probs = np.array([2.0 ** -(lv + 1) for lv in range(levels - 1)] + [2.0 ** -(levels - 1)])
    m = rng.multinomial(n, probs)
    out = np.empty(levels)
    for lv in range(levels):
        occ = int(np.count_nonzero(rng.multinomial(m[lv], np.full(buckets, 1 / buckets))))
        out[lv] = rng.binomial(occ, 1 - q) + rng.binomial(buckets - occ, q)
    return out


def accuracy(trials: int, eps: float) -> list[str]:
    rng = np.random.default_rng(2023)
    q = float(ps.calibrate(eps).q)
    rows = ["| n | relative sd | derived | ratio | bias | 95 % coverage |", "|---|---|---|---|---|---|"]
    for n in (10**4, 10**5, 10**6, 10**7, 10**8):
        fits = [sfm.mple(simulate_counts(n, q, rng), 4096, q) for _ in range(trials)]
        est = np.array([f.n for f in fits])
        se = np.array([f.stderr for f in fits])
        d = sfm.expected_stderr(n, 4096, 24, q)
        cover = float(np.mean(np.abs(est - n) <= 1.959964 * se))
        rows.append(f"| {n:.0e} | {est.std(ddof=1) / n:.4f} | {d / n:.4f} | "
                    f"{est.std(ddof=1) / d:.3f} | {est.mean() / n - 1:+.4f} | {cover:.3f} |")
    return rows


def throughput(items: int, repeats: int, quick: bool) -> list[str]:
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 1 << 40, size=items, dtype=np.int64)
    hashes = sfm.hash64_ints(ids)
    u = ps.Universe.parse("ipv4:10.0.0.0/8" if quick else "ipv4:0.0.0.0/0")
    cells = (ids % u.size).astype(np.intp)
    v4 = [str(ps.Universe.parse("ipv4:0.0.0.0/0").item_of(int(a) & 0xFFFFFFFF))
          for a in ids[: items // 2]]
    v6 = [f"2a00:{int(a) & 0xffff:x}::{int(a) >> 16 & 0xffff:x}" for a in ids[items // 2:]]
    log = ("\n".join(v4 + v6) + "\n").encode()
    dens = ps.DensityEstimator(u, 1.0)
    sk = ps.SketchEstimator(1.0, items="id")
    skip = ps.SketchEstimator(1.0, items="ip")
    parser = LineParser(skip.universe, "plain")
    runs: dict[str, Callable[[], object]] = {
        "density": lambda: dens.update_indices(cells.copy()),
        "sketch-int": lambda: sk.update(ids.copy()),
        "sketch-hash": lambda: sk.update_hashes(hashes.copy()),
        "sketch-ip-text": lambda: skip.update_indices(parser.parse(log).indices),
    }
    try:
        from datasketches import hll_sketch

        def hll() -> None:
            h = hll_sketch(12)
            for v in ids.tolist():
                h.update(v)

        runs["hll"] = hll
    except ImportError:
        pass
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    base = statistics.median(times["density"])
    rows = ["| contender | items/s | vs density |", "|---|---|---|"]
    for name, ts in times.items():
        med = statistics.median(ts)
        rows.append(f"| {name} | {items / med:,.0f} | {base / med:.2f}x |")
    dens.wipe()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--plot", type=Path, default=None, help="write the error-vs-n plot here "
                    "(docs/sketch-error.png) and exit")
    a = ap.parse_args()
    if a.plot is not None:
        plot(a.plot)
        return
    items, repeats, trials = (200_000, 3, 40) if a.quick else (1_000_000, 5, 300)
    out = [f"# Sketch-Flip-Merge benchmark ({'quick' if a.quick else 'full'})", "",
           f"## Throughput ({items:,} items, median of {repeats})", "",
           *throughput(items, repeats, a.quick), ""]
    for eps in (1.0, 4.0):
        out += [f"## Accuracy at eps = {eps:g}, 4096 x 24 ({trials} simulated states per n)", "",
                *accuracy(trials, eps), ""]
    text = "\n".join(out)
    print(text)
    if not a.quick:
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(text)


def plot(path: Path) -> None:
    """docs/sketch-error.png: the standard error of the distinct count against n, the sketch
    (4096 x 24, 12 KiB) beside the bit table over ipv4:0.0.0.0/0 (512 MiB), at eps 0.5, 1, 2, 4."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = np.logspace(3, 8, 60)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for eps, color in ((0.5, "tab:red"), (1.0, "tab:blue"), (2.0, "tab:green"), (4.0, "tab:purple")):
        q = float(ps.calibrate(eps).q)
        ax.plot(ns, [sfm.expected_stderr(n, 4096, 24, q) for n in ns], color=color,
                label=f"sketch 4096x24 (12 KiB), eps {eps:g}")
        ax.axhline(math.sqrt(2**32) / (2 * math.sinh(eps / 2)), color=color, ls="--", lw=1,
                   label=f"bit table ipv4:0.0.0.0/0 (512 MiB), eps {eps:g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("distinct items n")
    ax.set_ylabel("standard error of the distinct count")
    ax.set_title("Sketch-Flip-Merge vs the one-bit-per-cell table")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
