"""Windows through the real broker on the public clock: ``panstream kafka --window``.

A log shipper writes a "week" of seven short windows (3 s each, so the test runs on the real wall
clock in under a minute: the members are separate processes and their clock is the machine's),
each window's lines while the window is open, out of order within it, 50 lines a message, no key,
round robin over 4 partitions; one window has no traffic at all; partition 3 is silent for the last
window; and every window also carries 100 *late* lines stamped in a window whose end + lateness
has passed (closed on the clock: dropped, never counted). The range is declared (``--from``/``--to``).
Two members route by window and cell range through ``<group>-wcells``; one is killed with
``kill -9`` after the third window's lines were sent, and restarted at once.

The series then holds exactly the seven declared windows, in order, each once, each within the
release's noise of its truth (the late lines' ~96 clients would push an estimate far past it); no
window waits for the silent partition; and the state directory holds nothing of a closed window
and no trace of any partition's progress: no watermark file, only the windows' ledgers (public
accounting). The results topic ``<group>-series`` holds the same records, keyed by window.

The tables run at state epsilon 30, where they are exact (see tests/kafka/test_routed.py), so a
window's error is its Laplace noise alone (scale 1/epsilon_out): over 7 windows,
``|estimate - truth| <= ln(7e7) / epsilon_out`` fails with probability at most 1e-7.
"""

from __future__ import annotations

import json
import math
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _kafka_helpers import Broker, kill_left
from test_broker import start, wait_for
from test_routed import member_argv, send_round_robin

from panstream.state.stores import DirectoryStore
from panstream.universe import Universe
from panstream.windows.eventtime import label
from panstream.windows.series import read

pytestmark = pytest.mark.kafka

W = 3  # seconds a window lasts
#: Long enough for the group to rebalance after the kill -9 below: the third window's lines, sent
#: just before it, are read by the dead member's successor before that window closes (its end +
#: lateness: W + LATENESS = 20 s after its lines, as with the 5 s windows and 15 s lateness this
#: test had; the dead member's session lasts 6 s, a join about 3 s).
LATENESS = 17
TRUTH = [1200, 800, 150, 0, 600, 400, 500]  # distinct clients per window (window 3: no traffic)
LATE_POOL = range(3000, 4096)  # clients seen only in late lines: never in any window's truth
EPS_OUT = 1.0


def clf_at(addr: str, t: int, i: int) -> str:
    stamp = time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(t))
    return f'{addr} - - [{stamp}] "GET /p/{i % 97} HTTP/1.1" 200 {512 + i % 4096} "-" "curl/8"'


def window_lines(universe: Universe, rng: np.random.Generator, start: int, d: int) -> list[str]:
    """``d`` distinct clients (each once or twice) stamped inside [start, start + W), shuffled,
    and 100 late lines stamped in a window the clock has closed (its end + lateness has passed),
    from clients of the late pool (~96 distinct)."""
    out = []
    if d:
        clients = rng.choice(3000, d, replace=False)
        seq = np.concatenate([clients, rng.choice(clients, d)])
        ts = rng.integers(start, start + W, seq.size)
        out = [clf_at(universe.item_of(int(c)), int(t), i)
               for i, (c, t) in enumerate(zip(seq, ts, strict=True))]
    late = rng.choice(np.array(LATE_POOL), 100)
    back = (1 + math.ceil(LATENESS / W)) * W  # a window the clock closed by ``start``
    out += [clf_at(universe.item_of(int(c)), start - back + 1, i) for i, c in enumerate(late)]
    return [out[i] for i in rng.permutation(len(out))]


