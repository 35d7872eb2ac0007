"""Event time: the CLF time of every line, read vectorized, agrees with Python's own parser, and
every malformed time is NaT (never a wrong window)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest
from weeklog import clf_time

from panstream.errors import ConfigurationError
from panstream.windows.eventtime import label, parse_duration, seconds, times, window_start


def _line(t: str, ip: str = "10.0.0.1") -> bytes:
    return f'{ip} - frank [{t}] "GET /apache_pb.gif HTTP/1.0" 200 2326 "-" "curl/8"\n'.encode()


def test_clf_times_match_strptime_across_zones_leap_days_and_centuries() -> None:
    rng = np.random.default_rng(3)
    ts = rng.integers(-2_000_000_000, 4_000_000_000, 3000)
    offsets = rng.choice([0, 3600, -18000, 19800, -34200, 50400, -43200], ts.size)
    text = [clf_time(int(t), int(o)) for t, o in zip(ts, offsets, strict=True)]
    text += ["29/Feb/2024:23:59:59 +0000", "29/Feb/2000:00:00:00 -0100", "31/Dec/1999:23:59:60 +0000"]
    chunk = b"".join(_line(t) for t in text)
    got, valid = seconds(times(chunk, "clf"))
    assert valid.all()
    want = [int(dt.datetime.strptime(t, "%d/%b/%Y:%H:%M:%S %z").timestamp()) if ":60 " not in t
            else 946684800 for t in text]
    assert got.tolist() == want


@pytest.mark.parametrize("bad", [
    "30/Feb/2026:10:00:00 +0000",    # no such day
    "29/Feb/2100:10:00:00 +0000",    # 2100 is not a leap year
    "24/Nox/2026:10:00:00 +0000",    # no such month
    "24/nov/2026:10:00:00 +0000",    # month names are capitalized in CLF
    "24/Nov/2026:24:00:00 +0000",    # hour 24
    "24/Nov/2026:10:60:00 +0000",    # minute 60
    "24/Nov/2026 10:00:00 +0000",    # separator
    "24/Nov/2026:10:00:00 0000",     # no sign
    "24/Nov/2026:10:00:00 +1500",    # no such zone
    "24/Nov/2026:1a:00:00 +0000",    # not a digit
    "24/Nov/2026:10:00:00 +0000 x",  # no ']' where it belongs
])
def test_a_malformed_time_is_nat(bad: str) -> None:
    chunk = _line("24/Nov/2026:10:00:00 +0000") + _line(bad) + b"10.0.0.9 no time at all\n\n"
    t = times(chunk, "clf")
    assert t.size == 4
    assert not np.isnat(t[0]) and np.isnat(t[1:]).all()


def test_a_line_cut_short_or_without_final_newline() -> None:
    good = _line("24/Nov/2026:10:00:00 +0000")
    t = times(good[:-1], "clf")  # no final newline: the line still counts
    assert t.size == 1 and not np.isnat(t[0])
    assert np.isnat(times(b"10.0.0.1 - - [24/Nov/2026:10:00", "clf")).all()
    assert times(b"", "clf").size == 0


def test_formats_without_time_are_refused_with_a_hint() -> None:
    with pytest.raises(ConfigurationError, match="--time processing"):
        times(b"10.0.0.1\n", "plain")


def test_durations_and_utc_alignment() -> None:
    assert [parse_duration(s) for s in ("90s", "15m", "1h", "1d", "2w", "3600")] == \
        [90, 900, 3600, 86400, 14 * 86400, 3600]
    for bad in ("1y", "h", "-1h", "1.5s"):
        with pytest.raises(ConfigurationError):
            parse_duration(bad)
    t = int(dt.datetime(2026, 11, 24, 10, 37, tzinfo=dt.timezone.utc).timestamp())
    assert label(window_start(t, 86400)) == "2026-11-24T00:00:00Z"
    assert label(window_start(t, 3600)) == "2026-11-24T10:00:00Z"
    assert label(window_start(t, 900)) == "2026-11-24T10:30:00Z"
