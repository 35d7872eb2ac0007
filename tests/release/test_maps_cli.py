"""``panstream release --by``: a density map from a state file or a consumer group's shards, one
ledger entry per map, rows as a summary, JSON or CSV."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import panstream as ps
from panstream.cli.main import cli
from panstream.state.keying import Keying
from panstream.state.stores import DirectoryStore, encode_shard, ensure_ledger


@pytest.fixture
def state(tmp_path: Path) -> Path:
    est = ps.DensityEstimator("ipv4:10.0.0.0/22", epsilon=1.0, budget=1.0)
    est.update_indices(np.arange(256))  # 10.0.0.0/24 full, the rest empty
    path = tmp_path / "web.pst"
    est.save(path)
    return path


def run(*args: str) -> object:
    return CliRunner().invoke(cli, ["release", *args], catch_exceptions=False)


def test_map_summary_and_one_ledger_entry(state: Path) -> None:
    res = run("-s", str(state), "--epsilon", "0.5", "--by", "/24")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == ("panstream map: laplace mechanism, epsilon 0.5 over ipv4:10.0.0.0/22 by /24 "
                        "(4 buckets of 256 cells)")
    assert "smaller differences are not signal" in lines[1]
    assert any("10.0.3.0/24" in line for line in lines)
    assert "0.5 of 1 spent, 0.5 left" in res.output
    led = ps.DensityEstimator.load(state).ledger
    assert [(e.epsilon, e.mechanism) for e in led.entries] == [(0.5, "laplace map /24")]


def test_map_as_csv_on_stdout_and_json(state: Path, tmp_path: Path) -> None:
    res = run("-s", str(state), "--epsilon", "0.25", "--by", "24", "--csv", "-")
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(io.StringIO(res.output)))
    assert [r["label"] for r in rows] == [f"10.0.{i}.0/24" for i in range(4)]
    assert float(rows[0]["density"]) > float(rows[3]["density"])  # full vs empty, far beyond noise
    out = tmp_path / "map.csv"
    res = run("-s", str(state), "--epsilon", "0.25", "--by", "/23", "--csv", str(out), "--json")
    assert res.exit_code == 0, res.output
    assert out.read_text().count("\n") == 3  # header + two /23s
    d = json.loads(res.output)
    assert d["by"] == "/23" and [r["label"] for r in d["rows"]] == ["10.0.0.0/23", "10.0.2.0/23"]
    assert ps.DensityEstimator.load(state).ledger.spent == 0.5


def test_map_mistakes_are_one_line_and_charge_nothing(state: Path) -> None:
    before = state.read_bytes()
    for args, needle in ((["--by", "/16"], "between the universe's own prefix /22"),
                         (["--csv", "-"], "give --by too"), (["--plot", "x.png"], "give --by too"),
                         (["--by", "/24", "--epsilon", "5"], "refused")):
        argv = ["-s", str(state), *args]
        if "--epsilon" not in args:
            argv += ["--epsilon", "0.5"]
        res = CliRunner().invoke(cli, ["release", *argv])
        assert res.exit_code != 0 and needle in res.output, res.output
        assert "Traceback" not in res.output
    assert state.read_bytes() == before


def test_group_map_goes_through_the_group_ledger(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    ensure_ledger(store, 1.0)
    for part in range(2):
        shard = ps.DensityEstimator("range:2048", epsilon=1.0)
        store.save(f"events/{part}", encode_shard(shard, Keying("murmur2", 2)))  # a checked shard
    res = run("--state-dir", str(tmp_path), "--keyed", "--epsilon", "0.5", "--by", "512", "--json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert len(d["rows"]) == 4 and d["budget_remaining"] == 0.5
    ledger = json.loads(store.read_ledger() or b"{}")
    assert [e["mechanism"] for e in ledger["entries"]] == ["laplace map 512 cells"]
    res = CliRunner().invoke(cli, ["release", "--state-dir", str(tmp_path), "--merge", "sum",
                                   "--epsilon", "0.1", "--by", "512"])
    assert res.exit_code != 0 and "needs the partitioned merge" in res.output


def test_plan_by_shows_the_error_of_one_bucket_before_ingesting() -> None:
    res = CliRunner().invoke(cli, ["plan", "-u", "ipv4:10.0.0.0/16", "--epsilon", "1", "--by", "/24"],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "map by /24: 256 buckets of 256 cells" in res.output
    assert any(line.startswith(" */24") for line in res.output.splitlines())
    res = CliRunner().invoke(cli, ["plan", "-u", "range:100000", "--epsilon", "1", "--by", "1000",
                                   "--release-epsilon", "0.5", "--json"], catch_exceptions=False)
    d = json.loads(res.output)["map"]
    hw = {r["by"]: r["halfwidth"]["0.5"] for r in d["rows"]}
    assert hw["16000 cells"] < hw["1000 cells"] < hw["62 cells"]  # small buckets are noisier
    res = CliRunner().invoke(cli, ["plan", "-u", "hashed:4096", "--epsilon", "1", "--by", "16"])
    assert res.exit_code != 0 and "hash buckets" in res.output and "Traceback" not in res.output


def test_demo_ends_with_a_map_as_text_or_picture(tmp_path: Path) -> None:
    args = ["demo", "-u", "ipv4:10.0.0.0/20", "--distinct", "2000", "--lines", "20000",
            "--audit-trials", "0", "--seed", "1"]
    res = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "density map              ipv4:10.0.0.0/20 by /28: 256 buckets" in res.output
    grid = [line for line in res.output.splitlines() if len(line) == 16 and " " not in line]
    assert len(grid) == 16  # a 16 x 16 Hilbert text picture of the 256 /28s
    png = tmp_path / "demo.png"
    res = CliRunner().invoke(cli, [*args, "--map-png", str(png), "--json"], catch_exceptions=False)
    assert res.exit_code == 0 and png.stat().st_size > 0
    assert len(json.loads(res.output)["map"]["rows"]) == 256
