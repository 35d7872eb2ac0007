#!/usr/bin/env python3
"""Side-by-side benchmark of panstream's update loop (issue 7).

One command, one process, one run, the same items for every contender:

* ``panstream``: ``DensityEstimator.update_indices`` with secure randomness (OS CSPRNG), the real
  code path including the validation and the wipe of the index buffer;
* ``numpy-write`` (packed layout, when the C kernel is built; issue 38): the same secure loop with
  the packed write forced onto its NumPy fallback (what ``PANSTREAM_NATIVE=0`` or a missing
  compiler gives), so the kernel and the fallback are measured in one run;
* ``INSECURE pcg64``: the very same loop with its Bernoulli draws taken from NumPy PCG64 instead of
  the OS CSPRNG. NOT PRIVATE: a generator whose state can be read replays every draw. It exists only
  here, to show what secure randomness costs;
* ``limit``: a bare NumPy scatter ``t[idx] = v`` of precomputed values into a byte table of the same
  memory size as panstream's table (``size`` bytes, or ``size / 8`` bytes with ``idx >> 3`` for the
  packed 2**32 layout);
* ``floor`` (packed layout only, issue 38): a bare gather/OR/scatter of the bit ``1 << (i % 8)`` into
  byte ``i // 8`` of a packed table of the same layout, for the same indices, with no randomness
  (``w = t[b]; w |= m; t[b] = w``, ``b`` and ``m`` precomputed): the memory-bound floor of updating
  the packed layout from NumPy. It ignores two different cells of one byte in one batch (a lost
  update), which a correct update cannot;
* peers (no batch update exists, so they take a prebuilt Python list, their fastest path): Apache
  DataSketches HLL (lg_k=12, HLL_4) and CPC (lg_k=11), and a Python ``set`` (exact distinct count).

Contenders are interleaved repeat by repeat and the median is reported, so a noisy neighbour hits
them alike. For the 2**32-cell universe a child process also measures init time, peak resident
memory (``ru_maxrss``) after updates and, if available, snapshot save/load time.

Usage::

    python bench/bench_update.py            # full run (a few minutes)
    python bench/bench_update.py --quick    # smoke run (under a minute)

Results are printed and written as Markdown to ``bench/results/latest.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from _common import cpu_model, git_commit, loadavg, make_items

import panstream as ps
import panstream.estimators.bittable as _table_mod
import panstream.randomness as _rand_mod

HERE = Path(__file__).resolve().parent
DATA_SEED = 20240607  # synthetic items only; never used for privacy draws


# ----------------------------------------------------------------------------- the insecure baseline
@contextlib.contextmanager
def insecure_pcg64_draws() -> Iterator[None]:
    """Temporarily feed panstream's randomness with NumPy PCG64 bytes instead of the OS CSPRNG.

    INSECURE: a benchmark baseline only. Every random byte panstream reads goes through
    ``panstream.randomness.fill_secure``; swapping that one function keeps the rest of the loop
    (threads, comparisons, scatter) identical, so the difference is the cost of secure randomness.
    """
    bitgen = np.random.PCG64(DATA_SEED)
    lock = threading.Lock()
    original = _rand_mod.fill_secure

    def pcg64_fill(buf: np.ndarray) -> np.ndarray:
        flat = buf.reshape(-1).view(np.uint8)
        n8 = flat.size // 8
        with lock:
            if n8:
                flat[: n8 * 8].view(np.uint64)[:] = bitgen.random_raw(n8)
            if flat.size % 8:
                flat[n8 * 8 :] = bitgen.random_raw(1).view(np.uint8)[: flat.size % 8]
        return buf

    _rand_mod.fill_secure = pcg64_fill
    try:
        yield
    finally:
        _rand_mod.fill_secure = original


@contextlib.contextmanager
def numpy_packed_write() -> Iterator[None]:
    """Temporarily write the packed table with the NumPy passes instead of the C kernel."""
    original = _table_mod._native
    _table_mod._native = None
    try:
        yield
    finally:
        _table_mod._native = original


# ----------------------------------------------------------------------------- timing
def run_panstream(est: ps.DensityEstimator, items: np.ndarray, batch: int, buf: np.ndarray,
                  cpu: list[float] | None = None) -> float:
    """Seconds spent in ``update_indices`` over all batches (copying each batch into ``buf`` first,
    outside the timed region, because update_indices wipes the buffer it was given). With ``cpu``,
    the process CPU seconds of the same regions (both threads) are appended to it."""
    total = 0.0
    spent = 0.0
    for s in range(0, items.size, batch):
        b = buf[: min(batch, items.size - s)]
        np.copyto(b, items[s : s + b.size])
        c0 = time.process_time()
        t0 = time.perf_counter()
        est.update_indices(b)
        total += time.perf_counter() - t0
        spent += time.process_time() - c0
    if cpu is not None:
        cpu.append(spent)
    return total


def run_scatter(t: np.ndarray, items: np.ndarray, batch: int, vals: np.ndarray) -> float:
    t0 = time.perf_counter()
    for s in range(0, items.size, batch):
        b = items[s : s + batch]
        t[b] = vals[: b.size]
    return time.perf_counter() - t0


def run_packed_floor(t: np.ndarray, byte_idx: np.ndarray, masks: np.ndarray, batch: int,
                     cpu: list[float]) -> float:
    """A bare gather/OR/scatter of precomputed bit masks into the packed table, batch by batch
    (wall seconds returned, CPU seconds appended to ``cpu``)."""
    c0 = time.process_time()
    t0 = time.perf_counter()
    for s in range(0, byte_idx.size, batch):
        b = byte_idx[s : s + batch]
        w = t[b]
        w |= masks[s : s + batch]
        t[b] = w
    wall = time.perf_counter() - t0
    cpu.append(time.process_time() - c0)
    return wall


def run_peer(make: Callable[[], object], lst: list[int]) -> float:
    sk = make()
    if isinstance(sk, set):
        t0 = time.perf_counter()
        sk.update(lst)
        return time.perf_counter() - t0
    upd = sk.update  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    for x in lst:
        upd(x)
    return time.perf_counter() - t0


@dataclass
class Row:
    size_log2: int
    dist: str
    batch_log2: int
    layout: str
    rates: dict[str, float] = field(default_factory=dict)  # items/s, median of repeats
    cpu_rates: dict[str, float] = field(default_factory=dict)  # items per CPU second (packed rows)


def peers() -> dict[str, Callable[[], object]]:
    out: dict[str, Callable[[], object]] = {"set": set}
    try:
        import datasketches as ds
    except ImportError:
        print("datasketches not installed (pip install -e '.[bench]'): peers skipped", file=sys.stderr)
        return out
    out["ds-hll"] = lambda: ds.hll_sketch(12, ds.tgt_hll_type.HLL_4)
    out["ds-cpc"] = lambda: ds.cpc_sketch(11)
    return out


def bench_config(
    size_log2: int,
    dist: str,
    batches: list[int],
    n_items: int,
    repeats: int,
    peer_items: int,
    peer_makers: dict[str, Callable[[], object]],
) -> list[Row]:
    size = 1 << size_log2
    items = make_items(size, dist, n_items, DATA_SEED)
    est = ps.DensityEstimator(ps.Universe.range(size), epsilon=1.0)
    packed = est.layout == "packed"
    limit_table = np.ones((size + 7) // 8 if packed else size, dtype=np.uint8)  # touched: no faults
    limit_items = items >> 3 if packed else items
    vals = np.ones(1 << max(batches), dtype=np.uint8)
    masks = np.left_shift(1, (items & 7).astype(np.uint8), dtype=np.uint8) if packed else None
    buf = np.empty(1 << max(batches), dtype=np.intp)
    rows = []
    peer_rates: dict[str, float] = {}
    if peer_makers:
        lst = items[:peer_items].tolist()
        for name, make in peer_makers.items():
            ts = [run_peer(make, lst) for _ in range(repeats)]
            peer_rates[name] = len(lst) / statistics.median(ts)
        del lst
    for bl in batches:
        batch = 1 << bl
        ts: dict[str, list[float]] = {"panstream": [], "insecure-pcg64": [], "limit": []}
        cpu: dict[str, list[float]] = {"panstream": [], "floor": []}
        if masks is not None:
            ts["floor"] = []
            if getattr(_table_mod, "_native", None) is not None:  # (a tree without the kernel: none)
                ts["numpy-write"] = []
        for _ in range(repeats):
            ts["limit"].append(run_scatter(limit_table, limit_items, batch, vals))
            if masks is not None:
                ts["floor"].append(run_packed_floor(limit_table, limit_items, masks, batch, cpu["floor"]))
            ts["panstream"].append(run_panstream(est, items, batch, buf, cpu["panstream"]))
            if "numpy-write" in ts:
                with numpy_packed_write():
                    ts["numpy-write"].append(run_panstream(est, items, batch, buf))
            with insecure_pcg64_draws():
                ts["insecure-pcg64"].append(run_panstream(est, items, batch, buf))
        row = Row(size_log2, dist, bl, est.layout)
        row.rates = {k: n_items / statistics.median(v) for k, v in ts.items()}
        if masks is not None:  # items per CPU second, both of panstream's threads counted
            row.cpu_rates = {k: n_items / statistics.median(v) for k, v in cpu.items()}
        row.rates.update(peer_rates)
        rows.append(row)
        print(format_row(row), flush=True)
    est.wipe()
    return rows


# ----------------------------------------------------------------------------- 2**32 resources
_CHILD = r"""
import json, os, resource, sys, tempfile, time
import numpy as np
import panstream as ps
def rss_mib(): return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
def hwm_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")
out = {"rss_after_import_mib": rss_mib()}
t0 = time.perf_counter()
est = ps.DensityEstimator(ps.Universe.ipv4("0.0.0.0/0"), epsilon=1.0)
out["init_s"] = time.perf_counter() - t0
out["layout"] = est.layout
out["rss_after_init_mib"] = rss_mib()
batch = 1 << 20
n_batches = int(sys.argv[1])
gen = np.random.default_rng(1)  # synthetic items only
buf = np.empty(batch, dtype=np.intp)
spent = 0.0
for _ in range(n_batches):
    buf[:] = gen.integers(0, 1 << 32, size=batch, dtype=np.intp)
    t0 = time.perf_counter()
    est.update_indices(buf)
    spent += time.perf_counter() - t0
