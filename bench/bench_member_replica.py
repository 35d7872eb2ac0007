#!/usr/bin/env python3
"""A routed member's own work, without Kafka, against ``ingest``'s loop (issue 38, sixth round).

    python bench/bench_member_replica.py [--lines 2000000] [--rounds 2] [--children 3]

What it answers: does the member's code path cost more than ``ingest``'s, or does the member pay
for the threads around it? Each child process takes the bench's CLF lines (500 a message, as
``bench/bench_kafka_group.py`` produces them) and times, with ``resource.getrusage`` (all its
threads, start-up excluded), one of:

* ``ingest``: ``bench_kafka_group.py``'s ``in_process`` measure, ``Ingestor.run`` over a file
  of the lines (one untimed pass, then timed ones);
* ``replica``: the routing thread's work on the same lines. Each message's value is copied out of
  one buffer into a ``bytes``, as librdkafka's ``consume()`` hands them out. The values are fed
  in pieces of 40 messages to the member's own ``Decoder.feed``, which joins them into the
  parser's 2 MiB chunks and parses them, and ``flush``-ed every 1,000 messages (a poll).

Both run alone, then beside other processes on the other core: copying 2 MiB over and over (one,
then two of them: three runnable on two cores), or pure-Python busy loops. Interleaved, round by
round, so load drifts hit both alike. Prints one JSON line per setting with each one's µs of CPU
a line (the median, and every child's passes).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import bench_kafka_group as group  # noqa: E402

SPIN = "while True: pass"
COPY = "import numpy as np\na = np.ones(1 << 21, np.uint8); b = np.empty_like(a)\nwhile True: np.copyto(b, a)"
#: What runs on the other core in each setting.
NEIGHBOURS = {"alone": [], "one copier": [COPY], "two copiers": [COPY, COPY],
              "two busy loops": [SPIN, SPIN]}
PIECE, POLL, PASSES = 40, 1000, 3


def replica_child(lines: int) -> None:
    """(In a child.) The routing thread's copy, join and parse of ``lines`` lines, ``PASSES``
    timed passes after an untimed one: CPU seconds of each, as JSON."""
    from panstream.inputs.parser import tune_allocator
    from panstream.sources.kafka.decode import Decoder
    from panstream.universe import Universe

    tune_allocator()  # as the command line does
    msgs = group.messages(lines)
    pool = memoryview(b"".join(msgs))
    ends = np.cumsum([0] + [len(m) for m in msgs]).tolist()
    del msgs
    dec = Decoder(Universe.parse(group.UNIVERSE), "lines", "clf")
    n = len(ends) - 1
    cpu = []
    for _ in range(PASSES + 1):
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        for p0 in range(0, n, POLL):
            for s in range(p0, min(p0 + POLL, n), PIECE):
                values = [bytes(pool[ends[i]:ends[i + 1]]) for i in range(s, min(s + PIECE, p0 + POLL, n))]
                dec.feed(values)
                values.clear()
            dec.flush().indices.fill(0)
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu.append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
    print(json.dumps({"cpu_s": cpu[1:]}), flush=True)


def timed(argv: list[str], lines: int) -> list[float]:
    got = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    try:
        return [round(c / lines * 1e6, 3) for c in json.loads(got.stdout.strip().splitlines()[-1])["cpu_s"]]
    except (ValueError, IndexError):
        raise RuntimeError(f"child failed: {got.stderr[-500:]}") from None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lines", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--children", type=int, default=3, help="children of each kind per setting and round")
    ap.add_argument("--replica-child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.replica_child:
        replica_child(args.replica_child)
        return
    lines = args.lines // group.PER_MSG * group.PER_MSG
    with tempfile.TemporaryDirectory(prefix="panstream-replica-") as tmp:
        path = Path(tmp) / "all.log"
        with path.open("wb") as f:
            for m in group.messages(lines):
                f.write(m)
                f.write(b"\n")
        ingest = [sys.executable, str(HERE / "bench_kafka_group.py"), "--ingest-in-process", str(path),
                  str(PASSES)]
        replica = [sys.executable, __file__, "--replica-child", str(lines)]
        got: dict[str, dict[str, list[float]]] = {k: {"ingest": [], "replica": []} for k in NEIGHBOURS}
        for _ in range(args.rounds):
            for name, progs in NEIGHBOURS.items():
                procs = [subprocess.Popen([sys.executable, "-c", p]) for p in progs]
                try:
                    time.sleep(0.5 if procs else 0)
                    for _ in range(args.children):
                        got[name]["ingest"] += timed(ingest, lines)
                        got[name]["replica"] += timed(replica, lines)
                finally:
                    for p in procs:
                        p.kill()
                        p.wait()
        for name, by in got.items():
            print(json.dumps({"beside": name, "lines": lines,
                              **{f"{k}_us_per_line": statistics.median(v) for k, v in by.items()},
                              **{f"{k}_passes": v for k, v in by.items()}}), flush=True)


if __name__ == "__main__":
    main()
