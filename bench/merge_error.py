"""Measure the error of merging K shard tables: sum of shard estimates vs partition-aware merge.

Setup: universe ipv4:10.0.0.0/16 (65,536 cells), state epsilon 1 (tight), 20,000 distinct addresses
each arriving 3 times. "keyed": messages keyed by the address text, default murmur2 partitioner (each
address lives in one partition). "unkeyed": every arrival goes to a random partition.

For each K, TRIALS independent runs (fresh D0 tables from the OS CSPRNG each time) give the bias and
the root-mean-square error of the distinct-count estimate. No release noise is added (it is the same
for both merges: sensitivity 1 on the count of ones). Synthetic data uses NumPy's PCG64 (test data
only; privacy draws come from the OS CSPRNG).

Run: ``python bench/merge_error.py [--trials 200]``; prints a Markdown table (docs/kafka.md).
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from panstream.estimators.density import DensityEstimator
from panstream.state.merge import kafka_partitions_of_cells, merge_partitioned, merge_sum
from panstream.universe import Universe

U = Universe.parse("ipv4:10.0.0.0/16")
DISTINCT = 20_000
REPEATS = 3


def trial(k: int, owner: np.ndarray, rng: np.random.Generator, keyed: bool
          ) -> tuple[float, float, float]:
    cells = rng.choice(U.size, DISTINCT, replace=False)
    arrivals = np.repeat(cells, REPEATS)
    part = owner[arrivals] if keyed else rng.integers(0, k, arrivals.size)
    shards = {j: DensityEstimator(U, epsilon=1.0) for j in range(k)}
    for j in range(k):
        shards[j].update_indices(arrivals[part == j].copy())
    s = merge_sum(list(shards.values()))
    p = merge_partitioned(shards, owner).estimate()
    return s.distinct, p.distinct, s.stderr_distinct


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--shards", default="1,2,4,8,16")
    args = ap.parse_args()
    rng = np.random.default_rng(2024)
    single = DensityEstimator(U, epsilon=1.0)
    single.update_indices(np.arange(DISTINCT))
    print(f"one table, model stderr of the distinct count: {single.estimate().stderr_distinct:.0f}")
    print()
    print("| keying | K shards | sum: bias | sum: RMSE | partition-aware: bias | "
          "partition-aware: RMSE | sum model stderr |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for keyed in (True, False):
        for k in [int(x) for x in args.shards.split(",")]:
            if not keyed and k == 1:
                continue
            owner = kafka_partitions_of_cells(U, k)
            res = np.array([trial(k, owner, rng, keyed) for _ in range(args.trials)])
            err_s, err_p = res[:, 0] - DISTINCT, res[:, 1] - DISTINCT
            print(f"| {'keyed' if keyed else 'unkeyed'} | {k} | {err_s.mean():+.0f} | "
                  f"{math.sqrt((err_s ** 2).mean()):.0f} | {err_p.mean():+.0f} | "
                  f"{math.sqrt((err_p ** 2).mean()):.0f} | {res[:, 2].mean():.0f} |")


if __name__ == "__main__":
    main()
