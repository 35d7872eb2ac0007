"""Accuracy of the three calibrations, measured against their formulas and the limit (issue 11).

    python bench/bench_accuracy.py [--runs 1000] [--out bench/results/accuracy.md]
                                   [--plot docs/accuracy.png] [--quick]

``--quick`` (a smoke run) writes ``bench/results/accuracy-quick.md`` (untracked) unless ``--out``
says otherwise: it never overwrites the tracked full-run results.

For every state epsilon in {0.25, 0.5, 1, 2}, universe size |X| in {2**12, 2**16}, true density in
{0.01, 0.1, 0.5} and calibration in {paper, tight, rr} (paper needs epsilon < 2), ``--runs``
independent states are built with the real estimator (fresh OS-CSPRNG table, the first f|X| cells
arrive once) and each gives

* the noiseless density estimate ``(theta - q)/(p - q)`` (``est.estimate()``), and
* one released density (laplace, output epsilon equal to the state epsilon: a pan-private total of
  2 epsilon, the survey's default split).

The table reports the empirical standard deviation of each over the runs beside its formula:
state ``sqrt(f p(1-p) + (1-f) q(1-q)) / ((p - q) sqrt|X|)``; released, plus the release noise's
variance ``Var_laplace(1/eps) / (|X| (p - q))**2``; and the limit of any binary-state calibration,
``1 / (2 sinh(eps/2) sqrt|X|)`` (binary randomized response is the optimal eps-DP randomizer of one
bit; rr attains it at every density). The relative sd of an empirical sd over n runs is about
1/sqrt(2n): 2.2 % at n = 1000. Ratios tight/rr are of empirical sds in the same run.

With ``--plot`` it also draws the noiseless sd times sqrt|X| against epsilon (formula curves at
density 0.01 and the empirical points of both sizes) for the three calibrations and the limit, with
matplotlib (``pip install -e ".[bench]"``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import time
from typing import Any

import numpy as np

import panstream as ps
from panstream.calibration import calibrate
from panstream.release.noise import NoiseLaw
from panstream.release.stats import stderr_state

EPSILONS = (0.25, 0.5, 1.0, 2.0)
SIZES = (1 << 12, 1 << 16)
DENSITIES = (0.01, 0.1, 0.5)
CALIBRATIONS = ("paper", "tight", "rr")


def formulas(eps: float, cal: str, m: int, f: float) -> dict[str, float]:
    c = calibrate(eps, cal)
    state = stderr_state(f, m, c.p, c.q)
    law = NoiseLaw.for_mechanism("laplace", eps)
    rel = math.sqrt(law.variance) / (m * float(c.p - c.q))
    return {"state": state, "released": math.hypot(state, rel),
            "limit": 1 / (2 * math.sinh(eps / 2) * math.sqrt(m)),
            "epsilon_state": c.epsilon_state, "p": float(c.p), "q": float(c.q)}


def measure(eps: float, cal: str, m: int, f: float, runs: int) -> dict[str, Any]:
    seen = np.arange(round(f * m))
    noiseless = np.empty(runs)
    released = np.empty(runs)
    for i in range(runs):
        est = ps.DensityEstimator(f"range:{m}", eps, cal, budget=eps)
        est.update_indices(seen.copy())
        noiseless[i] = est.estimate().density
        released[i] = est.release(eps, "laplace").density
    fm = formulas(eps, cal, m, f)
    return {"epsilon": eps, "calibration": cal, "cells": m, "density": f, "runs": runs,
            "sd_state": float(noiseless.std(ddof=1)), "sd_released": float(released.std(ddof=1)),
            "mean_state": float(noiseless.mean()), "formula_state": fm["state"],
            "formula_released": fm["released"], "limit": fm["limit"],
            "epsilon_state": fm["epsilon_state"], "p": fm["p"], "q": fm["q"]}


def _git() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def table(rows: list[dict[str, Any]], runs: int, seconds: float) -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    out = [
        "# Accuracy of the calibrations (`bench/bench_accuracy.py`)",
        "",
        f"Command: `python bench/bench_accuracy.py --runs {runs}` ({seconds:.0f} s). Machine: "
        f"{os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}, NumPy "
        f"{np.__version__}; panstream {_git()}; load average {load:.2f} at the end.",
        "",
        f"{runs} independent states per row (real estimator, fresh CSPRNG table, the first f|X| "
        "cells arrive once). `state`: sd of the noiseless density; `released`: sd of one laplace "
        "release at output epsilon = state epsilon. `emp/formula`: empirical sd over the formula "
        "(its own sampling error is about 1/sqrt(2n) = "
        f"{100 / math.sqrt(2 * runs):.1f} %). `limit`: 1/(2 sinh(eps/2) sqrt|X|), the sd of "
        "binary randomized response, which no binary-state calibration beats. `tight/rr`: ratio "
        "of the empirical state sds, same run.",
        "",
        "| eps | \\|X\\| | f | calibration | state sd (emp) | formula | emp/formula | released sd "
        "(emp) | formula | emp/formula | limit | tight/rr |",
        "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    by = {(r["epsilon"], r["cells"], r["density"], r["calibration"]): r for r in rows}
    for r in rows:
        key = (r["epsilon"], r["cells"], r["density"])
        ratio = ""
        if r["calibration"] == "rr" and key + ("tight",) in by:
            ratio = f"{by[key + ('tight',)]['sd_state'] / r['sd_state']:.2f}"
        out.append(
            f"| {r['epsilon']:g} | 2^{int(math.log2(r['cells']))} | {r['density']:g} | "
            f"{r['calibration']} | {r['sd_state']:.5f} | {r['formula_state']:.5f} | "
            f"{r['sd_state'] / r['formula_state']:.3f} | {r['sd_released']:.5f} | "
            f"{r['formula_released']:.5f} | {r['sd_released'] / r['formula_released']:.3f} | "
            f"{r['limit']:.5f} | {ratio} |")
    rr = [r for r in rows if r["calibration"] == "rr"]
    worst = max(max(abs(r["sd_state"] / r["formula_state"] - 1),
                    abs(r["sd_released"] / r["formula_released"] - 1)) for r in rr)
    out += ["", f"rr: largest |empirical/formula - 1| over its {len(rr)} rows (state and "
            f"released): {100 * worst:.1f} %."]
    return "\n".join(out) + "\n"


def plot(rows: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    f = DENSITIES[0]
    grid = np.linspace(0.1, 2.2, 120)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    style = {"paper": ("tab:gray", "s"), "tight": ("tab:blue", "o"), "rr": ("tab:red", "^")}
    for cal, (color, marker) in style.items():
        xs = [e for e in grid if cal != "paper" or e < 1.99]
        ys = [stderr_state(f, 1, calibrate(float(e), cal).p, calibrate(float(e), cal).q)
              for e in xs]
        note = "; realizes -ln(1 - eps/2)" if cal == "paper" else ""
        ax.plot(xs, ys, color=color, label=f"{cal} (formula, f = {f:g}{note})")
        pts = [r for r in rows if r["calibration"] == cal and r["density"] == f]
        ax.plot([r["epsilon"] for r in pts], [r["sd_state"] * math.sqrt(r["cells"]) for r in pts],
                linestyle="none", marker=marker, color=color, markerfacecolor="none",
                label=f"{cal} (measured, |X| = 2^12 and 2^16)")
    ax.plot(grid, 1 / (2 * np.sinh(grid / 2)), color="black", linestyle=":",
            label="limit 1/(2 sinh(eps/2))")
    ax.set_xlabel("state epsilon asked for")
    ax.set_ylabel("sd of the density x sqrt|X|")
    ax.set_yscale("log")
    ax.set_title("Error of the noiseless density estimate by calibration")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def out_path(out: str | None, quick: bool) -> str:
    """Where the table goes: ``out`` if given, else the tracked results file, or for a ``--quick``
    smoke run an untracked one beside it (a smoke run must not replace the full run's numbers)."""
    if out is not None:
        return out
    return "bench/results/accuracy-quick.md" if quick else "bench/results/accuracy.md"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000, help="independent states per row (>= 200)")
    ap.add_argument("--out", default=None,
                    help="where the table goes [default: bench/results/accuracy.md, or "
                         "bench/results/accuracy-quick.md with --quick]")
    ap.add_argument("--json", default=None, help="also write the rows as JSON here")
    ap.add_argument("--plot", default=None, help="write the PNG here (e.g. docs/accuracy.png)")
    ap.add_argument("--quick", action="store_true", help="200 runs, |X| = 2**12 only (smoke run)")
    ap.add_argument("--replot", default=None, metavar="JSON",
                    help="only redraw --plot from the rows a previous run wrote with --json")
    a = ap.parse_args()
    if a.replot:
        with open(a.replot) as fh:
            plot(json.load(fh), a.plot or "docs/accuracy.png")
        return
    a.out = out_path(a.out, a.quick)
    runs = 200 if a.quick else a.runs
    sizes = SIZES[:1] if a.quick else SIZES
    t0 = time.perf_counter()
    rows = []
    for eps in EPSILONS:
        for m in sizes:
            for f in DENSITIES:
                for cal in CALIBRATIONS:
                    if cal == "paper" and eps >= 2:
                        continue  # p = 1/2 + eps/4 needs eps < 2
                    rows.append(measure(eps, cal, m, f, runs))
                    r = rows[-1]
                    print(f"eps {eps:g} |X| {m} f {f:g} {cal:<5} state {r['sd_state']:.5f} "
                          f"({r['sd_state'] / r['formula_state']:.3f} of formula) released "
                          f"{r['sd_released']:.5f} ({r['sd_released'] / r['formula_released']:.3f})",
                          flush=True)
    seconds = time.perf_counter() - t0
    text = table(rows, runs, seconds)
    with open(a.out, "w") as fh:
        fh.write(text)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    if a.plot:
        plot(rows, a.plot)
    print(text)


if __name__ == "__main__":
    main()
