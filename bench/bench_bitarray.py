"""Why the packed table is NumPy bits and not a ``bitarray``: the two on the same work, one run.

Both hold ``m`` cells as little-endian packed bits. For a batch of cell indices (a NumPy array, as
the parser and the Kafka decoder produce) and one 0/1 draw per index, each writes the draws into the
table; then each counts the ones (what every estimate and release reads).

* NumPy: panstream's own packed write on its NumPy path
  (:func:`panstream.estimators.bittable._packed_write_numpy`, eight vectorized passes; the fallback of
  the optional C kernel since issue 38, which this bench leaves out) and ``np.bitwise_count`` over
  64-bit words.
* bitarray: sequence assignment ``a[ones] = 1; a[zeros] = 0`` (bitarray takes Python lists of
  indices, so the ``tolist`` the batch needs is part of its cost) and ``a.count(1)``.

The draws are made once, outside the timings: this compares the tables, not the randomness. The
ratio column is bitarray time / NumPy time (above 1: bitarray is slower). Machines here are 2-core
and shared: compare ratios within one run, not absolute numbers across runs.

    python bench/bench_bitarray.py            # 2^20, 2^24, 2^28 cells, batch 2^20, 7 repeats
    python bench/bench_bitarray.py --quick    # 2^20 and 2^24, 3 repeats
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import numpy as np

from panstream.estimators.bittable import _packed_write_numpy


def _median_time(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run(log2_cells: int, batch: int, repeat: int) -> dict[str, float]:
    import bitarray

    m = 1 << log2_cells
    rng = np.random.default_rng(log2_cells)  # synthetic indices and draws: no privacy here
    idx = rng.integers(0, m, size=batch, dtype=np.int64).astype(np.intp)
    v = rng.integers(0, 2, size=batch, dtype=np.uint8)
    packed = np.zeros(m // 8, dtype=np.uint8)
    ba = bitarray.bitarray(m, endian="little")
    ba.setall(0)

    def np_update() -> None:
        _packed_write_numpy(packed, idx, v.copy())  # it consumes (shifts) its draws

    def ba_update() -> None:
        ones = idx[v == 1].tolist()
        zeros = idx[v == 0].tolist()
        ba[ones] = 1
        ba[zeros] = 0

    def np_count() -> int:
        return int(np.bitwise_count(packed.view(np.uint64)).sum(dtype=np.int64))

    def ba_count() -> int:
        return int(ba.count(1))

    np_update()
    ba_update()  # warm both
    t_np_u = _median_time(np_update, repeat)
    t_ba_u = _median_time(ba_update, repeat)
    t_np_c = _median_time(np_count, repeat)
    t_ba_c = _median_time(ba_count, repeat)
    return {"cells": log2_cells, "np_update_mps": batch / t_np_u / 1e6,
            "ba_update_mps": batch / t_ba_u / 1e6, "update_ratio": t_ba_u / t_np_u,
            "np_count_ms": t_np_c * 1e3, "ba_count_ms": t_ba_c * 1e3,
            "count_ratio": t_ba_c / t_np_c}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2^20 and 2^24 cells, 3 repeats")
    ap.add_argument("--batch", type=int, default=1 << 20)
    args = ap.parse_args(argv)
    try:
        import bitarray
    except ImportError:
        print("bench_bitarray needs the bitarray package: pip install bitarray", file=sys.stderr)
        return 2
    sizes = (20, 24) if args.quick else (20, 24, 28)
    repeat = 3 if args.quick else 7
    load = os.getloadavg()[0]
    print(f"bitarray {bitarray.__version__}, NumPy {np.__version__}, Python "
          f"{platform.python_version()}, {os.cpu_count()} CPUs, load average {load:.2f} at start; "
          f"batch {args.batch}, median of {repeat}")
    print()
    print("| cells | NumPy update (M/s) | bitarray update (M/s) | update: bitarray slower by | "
          "NumPy count (ms) | bitarray count (ms) | count: bitarray slower by |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for k in sizes:
        r = run(k, args.batch, repeat)
        print(f"| 2^{k} | {r['np_update_mps']:.1f} | {r['ba_update_mps']:.1f} | "
              f"{r['update_ratio']:.2f}x | {r['np_count_ms']:.2f} | {r['ba_count_ms']:.2f} | "
              f"{r['count_ratio']:.2f}x |")
    print(f"\nload average {os.getloadavg()[0]:.2f} at end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
