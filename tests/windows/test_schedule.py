"""The public schedule and the horizon's arithmetic, checked against brute force.

A person's lines within any span of H seconds can fall in every window that span meets; the
horizon line promises "any span of H meets at most W windows", so W must be the maximum over
every offset of the span, not H / size (the review: 8 requests from Monday 12:00 to the next
Monday 11:00 fell in 8 daily windows against a printed 7).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from panstream.errors import ConfigurationError
from panstream.windows.schedule import WindowSchedule, horizon_line, window_of, windows_met


def met_by_brute_force(horizon: int, size: int) -> int:
    """The most windows H consecutive whole seconds meet, over every offset (times are whole
    seconds: a line's fraction is dropped)."""
    return max(len({window_of(t, size) for t in range(b, b + horizon)}) for b in range(size))


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 12])
def test_windows_met_is_the_maximum_over_every_offset(size: int) -> None:
    for horizon in range(1, 4 * size + 3):
        assert windows_met(horizon, size) == met_by_brute_force(horizon, size), (horizon, size)


def test_a_week_meets_eight_days_and_the_review_s_example_is_one_of_them() -> None:
    day = 86400
    assert windows_met(7 * day, day) == 8
    # Monday 12:00 to the next Monday 11:00 (inside one 7-day span): 8 daily windows
    monday_noon = 1794787200 + 12 * 3600
    stamps = [monday_noon + k * day for k in range(7)] + [monday_noon + 7 * day - 3600]
    assert stamps[-1] - stamps[0] < 7 * day
    assert len({window_of(t, day) for t in stamps}) == 8 == windows_met(7 * day, day)
    assert windows_met(day, 3600) == 25 and windows_met(3600, 86400) == 2


def test_the_horizon_line_and_plan_agree_with_the_count() -> None:
    line = horizon_line(1.5, 86400, 7 * 86400)
    assert "at most 8 1d windows): 8 x 1.5 = 12" in line
    p = subprocess.run([sys.executable, "-m", "panstream", "plan", "-u", "ipv4:10.0.0.0/20",
                        "--total-epsilon", "12", "--window", "1d", "--horizon", "7d"],
                       capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 0, p.stderr
    assert "total 12 = 8 windows x 1.5 per window" in p.stdout
    assert "at most 8 1d windows): 8 x 1.5 = 12" in p.stdout
    for h, s in ((90 * 60, 3600), (7 * 86400, 86400), (86400, 3600), (3 * 3600 + 1, 3600)):
        hs = f"{h}s"
        p = subprocess.run([sys.executable, "-m", "panstream", "plan", "-u", "ipv4:10.0.0.0/20",
                            "--total-epsilon", "10", "--window", f"{s}s", "--horizon", hs,
                            "--json"], capture_output=True, text=True, timeout=120, check=False)
        assert p.returncode == 0, p.stderr
        # windows_met is the brute force's count (above); plan plans over that many windows
        assert f'"windows_per_horizon": {windows_met(h, s)}' in p.stdout


def test_a_replay_needs_a_declared_range_on_the_grid() -> None:
    with pytest.raises(ConfigurationError, match="need a declared range"):
        WindowSchedule.replay(3600, None, None)
    with pytest.raises(ConfigurationError, match="is not the start of a 1d window.*use "
                                                 "2026-11-16T00:00:00Z or 2026-11-17"):
        WindowSchedule.replay(86400, 1794787200 + 3600, 1794787200 + 2 * 86400)
    with pytest.raises(ConfigurationError, match="at most 1,000"):
        WindowSchedule.replay(60, 0, 60 * 1001)
    s = WindowSchedule.replay(86400, 1794787200, 1794787200 + 7 * 86400)
    assert len(s.starts()) == 7 and not s.due(s.starts()[0], now=1e12)


def test_live_windows_open_and_close_on_the_clock_only() -> None:
    s = WindowSchedule.live(60, lateness=30)
    # 09:59 is open until 10:00:30 (its end + the lateness), 10:00 from 10:00:00
    t = 1795514400
    assert s.open_at(t + 45) == [t]
    assert s.open_at(t + 15) == [t - 60, t]
    assert s.due(t - 60, t + 30) and not s.due(t, t + 89) and s.due(t, t + 90)
    assert not s.accepts(t + 60, now=t + 59)  # a line stamped in a window not yet begun
    bounded = WindowSchedule.live(60, 0, first=t, stop=t + 120)
    assert bounded.open_at(t - 1) == [] and bounded.open_at(t + 150) == []
