"""What a global IPv4 density map costs (run by hand).

    python bench/bench_maps.py [--prefix 0] [--by 16] [--repeat 3]

Builds a ``ipv4:0.0.0.0/0`` state (2**32 cells, 512 MiB packed; 2**24 synthetic arrivals from NumPy
PCG64 — synthetic data only, the table's draws come from the OS CSPRNG), then measures, best of
``--repeat``:

* ``count_ones``: one pass over the table counting all ones — the baseline;
* ``count_ones_by``: the per-bucket counts of the map (65,536 /16s);
* ``release_map``: the whole map (counts, 65,536 exact noise draws, rows, intervals);
* ``plot``: the 256 x 256 Hilbert PNG (matplotlib, Agg);

and the process's peak resident memory. Prints one JSON object; ratios are to ``count_ones`` in the
same run. The machine is shared and noisy: read the ratios, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import panstream as ps


def best(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prefix", type=int, default=0)
    ap.add_argument("--by", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    t0 = time.perf_counter()
    est = ps.DensityEstimator(f"ipv4:0.0.0.0/{a.prefix}" if a.prefix == 0 else
                              f"ipv4:10.0.0.0/{a.prefix}", epsilon=1.0, budget=1e6)
    rng = np.random.default_rng(1)
    est.update_indices(rng.integers(0, est.size, 1 << 24))
    build = time.perf_counter() - t0
    t_count = best(est.count_ones, a.repeat)
    t_by = best(lambda: est._table.count_ones_by(1 << (32 - a.by)), a.repeat)
    maps: list[ps.MapRelease] = []
    t_map = best(lambda: maps.append(est.release_map(0.5, by=a.by)), a.repeat)
    with tempfile.TemporaryDirectory() as d:
        t_plot = best(lambda: maps[-1].plot(os.path.join(d, "m.png")), a.repeat)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(json.dumps({
        "universe": est.universe.spec, "cells": est.size, "by": f"/{a.by}",
        "buckets": len(maps[-1].rows), "build_s": round(build, 2),
        "count_ones_s": round(t_count, 3), "count_ones_by_s": round(t_by, 3),
        "release_map_s": round(t_map, 3), "plot_s": round(t_plot, 3),
        "count_ones_by_over_count_ones": round(t_by / t_count, 2),
        "release_map_over_count_ones": round(t_map / t_count, 2),
        "peak_rss_gib": round(peak, 2), "loadavg": os.getloadavg(),
    }, indent=1))


if __name__ == "__main__":
    main()
