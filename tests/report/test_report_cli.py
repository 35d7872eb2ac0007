"""``panstream report`` on the command line: released files in, one HTML file out; every bad input
is one line saying what to give instead; a state file is refused untouched (no table is read, no
budget spent)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from _html import external_references
from click.testing import CliRunner

import panstream as ps
from panstream.cli.main import cli

ENV = {k: None for k in ("PANSTREAM_REPORT_SERIES", "PANSTREAM_REPORT_RELEASE",
                         "PANSTREAM_REPORT_MAP", "PANSTREAM_REPORT_OUTPUT")}


def run(*args: str):  # noqa: ANN201 - click's Result
    return CliRunner().invoke(cli, ["report", *args], env=ENV, catch_exceptions=False)


def test_a_week_and_a_map_make_one_file(week: tuple[Path, Path], tmp_path: Path) -> None:
    series_path, map_path = week
    out = tmp_path / "report.html"
    res = run("--series", str(series_path), "--map", str(map_path), "--horizon", "7d",
              "-o", str(out))
    assert res.exit_code == 0, res.output
    html = out.read_text()
    assert external_references(html) == ([], 0)
    assert out.stat().st_size < 1_000_000
    assert "7 windows of 1d" in html and "256 buckets" in html
    assert "any 7d (any span of 7d meets at most 8 1d windows)" in html
    assert "report written to" in res.stderr


def test_a_release_file_that_holds_a_map_is_drawn_as_a_map(week: tuple[Path, Path],
                                                           tmp_path: Path) -> None:
    _, map_path = week
    out = tmp_path / "r.html"
    assert run("--release", str(map_path), "-o", str(out)).exit_code == 0
    assert '<svg class="map"' in out.read_text()


@pytest.fixture
def state_file(tmp_path: Path) -> Path:
    est = ps.DensityEstimator("ipv4:10.0.0.0/24", epsilon=1.0, budget=1.0)
    est.update_indices(np.arange(10))
    path = tmp_path / "s.pst"
    est.save(str(path))
    return path


@pytest.mark.parametrize("option", ["--series", "--release", "--map"])
def test_a_state_is_refused_and_left_untouched(state_file: Path, tmp_path: Path,
                                               option: str) -> None:
    before = hashlib.sha256(state_file.read_bytes()).hexdigest()
    res = run(option, str(state_file), "-o", str(tmp_path / "r.html"))
    assert res.exit_code == 1
    assert "is a panstream state, not a published result" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert hashlib.sha256(state_file.read_bytes()).hexdigest() == before
    assert ps.load(str(state_file)).ledger.remaining == 1.0  # no budget spent
    assert not (tmp_path / "r.html").exists()


def _bad_inputs(tmp: Path) -> list[tuple[list[str], str, int]]:
    (tmp / "notjson.json").write_text("distinct = 12\n")
    (tmp / "list.json").write_text("[1, 2]\n")
    (tmp / "lines.json").write_text('{"a": 1}\n{"b": 2}\n')
    (tmp / "noest.json").write_text('{"universe": "range:10"}\n')
    (tmp / "single.json").write_text(json.dumps({"distinct": 5.0, "distinct_low": 1.0,
                                                 "distinct_high": 9.0}))
    (tmp / "empty.jsonl").write_text("")
    (tmp / "bad.jsonl").write_text("hello\n")
    o = ["-o", str(tmp / "r.html")]
    return [
        ([*o], "nothing to report", 2),
        (["--release", str(tmp / "missing.json"), *o], "cannot read it", 1),
        (["--release", str(tmp / "notjson.json"), *o], "not JSON", 1),
        (["--release", str(tmp / "list.json"), *o], "not a JSON object", 1),
        (["--release", str(tmp / "lines.json"), *o], "holds 2 JSON lines", 1),
        (["--release", str(tmp / "noest.json"), *o], "no estimate with an interval", 2),
        (["--map", str(tmp / "single.json"), *o], "no rows per bucket", 2),
        (["--series", str(tmp / "empty.jsonl"), *o], "no window released yet", 1),
        (["--series", str(tmp / "bad.jsonl"), *o], "not a series record", 1),
        (["--series", str(tmp / "missing.jsonl"), *o], "cannot read the series", 1),
        (["--release", str(tmp / "single.json"), "--horizon", "soon", *o], "not a duration", 2),
        (["--release", str(tmp / "single.json"), "-o", str(tmp / "no" / "dir.html")],
         "cannot write the report", 1),
    ]


def test_every_bad_input_is_one_line_saying_what_to_do(tmp_path: Path) -> None:
    for args, needle, code in _bad_inputs(tmp_path):
        res = run(*args)
        assert res.exit_code == code, (args, res.output)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("panstream: error: "), (args, res.stderr)
        assert needle in lines[0], (needle, lines[0])
        assert "Traceback" not in res.output
