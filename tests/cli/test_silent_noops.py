"""Issue 37: nothing a run does is silent, and ``-`` is standard input with every option.

Each way a run used to end with exit 0 and not a word about what it did (or did not do) now says
so in one line, or exits non-zero:

* ``-`` reads standard input in every ingest mode that takes FILEs (with ``--window`` it said
  ``cannot open -``), and the declared-range message names standard input, not "files";
* an input that held no log line (an empty file or pipe, blank or header lines only) is said
  once, and a state created over it says that it is empty;
* a run without ``-s`` says at its start that the table is discarded at exit (not an error: a
  run whose periodic releases are its output needs no state);
* a replay whose declared ``--from``/``--to`` misses every line exits 2 instead of publishing
  the range's empty windows, and under ``--exact-counts`` calls lines years before the range
  early, not late;
* Ctrl+C exits 130 (after the final checkpoint and the summary), as shells report an
  interrupted command and ``set -e`` scripts expect; SIGTERM, a service manager's stop, stays 0;
* W3C/Zeek ``#`` lines are counted as headers, not as empty lines; binary input is called
  binary, with a hint to decompress it, not "lines of no known format".

And privacy review 5, W1d: whether a replay's exit status is 0 or 2 no longer depends on a line
dropped as out of range (the attack below: two inputs that differ by one such line print the same
and exit the same).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from panstream.estimators.density import DensityEstimator
from panstream.windows.series import read

pytestmark = pytest.mark.usefixtures("clean_env")
U = "ipv4:10.0.0.0/16"
Run = Callable[..., subprocess.CompletedProcess[bytes]]
WINDOW = ["--window", "1d", "--release-epsilon", "0.5", "-f", "clf"]
RANGE = ["--from", "2026-11-16", "--to", "2026-11-18"]  # two daily windows


def clf(n: int, day: int = 17, offset: int = 0) -> bytes:
    """``n`` CLF lines of distinct clients, stamped on 2026-11-``day``."""
    return b"".join(f'10.0.{(i + offset) // 250}.{(i + offset) % 250} - - [{day:02d}/Nov/2026:'
                    f'10:00:00 +0000] "GET / HTTP/1.1" 200 5\n'.encode() for i in range(n))


def stderr(r: subprocess.CompletedProcess[bytes]) -> str:
    return r.stderr.decode()


def jsons(r: subprocess.CompletedProcess[bytes]) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in r.stdout.decode().splitlines() if ln.startswith("{")]


# ------------------------------------------------------------------ '-' with every option
def test_dash_reads_standard_input_in_plain_ingest_alone_and_among_files(
        tmp_path: Path, run_cli: Run) -> None:
    a = tmp_path / "a.log"
    a.write_bytes(clf(30))
    for args, stdin, accepted in ((["-"], clf(20, offset=100), 20),
                                  ([str(a), "-"], clf(20, offset=100), 50)):
        r = run_cli(["ingest", "-u", U, "-f", "clf", "--exact-counts", "--json", *args],
                    stdin=stdin)
        assert r.returncode == 0, stderr(r)
        assert jsons(r)[-1]["summary"]["accepted"] == accepted


@pytest.mark.parametrize("mode", ["replay of '-'", "replay of a file and '-'", "processing"])
def test_dash_reads_standard_input_with_window(mode: str, tmp_path: Path, run_cli: Run) -> None:
    """``ingest --window ... -`` said ``cannot open -: No such file or directory``. Now ``-``
    among FILEs is standard input read to its end: a replay of the declared range (event time,
    the default for FILEs), alone or with files; with ``--time processing`` windows on the clock
    as without FILE."""
    a = tmp_path / "a.log"
    a.write_bytes(clf(30, day=16))
    args = {"replay of '-'": [*RANGE, "-"],
            "replay of a file and '-'": [*RANGE, str(a), "-"],
            "processing": ["--time", "processing", "--close-at-end", "-"]}[mode]
    r = run_cli(["ingest", "-u", U, *WINDOW, "--json", *args], stdin=clf(40))
    assert r.returncode == 0, stderr(r)
    assert "cannot open -" not in stderr(r)
    windows = [d["window"] for d in jsons(r) if "window" in d]
    assert len(windows) == (1 if mode == "processing" else 2)


def test_the_declared_range_message_names_standard_input(run_cli: Run) -> None:
    r = run_cli(["ingest", "-u", U, *WINDOW, "-"], stdin=clf(5))
    assert r.returncode == 2
    err = stderr(r).strip().splitlines()
    assert len(err) == 1 and "Traceback" not in stderr(r)
    assert err[0].startswith("panstream: error: event-time windows over standard input ('-': "
                             "read to its end as a replay; for a live stream such as tail -F "
                             "give no FILE, its windows run on the clock) need a declared range")
    assert "over files" not in err[0]


# ------------------------------------------------------------------ an input with no log line
@pytest.mark.parametrize("where", ["file", "stdin"])
@pytest.mark.parametrize("data", [b"", b"\n \n\n", b"#Version: 1.0\n#Fields: date time c-ip\n"],
                         ids=["nothing", "blank lines", "a W3C header only"])
def test_an_input_with_no_log_line_is_said_and_so_is_the_empty_state(
        where: str, data: bytes, tmp_path: Path, run_cli: Run) -> None:
    """An empty input used to pass in silence, and a release of the new state then printed "118
    [0, 331]". Now one notice names the input (never a count), and the summary says the state
    was created over no log line. The state is still written: an empty table is a valid start
    that a later run resumes."""
    state = tmp_path / "e.pst"
    log = tmp_path / "empty.log"
    log.write_bytes(data)
    name, args, stdin = ((str(log), [str(log)], None) if where == "file"
                         else ("standard input", [], data))
    r = run_cli(["ingest", "-u", U, "-s", str(state), *args], stdin=stdin)
    assert r.returncode == 0, stderr(r)
    assert (f"panstream: {name} held no log line (it was empty, or blank or header lines only): "
            "nothing of it went into the table") in stderr(r).splitlines()
    assert f"state {state} (created over no log line: an empty table" in stderr(r)
    assert DensityEstimator.load(state).ledger.spent == 0  # written, nothing released


def test_an_input_with_lines_gets_no_such_notice_and_keep_going_waives_it(
        tmp_path: Path, run_cli: Run) -> None:
    r = run_cli(["ingest", "-u", U, "-s", str(tmp_path / "s.pst")], stdin=clf(3))
    assert r.returncode == 0 and "held no log line" not in stderr(r)
    assert "(created)" in stderr(r)
    r = run_cli(["ingest", "-u", U, "--keep-going"], stdin=b"")  # no sample is judged
    assert r.returncode == 0 and "held no log line" not in stderr(r)


# ------------------------------------------------------------------ no -s
def test_a_run_without_state_says_the_table_is_discarded_and_is_no_error(
        tmp_path: Path, run_cli: Run) -> None:
    r = run_cli(["ingest", "-u", U], stdin=clf(5))
    assert r.returncode == 0
    assert stderr(r).splitlines()[0] == ("panstream: no --state given: the table is discarded at "
                                         "exit; pass -s FILE to keep it")
    # a run whose periodic releases are its output: the same line, saying so, still exit 0
    r = run_cli(["ingest", "-u", U, "--release-every", "0.001", "--release-epsilon", "0.1",
                 "--budget", "0.1"], stdin=clf(5))
    assert r.returncode == 0 and r.stdout.startswith(b"release: ")
    assert ("no --state given: the table is discarded at exit (the periodic releases are this "
            "run's only output); pass -s FILE to keep it") in stderr(r)
    r = run_cli(["ingest", "-u", U, "-s", str(tmp_path / "s.pst")], stdin=clf(5))
    assert "no --state given" not in stderr(r)


# ------------------------------------------------------------------ a range that misses
def test_a_declared_range_that_misses_every_line_exits_2_and_publishes_nothing(
        tmp_path: Path, run_cli: Run) -> None:
    """Lines of 2026 replayed into a range of 2020: two empty windows used to be published (and
    recorded in the series, where a corrected rerun then refused them), exit 0; with
    ``--exact-counts`` the dropped lines were called "late" although they are years early."""
    log, series, state = tmp_path / "a.log", tmp_path / "s.jsonl", tmp_path / "w.pst"
    log.write_bytes(clf(40))
    miss = ["--from", "2020-01-01", "--to", "2020-01-03"]
    r = run_cli(["ingest", "-u", U, *WINDOW, *miss, "--series", str(series), "-s", str(state),
                 str(log)])
    assert r.returncode == 2 and r.stdout == b""
    err = [ln for ln in stderr(r).splitlines() if ln.startswith("panstream: error:")]
    assert len(err) == 1 and err[0].startswith(
        "panstream: error: not one line went into a window of the declared range "
        "2020-01-01T00:00:00Z .. 2020-01-03T00:00:00Z: either their times lie outside it")
    assert "nothing was released and the range's empty windows were dropped" in err[0]
    assert not series.exists() or read(series) == []
    assert not list(tmp_path.glob("w.*.pst"))  # no empty window kept for the next run either
    # the corrected range then works, in the same series
    r = run_cli(["ingest", "-u", U, *WINDOW, *RANGE, "--series", str(series), "-s", str(state),
                 str(log)])
    assert r.returncode == 0, stderr(r)
    assert [rec["window"][:10] for rec in read(series)] == ["2026-11-16", "2026-11-17"]
    # counts opted into: lines years before the range are early (they were called late), lines
    # after it late
    r = run_cli(["ingest", "-u", U, *WINDOW, "--from", "2030-01-01", "--to", "2030-01-03",
                 "--exact-counts", str(log)])
    assert r.returncode == 2
    assert "(dropped lines: early ~40, late ~0, untimed ~0 (sd 0.0))" in stderr(r)
    r = run_cli(["ingest", "-u", U, *WINDOW, *miss, "--exact-counts", str(log)])
    assert "(dropped lines: early ~0, late ~40, untimed ~0 (sd 0.0))" in stderr(r)


@pytest.mark.parametrize("source", ["stdin", "dash"])
def test_processing_time_over_a_range_already_past_is_refused_before_reading(
        source: str, tmp_path: Path, run_cli: Run) -> None:
    """``--time processing`` stamps each line with the clock, so a declared range that ended before
    the run began can hold no line: it used to drop every line and exit 0 without a word. Now one
    line, exit 2, before any line is read (decided from the clock and the range: no data)."""
    argv = ["ingest", "-u", U, "--window", "1d", "--release-epsilon", "0.5", "-f", "clf",
            "--time", "processing", "--from", "2020-01-01", "--to", "2020-01-03",
            "-s", str(tmp_path / "w.pst"), "--series", str(tmp_path / "s.jsonl"),
            *(["-"] if source == "dash" else [])]
    r = run_cli(argv, stdin=clf(40))
    assert r.returncode == 2 and r.stdout == b"", stderr(r)
    err = [ln for ln in stderr(r).splitlines() if ln.startswith("panstream: error:")]
    assert len(err) == 1 and "the declared range ends at 2020-01-03T00:00:00Z, before now" in err[0]
    assert "Use --time event" in err[0] and "nothing was read" in err[0]


def test_w1d_one_line_dropped_as_out_of_range_does_not_move_the_exit_status(
        tmp_path: Path, run_cli: Run) -> None:
    """Privacy review 5, W1d: a replay exited 2 when no line of an input had a readable time and
    0 otherwise, and a line with a readable time *outside* the declared range counted: one such
    line (a person's, say) moved the exit status although it goes into no window (certified
    epsilon >= 4.18 against the 1.5 printed). The verdict is now one bit of the whole run,
    whether any line went into a window, so the two inputs below, which differ by one
    out-of-range line, exit the same and print the same, byte for byte."""
    untimed = b"".join(f'10.0.0.{i} - - [not a time] "GET / HTTP/1.1" 200 5\n'.encode()
                       for i in range(50))
    target = clf(1, day=1)  # 2026-11-01: outside the range, with a readable time

    def world(data: bytes) -> subprocess.CompletedProcess[bytes]:
        log = tmp_path / "a.log"
        log.write_bytes(data)
        return run_cli(["ingest", "-u", U, *WINDOW, *RANGE, str(log)])

    without, with_target = world(untimed), world(untimed[:-1] + b"\n" + target)
    assert without.returncode == with_target.returncode == 2
    assert (without.stdout, without.stderr) == (with_target.stdout, with_target.stderr)
    # and beside lines that go into the windows: exit 0 both, the same lines on stdout
    placed = clf(30)
    a, b = world(placed + untimed), world(placed + untimed + target)
    assert a.returncode == b.returncode == 0
    shape = [(len(x.stdout.splitlines()), len(x.stderr.splitlines())) for x in (a, b)]
    assert shape[0] == shape[1]


# ------------------------------------------------------------------ Ctrl+C
def _any_file(directory: Path, pattern: str) -> bool:
    return any(directory.glob(pattern))


@contextlib.contextmanager
def _started(cmd: list[str], ready: Callable[[], bool]) -> Iterator[subprocess.Popen[bytes]]:
    """A run reading a pipe that stays open (a tail -F), once ``ready``; killed if still alive at
    the end."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PANSTREAM_")}
    p = subprocess.Popen([sys.executable, "-m", "panstream", *cmd], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(lambda: (p.kill(), p.wait()) if p.poll() is None else None)
        assert p.stdin is not None
        p.stdin.write(clf(100))
        p.stdin.flush()
        deadline = time.monotonic() + 60
        while not ready():  # a checkpoint is written: the loop runs, its signal handlers are set
            assert time.monotonic() < deadline and p.poll() is None, "the run did not start"
            time.sleep(0.05)
        yield p


@pytest.mark.parametrize("windowed", [False, True], ids=["ingest", "ingest --window"])
def test_ctrl_c_exits_130_after_the_final_checkpoint(windowed: bool, tmp_path: Path) -> None:
    """Ctrl+C (SIGINT) used to exit 0, so ``panstream ingest ... && next-step`` went on as if the
    input had ended. Now: the final checkpoint, the summary, then exit 130 (128 + 2)."""
    state = tmp_path / "s.pst"
    if windowed:
        cmd = ["ingest", "-u", U, "--window", "1d", "--release-epsilon", "0.5", "-f", "clf",
               "--time", "processing", "-s", str(state), "--series", str(tmp_path / "s.jsonl"),
               "--checkpoint-every", "0.1"]
        ready: Callable[[], bool] = partial(_any_file, tmp_path, "s.*.pst")
    else:
        cmd = ["ingest", "-u", U, "-f", "clf", "-s", str(state), "--checkpoint-every", "0.1"]
        ready = state.exists
    with _started(cmd, ready) as p:
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err.decode()
    assert "[interrupted]" in err.decode() and b"Traceback" not in err
    if windowed:
        assert "1 open window(s) kept in" in err.decode()
        (window,) = tmp_path.glob("s.*.pst")
        DensityEstimator.load(window)
    else:
        assert DensityEstimator.load(state).estimate().distinct is not None


# ------------------------------------------------------------------ headers, binary input
def test_w3c_header_lines_are_counted_as_headers_not_empty(tmp_path: Path, run_cli: Run) -> None:
    log = tmp_path / "cf.log"
    log.write_bytes(b"#Version: 1.0\n#Fields: date time c-ip cs-method\n"
                    + b"".join(f"2026-11-24\t10:00:00\t10.0.0.{i}\tGET\n".encode()
                               for i in range(10)) + b"\n")
    r = run_cli(["ingest", "-u", U, "--exact-counts", str(log)])
    assert r.returncode == 0, stderr(r)
    assert "10 accepted, 0 malformed, 0 outside ipv4:10.0.0.0/16, 1 empty, 2 header/comment" \
        in stderr(r)
    s = jsons(run_cli(["ingest", "-u", U, "--exact-counts", "--json", str(log)]))[-1]["summary"]
    assert (s["headers"], s["empty"], s["lines"]) == (2, 1, 13)


@pytest.mark.parametrize("data", [bytes(range(256)) * 20, b"PK\x03\x04\x14\x00\x00\x00" * 100],
                         ids=["binary", "zip"])
@pytest.mark.parametrize("where", ["file", "stdin"])
def test_binary_input_is_called_binary_with_a_hint_to_decompress(
        data: bytes, where: str, tmp_path: Path, run_cli: Run) -> None:
    log = tmp_path / "blob"
    log.write_bytes(data)
    r = run_cli(["ingest", "-u", U, *([str(log)] if where == "file" else [])],
                stdin=None if where == "file" else data)
    assert r.returncode == 1 and "Traceback" not in stderr(r)
    error = stderr(r).strip().splitlines()[-1]
    assert error.startswith("panstream: error: the input is binary data, not text lines")
    assert "decompress it first (unzip -p FILE.zip" in error
    assert "lines of no known format" not in stderr(r)
