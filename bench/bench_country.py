"""Memory and error of distinct clients by country (``sketch:BxP:ip-country``), per grid size.

For each grid (per country), R independent states of N distinct public IPv4 clients (state
epsilon 1) are each released once at epsilon 1 (laplace): the state's memory, the 95 % coverage of
all per-country intervals, the median half-width of the largest country's interval (relative) and
of an empty country's interval, and the total's. Run: ``python bench/bench_country.py``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from geo_samples import public_ipv4, truth_by_country  # noqa: E402

from panstream.country.hashed import CountryDensityEstimator  # noqa: E402
from panstream.country.sketch import CountrySketchEstimator  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=50_000)
    ap.add_argument("-r", "--runs", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(2026)
    print("| table per country | state bytes | coverage (95 %) | largest country: truth, "
          "+- (rel.) | empty country +- | total +- | ingest s | release s |")
    print("|---|---|---|---|---|---|---|---|")
    grids: list[tuple[str, int, int]] = [("sketch", b, 24) for b in (256, 1024, 4096)]
    grids += [("hashed-ip", m, 1) for m in (4096, 16384, 65536)]
    for family, b, p in grids:
        cover = total = 0
        big, empty, tot, t_in, t_rel = [], [], [], 0.0, 0.0
        for _ in range(args.runs):
            items = public_ipv4(rng, args.n)
            truth = truth_by_country(items)
            t0 = time.perf_counter()
            est = (CountrySketchEstimator(epsilon=1.0, buckets=b, levels=p, budget=1.0)
                   if family == "sketch" else
                   CountryDensityEstimator(f"hashed-ip-country:{b}", epsilon=1.0, budget=1.0))
            est.update(items)
            t1 = time.perf_counter()
            rel = est.release(1.0)
            t2 = time.perf_counter()
            t_in += t1 - t0
            t_rel += t2 - t1
            ok = [r.low <= t <= r.high for r, t in zip(rel.rows, truth.tolist(), strict=True)]
            cover += sum(ok)
            total += len(ok)
            k = int(np.argmax(truth))
            big.append(((rel.rows[k].high - rel.rows[k].low) / 2, int(truth[k])))
            z = [(r.high - r.low) / 2 for r, t in zip(rel.rows, truth.tolist(), strict=True)
                 if t == 0]
            empty.append(float(np.median(z)))
            tot.append((rel.high - rel.low) / 2)
        hw, tr = np.median([x[0] for x in big]), int(np.median([x[1] for x in big]))
        name = f"sketch {b} x {p}" if family == "sketch" else f"hashed-ip-country:{b}"
        print(f"| {name} | {est.size // 8:,} | {cover / total:.3f} ({total} intervals) | "
              f"{tr:,}: +-{hw:,.0f} ({hw / tr:.1%}) | +-{np.median(empty):,.0f} | "
              f"+-{np.median(tot):,.0f} | {t_in / args.runs:.2f} | {t_rel / args.runs:.2f} |")


if __name__ == "__main__":
    main()
