"""The page: self-contained (nothing to fetch, no script), light enough to mail, every estimate drawn
with its interval, noise-dominated values marked by the shared rule, the privacy cost added up,
and the same page for a single release, a windowed series and a Kafka group's series."""

from __future__ import annotations

import json
import re
from html import escape
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _html import external_references
from click.testing import CliRunner

import panstream as ps
from panstream.cli.common import json_ready
from panstream.cli.main import cli
from panstream.release.honesty import noise_dominated
from panstream.report import ReleaseInput, SeriesInput, render
from panstream.report.fields import figure
from panstream.report.page import PARTIAL_NOTE, column_text, number_text
from panstream.report.svg import EMPTY, INK, NOISE, viridis
from panstream.windows.series import read, record


def test_the_reference_checker_catches_every_way_a_page_fetches(tmp_path: Path) -> None:
    hostile = ('<html><head><link rel="stylesheet" href="https://cdn.example/x.css">'
               "<style>@import 'a.css'; body{background:url(http://e/x.png)}</style>"
               '<script src="https://cdn.example/chart.js"></script></head><body>'
               '<img src="x.png"><a href="https://example.org">out</a>'
               '<svg><image href="http://e/i.png"/></svg><div style="background:url(x.png)">'
               '</div><iframe src="https://e"></iframe><p onclick="x()">p</p></body></html>')
    refs, scripts = external_references(hostile)
    assert scripts == 1
    for needle in ("x.css", "@import", "chart.js", "x.png", "example.org", "i.png", "<iframe>",
                   "onclick"):
        assert any(needle in r for r in refs), (needle, refs)
    assert external_references('<a href="#privacy">in</a><svg><title>t</title></svg>') == ([], 0)


def test_a_week_and_a_map_make_one_self_contained_page_under_1_mb(week: tuple[Path, Path]) -> None:
    series_path, map_path = week
    html = render([SeriesInput("week.jsonl", read(series_path))],
                  [ReleaseInput("map.json", json.loads(map_path.read_text()))], horizon=7 * 86400)
    refs, scripts = external_references(html)
    assert refs == [] and scripts == 0
    assert "://" not in html  # not even a URL in the text
    assert len(html.encode()) < 1_000_000
    # every chart has a title and a description for screen readers, and a table under it
    assert html.count('role="img"') == 2
    assert html.count("<desc>") == 2 and html.count("<table>") >= 4


def test_every_window_is_drawn_with_its_interval_and_tabulated(week: tuple[Path, Path]) -> None:
    series_path, _ = week
    recs = read(series_path)
    html = render([SeriesInput("week.jsonl", recs)])
    chart = html[html.index('<svg class="chart"'):html.index("</svg>")]
    assert chart.count('<circle cx=') - chart.count(f'stroke="{NOISE}"') == len(recs) + 1  # + legend
    # three lines per interval (the whisker and its two caps) for every window
    assert chart.count(f'stroke="{INK}" stroke-width="2"/>') == 3 * len(recs)
    assert '<polygon points=' in chart  # the band through the intervals
    # one format per column: whole counts throughout when the largest is a whole count
    fmt = column_text([float(r[k]) for r in recs for k in ("estimate", "low", "high")])
    for r in recs:
        assert f"<td>{r['window']}</td>" in html
        for key in ("estimate", "low", "high"):
            assert shown_cell(float(r[key]), fmt=fmt) in html, (key, r[key])


def shown_cell(v: float, hi: float = float("inf"), fmt=number_text) -> str:  # noqa: ANN001
    """How a table shows a released value: clamped to ``[0, hi]``; a clamped one is marked ``*``
    and gives the released value in its tooltip."""
    s = min(max(v, 0.0), hi)
    if s == v:
        return f"<td>{fmt(v)}</td>"
    return f'<td class="cl" title="released {fmt(v)} (unbiased, kept in the published file)'


def visible_text(html: str) -> str:
    """What a reader sees: the text of the page and its charts, without tags or attributes."""
    return re.sub(r"<[^>]*>", " ", html)


def test_never_a_negative_count_on_the_page(week: tuple[Path, Path]) -> None:
    """Released values are unbiased and go below 0 near 0 (the fixture's Sunday, the empty
    /24s); the page shows every figure within its possible range, and says so where it clamps."""
    series_path, map_path = week
    recs = read(series_path)
    d = json.loads(map_path.read_text())
    assert min(min(r["low"] for r in recs), min(r["density_low"] for r in d["rows"])) < 0
    html = render([SeriesInput("week.jsonl", recs)], [ReleaseInput("map.json", d)])
    text = visible_text(html)
    assert re.findall(r"(?<![\w.])[-\u2212]\d", text) == []
    assert "never below 0" in text and "* shown at the edge of the possible range" in text
    assert '<td class="cl" title="released -' in html  # the released value is one hover away


