"""The audit's power: which broken designs the classic and the learned distinguisher catch (run by hand).

    python bench/bench_audit_power.py [--trials 10000] [--alpha 1e-6] [--out bench/results/audit_power.md]

For each deliberately broken design of ``tests/state/broken_designs.py`` (and panstream's own
estimator in the four standard scenarios) it runs the subpoena simulation twice with the default
trials and alpha: once with the classic fixed tests (the target's own cell or bit, a change between
two dumps, any non-table byte, or the design's hand-written test) on all runs, once with the learned
distinguisher (30 % training / 70 % test runs, single bits and pairs of bits), and, for comparison,
the learned one with a 50/50 split and the learned one without pairs (single bits only, as before
issue 21). It prints and writes a Markdown table: design, claim, true epsilon (computed exactly), and
the certified bound of each. A design is *caught* when its bound exceeds the claim. It also times the
default ``panstream audit`` run (``audit_estimator()``) with each distinguisher.

The bounds are random (each run draws fresh tables); rerunning moves them by a few hundredths.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from _common import audit_args, test_module

import panstream as ps
from panstream import audit as A

B = test_module("broken_designs", "tests/state/broken_designs.py")


def cell_is_one(target: int) -> A.Distinguisher:
    return lambda d: bool(d[-1][target] == 1)


def row(name: str, dumps: str, run: A.Runner, worlds: A.Worlds, claim: float, true: float,
        classic: Mapping[str, A.Distinguisher] | None, trials: int, alpha: float,
        encode: Callable[[Any], Any] | None = None) -> dict[str, Any]:
    t0 = time.perf_counter()
    c = A.audit(run, worlds, classic, trials=trials, claimed=claim, alpha=alpha) if classic else None
    kw: dict[str, Any] = {"trials": trials, "claimed": claim, "alpha": alpha, "encode": encode}
    try:
        learned = A.audit(run, worlds, **kw)
        half = A.audit(run, worlds, train_fraction=0.5, **kw)
        singles = A.audit(run, worlds, pairs=False, **kw)
    except ps.ConfigurationError:
        learned = half = singles = None
    out = {"design": name, "dumps": dumps, "claim": claim, "true": true,
           "classic": None if c is None else c.empirical,
           "learned": None if learned is None else learned.empirical,
           "half": None if half is None else half.empirical,
           "singles": None if singles is None else singles.empirical,
           "features": "" if learned is None or learned.learned is None
           else ", ".join(learned.learned.features[:2])
           + (" ..." if len(learned.learned.features) > 2 else ""),
           "seconds": time.perf_counter() - t0}
    print(fmt_row(out), flush=True)
    return out


def num(x: float | None) -> str:
    if x is None:
        return "n/a"
    return "inf" if math.isinf(x) else f"{x:.3f}"


def fmt_row(r: dict[str, Any]) -> str:
    ratio = r["true"] / r["claim"]
    caught = r["learned"] is not None and r["learned"] > r["claim"]
    return (f"| {r['design']} | {r['dumps']} | {num(r['claim'])} | {num(r['true'])} | "
            f"{'inf' if math.isinf(ratio) else f'{ratio:.2f}'} | {num(r['classic'])} | "
            f"{num(r['learned'])} | {num(r['half'])} | {num(r['singles'])} | "
            f"{'**yes**' if caught else 'no'} | "
            f"{r['features']} |")


def main() -> None:
    args = audit_args(__doc__, "audit_power.md")
    n, alpha = args.trials, args.alpha
    w = A.neighbouring_worlds(64)
    quiet = A.neighbouring_worlds(64, background=0)
    one = A.neighbouring_worlds(64, occurrences=1)
    t = w.target
    rows = []
    for q, eps, snap in [(0.45, 1.0, False), (0.35, 1.0, False), (0.35, 0.5, False), (0.18, 1.0, True)]:
        classic = ({"target bit is 1": lambda d: A.cell_bit(d[-1], t) == 1} if snap
                   else {"target cell is 1": cell_is_one(t)})
        rows.append(row(f"D0 = Bernoulli({q}), D1 tight for epsilon {eps}",
                        "snapshot" if snap else "bit array", B.biased_d0(q, eps, snapshot=snap), w,
                        B.claimed(eps), B.biased_d0_epsilon(q, eps), classic, n, alpha))
    two = 2 * B.claimed(1.0)
    rows.append(row("each arrival also redraws x + 1, no background", "bit array", B.second_cell(),
                    quiet, B.claimed(1.0), two, {"target cell is 1": cell_is_one(t)}, n, alpha))
    rows.append(row("each arrival also redraws x + 1, background", "bit array", B.second_cell(), w,
                    B.claimed(1.0), 0.0, {"target cell is 1": cell_is_one(t)}, n, alpha))
    shadow = B.second_cell(shadow=True, snapshot=True)
    rows.append(row("each arrival also redraws shadow cell 64 + x, background", "snapshot", shadow,
                    w, B.claimed(1.0), two,
                    A.snapshot_distinguishers(t, 1, shadow(w.a, w.dumps)), n, alpha))
    stored = B.stored_count()
    rows.append(row("snapshot ledger stores the item count", "snapshot", stored, w, B.claimed(1.0),
                    math.inf, A.snapshot_distinguishers(t, 1, stored(w.a, w.dumps)), n, alpha))
    rows.append(row("seeded PCG64, seed saved (learned: bits only)", "(seed, bits)", B.seeded_pcg64(),
                    w, B.claimed(1.0), math.inf,
                    {"replayed bit differs": B.replayed_bit_differs(t)}, n, alpha,
                    encode=lambda d: d[1]))
    rows.append(row("exact set (learned: as an indicator array)", "frozenset", B.exact_set(), w,
                    B.claimed(1.0), math.inf, {"target in the set": lambda d: t in d[-1]}, n, alpha,
                    encode=lambda d: np.isin(np.arange(64), sorted(d)).astype(np.uint8)))
    cols = B.count_min_columns()

    def cm_query(c: np.ndarray) -> int:
        return int(c[range(B.COUNT_MIN_DEPTH), cols[t]].min())

    cm = B.count_min()
    in_a = cm_query(cm(one.a, one.dumps)[-1])
    rows.append(row("count-min sketch, depth 3, width 16", "int64 array", cm, one, B.claimed(1.0),
                    math.inf, {"estimate above world A's": lambda d: cm_query(d[-1]) > in_a}, n,
                    alpha))
    rows.append(row("uint8 arrival counters + noise 0..3", "uint8 array", B.noisy_counters, one,
                    B.claimed(1.0), math.inf, {"target counter is 4": lambda d: d[-1][t] == 4}, n,
                    alpha))

    # issue 21: a pair of bits, and a heavy user within one batch
    rr = B.claimed_rr(1.0)
    pad = B.xor_pad_journal()
    rows.append(row("journal of touched cells XOR a pad stored beside it (3 x 64 cells)", "snapshot",
                    pad, w, rr, math.inf, A.snapshot_distinguishers(t, 1, pad(w.a, w.dumps)), n,
                    alpha))
    sat = B.batch_saturation()
    heavy = A.neighbouring_worlds(64, occurrences=16, first_batch=3)
    rows.append(row("cell hit 8+ times in one batch set to 1; target once", "snapshot", sat, w, rr,
                    rr, A.snapshot_distinguishers(t, 1, sat(w.a, w.dumps)), n, alpha))
    rows.append(row("cell hit 8+ times in one batch set to 1; target 16 times in one batch",
                    "snapshot", sat, heavy, rr, math.inf,
                    A.snapshot_distinguishers(t, 1, sat(heavy.a, heavy.dumps)), n, alpha))

    real = []
    timing = {}
    for mode in ("classic", "learned", "both"):
        t0 = time.perf_counter()
        res = A.audit_estimator(trials=n, alpha=alpha, distinguisher=mode)
        timing[mode] = time.perf_counter() - t0
        real.append(res)
        print(mode, f"{timing[mode]:.1f} s", [round(r.empirical, 3) for r in res], flush=True)

    lines = [
        "# Audit power (`bench/bench_audit_power.py`)", "",
        f"{n:,} runs per world (the default), alpha = {alpha:g}; load average "
        f"{os.getloadavg()[0]:.2f}, panstream {ps.__version__}. Bounds are certified lower bounds "
        "on epsilon (Clopper-Pearson); a design is caught when its bound exceeds the claim. "
        "Classic: the fixed tests on all runs (target cell/bit, change between dumps, non-table bytes, "
        "or the design's own hand-written test). Learned: trained on 30 % of the runs, certified on "
        "the other 70 % (the default, single bits and XOR of pairs of bits); 50/50: the same with "
        "half the runs for training; single bits only: the default without pairs (the audit "
        "before issue 21).", "",
        "| design | dumps | claim | true epsilon | true / claim | classic >= | learned >= "
        "| learned 50/50 >= | single bits only >= | caught (learned) | learned features |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *[fmt_row(r) for r in rows], "",
        "## panstream's estimator (range:64, epsilon 1, default rr calibration; claim = realized "
        "epsilon_state)", "",
        "| scenario | covered | classic >= | learned >= | both >= |", "|---|---|---|---|---|",
    ]
    for i, sc in enumerate(real[0]):
        lines.append(f"| {sc.scenario} | {'yes' if sc.covered else 'no'} | {num(real[0][i].empirical)} "
                     f"| {num(real[1][i].empirical)} | {num(real[2][i].empirical)} |")
    lines += ["", f"Default `panstream audit` run ({len(real[0])} scenarios, both worlds): "
              + ", ".join(f"{m} {s:.1f} s" for m, s in timing.items()) + ".", ""]
    Path(args.out).write_text("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
