"""What compressed input and the hashed-address universe cost, beside plain input (run by hand).

    python bench/bench_inputs.py [--lines 2000000] [--repeat 3]

Writes one combined (CLF) log of ``--lines`` lines (NumPy PCG64: synthetic data only) over public
clients, 10 % of them written as IPv6, plus its gzip, bzip2 and xz copies, then runs the real
command (``panstream ingest -f clf --exact-counts``) on each, best of ``--repeat``; lines/s come
from the elapsed time the command reports (start-up excluded). Rows, all in one run:

* ``ipv4:16.0.0.0/4`` on the plain file (the vectorized parser; most clients and the IPv6 lines
  are outside, which costs the parser nothing): baseline;
* ``hashed-ip:131072`` on the plain file, the ``.gz`` file, ``cat x.gz |`` (stdin, recognised by its
  magic bytes), the ``.bz2`` and the ``.xz`` file.

Ratios are against the baseline of the same run (the machine is shared and noisy).
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import json
import lzma
import os
import subprocess
import sys
import tempfile

import numpy as np

from panstream.demo import format_plain

SUFFIX = (b' - - [10/Oct/2023:13:55:36 +0000] "GET /index.html HTTP/1.1" 200 2326 '
          b'"https://example.com/start.html" "Mozilla/5.0 (X11; Linux x86_64)"\n')


def make_log(path: str, lines: int) -> None:
    rng = np.random.default_rng(2020)  # synthetic data only
    v4 = format_plain(rng.integers(1 << 24, 1 << 31, size=lines).astype(np.uint32)).split(b"\n")
    out = []
    for i, a in enumerate(v4[:lines]):
        if i % 10 == 0:
            a = b"2a00:%x::%x" % (i % 65536, i)
        out.append(a + SUFFIX)
    with open(path, "wb") as f:
        f.write(b"".join(out))


def run(cmd: str) -> float:
    """Lines per second the command reports (its own elapsed time)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PANSTREAM_")}
    r = subprocess.run(cmd, shell=True, capture_output=True, env=env, check=True)
    s = json.loads(r.stdout.decode().splitlines()[-1])["summary"]
    return float(s["lines_per_second"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    py = f"{sys.executable} -m panstream ingest -f clf --exact-counts --json"
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "access.log")
        make_log(log, a.lines)
        with open(log, "rb") as fh:
            data = fh.read()
        for ext, comp in ((".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress)):
            with open(log + ext, "wb") as f:
                f.write(comp(data))
        del data
        rows = [
            ("ipv4:16.0.0.0/4, plain file (baseline)", f"{py} -u ipv4:16.0.0.0/4 {log}"),
            ("hashed-ip:131072, plain file", f"{py} -u hashed-ip:131072 {log}"),
            ("hashed-ip:131072, .gz file", f"{py} -u hashed-ip:131072 {log}.gz"),
            ("hashed-ip:131072, cat x.gz into stdin", f"cat {log}.gz | {py} -u hashed-ip:131072"),
            ("hashed-ip:131072, .bz2 file", f"{py} -u hashed-ip:131072 {log}.bz2"),
            ("hashed-ip:131072, .xz file", f"{py} -u hashed-ip:131072 {log}.xz"),
        ]
        results = [(name, max(run(cmd) for _ in range(a.repeat))) for name, cmd in rows]
    base = results[0][1]
    print(f"{a.lines:,} CLF lines (10 % IPv6), best of {a.repeat}:")
    print("| input | lines/s | vs baseline |\n|---|---|---|")
    for name, lps in results:
        print(f"| {name} | {lps / 1e6:.2f} M | {lps / base:.2f} |")


if __name__ == "__main__":
    main()