def test_noise_dominated_windows_are_marked_by_the_shared_rule(week: tuple[Path, Path]) -> None:
    series_path, _ = week
    # the fixture's quiet Sunday is noise-dominated unless its noise was extreme (about 1 in 10^4
    # runs), so one window that is noise-dominated by construction is added
    recs = [*read(series_path), {"window": "2026-11-23T00:00:00Z", "start": 1_795_392_000,
                                 "end": 1_795_478_400, "statistic": "distinct", "estimate": 10.0,
                                 "low": -400.0, "high": 420.0, "epsilon_window": 1.5}]
    expected = sum(noise_dominated(r["estimate"], r["low"], r["high"]) for r in recs)
    assert expected >= 1
    html = render([SeriesInput("week.jsonl", recs)])
    chart = html[html.index('<svg class="chart"'):html.index("</svg>")]
    assert chart.count(f'r="9" fill="none" stroke="{NOISE}"') == expected
    assert html.count('<td class="nd"') == expected
    assert f"{expected} of {len(recs)} noise-dominated" in html


def test_the_map_colours_exactly_the_buckets_the_release_marks_as_signal(
        week: tuple[Path, Path]) -> None:
    """The release decides which buckets are told from empty (Benjamini-Hochberg over the whole
    map, docs/maps.md); the page colours those and greys every other, says the rule and its
    false-discovery rate from the file, and rings the coloured ones that are noise-dominated."""
    _, map_path = week
    d = json.loads(map_path.read_text())
    html = render([], [ReleaseInput("map.json", d)])
    svg = html[html.index('<svg class="map"'):]
    svg = svg[:svg.index("</svg>")]
    signal = [r["signal"] for r in d["rows"]]
    assert 0 < sum(signal) < len(signal)
    rects = re.findall(r'</title><rect x="[^"]+" y="[^"]+" width="[^"]+" height="[^"]+" '
                       r'fill="([^"]+)"/>(<circle)?', svg)
    assert len(rects) == len(d["rows"])  # one per bucket, each with its tooltip
    for r, (fill, ring) in zip(d["rows"], rects, strict=True):
        want = viridis(min(max(r["density"], 0.0), 1.0)) if r["signal"] else EMPTY
        assert fill == want, r["label"]
        assert bool(ring) == (r["signal"] and r["noise_dominated"]), r["label"]
    assert f"false-discovery rate {100 * d['fdr']:g} %" in html
    assert f"Coloured: the {sum(signal)} bucket(s) the release told from empty" in html
    assert all(f"<td>{r['label']}</td>" in html for r in d["rows"])
    assert html.count("<td>told from empty</td>") == sum(signal)
    assert html.count('<td class="nd"') == sum(r["noise_dominated"] for r in d["rows"])


def test_a_map_written_before_the_map_wide_rule_says_so(week: tuple[Path, Path]) -> None:
    """An older file (rows without ``signal``/``p_empty``, no ``fdr``) is drawn by the per-bucket
    rule it was made for, and the page says that some of its colours are chance."""
    _, map_path = week
    d = json.loads(map_path.read_text())
    old = {k: v for k, v in d.items() if k not in ("fdr", "rule", "signals", "extras")}
    old["rows"] = [{k: v for k, v in r.items() if k not in ("signal", "p_empty")}
                   for r in d["rows"]]
    html = render([], [ReleaseInput("old.json", old)])
    svg = html[html.index('<svg class="map"'):]
    grey = sum(r["density_low"] <= 0 or noise_dominated(r["density"], r["density_low"],
                                                         r["density_high"]) for r in d["rows"])
    assert svg[:svg.index("</svg>")].count(f'fill="{EMPTY}"/>') == grey
    assert "predates the map-wide rule" in html and "false-discovery rate 5 %" not in html


def _release_pair() -> tuple[dict, dict]:
    est = ps.DensityEstimator("ipv4:10.0.0.0/20", epsilon=1.0, budget=1.0)
    est.update_indices(np.arange(1500))
    one = json_ready(est.release(0.25).to_dict())
    m = json_ready(est.release_map(0.5, by="/24").to_dict())
    return one, m


