"""``panstream ingest``, ``inspect`` and ``plan`` from a user's point of view: options, env vars,
errors, real pipelines, resume, crash and signals."""

from __future__ import annotations

import gzip
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from panstream.cli.main import cli
from panstream.estimators.density import DensityEstimator

pytestmark = pytest.mark.usefixtures("clean_env")
U = "ipv4:10.0.0.0/16"


def invoke(args: list[str], input: bytes | None = None, env: dict[str, str] | None = None):
    return CliRunner().invoke(cli, args, input=input, env=env, catch_exceptions=False)


def summary(out: str) -> dict:
    lines = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    return next(d["summary"] for d in lines if "summary" in d)


# ------------------------------------------------------------------ options, env vars, errors
def test_ingest_stdin_counts_and_creates_state(tmp_path: Path) -> None:
    state = tmp_path / "s.pst"
    data = b"10.0.77.1\n10.0.77.2\n11.0.0.1\nnot-an-ip\n\n10.0.0.01\n"
    r = invoke(["ingest", "-u", U, "-s", str(state), "-f", "plain", "--json", "--exact-counts"],
               input=data)
    assert r.exit_code == 0, r.output
    s = summary(r.stdout)
    assert (s["lines"], s["accepted"], s["outside"], s["malformed"], s["empty"]) == (6, 2, 1, 2, 1)
    assert state.exists() and s["resumed"] is False and s["checkpoints"] == 1
    saved = state.read_bytes()
    assert b"10.0.77" not in saved and b"not-an-ip" not in saved  # only table and parameters


def test_env_vars_configure_everything(tmp_path: Path) -> None:
    state = tmp_path / "e.pst"
    env = {"PANSTREAM_UNIVERSE": U, "PANSTREAM_STATE": str(state), "PANSTREAM_EPSILON": "0.5",
           "PANSTREAM_CALIBRATION": "paper", "PANSTREAM_FORMAT": "clf", "PANSTREAM_JSON": "1",
           "PANSTREAM_EXACT_COUNTS": "1"}
    r = invoke(["ingest"], input=b'10.0.0.9 - - [x] "GET /" 200 1\n', env=env)
    assert r.exit_code == 0, r.output
    assert summary(r.stdout)["accepted"] == 1
    est = DensityEstimator.load(state)
    assert (est.epsilon, est.calibration) == (0.5, "paper")
    # an explicit flag wins over the environment
    r = invoke(["ingest", "--format", "plain"], input=b"10.0.0.9\n", env=env)
    assert summary(r.stdout)["accepted"] == 1
    assert "PANSTREAM_FORMAT" in invoke(["ingest", "--help"]).output


@pytest.mark.parametrize("args, needle", [
    (["ingest", "-u", "ipv4:10.0.0.1/16"], "host bits"),
    (["ingest", "-u", U, "--format", "xml"], "unknown log format"),
    (["ingest", "-u", U, "--release-every", "5"], "--release-epsilon"),
    (["ingest"], "--universe is required"),
    (["plan", "-u", U], "give exactly one of --epsilon"),
    (["plan", "-u", U, "--epsilon", "1", "--total-epsilon", "2"], "give exactly one of --epsilon"),
    (["plan", "-u", U, "--epsilon", "1", "--releases", "2"], "go with --total-epsilon"),
    (["ingest", "-u", U, "--total-epsilon", "2", "--budget", "1"], "drop --budget"),
    (["ingest", "--total-epsilon", "2"], "--total-epsilon needs --universe"),
])
def test_usage_errors_exit_2_with_one_line(args: list[str], needle: str) -> None:
    r = invoke(args, input=b"")
    assert r.exit_code == 2
    assert needle in r.output and "Traceback" not in r.output


def test_resume_with_contradicting_parameters_is_an_error(tmp_path: Path) -> None:
    state = tmp_path / "s.pst"
    assert invoke(["ingest", "-u", U, "-s", str(state)], input=b"10.0.0.1\n").exit_code == 0
    before = state.read_bytes()
    for extra in (["-u", "ipv4:10.0.0.0/24"], ["--epsilon", "2"], ["--calibration", "paper"]):
        r = invoke(["ingest", "-s", str(state), *extra], input=b"10.0.0.1\n")
        assert r.exit_code != 0 and r.output.count("\n") == 1 and "resume with" in r.output
    assert state.read_bytes() == before
    # no parameters: taken from the state
    assert invoke(["ingest", "-s", str(state)], input=b"10.0.0.1\n").exit_code == 0


def test_corrupt_state_is_one_line_runtime_error(tmp_path: Path) -> None:
    state = tmp_path / "bad.pst"
    state.write_bytes(b"10.0.0.1\n" * 100)
    r = invoke(["ingest", "-u", U, "-s", str(state)], input=b"10.0.0.1\n")
    assert r.exit_code == 1 and r.output.startswith("panstream: error:")
    assert invoke(["inspect", "-s", str(tmp_path / "none.pst")]).exit_code == 1


