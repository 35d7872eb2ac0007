#!/usr/bin/env python3
"""Ingest of public clients: the bit table against ``hashed-ip:M`` and the sketch, in one run.

    python bench/bench_public_clients.py [--lines 1000000] [--clients 150000] [--repeat 3]
                                         [--no-ipv4] [--stat median]

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

**IPv6** (issue 38; ``--ipv6``, on by default, ``--no-ipv6`` skips it): a second log of the same
number of lines whose ``--clients`` clients are IPv6 addresses in ``2a01:4f8::/40`` (each in its
own /64, random interface identifiers), the *same lines mapped to IPv4* (client ``i``'s /64 below
the /40 is its address in ``46.0.0.0/8``: same cells, same truth), and a *mixed* log (even lines
from the IPv6 log, odd lines from the mapped one). Interleaved with the rest, each read by the
sketch, ``hashed-ip`` and the bit table (``ipv6:2a01:4f8::/40@64`` against ``ipv4:46.0.0.0/8``:
2**24 cells each), whole process. It prints each IPv6 path's ratio to the same path on the mapped
lines (the issue's target: the sketch and the bit table at least 0.7x), the mixed log's ratio to
the mean of its parts (1.0: as fast as its parts), and one release of each state (``release
--epsilon 1 --json``) with the truth and whether the release's interval covers it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
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
from panstream.inputs.ipv6 import format_ipv6_lines  # noqa: E402
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


#: (label, log, ingest options, how to build the estimator in process): the IPv6 section.
V6_PATHS = [
    ("sketch v6->v4", "mapped", ["--estimator", "sketch"], lambda: ps.SketchEstimator(epsilon=1.0)),
    ("sketch v6", "v6", ["--estimator", "sketch"], lambda: ps.SketchEstimator(epsilon=1.0)),
    ("sketch mixed", "mixed", ["--estimator", "sketch"], lambda: ps.SketchEstimator(epsilon=1.0)),
    ("table ipv4:46.0.0.0/8 v6->v4", "mapped", ["-u", "ipv4:46.0.0.0/8"],
     lambda: ps.DensityEstimator("ipv4:46.0.0.0/8", epsilon=1.0)),
    ("table ipv6:2a01:4f8::/40@64 v6", "v6", ["-u", "ipv6:2a01:4f8::/40@64"],
     lambda: ps.DensityEstimator("ipv6:2a01:4f8::/40@64", epsilon=1.0)),
    ("hashed-ip v6->v4", "mapped", ["-u", "hashed-ip:262144"],
     lambda: ps.DensityEstimator("hashed-ip:262144", epsilon=1.0)),
    ("hashed-ip v6", "v6", ["-u", "hashed-ip:262144"],
     lambda: ps.DensityEstimator("hashed-ip:262144", epsilon=1.0)),
    ("hashed-ip mixed", "mixed", ["-u", "hashed-ip:262144"],
     lambda: ps.DensityEstimator("hashed-ip:262144", epsilon=1.0)),
]
#: (IPv6 path, its IPv4 counterpart on the mapped lines)
V6_PAIRS = [("sketch v6", "sketch v6->v4"), ("table ipv6:2a01:4f8::/40@64 v6",
                                            "table ipv4:46.0.0.0/8 v6->v4"),
            ("hashed-ip v6", "hashed-ip v6->v4")]
#: (mixed path, its parts)
MIXED = [("sketch mixed", "sketch v6", "sketch v6->v4"),
         ("hashed-ip mixed", "hashed-ip v6", "hashed-ip v6->v4")]


def make_v6_logs(d: str, lines: int, clients: int) -> tuple[dict[str, str], dict[str, int]]:
    """The IPv6 log, the same lines mapped to IPv4, and the mixed log; their true distinct
    counts (clients and /64s coincide: one client per /64)."""
    rng = np.random.default_rng(20261129)  # synthetic data only, never a privacy draw
    sub = rng.choice(1 << 24, size=clients, replace=False).astype(np.uint64)
    hi = np.uint64(0x2A0104F8 << 32) | sub  # 2a01:4f8::/40, the client's /64 below it
    lo = rng.integers(1, 1 << 63, size=clients, dtype=np.int64).astype(np.uint64)
    v4 = (np.uint32(46) << np.uint32(24)) | sub.astype(np.uint32)
    paths = {k: os.path.join(d, f"{k}.log") for k in ("v6", "mapped", "mixed")}
    seen = {k: np.zeros(clients, dtype=bool) for k in ("v6", "mapped", "mixed6", "mixed4")}
    with open(paths["v6"], "wb") as f6, open(paths["mapped"], "wb") as f4, \
            open(paths["mixed"], "wb") as fm:
        for start in range(0, lines, 250_000):
            n = min(250_000, lines - start)
            pick = rng.integers(0, clients, size=n)
            t6 = format_ipv6_lines(hi[pick], lo[pick]).replace(b"\n", CLF_SUFFIX)
            t4 = format_plain(v4[pick]).replace(b"\n", CLF_SUFFIX)
            f6.write(t6)
            f4.write(t4)
            l6, l4 = t6.split(b"\n")[:-1], t4.split(b"\n")[:-1]
            odd = (start + np.arange(n)) % 2 == 1
            fm.write(b"".join(b + b"\n" for b in np.where(odd, l4, l6).tolist()))
            seen["v6"][pick] = seen["mapped"][pick] = True
            seen["mixed6"][pick[~odd]] = True
            seen["mixed4"][pick[odd]] = True
    truth = {"v6": int(seen["v6"].sum()), "mapped": int(seen["mapped"].sum()),
             "mixed": int(seen["mixed6"].sum() + seen["mixed4"].sum())}
    return paths, truth


def release(state: str) -> dict:
    cmd = [sys.executable, "-m", "panstream", "release", "-s", state, "--epsilon", "1", "--json"]
    env = dict(os.environ, PYTHONPATH=str(HERE.parent))
    out = subprocess.run(cmd, check=True, capture_output=True, env=env).stdout
    return json.loads(out)


#: How a path's repeats are summarized (``--stat``: ``min`` or ``statistics.median``).
STAT = min
#: CPU seconds (user + system) of every whole-process run, by label: on a shared machine the
#: wall clock also counts the neighbours, the CPU time much less.
CPU: dict[str, list[float]] = {}


def whole_process(path: str, opts: list[str], state: str, label: str = "") -> float:
    if os.path.exists(state):
        os.unlink(state)
    cmd = [sys.executable, "-m", "panstream", "ingest", *opts, "-f", "clf", "--keep-going", "-s", state,
           path]
    env = dict(os.environ, PYTHONPATH=str(HERE.parent))
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env=env)
    wall = time.perf_counter() - t
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    CPU.setdefault(label, []).append(cpu)
    return wall


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
    ap.add_argument("--ipv6", action=argparse.BooleanOptionalAction, default=True,
                    help="also the IPv6, mapped and mixed logs (issue 38)")
    ap.add_argument("--ipv4", action=argparse.BooleanOptionalAction, default=True,
                    help="the IPv4 paths against the bit table (--no-ipv4: only the IPv6 section)")
    ap.add_argument("--stat", choices=("best", "median"), default="best",
                    help="each path's best (default) or median time over the repeats")
    ap.add_argument("--out", default=str(HERE / "results" / "public_clients.md"))
    args = ap.parse_args()
    tune_allocator()
    whole: dict[str, list[float]] = {p[0]: [] for p in PATHS + V6_PATHS}
    inproc: dict[str, list[float]] = {p[0]: [] for p in PATHS + V6_PATHS}
    released: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "access.log")
        if args.ipv4:
            make_log(path, args.lines, args.clients)
        logs, truth = make_v6_logs(d, args.lines, args.clients) if args.ipv6 else ({}, {})
        for _ in range(args.repeat):
            for label, opts, make in PATHS if args.ipv4 else []:
                whole[label].append(whole_process(path, opts, os.path.join(d, "s.pst")))
                inproc[label].append(in_process(path, make))
            for label, log, opts, make in V6_PATHS if args.ipv6 else []:
                state = os.path.join(d, f"{len(released)}.pst")
                whole[label].append(whole_process(logs[log], opts, state, label))
                inproc[label].append(in_process(logs[log], make))
                if label not in released:
                    released[label] = {"state": state, "truth": truth[log]}
        for r in released.values():
            r.update(release(r.pop("state")))
    global STAT
    STAT = statistics.median if args.stat == "median" else min
    ref, full = PATHS[0][0], PATHS[1][0]
    rows = []
    for label, _, _ in PATHS if args.ipv4 else []:
        w, i = STAT(whole[label]), STAT(inproc[label])
        rows.append((label, w, args.lines / w, STAT(whole[ref]) / w, STAT(whole[full]) / w,
                     i, args.lines / i, STAT(inproc[ref]) / i, STAT(inproc[full]) / i))
    head = ("| path | whole process s | lines/s | x table /8 | x table /0 | in process s | lines/s "
            "| x table /8 | x table /0 |")
    md = [f"# Public clients: {args.lines:,} CLF lines of {args.clients:,} public IPv4 clients",
          "",
          f"`python bench/bench_public_clients.py --lines {args.lines} --clients {args.clients} "
          f"--repeat {args.repeat}{'' if args.ipv4 else ' --no-ipv4'}"
          f"{'' if args.stat == 'best' else ' --stat median'}` ({args.stat} of {args.repeat}, "
          "paths interleaved), "
          f"{platform.python_implementation()} {platform.python_version()}, "
          f"NumPy {np.__version__}, {os.cpu_count()} CPUs (shared), load {os.getloadavg()[0]:.1f}."
          ] + (["", head, "|---|---|---|---|---|---|---|---|---|"] if rows else [])
    for r in rows:
        md.append(f"| {r[0]} | {r[1]:.2f} | {r[2] / 1e6:.2f} M | {r[3]:.2f} | {r[4]:.2f} "
                  f"| {r[5]:.2f} | {r[6] / 1e6:.2f} M | {r[7]:.2f} | {r[8]:.2f} |")
    if args.ipv6:
        md += v6_report(args, whole, inproc, released)
    text = "\n".join(md) + "\n"
    print(text)
    Path(args.out).write_text(text)


def v6_report(args: argparse.Namespace, whole: dict[str, list[float]],
              inproc: dict[str, list[float]], released: dict[str, dict]) -> list[str]:
    md = ["", f"## IPv6 (issue 38): {args.lines:,} CLF lines of {args.clients:,} clients in "
          "2a01:4f8::/40, the same lines mapped to IPv4 (46.0.0.0/8), and mixed", "",
          "| path | whole process s | CPU s | in process s | lines/s | release (95 %) | truth "
          "| covered |", "|---|---|---|---|---|---|---|---|"]
    for label, _, _, _ in V6_PATHS:
        w, c, i, r = STAT(whole[label]), STAT(CPU[label]), STAT(inproc[label]), released[label]
        ok = r["low"] <= r["truth"] <= r["high"]
        md.append(f"| {label} | {w:.2f} | {c:.2f} | {i:.2f} "
                  f"| {args.lines / i / 1e6:.2f} M | {r['distinct']:,.0f} [{r['low']:,.0f}, "
                  f"{r['high']:,.0f}] | {r['truth']:,} | {'yes' if ok else 'NO'} |")
    md += ["", f"Speed ratios (the other path's {args.stat} time over this one's; 1.0: as fast):", "",
           "| IPv6 against the same lines as IPv4 | whole process | CPU | in process | target |",
           "|---|---|---|---|---|"]
    for six, four in V6_PAIRS:
        rw, rc, ri = (STAT(t[four]) / STAT(t[six]) for t in (whole, CPU, inproc))
        target = "" if six.startswith("hashed") else f">= 0.7x: {'met' if rw >= 0.7 else 'NOT met'}"
        md.append(f"| {six} / {four} | {rw:.2f}x | {rc:.2f}x | {ri:.2f}x | {target} |")
    md += ["", "| mixed against the mean of its parts | whole process | CPU | in process |",
           "|---|---|---|---|"]
    for mixed, a, b in MIXED:
        rw, rc, ri = ((STAT(t[a]) + STAT(t[b])) / 2 / STAT(t[mixed]) for t in (whole, CPU, inproc))
        md.append(f"| {mixed} | {rw:.2f}x | {rc:.2f}x | {ri:.2f}x |")
    return md


if __name__ == "__main__":
    main()
