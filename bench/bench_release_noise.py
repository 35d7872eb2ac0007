"""Throughput of the exact release samplers (samples/s) and of a whole release (releases/s).

Run: ``python3 bench/bench_release_noise.py [--seconds 2]``. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import panstream as ps
from panstream.release.noise import NoiseLaw


def rate(fn, seconds: float) -> float:
    n, t0 = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - t0) < seconds:
        for _ in range(256):
            fn()
        n += 256
    return n / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args()
    print(f"{'sampler':<32}{'epsilon':>9}{'samples/s':>14}")
    for mech in ("laplace", "geometric"):
        for eps in (0.01, 0.1, 1.0, 5.0):
            law = NoiseLaw.for_mechanism(mech, eps)
            print(f"{mech:<32}{eps:>9g}{rate(law.sample, args.seconds):>14,.0f}")
    est = ps.DensityEstimator("ipv4:10.0.0.0/16", budget=1e12)
    est.update_indices(np.arange(20_000))
    for mech in ("laplace", "geometric"):
        r = rate(lambda m=mech: est.release(0.5, m), args.seconds)
        print(f"{'release() ' + mech + ' |X|=2^16':<32}{0.5:>9g}{r:>14,.0f}")


if __name__ == "__main__":
    main()
