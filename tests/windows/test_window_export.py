"""Daily sketch windows exported in Presto's format and merged into a longer period (issue 23).

The commit order of a closed window with an export (``panstream.windows``): release, series
record (the commit point), export, wipe. These tests pin that order down: the export sees the
record already durable and the table not yet wiped; a failed (or killed) export loses that window's
export, never its release, and a restart neither releases nor exports it again. Then, from the
command line: three days of access logs, daily sketch windows exported, merged into one sketch of
the three days whose count covers the truth.

Three days of ``weeklog`` lines (3,500 lines, 300/800/1,500 distinct clients a day).
"""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from weeklog import DAY, WEEK_START, Week, make_week

from panstream import estimators
from panstream.errors import StateError
from panstream.estimators.base import Estimator
from panstream.ingest import Input
from panstream.inputs.parser import Format
from panstream.sketch import sfm
from panstream.sketch.sfm import SketchGrid
from panstream.sources import ChunkReader
from panstream.sources.windowed import WindowedIngestor, window_files
from panstream.windows import WindowSchedule
from panstream.windows.series import Series, read, record

GRID = "sketch:4096x24:ip"
U: Any = SketchGrid.parse_spec(GRID)
DAYS = [f"2026-11-{16 + d}T00:00:00Z" for d in range(3)]
STAMPS = [f"202611{16 + d}T000000Z.sfm" for d in range(3)]


@pytest.fixture(scope="module")
def days(tmp_path_factory: pytest.TempPathFactory) -> Week:
    return make_week(tmp_path_factory.mktemp("days"), days=3, distinct=(300, 800, 1500),
                     extra=300)


def _union(week: Week) -> int:
    """The distinct clients of the three days (every line's first field)."""
    clients = set()
    for f in week.files:
        clients.update(line.split(b" ", 1)[0] for line in f.read_bytes().splitlines())
    return len(clients)


def _inputs(files: list[Path]) -> list[Input]:
    return [Input(p.name, ChunkReader(io.BytesIO(p.read_bytes()).readinto)) for p in files]


def _ingestor(tmp_path: Path, **kw: Any) -> WindowedIngestor:
    def make() -> Estimator:
        return estimators.new("sketch", U, 1.0, budget=1.0)

    return WindowedIngestor(make, U, Format("clf"), DAY, release_epsilon=1.0,
                            schedule=WindowSchedule.replay(DAY, WEEK_START, WEEK_START + 3 * DAY),
                            series=Series(tmp_path / "daily.jsonl"), **kw)


# ------------------------------------------------------------------ the commit order
def test_the_export_follows_the_record_and_precedes_the_wipe(days: Week, tmp_path: Path) -> None:
    events: list[tuple[str, str]] = []
    kept: list[tuple[Estimator, bytes]] = []

    def export(start: int, est: Any) -> bool:
        w = DAYS[(start - WEEK_START) // DAY]
        # the record is already durable: a fresh read of the file holds it
        assert w in {r["window"] for r in read(tmp_path / "daily.jsonl")}
        data = sfm.to_presto(est.presto())
        assert sfm.from_presto(data).ones_by_level().sum() > 0  # not wiped yet
        kept.append((est, data))
        events.append(("export", w))
        return True

    def closed(rec: dict[str, Any]) -> None:
        events.append(("close", rec["window"]))

    stats = _ingestor(tmp_path, on_export=export, on_close=closed).run(_inputs(days.files))
    assert stats.released == 3 and stats.exported == 3
    assert events == [(e, w) for w in DAYS for e in ("export", "close")]  # published last
    for est, data in kept:  # wiped right after its export: nothing of the exported table is left
        assert data and not any(est.presto().bitmap)


def test_a_failed_export_loses_the_export_never_the_release_and_is_never_retried(
        days: Week, tmp_path: Path) -> None:
    state = str(tmp_path / "web.pst")
    exported: list[int] = []

    def failing(start: int, est: Any) -> bool:
        raise StateError("disk full")

    ing = _ingestor(tmp_path, on_export=failing, state_path=state, checkpoint_every=1e-9)
    with pytest.raises(StateError, match="disk full"):
        ing.run(_inputs(days.files))
    assert [r["window"] for r in read(tmp_path / "daily.jsonl")] == DAYS[:1]  # released, kept
    assert min(window_files(state), default=None) != WEEK_START  # its table is gone
    # the restart releases and exports the other days, never Monday again
    again = _ingestor(tmp_path, on_export=lambda s, e: exported.append(s) is None, state_path=state)
    stats = again.run(_inputs(days.files))
    assert [r["window"] for r in read(tmp_path / "daily.jsonl")] == DAYS
    assert stats.released == 2 and stats.exported == 2
    assert exported == [WEEK_START + DAY, WEEK_START + 2 * DAY]


# ------------------------------------------------------------------ from the command line
def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PANSTREAM_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _panstream(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "panstream", *args], capture_output=True,
                          text=True, env=_env(), timeout=120, check=False)


def _ingest(week: Week, tmp_path: Path, *extra: str) -> list[str]:
    return ["ingest", "-u", GRID, "--estimator", "sketch", "--window", "1d", "--lateness", "1h",
            "-f", "clf", "--release-epsilon", "1", "--series", str(tmp_path / "daily.jsonl"),
            "--from", "2026-11-16", "--to", "2026-11-19",
            *extra, *map(str, week.files)]


