"""Say when noise dominates: every printed or plotted estimate whose interval is wider than its
value is flagged (the one rule of :mod:`panstream.release.honesty`), with what would make it
usable; what is shown is clamped to the possible range while the JSON keeps the unbiased value;
``ingest -n N`` warns for every family; the sketch's CLI seams are closed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from schema_check import validate_lines

import panstream as ps
from panstream.cli.main import cli
from panstream.release.density import format_release
from panstream.release.frequency import format_frequency_release
from panstream.release.honesty import NOISE_FLAG, advice, noise_dominated
from panstream.sketch.release import format_sketch_release
from panstream.windows.series import Series, plot_series, read, record

U16 = "ipv4:10.0.0.0/16"


def invoke(*args: str, ok: bool = True) -> Any:
    r = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    if ok:
        assert r.exit_code == 0, r.output
    return r


def test_the_rule_is_an_interval_wider_than_the_value() -> None:
    assert noise_dominated(193, 0, 408) and not noise_dominated(19_983, 19_502, 20_465)
    assert noise_dominated(-5, -30, 20)  # a negative estimate: the width against |value|
    assert not noise_dominated(float("nan"), 0, 1)  # undefined: said otherwise


def test_185_clients_in_a_16_are_flagged_with_what_would_help() -> None:
    """The issue's /16 table for 185 clients (+-481 at 95 %): the release line says the
    interval is wider than the count and names the levers with numbers."""
    est = ps.DensityEstimator(U16, epsilon=1.0, budget=1.0)
    est.update([f"10.0.{i % 250}.{i // 250 + 1}" for i in range(185)])
    r = est.release(0.5)
    assert r.noise_dominated and r.to_dict()["noise_dominated"] is True
    text = format_release(r)
    assert NOISE_FLAG in text and "cannot be told from noise" in text
    assert re.search(r"state epsilon of about [\d.]+", text) and "longer window" in text
    assert not re.search(r"(distinct|density) .*-\d", text.split("noisy count")[0])  # clamped


def test_a_large_count_is_not_flagged() -> None:
    est = ps.DensityEstimator(U16, epsilon=1.0, budget=1.0)
    est.update_indices(np.arange(20_000) * 3)
    r = est.release(0.5)
    assert not r.noise_dominated and NOISE_FLAG not in format_release(r) and r.advice() == ""


def test_the_sketch_flags_25_clients_and_keeps_its_unbiased_value_in_json() -> None:
    """25 sshd clients in a sketch ('193 [0, 408]' in the issue): flagged; the JSON estimate is
    the unbiased one (an empty sketch's estimates fall on both sides of 0: in 40 releases both
    signs appear with probability 1 - 2 * 2^-40), the text never shows a negative count."""
    est = ps.SketchEstimator(epsilon=1.0, items="id", budget=1.0)
    est.update(range(25))
    r = est.release(0.5)
    assert r.noise_dominated and NOISE_FLAG in format_sketch_release(r)
    signs = set()
    for _ in range(40):
        e = ps.SketchEstimator(epsilon=1.0, items="id", budget=1.0)
        rel = e.release(0.5)
        signs.add(rel.distinct > 0)
        line = format_sketch_release(rel).splitlines()[1]
        assert not re.search(r"-\d", line), line
        assert rel.to_dict()["estimate"] == rel.distinct and rel.cardinality >= 0
    assert signs == {True, False}


def test_the_frequency_release_flags_each_noisy_figure() -> None:
    est = ps.FrequencyEstimator(U16, epsilon=1.0, budget=1.0)
    est.update_indices(np.arange(30))
    r = est.release(0.5)
    text = format_frequency_release(r)
    assert r.noise_dominated and NOISE_FLAG in text and "(noise-dominated)" in text
    assert r.to_dict()["statistic"] == "present"


def test_advice_names_a_release_epsilon_when_the_release_noise_is_the_limit() -> None:
    a = advice(100.0, -20.0, 220.0, state_half=10.0, release_half=118.0, epsilon_state=1.0,
               epsilon_release=0.01, cells=1 << 20)
    got = float(re.search(r"release epsilon of about ([\d.]+)", a).group(1))  # type: ignore[union-attr]
    assert 0.01 < got < 0.05


def _noisy_series(tmp_path: Path) -> Path:
    """An hourly series of 84 windows whose intervals are about twice the values."""
    path = tmp_path / "hourly.jsonl"
    s = Series(path)
    rel = ps.DensityEstimator("range:4096", budget=1.0).release(0.5).to_dict()
    for i in range(84):
        rel = {**rel, "estimate": 40.0 + i % 5, "low": -2.0, "high": 80.0 + 2 * (i % 5)}
        s.append(record(f"w{i:03d}", 3600 * i, 3600 * (i + 1), "density", rel,
                        epsilon_state=1.0))
    return path


def test_a_series_whose_intervals_are_twice_the_values_says_so(tmp_path: Path) -> None:
    path = _noisy_series(tmp_path)
    assert all(r["noise_dominated"] for r in read(path))
    out = invoke("series", "show", str(path)).stdout
    assert out.count(NOISE_FLAG) == 85  # each window, and the closing line
    last = out.splitlines()[-1]
    assert "84 of 84 window(s)" in last and "longer" in last and "larger epsilon" in last
    fig = plot_series(read(path), tmp_path / "h.png")
    assert "84 of 84 window(s) noise-dominated" in fig.axes[0].get_title()


@pytest.mark.parametrize("estimator,extra", [("sketch", []),
                                             ("frequency", ["-u", U16]),
                                             ("density", ["-u", U16])])
def test_ingest_n_warns_for_every_family(estimator: str, extra: list[str], tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("".join(f"10.0.0.{i}\n" for i in range(1, 31)))
    r = invoke("ingest", "--estimator", estimator, *extra, "-n", "30", "-s",
               str(tmp_path / "s.pst"), str(log))
    assert "warning" in r.stderr and ("mostly noise" in r.stderr or "cannot count" in r.stderr)
    quiet = invoke("ingest", "--estimator", estimator, *extra, "-n", "60000", "-s",
                   str(tmp_path / "t.pst"), str(log))
    assert "mostly noise" not in quiet.stderr


def test_the_sketch_takes_a_window_with_its_default_grid(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("".join(f'10.0.0.{i % 200 + 1} - - [24/Nov/2026:{i % 24:02d}:00:00 +0000] '
                           f'"GET / HTTP/1.1" 200 5\n' for i in range(2000)))
    r = invoke("ingest", "--estimator", "sketch", "--window", "1d", "-f", "clf",
               "--from", "2026-11-24", "--to", "2026-11-25",
               "--release-epsilon", "0.5", "--json", str(log))
    validate_lines(r.stdout)  # the window records and the summary: docs/schema
    rec = [json.loads(ln)["window"] for ln in r.stdout.splitlines() if ln.startswith('{"window"')]
    assert len(rec) == 1 and rec[0]["family"] == "sketch"
    assert rec[0]["universe"].startswith("sketch:4096x24")


def test_plan_n_compares_the_families_without_a_universe() -> None:
    """README: 'panstream plan -n N compares the bit table, a hashed table and the sketch'."""
    text = invoke("plan", "-n", "2000").stdout
    assert "hashed-ip:" in text and "sketch:4096x24" in text and "pick the" in text
    d = json.loads(invoke("plan", "-n", "30", "--epsilon", "1", "--json").stdout)
    assert {f["family"] for f in d["families"]} == {"density", "sketch"}
    assert all(f["noise_dominated"] for f in d["families"])
    assert "sketch:4096x24" in invoke("plan", "--estimator", "sketch", "-n", "2000", "--epsilon",
                                      "1").stdout
    r = invoke("plan", "--epsilon", "1", ok=False)
    assert r.exit_code == 2 and "-n N without it" in r.output
