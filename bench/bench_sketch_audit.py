"""The sketch under audit: the bounds of docs/sketch.md and the audit's cost beside the table's (run by hand).

    python bench/bench_sketch_audit.py [--trials 10000] [--alpha 1e-6] [--out bench/results/sketch_audit.md]

With the default trials and alpha it audits, in the 6 standard scenarios and with both the learned
(default) and the classic distinguisher:

* the real sketch on the default audit grid (``sketch:64x8:id``), whose claim is the realized
  epsilon_state of the exact dyadic q;
* the two deliberately broken sketches of ``tests/sketch/broken_sketches.py`` (no D0 draw, no D1
  redraw), whose true epsilon is infinite.

It also times the default ``panstream audit`` run of the sketch against the bit table's (range:64)
in the same process, one after the other (CPU seconds, ``time.process_time``), and the per-run cost
of each runner. The bounds are random (each run draws fresh tables); rerunning moves them by a few
hundredths.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from _common import audit_args, test_module

import panstream as ps
from panstream import audit as A

B = test_module("broken_sketches", "tests/sketch/broken_sketches.py")


def num(x: float) -> str:
    return "inf" if x == float("inf") else f"{x:.3f}"


def per_run(run: A.Runner, worlds: A.Worlds, n: int = 2000) -> float:
    """CPU milliseconds per run of ``run`` in world B."""
    t0 = time.process_time()
    for _ in range(n):
        run(worlds.b, worlds.dumps)
    return (time.process_time() - t0) / n * 1e3


def main() -> None:
    args = audit_args(__doc__, "sketch_audit.md")
    n, alpha = args.trials, args.alpha

    cpu: dict[str, float] = {}
    results: dict[tuple[str, str], list[A.AuditResult]] = {}
    designs: list[tuple[str, Any]] = [("real sketch", A.real_sketch),
                                      ("no D0 draw (broken)", B.factory(B.NoD0Sketch)),
                                      ("no D1 redraw (broken)", B.factory(B.NoRedrawSketch))]
    for name, make in designs:
        for mode in ("learned", "classic"):
            t0 = time.process_time()
            results[name, mode] = A.audit_sketch(A.AUDIT_GRID, 1.0, trials=n, alpha=alpha,
                                                 distinguisher=mode, make=make)
            if name == "real sketch" and mode == "learned":
                cpu["sketch"] = time.process_time() - t0
            print(name, mode, [round(r.empirical, 3) for r in results[name, mode]], flush=True)
    t0 = time.process_time()
    A.audit_estimator("range:64", 1.0, trials=n, alpha=alpha)
    cpu["table"] = time.process_time() - t0
    print("table learned", f"{cpu['table']:.1f} s CPU", flush=True)

    items = A.SketchItems.find(ps.SketchEstimator(1.0, 64, 8, "id").universe)
    w_sketch = A.neighbouring_worlds(items.grid.size)
    w_table = A.neighbouring_worlds(64)
    ms = {"sketch": per_run(A.sketch_runner(items), w_sketch),
          "table": per_run(A.estimator_runner("range:64"), w_table)}

    claim = results["real sketch", "learned"][0].claimed
    lines = [
        "# The sketch under audit (`bench/bench_sketch_audit.py`)", "",
        f"{A.AUDIT_GRID}, epsilon 1 (claim = realized epsilon_state {claim:.10f}), {n:,} runs per "
        f"world, alpha = {alpha:g}; load average {os.getloadavg()[0]:.2f}, panstream "
        f"{ps.__version__}. Certified lower bounds on epsilon (Clopper-Pearson); learned: trained "
        "on 30 % of the runs, certified on 70 %; classic: the target item's hashed bit, its change "
        "between two dumps and any non-table byte, on all runs.", "",
        "| scenario | covered | " + " | ".join(f"{name}: {mode} >=" for name, _ in designs
                                               for mode in ("learned", "classic")) + " |",
        "|---|---|" + "---|" * (2 * len(designs)),
    ]
    for i, sc in enumerate(results["real sketch", "learned"]):
        cells = [num(results[name, mode][i].empirical) for name, _ in designs
                 for mode in ("learned", "classic")]
        lines.append(f"| {sc.scenario} | {'yes' if sc.covered else 'no'} | " + " | ".join(cells)
                     + " |")
    lines += ["", "Best tests (learned, real sketch): "
              + "; ".join(r.best for r in results["real sketch", "learned"]) + ".", "",
              f"Default `panstream audit` (6 scenarios, learned), CPU: sketch {cpu['sketch']:.1f} s, "
              f"bit table range:64 {cpu['table']:.1f} s ({cpu['sketch'] / cpu['table']:.2f} x). "
              f"Per run (world B, one dump): sketch {ms['sketch']:.3f} ms, table {ms['table']:.3f} ms "
              f"({ms['sketch'] / ms['table']:.2f} x).", ""]
    Path(args.out).write_text("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
