"""Tumbling windows over a generated week of access logs: one release per window that covers the
truth at its stated rate, nothing left of a closed window on disk or in memory, and every window
exactly once in the series whatever crashes.

The week (``weeklog.make_week``): 7 daily files of combined-format lines in three time zones,
16,300 lines, 300..1,500 distinct clients a day out of 4,096 cells, written out of order by up to
50 minutes (a file starts with the previous evening's last lines). A replay declares its range
(``WindowSchedule.replay``: here the week), and every window of it is released at the end of the
input, in order, empty or not; the order of the lines in the files never matters.
"""

from __future__ import annotations

import gc
import io
import os
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from weeklog import DAY, HOUR, UNIVERSE, WEEK_START, Week, make_week

from panstream import estimators
from panstream.errors import ConfigurationError
from panstream.estimators.base import Estimator
from panstream.ingest import Input
from panstream.inputs.parser import Format
from panstream.sources import ChunkReader
from panstream.sources.windowed import WindowedIngestor, window_files, window_path
from panstream.telemetry import TelemetryPolicy
from panstream.universe import Universe
from panstream.windows import WindowSchedule
from panstream.windows.series import Series, read

U = Universe.parse(UNIVERSE)


@pytest.fixture(scope="module")
def week(tmp_path_factory: pytest.TempPathFactory) -> Week:
    return make_week(tmp_path_factory.mktemp("week"))


def _inputs(files: list[Path]) -> list[Input]:
    return [Input(p.name, ChunkReader(io.BytesIO(p.read_bytes()).readinto)) for p in files]


def week_range(size: int, first: int = 0, last: int = 7) -> WindowSchedule:
    """The declared range of days ``first`` .. ``last - 1`` of the week, in windows of ``size``."""
    return WindowSchedule.replay(size, WEEK_START + first * DAY, WEEK_START + last * DAY)


def _ingestor(size: int, *, kind: str = "density", eps: float = 1.0, eps_out: float = 0.5,
              made: list[Any] | None = None, days: tuple[int, int] = (0, 7),
              **kw: Any) -> WindowedIngestor:
    def make() -> Estimator:
        est = estimators.new(kind, U, eps, budget=eps_out)
        if made is not None:
            made.append(weakref.ref(est))
        return est

    if "schedule" not in kw and "time_mode" not in kw:
        kw["schedule"] = week_range(size, *days)
    return WindowedIngestor(make, U, Format("clf"), size, release_epsilon=eps_out, **kw)


def _misses(recs: list[dict[str, Any]], truth: dict[int, int]) -> int:
    assert sorted(r["start"] for r in recs) == sorted(truth)  # every window, once
    return sum(not (r["low"] <= truth[r["start"]] <= r["high"]) for r in recs)