def test_missing_input_file_is_one_line_error(tmp_path: Path) -> None:
    r = invoke(["ingest", "-u", U, str(tmp_path / "nope.log")])
    assert r.exit_code == 1 and "cannot open" in r.output and "Traceback" not in r.output


def test_inspect_shows_parameters_and_budget_never_the_estimate(tmp_path: Path) -> None:
    state = tmp_path / "s.pst"
    invoke(["ingest", "-u", U, "-s", str(state), "--budget", "2"], input=b"10.0.0.1\n")
    r = invoke(["inspect", "-s", str(state), "--json"])
    d = json.loads(r.stdout)
    assert d["universe"] == U and d["budget"] == 2 and d["budget_spent"] == 0
    assert d["format_version"] >= 1 and abs(d["epsilon_state"] - 1) < 1e-6
    assert not {"density", "distinct", "ones", "theta"} & set(d)


def test_plan_every_calibration_and_hashed_sizing() -> None:
    d = json.loads(invoke(["plan", "-u", U, "--epsilon", "1", "--json"]).stdout)
    rr, tight, paper = d["calibrations"]
    assert [r["calibration"] for r in (rr, tight, paper)] == ["rr", "tight", "paper"]
    assert rr["stderr_density"] < tight["stderr_density"] < paper["stderr_density"]
    # rr at density 0 is e^(1/2) = 1.65 times more accurate than tight (to the 2**-32 rounding)
    assert tight["stderr_density"] / rr["stderr_density"] == pytest.approx(math.exp(0.5), rel=1e-6)
    assert abs(tight["stderr_distinct"] - 65536 * tight["stderr_density"]) < 1e-6
    d = json.loads(invoke(["plan", "-u", "hashed:1048576", "--epsilon", "1",
                           "--expected-distinct", "100000", "--json"]).stdout)
    row = d["calibrations"][0]
    assert row["best_size_rmse"] <= row["rmse"] and 100_000 < row["best_size"] < 1_048_576
    assert row["best_power_of_two"] & (row["best_power_of_two"] - 1) == 0


def test_periodic_releases_spend_budget_then_are_refused(tmp_path: Path, log_factory) -> None:
    log = log_factory(lines=2000)
    state = tmp_path / "r.pst"
    # a fake clock: every chunk advances time, so a release is due at each chunk
    r = invoke(["ingest", "-u", U, "-s", str(state), "--json", "--release-every", "0.000001",
                "--release-epsilon", "0.4", str(log), str(log), str(log)])
    assert r.exit_code == 0, r.output
    rels = [json.loads(ln)["release"] for ln in r.stdout.splitlines() if ln.startswith('{"release"')]
    s = summary(r.stdout)
    assert len(rels) == 2 and s["releases"] == 2 and s["refused_releases"] == 1
    assert "refused" in r.stderr
    assert abs(DensityEstimator.load(state).ledger.spent - 0.8) < 1e-9


# ------------------------------------------------------------------ real processes
def test_pipeline_from_cat_matches_direct_file_and_gz(tmp_path: Path, log_factory, run_cli) -> None:
    log = log_factory(lines=30_000, fmt="clf")
    gz = tmp_path / "a.log.gz"
    gz.write_bytes(gzip.compress(log.read_bytes()))
    outs = []
    for i, how in enumerate((f"cat {log} | panstream ingest", f"panstream ingest {log}",
                             f"panstream ingest {gz}")):
        r = run_cli(f"{how} -u {U} -s {tmp_path}/{i}.pst --json --exact-counts", shell=True)
        assert r.returncode == 0, r.stderr
        s = summary(r.stdout.decode())
        outs.append((s["lines"], s["accepted"], s["outside"], s["malformed"]))
    assert outs[0] == outs[1] == outs[2] and outs[0][0] == 30_000 and outs[0][3] == 0
    # And the table really holds those addresses: each of the three noiseless estimates lies within
    # 5.33 standard errors of the true distinct count (normal tail 1e-7 each, 3e-7 together).
    truth = true_distinct(log)
    for i in range(3):
        e = DensityEstimator.load(tmp_path / f"{i}.pst").estimate()
        assert abs(e.distinct - truth) < 5.33 * e.stderr_distinct, (i, e.distinct, truth)


def true_distinct(log: Path) -> int:
    """Distinct client addresses of a synthetic log inside 10.0.0.0/16 (the first field)."""
    return len({ln.split(b" ", 1)[0] for ln in log.read_bytes().splitlines()
                if ln.startswith(b"10.0.")})


