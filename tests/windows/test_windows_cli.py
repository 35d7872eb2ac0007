"""``panstream ingest --window`` from a user's point of view: kill -9 mid-week, a crash right after
a window's record, the metrics a dashboard scrapes, the series picture, the planner, and the
mistakes that get one clear line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from metrics_scrape import by_name, ingest_serving
from weeklog import UNIVERSE, Week, make_week

from panstream.cli.main import cli
from panstream.windows.series import plot_series, read

DAYS = [f"2026-11-{16 + d}T00:00:00Z" for d in range(7)]
WINDOW = ["ingest", "-u", UNIVERSE, "--window", "1d", "-f", "clf", "--release-epsilon", "0.5",
          "--from", "2026-11-16", "--to", "2026-11-23"]


@pytest.fixture(scope="module")
def week(tmp_path_factory: pytest.TempPathFactory) -> Week:
    return make_week(tmp_path_factory.mktemp("week"))


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PANSTREAM_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _panstream(*args: str, stdin: Any = subprocess.DEVNULL) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "panstream", *args], stdin=stdin,
                          capture_output=True, text=True, env=_env(), timeout=120, check=False)


def _wait(cond: Any, what: str, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _windows(series: Path) -> list[str]:
    return [r["window"] for r in read(series)] if series.exists() else []


def _close_to_truth(series: Path, week: Week) -> None:
    """Every estimate within twice its 95 % interval's width of the truth (7.8 sd: failing has
    probability < 1e-13 per window)."""
    for r in read(series):
        assert abs(r["estimate"] - week.per_day[r["start"]]) <= 2 * (r["high"] - r["low"])


KILL_AT_THURSDAY = """
import os, sys
import panstream.sources.windowed as w
checkpoint = w.WindowedIngestor.checkpoint
def kill(self, at=None):
    checkpoint(self, at)
    if self.stats.input.endswith("20261119"):  # kill -9 while Thursday's file is being read
        os._exit(9)
