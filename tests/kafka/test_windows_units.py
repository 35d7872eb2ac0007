"""``kafka --window`` without a broker: window-slices open and close on the clock (never on a
line: the state directory is the same with and without the target's line), and a window is
released exactly once whoever tries (several processes at once, and after a crash between the
ledger and the series).

The Kafka path itself (routing, marks, kill -9) runs against the real broker in
tests/kafka/test_windows_kafka.py.
"""

from __future__ import annotations

import multiprocessing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from _group_fakes import Consumer, Group
from _layouts import Clock
from kafka import TopicPartition

from panstream.estimators.density import DensityEstimator
from panstream.release.ledger import PrivacyLedger
from panstream.release.ledger_log import Opening, Reservation
from panstream.sources.kafka.tail import TailConfig
from panstream.sources.kafka.windows import (
    WindowSliceStage,
    WindowSpec,
    encode_data,
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


def stage(tmp: Path, clock: Clock, group: Group | None = None) -> WindowSliceStage:
    """A window slice stage, a member of ``group`` (``g-slices``) in its current generation (a
    group of its own if none: window-slices are claimed on assignment)."""
    s = WindowSliceStage(config(tmp), LAYOUT, spec=SPEC, group="g", sources=["logs"],
                         wstore=DirectoryStore(tmp / "windows"),
                         series_path=str(tmp / "s.jsonl"), wall_clock=clock)
    s.consumer = Consumer(group or Group())
    return s


def test_a_window_slice_opens_and_closes_on_the_clock(tmp_path: Path) -> None:
    """Slice 0 at 00:30: the 00:00 window is open (a fresh table, its file written at the
    checkpoint whether or not a line came); at 01:10 (end + 10 min lateness) it closes, durable
    as closed; the 01:00 window is open by then. A record for a closed window opens nothing."""
    clock = Clock(H + 1800)
    s = stage(tmp_path, clock)
    tp = TopicPartition("g-wcells", 0)
    s.shards[tp] = s._restore(tp)
    s.follow_schedule(0, clock.now)
    assert s.open_windows() == {0: [H]}
    (r, part), = LAYOUT.route(np.arange(10, dtype=np.intp))  # cells 0..9: all in slice 0
    cells = bytes(part)
    s._apply({tp: [Rec(encode_data(H, cells), 0)]})
    clock.now = H + 3600 + 599
    s.follow_schedule(0, clock.now)
    assert s.open_windows() == {0: [H, H + 3600]}  # 1 s short of end + lateness
    clock.now = H + 3600 + 600
    s.follow_schedule(0, clock.now)
    assert s.open_windows() == {0: [H + 3600]}
    assert s.wstore.keys() == [window_keys("g", H, 0)[1]]  # durable as closed; no open copy
    s._apply({tp: [Rec(encode_data(H, cells), 1)]})  # a replayed record of the closed window
    assert s.open_windows() == {0: [H + 3600]}
    s2 = stage(tmp_path, clock)  # a restarted owner knows it is closed from the store alone
    # (a group of its own, recreated: its claim rebases above s's, see test_fence.py)
    s2._restore(tp)
    assert H in s2.closed[0]


def _observe(tmp: Path, target: bool) -> list[list[tuple[str, int]]]:
    """Two slices owned by one member; the crowd's records every 10 minutes; in one world the
    target's cell in the 00:00 window's last minute, and a record stamped past its end. After
    every batch: the windows with a table in memory; after every checkpoint: the names and sizes
    of the files in STATE_DIR/windows."""
    clock = Clock(H + 60)
    s = stage(tmp, clock)
    tps = [TopicPartition("g-wcells", r) for r in range(2)]
    for tp in tps:
        s.shards[tp] = s._restore(tp)
    crowd = {r: bytes(p) for r, p in LAYOUT.route(np.arange(0, 256, 7, dtype=np.intp))}
    target_cells = {r: bytes(p) for r, p in LAYOUT.route(np.array([200], dtype=np.intp))}
    seen = []
    off = 0
    for minute in range(0, 150, 10):
        clock.now = H + 60 * minute + 30
        for tp in tps:
            r = tp.partition
            recs = [Rec(encode_data(H + 3600 * (minute // 60), crowd.get(r, b"")), off)]
            if target and minute == 50 and r in target_cells:
                recs.append(Rec(encode_data(H, target_cells[r]), off + 1))
            if target and minute == 60 and r in target_cells:
                recs.append(Rec(encode_data(H + 3600, target_cells[r]), off + 1))
                recs.append(Rec(encode_data(H + 7200, target_cells[r]), off + 1))  # not begun
            off += 2
            s._apply({tp: recs})
        seen.append([("in memory", sorted(s.open_windows().items()))])  # type: ignore[list-item]
        s.checkpoint()
        root = tmp / "windows"
        seen.append(sorted((str(p.relative_to(root)), p.stat().st_size)
                           for p in root.rglob("*") if p.is_file() and "ledgers" not in p.parts))
    return seen


def test_the_state_directory_is_the_clock_s_with_or_without_the_target(tmp_path: Path) -> None:
    """The review's Kafka attack read a partition's progress marker (and which window files
    existed) from STATE_DIR/windows. Now there is no marker, and after every checkpoint the
    directory holds the same files, of the same sizes, with and without the target's records;
    each window is released at its close instant (01:10 for 00:00) into the series."""
    a = _observe(tmp_path / "a", False)
    b = _observe(tmp_path / "b", True)
    assert a == b
    flat = {name for step in a for name, _ in step if isinstance(name, str)}
    assert not [n for n in flat if "marks" in n]
    # yesterday's 23:00 was still open at 00:01 (until 00:10): released, empty; then 00:00 at
    # 01:10 and 01:00 at 02:10, in both worlds
    for world in "ab":
        recs = read(tmp_path / world / "s.jsonl")
        assert [r["window"] for r in recs] == \
            ["2026-11-23T23:00:00Z", "2026-11-24T00:00:00Z", "2026-11-24T01:00:00Z"]
        assert [r["released_at"] for r in recs] == [H + 600, H + 3600 + 600, H + 7200 + 600]


def test_a_slice_that_never_had_a_window_is_closed_fresh_by_its_owner(tmp_path: Path) -> None:
    """Slice 1 was unowned for all of 00:00's life: its next owner closes it as a fresh table as
    soon as it is due, so the window is released and one slice never holds it back."""
    clock = Clock(H + 1800)
    s = stage(tmp_path, clock)
    tp0, tp1 = TopicPartition("g-wcells", 0), TopicPartition("g-wcells", 1)
    s.shards[tp0] = s._restore(tp0)
    s.follow_schedule(0, clock.now)
    clock.now = H + 3600 + 700
    s.follow_schedule(0, clock.now)  # 00:00 closed in slice 0 only
    s.shards[tp1] = s._restore(tp1)
    s.follow_schedule(1, clock.now)
    keys = s.wstore.keys()
    assert window_keys("g", H, 0)[1] in keys and window_keys("g", H, 1)[1] in keys
    got = release_complete(s.wstore, "g", LAYOUT, config(tmp_path), SPEC, str(tmp_path / "s.jsonl"))
    assert [r["window"] for r in got] == ["2026-11-24T00:00:00Z"]


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
        (["--from", "2026-11-24", "--state-dir", str(tmp_path)], "--from go(es) with --window"),
        (["--window", "0s", "--state-dir", str(tmp_path)], "longer than 0 seconds"),
    ]
    for extra, says in cases:
        res = CliRunner().invoke(cli, base + extra)
        assert res.exit_code == 2, (extra, res.output)
        assert says in res.output and "Traceback" not in res.output, (extra, res.output)


def test_the_router_keeps_only_lines_of_windows_open_on_the_clock() -> None:
    """At 00:30 with lateness 10 min: lines of 00:00 are routed; a line stamped 03:15 (a window
    the clock has not begun) and one of yesterday's 23:00 (closed at 00:10) are dropped, and
    nothing is kept about the partition: no watermark, no mark, no window opened by a line."""
    import time as _t

    from panstream.sources.kafka.metrics import Metrics
    from panstream.sources.kafka.route import RouteConfig
    from panstream.sources.kafka.windows import WindowRouteStage, decode_record

    def line(addr: str, t: int) -> bytes:
        stamp = _t.strftime("%d/%b/%Y:%H:%M:%S +0000", _t.gmtime(t))
        return f'{addr} - - [{stamp}] "GET / HTTP/1.1" 200 5 "-" "curl/8"'.encode()

    clock = Clock(H + 1800)
    cfg = RouteConfig({}, {}, ["logs"], LAYOUT, "g-wcells", "lines", "clf")
    router = WindowRouteStage(cfg, Metrics(), SPEC, wall_clock=clock)
    tp = TopicPartition("logs", 1)
    out: list[tuple[int, bytes]] = []
    buf = bytearray(b"\n".join([line("10.9.0.1", H + 600), line("10.9.0.200", H + 1200),
                                line("10.9.0.2", H + 3 * 3600 + 900),
                                line("10.9.0.3", H - 3600 + 60)]) + b"\n")
    router._partition(tp, buf, "clf", out)
    data = [(r, decode_record(v)) for r, v in out]
    assert sorted((r, d[0], d[1]) for r, d in data) == [(0, "D", H), (1, "D", H)]
    assert not [k for k in vars(router) if "wm" in k or "front" in k]


def test_a_held_first_sample_is_judged_by_the_end_of_its_first_window() -> None:
    """The routing stage holds its first records until the first sample (1,000 lines) is judged.
    On a quiet topic that took longer than a window: the held records of the first window reached
    their slices after it closed and were dropped, a whole window's lines lost without a word
    (tests/kafka/test_windows_localtime.py's HAProxy run, 700 lines in its first window, found
    it). Now the sample is judged on what it holds when the clock reaches the end of the earliest
    window it has records of, leaving the lateness for them to reach their slices."""
    from panstream.sources.kafka.metrics import Metrics
    from panstream.sources.kafka.route import RouteConfig
    from panstream.sources.kafka.windows import WindowRouteStage, decode_record

    clock = Clock(H + 1800)
    cfg = RouteConfig({}, {}, ["logs"], LAYOUT, "g-wcells", "lines", "clf")
    router = WindowRouteStage(cfg, Metrics(), SPEC, wall_clock=clock)
    sent: list[tuple[int, bytes]] = []
    polls: list[dict[TopicPartition, list[Rec]]] = []

    class Producer:
        def send(self, topic: str, value: bytes, partition: int) -> None:
            sent.append((partition, value))

    class Consumer:
        def poll(self, timeout_ms: int) -> dict[TopicPartition, list[Rec]]:
            return polls.pop(0) if polls else {}

    router.producer, router.consumer = Producer(), Consumer()
    lines = [f'10.9.0.{i} - - [24/Nov/2026:00:{i:02d}:00 +0000] "GET / HTTP/1.1" 200 5 "-" "x"'
             for i in range(20)]
    polls.append({TopicPartition("logs", 0): [Rec("\n".join(lines).encode(), 0)]})
    assert router.poll_once(0)
    assert sent == []  # 20 lines: the sample is not judged yet, the window's records are held
    clock.now = H + 3599
    router.poll_once(0)
    assert sent == []
    clock.now = H + 3600  # the window ends (it closes at 01:10): judged, the records go out
    router.poll_once(0)
    assert {decode_record(v)[:2] for _, v in sent} == {("D", H)}
    assert router._sample is None and router._held == []


@dataclass
class Stamped:
    value: bytes
    offset: int
    headers: list[tuple[str, bytes]] | None


def test_window_records_of_another_definition_are_skipped_not_applied(tmp_path: Path) -> None:
    """Issue 35: a windowed slice applies records stamped with its group's digest (or none, from
    a panstream before definitions); one of another definition, or one that is not a window
    record, is said once and skipped, and the offsets still move past it."""
    from panstream.sources.kafka.identity import RecordGate

    clock = Clock(H + 1800)
    s = stage(tmp_path, clock)
    said: list[str] = []
    s.gate = RecordGate("a" * 16, "g-wcells", said.append)
    tp = TopicPartition("g-wcells", 0)
    s.shards[tp] = s._restore(tp)
    s.follow_schedule(0, clock.now)

    def cells(lo: int, hi: int) -> bytes:
        (_, part), = LAYOUT.route(np.arange(lo, hi, dtype=np.intp))
        return bytes(part)

    s._apply({tp: [Stamped(encode_data(H, cells(0, 5)), 0, s.gate.headers()),
                   Stamped(encode_data(H, cells(5, 10)), 1, None),
                   Stamped(encode_data(H, cells(10, 20)), 2, [("panstream-group", b"b" * 16)]),
                   Stamped(b"\x05\x00\x01", 3, None)]})
    bits = s.wins[0][H].bits()
    assert bits[:10].all() and not bits[10:20].any()  # ours and the unstamped applied only
    assert len(said) == 2 and "bbbbbbbbbbbbbbbb" in said[0] and "another layout" in said[1]
    assert s.shards[tp].next_offset == 4  # committed past every record
