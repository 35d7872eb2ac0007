"""One accessor reads every published figure: each family's release JSON as written today, a series
record, a map, and the unified schema (top-level estimate/low/high, epsilon {state, release,
total}, extras) that the honest-output work introduces. The report must work before and after."""

from __future__ import annotations

import json

import numpy as np
import pytest

import panstream as ps
from panstream.cli.common import json_ready
from panstream.errors import ConfigurationError
from panstream.release.honesty import noise_dominated
from panstream.report.fields import calibration_text, family_of, figure, is_map, map_buckets
from panstream.windows.series import record


def published(rel: object) -> dict:
    """What 'panstream release --json' prints for a release."""
    return json.loads(json.dumps(json_ready(rel.to_dict()), allow_nan=False))  # type: ignore[attr-defined]


def out_eps(d: dict) -> float:
    """The output epsilon: ``epsilon.release`` in the common shape, ``epsilon`` before it."""
    e = d["epsilon"]
    return e["release"] if isinstance(e, dict) else e


def unified(d: dict, fig: object) -> dict:
    """The same release in the unified schema: one figure on top, the rest under extras."""
    return {"family": fig.family, "universe": fig.universe, "statistic": fig.statistic,  # type: ignore[attr-defined]
            "estimate": fig.estimate, "low": fig.low, "high": fig.high,  # type: ignore[attr-defined]
            "stderr": fig.stderr, "confidence": fig.confidence,  # type: ignore[attr-defined]
            "noise_dominated": fig.noise_dominated,  # type: ignore[attr-defined]
            "epsilon": {"state": d.get("epsilon_state"), "release": out_eps(d),
                        "total": d.get("epsilon_total")},
            "extras": {k: v for k, v in d.items() if not k.startswith("epsilon")}}


def density_release() -> dict:
    est = ps.DensityEstimator("ipv4:10.0.0.0/20", epsilon=1.0, budget=1.0)
    est.update_indices(np.arange(900))
    return published(est.release(0.5))


def sketch_release() -> dict:
    s = ps.SketchEstimator(epsilon=1.0, budget=1.0)
    s.update([f"10.0.{i // 256}.{i % 256}" for i in range(2000)])
    return published(s.release(0.5))


def frequency_release() -> dict:
    f = ps.FrequencyEstimator("ipv4:10.0.0.0/20", epsilon=1.0, budget=1.0)
    f.update_indices(np.arange(600))
    return published(f.release(1.0))


@pytest.mark.parametrize(("make", "family", "stat", "names"), [
    (density_release, "density", "distinct", ("distinct", "distinct_low", "distinct_high")),
    (sketch_release, "sketch", "distinct", ("distinct", "low", "high")),
])
def test_each_family_is_read_by_its_own_field_names(make, family, stat, names) -> None:  # noqa: ANN001
    d = make()
    f = figure(d)
    assert (f.family, f.statistic) == (family, stat)
    assert (f.estimate, f.low, f.high) == tuple(float(d[n]) for n in names)
    assert f.epsilon_release == out_eps(d) and f.epsilon_state == d["epsilon_state"]
    assert f.epsilon_total == d["epsilon_total"]
    assert f.stderr is not None and f.stderr > 0
    assert f.noise_dominated == noise_dominated(f.estimate, f.low, f.high)


def test_frequency_headline_is_the_present_cells() -> None:
    d = frequency_release()
    f = figure(d)
    present = d["stats"]["present"]
    assert (f.family, f.statistic) == ("frequency", "present")
    assert (f.estimate, f.low, f.high) == (present["value"], present["low"], present["high"])
    assert "counters mod 16" in calibration_text(d)


@pytest.mark.parametrize("make", [density_release, sketch_release, frequency_release])
def test_the_unified_schema_gives_the_same_figure(make) -> None:  # noqa: ANN001
    d = make()
    before = figure(d)
    after = figure(unified(d, before))
    assert after == before
    # the calibration moved under extras is still found
    assert calibration_text(unified(d, before)) == calibration_text(d)


def test_a_series_record_reads_its_window_epsilons_and_nested_release() -> None:
    d = density_release()
    rec = record("2026-11-16T00:00:00Z", 0, 86400, "density", d, epsilon_state=d["epsilon_state"])
    f = figure(rec)
    assert (f.estimate, f.low, f.high) == (d["distinct"], d["distinct_low"], d["distinct_high"])
    assert f.epsilon_total == pytest.approx(d["epsilon_state"] + out_eps(d))
    assert f.epsilon_release == out_eps(d)
    assert f.stderr == pytest.approx(d["stderr_density"] * d["size"])
    assert calibration_text(rec).startswith("randomized response")


def test_a_map_reads_its_rows_and_total_in_either_schema() -> None:
    est = ps.DensityEstimator("ipv4:10.0.0.0/22", epsilon=1.0, budget=1.0)
    est.update_indices(np.arange(300))
    d = published(est.release_map(0.5, by="/24"))
    assert is_map(d) and family_of(d) == "density"
    rows = map_buckets(d)
    assert [b.label for b in rows] == [r["label"] for r in d["rows"]]
    assert rows[0].value == d["rows"][0]["density"] and rows[0].cells == 256
    assert figure(d).estimate == d["total"]["distinct"]
    moved = {"family": "density", "universe": d["universe"], "statistic": "distinct",
             "estimate": d["total"]["distinct"], "low": d["total"]["distinct_low"],
             "high": d["total"]["distinct_high"],
             "epsilon": {"state": d["epsilon_state"], "release": out_eps(d),
                         "total": d["epsilon_total"]},
             "extras": {"rows": [{"label": r["label"], "estimate": r["density"],
                                  "low": r["density_low"], "high": r["density_high"]}
                                 for r in d["rows"]]}}
    assert is_map(moved)
    assert [(b.label, b.value, b.low, b.high) for b in map_buckets(moved)] == \
        [(b.label, b.value, b.low, b.high) for b in rows]
    assert figure(moved).epsilon_total == figure(d).epsilon_total


def test_something_without_an_estimate_is_one_clear_error() -> None:
    with pytest.raises(ConfigurationError, match="no estimate with an interval"):
        figure({"universe": "range:10"})
    with pytest.raises(ConfigurationError, match="not a finite number"):
        figure({"estimate": None, "low": 0, "high": 1, "statistic": "x"} | {"estimate": "nan"})
