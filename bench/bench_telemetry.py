"""What the telemetry policies and the ``.gz`` reader cost, as ratios within one run (run by hand).

    python bench/bench_telemetry.py [--lines 5000000] [--repeat 5]

Writes a synthetic plain log (NumPy PCG64: synthetic data only) and its gzip copy, then measures,
interleaved and best of ``--repeat`` each, the in-process ingest loop (:class:`panstream.sources.ingest.
Ingestor`, the command's loop without interpreter start-up):

* ``default``: nothing counted (the default since issue 21: no window, no count past a chunk);
* ``noisy``: the ``--telemetry-epsilon 0.1`` opt-in (per-1-s-window geometric releases);
* ``exact``: the ``--exact-counts`` opt-in (same windows, no noise) — the baseline;
* ``noisy 10 ms``: noisy windows 100 times shorter than the default, a stress bound on the
  per-window cost (a run of a few tenths of a second has only one 1-s window);
* ``gz readinto1`` vs ``gz readinto``: the ``.gz`` reader as shipped (one compressed read per call,
  so a truncated file loses nothing decoded) against the former full-buffer ``readinto``.

Prints one JSON object; ratios > 1 mean the first variant is faster. The machine is shared and
noisy: read the ratios, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from panstream.demo import format_plain
from panstream.estimators.density import DensityEstimator
from panstream.inputs.parser import Format, tune_allocator
from panstream.release.telemetry import TelemetryPolicy
from panstream.sources import ChunkReader, open_input
from panstream.sources.ingest import Ingestor, Input

UNIVERSE = "ipv4:10.0.0.0/16"


def make_log(path: str, lines: int) -> None:
    rng = np.random.default_rng(2024)  # synthetic data only
    with open(path, "wb") as f:
        for start in range(0, lines, 1_000_000):
            n = min(1_000_000, lines - start)
            a = (10 << 24) + rng.integers(0, 1 << 16, size=n)
            f.write(format_plain(a.astype(np.uint32)))


def run_ingest(path: str, policy: TelemetryPolicy, reader: Callable[[Any], ChunkReader] | None = None
               ) -> tuple[float, int]:
    est = DensityEstimator(UNIVERSE, epsilon=1.0)
    ing = Ingestor(est, Format("plain"), telemetry=policy)
    t = time.perf_counter()
    if reader is None:
        with open_input(path) as inp:
            stats = ing.run([Input(path, inp.reader)])
    else:
        with gzip.open(path, "rb") as f:
            stats = ing.run([Input(path, reader(f))])
    return time.perf_counter() - t, stats.windows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=5_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    tune_allocator()
    none, exact = TelemetryPolicy(), TelemetryPolicy.exact_counts()  # default: nothing counted
    noisy, stress = TelemetryPolicy.noisy(0.1), TelemetryPolicy.noisy(0.1, window=0.01)
    with tempfile.TemporaryDirectory() as d:
        plain = os.path.join(d, "a.log")
        gz = plain + ".gz"
        make_log(plain, args.lines)
        with open(plain, "rb") as src, gzip.open(gz, "wb", compresslevel=6) as dst:
            dst.write(src.read())
        times: dict[str, list[float]] = {k: [] for k in ("none", "noisy", "exact", "stress", "gz1",
                                                         "gz")}
        windows = stress_windows = 0
        for _ in range(args.repeat):  # interleaved: load drifts hit every variant alike
            times["none"].append(run_ingest(plain, none)[0])
            t, windows = run_ingest(plain, noisy)
            times["noisy"].append(t)
            times["exact"].append(run_ingest(plain, exact)[0])
            t, stress_windows = run_ingest(plain, stress)
            times["stress"].append(t)
            times["gz1"].append(run_ingest(gz, exact, lambda f: ChunkReader(f.readinto1))[0])
            times["gz"].append(run_ingest(gz, exact, lambda f: ChunkReader(f.readinto))[0])
    best = {k: min(v) for k, v in times.items()}
    print(json.dumps({
        "lines": args.lines, "repeat": args.repeat, "windows_per_noisy_run": windows,
        "default_nothing_counted_Mlines_s": args.lines / best["none"] / 1e6,
        "default_vs_exact_throughput": best["exact"] / best["none"],
        "noisy_Mlines_s": args.lines / best["noisy"] / 1e6,
        "exact_Mlines_s": args.lines / best["exact"] / 1e6,
        "noisy_vs_exact_throughput": best["exact"] / best["noisy"],
        "noisy_10ms_windows_per_run": stress_windows,
        "noisy_10ms_vs_exact_throughput": best["exact"] / best["stress"],
        "gz_readinto1_Mlines_s": args.lines / best["gz1"] / 1e6,
        "gz_readinto_Mlines_s": args.lines / best["gz"] / 1e6,
        "gz_readinto1_vs_readinto_throughput": best["gz"] / best["gz1"],
        "noise_sd_per_count_per_window": {"ingest": TelemetryPolicy.noisy(0.1).noise_sd,
                                          "kafka": TelemetryPolicy.noisy(0.1, 2).noise_sd},
        "loadavg": os.getloadavg(),
    }, indent=1))


if __name__ == "__main__":
    main()
