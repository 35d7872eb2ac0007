"""The windowed routing stage's cost per line against the plain routing stage's, same lines, same run.

No broker: both stages' per-batch work is timed in process on the same CLF lines (``--lines``
lines, ``--per-message`` a message, hourly windows over ``--hours`` hours, sorted by time as a
shipper sends them): (a) the plain stage's decode + split by slice (``Decoder`` then
``SliceLayout.route``), (b) the windowed stage's ``_partition`` (event times, the schedule's test
of each line's window against the clock, lines grouped by window, each window parsed and split).
The clock is set to each poll's last line's time, as if the shipper were live, with a lateness of
2 h so that every line of a poll finds its window open (the routed share is printed). Both
produce nothing; the broker's cost is the same bytes per arrival plus 9 bytes a record.

Run: ``python bench/bench_kafka_windows.py``. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from kafka import TopicPartition

from panstream.sources.kafka.decode import Decoder
from panstream.sources.kafka.metrics import Metrics
from panstream.sources.kafka.route import RouteConfig
from panstream.sources.kafka.windows import WindowRouteStage, WindowSpec
from panstream.state.slices import SliceLayout
from panstream.universe import Universe

DAY = 1795478400


def lines(n: int, hours: int, universe: Universe) -> list[bytes]:
    rng = np.random.default_rng(1)
    ts = np.sort(rng.integers(DAY, DAY + 3600 * hours, n))
    cells = rng.integers(0, universe.size, n)
    out = []
    for i, (t, c) in enumerate(zip(ts.tolist(), cells.tolist(), strict=True)):
        stamp = time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(t))
        out.append(f'{universe.item_of(c)} - - [{stamp}] "GET /p/{i % 97} HTTP/1.1" 200 '
                   f'{512 + i % 4096} "-" "Mozilla/5.0"'.encode())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=400_000)
    ap.add_argument("--per-message", type=int, default=500)
    ap.add_argument("--hours", type=int, default=24)
    ap.add_argument("--slices", type=int, default=16)
    a = ap.parse_args()
    universe = Universe.parse("ipv4:10.9.0.0/16")
    layout = SliceLayout(universe, a.slices)
    ls = lines(a.lines, a.hours, universe)
    msgs = [b"\n".join(ls[i:i + a.per_message]) for i in range(0, len(ls), a.per_message)]
    batch = 8  # messages a poll (one source partition)
    polls = [msgs[i:i + batch] for i in range(0, len(msgs), batch)]
    # the live clock of each poll: its last line's time (read outside the timing)
    import calendar

    lasts = [ls[min(i + batch * a.per_message, len(ls)) - 1]
             for i in range(0, len(ls), batch * a.per_message)]
    starts = [float(calendar.timegm(time.strptime(x.split(b"[", 1)[1][:20].decode(),
                                                  "%d/%b/%Y:%H:%M:%S"))) for x in lasts]
    routed = [0]

    def plain() -> float:
        dec = Decoder(universe, "lines", "clf")
        t0 = time.perf_counter()
        for p in polls:
            for _, data in layout.route(dec(list(p)).indices):
                data[:] = bytes(len(data))
        return time.perf_counter() - t0

    def windowed() -> float:
        cfg = RouteConfig({}, {}, ["logs"], layout, "g-wcells", "lines", "clf")
        clock = [0.0]
        st = WindowRouteStage(cfg, Metrics(), WindowSpec(3600, 7200, 1.0),
                              wall_clock=lambda: clock[0])
        st.decoder._resolve(list(polls[0]))
        tp = TopicPartition("logs", 0)
        t0 = time.perf_counter()
        for p, now in zip(polls, starts, strict=True):
            clock[0] = now
            out: list[tuple[int, bytes]] = []
            buf = bytearray(b"\n").join([*p, b""])
            routed[0] += st._partition(tp, buf, "clf", out)[1]
            buf[:] = bytes(len(buf))
        return time.perf_counter() - t0

    best_p = min(plain() for _ in range(3))
    best_w = min(windowed() for _ in range(3))
    print(json.dumps({"bench": "kafka_windows_route", "lines": a.lines, "hours": a.hours,
                      "slices": a.slices, "plain_lines_per_s": round(a.lines / best_p),
                      "windowed_lines_per_s": round(a.lines / best_w),
                      "windowed_over_plain": round(best_p / best_w, 3),
                      "routed_share": round(routed[0] / (3 * a.lines), 4)}))


if __name__ == "__main__":
    main()
