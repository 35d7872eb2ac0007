"""Event-time windows against plain ingest, as ratios in the same run (run by hand).

    python bench/bench_windows.py [--lines 2000000] [--repeat 3]

Writes a synthetic week of combined-format lines (NumPy PCG64: synthetic data only; times sorted
with up to 50 minutes of disorder, as in tests/windows/weeklog.py), then measures, best of
``--repeat``, in-process over the same chunks the command reads:

* ``ingest``: :class:`panstream.sources.ingest.Ingestor`, one table, no windows (the baseline);
* ``times``: :func:`panstream.windows.eventtime.times` alone (the CLF time of every line);
* ``daily`` / ``hourly``: :class:`panstream.sources.windowed.WindowedIngestor`, event time, a replay of the
  declared week (``WindowSchedule.replay``: every window released at the end of the input).

Then, per timed format beyond CLF (``--format-lines`` lines of tests/logsamples.py, in
1 MiB chunks): the time of every line (:class:`panstream.windows.eventtime.TimeReader`) against parsing
its address (:class:`panstream.inputs.parser.LineParser`) in the same run.

Prints lines/s and each one's time relative to the baseline (the machine is shared and noisy:
compare ratios, not absolute numbers).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from panstream import estimators
from panstream.inputs.parser import Format, LineParser, tune_allocator
from panstream.sources import open_input
from panstream.sources.ingest import Ingestor, Input
from panstream.sources.windowed import WindowedIngestor
from panstream.universe import Universe
from panstream.windows import WindowSchedule
from panstream.windows.eventtime import TimeReader, lines_and_times, times

# The synthetic samples live in the test tree (not in panstream/: they use NumPy's generator).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from logsamples import GENERATORS, generate  # noqa: E402

UNIVERSE = "ipv4:10.0.0.0/16"
START = int(dt.datetime(2026, 11, 16, tzinfo=dt.timezone.utc).timestamp())
MONTHS = np.array([b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep",
                   b"Oct", b"Nov", b"Dec"])


def make_log(path: str, lines: int) -> None:
    rng = np.random.default_rng(2026)
    t = np.sort(START + rng.integers(0, 7 * 86400, lines) + rng.integers(0, 3000, lines)) \
        - rng.integers(0, 3000, lines)
    cells = rng.integers(0, 1 << 16, lines)
    with open(path, "w") as f:
        for lo in range(0, lines, 100_000):
            part = []
            for ti, c in zip(t[lo:lo + 100_000].tolist(), cells[lo:lo + 100_000].tolist(),
                             strict=True):
                d = dt.datetime.fromtimestamp(ti, dt.timezone.utc)
                part.append(f'10.0.{c >> 8}.{c & 255} - - [{d:%d/%b/%Y:%H:%M:%S} +0000] '
                            f'"GET /index.html HTTP/1.1" 200 2326 "-" "Mozilla/5.0"\n')
            f.write("".join(part))


def _run(path: str, what: str) -> float:
    u = Universe.parse(UNIVERSE)
    t0 = time.perf_counter()
    with open_input(path) as f:
        inp = Input(path, f.reader, f.position)
        if what == "ingest":
            Ingestor(estimators.new("density", u, 1.0), Format("clf")).run([inp])
        elif what == "times":
            for chunk in f.reader:
                times(chunk, "clf")
        else:
            size = 86400 if what == "daily" else 3600
            week = WindowSchedule.replay(size, START, START + 7 * 86400)  # the declared week
            WindowedIngestor(lambda: estimators.new("density", u, 1.0, budget=0.5), u,
                             Format("clf"), size, release_epsilon=0.5, schedule=week
                             ).run([inp])
    return time.perf_counter() - t0


def _chunks(data: bytes, size: int = 1 << 20) -> list[bytes]:
    out, lo = [], 0
    while lo < len(data):
        hi = data.rfind(b"\n", lo, lo + size) + 1 if lo + size < len(data) else len(data)
        out.append(data[lo:hi])
        lo = hi
    return out


def bench_formats(lines: int, repeat: int) -> dict[str, dict[str, float]]:
    """Event time per format against the address parse of the same chunks (best of ``repeat``)."""
    u = Universe.parse(UNIVERSE)
    out = {}
    for name in ("caddy", "gcp", "envoy", "cloudfront", "zeek", "alb", "elb"):
        fmt = GENERATORS[name][1]
        chunks = _chunks(generate(name, lines=lines, distinct=5000).data)
        best = {"parse": float("inf"), "times": float("inf")}
        for _ in range(repeat):
            t0 = time.perf_counter()
            p = LineParser(u, fmt)
            for c in chunks:
                p.parse(c)
            t1 = time.perf_counter()
            r = TimeReader(fmt)
            for c in chunks:
                lines_and_times(c, fmt, r)
            t2 = time.perf_counter()
            best["parse"] = min(best["parse"], t1 - t0)
            best["times"] = min(best["times"], t2 - t1)
        out[name] = {"times_lines_per_second": lines / best["times"],
                     "parse_lines_per_second": lines / best["parse"],
                     "times_vs_parse": best["times"] / best["parse"]}
        print(f"{name:<10} times {lines / best['times'] / 1e6:6.2f} M lines/s  "
              f"parse {lines / best['parse'] / 1e6:6.2f} M lines/s  "
              f"{best['times'] / best['parse']:5.2f} x the time of the parse")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--format-lines", type=int, default=200_000)
    args = ap.parse_args()
    tune_allocator()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "week.log")
        make_log(path, args.lines)
        best = {}
        for what in ("ingest", "times", "daily", "hourly"):
            best[what] = min(_run(path, what) for _ in range(args.repeat))
        base = best["ingest"]
        out = {w: {"seconds": s, "lines_per_second": args.lines / s, "vs_ingest": s / base}
               for w, s in best.items()}
        for w, r in out.items():
            print(f"{w:<8} {r['lines_per_second'] / 1e6:6.2f} M lines/s  "
                  f"{r['vs_ingest']:5.2f} x the time of plain ingest")
        formats = bench_formats(args.format_lines, args.repeat)
        print(json.dumps({"lines": args.lines, "results": out, "formats": formats}))


if __name__ == "__main__":
    main()