def _with_strays(files: list[Path]) -> list[Input]:
    """The week's files with lines outside the declared week mixed in: 300 clients of the
    Sunday before at the head of Monday's file, 300 of the Monday after in the middle of the
    last file (late lines, as a log rotated by write time or a shipper's backlog holds). Counted,
    they would push a day's estimate far past its interval."""
    from weeklog import clf_time

    def strays(t0: int, base: int) -> bytes:
        return "".join(f'10.0.{(base + i) >> 8}.{(base + i) & 255} - - [{clf_time(t0 + 7 * i, 0)}] '
                       f'"GET / HTTP/1.1" 200 5 "-" "curl/8"\n' for i in range(300)).encode()

    data = [p.read_bytes() for p in files]
    data[0] = strays(WEEK_START - 3600, 3000) + data[0]
    mid = data[-1].index(b"\n", len(data[-1]) // 2) + 1
    data[-1] = data[-1][:mid] + strays(WEEK_START + 7 * DAY + 60, 3300) + data[-1][mid:]
    return [Input(p.name, ChunkReader(io.BytesIO(d).readinto)) for p, d in zip(files, data,
                                                                                 strict=True)]


# ------------------------------------------------------------------ accuracy
def test_a_week_gives_seven_daily_releases_covering_the_truth(week: Week) -> None:
    """A declared week replayed with late lines from the days around it: exactly the seven
    declared days, in order. 30 replays x 7 days = 210 intervals at 95 %. Failing needs >= 33
    misses: probability <= 5e-7 even if the (approximate, plug-in) intervals covered only 94 %;
    a table shared across days, lines put in the wrong day, or the late lines counted, misses
    most of them."""
    misses = 0
    for _ in range(30):
        recs: list[dict[str, Any]] = []
        stats = _ingestor(DAY, on_close=recs.append).run(_with_strays(week.files))
        assert stats.released == 7 and stats.open == 0
        assert [r["window"] for r in recs] == [f"2026-11-{16 + d}T00:00:00Z" for d in range(7)]
        misses += _misses(recs, week.per_day)
    assert misses < 33


def test_hourly_windows_cover_the_truth(week: Week) -> None:
    """2 replays x 168 hours = 336 intervals at 95 %; failing needs >= 45 misses (probability
    <= 5e-7 at 94 % coverage)."""
    misses = 0
    for _ in range(2):
        recs: list[dict[str, Any]] = []
        _ingestor(HOUR, on_close=recs.append).run(_inputs(week.files))
        misses += _misses(recs, week.per_hour)
    assert misses < 45


def test_frequency_windows_release_present_cells(week: Week) -> None:
    """The same contract for the frequency family: 5 replays x 7 days = 35 intervals of the present
    cells; failing needs >= 11 misses (probability <= 1e-6 at 94 % coverage)."""
    misses = 0
    for _ in range(5):
        recs: list[dict[str, Any]] = []
        _ingestor(DAY, kind="frequency", eps=2.0, eps_out=1.0, on_close=recs.append).run(
            _inputs(week.files))
        assert {r["family"] for r in recs} == {"frequency"}
        assert {r["statistic"] for r in recs} == {"present"}
        misses += _misses(recs, week.per_day)
    assert misses < 11


# ------------------------------------------------------------------ nothing remains
def test_a_closed_window_leaves_nothing_on_disk_or_in_memory(week: Week, tmp_path: Path) -> None:
    """A first run replays Monday to Thursday with --keep-open: its four windows stay in their
    state files. The next run declares the week, picks them up, and releases all seven at the end
    of its input: at each publication the window is already gone from disk and memory."""
    state = str(tmp_path / "web.pst")
    st1 = _ingestor(DAY, series=Series(tmp_path / "daily.jsonl"), state_path=state,
                    checkpoint_every=1e-9, close_at_end=False, days=(0, 4)).run(
        _inputs(week.files[:4]))
    assert st1.released == 0 and st1.open == 4
    # on disk: the four open windows' tables (nothing else: no lock, no temp file, no ledger)
    assert sorted(f for f in os.listdir(tmp_path) if f != "daily.jsonl") == \
        [f"web.202611{d}T000000Z.pst" for d in (16, 17, 18, 19)]
    made: list[Any] = []
    seen: list[str] = []
    holder: list[WindowedIngestor] = []

    def on_close(rec: dict[str, Any]) -> None:
        # at publication the window is already gone: no file of it, no table in memory
        assert rec["start"] not in holder[0].open_windows()
        assert not [f for f in os.listdir(tmp_path) if rec["window"][:10].replace("-", "") in f]
        seen.append(rec["window"])

    ing = _ingestor(DAY, made=made, series=Series(tmp_path / "daily.jsonl"), state_path=state,
                    on_close=on_close)
    holder.append(ing)
    st2 = ing.run(_inputs(week.files[3:]))
    assert st2.restored == 4 and st2.released == 7
    assert seen == [f"2026-11-{16 + d}T00:00:00Z" for d in range(7)]
    assert os.listdir(tmp_path) == ["daily.jsonl"]
    assert [r["window"] for r in read(tmp_path / "daily.jsonl")] == seen
    # in memory: the closed windows' tables were wiped and nothing refers to them any more
    del ing, holder[:]
    gc.collect()
    assert len(made) == 3 and [r() for r in made] == [None] * 3


def test_every_window_of_the_range_is_released_empty_or_not(week: Week) -> None:
    """Tuesday and Wednesday have (nearly) no line, Saturday and Sunday none at all: they are
    released all the same, as about 0. Which windows exist is the declared range's doing."""
    recs: list[dict[str, Any]] = []
    files = [week.files[0], week.files[3], week.files[4]]
    _ingestor(DAY, on_close=recs.append).run(_inputs(files))
    assert [r["window"][:10] for r in recs] == [f"2026-11-{16 + d}" for d in range(7)]
    truth = _distinct_by_day(files)
    assert truth.get("2026-11-17", 0) == 0  # Tuesday: not a line
    for r in recs:
        # within twice the 95 % interval's width of the truth (7.8 sd: < 1e-13 per window)
        t = truth.get(r["window"][:10], 0)
        assert abs(r["estimate"] - t) <= 2 * (r["high"] - r["low"])


def _distinct_by_day(files: list[Path]) -> dict[str, int]:
    """The true distinct clients per UTC day of CLF lines (``$time_local`` with its zone)."""
    import datetime as dt

    seen: dict[str, set[bytes]] = {}
    for f in files:
        for line in f.read_bytes().splitlines():
            stamp = line.split(b"[", 1)[1].split(b"]", 1)[0].decode()
            t = dt.datetime.strptime(stamp, "%d/%b/%Y:%H:%M:%S %z").astimezone(dt.timezone.utc)
            seen.setdefault(t.strftime("%Y-%m-%d"), set()).add(line.split(b" ", 1)[0])
    return {d: len(c) for d, c in seen.items()}


def test_lines_outside_the_range_are_dropped_and_counted_only_under_an_opt_in(
        week: Week) -> None:
    """A range that leaves Monday out: Monday's lines are dropped, and nothing else changes (the
    six windows of the range, in order). By default nothing counts them (the record says None);
    under --exact-counts the first record holds their number."""
    recs: list[dict[str, Any]] = []
    _ingestor(DAY, on_close=recs.append, days=(1, 7)).run(_inputs(week.files))
    assert [r["window"][:10] for r in recs] == [f"2026-11-{17 + d}" for d in range(6)]
    assert {r["late_records"] for r in recs} == {None}
    exact: list[dict[str, Any]] = []
    _ingestor(DAY, on_close=exact.append, telemetry=TelemetryPolicy.exact_counts(),
              days=(1, 7)).run(_inputs(week.files))
    # Monday's lines (weeklog) lie before --from: early, not late (issue 37 called them late)
    assert sum(r["early_records"] for r in exact) == 300 + 1500
    assert sum(r["late_records"] for r in exact) == 0
    assert sum(r["untimed_records"] for r in exact) == 0
    after: list[dict[str, Any]] = []  # a range that leaves Sunday out: Sunday's lines are late
    _ingestor(DAY, on_close=after.append, telemetry=TelemetryPolicy.exact_counts(),
              days=(0, 6)).run(_inputs(week.files))
    assert sum(r["early_records"] for r in after) == 0
    assert sum(r["late_records"] for r in after) > 0


def test_processing_time_windows_close_on_the_clock_not_on_arrivals(tmp_path: Path) -> None:
    """``tail -F``: lines belong to the window of the wall clock when they are read; a window
    closes at its end whether or not anything arrives, and an idle window is released too."""
    now = [float(WEEK_START + 10)]

    def feed() -> Any:
        # three chunks in the first minute, nothing in the second, one in the third
        for step, data in ((0, b"10.0.0.1\n10.0.0.2\n"), (20, b"10.0.0.3\n"), (20, b""),
                           (30, b""), (40, b""), (10, b"10.0.0.4\n"), (70, b"")):
            now[0] += step
            yield memoryview(data)

    class Reader:
        def __iter__(self) -> Any:
            return feed()

    recs: list[dict[str, Any]] = []
    small = Universe.parse("ipv4:10.0.0.0/28")  # 16 cells at epsilon 16: errors far below 1
    ing = WindowedIngestor(lambda: estimators.new("density", small, 16.0, budget=16.0), small,
                           Format("plain"), 60, release_epsilon=16.0, time_mode="processing",
                           close_at_end=False, on_close=recs.append,
                           wall_clock=lambda: now[0])
    stats = ing.run([Input("stdin", Reader())])  # type: ignore[arg-type]
    assert [r["window"][-9:] for r in recs] == ["00:00:00Z", "00:01:00Z", "00:02:00Z"]
    # |error| > 1 needs Laplace(1/16) noise beyond 1 (e^-16) or a flipped bit (q ~ 1e-7)
    assert np.allclose([r["estimate"] for r in recs], [3, 0, 1], atol=1.0)
    assert stats.open == 1  # 00:03 is open at the end: kept for the next run (here: no --state)


def test_state_files_need_a_series_and_matching_parameters(week: Week, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="--series"):
        _ingestor(DAY, state_path=str(tmp_path / "s.pst"))
    state = str(tmp_path / "s.pst")
    _ingestor(DAY, series=Series(tmp_path / "s.jsonl"), state_path=state,
              close_at_end=False, days=(0, 1)).run(_inputs(week.files[:1]))
    assert list(window_files(state)) == [WEEK_START]
    assert window_files(state)[WEEK_START] == window_path(state, WEEK_START)
    with pytest.raises(ConfigurationError, match="another --window"):
        _ingestor(7 * DAY, series=Series(tmp_path / "s.jsonl"), state_path=state,
                  time_mode="event").run([])
    from panstream.errors import StateError

    with pytest.raises(StateError):
        _ingestor(DAY, eps=2.0, series=Series(tmp_path / "s.jsonl"), state_path=state,
                  expect={"epsilon": 2.0}).run([])


def test_a_torn_series_line_is_cut_and_its_window_released_again(tmp_path: Path) -> None:
    p = tmp_path / "s.jsonl"
    s = Series(p)
    s.append({"window": "2026-11-16T00:00:00Z", "estimate": 1.0})
    with open(p, "ab") as f:
        f.write(b'{"window": "2026-11-17T00:00:00Z", "est')  # kill -9 mid-write
    s2 = Series(p)
    assert s2.released() == {"2026-11-16T00:00:00Z"}
    assert p.read_bytes().endswith(b"}\n")
    csv = Series(tmp_path / "s.csv")
    csv.append({"window": "2026-11-16T00:00:00Z", "start": 1, "end": 2, "estimate": 3.5})
    csv.append({"window": "2026-11-17T00:00:00Z", "start": 2, "end": 3, "estimate": 4.5})
    assert [r["estimate"] for r in read(tmp_path / "s.csv")] == [3.5, 4.5]
    lines = (tmp_path / "s.csv").read_text().splitlines()
    assert [ln.split(",")[0] for ln in lines] == ["window", *(f"2026-11-{d}T00:00:00Z" for d in (16, 17))]




def test_a_series_and_an_open_window_keep_their_window_length_and_epsilon(
        week: Week, tmp_path: Path) -> None:
    """Resuming with other settings could release a window at an epsilon it was not planned for,
    or take hourly windows for days already released: both are refused before any input."""
    series = Series(tmp_path / "d.jsonl")
    state = str(tmp_path / "d.pst")
    _ingestor(DAY, series=series, days=(0, 1)).run(_inputs(week.files[:1]))
    _ingestor(DAY, series=Series(tmp_path / "d.jsonl"), state_path=state, close_at_end=False,
              days=(1, 2)).run(_inputs(week.files[1:2]))
    assert len(read(tmp_path / "d.jsonl")) == 1 and len(window_files(state)) == 1
    with pytest.raises(ConfigurationError, match="holds windows of 1d, not 1h"):
        _ingestor(HOUR, series=Series(tmp_path / "d.jsonl"))
    with pytest.raises(ConfigurationError, match="one release at epsilon 0.5, not 0.25"):
        _ingestor(DAY, eps_out=0.25, series=Series(tmp_path / "d.jsonl"),
                  state_path=state).run([])
    assert len(window_files(state)) == 1  # untouched


def test_an_open_window_released_by_hand_is_not_released_again(week: Week, tmp_path: Path) -> None:
    """After a crash nothing holds the open window's lock: 'panstream release -s' on its file
    spends its one release. The next windowed run refuses it instead of releasing it twice."""
    series = Series(tmp_path / "d.jsonl")
    state = str(tmp_path / "d.pst")
    _ingestor(DAY, series=series, state_path=state, close_at_end=False, days=(0, 1)).run(
        _inputs(week.files[:1]))
    (path,) = window_files(state).values()
    estimators.release_file(path, 0.5)
    with pytest.raises(ConfigurationError, match="released from outside"):
        _ingestor(DAY, series=Series(tmp_path / "d.jsonl"), state_path=state).run([])


def test_progress_shows_the_clock_windows_and_file_offsets_only(week: Week) -> None:
    from panstream.cli.window_options import progress_line
    from panstream.sources import open_input

    lines: list[str] = []
    ing = _ingestor(DAY, on_progress=lambda s: lines.append(progress_line(s)),
                    progress_every=1e-9)

    def inputs() -> Any:
        for p in week.files:
            with open_input(str(p)) as f:
                yield Input(str(p), f.reader, f.position)

    ing.run(inputs())
    assert lines and all(ln.startswith("panstream: alive ") for ln in lines)
    assert any(" window(s) released, " in ln and "(100 %)" in ln for ln in lines)
    assert not any(w in ln for ln in lines for w in ("lines", "accepted", "items"))


def test_processing_time_after_the_current_window_was_released_drops_its_lines(
        tmp_path: Path) -> None:
    """--close-at-end released the current hour; a restart within that hour must not release it
    again: its lines are dropped (with a notice) until the next hour opens."""
    now = [float(WEEK_START + 100)]
    series = Series(tmp_path / "h.jsonl")
    series.append({"window": "2026-11-16T00:00:00Z", "start": WEEK_START, "end": WEEK_START + HOUR,
                   "estimate": 0.0, "low": 0.0, "high": 1.0})
    notes: list[str] = []
    recs: list[dict[str, Any]] = []

    def feed() -> Any:
        yield memoryview(b"10.0.0.1\n")
        now[0] += HOUR
        yield memoryview(b"10.0.0.2\n")

    class Reader:
        def __iter__(self) -> Any:
            return feed()

    WindowedIngestor(lambda: estimators.new("density", U, 1.0, budget=0.5), U, Format("plain"),
                     HOUR, release_epsilon=0.5, time_mode="processing", series=series,
                     on_close=recs.append, on_notice=notes.append,
                     wall_clock=lambda: now[0]).run([Input("stdin", Reader())])  # type: ignore[arg-type]
    assert [r["window"] for r in read(tmp_path / "h.jsonl")] == \
        ["2026-11-16T00:00:00Z", "2026-11-16T01:00:00Z"]
    assert any("already in the series" in n for n in notes)