def _grand_total(html: str) -> float:
    m = re.search(r"is covered at <strong>epsilon ([0-9.]+)</strong>", html)
    assert m, html[:2000]
    return float(m.group(1))


def test_the_total_per_person_adds_up_every_input(week: tuple[Path, Path]) -> None:
    series_path, map_path = week
    recs = read(series_path)
    d = json.loads(map_path.read_text())
    html = render([SeriesInput("week.jsonl", recs)], [ReleaseInput("map.json", d)])
    expect = sum(r["epsilon_window"] for r in recs) + d["epsilon_total"]
    assert _grand_total(html) == pytest.approx(expect, abs=1e-3)


def test_releases_of_one_state_count_its_ledger_once_only_when_said() -> None:
    one, m = _release_pair()
    inputs = [ReleaseInput("r.json", one), ReleaseInput("map.json", m)]
    # by default each release's total counts in full: an upper bound
    assert _grand_total(render([], inputs)) == pytest.approx(one["epsilon_total"] +
                                                             m["epsilon_total"], abs=1e-3)
    # one state: its ledger's last total (state + 0.25 + 0.5) covers both releases
    same = _grand_total(render([], inputs, same_state=True))
    assert same == pytest.approx(m["epsilon_total"], abs=1e-3)
    assert same == pytest.approx(one["epsilon_state"] + 0.75, abs=1e-3)


def _sections(html: str) -> list[str]:
    return re.findall(r'<section id="([a-z]+)', html)


def test_the_same_page_for_a_release_a_series_and_a_kafka_groups_series() -> None:
    one, _ = _release_pair()
    single = render([], [ReleaseInput("r.json", one)])
    daily = [record(f"2026-11-{16 + i}T00:00:00Z", 1_794_787_200 + i * 86400,
                    1_794_787_200 + (i + 1) * 86400, "density", one,
                    epsilon_state=one["epsilon_state"]) for i in range(3)]
    series = render([SeriesInput("daily.jsonl", daily)])
    # a Kafka group's series: the same records (hourly here), its release noting replays
    group = [dict(r, release=dict(r["release"], replay_note="at-least-once")) for r in
             (record(f"2026-11-16T{h:02d}:00:00Z", 1_794_787_200 + h * 3600,
                     1_794_787_200 + (h + 1) * 3600, "density", one,
                     epsilon_state=one["epsilon_state"]) for h in range(24))]
    kafka = render([SeriesInput("hourly-series.jsonl", group)])
    for page in (single, series, kafka):
        assert _sections(page)[0] == "privacy" and _sections(page)[-2:] == ["kept", "reading"]
        assert external_references(page) == ([], 0)
        assert 'role="img"' in page and "<table>" in page
    assert _sections(single)[1:-2] == ["release"]
    assert _sections(series)[1:-2] == _sections(kafka)[1:-2] == ["series"]
    assert "24 windows of 1h" in kafka and "3 windows of 1d" in series


def test_an_hourly_chart_thins_its_labels_and_a_table_keeps_one_format() -> None:
    """Issue 37: four days of hourly windows printed 96 overlapping x-axis labels; a daily table
    put ``64.52`` among whole counts; the first and last windows (which may hold only part of
    their span) were not marked. Now the labels do not overlap (11 px text), a column has one
    format, and the first and last windows carry a dagger and the note."""
    from panstream.report.svg import X_CHAR

    one, _ = _release_pair()
    hourly = [record(f"2026-11-{16 + h // 24}T{h % 24:02d}:00:00Z", 1_794_787_200 + h * 3600,
                     1_794_787_200 + (h + 1) * 3600, "density", one,
                     epsilon_state=one["epsilon_state"]) for h in range(96)]
    html = render([SeriesInput("hourly.jsonl", hourly)])
    chart = html[html.index('<svg class="chart"'):html.index("</svg>")]
    labels = re.findall(r'<text x="([0-9.]+)" y="[0-9.]+" font-size="11" text-anchor="middle" '
                        r'fill="#444444">([^<]+)</text>', chart)
    xs = [float(x) for x, _ in labels]
    widest = max(len(t) for _, t in labels)
    assert 2 <= len(labels) <= 12
    assert all(b - a >= widest * X_CHAR for a, b in zip(xs, xs[1:]))  # none overlaps the next
    assert labels[0][1].endswith("\u2020")  # the first window, marked
    assert html.count('<span title="may be partial">\u2020</span>') == 2
    assert escape(PARTIAL_NOTE) in html
    # a daily table: one noise-dominated day among thousands is a whole count too
    daily = [dict(r, estimate=v, low=v - 40.0, high=v + 40.0)
             for r, v in zip(hourly[:3], (3204.3, 64.52, 2811.0), strict=True)]
    table = render([SeriesInput("daily.jsonl", daily)])
    assert "<td>65</td>" in table and "64.52" not in visible_text(table)
    assert "<td>3,204</td>" in table


