"""Lines per second of every log-format extractor beside ``plain`` and ``clf``, in one run.

    python bench/bench_formats.py [--lines 200000] [--repeat 3] [--only caddy,alb]

For each sample of tests/logsamples.py (the published shapes of issue 20's formats) it
writes the log to a temporary file, then times the bare parser the command uses
(:class:`panstream.inputs.parser.LineParser` over the file in the reader's 2 MiB chunks, no table), best of
``--repeat``, into ``ipv4:10.0.0.0/16``. It prints lines/s, ns/line, bytes/line and the ratio to
``clf`` measured in the same run (the machine is shared and noisy: compare ratios, not absolute
figures across runs), and checks every run's accepted count against the sample's truth.
Synthetic data only (NumPy PCG64).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from panstream.inputs.parser import LineParser, tune_allocator
from panstream.sources import open_input
from panstream.universe import Universe

# The synthetic samples live in the test tree (not in panstream/: they use NumPy's generator).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from logsamples import GENERATORS, UNIVERSE, generate  # noqa: E402


def time_parser(path: str, fmt: str) -> tuple[float, int]:
    p = LineParser(Universe.parse(UNIVERSE), fmt)
    accepted = 0
    t = time.perf_counter()
    with open_input(path) as inp:
        for chunk in inp.reader:
            accepted += p.parse(chunk).accepted
    return time.perf_counter() - t, accepted


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--lines", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated sample names")
    args = ap.parse_args()
    tune_allocator()
    names = [n for n in GENERATORS if not args.only or n in args.only.split(",")]
    order = ["plain", "clf"] + [n for n in names if n not in ("plain", "clf")]
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as d:
        for name in order:
            fmt = GENERATORS[name][1]
            s = generate(name, lines=args.lines, distinct=min(50_000, args.lines // 2), seed=3)
            path = os.path.join(d, f"{name}.log")
            with open(path, "wb") as f:
                f.write(s.data)
            lines = s.data.count(b"\n")
            runs = [time_parser(path, fmt) for _ in range(args.repeat)]
            best = min(r[0] for r in runs)
            assert all(r[1] == s.accepted for r in runs), (name, runs, s.accepted)
            results[name] = {"format": fmt, "lines": lines, "bytes_per_line": len(s.data) / lines,
                             "Mlines_s": lines / best / 1e6, "ns_line": best / lines * 1e9,
                             "MB_s": len(s.data) / best / 1e6}
            os.unlink(path)
    clf = results.get("clf", {}).get("ns_line", float("nan"))
    print(f"{'sample':11} {'-f':32} {'B/line':>7} {'M lines/s':>10} {'ns/line':>8} {'MB/s':>7} "
          f"{'x clf':>6}")
    for name, r in results.items():
        print(f"{name:11} {r['format']:32} {r['bytes_per_line']:7.0f} {r['Mlines_s']:10.2f} "
              f"{r['ns_line']:8.0f} {r['MB_s']:7.0f} {r['ns_line'] / clf:6.1f}")
    print(json.dumps({"nproc": os.cpu_count(), "lines": args.lines, "results": results}))


if __name__ == "__main__":
    main()
