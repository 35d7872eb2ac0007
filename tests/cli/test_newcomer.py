"""A newcomer's path through the command line: no silent wrong count, no misleading message.

Each test is one defect a fresh user hit (issue 14), replayed through the real command.
"""

from __future__ import annotations

import json
import math

from click.testing import CliRunner

from panstream.cli.cmd_plan import Z95, expressible_distinct, hashed_error
from panstream.cli.main import cli
from panstream.universe import Universe


def invoke(args: list[str], input: bytes | None = None):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, args, input=input, catch_exceptions=False)


# ------------------------------------------------------------------ plan
def test_plan_says_a_hashed_table_saturates_instead_of_printing_a_huge_error() -> None:
    """100,000 IDs in 1,000 buckets: linear counting cannot express more than m ln m ~ 6,908, so the
    old 13,440,585,709,... error is replaced by SATURATED and the size that would work."""
    r = invoke(["plan", "-u", "hashed:1000", "-n", "100000", "--epsilon", "1"])
    assert r.exit_code == 0, r.output
    assert "SATURATED" in r.output
    assert "13,440" not in r.output
    # No number printed is larger than the universe can express... except the sizes it suggests.
    cap = expressible_distinct(Universe.parse("hashed:1000"))
    for line in r.output.splitlines():
        if "distinct +-" in line:
            assert f"more than {cap:,.0f}" in line
    assert "smallest table within 5 % of N (5,000 IDs): hashed:" in r.output


def test_plan_smallest_size_meets_the_target_and_one_less_does_not() -> None:
    d = json.loads(invoke(["plan", "-u", "hashed:1000", "-n", "100000", "--epsilon", "1",
                           "--target-error", "0.05", "--json"]).stdout)
    row = d["calibrations"][0]
    assert row["status"] == "saturated" and row["stderr_distinct"] is None
    m, p, q = row["smallest_size"], row["p_float"], row["q_float"]
    assert (hashed_error(100_000, m, p, q)["rmse"] <= 5_000
            < hashed_error(100_000, m - 1, p, q)["rmse"])
    assert m <= row["best_size"]


def test_plan_labels_the_error_level_and_gives_95_percent() -> None:
    r = invoke(["plan", "-u", "ipv4:10.0.0.0/16", "-n", "20000", "--epsilon", "1"])
    assert "1 standard deviation" in r.output and "95 %" in r.output
    d = json.loads(invoke(["plan", "-u", "ipv4:10.0.0.0/16", "-n", "20000", "--epsilon", "1",
                           "--json"]).stdout)
    row = d["calibrations"][0]
    assert row["status"] == "ok"
    assert math.isclose(row["stderr_distinct_95"], Z95 * row["stderr_distinct"])
    assert f"[{row['stderr_distinct_95']:,.1f}]" in r.output


def test_plan_says_too_small_when_the_interval_covers_everything() -> None:
    """4 cells at epsilon 0.1: the old output said density +- 5.25, distinct +- 21 of 4 cells."""
    r = invoke(["plan", "-u", "ipv4:10.0.0.0/30", "--epsilon", "0.1"])
    assert "TOO SMALL" in r.output
    assert "5.25" not in r.output and "21.0" not in r.output
    d = json.loads(invoke(["plan", "-u", "ipv4:10.0.0.0/30", "--epsilon", "0.1", "--json"]).stdout)
    assert all(row["status"] == "too_small" for row in d["calibrations"])
    assert d["calibrations"][0]["stderr_density"] is None  # valid JSON: no Infinity, no 5.25


def test_plan_json_never_holds_infinity() -> None:
    out = invoke(["plan", "-u", "hashed:100", "-n", "100000", "--epsilon", "1", "--json"]).stdout
    assert "Infinity" not in out and "NaN" not in out
    json.loads(out)