def test_text_from_a_file_is_shown_as_text_never_as_markup() -> None:
    _, m = _release_pair()
    m["rows"][0]["label"] = '<script>alert(1)</script>'
    m["universe"] = '<img src=x onerror=alert(1)>'
    html = render([], [ReleaseInput('"><svg onload=alert(1)>.json', m)])
    assert external_references(html) == ([], 0)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def _in_unified_schema(old: dict[str, Any], family: str, statistic: str) -> dict[str, Any]:
    """The release ``old`` (a family's own JSON) rewritten in the unified release schema: the
    headline figure's fields, the epsilons in one object, the rest under ``extras``."""
    f = figure(old)
    return {"family": family, "universe": f.universe, "statistic": statistic,
            "estimate": f.estimate, "low": f.low, "high": f.high, "stderr": f.stderr,
            "confidence": f.confidence, "noise_dominated": f.noise_dominated,
            "epsilon": {"state": f.epsilon_state, "release": f.epsilon_release,
                        "total": f.epsilon_total},
            "extras": {k: v for k, v in old.items() if not k.startswith("epsilon")}}


def test_the_unified_schema_renders_the_same_numbers() -> None:
    one, _ = _release_pair()
    new = _in_unified_schema(one, "density", "distinct")
    a = render([], [ReleaseInput("r.json", one)], generated=0)
    b = render([], [ReleaseInput("r.json", new)], generated=0)
    assert a == b


def test_a_range_map_is_drawn_as_intervals_per_bucket() -> None:
    est = ps.DensityEstimator("range:4096", epsilon=1.0, budget=1.0)
    est.update_indices(np.arange(0, 4096, 3))
    m = json_ready(est.release_map(1.0, by=512).to_dict())
    html = render([], [ReleaseInput("range.json", m)])
    assert '<svg class="map"' not in html and '<svg class="chart"' in html
    chart = html[html.index('<svg class="chart"'):html.index("</svg>")]
    assert chart.count(f'stroke="{INK}" stroke-width="2"/>') == 3 * len(m["rows"])
    assert "0\u2013511" in html  # the buckets' labels


def test_a_csv_series_makes_the_same_chart(week: tuple[Path, Path], tmp_path: Path) -> None:
    from panstream.windows.series import Series

    series_path, _ = week
    recs = read(series_path)
    csv_path = tmp_path / "week.csv"
    s = Series(csv_path)
    for r in recs:
        s.append(r)
    from_csv = render([SeriesInput("week", read(csv_path))], generated=0)
    from_jsonl = render([SeriesInput("week", recs)], generated=0)
    chart = lambda h: h[h.index('<svg class="chart"'):h.index("</svg>")]  # noqa: E731
    assert chart(from_csv) == chart(from_jsonl)


def test_a_frequency_release_shows_its_counts_in_either_schema() -> None:
    f = ps.FrequencyEstimator("ipv4:10.0.0.0/20", epsilon=2.0, budget=2.0)
    f.update_indices(np.arange(2000))
    f.update_indices(np.arange(1000))
    old = json_ready(f.release(2.0).to_dict())
    new = _in_unified_schema(old, "frequency", "present")
    a = render([], [ReleaseInput("f.json", old)], generated=0)
    assert a == render([], [ReleaseInput("f.json", new)], generated=0)
    for name in ("present", "once", "returning"):
        assert f"<td>{name}</td><td>{number_text(old['stats'][name]['value'])}</td>" in a


@pytest.mark.parametrize(("late_sd", "says"), [(14.1, "with noise per ARRIVAL"),
                                              (0.0, "EXACTLY")])
def test_late_line_counts_under_an_opt_in_are_not_hidden_in_the_total(late_sd: float,
                                                                      says: str) -> None:
    one, _ = _release_pair()
    recs = [record("2026-11-16T00:00:00Z", 1_794_787_200, 1_794_873_600, "density", one,
                   epsilon_state=one["epsilon_state"],
                   late={"late_records": 12.0, "untimed_records": 3.0, "late_sd": late_sd})]
    html = render([SeriesInput("daily.jsonl", recs)])
    assert says in html and "Telemetry adds 0" not in html
    plain = render([SeriesInput("daily.jsonl", [dict(recs[0], late_records=None,
                                                     untimed_records=None, late_sd=None)])])
    assert "Telemetry adds 0" in plain


