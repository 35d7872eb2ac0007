"""``kafka --window`` without a broker: when a window-slice closes, and that a window is released
exactly once whoever tries (several processes at once, and after a crash between the ledger and
the series).

The Kafka path itself (routing, marks, kill -9) runs against the real broker in
tests/kafka/test_windows_kafka.py.
"""

from __future__ import annotations

import multiprocessing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from kafka import TopicPartition

from panstream.estimators.density import DensityEstimator
from panstream.release.ledger import PrivacyLedger
from panstream.release.ledger_log import Opening, Reservation
from panstream.sources.kafka.tail import TailConfig
from panstream.sources.kafka.windows import (
    WindowSliceStage,
    WindowSpec,
    encode_data,
    encode_mark,
    release_complete,
    window_keys,
)
from panstream.state.slices import SliceLayout, encode_slice
from panstream.state.stores import DirectoryStore
from panstream.universe import Universe
from panstream.windows.series import read

H = 1795478400  # 2026-11-24T00:00:00Z
SPEC = WindowSpec(3600, 600, 1.0)
LAYOUT = SliceLayout(Universe.parse("ipv4:10.9.0.0/24"), 2)


def config(tmp: Path) -> TailConfig:
    return TailConfig({}, ["logs"], LAYOUT.universe, 30.0, "rr", DirectoryStore(tmp / "unused"))


@dataclass
class Rec:
    value: bytes
    offset: int


class FakeConsumer:
    """Just what the slice stage asks outside a poll: the source topic's partitions."""

    def partitions_for_topic(self, topic: str) -> set[int]:
        return {0, 1}


def stage(tmp: Path) -> WindowSliceStage:
    s = WindowSliceStage(config(tmp), LAYOUT, spec=SPEC, group="g", sources=["logs"],
                         wstore=DirectoryStore(tmp / "windows"), series_path=str(tmp / "s.jsonl"))
    s.consumer = FakeConsumer()
    return s


def test_a_window_slice_closes_only_when_every_source_partition_has_passed_it(tmp_path: Path
                                                                               ) -> None:
    s = stage(tmp_path)
    tp = TopicPartition("g-wcells", 0)
    s.shards[tp] = s._restore(tp)
    (r, part), = LAYOUT.route(np.arange(10, dtype=np.intp))  # cells 0..9: all in slice 0
    assert r == 0
    cells = bytes(part)
    recs = [Rec(encode_data(H, cells), 0), Rec(encode_mark("logs:0", H + 3600 + 600, [H]), 1)]
    s._apply({tp: recs})
    assert s.open_windows() == {0: [H]}  # partition 1 has not said where it is: still open
    s._apply({tp: [Rec(encode_mark("logs:1", H + 3600 + 599, [H]), 2)]})
    assert s.open_windows() == {0: [H]}  # 1 s short of end + lateness
    s._apply({tp: [Rec(encode_mark("logs:1", H + 3600 + 600, []), 3)]})
    assert s.open_windows() == {0: []}
    opened, closed = window_keys("g", H, 0)
    assert s.wstore.keys() == [closed]  # durable as closed; no open copy left
    # a replayed record of the closed window opens nothing again
    s._apply({tp: [Rec(encode_data(H, cells), 0)]})
    assert s.open_windows() == {0: []}
    # a restarted owner knows it is closed from the store alone
    s2 = stage(tmp_path)
    s2._restore(tp)
    assert H in s2.closed[0]


def closed_store(tmp: Path) -> DirectoryStore:
    w = DirectoryStore(tmp / "windows")
    for r in range(LAYOUT.count):
        est = DensityEstimator(LAYOUT.slice_universe(r), epsilon=30.0)
        est.update_indices(np.arange(20))
        data = encode_slice(est, LAYOUT, r)
        w.save(window_keys("g", H, r)[1], data)
    return w


def _race(tmp: str, q: Any) -> None:
    w = DirectoryStore(Path(tmp) / "windows")
    got = release_complete(w, "g", LAYOUT, config(Path(tmp)), SPEC, str(Path(tmp) / "s.jsonl"),
                           wait=30.0)
    q.put(len(got))


