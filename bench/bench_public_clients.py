#!/usr/bin/env python3
"""Ingest of public clients: the bit table against ``hashed-ip:M`` and the sketch, in one run.

    python bench/bench_public_clients.py [--lines 1000000] [--clients 150000] [--repeat 3]

One synthetic Apache combined log (``--lines`` lines, clients drawn uniformly from a pool of
``--clients`` public IPv4 addresses; NumPy PCG64, synthetic data only) is ingested by three
paths, interleaved repeat by repeat (best of ``--repeat``), so a noisy neighbour hits them alike:

* ``table``: the bit table over ``ipv4:0.0.0.0/0`` (every public client is in it; 512 MiB) and
  over ``ipv4:10.0.0.0/8`` (the issue's baseline: the same lines, all *outside*, never applied);
* ``hashed-ip``: ``-u hashed-ip:262144``;
* ``sketch``: ``--estimator sketch`` (``sketch:4096x24:ip``, Presto's hash).

Two measures per path:

* **whole process**: ``python -m panstream ingest -f clf -s STATE FILE`` from start to exit
  (interpreter start-up, imports, table creation, parse, update, final save);
* **in process**: :class:`panstream.sources.ingest.Ingestor` over the same file (parse and update only; the
  estimator is built before the clock starts).

It prints lines/s and each path's ratio to the bit table's (``ipv4:10.0.0.0/8``, the issue's
reference, and ``ipv4:0.0.0.0/0``), and writes ``bench/results/public_clients.md``. The issue's
target: hashed-ip and the sketch at least 0.5x the bit table.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import panstream as ps  # noqa: E402
from panstream.demo import format_plain  # noqa: E402
from panstream.inputs.parser import Format, tune_allocator  # noqa: E402
from panstream.sources import open_input  # noqa: E402
from panstream.sources.ingest import Ingestor, Input  # noqa: E402

CLF_SUFFIX = (b' - - [10/Oct/2023:13:55:36 +0000] "GET /index.html HTTP/1.1" 200 2326 '
              b'"https://example.com/start.html" "Mozilla/5.0 (X11; Linux x86_64)"\n')

#: (label, ingest options, how to build the estimator in process)
PATHS = [
    ("table ipv4:10.0.0.0/8", ["-u", "ipv4:10.0.0.0/8"],
     lambda: ps.DensityEstimator("ipv4:10.0.0.0/8", epsilon=1.0)),
    ("table ipv4:0.0.0.0/0", ["-u", "ipv4:0.0.0.0/0"],
     lambda: ps.DensityEstimator("ipv4:0.0.0.0/0", epsilon=1.0)),
    ("hashed-ip:262144", ["-u", "hashed-ip:262144"],
     lambda: ps.DensityEstimator("hashed-ip:262144", epsilon=1.0)),
    ("sketch:4096x24:ip", ["--estimator", "sketch"],
     lambda: ps.SketchEstimator(epsilon=1.0)),
]


def public_pool(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` distinct unicast addresses outside the private, loopback and reserved blocks."""
    out: set[int] = set()
    while len(out) < n:
        a = rng.integers(1 << 24, 224 << 24, size=2 * n, dtype=np.int64)
        first = a >> 24
        bad = np.isin(first, [10, 100, 127, 169, 172, 192, 198, 203])
        out.update(a[~bad].tolist())
    return np.array(sorted(out)[:n], dtype=np.uint32)


def make_log(path: str, lines: int, clients: int) -> None:
    rng = np.random.default_rng(20261126)  # synthetic data only, never a privacy draw
    pool = public_pool(clients, rng)
    with open(path, "wb") as f:
        for start in range(0, lines, 250_000):
            n = min(250_000, lines - start)
            a = pool[rng.integers(0, clients, size=n)]
            f.write(format_plain(a).replace(b"\n", CLF_SUFFIX))


def whole_process(path: str, opts: list[str], state: str) -> float:
    if os.path.exists(state):
        os.unlink(state)
    cmd = [sys.executable, "-m", "panstream", "ingest", *opts, "-f", "clf", "--keep-going", "-s", state,
           path]
    env = dict(os.environ, PYTHONPATH=str(HERE.parent))
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env=env)
    return time.perf_counter() - t


def in_process(path: str, make: object) -> float:
    est = make()  # type: ignore[operator]
    ing = Ingestor(est, Format("clf"), check=False)
    with open_input(path) as inp:
        t = time.perf_counter()
        ing.run([Input(path, inp.reader)])
        return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--clients", type=int, default=150_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results" / "public_clients.md"))
    args = ap.parse_args()
    tune_allocator()
    whole: dict[str, list[float]] = {p[0]: [] for p in PATHS}
    inproc: dict[str, list[float]] = {p[0]: [] for p in PATHS}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "access.log")
        make_log(path, args.lines, args.clients)
        for _ in range(args.repeat):
            for label, opts, make in PATHS:
                whole[label].append(whole_process(path, opts, os.path.join(d, "s.pst")))
                inproc[label].append(in_process(path, make))
    ref, full = PATHS[0][0], PATHS[1][0]
    rows = []
    for label, _, _ in PATHS:
        w, i = min(whole[label]), min(inproc[label])
        rows.append((label, w, args.lines / w, min(whole[ref]) / w, min(whole[full]) / w,
                     i, args.lines / i, min(inproc[ref]) / i, min(inproc[full]) / i))
    head = ("| path | whole process s | lines/s | x table /8 | x table /0 | in process s | lines/s "
            "| x table /8 | x table /0 |")
    md = [f"# Public clients: {args.lines:,} CLF lines of {args.clients:,} public IPv4 clients",
          "",
          f"`python bench/bench_public_clients.py --lines {args.lines} --clients {args.clients} "
          f"--repeat {args.repeat}` (best of {args.repeat}, paths interleaved), "
          f"{platform.python_implementation()} {platform.python_version()}, "
          f"NumPy {np.__version__}, {os.cpu_count()} CPUs (shared), load {os.getloadavg()[0]:.1f}.",
          "", head, "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r[0]} | {r[1]:.2f} | {r[2] / 1e6:.2f} M | {r[3]:.2f} | {r[4]:.2f} "
                  f"| {r[5]:.2f} | {r[6] / 1e6:.2f} M | {r[7]:.2f} | {r[8]:.2f} |")
    text = "\n".join(md) + "\n"
    print(text)
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