def test_three_daily_exports_merge_into_one_sketch_that_counts_the_three_days(
        days: Week, tmp_path: Path) -> None:
    """State epsilon 4 per window, so that the merge of three (epsilon* 2.95) is still sharp.
    The merged count must lie within 6 of its standard errors of the truth: the merged sketch
    has exactly the law of one sketch of the union at epsilon* (docs/sketch.md, "Merge"), whose
    estimate is close to normal; 6 sd fails with probability ~2e-9, under 1e-6 even allowing
    for the plug-in standard error. A merge that double counts (summing the days: 2,600 vs a
    union of about 2,000) or an export of the wrong table is far outside."""
    out = tmp_path / "days"
    r = _panstream(*_ingest(days, tmp_path, "--epsilon", "4", "--export-presto-dir", str(out)))
    assert r.returncode == 0, r.stderr
    assert "3 exported" in r.stderr and "-DP by itself" in r.stderr
    assert [w["window"] for w in read(tmp_path / "daily.jsonl")] == DAYS
    assert sorted(os.listdir(out)) == sorted(STAMPS + [f"{x}.params.json" for x in STAMPS])
    q = Fraction(estimators.new("sketch", U, 4.0).q)
    for name in STAMPS:
        sk = sfm.from_presto((out / name).read_bytes())
        assert (sk.buckets, sk.levels, Fraction(sk.flip)) == (4096, 24, q)
    m = _panstream("merge-sketches", *(str(out / n) for n in STAMPS), "-o",
                   str(tmp_path / "3d.sfm"), "--json")
    assert m.returncode == 0, m.stderr
    got = json.loads(m.stdout)
    r2 = sfm.merge_flip_probability(q, q)
    assert math.isclose(got["flip"], sfm.merge_flip_probability(r2, q), rel_tol=1e-9)
    truth = _union(days)
    assert abs(got["cardinality"] - truth) <= 6 * got["stderr"], (got, truth)


def test_an_existing_export_is_never_overwritten(days: Week, tmp_path: Path) -> None:
    out = tmp_path / "days"
    out.mkdir()
    (out / STAMPS[1]).write_bytes(b"an earlier sketch of Tuesday")
    r = _panstream(*_ingest(days, tmp_path, "--export-presto-dir", str(out)))
    assert r.returncode == 0, r.stderr
    assert f"{out / STAMPS[1]} exists" in r.stderr and "2 exported" in r.stderr
    assert (out / STAMPS[1]).read_bytes() == b"an earlier sketch of Tuesday"


KILL_AT_EXPORT = """
import os, sys
import panstream.cli.window_options as wo
wo.presto_exporter = lambda directory, notice: (lambda start, est: os._exit(9))
from panstream.cli.main import main
main(sys.argv[1:])
"""


def test_a_kill_at_the_export_keeps_the_release_and_the_restart_exports_the_rest_once(
        days: Week, tmp_path: Path) -> None:
    out = tmp_path / "days"
    args = _ingest(days, tmp_path, "-s", str(tmp_path / "web.pst"), "--checkpoint-every", "1e-6",
                   "--export-presto-dir", str(out))
    r = subprocess.run([sys.executable, "-c", KILL_AT_EXPORT, *args], capture_output=True,
                       text=True, env=_env(), timeout=120, check=False)
    assert r.returncode == 9
    assert [w["window"] for w in read(tmp_path / "daily.jsonl")] == DAYS[:1]
    assert os.listdir(out) == []
    r = _panstream(*args)
    assert r.returncode == 0, r.stderr
    assert "is already in the series" in r.stderr  # Monday: neither released nor exported again
    assert [w["window"] for w in read(tmp_path / "daily.jsonl")] == DAYS
    # each sketch with its parameters file (its hash, for merge-sketches) written just before it
    assert sorted(os.listdir(out)) == sorted(STAMPS[1:] + [f"{x}.params.json" for x in STAMPS[1:]])


def test_export_needs_the_sketch_family(days: Week, tmp_path: Path) -> None:
    r = _panstream("ingest", "-u", "ipv4:10.0.0.0/20", "--window", "1d", "--release-epsilon",
                   "1", "--export-presto-dir", str(tmp_path / "d"), *map(str, days.files))
    assert r.returncode == 2
    assert "--export-presto-dir exports Presto sketches: it needs --estimator sketch" in r.stderr
    assert "Traceback" not in r.stderr
    r = _panstream("ingest", "-u", GRID, "--estimator", "sketch", "--export-presto-dir",
                   str(tmp_path / "d"), *map(str, days.files))
    assert r.returncode == 2 and "go(es) with --window" in r.stderr


def test_a_sketch_release_is_a_series_record_with_its_own_interval() -> None:
    """A SketchRelease names its interval ``low``/``high`` (the density release:
    ``distinct_low``/``distinct_high``); the series headline reads both."""
    est = estimators.new("sketch", U, 1.0, budget=1.0)
    rel = est.release(1.0).to_dict()
    rec = record("2026-11-16T00:00:00Z", WEEK_START, WEEK_START + DAY, "sketch", rel,
                 epsilon_state=est.epsilon_state)
    assert rec["statistic"] == "distinct"
    assert (rec["estimate"], rec["low"], rec["high"]) == (rel["distinct"], rel["low"], rel["high"])
    assert rec["epsilon_window"] == est.epsilon_state + 1.0