def test_same_state_is_refused_for_releases_of_different_tables() -> None:
    from panstream.errors import ConfigurationError

    one, m = _release_pair()
    other, _ = _release_pair()
    # a file without a state id (before issue 37) is still compared by its public parameters
    other = dict({k: v for k, v in other.items() if k != "state_id"}, universe="ipv4:10.1.0.0/20")
    with pytest.raises(ConfigurationError, match="cannot come from one state"):
        render([], [ReleaseInput("r.json", one), ReleaseInput("o.json", other)], same_state=True)
    render([], [ReleaseInput("r.json", one), ReleaseInput("map.json", m)], same_state=True)


def test_same_state_checks_the_state_id_every_release_names() -> None:
    """Review R1: two states with equal public parameters used to pass ``--same-state`` and print
    one ledger's total. Every release JSON now names its state (``state_id``: the random label of
    the ledger it was charged to, from the OS CSPRNG); different ids are refused. A file written
    before (no id) is compared by its parameters as before, and the page says it was unchecked."""
    from panstream.errors import ConfigurationError

    one, m = _release_pair()
    twin, _ = _release_pair()  # another state, the same public parameters
    assert one["state_id"] == m["state_id"] != twin["state_id"]
    assert re.fullmatch(r"[0-9a-f]{16}", one["state_id"])
    with pytest.raises(ConfigurationError, match="charged to different states"):
        render([], [ReleaseInput("r.json", one), ReleaseInput("t.json", twin)], same_state=True)
    html = render([], [ReleaseInput("r.json", one), ReleaseInput("map.json", m)], same_state=True)
    assert "Unchecked:" not in html
    old = {k: v for k, v in twin.items() if k != "state_id"}
    html = render([], [ReleaseInput("r.json", one), ReleaseInput("old.json", old)],
                  same_state=True)
    assert "Unchecked:</strong> --same-state could not be checked for old.json" in html


def test_same_state_warns_on_the_command_line_for_a_file_without_state_id(
        tmp_path: Path) -> None:
    one, m = _release_pair()
    a, b = tmp_path / "r.json", tmp_path / "old.json"
    a.write_text(json.dumps(one))
    b.write_text(json.dumps({k: v for k, v in m.items() if k != "state_id"}))
    res = CliRunner().invoke(
        cli, ["report", "--release", str(a), "--release", str(b), "--same-state", "-o",
              str(tmp_path / "p.html")], env={"PANSTREAM_REPORT_RELEASE": None})
    assert res.exit_code == 0, res.output
    assert "panstream: warning: --same-state could not be checked for old.json" in res.stderr
    twin, _ = _release_pair()
    b.write_text(json.dumps(twin))
    res = CliRunner().invoke(
        cli, ["report", "--release", str(a), "--release", str(b), "--same-state", "-o",
              str(tmp_path / "p.html")], env={"PANSTREAM_REPORT_RELEASE": None})
    assert res.exit_code != 0 and "charged to different states" in res.stderr
    assert res.stderr.count("\n") == 1


def test_a_map_of_nobody_is_grey_but_for_what_the_release_decided() -> None:
    """An empty table's map: whatever the noise, the page colours exactly the buckets the release
    told from empty, and over 20 such maps (an empty 10.0.0.0/16 by /24 each) the release's rule
    colours anything in at most 8 of them. Benjamini-Hochberg over a map of nobody colours
    something with probability at most 5 %, so 9 or more of 20 has probability below 2e-7
    (binomial tail) — the false-failure rate of this test. The old per-bucket rule would have
    coloured about 6 buckets in every one of them (docs/maps.md)."""
    any_colour = 0
    for _ in range(20):
        est = ps.DensityEstimator("ipv4:10.0.0.0/16", epsilon=1.0, budget=1.0)
        m = json_ready(est.release_map(1.0, by="/24").to_dict())
        html = render([], [ReleaseInput("nobody.json", m)])
        svg = html[html.index('<svg class="map"'):]
        svg = svg[:svg.index("</svg>")]
        signal = sum(r["signal"] for r in m["rows"])
        assert svg.count(f'fill="{EMPTY}"/></g>') + svg.count(f'fill="{EMPTY}"/><circle') == (
            256 - signal)
        assert f"Coloured: the {signal} bucket(s)" in html
        any_colour += signal > 0
    assert any_colour <= 8
