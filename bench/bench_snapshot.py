"""Benchmark: save and load a 2**32-cell state (512 MiB packed table). Not a test.

Usage: python3 bench/bench_snapshot.py [--cells-log2 32] [--dir DIR] [--repeat 3]

Prints wall-clock seconds for snapshot() bytes, save() (including fsync of file and directory),
load(), and the peak resident memory of the process, so extra copies of the table would show.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time

import panstream as ps


def rss_mib() -> float:
    """Current resident set size in MiB (Linux /proc)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells-log2", type=int, default=32)
    ap.add_argument("--dir", default=None, help="directory for the state file (default: a temp dir)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    spec = f"range:{1 << args.cells_log2}"
    t = time.perf_counter()
    est = ps.DensityEstimator(spec, layout="packed")
    print(f"{spec}: table {est._table.nbytes() / 2**20:.0f} MiB, init {time.perf_counter() - t:.2f} s, "
          f"rss {rss_mib():.0f} MiB")
    d = args.dir or tempfile.mkdtemp(prefix="panstream-bench-")
    path = os.path.join(d, "bench.pst")
    for i in range(args.repeat):
        t = time.perf_counter()
        est.save(path)
        t_save = time.perf_counter() - t
        base = rss_mib()
        t = time.perf_counter()
        back = ps.DensityEstimator.load(path, layout="packed")
        t_load = time.perf_counter() - t
        grew = rss_mib() - base
        print(f"run {i}: save {t_save:.2f} s, load {t_load:.2f} s (load added {grew:.0f} MiB rss: "
              f"the new table), file {os.path.getsize(path) / 2**20:.1f} MiB")
        del back
    print(f"peak rss {peak_mib():.0f} MiB (one table = {est._table.nbytes() / 2**20:.0f} MiB)")
    os.unlink(path)


if __name__ == "__main__":
    main()