@pytest.mark.parametrize("lines", [500, 30_000, 300_000])
def test_piped_plain_log_is_estimated_within_its_interval(tmp_path: Path, log_factory, run_cli,
                                                          lines: int) -> None:
    """End to end, whatever the batching (one short chunk, or several): the state written by
    `cat log | panstream ingest` estimates the true distinct count within 5.33 standard errors
    (normal tail 1e-7 per case)."""
    log = log_factory(lines=lines, distinct=min(lines, 5000))
    r = run_cli(f"cat {log} | panstream ingest -u {U} -s {tmp_path}/p.pst", shell=True)
    assert r.returncode == 0, r.stderr
    e = DensityEstimator.load(tmp_path / "p.pst").estimate()
    truth = true_distinct(log)
    assert abs(e.distinct - truth) < 5.33 * e.stderr_distinct, (e.distinct, truth)


def test_binary_and_huge_line_input_never_crashes(tmp_path: Path, run_cli) -> None:
    junk = os.urandom(3 << 20) + b"\n" + b"9" * (5 << 20) + b"\n10.0.0.7\n" + b"\xff\x00" * 1000
    r = run_cli(["ingest", "-u", U, "-s", str(tmp_path / "j.pst"), "--json", "-f", "plain",
                 "--exact-counts", "--keep-going"], stdin=junk)
    assert r.returncode == 0, r.stderr
    s = summary(r.stdout.decode())
    assert s["accepted"] == 1 and s["malformed"] >= 2 and b"Traceback" not in r.stderr
    # Without --keep-going, a run that accepted almost nothing ends loudly: exit 1, one line.
    r = run_cli(["ingest", "-u", U, "-s", str(tmp_path / "k.pst"), "-f", "plain",
                 "--exact-counts"], stdin=junk)
    err = r.stderr.decode().splitlines()
    assert r.returncode == 1 and b"Traceback" not in r.stderr
    assert len([ln for ln in err if ln.startswith("panstream: error:")]) == 1
    assert "if the format is wrong" in err[-1] and "--keep-going" in err[-1]


def _slow_feeder(path: Path, marker: Path | None = None) -> list[str]:
    """An endless writer: the log again and again with short pauses, like ``tail -F``. With
    ``marker``, the file is created once the first copy of the log has gone into the pipe."""
    first = f"cat {path}; touch {marker}; " if marker is not None else ""
    return ["sh", "-c", f"{first}while true; do cat {path}; sleep 0.05; done"]


def _start_ingest(tmp_path: Path, log: Path, state: Path, *extra: str,
                  marker: Path | None = None) -> subprocess.Popen:
    feeder = subprocess.Popen(_slow_feeder(log, marker), stdout=subprocess.PIPE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PANSTREAM_")}
    proc = subprocess.Popen([sys.executable, "-m", "panstream", "ingest", "-u", U, "-s", str(state),
                             "--json", *extra], stdin=feeder.stdout, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    assert feeder.stdout is not None
    feeder.stdout.close()
    proc.feeder = feeder  # type: ignore[attr-defined]
    return proc


def _wait_for(path: Path, timeout: float = 20) -> None:
    t = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < t, f"{path.name} did not appear within {timeout} s"
        time.sleep(0.05)


def test_sigterm_writes_final_checkpoint_and_exits_cleanly(tmp_path: Path, log_factory) -> None:
    """SIGTERM once ingest is reading: the marker appears only after the feeder pushed a 1.4 MB log
    through a 64 KiB pipe, so ingest has installed its signal handlers and read (hence applies)
    data, however slow its start-up was. A fixed sleep could signal it before either."""
    log = log_factory(lines=100_000)
    state = tmp_path / "t.pst"
    marker = tmp_path / "fed"
    proc = _start_ingest(tmp_path, log, state, "--checkpoint-every", "0", marker=marker)
    _wait_for(marker, timeout=60)
    assert not state.exists()  # no periodic checkpoints: only the final one can write it
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    proc.feeder.kill()
    proc.feeder.wait()
    assert proc.returncode == 0, err
    s = summary(out.decode())
    assert s["interrupted"] and s["checkpoints"] == 1 and "accepted" not in s  # nothing counted
    assert DensityEstimator.load(state, expect={"universe": U}).estimate().distinct > 0


def test_kill_9_mid_ingest_then_resume_completes(tmp_path: Path, log_factory, run_cli) -> None:
    log = log_factory(lines=5000)
    state = tmp_path / "k.pst"
    proc = _start_ingest(tmp_path, log, state, "--checkpoint-every", "0.1")
    _wait_for(state)
    time.sleep(0.5)  # several checkpoints later, kill at an arbitrary moment
    proc.kill()
    proc.wait(timeout=10)
    proc.feeder.kill()
    proc.feeder.wait()
    DensityEstimator.load(state, expect={"universe": U})  # never corrupt
    r = run_cli(["ingest", "-s", str(state), "--json", "--exact-counts", str(log)])
    assert r.returncode == 0, r.stderr
    s = summary(r.stdout.decode())
    assert s["resumed"] and s["lines"] == 5000
