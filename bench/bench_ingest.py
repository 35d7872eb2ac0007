"""End-to-end ingest throughput from a pipe, against ``cat`` and the bare parser (run by hand).

    python bench/bench_ingest.py [--plain-lines 10000000] [--clf-lines 3000000] [--repeat 3]

For each format (plain dotted quads, Apache combined log) it writes a synthetic log to a temporary
directory (NumPy PCG64: synthetic data only), then measures, best of ``--repeat``:

* ``cat file > /dev/null``: the floor of reading the file;
* the bare parser: :class:`panstream.inputs.parser.LineParser` over the file in the same chunks the command
  uses (:class:`panstream.sources.ChunkReader`), no table;
* ``cat file | panstream ingest ...``: the real command; lines/s from the elapsed time the command
  reports itself (interpreter start-up excluded), plus the wall time including start-up.

Targets from issue 5: plain >= 20 M lines/s, CLF >= 8 M lines/s end-to-end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from panstream.demo import format_plain
from panstream.inputs.parser import LineParser, tune_allocator
from panstream.sources import open_input
from panstream.universe import Universe

UNIVERSE = "ipv4:10.0.0.0/16"
CLF_SUFFIX = (b' - - [10/Oct/2023:13:55:36 +0000] "GET /index.html HTTP/1.1" 200 2326 '
              b'"https://example.com/start.html" "Mozilla/5.0 (X11; Linux x86_64)"\n')


def make_log(path: str, lines: int, clf: bool) -> None:
    rng = np.random.default_rng(12345)  # synthetic data only
    with open(path, "wb") as f:
        for start in range(0, lines, 1_000_000):
            n = min(1_000_000, lines - start)
            a = (10 << 24) + rng.integers(0, 1 << 16, size=n)
            out = rng.random(n) < 0.05
            a[out] = rng.integers(0, 1 << 32, size=int(out.sum()))
            text = format_plain(a.astype(np.uint32))
            f.write(text.replace(b"\n", CLF_SUFFIX) if clf else text)


def best(f, repeat: int) -> float:
    return min(f() for _ in range(repeat))


def time_cat(path: str) -> float:
    t = time.perf_counter()
    subprocess.run(f"cat {path} > /dev/null", shell=True, check=True)
    return time.perf_counter() - t


def time_parser(path: str, fmt: str) -> float:
    p = LineParser(Universe.parse(UNIVERSE), fmt)
    t = time.perf_counter()
    with open_input(path) as inp:
        for chunk in inp.reader:
            p.parse(chunk)
    return time.perf_counter() - t


def time_ingest(path: str, fmt: str, state: str) -> tuple[float, float, dict]:
    if os.path.exists(state):
        os.unlink(state)
    cmd = (f"cat {path} | {sys.executable} -m panstream ingest -u {UNIVERSE} -s {state} "
           f"-f {fmt} --json --exact-counts")  # the run's exact counts are checked below
    t = time.perf_counter()
    r = subprocess.run(cmd, shell=True, check=True, capture_output=True)
    wall = time.perf_counter() - t
    s = json.loads(r.stdout.decode().splitlines()[-1])["summary"]
    return s["seconds"], wall, s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--plain-lines", type=int, default=10_000_000)
    ap.add_argument("--clf-lines", type=int, default=3_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    tune_allocator()  # as the command does
    results = {}
    with tempfile.TemporaryDirectory() as d:
        for fmt, lines in (("plain", args.plain_lines), ("clf", args.clf_lines)):
            path = os.path.join(d, f"{fmt}.log")
            make_log(path, lines, fmt == "clf")
            size = os.path.getsize(path)
            cat = best(lambda path=path: time_cat(path), args.repeat)
            parse = best(lambda path=path, fmt=fmt: time_parser(path, fmt), args.repeat)
            runs = [time_ingest(path, fmt, os.path.join(d, "s.pst")) for _ in range(args.repeat)]
            elapsed, wall, summary = min(runs, key=lambda r: r[0])
            assert summary["lines"] == lines and summary["malformed"] == 0
            results[fmt] = {
                "lines": lines, "bytes": size, "bytes_per_line": size / lines,
                "cat_Mlines_s": lines / cat / 1e6, "cat_GB_s": size / cat / 1e9,
                "parser_Mlines_s": lines / parse / 1e6, "parser_ns_line": parse / lines * 1e9,
                "ingest_Mlines_s": lines / elapsed / 1e6, "ingest_ns_line": elapsed / lines * 1e9,
                "ingest_wall_Mlines_s": lines / wall / 1e6,
            }
            r = results[fmt]
            print(f"{fmt:5}: {lines:,} lines ({r['bytes_per_line']:.0f} B/line)  "
                  f"cat {r['cat_Mlines_s']:7.1f} M lines/s ({r['cat_GB_s']:.2f} GB/s)  "
                  f"parser {r['parser_Mlines_s']:6.1f} M lines/s ({r['parser_ns_line']:.0f} ns/line)  "
                  f"ingest from pipe {r['ingest_Mlines_s']:6.1f} M lines/s "
                  f"({r['ingest_ns_line']:.0f} ns/line; {r['ingest_wall_Mlines_s']:.1f} with start-up)",
                  flush=True)
    print(json.dumps({"nproc": os.cpu_count(), "results": results}))


if __name__ == "__main__":
    main()
