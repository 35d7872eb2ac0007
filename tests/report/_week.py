"""Published files of a small deployment, made through panstream's real API: a week of daily
windows (each its own table, released once) and one /24 map of a /16. Shared by the report tests
and by docs/report.png (``python3 tests/report/_week.py DIR`` writes the files there)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

import panstream as ps
from panstream.cli.common import json_ready
from panstream.series import Series, record

UNIVERSE = "ipv4:10.0.0.0/16"
DAY = 86400
#: 2026-11-16 00:00 UTC, a Monday.
START = 1_794_787_200
#: Distinct clients per day (truth, never written anywhere): busy weekdays, a quiet weekend, and
#: a Sunday outage whose estimate is noise-dominated.
DAILY = (5200, 5600, 5400, 5900, 4800, 2100, 60)
#: Density of each /20 of the /16 in the map's week: busy, medium, sparse and unused blocks.
LEVELS = (0.9, 0.05, 0.6, 0.0, 0.3, 0.75, 0.0, 0.45, 0.15, 0.0, 0.85, 0.5, 0.0, 0.25, 0.7, 0.35)


def _cells(per24: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return np.concatenate([b * 256 + rng.choice(256, size=int(k), replace=False)
                           for b, k in enumerate(per24)]).astype(np.int64)


def _day(n: int, seed: int) -> np.ndarray:
    """``n`` distinct cells spread over the /16. The generator only picks test data; the
    estimator draws its randomness from the OS CSPRNG."""
    rng = np.random.default_rng(seed)
    return _cells(np.minimum(rng.multinomial(n, np.full(256, 1 / 256)), 256), rng)


def _week_clients() -> np.ndarray:
    """Each /24 filled to its /20's level, give or take a little."""
    rng = np.random.default_rng(99)
    dens = np.clip(np.repeat(LEVELS, 16) + rng.normal(0, 0.04, 256) * (np.repeat(LEVELS, 16) > 0),
                   0, 1)
    return _cells(np.round(dens * 256), rng)


def write_week(out: Path) -> tuple[Path, Path]:
    """Write ``week.jsonl`` (7 daily windows) and ``map.json`` (a /24 map) into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    series_path = out / "week.jsonl"
    series_path.unlink(missing_ok=True)
    s = Series(series_path)
    for day, n in enumerate(DAILY):
        est = ps.DensityEstimator(UNIVERSE, epsilon=1.0, budget=0.5)
        est.update_indices(_day(n, day))
        rel = est.release(0.5)
        start = START + day * DAY
        from panstream.eventtime import label

        s.append(record(label(start), start, start + DAY, "density", json_ready(rel.to_dict()),
                        epsilon_state=est.epsilon_state))
    week = ps.DensityEstimator(UNIVERSE, epsilon=1.0, budget=1.0)
    week.update_indices(_week_clients())
    m = week.release_map(1.0, by="/24")
    map_path = out / "map.json"
    map_path.write_text(json.dumps(json_ready(m.to_dict()), sort_keys=True, allow_nan=False) + "\n")
    return series_path, map_path


if __name__ == "__main__":
    print(*write_week(Path(sys.argv[1])))
