"""The small things of issue 20: no second copy of a table after a second Ctrl+C, usage errors in
one line, ``plan | head -1`` exits 0, ``--plot`` without matplotlib refused before anything is
spent or written, and ``bench_accuracy --quick`` leaves the tracked results alone."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from fakes import hide_module

import panstream as ps
from panstream.cli.main import cli
from panstream.state.files import state_lock, temp_path

ROOT = Path(__file__).resolve().parents[2]

# A 'panstream ingest' whose disk is slow: each save pauses after its first 1 MiB is written, so the
# test can send the second Ctrl+C while a half-written temporary file is on disk. It touches the
# file named by READY_FILE once its Ctrl+C handler is installed (a fixed sleep was too short for a
# start-up on a loaded machine: the first SIGINT then killed the process before it had a handler).
_SLOW_SAVE = textwrap.dedent("""
    import os, pathlib, signal, time
    real_signal = signal.signal
    def announcing(sig, handler):
        old = real_signal(sig, handler)
        if sig == signal.SIGINT and callable(handler):
            pathlib.Path(os.environ["READY_FILE"]).touch()
        return old
    signal.signal = announcing
    import panstream.state.files as files
    real = files._write_all
    def slow(fd, mv):
        real(fd, mv[: 1 << 20])
        time.sleep(30)
        real(fd, mv[1 << 20:])
    files._write_all = slow
    from panstream.cli.main import main
    main()
""")


def test_a_second_ctrl_c_during_a_save_leaves_no_temporary_copy(tmp_path: Path) -> None:
    state = tmp_path / "big.pst"
    tmp = Path(temp_path(state))
    ready = tmp_path / "ready"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PANSTREAM_")}
    env["READY_FILE"] = str(ready)
    p = subprocess.Popen([sys.executable, "-c", _SLOW_SAVE, "ingest", "-u", "range:67108864",
                          "-s", str(state), "-f", "plain"], stdin=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    assert p.stdin is not None
    p.stdin.write(b"1\n2\n3\n")
    p.stdin.flush()
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():  # started, its Ctrl+C handler installed
            assert time.monotonic() < deadline and p.poll() is None, p.stderr
            time.sleep(0.05)
        time.sleep(0.5)  # reading (the pipe stays open: a tail -F)
        p.send_signal(signal.SIGINT)  # first: stop and write the final checkpoint (8 MiB table)
        deadline = time.monotonic() + 60
        while not tmp.exists():
            assert time.monotonic() < deadline and p.poll() is None, p.stderr
            time.sleep(0.05)
        p.send_signal(signal.SIGINT)  # second, while the save is half-way
        assert p.wait(timeout=30) == 130
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert not tmp.exists(), "a half-written second copy of the table was left on disk"
    assert not state.exists()  # the save never completed: no state, no copy


def test_a_stale_temporary_file_is_removed_by_the_next_holder_of_the_lock(tmp_path: Path) -> None:
    state = tmp_path / "s.pst"
    ps.DensityEstimator("range:1024").save(state)
    stale = Path(temp_path(state))
    stale.write_bytes(b"\0" * 4096)  # as a kill -9 during a save leaves it
    with state_lock(state, "a test"):
        assert not stale.exists()
    stale.write_bytes(b"\0" * 4096)
    res = CliRunner().invoke(cli, ["release", "-s", str(state), "--epsilon", "0.5"])
    assert res.exit_code == 0 and not stale.exists()


@pytest.mark.parametrize(("args", "needle"), [
    (["ingest", "--epsilon", "-1"], "Invalid value for '--epsilon'"),
    (["release", "-s", "x.pst"], "Missing option '--epsilon'"),
    (["plan"], "give -u/--universe"),
    (["nosuch"], "No such command 'nosuch'"),
    (["plan", "-u", "ipv4:10.0.0.1/16", "--epsilon", "1"], "host bits"),
])
def test_usage_errors_are_one_line_as_docs_cli_promises(args: list[str], needle: str) -> None:
    r = subprocess.run([sys.executable, "-m", "panstream", *args], capture_output=True,
                       stdin=subprocess.DEVNULL, timeout=60, check=False)
    err = r.stderr.decode()
    assert r.returncode == 2 and err.count("\n") == 1, err
    assert err.startswith("panstream: error: ") and needle in err and "--help')" in err


def test_plan_into_a_closed_pipe_exits_0_quietly() -> None:
    p = subprocess.Popen([sys.executable, "-m", "panstream", "plan", "-u", "ipv4:10.0.0.0/16",
                          "--epsilon", "1", "--by", "/24"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # as `| head -1` does once it has its line
    err = p.stderr.read()
    assert p.wait(timeout=60) == 0 and err == b""


def test_plot_without_matplotlib_is_refused_before_the_csv_or_the_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "s.pst"
    ps.DensityEstimator("ipv4:10.0.0.0/20", budget=1.0).save(state)
    restore_import = hide_module(monkeypatch, "matplotlib")
    csv = tmp_path / "map.csv"
    res = CliRunner().invoke(cli, ["release", "-s", str(state), "--epsilon", "0.5", "--by", "/24",
                                   "--csv", str(csv), "--plot", str(tmp_path / "map.png")])
    assert res.exit_code == 2 and "panstream[plot]" in res.output and "--csv" in res.output
    assert res.output.count("\n") == 1 and not csv.exists()
    restore_import()
    assert ps.DensityEstimator.load(state).ledger.spent == 0


def test_bench_accuracy_quick_does_not_overwrite_the_tracked_results() -> None:
    spec = importlib.util.spec_from_file_location("bench_accuracy",
                                                  ROOT / "bench" / "bench_accuracy.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.out_path(None, False) == "bench/results/accuracy.md"
    assert mod.out_path(None, True) == "bench/results/accuracy-quick.md"
    assert mod.out_path("x.md", True) == "x.md"
    assert "bench/results/accuracy-quick.md" in (ROOT / ".gitignore").read_text()