# ------------------------------------------------------------------ long log lines
def test_ingest_counts_a_clf_request_with_a_long_url(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A request over 4096 bytes keeps its client: the count is not biased low on real logs."""
    long = b'10.0.0.7 - - [x] "GET /?q=' + b"a" * 10_000 + b' HTTP/1.1" 200 1\n'
    data = b'10.0.0.1 - - [x] "GET /" 200 1\n' + long
    state = tmp_path / "s.pst"
    r = invoke(["ingest", "-u", "ipv4:10.0.0.0/24", "-f", "clf", "-s", str(state), "--json",
                "--exact-counts"], input=data)
    assert r.exit_code == 0, r.output
    summary = next(json.loads(ln)["summary"] for ln in r.stdout.splitlines() if "summary" in ln)
    assert summary["accepted"] == 2 and summary["malformed"] == 0


# ------------------------------------------------------------------ messages
def test_an_empty_state_path_is_refused_before_any_input_is_read() -> None:
    """`-s ''` used to read all of standard input, then fail with a message about a directory.
    Here stdin is a pipe that is never written nor closed: the old code waited on it forever (the
    timeout fails the test); now the command exits 2 at once."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "panstream", "ingest", "-u", "ipv4:10.0.0.0/24",
                             "-s", ""], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        code = proc.wait(timeout=60)  # stdin stays open: only an up-front check can return
    finally:
        proc.kill()
        proc.wait()
    assert proc.stdin is not None and proc.stderr is not None
    proc.stdin.close()
    err = proc.stderr.read()
    proc.stderr.close()
    proc.stdout.close()  # type: ignore[union-attr]
    assert code == 2
    assert b"the state path is empty: give a file name, e.g. -s web.pst" in err


def test_a_state_path_in_a_missing_directory_or_a_directory_is_refused_up_front(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = invoke(["ingest", "-u", "ipv4:10.0.0.0/24", "-s", str(tmp_path / "no" / "s.pst")])
    assert r.exit_code == 2 and "does not exist: create it" in r.output
    r = invoke(["ingest", "-u", "ipv4:10.0.0.0/24", "-s", str(tmp_path)])
    assert r.exit_code == 2 and "is a directory" in r.output
    for cmd in (["inspect"], ["release", "--epsilon", "0.1"], ["rotate"]):
        r = invoke([*cmd, "-s", ""])
        assert r.exit_code == 2 and "the state path is empty" in r.output, cmd


def test_an_ipv4_universe_without_prefix_is_refused_not_one_cell() -> None:
    r = invoke(["plan", "-u", "ipv4:10.0.0.0", "--epsilon", "1"])
    assert r.exit_code == 2
    assert "no prefix length" in r.output and "10.0.0.0/32" in r.output
    assert invoke(["plan", "-u", "ipv4:10.0.0.0/32", "--epsilon", "1"]).exit_code == 0
    r = invoke(["plan", "-u", "ipv6:2001:db8::", "--epsilon", "1"])
    assert r.exit_code == 2 and "no prefix length" in r.output


def test_json_floats_are_rounded_but_epsilons_stay_exact(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Budget 1.0 minus a release of 0.8 left 0.19999999999999996 in JSON; epsilon_state is the
    realized value and must keep every digit."""
    import panstream as ps

    state = tmp_path / "s.pst"
    est = ps.DensityEstimator("range:64", budget=1.0)
    est.save(state)
    r = invoke(["release", "-s", str(state), "--epsilon", "0.8", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(invoke(["inspect", "-s", str(state), "--json"]).stdout)
    assert d["budget_remaining"] == 0.2
    assert d["epsilon_state"] == est.epsilon_state  # exact, all 17 digits
    assert "0.19999999999999996" not in invoke(["inspect", "-s", str(state), "--json"]).stdout


def test_rotate_with_the_wrong_universe_says_what_the_file_holds(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import panstream as ps

    state = tmp_path / "s.pst"
    ps.DensityEstimator("range:64").save(state)
    r = invoke(["rotate", "-s", str(state), "-u", "range:128"])
    assert r.exit_code == 1
    assert "resume with" not in r.output  # rotate resumes nothing
    assert "holds universe range:64, not range:128: nothing was rotated" in r.output


def test_plan_never_prints_a_95_percent_interval_past_what_the_table_can_express() -> None:
    """5,000 IDs in 1,000 buckets: the 1 sd error (5,779) is expressible, its 95 % half-width
    (11,326) is not (linear counting stops at 1,000 ln 1,000 ~ 6,908): SATURATED, no 11,326."""
    r = invoke(["plan", "-u", "hashed:1000", "-n", "5000", "--epsilon", "1"])
    assert "SATURATED" in r.output and "11,326" not in r.output
    assert "[more than 6,908]" in r.output
