"""What the randomized merge costs: a week merged from 7 daily sketches vs one sketch of the week.

Setup: the default grid 4096 x 24, state epsilon 1 per daily sketch (flip probability ``q`` the
32-bit dyadic panstream uses). Each trial draws a week of traffic: a pool of POOL clients, each day
DAILY of them at random (so the week's union is about ``POOL (1 - (1 - DAILY/POOL)^7)``), each
client with a fresh random 64-bit hash (the hash's randomness is part of both errors).

* **merged**: 7 daily sketches, each drawn from the state's exact law (a bit hit that day is
  Bernoulli(1 - q), any other Bernoulli(q): docs/sketch.md, "Why a leaked state is exactly
  Presto's privatized sketch"), merged one after another with panstream's own
  :func:`panstream.estimators.sketch.estimator.merge` (OS CSPRNG draws, as ``merge-sketches`` does);
* **one sketch**: a single table fed the whole week at the same epsilon 1.

Both are estimated by the maximum pseudo-likelihood (``sfm.mple``, Presto's ``cardinality()``),
noiseless (a release adds the same Laplace noise to either). Printed: bias, the empirical standard
deviation over TRIALS, and ``sfm.expected_stderr`` at the union (the merged one at the merged flip
probability). Synthetic traffic and the simulated daily states use NumPy's PCG64 (test data only).

Run: ``python bench/sketch_merge_error.py [--trials 200]``; prints a Markdown table (docs/windows.md).
"""

from __future__ import annotations

import argparse
import math
from fractions import Fraction

import numpy as np

from panstream.estimators.sketch import sfm
from panstream.estimators.sketch.estimator import merge

BUCKETS, LEVELS = 4096, 24
GRID = sfm.SketchGrid(BUCKETS, LEVELS, "id")
Q = Fraction(round(2**32 / (1 + math.e)), 2**32)  # epsilon 1, as the state's q
DAYS = 7


def _sketch(cells: np.ndarray, r: float, rng: np.random.Generator) -> sfm.PrestoSketch:
    hit = np.zeros(GRID.size, dtype=bool)
    hit[cells] = True
    bits = rng.random(GRID.size) < np.where(hit, 1 - r, r)
    return sfm.PrestoSketch(GRID.bits, LEVELS, r, np.packbits(bits, bitorder="little").tobytes())


def trial(pool: int, daily: int, rng: np.random.Generator) -> tuple[float, float, int]:
    hashes = rng.integers(0, 2**64 - 1, size=pool, dtype=np.uint64, endpoint=True)
    cells = GRID.cells_of_hashes(hashes)
    days = [rng.choice(pool, daily, replace=False) for _ in range(DAYS)]
    union = np.unique(np.concatenate(days))
    q = float(Q)
    merged = _sketch(cells[days[0]], q, rng)
    for d in days[1:]:
        merged = merge(merged, _sketch(cells[d], q, rng))
    whole = _sketch(cells[union], q, rng)
    return (sfm.mple(merged.ones_by_level(), BUCKETS, merged.flip).n,
            sfm.mple(whole.ones_by_level(), BUCKETS, whole.flip).n, int(union.size))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=200)
    args = ap.parse_args()
    np.seterr(all="ignore")  # the fit's terms overflow harmlessly far from the optimum
    rng = np.random.default_rng(2026)
    r7: Fraction = Q
    for _ in range(DAYS - 1):
        r7 = Fraction(sfm.merge_flip_probability(r7, Q))
    eps7 = math.log((1 - r7) / r7)
    print(f"grid {BUCKETS} x {LEVELS}, daily epsilon 1 (q = {float(Q):.6f}); 7 merged: flip "
          f"{float(r7):.6f}, epsilon* {eps7:.4f}; {args.trials} trials per row\n")
    print("| clients/day (pool) | week's union | sketch | bias | sd (measured) | "
          "stderr (expected) | sd / union |")
    print("|---|---|---|---|---|---|---|")
    for pool, daily in ((1_000, 300), (10_000, 3_000), (100_000, 30_000)):
        res = np.array([trial(pool, daily, rng) for _ in range(args.trials)])
        union = float(res[:, 2].mean())
        for name, col, r in (("one sketch of the week", 1, float(Q)),
                             ("7 daily, merged", 0, float(r7))):
            err = res[:, col] - res[:, 2]
            sd = float(err.std(ddof=1))
            exp = sfm.expected_stderr(union, BUCKETS, LEVELS, r)
            print(f"| {daily:,} ({pool:,}) | {union:,.0f} | {name} | {err.mean():+,.0f} | "
                  f"{sd:,.0f} | {exp:,.0f} | {sd / union:.1%} |")
    print("\nExpected standard error at a week's union of 9,167 (sfm.expected_stderr), by daily "
          "epsilon:\n")
    print("| daily epsilon | 7 merged: epsilon* | one sketch of the week | 7 daily, merged | ratio |")
    print("|---|---|---|---|---|")
    for eps in (1, 2, 3, 4, 6, 8):
        q = Fraction(round(2**32 / (1 + math.exp(eps))), 2**32)
        r = q
        for _ in range(DAYS - 1):
            r = Fraction(sfm.merge_flip_probability(r, q))
        one = sfm.expected_stderr(9_167, BUCKETS, LEVELS, float(q))
        many = sfm.expected_stderr(9_167, BUCKETS, LEVELS, float(r))
        print(f"| {eps} | {math.log((1 - r) / r):.3f} | {one:,.0f} | {many:,.0f} | "
              f"{many / one:.1f} x |")


if __name__ == "__main__":
    main()
