"""Hourly windows through the real broker (issue 23, Kafka part): ``panstream kafka --window 1h``.

A log shipper writes six hours of access-log lines (known distinct clients per hour, one hour with
no traffic at all, lines out of order by up to ~4 minutes), 50 lines a message, no key, round robin
over 4 partitions, then one line at 06:30 on every partition (later traffic: what closes 05:00).
Two members route by window and cell range through ``<group>-wcells``; one is killed with
``kill -9`` mid-run and restarted. The series then holds each of the six hours exactly once, each
within the release's noise of the truth, and the state directory holds nothing of a closed window:
only the open 06:00 window's slices, and the windows' ledgers (public accounting). The results
topic ``<group>-series`` holds the same records, keyed by window.

The tables run at state epsilon 30, where they are exact (see tests/kafka/test_routed.py), so a
window's error is its Laplace noise alone (scale 1/epsilon_out): over 6 windows,
``|estimate - truth| <= ln(6e7) / epsilon_out`` fails with probability at most 1e-7.
"""

from __future__ import annotations

import json
import math
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _kafka_helpers import Broker, committed_offsets
from test_broker import start, wait_for
from test_routed import member_argv, send_round_robin

from panstream.state.stores import DirectoryStore
from panstream.universe import Universe
from panstream.windows.series import read

pytestmark = pytest.mark.kafka

DAY = 1795478400  # 2026-11-24T00:00:00Z
HOURS = [440, 1400, 120, 960, 0, 700]  # distinct clients per hour (hour 4: no traffic)
EPS_OUT = 1.0


def clf_at(addr: str, t: int, i: int) -> str:
    import time as _t

    stamp = _t.strftime("%d/%b/%Y:%H:%M:%S +0000", _t.gmtime(t))
    return f'{addr} - - [{stamp}] "GET /p/{i % 97} HTTP/1.1" 200 {512 + i % 4096} "-" "curl/8"'


def week_slice(universe: Universe, rng: np.random.Generator) -> tuple[list[str], dict[str, int]]:
    """Six hours of lines, locally shuffled (within blocks of 40), and the truth per hour."""
    lines: list[tuple[int, str]] = []
    truth: dict[str, int] = {}
    from panstream.windows.eventtime import label

    for h, d in enumerate(HOURS):
        start = DAY + 3600 * h
        truth[label(start)] = d
        if not d:
            continue
        clients = rng.choice(universe.size, d, replace=False)
        seq = np.concatenate([clients, rng.choice(clients, d)])
        ts = np.sort(rng.integers(start, start + 3600, seq.size))
        for i, (c, t) in enumerate(zip(rng.permutation(seq), ts, strict=True)):
            lines.append((int(t), clf_at(universe.item_of(int(c)), int(t), i)))
    order = np.concatenate([rng.permutation(np.arange(i, min(i + 40, len(lines))))
                            for i in range(0, len(lines), 40)])
    return [lines[i][1] for i in order], truth


def test_hourly_windows_two_members_one_killed_each_window_once(
        kafka_broker: Broker, topic_factory: Callable[..., str], producer: Any, admin: Any,
        tmp_path: Path) -> None:
    universe = Universe.parse("ipv4:10.9.0.0/20")
    topic = topic_factory(4)
    rng = np.random.default_rng(23)
    lines, truth = week_slice(universe, rng)
    msgs = ["\n".join(lines[i:i + 50]).encode() for i in range(0, len(lines), 50)]
    tail = [clf_at(universe.item_of(p), DAY + 6 * 3600 + 1800, p).encode() for p in range(4)]
    hw: dict[int, int] = {}
    cut = len(msgs) * 2 // 5  # 2,900 lines: each routing stage decides its 1,000-line sample
    send_round_robin(producer, topic, msgs[:cut], 4, hw)
    state = tmp_path / "state"
    group = "g-hourly"
    argv = member_argv(kafka_broker, topic, group, universe.spec, state, "--epsilon", "30",
                       "--value-format", "lines", "-f", "clf", "--slices", "4",
                       "--window", "1h", "--lateness", "10m", "--release-epsilon", str(EPS_OUT),
                       "-C", "max_poll_records=3")
    a = start(argv, tmp_path / "a.log")
    b = start(argv, tmp_path / "b.log")
    series = state / f"{group}-series.jsonl"
    try:
        wait_for(lambda: sum(committed_offsets(admin, group).values()) > 0, 90,
                 "a first routed commit", [a, b])
        os.kill(a.pid, signal.SIGKILL)  # mid-run: most hours are still to come
        a.wait(timeout=10)
        send_round_robin(producer, topic, msgs[cut:], 4, hw)
        hw = send_round_robin(producer, topic, tail, 4, hw)  # later traffic on every partition
        a = start(argv, tmp_path / "a2.log")
        # the members run until stopped (no idle timeout: a rejoin after kill -9 is slow on Tansu)
        wait_for(lambda: series.exists() and len(read(series)) >= len(truth), 150,
                 "every hour in the series", [a, b])
        wait_for(lambda: committed_offsets(admin, group) == hw, 30, "the final source commits",
                 [a, b])
        for p in (a, b):
            p.send_signal(signal.SIGTERM)
        assert a.wait(timeout=60) == 0, (tmp_path / "a2.log").read_text()[-3000:]
        assert b.wait(timeout=60) == 0, (tmp_path / "b.log").read_text()[-3000:]
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert committed_offsets(admin, group) == hw  # every source message routed, then committed

    recs = read(state / f"{group}-series.jsonl")
    assert [r["window"] for r in recs] == sorted(truth)  # each hour once, in order, none twice
    bound = math.log(6e7) / EPS_OUT
    for r in recs:
        assert abs(r["estimate"] - truth[r["window"]]) <= bound, (r, truth[r["window"]])
        assert r["epsilon_release"] == EPS_OUT and r["end"] - r["start"] == 3600
    # nothing of a closed window is left: only the open 06:00 window's four slices, and each
    # slice's source watermarks (as the last window end they passed: nothing finer)
    wstore = DirectoryStore(state / "windows")
    assert sorted(wstore.keys()) == sorted([f"{group}-w20261124T060000Z/{r}" for r in range(4)]
                                           + [f"{group}-marks/{r}" for r in range(4)])
    for r in range(4):
        marks = json.loads(bytes(wstore.load(f"{group}-marks/{r}") or b"{}"))
        assert marks == {f"{topic}:{p}": DAY + 6 * 3600 for p in range(4)}
    # each released window charged its own ledger once (public accounting, kept)
    ledgers = sorted(p.name for p in (state / "windows" / "ledgers").iterdir())
    assert len(ledgers) == 6
    for name in ledgers:
        rep = DirectoryStore(state / "windows" / "ledgers" / name).ledger_replay()
        assert rep.ledger is not None and len(rep.ledger.entries) == 1
    # the results topic GROUP-series: every window, keyed by it, the file's record (a copy may
    # repeat after a restart, identical and under the same key: compaction keeps one)
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
            if len(got) >= len(truth):
                break
    finally:
        c.close()
    assert sorted(got) == sorted(truth)
    by_window = {r["window"]: r for r in recs}
    for w, values in got.items():
        assert [json.loads(v) for v in values] == [json.loads(json.dumps(by_window[w]))]
    outs = [json.loads(line) for f in ("a.log", "a2.log", "b.log")
            for line in (tmp_path / f).read_text().splitlines() if line.startswith('{"window"')]
    assert sorted(o["window"]["window"] for o in outs) == sorted(truth)  # printed once each
