#!/usr/bin/env python3
"""Benchmark of the frequency estimator (issue 13): update throughput and accuracy.

**Throughput**, one process, one run, the same items for every contender, repeats interleaved and
the median reported (a noisy neighbour hits them alike):

* ``frequency``: ``FrequencyEstimator.update_indices`` (modulus 16, automatic layout: a byte per
  cell up to 2**28 cells), the real code path with validation and the wipe of the index buffer;
* ``freq-packed``: the same with two counters per byte (the layout of tables above 2**28 cells);
* ``density``: ``DensityEstimator.update_indices`` on the same items (secure draws);
* bare NumPy ways to add each batch's multiplicities modulo k into a byte table of the same size,
  no validation, no wipe:

  - ``addat+mask``: ``np.add.at(t, idx, np.uint8(1))`` then ``t &= k - 1`` over the whole table;
  - ``addat+touched``: the same, masking only the touched cells ``t[idx] &= k - 1``;
  - ``bincount``: ``t += np.bincount(idx, minlength=size).astype(np.uint8); t &= k - 1``;
  - ``unique``: ``u, c = np.unique(idx, return_counts=True); t[u] = (t[u] + c) & (k - 1)``;
  - ``addat-top``: ``np.add.at(t, idx, np.uint8(256 // k))`` on counters kept in the top bits
    (panstream's own trick: no reduction pass at all). The fastest bare way, hence the limit.

  ``np.add.at`` is given an ``np.uint8`` increment: with a Python ``int`` NumPy 2.x leaves its fast
  path and runs 25x slower, which would flatter panstream.

**Accuracy**: many runs of a synthetic log with known counts, all below k (fresh table per run):
the noiseless N_hat_1 and 4-cropped mean, and a release at output epsilon 0.5, against the truth;
the empirical standard deviation beside the derived one (the model's exact covariance at the true
counts; for the release plus the noise) and the coverage of the released 95 % intervals.

Usage::

    python bench/bench_frequency.py            # full run (a few minutes)
    python bench/bench_frequency.py --quick    # smoke run

Results are printed and written as Markdown to ``bench/results/frequency.md``.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _common import cpu_model, git_commit, loadavg, make_items

import panstream as ps
from panstream.release.incidence import incidence_covariance

HERE = Path(__file__).resolve().parent
DATA_SEED = 20240613  # synthetic items only; never used for privacy draws
K = 16


# ----------------------------------------------------------------------------- throughput
def run_estimator(est: ps.estimators.Estimator, items: np.ndarray, batch: int,
                  buf: np.ndarray) -> float:
    """Seconds in ``update_indices`` (each batch copied into ``buf`` outside the timed region,
    since update_indices wipes the buffer it is given)."""
    total = 0.0
    for s in range(0, items.size, batch):
        b = buf[: min(batch, items.size - s)]
        np.copyto(b, items[s : s + b.size])
        t0 = time.perf_counter()
        est.update_indices(b)
        total += time.perf_counter() - t0
    return total


def bare_ways(size: int) -> dict[str, Callable[[np.ndarray], None]]:
    t = np.zeros(size, dtype=np.uint8)
    one, mask, top = np.uint8(1), np.uint8(K - 1), np.uint8(256 // K)

    def addat_mask(b: np.ndarray) -> None:
        np.add.at(t, b, one)
        np.bitwise_and(t, mask, out=t)

    def addat_touched(b: np.ndarray) -> None:
        np.add.at(t, b, one)
        t[b] &= mask

    def bincount(b: np.ndarray) -> None:
        t[:] += np.bincount(b, minlength=size).astype(np.uint8)
        np.bitwise_and(t, mask, out=t)

    def unique(b: np.ndarray) -> None:
        u, c = np.unique(b, return_counts=True)
        t[u] = (t[u] + c.astype(np.uint8)) & mask

    def addat_top(b: np.ndarray) -> None:
        np.add.at(t, b, top)

    return {"addat+mask": addat_mask, "addat+touched": addat_touched, "bincount": bincount,
            "unique": unique, "addat-top": addat_top}


def run_bare(way: Callable[[np.ndarray], None], items: np.ndarray, batch: int) -> float:
    t0 = time.perf_counter()
    for s in range(0, items.size, batch):
        way(items[s : s + batch])
    return time.perf_counter() - t0


BARE = ["addat+mask", "addat+touched", "bincount", "unique", "addat-top"]
OURS = ["frequency", "freq-packed", "density"]


def bench_throughput(size_log2: int, dist: str, batch_log2: int, n_items: int, repeats: int
                     ) -> dict[str, float]:
    size, batch = 1 << size_log2, 1 << batch_log2
    items = make_items(size, dist, n_items, DATA_SEED)
    u = ps.Universe.range(size)
    ests: dict[str, ps.estimators.Estimator] = {
        "frequency": ps.FrequencyEstimator(u, 1.0, K),
        "freq-packed": ps.FrequencyEstimator(u, 1.0, K, layout="packed"),
        "density": ps.DensityEstimator(u, 1.0),
    }
    ways = bare_ways(size)
    buf = np.empty(batch, dtype=np.intp)
    ts: dict[str, list[float]] = {name: [] for name in [*OURS, *BARE]}
    for _ in range(repeats):
        for name, est in ests.items():
            ts[name].append(run_estimator(est, items, batch, buf))
        for name, way in ways.items():
            ts[name].append(run_bare(way, items, batch))
    for est in ests.values():
        est.wipe()
    return {name: n_items / statistics.median(v) for name, v in ts.items()}


# ----------------------------------------------------------------------------- accuracy
def synthetic_counts(size: int, clients: int, seed: int) -> np.ndarray:
    """Per-cell counts: ``clients`` cells with a geometric count (mean about 2.2) cut at k - 1."""
    rng = np.random.default_rng([DATA_SEED, seed])
    per_cell = np.zeros(size, dtype=np.int64)
    cells = rng.choice(size, clients, replace=False)
    per_cell[cells] = np.minimum(rng.geometric(0.45, clients), K - 1)
    return per_cell


def bench_accuracy(size: int, clients: int, eps: float, eps_out: float, runs: int, t: int = 4
                   ) -> dict[str, object]:
    per_cell = synthetic_counts(size, clients, 1)
    idx = np.repeat(np.arange(size), per_cell)
    np.random.default_rng([DATA_SEED, 2]).shuffle(idx)
    truth_n = np.bincount(per_cell % K, minlength=K).astype(float)
    present = float((per_cell > 0).sum())
    truth = {"once": truth_n[1], "cropped_mean": float(np.minimum(per_cell[per_cell > 0], t).mean())}
    vals: dict[str, list[float]] = {f"{w}_{s}": [] for w in ("state", "release")
                                    for s in ("once", "cropped_mean")}
    reported: dict[str, list[float]] = {k: [] for k in vals}
    cover = dict.fromkeys(truth, 0)
    est = None
    for _ in range(runs):
        est = ps.FrequencyEstimator(ps.Universe.range(size), eps, K, budget=eps_out)
        est.update_indices(idx.copy())
        s = est.estimate(t=t).stats
        r = est.release(eps_out, t=t).stats
        for name, stat in (("once", "once"), ("cropped_mean", "cropped_mean")):
            for where, summary in (("state", s), ("release", r)):
                iv = getattr(summary, stat)
                vals[f"{where}_{name}"].append(iv.value)
                reported[f"{where}_{name}"].append(iv.stderr)
            iv = getattr(r, stat)
            cover[name] += iv.low <= truth[name] <= iv.high
    assert est is not None
    # Derived standard deviations: the model's covariance at the true counts (no plug-in).
    alpha = est.alpha
    cov = incidence_covariance(truth_n, size, alpha)
    noise_var = 2 * (2 / eps_out) ** 2 / float(alpha) ** 2  # Laplace(2/eps) on every count
    w_once = np.eye(K)[1]
    w_crop = np.zeros(K)
    w_crop[0] = -t
    w_crop[1:t] = np.arange(1, t) - t
    mu = truth["cropped_mean"]
    w_mean = (w_crop + mu * np.eye(K)[0]) / present  # delta method: (S - mu P) / P, P = |X| - N_0
    derived = {}
    for name, w in (("once", w_once), ("cropped_mean", w_mean)):
        derived[f"state_{name}"] = math.sqrt(w @ cov @ w)
        derived[f"release_{name}"] = math.sqrt(w @ cov @ w + noise_var * (w @ w))
    out: dict[str, object] = {"size": size, "clients": clients, "eps": eps, "eps_out": eps_out,
                              "runs": runs, "t": t, "truth": truth, "cover": cover, "rows": []}
    rows = []
    for key, v in vals.items():
        where, name = key.split("_", 1)
        arr = np.array(v)
        rows.append({"what": key, "truth": truth[name], "mean": float(arr.mean()),
                     "bias_sd": float((arr.mean() - truth[name]) / (arr.std(ddof=1) / math.sqrt(runs))),
                     "sd": float(arr.std(ddof=1)), "derived": derived[key],
                     "reported": float(np.mean(reported[key]))})
    out["rows"] = rows
    return out


# ----------------------------------------------------------------------------- reporting
def throughput_table(results: list[tuple[int, str, int, dict[str, float]]]) -> list[str]:
    cols = [*OURS, *BARE]
    head = (["cells", "items", "batch"] + [f"{c} M/s" for c in cols]
            + ["best bare", "frequency / best bare", "frequency / addat+mask",
               "frequency / density"])
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---:" for _ in head) + "|"]
    for sl, dist, bl, r in results:
        best = max(BARE, key=lambda c: r[c])
        lines.append("| " + " | ".join(
            [f"2^{sl}", dist, f"2^{bl}"] + [f"{r[c] / 1e6:.1f}" for c in cols]
            + [best, f"{r['frequency'] / r[best]:.2f}", f"{r['frequency'] / r['addat+mask']:.2f}",
               f"{r['frequency'] / r['density']:.2f}"]) + " |")
    return lines


def targets(results: list[tuple[int, str, int, dict[str, float]]]) -> list[str]:
    """The issue-13 target checked against this run (a benchmark, not a test: nothing fails)."""
    out = []
    for sl, dist, bl, r in results:
        if sl == 24 and bl == 20:
            best = max(BARE, key=lambda c: r[c])
            q = r["frequency"] / r[best]
            out.append(f"- 2^24 cells, batch 2^20, {dist}: {q:.2f} x the best bare NumPy way "
                       f"({best}) (>= 0.5): {'met' if q >= 0.5 else 'NOT met'}")
    return out


def accuracy_table(acc: dict[str, object]) -> list[str]:
    lines = [
        f"{acc['runs']} runs, |X| = {acc['size']:,}, {acc['clients']:,} clients (counts 1..15, "
        f"geometric), modulus {K}, state epsilon {acc['eps']}, release epsilon {acc['eps_out']}, "
        f"cropped at t = {acc['t']}.",
        "",
        "| statistic | truth | mean of estimates | bias / sd of mean | empirical sd | derived sd "
        "| mean reported stderr |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in acc["rows"]:  # type: ignore[attr-defined]
        lines.append(f"| {row['what']} | {row['truth']:.4g} | {row['mean']:.4g} | "
                     f"{row['bias_sd']:+.2f} | {row['sd']:.4g} | {row['derived']:.4g} | "
                     f"{row['reported']:.4g} |")
    runs = acc["runs"]
    cov = acc["cover"]
    lines += ["", "Coverage of the released 95 % intervals: "
              + ", ".join(f"{k} {v / runs:.3f}" for k, v in cov.items())  # type: ignore[union-attr]
              + f" ({runs} runs)."]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sizes", default="16,20,24")
    ap.add_argument("--runs", type=int, default=None, help="accuracy runs per configuration")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    out = Path(args.out or HERE / "results" / ("frequency-quick.md" if args.quick
                                               else "frequency.md"))
    items = 1 << (21 if args.quick else 24)
    repeats = 1 if args.quick else 5
    runs = args.runs or (40 if args.quick else 1000)
    start, load0 = time.perf_counter(), loadavg()
    results = []
    for sl in (int(s) for s in args.sizes.split(",")):
        for dist in ("uniform", "zipf"):
            r = bench_throughput(sl, dist, 20, items, repeats)
            results.append((sl, dist, 20, r))
            print(f"2^{sl} {dist}: " + "  ".join(f"{k} {v / 1e6:.1f}" for k, v in r.items()),
                  flush=True)
    init = {}
    for layout in ("bytes", "packed"):
        t0 = time.perf_counter()
        ps.FrequencyEstimator(ps.Universe.range(1 << 24), 1.0, K, layout=layout).wipe()
        init[layout] = time.perf_counter() - t0
    accs = [bench_accuracy(1 << 16, 20_000, 1.0, 0.5, runs),
            bench_accuracy(1 << 16, 20_000, 2.0, 0.5, runs)]
    for a in accs:
        print("\n".join(accuracy_table(a)), flush=True)
    elapsed = time.perf_counter() - start
    command = " ".join(["python bench/bench_frequency.py", *(sys.argv[1:] if argv is None else argv)])
    lines = [
        "# panstream frequency benchmark (issue 13)",
        "",
        f"Command: `{command}` "
        f"({elapsed:.0f} s). Machine: {os.cpu_count()} CPUs, {cpu_model()}; Python "
        f"{platform.python_version()}, NumPy {np.__version__}; panstream {git_commit()}. Load "
        f"average {load0} at start, {loadavg()} at end.",
        "",
        "## Update throughput",
        "",
        f"{items:,} items per configuration, batch 2^20, modulus {K}, median of {repeats} "
        "interleaved repeats, millions of items per second. Bare ways: see the script's docstring "
        "(`addat-top` is panstream's own top-bits trick done bare, so it is the limit).",
        "",
        *throughput_table(results),
        "",
        f"Fresh 2^24-cell table (exact D from the CSPRNG): {init['bytes']:.2f} s (bytes), "
        f"{init['packed']:.2f} s (packed).",
        "",
        "## Issue 13 target",
        "",
        *targets(results),
        "",
        "## Accuracy",
        "",
    ]
    for a in accs:
        lines += [*accuracy_table(a), ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=out.parent, delete=False, suffix=".tmp") as f:
        f.write("\n".join(lines))
    os.replace(f.name, out)
    print(f"wrote {out} ({elapsed:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