def test_a_declared_week_of_windows_through_the_broker_on_the_clock(
        kafka_broker: Broker, topic_factory: Callable[..., str], producer: Any, admin: Any,
        tmp_path: Path) -> None:
    universe = Universe.parse("ipv4:10.9.0.0/20")
    topic = topic_factory(4)
    rng = np.random.default_rng(27)
    # 18..21 s to join the group first (~7 s; 13.5 s seen with the machine's two cores loaded 4x)
    first = (math.ceil(time.time() / W) + 7) * W
    starts = [first + k * W for k in range(len(TRUTH))]
    state = tmp_path / "state"
    group = "g-clock"
    argv = member_argv(kafka_broker, topic, group, universe.spec, state, "--epsilon", "30",
                       "--value-format", "lines", "-f", "clf", "--slices", "4",
                       "--window", f"{W}s", "--lateness", f"{LATENESS}s",
                       "--release-epsilon", str(EPS_OUT), "--from", str(first),
                       "--to", str(starts[-1] + W))
    a = start(argv, tmp_path / "a.log")
    b = start(argv, tmp_path / "b.log")
    series = state / f"{group}-series.jsonl"
    hw: dict[int, int] = {}
    try:
        wait_for(lambda: all("now holds" in (tmp_path / f).read_text(errors="replace")
                             for f in ("a.log", "b.log")), first - 0.5 - time.time(),
                 "both members in the group", [a, b])
        for k, s0 in enumerate(starts):
            time.sleep(max(0.0, s0 + 0.3 - time.time()))
            assert time.time() < s0 + W, "the producer fell behind the clock"
            lines = window_lines(universe, rng, s0, TRUTH[k])
            msgs = ["\n".join(lines[i:i + 50]).encode() for i in range(0, len(lines), 50)]
            parts = 3 if k == len(starts) - 1 else 4  # partition 3 silent for the last window
            hw = send_round_robin(producer, topic, msgs, parts, hw)
            if k == 2:  # kill -9 mid-run (no window has closed yet), restart at once
                os.kill(b.pid, signal.SIGKILL)
                b.wait(timeout=10)
                b = start(argv, tmp_path / "b2.log")
        wait_for(lambda: series.exists() and len(read(series)) >= len(TRUTH),
                 starts[-1] + W + LATENESS + 30 - time.time(), "every window in the series",
                 [a, b])
        for p in (a, b):
            p.send_signal(signal.SIGTERM)
        assert a.wait(timeout=60) == 0, (tmp_path / "a.log").read_text()[-3000:]
        assert b.wait(timeout=60) == 0, (tmp_path / "b2.log").read_text()[-3000:]
    finally:
        kill_left(a, b)

    recs = read(series)
    assert [r["window"] for r in recs] == [label(s0) for s0 in starts]  # declared, in order, once
    bound = math.log(7e7) / EPS_OUT
    for r, truth in zip(recs, TRUTH, strict=True):
        assert abs(r["estimate"] - truth) <= bound, (r["window"], r["estimate"], truth)
        assert r["epsilon_release"] == EPS_OUT and r["end"] - r["start"] == W
        # released on the clock: its released_at is the schedule's instant, end + lateness
        assert r["released_at"] == r["end"] + LATENESS
    # the state directory: nothing of a closed window, no partition's progress, only the ledgers
    wstore = DirectoryStore(state / "windows")
    assert wstore.keys() == []
    assert not [p for p in (state / "windows").rglob("*") if "marks" in p.name]
    ledgers = sorted(p.name for p in (state / "windows" / "ledgers").iterdir())
    assert len(ledgers) == len(TRUTH)
    for name in ledgers:
        rep = DirectoryStore(state / "windows" / "ledgers" / name).ledger_replay()
        assert rep.ledger is not None and len(rep.ledger.entries) == 1
    # the results topic GROUP-series: every window, keyed by it, the file's record
    from kafka import KafkaConsumer, TopicPartition

    tp = TopicPartition(f"{group}-series", 0)
    c = KafkaConsumer(bootstrap_servers=kafka_broker.bootstrap, enable_auto_commit=False)
    try:
        c.assign([tp])
        c.seek_to_beginning(tp)
        got: dict[str, set[str]] = {}
        for _ in range(50):
            for m in c.poll(timeout_ms=500).get(tp, []):
                got.setdefault(m.key.decode(), set()).add(m.value.decode())
            if len(got) >= len(TRUTH):
                break
    finally:
        c.close()
    by_window = {r["window"]: r for r in recs}
    assert sorted(got) == sorted(by_window)
    for w, values in got.items():
        assert [json.loads(v) for v in values] == [json.loads(json.dumps(by_window[w]))]
    outs = [json.loads(line) for f in ("a.log", "b.log", "b2.log")
            for line in (tmp_path / f).read_text().splitlines() if line.startswith('{"window"')]
    assert sorted(o["window"]["window"] for o in outs) == sorted(by_window)  # printed once each