w.WindowedIngestor.checkpoint = kill
from panstream.cli.main import main
main(sys.argv[1:])
"""


def test_kill_9_mid_week_then_restart_gives_each_window_exactly_once(week: Week,
                                                                      tmp_path: Path) -> None:
    """A replay releases its windows at the end of its input: killed while reading Thursday, it
    has released nothing, and every window of the range is in its last checkpoint. The restart
    replays the week (a density table takes a line twice without harm: it only redraws that
    client's bit) and releases the seven days, each once; a third run releases nothing."""
    state, series = tmp_path / "web.pst", tmp_path / "daily.jsonl"
    args = [*WINDOW, "-s", str(state), "--series", str(series), "--checkpoint-every", "1e-6",
            *map(str, week.files)]
    r = subprocess.run([sys.executable, "-c", KILL_AT_THURSDAY, *args], capture_output=True,
                       text=True, env=_env(), timeout=120, check=False)
    assert r.returncode == 9, r.stderr
    assert _windows(series) == []
    assert sorted(p.name for p in tmp_path.glob("web.*.pst")) == \
        [f"web.202611{d}T000000Z.pst" for d in range(16, 23)]  # the range's, on schedule
    r = _panstream(*args[:-len(week.files)][:-2], *map(str, week.files))
    assert r.returncode == 0, r.stderr
    assert _windows(series) == DAYS
    assert sorted(os.listdir(tmp_path)) == ["daily.jsonl"]
    _close_to_truth(series, week)
    again = _panstream(*WINDOW, "-s", str(state), "--series", str(series),
                       *map(str, week.files))
    assert again.returncode == 0 and _windows(series) == DAYS  # nothing released twice
    assert "0 window(s) released" in again.stderr


CRASH_AFTER_RECORD = """
import os, sys
import panstream.sources.windowed as w
forget = w.WindowedIngestor._forget
def crash(self, win):
    if win.start in self._released:  # the record is durable, the table not yet removed
        os._exit(9)
    forget(self, win)
w.WindowedIngestor._forget = crash
from panstream.cli.main import main
main(sys.argv[1:])
"""


def test_a_crash_between_the_record_and_the_cleanup_never_releases_twice(
        week: Week, tmp_path: Path) -> None:
    state, series = tmp_path / "web.pst", tmp_path / "daily.jsonl"
    args = [*WINDOW, "-s", str(state), "--series", str(series), "--checkpoint-every", "1e-6",
            *map(str, week.files)]
    r = subprocess.run([sys.executable, "-c", CRASH_AFTER_RECORD, *args], capture_output=True,
                       text=True, env=_env(), timeout=120, check=False)
    assert r.returncode == 9
    assert _windows(series) == DAYS[:1]
    assert (tmp_path / "web.20261116T000000Z.pst").exists()  # Monday's table, already released
    r = _panstream(*args)
    assert r.returncode == 0, r.stderr
    assert "window 2026-11-16T00:00:00Z is already in the series" in r.stderr
    assert _windows(series) == DAYS
    assert sorted(os.listdir(tmp_path)) == ["daily.jsonl"]


def test_metrics_serve_the_last_closed_window_over_http(tmp_path: Path) -> None:
    """Live on standard input (processing time), 2-second windows in a declared range of two:
    each closes on the clock; the gauges then show the last one's release."""
    import math

    series = tmp_path / "live.jsonl"
    first = (math.ceil(time.time() / 2) + 2) * 2
    with ingest_serving("-u", UNIVERSE, "--window", "2s", "-f", "plain", "--release-epsilon",
                        "0.5", "--from", str(first), "--to", str(first + 4),
                        "--series", str(series)) as (proc, port):
        assert proc.stdin is not None
        assert by_name(port).get("panstream_window_estimate") is None  # nothing closed yet
        proc.stdin.write("10.0.0.1\n10.0.0.2\n")
        proc.stdin.flush()
        _wait(lambda: len(_windows(series)) == 2, "both windows released on the clock")
        # the series record is written, then the gauges set: wait for the second window's
        _wait(lambda: by_name(port).get("panstream_windows_released_total", ({}, 0))[1] == 2,
              "the gauges of the second window")
        got = by_name(port)
        last = read(series)[-1]
        labels, value = got["panstream_window_estimate"]
        # the window is a value, not a label (issue 37: a label made a new series per window)
        assert labels == {"statistic": "distinct", "family": "density"}
        assert last["start"] == first + 2
        assert got["panstream_window_start_seconds"] == ({}, last["start"])
        assert got["panstream_window_end_seconds"] == ({}, last["end"])
        assert got["panstream_windows_released_total"] == ({}, 2.0)  # a counter: _total
        assert last["released_at"] == first + 4  # the schedule's instant: its end
        assert value == pytest.approx(last["estimate"])
        assert got["panstream_window_low"][1] == pytest.approx(last["low"])
        assert got["panstream_window_high"][1] == pytest.approx(last["high"])
        assert got["panstream_window_epsilon"][1] == pytest.approx(last["epsilon_window"])
        # nothing about arrivals: only the release, its epsilon and how many windows closed
        assert set(got) == {"panstream_window_estimate", "panstream_window_low",
                            "panstream_window_high", "panstream_window_epsilon",
                            "panstream_window_start_seconds", "panstream_window_end_seconds",
                            "panstream_windows_released_total",
                            "panstream_windows_released_created"}
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0


def test_series_plot_draws_one_point_per_window(week: Week, tmp_path: Path) -> None:
    series = tmp_path / "daily.csv"
    r = _panstream(*WINDOW, "--series", str(series), "--json", *map(str, week.files))
    assert r.returncode == 0, r.stderr
    assert len([ln for ln in r.stdout.splitlines() if ln.startswith('{"window"')]) == 7
    png = tmp_path / "daily.png"
    p = _panstream("series", "plot", str(series), "-o", str(png))
    assert p.returncode == 0, p.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fig = plot_series(read(series), tmp_path / "again.png")
    line = fig.axes[0].lines[0]
    assert len(line.get_xdata()) == 7
    assert list(line.get_ydata()) == pytest.approx([rec["estimate"] for rec in read(series)])
    shown = _panstream("series", "show", str(series), "--horizon", "7d")
    assert shown.stdout.count("distinct") == 7
    assert "any 7d (any span of 7d meets at most 8 1d windows): 8 x 1.5 = 12" in shown.stdout


def test_series_plot_without_matplotlib_is_one_line(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    series = tmp_path / "s.jsonl"
    series.write_text('{"window": "2026-11-16T00:00:00Z", "start": 0, "end": 86400, '
                      '"estimate": 1, "low": 0, "high": 2}\n')
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    r = CliRunner().invoke(cli, ["series", "plot", str(series), "-o", str(tmp_path / "x.png")])
    assert r.exit_code != 0
    assert r.output.strip().splitlines() == [
        "panstream: error: plotting a series needs matplotlib: install the plot extra, "
        "pip install 'panstream[plot]'"]


def test_horizon_accounting_is_printed_and_planned(week: Week, tmp_path: Path) -> None:
    r = _panstream(*[a for a in WINDOW if a not in ("--release-epsilon", "0.5")],
                   "--total-epsilon", "12", "--horizon", "7d", "--series",
                   str(tmp_path / "s.jsonl"), str(week.files[0]))
    assert r.returncode == 0, r.stderr
    # any 7 x 24 hours meets 8 daily windows (one that does not start at midnight)
    assert "total epsilon 12 over 8 windows = 1.5 per window" in r.stderr
    assert "any 7d (any span of 7d meets at most 8 1d windows): 8 x 1.5 = 12" in r.stderr
    recs = read(tmp_path / "s.jsonl")
    assert recs and all(rec["epsilon_window"] <= 1.5 for rec in recs)
    p = _panstream("plan", "-u", UNIVERSE, "--total-epsilon", "12", "--window", "1d",
                   "--horizon", "7d")
    assert p.returncode == 0, p.stderr
    assert "total 12 = 8 windows x 1.5 per window" in p.stdout
    assert "total pan-private epsilon 1.5 = state + 1 release(s)" in p.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--window", "1d"], "--window needs --release-epsilon"),
    (["--lateness", "1h"], "--lateness go(es) with --window"),
    (["--window", "1d", "--release-epsilon", "1", "-s", "S"], "needs --series FILE"),
    (["--window", "1d", "--release-epsilon", "1", "--release-every", "60"], "drop --release-every"),
    (["--window", "1y", "--release-epsilon", "1"], "is not a duration"),
    (["--window", "1d", "--release-epsilon", "1", "-f", "plain", "--time", "event", "--from",
      "2026-11-16", "--to", "2026-11-17"], "carry no time"),
    (["--window", "1d", "--release-epsilon", "1", "-f", "clf"], "need a declared range"),
    (["--window", "1d", "--release-epsilon", "1", "-f", "clf", "--from", "2026-11-16T12:00Z",
      "--to", "2026-11-17"], "use 2026-11-16T00:00:00Z or 2026-11-17T00:00:00Z"),
    (["--window", "1d", "--release-epsilon", "1", "-f", "clf", "--from", "2026-11-16", "--to",
      "2026-11-17"], "not one line went into a window"),
    (["--from", "2026-11-16"], "--from go(es) with --window"),
])
def test_mistakes_get_one_line(args: list[str], message: str, tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("10.0.0.1\n")
    args = [a if a != "S" else str(tmp_path / "s.pst") for a in args]
    r = _panstream("ingest", "-u", UNIVERSE, *args, str(log))
    assert r.returncode != 0
    assert message in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("time_mode", ["event", "processing"])
def test_no_known_format_gets_the_line_plain_ingest_gives(time_mode: str, tmp_path: Path) -> None:
    """``-f auto`` on lines no known format fits: a windowed run says so as plain ``ingest``
    does (the same notice, the same loud-failure line, exit 1), instead of blaming the format
    ``'none'`` for carrying no time, or (processing time) exiting 0 with nothing counted. There is
    no ``--keep-going`` way out here: no window could place the lines."""
    log = tmp_path / "prose.log"
    log.write_text("hello world foo\nbar baz qux\nzip zap\n")
    plain = _panstream("ingest", "-u", UNIVERSE, "-f", "auto", str(log))
    windowed = _panstream("ingest", "-u", UNIVERSE, "--window", "1d", "--release-epsilon", "1",
                          "--time", time_mode, "--from", "2026-11-16", "--to", "2026-11-17",
                          "-f", "auto", str(log)) if time_mode == "event" else \
        _panstream("ingest", "-u", UNIVERSE, "--window", "1d", "--release-epsilon", "1",
                   "--time", time_mode, "-f", "auto", str(log))
    assert plain.returncode == windowed.returncode == 1, windowed.stderr
    assert "carry no time" not in windowed.stderr and "'none'" not in windowed.stderr
    notice = f"panstream: {log}: no known log format fits its first lines: "
    said = [ln for ln in windowed.stderr.splitlines() if ln.startswith(notice)]
    assert said and said == [ln for ln in plain.stderr.splitlines() if ln.startswith(notice)]
    error = windowed.stderr.strip().splitlines()[-1]
    assert error.startswith("panstream: error: no known log format fits the first lines "
                            "(-f auto found none): name the format, -f field:N")
    assert "--keep-going" not in error
    assert plain.stderr.strip().splitlines()[-1].startswith(error)  # plain's adds --keep-going
    assert "Traceback" not in windowed.stderr


def test_processing_time_on_stdin_and_a_signal_keep_the_open_window(tmp_path: Path) -> None:
    """stdin defaults to processing time; SIGTERM checkpoints the open window and exits 0 without
    releasing it; the next run resumes it and, with --close-at-end, releases it once."""
    import signal

    state, series = tmp_path / "live.pst", tmp_path / "hourly.jsonl"
    args = ["ingest", "-u", UNIVERSE, "--window", "1h", "--release-epsilon", "1", "-f", "plain",
            "-s", str(state), "--series", str(series), "--checkpoint-every", "0.05"]
    proc = subprocess.Popen([sys.executable, "-m", "panstream", *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    try:
        assert proc.stdin is not None
        proc.stdin.write(b"10.0.0.1\n10.0.0.2\n")
        proc.stdin.flush()
        _wait(lambda: any(p.suffix == ".pst" for p in tmp_path.iterdir()), "a checkpoint")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert b"processing time" in err and out == b""
    assert not series.exists()
    kept = [p.name for p in tmp_path.iterdir() if p.suffix == ".pst"]
    assert len(kept) == 1
    stamp = re.search(r"\.(\d{8})T(\d{2})0000Z\.pst$", kept[0])
    assert stamp is not None
    hour = f"{stamp[1][:4]}-{stamp[1][4:6]}-{stamp[1][6:]}T{stamp[2]}:00:00Z"
    r = _panstream(*args, "--close-at-end", stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    # that hour once (and, if the clock crossed an hour meanwhile, the new hour after it)
    windows = _windows(series)
    assert windows[0] == hour and len(set(windows)) == len(windows) <= 2
    assert sorted(os.listdir(tmp_path)) == ["hourly.jsonl"]


def test_two_runs_never_write_one_series_at_once(week: Week, tmp_path: Path) -> None:
    """Two ingests appending to one series could each release the same window: the second is
    refused before it reads the series."""
    from panstream.state.files import state_lock

    series = tmp_path / "daily.jsonl"
    with state_lock(str(series), "another ingest"):
        r = _panstream(*WINDOW, "--series", str(series), str(week.files[0]))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "is being written by another 'panstream ingest --window'" in r.stderr
    assert not series.exists()


def test_a_range_whose_tables_do_not_fit_in_memory_is_refused_before_any_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A replay holds every window of its declared range at once (which windows exist must not
    # depend on the lines), so 3 years of weekly tables of the whole IPv4 space (76 GiB) once
    # swapped a 23 GiB machine to a halt. Now: one line, exit 2, nothing released. The
    # machine's available memory is pinned here so the test means the same everywhere.
    import panstream.windows.ingestor as ingestor

    monkeypatch.setattr(ingestor, "memory_available", lambda: 3 * 2**20)  # 3 MiB
    log = tmp_path / "access.log"
    log.write_bytes(b'10.0.0.1 - - [17/Nov/2026:10:00:00 +0000] "GET / HTTP/1.1" 200 5\n')
    r = CliRunner().invoke(cli, [*WINDOW, str(log)])  # 7 tables of 64 KiB: they fit
    assert r.exit_code == 0, r.output
    args = ["ingest", "-u", "ipv4:10.0.0.0/8", "--window", "1d", "-f", "clf", "--release-epsilon",
            "0.5", "--from", "2026-11-16", "--to", "2026-11-23", str(log)]
    r = CliRunner().invoke(cli, args)  # 7 tables of 16 MiB (2**24 cells, one byte each)
    err = r.output.splitlines()
    assert r.exit_code == 2 and err[-1].startswith("panstream: error: 7 windows of ipv4:10.0.0.0/8 "
                                                   "held open at once need 0.1 GiB"), r.output
    assert "more than the 0.0 GiB this machine has available" in err[-1] and "hashed-ip:M" in err[-1]
    assert "window 2026-11" not in r.output  # nothing released
