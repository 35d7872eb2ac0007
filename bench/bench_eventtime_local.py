"""The times of the local-time formats against parsing their addresses, as ratios in one run
(run by hand).

    python bench/bench_eventtime_local.py [--lines 200000] [--repeat 3] [--dir ../shared/reallogs]

Each real sample of ``../shared/reallogs`` (HAProxy, OpenSSH's auth log, the Linux syslog's pam
lines, Apache's error log) is repeated to about ``--lines`` lines and cut into 1 MiB chunks of whole
lines; then, best of ``--repeat``: the time of every line
(:class:`panstream.windows.eventtime.TimeReader`, UTC and Europe/Berlin, the declared range of the
sample) against the address parse of the same chunks
(:class:`panstream.inputs.parser.LineParser`, the format's preset). Prints lines/s and the ratio
(the machine is shared and noisy: compare ratios, not absolute numbers).
"""

from __future__ import annotations

import argparse
import calendar
import time
from pathlib import Path

import numpy as np

from panstream.inputs.parser import LineParser, parse_format
from panstream.universe import Universe
from panstream.windows.eventtime import TimeReader, lines_and_times

SAMPLES = [  # (format, file, universe, declared range)
    ("haproxy", "beats_haproxy.log", "ipv4:1.2.3.0/24", ((2018, 7, 26), (2021, 6, 24))),
    ("sshd", "loghub_OpenSSH_2k.log", "ipv4:173.234.0.0/16", ((2026, 12, 10), (2026, 12, 11))),
    ("pam", "loghub_Linux_2k.log", "ipv4:218.188.0.0/16", ((2005, 6, 14), (2005, 7, 28))),
    ("apache-error", "loghub_Apache_2k.log", "ipv4:0.0.0.0/16", ((2005, 12, 4), (2005, 12, 6))),
]


def chunks(data: bytes, size: int = 1 << 20) -> list[bytes]:
    out, i = [], 0
    while i < len(data):
        j = data.rfind(b"\n", i, i + size) + 1 if i + size < len(data) else len(data)
        if j <= i:
            j = len(data)
        out.append(data[i:j])
        i = j
    return out


def best(fn: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    here = Path(__file__).resolve()
    found = [d for d in (here.parents[2] / "shared" / "reallogs",
                         here.parents[3] / "shared" / "reallogs") if d.is_dir()]
    ap.add_argument("--dir", default=str(found[0]) if found else "reallogs")
    a = ap.parse_args()
    for fmt, name, universe, (frm, to) in SAMPLES:
        raw = (Path(a.dir) / name).read_bytes()
        if not raw.endswith(b"\n"):
            raw += b"\n"
        data = raw * max(1, a.lines // raw.count(b"\n"))
        parts = chunks(data)
        lines = data.count(b"\n")
        span = (calendar.timegm((*frm, 0, 0, 0)), calendar.timegm((*to, 0, 0, 0)))
        parser = LineParser(Universe.parse(universe), parse_format(fmt))

        def parse(parser: LineParser = parser, parts: list[bytes] = parts) -> None:
            for c in parts:
                parser.parse(memoryview(c))

        t_parse = best(parse, a.repeat)
        row = [f"{fmt:13s} {lines:>9,} lines: parse {lines / t_parse / 1e6:5.2f} M/s"]
        for zone in ("UTC", "Europe/Berlin"):
            reader = TimeReader(fmt, zone, span)

            def read(reader: TimeReader = reader, parts: list[bytes] = parts,
                     fmt: str = fmt) -> None:
                for c in parts:
                    lines_and_times(np.frombuffer(c, dtype=np.uint8), fmt, reader)

            t = best(read, a.repeat)
            row.append(f"times {zone} {lines / t / 1e6:5.2f} M/s ({t / t_parse:.2f} x parse)")
        print("; ".join(row))


if __name__ == "__main__":
    main()
