"""One JSON shape: every ``--json`` output of ``release``, ``inspect``, ``ingest`` and the series
records validates against ``docs/schema/release.schema.json``, and the same names mean the same
things in every family (``estimate``/``low``/``high``/``stderr``, ``family``, ``universe``,
``epsilon.state/release/total``), with the family's own fields under ``extras`` and the old names
kept beside them for one release."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from jsonschema import ValidationError
from schema_check import validate, validate_lines

import panstream as ps
from panstream.cli.main import cli
from panstream.sketch import sfm
from panstream.windows.series import Series, read, record


def invoke(*args: str) -> Any:
    r = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r


def _states(tmp_path: Path) -> dict[str, Path]:
    out = {}
    d = ps.DensityEstimator("ipv4:10.0.0.0/20", epsilon=1.0, budget=5.0)
    d.update_indices(np.arange(1500))
    f = ps.FrequencyEstimator("ipv4:10.0.0.0/20", epsilon=1.0, budget=5.0)
    f.update_indices(np.repeat(np.arange(300), 2))
    s = ps.SketchEstimator(epsilon=1.0, items="id", budget=5.0)
    s.update(range(25))  # a noise-dominated count: the flag must say so
    for name, est in (("density", d), ("frequency", f), ("sketch", s)):
        out[name] = tmp_path / f"{name}.pst"
        est.save(out[name])
    return out


@pytest.mark.parametrize("family", ["density", "frequency", "sketch"])
def test_release_json_of_every_family_has_the_common_shape(family: str, tmp_path: Path) -> None:
    path = _states(tmp_path)[family]
    d = json.loads(invoke("release", "-s", str(path), "--epsilon", "0.5", "--json").stdout)
    validate(d, "estimate")
    assert d["family"] == family and d["epsilon"]["release"] == 0.5
    assert d["epsilon"]["total"] == pytest.approx(d["epsilon"]["state"] + 0.5)
    assert d["low"] <= d["estimate"] <= d["high"] and d["stderr"] > 0
    assert d["noise_dominated"] == (d["high"] - d["low"] > abs(d["estimate"]))
    # the old names stay for one release
    old = {"density": ("distinct", "distinct_low", "stderr_density"),
           "frequency": ("stats", "noisy_histogram"), "sketch": ("distinct", "cardinality")}
    assert all(k in d for k in old[family]) and d["epsilon_state"] == d["epsilon"]["state"]
    if family == "sketch":  # 25 items at epsilon 1: the interval is far wider than the count
        assert d["noise_dominated"] is True


def test_a_map_release_and_its_rows(tmp_path: Path) -> None:
    path = _states(tmp_path)["density"]
    d = json.loads(invoke("release", "-s", str(path), "--epsilon", "0.5", "--by", "/24",
                          "--json").stdout)
    validate(d, "estimate")
    assert d["statistic"] == "distinct" and len(d["extras"]["rows"]) == 16
    assert d["extras"]["rule"] == "benjamini-hochberg" and d["extras"]["fdr"] == pytest.approx(0.05)
    assert {"p_empty", "signal", "noise_dominated"} <= set(d["extras"]["rows"][0])


def test_inspect_json_of_every_family_and_of_a_presto_file(tmp_path: Path) -> None:
    for family, path in _states(tmp_path).items():
        d = json.loads(invoke("inspect", "-s", str(path), "--json").stdout)
        validate(d, "state")
        assert d["family"] == family and d["epsilon"]["release"] == 0
    s = ps.SketchEstimator(epsilon=1.0, items="id")
    s.update(range(5000))
    presto = tmp_path / "x.sfm"
    presto.write_bytes(sfm.to_presto(s.presto()))
    d = json.loads(invoke("inspect", "-s", str(presto), "--json").stdout)
    validate(d, "estimate")
    assert d["family"] == "sketch" and d["extras"]["format"] == "presto-sfm"
    empty = tmp_path / "group"
    empty.mkdir()
    validate(json.loads(invoke("inspect", "--state-dir", str(empty), "--json").stdout), "group")


@pytest.mark.parametrize("estimator", ["density", "frequency", "sketch"])
def test_ingest_json_lines_validate(estimator: str, tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("".join(f"10.0.{i // 200}.{i % 200}\n" for i in range(3000)))
    args = ["ingest", "-s", str(tmp_path / "s.pst"), "--estimator", estimator, "--json",
            "--release-every", "0.000001", "--release-epsilon", "0.2"]
    if estimator != "sketch":
        args += ["-u", "ipv4:10.0.0.0/20"]
    r = invoke(*args, str(log), str(log))
    lines = validate_lines(r.stdout)
    summary = [x["summary"] for x in lines if "summary" in x]
    assert len(summary) == 1 and summary[0]["family"] == estimator
    for x in lines:
        if "release" in x:
            validate(x["release"], "estimate")


def test_series_records_validate_in_both_file_formats(tmp_path: Path) -> None:
    est = ps.DensityEstimator("ipv4:10.0.0.0/20", epsilon=1.0, budget=1.0)
    rel = est.release(0.5).to_dict()
    rec = record("2026-11-24T00:00:00Z", 1_795_478_400, 1_795_564_800, "density", rel,
                 epsilon_state=est.epsilon_state)
    validate({"window": {k: v for k, v in rec.items() if k != "release"}}, None)
    validate(rec, "record")
    for name in ("s.jsonl", "s.csv"):
        s = Series(tmp_path / name)
        s.append(rec)
        back = read(s.path)[0]
        validate(back, "record")
        assert back["epsilon"]["release"] == 0.5 and back["noise_dominated"] == rec["noise_dominated"]
        out = invoke("series", "show", str(s.path), "--json").stdout
        validate_lines(out)


def test_the_schema_rejects_a_release_without_the_common_names() -> None:
    est = ps.DensityEstimator("range:4096", budget=1.0)
    d = est.release(0.5).to_dict()
    for key in ("estimate", "family", "epsilon", "noise_dominated"):
        broken = {k: v for k, v in d.items() if k != key}
        with pytest.raises(ValidationError):
            validate(broken, "estimate")
    with pytest.raises(ValidationError):
        validate({**d, "family": "bits"}, "estimate")
