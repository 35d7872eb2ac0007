"""A generated week of Apache/nginx access logs with a known truth per day and per hour.

Seven files, one per day, in the combined log format nginx writes (``$remote_addr - $remote_user
[$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent"``), with
``$time_local`` in three time zones (+0000, +0100, -0500: the parser must convert them to UTC).
Clients come from ipv4:10.0.0.0/20 (4,096 cells). Each day has a known set of distinct clients
(every one of them makes at least one request), and so has each hour.

Lines are written out of order within a bound: each line is placed by its time plus a delay
uniform in [0, ``jitter``) seconds, and a file holds the lines *placed* on its day, so a file
starts with a few lines of the previous evening (as a log rotated at midnight by write time does).
With ``lateness >= jitter`` no line is too late. Synthetic data only: NumPy's PCG64 is fine here.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import numpy as np

UNIVERSE = "ipv4:10.0.0.0/20"
CELLS = 4096
#: Monday 2026-11-16 00:00 UTC.
WEEK_START = int(dt.datetime(2026, 11, 16, tzinfo=dt.timezone.utc).timestamp())
DAY = 86400
HOUR = 3600
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_ZONES = (0, 3600, -5 * 3600)


@dataclass(frozen=True)
class Week:
    """The files and the truth: distinct clients per day and per hour (by window start)."""

    files: list[Path]
    per_day: dict[int, int]
    per_hour: dict[int, int]
    lines: int


def clf_time(t: int, offset: int) -> str:
    """``$time_local`` of UNIX time ``t`` in a zone ``offset`` seconds east of UTC."""
    local = dt.datetime.fromtimestamp(t + offset, dt.timezone.utc)
    sign = "+" if offset >= 0 else "-"
    h, m = divmod(abs(offset) // 60, 60)
    return (f"{local.day:02d}/{_MONTHS[local.month - 1]}/{local.year}:{local.hour:02d}:"
            f"{local.minute:02d}:{local.second:02d} {sign}{h:02d}{m:02d}")


def make_week(directory: Path, seed: int = 7, days: int = 7, jitter: int = 3000,
              distinct: tuple[int, ...] = (300, 800, 1500, 600, 1200, 400, 1000),
              extra: int = 1500) -> Week:
    """Write ``days`` daily files into ``directory``; return them with the truth."""
    rng = np.random.default_rng(seed)
    times, clients = [], []
    per_day: dict[int, int] = {}
    per_hour: dict[int, int] = {}
    for d in range(days):
        day0 = WEEK_START + d * DAY
        who = rng.choice(CELLS, distinct[d % len(distinct)], replace=False)
        c = np.concatenate([who, rng.choice(who, extra)])
        t = day0 + rng.integers(0, DAY, c.size)
        per_day[day0] = int(np.unique(c).size)
        for h in range(24):
            sel = (t >= day0 + h * HOUR) & (t < day0 + (h + 1) * HOUR)
            per_hour[day0 + h * HOUR] = int(np.unique(c[sel]).size)
        times.append(t)
        clients.append(c)
    t = np.concatenate(times)
    c = np.concatenate(clients)
    placed = t + rng.integers(0, jitter, t.size)
    order = np.argsort(placed, kind="stable")
    zones = rng.integers(0, len(_ZONES), t.size)
    files = []
    directory.mkdir(parents=True, exist_ok=True)
    file_day = (placed[order] - WEEK_START) // DAY
    for d in range(days + 1):
        rows = order[file_day == d]
        if rows.size == 0:
            continue
        lines = [f'10.0.{int(c[i]) >> 8}.{int(c[i]) & 255} - - [{clf_time(int(t[i]), _ZONES[zones[i]])}]'
                 f' "GET /page/{int(i) % 97} HTTP/1.1" 200 {512 + int(i) % 900} "-" '
                 f'"Mozilla/5.0 (X11; Linux x86_64)"\n' for i in rows]
        day = dt.datetime.fromtimestamp(WEEK_START + d * DAY, dt.timezone.utc)
        p = directory / f"access.log-{day:%Y%m%d}"
        p.write_text("".join(lines))
        files.append(p)
    return Week(files, per_day, per_hour, int(t.size))