out["update_items_per_s"] = n_batches * batch / spent
out["rss_after_updates_mib"] = rss_mib()
out["vmhwm_after_updates_mib"] = hwm_mib()
cls = type(est)
if hasattr(est, "save") and hasattr(cls, "load"):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "state")
        t0 = time.perf_counter(); est.save(path); out["save_s"] = time.perf_counter() - t0
        out["rss_after_save_mib"] = rss_mib()
        del est
        t0 = time.perf_counter(); est = cls.load(path); out["load_s"] = time.perf_counter() - t0
        out["rss_after_load_mib"] = rss_mib()
        out["vmhwm_after_load_mib"] = hwm_mib()
print(json.dumps(out))
"""


def bench_2_32(n_batches: int) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(n_batches)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- reporting
COLS = ["panstream", "numpy-write", "insecure-pcg64", "limit", "floor", "ds-hll", "ds-cpc", "set"]


def fmt_rate(r: float | None) -> str:
    return "-" if r is None else f"{r / 1e6:.1f}"


def ratio(a: float | None, b: float | None) -> str:
    return "-" if not a or not b else f"{a / b:.2f}"


def header() -> list[str]:
    return (
        ["cells", "items", "batch", "layout"]
        + [f"{c} M/s" for c in COLS]
        + ["vs limit", "vs floor", "numpy-write vs floor", "vs insecure", "vs hll", "vs cpc", "vs set"]
    )


def cells(row: Row) -> list[str]:
    r = row.rates
    p = r.get("panstream")
    return (
        [f"2^{row.size_log2}", row.dist, f"2^{row.batch_log2}", row.layout]
        + [fmt_rate(r.get(c)) for c in COLS]
        + [ratio(p, r.get(c)) for c in ("limit", "floor")]
        + [ratio(r.get("numpy-write"), r.get("floor"))]
        + [ratio(p, r.get(c)) for c in ("insecure-pcg64", "ds-hll", "ds-cpc", "set")]
    )


def format_row(row: Row) -> str:
    return "  ".join(f"{c:>9}" for c in cells(row))


def targets(rows: list[Row], big: dict[str, object] | None) -> list[str]:
    """The issue-7 targets checked against this run (benchmarks, not tests: nothing fails)."""
    out = []

    def mark(ok: bool) -> str:
        return "met" if ok else "NOT met"

    for r in rows:
        if r.size_log2 == 24 and r.batch_log2 == 20:
            q = r.rates["panstream"] / r.rates["limit"]
            out.append(
                f"2^24 cells, batch 2^20, {r.dist}: {q:.2f} x the bare scatter (>= 0.5): {mark(q >= 0.5)}"
            )
        if r.size_log2 == 32 and r.batch_log2 == 20:
            v = r.rates["panstream"] / 1e6
            out.append(f"2^32 cells, batch 2^20, {r.dist}: {v:.1f} M items/s (>= 30): {mark(v >= 30)}")
            if "floor" in r.rates:
                q = r.rates["panstream"] / r.rates["floor"]
                out.append(f"2^32 cells, batch 2^20, {r.dist}: {q:.2f} x the packed floor (>= 0.8, "
                           f"issue 38): {mark(q >= 0.8)}")
                c = r.cpu_rates["panstream"] / r.cpu_rates["floor"]
                out.append(f"2^32 cells, batch 2^20, {r.dist}: {c:.2f} x the packed floor in items per "
                           "CPU second (both threads; what load does not skew)")
            if "numpy-write" in r.rates:
                q = r.rates["numpy-write"] / r.rates["floor"]
                out.append(f"2^32 cells, batch 2^20, {r.dist}: the NumPy fallback of the packed write "
                           f"at {q:.2f} x the packed floor")
    if big and "error" not in big:
        for key, limit, unit in (
            ("vmhwm_after_updates_mib", 600, "MiB peak RSS after updates"),
            ("vmhwm_after_load_mib", 600, "MiB peak RSS after save+load"),
            ("init_s", 2, "s init"),
            ("save_s", 2, "s snapshot save"),
            ("load_s", 2, "s snapshot load"),
        ):
            val = big.get(key)
            if isinstance(val, (int, float)):
                out.append(f"2^32 cells: {val:.3g} {unit} (<= {limit}): {mark(val <= limit)}")
    return out


def machine() -> dict[str, str]:
    ds_version = "not installed"
    with contextlib.suppress(Exception):
        from importlib.metadata import version

        ds_version = version("datasketches")
    return {
        "nproc": str(os.cpu_count()),
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "datasketches": ds_version,
        "kernel": platform.release(),
        "packed write": ("C kernel" if getattr(_table_mod, "_native", None) is not None
                         else "NumPy passes (no C kernel)"),
        "panstream commit": git_commit(),
    }


def markdown(rows: list[Row], big: dict[str, object] | None, args: argparse.Namespace, elapsed: float) -> str:
    m = machine()
    lines = [
        "# panstream update-loop benchmark",
        "",
        f"Command: `{' '.join(['python bench/bench_update.py', *args.argv])}` "
        f"({elapsed:.0f} s). Machine: {m['nproc']} CPUs, {m['cpu']}, Linux {m['kernel']}; "
        f"Python {m['python']}, NumPy {m['numpy']}, datasketches {m['datasketches']}; "
        f"panstream {m['panstream commit']}, packed write: {m['packed write']}. "
        f"Load average: {args.load}.",
        "",
        f"Items per configuration: {args.items:,} for the table updates (median of "
        f"{args.repeats} interleaved repeats), {args.peer_items:,} for the peers (prebuilt "
        "Python list, one `update` call per item; `set.update(list)` for the set). "
        "Throughput in millions of items per second; ratios are panstream (secure) over the "
        "column named. `insecure-pcg64` is the same loop fed by NumPy PCG64: NOT PRIVATE, a "
        "baseline only. `limit` is a bare `t[idx] = v` scatter of precomputed values into a "
        "byte table of the same memory size; `floor` (packed layout) a bare gather/OR/scatter of "
        "precomputed bit masks into a packed table of the same layout, same indices, no randomness; "
        "`numpy-write` (packed layout) panstream's secure loop with the packed write on its NumPy "
        "fallback instead of the C kernel.",
        "",
        "| " + " | ".join(header()) + " |",
        "|" + "|".join("---:" for _ in header()) + "|",
    ]
    lines += ["| " + " | ".join(cells(r)) + " |" for r in rows]
    lines += ["", "## Issue 7 and 38 targets", ""] + [f"- {t}" for t in targets(rows, big)]
    if big:
        lines += ["", "## 2^32 cells (ipv4:0.0.0.0/0, child process)", ""]
        lines += [f"- {k}: {v:.3g}" if isinstance(v, float) else f"- {k}: {v}" for k, v in big.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small smoke run (under a minute)")
    ap.add_argument("--sizes", default="16,20,24,28,32", help="log2 table sizes")
    ap.add_argument("--batches", default="16,20", help="log2 batch sizes")
    ap.add_argument("--dists", default="uniform,zipf")
    ap.add_argument("--items", type=int, default=None, help="items per configuration")
    ap.add_argument("--peer-items", type=int, default=None, help="items fed to each peer")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--no-child", action="store_true", help="skip the 2^32 init/RSS/snapshot child")
    ap.add_argument("--out", default=None,
                    help="results file (default: bench/results/latest.md; with --quick, "
                         "bench/results/quick.md, so a smoke run never replaces the full results)")
    args = ap.parse_args(argv)
    args.out = args.out or str(HERE / "results" / ("quick.md" if args.quick else "latest.md"))
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.items = args.items or (1 << 21 if args.quick else 1 << 25)
    args.peer_items = args.peer_items or (1 << 19 if args.quick else 1 << 22)
    args.repeats = args.repeats or (1 if args.quick else 5)
    sizes = [int(s) for s in args.sizes.split(",")]
    batches = [int(b) for b in args.batches.split(",")]
    dists = args.dists.split(",")
    peer_makers = {} if args.no_peers else peers()
    start = time.perf_counter()
    load_before = loadavg()
    big = None
    if 32 in sizes and not args.no_child:
        # First, while this process is small: Linux carries ru_maxrss across fork+exec.
        big = bench_2_32(4 if args.quick else 16)
        print("2^32 cells:", json.dumps(big), flush=True)
    print("  ".join(f"{h:>9}" for h in header()), flush=True)
    rows: list[Row] = []
    for sl in sizes:
        for d in dists:
            rows += bench_config(sl, d, batches, args.items, args.repeats, args.peer_items, peer_makers)
    elapsed = time.perf_counter() - start
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    args.load = f"{load_before} at start, {loadavg()} at end"
    text = markdown(rows, big, args, elapsed)
    with tempfile.NamedTemporaryFile("w", dir=out.parent, delete=False, suffix=".tmp") as f:
        f.write(text)
    os.replace(f.name, out)
    print(f"wrote {out} ({elapsed:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