def test_four_processes_releasing_one_window_release_it_once(tmp_path: Path) -> None:
    w = closed_store(tmp_path)
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_race, args=(str(tmp_path), q)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert sorted(q.get() for _ in procs) == [0, 0, 0, 1]
    recs = read(tmp_path / "s.jsonl")
    assert [r["window"] for r in recs] == ["2026-11-24T00:00:00Z"]
    assert abs(recs[0]["estimate"] - 40) <= 20  # 20 cells in each of 2 slices; Laplace(1)
    assert w.keys() == []  # nothing of the closed window left
    led = DirectoryStore(tmp_path / "windows" / "ledgers" / "20261124T000000Z").ledger_replay()
    assert led.ledger is not None and len(led.ledger.entries) == 1


def test_a_release_reserved_before_a_crash_is_never_drawn_again(tmp_path: Path) -> None:
    w = closed_store(tmp_path)
    # the crash: the window's ledger admitted its one release, the series never got the record
    lstore = DirectoryStore(tmp_path / "windows" / "ledgers" / "20261124T000000Z")
    lstore.append_ledger(Opening(PrivacyLedger(1.0, epoch="e")).encode())
    lstore.append_ledger(Reservation("e", "x", 1.0, "laplace", 0.0).encode())
    notes: list[str] = []
    got = release_complete(w, "g", LAYOUT, config(tmp_path), SPEC, str(tmp_path / "s.jsonl"),
                           notice=notes.append)
    assert got == [] and not (tmp_path / "s.jsonl").exists()
    assert "dropped rather than released twice" in notes[0]
    assert w.keys() == []


def test_kafka_window_usage_errors_are_one_line(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from panstream.cli.main import cli

    base = ["kafka", "-b", "127.0.0.1:1", "-t", "logs", "-g", "g", "-u", "ipv4:10.9.0.0/24",
            "--epsilon", "1"]
    cases = [
        (["--window", "1h", "--state-dir", str(tmp_path)], "--window needs --release-epsilon"),
        (["--window", "1h", "--release-epsilon", "1", "--state-topic", "st"],
         "--state-topic is not supported with --window"),
        (["--window", "1h", "--release-epsilon", "1", "--state-dir", str(tmp_path), "--layout",
          "partition"], "drop --layout partition"),
        (["--release-epsilon", "1", "--state-dir", str(tmp_path)], "go(es) with --window"),
        (["--window", "0s", "--state-dir", str(tmp_path)], "longer than 0 seconds"),
    ]
    for extra, says in cases:
        res = CliRunner().invoke(cli, base + extra)
        assert res.exit_code == 2, (extra, res.output)
        assert says in res.output and "Traceback" not in res.output, (extra, res.output)


def test_the_router_drops_late_lines_fills_empty_windows_and_marks_every_slice() -> None:
    import time as _t

    from panstream.sources.kafka.metrics import Metrics
    from panstream.sources.kafka.route import RouteConfig
    from panstream.sources.kafka.windows import WindowRouteStage, decode_record

    def line(addr: str, t: int) -> bytes:
        stamp = _t.strftime("%d/%b/%Y:%H:%M:%S +0000", _t.gmtime(t))
        return f'{addr} - - [{stamp}] "GET / HTTP/1.1" 200 5 "-" "curl/8"'.encode()

    cfg = RouteConfig({}, {}, ["logs"], LAYOUT, "g-wcells", "lines", "clf")
    router = WindowRouteStage(cfg, Metrics(), SPEC)
    tp = TopicPartition("logs", 1)
    out: list[tuple[int, bytes]] = []
    # 00:10 and 00:20 (window 00), then 03:15 (window 03: 01 and 02 are empty, opened all the same)
    buf = bytearray(b"\n".join([line("10.9.0.1", H + 600), line("10.9.0.200", H + 1200),
                                line("10.9.0.2", H + 3 * 3600 + 900)]) + b"\n")
    router._partition(tp, buf, "clf", out)
    data = [(r, decode_record(v)) for r, v in out if v[:1] == b"D"]
    assert sorted((r, d[1]) for r, d in data) == [(0, H), (0, H + 3 * 3600), (1, H)]
    marks = [decode_record(v) for r, v in out if v[:1] == b"M"]
    assert [m[1] for m in marks] == ["logs:1"] * LAYOUT.count  # one mark to every slice
    assert marks[0][2] == (H + 3 * 3600 + 900, [H + h * 3600 for h in range(4)])
    # a line of window 00 now is more than the lateness behind this partition's watermark: late
    out.clear()
    router._partition(tp, bytearray(line("10.9.0.3", H + 1800) + b"\n"), "clf", out)
    assert [v[:1] for _, v in out] == [b"M"] * LAYOUT.count
