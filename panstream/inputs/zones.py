"""Local times without a zone, and times without a year: the rules that make them instants.

Some logs write the wall-clock time of the host that wrote them and no zone (HAProxy's accept
date ``[30/Jul/2018:09:03:52.726]``, Apache's and nginx's error logs, syslog's ``Dec 10 06:55:46``),
and syslog writes no year either. Read as UTC such a time is wrong by the host's offset, which
is silently wrong for every window; so these formats are **refused** unless the operator names the
zone (``--time-zone``), and a year-less time takes its year from a public rule, never from the
data around it. This module is pure: it knows nothing of files, clocks or the command line.

* :class:`Zone` (:func:`parse_zone`): ``UTC``, a fixed offset (``+02:00``, ``-0530``, ``+2``)
  or an IANA name (``Europe/Berlin``, through :mod:`zoneinfo`). :meth:`Zone.to_utc` turns local
  seconds (the wall-clock reading as if it were UTC) into UNIX seconds, vectorized: the zone's
  offset changes over a **public** span of years (the declared range, or the clock's year +- 1)
  are found once (probing :mod:`zoneinfo` every 6 hours and bisecting to the second) and each
  local time finds its offset by one ``searchsorted``. A local time that occurs twice (the hour
  a clock falls back) takes the **earlier** instant (read live, with a clock: the later one
  unless it is more than :data:`AHEAD` ahead of the clock); one that does not occur (the hour skipped
  when it springs forward) is **shifted forward** by the gap (02:30 on a night that jumps from
  02:00 to 03:00 is 03:30, i.e. 01:30 UTC in Berlin). This is Python's ``fold=0``
  (:pep:`495`), which the tests use as the oracle. Outside the public span the nearest offset is
  used: that time is then off by the zone's change at most (hours), but it is more than two days
  outside the span, hence outside every window that could take it, so it is placed nowhere either
  way (no per-line Python, no data-driven table).
* :func:`years_by_range` and :func:`years_by_clock`: the year of ``Dec 10 06:55:46``. A replay
  with a declared range ``[first, stop)`` takes the year that puts the time inside the range
  (a range longer than 365 days would make some times fit two years: refused); a live run takes
  the year that puts the time nearest to the clock (so a ``Dec 31 23:59:58`` line read at
  ``Jan 1 00:00:03`` is last year's).

>>> z = parse_zone("Europe/Berlin")
>>> import numpy as np
>>> local = np.array([1_782_900_000], dtype=np.int64)  # 2026-07-01 10:00:00 local
>>> int(z.to_utc(local, 2026, 2026)[0]) - 1_782_900_000    # CEST: UTC = local - 2 h
-7200
>>> parse_zone("+05:30").fixed, parse_zone("UTC").fixed
(19800, 0)
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass, field

import numpy as np

from panstream.errors import ConfigurationError

__all__ = ["AHEAD", "DAY", "MAX_YEARLESS_RANGE", "ZONE_HELP", "Zone", "days_from_civil", "days_in_month",
           "parse_zone", "utc_year", "years_by_clock", "years_by_range"]

DAY = 86400
#: A replay range longer than this makes a year-less time fit two years: refused.
MAX_YEARLESS_RANGE = 365 * DAY
#: Live, a repeated local time (the hour a clock falls back) takes its later instant unless that
#: is more than this many seconds ahead of the reader's clock (a writer's clock may run a little
#: ahead; a line from the future pass beyond that cannot have been written yet).
AHEAD = 300
#: Seconds between the probes of an IANA zone's offset (changes closer than this are not seen;
#: tzdata has none since 1970 that we know of).
_PROBE = 6 * 3600

_OFFSET = re.compile(r"^(?:UTC|GMT)?\s*([+-])(\d{1,2})(?::?(\d{2}))?$", re.IGNORECASE)

ZONE_HELP = ("UTC, a fixed offset such as +02:00 or -0530, or an IANA name such as "
             "Europe/Berlin or America/New_York")


def utc_year(t: int | float) -> int:
    """The UTC calendar year of UNIX seconds ``t``."""
    return (_dt.datetime(1970, 1, 1) + _dt.timedelta(seconds=int(t))).year


def _jan1(year: int) -> int:
    return int((_dt.datetime(year, 1, 1) - _dt.datetime(1970, 1, 1)).total_seconds())


@dataclass
class Zone:
    """A time zone of the lines' writer: a fixed offset (``fixed`` seconds east of UTC) or an IANA
    zone (``tz``). Build it with :func:`parse_zone`.

    The offset tables of an IANA zone are kept per span of years asked for (public values: the
    declared range, the clock), never per line."""

    name: str
    fixed: int | None = None
    tz: _dt.tzinfo | None = None
    _tables: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = field(
        default_factory=dict, repr=False)

    def _offset_at(self, t: int) -> int:
        assert self.tz is not None
        off = _dt.datetime.fromtimestamp(t, self.tz).utcoffset()
        return int(off.total_seconds()) if off is not None else 0

    def table(self, lo_year: int, hi_year: int) -> tuple[np.ndarray, np.ndarray]:
        """``(bounds, offsets)`` of the zone over the years ``lo_year..hi_year`` (and 2 days
        around): ``offsets[k]`` holds for local times in ``[bounds[k-1], bounds[k])``, where a
        change at UTC instant T from offset a to b has the local bound ``T + max(a, b)`` (a local
        time in the skipped or repeated hour keeps the old offset: shifted forward, or the earlier
        instant)."""
        key = (lo_year, hi_year)
        got = self._tables.get(key)
        if got is not None:
            return got
        if self.fixed is not None:
            got = (np.zeros(0, dtype=np.int64), np.array([self.fixed], dtype=np.int64))
            self._tables[key] = got
            return got
        lo, hi = _jan1(lo_year) - 2 * DAY, _jan1(hi_year + 1) + 2 * DAY
        probes = list(range(lo, hi + _PROBE, _PROBE))
        offs = [self._offset_at(t) for t in probes]
        bounds: list[int] = []
        offsets = [offs[0]]
        for i in range(1, len(probes)):
            if offs[i] == offs[i - 1]:
                continue
            a, b = probes[i - 1], probes[i]  # the change is in (a, b]: bisect to the second
            while b - a > 1:
                m = (a + b) // 2
                if self._offset_at(m) == offs[i - 1]:
                    a = m
                else:
                    b = m
            bounds.append(b + max(offs[i - 1], offs[i]))
            offsets.append(offs[i])
        got = (np.array(bounds, dtype=np.int64), np.array(offsets, dtype=np.int64))
        self._tables[key] = got
        return got

    def to_utc(self, local: np.ndarray, lo_year: int, hi_year: int,
               near: float | None = None) -> np.ndarray:
        """UNIX seconds of the local wall-clock seconds ``local`` (int64, the reading as if UTC),
        with the offsets of the public years ``lo_year..hi_year`` (see the module docstring).

        ``near`` (a live reader's wall clock) settles the hour a clock falls back: a local time
        that happens twice takes the **later** instant unless that is more than
        :data:`AHEAD` (5 minutes) ahead of ``near``, in which case it takes the earlier one
        (fold=0). Read live, a line stamped ``02:10`` while the clock is in the second pass of
        Berlin's ``02:xx`` (01:30 UTC) was written 20 minutes ago (01:10 UTC), not 80 (00:10
        UTC); in the first pass (00:50 UTC), ``02:40`` can only be 00:40 UTC (01:40 UTC has not
        come yet). Without ``near`` (a replay) the whole second pass would be placed an hour
        early, in windows a live clock has closed. A skipped local time is shifted forward
        either way. ``near`` is public (the clock), never read off a line.

        >>> z = parse_zone("Europe/Berlin")
        >>> twice = np.array([1_792_895_400], dtype=np.int64)  # 25 Oct 2026 02:30 local
        >>> [int(z.to_utc(twice, 2026, 2026)[0]) - 1_792_890_000,          # 00:30 UTC (CEST)
        ...  int(z.to_utc(twice, 2026, 2026, near=1_792_891_800)[0]) - 1_792_890_000]  # 01:30
        [-1800, 1800]
        """
        if self.fixed is not None:
            return local - self.fixed
        bounds, offsets = self.table(lo_year, hi_year)
        k = np.searchsorted(bounds, local, side="right")
        off = offsets[k]
        out = local - off
        if near is not None and bounds.size:
            # local times in [bounds[j] - (a - b), bounds[j]) of a fall back j (a = offsets[j] >
            # b = offsets[j + 1]) happen twice; searchsorted put them at j (the earlier, a)
            j = np.minimum(k, bounds.size - 1)
            nxt = offsets[j + 1]
            twice = (k < bounds.size) & (off > nxt) & (local >= bounds[j] - (off - nxt))
            if bool(twice.any()):
                now = np.int64(int(near))
                later = local - nxt
                pick = twice & (later <= now + np.int64(AHEAD))
                out[pick] = later[pick]
                later.fill(0)
                pick.fill(False)
            j.fill(0)
            nxt.fill(0)
            twice.fill(False)
        k.fill(0)
        off.fill(0)
        return out


def parse_zone(text: str) -> Zone:
    """The zone named by ``--time-zone``: ``UTC`` (``Z``, ``GMT``), an offset (``+02:00``,
    ``-0530``, ``+2``, ``UTC+01:00``) or an IANA name.

    Raises:
        ConfigurationError: none of these.

    >>> parse_zone("-0530").fixed, parse_zone("UTC+1").fixed, parse_zone("z").fixed
    (-19800, 3600, 0)
    """
    s = str(text).strip()
    if s.upper() in ("UTC", "Z", "GMT", "UTC0", "ETC/UTC"):
        return Zone("UTC", 0)
    m = _OFFSET.match(s)
    if m:
        hh, mm = int(m.group(2)), int(m.group(3) or 0)
        if hh > 14 or mm > 59:
            msg = f"--time-zone {text!r} is no UTC offset (at most +-14:00): give {ZONE_HELP}"
            raise ConfigurationError(msg)
        off = (hh * 3600 + mm * 60) * (-1 if m.group(1) == "-" else 1)
        return Zone(f"{m.group(1)}{hh:02d}:{mm:02d}", off)
    try:
        import zoneinfo

        tz = zoneinfo.ZoneInfo(s)
    except (ImportError, ValueError, OSError, KeyError):
        tz = None
    if tz is None:
        msg = (f"--time-zone {text!r} is not a zone this system knows: give {ZONE_HELP} "
               "(IANA names need the tzdata files, e.g. apt install tzdata or pip install tzdata)")
        raise ConfigurationError(msg)
    return Zone(s, None, tz)


# ---------------------------------------------------------------------------------- dates
_DAYS_IN_MONTH = np.array([31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.int64)


def days_from_civil(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of the proleptic Gregorian date (H. Hinnant's algorithm), vectorized."""
    y = y - (m <= 2)
    era = np.floor_divide(y, 400)
    yoe = y - era * 400
    mp = (m + 9) % 12
    doy = (153 * mp + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def days_in_month(y: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Days of month ``m`` (1..12) of year ``y``, vectorized."""
    leap = ((y % 4 == 0) & (y % 100 != 0)) | (y % 400 == 0)
    m1 = np.clip(m, 1, 12)
    return _DAYS_IN_MONTH[m1 - 1] - ((m1 == 2) & ~leap)


# ---------------------------------------------------------------------------------- years
def _candidates(month: np.ndarray, day: np.ndarray, sod: np.ndarray, zone: Zone,
                years: list[int], lo_year: int, hi_year: int, near: float | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """``(utc, valid)`` of shape ``(len(years), n)``: the instant of month/day/second-of-day in
    each candidate year (``valid`` False where the date does not exist, Feb 29); ``near``: a
    live clock, for the hour a clock falls back (:meth:`Zone.to_utc`)."""
    n = month.size
    utc = np.zeros((len(years), n), dtype=np.int64)
    valid = np.zeros((len(years), n), dtype=bool)
    for j, y in enumerate(years):
        yy = np.full(n, y, dtype=np.int64)
        valid[j] = day <= days_in_month(yy, month)
        local = days_from_civil(yy, month, day) * DAY + sod
        utc[j] = zone.to_utc(local, lo_year, hi_year, near)
        local.fill(0)
        yy.fill(0)
    return utc, valid


def years_by_range(month: np.ndarray, day: np.ndarray, sod: np.ndarray, zone: Zone, first: int,
                   stop: int) -> np.ndarray:
    """UNIX seconds of year-less local times (month, day, second of the day) in the year that puts
    each inside the declared range ``[first, stop)`` (at most 365 days, checked by the caller);
    a time that fits no year of the range gets ``first - 1`` (outside it: dropped with the other
    out-of-range lines)."""
    y0 = utc_year(first)
    years = [y0 - 1, y0, y0 + 1, y0 + 2]
    utc, valid = _candidates(month, day, sod, zone, years, y0 - 1, utc_year(stop) + 1)
    try:
        inside = valid & (utc >= first) & (utc < stop)
        pick = np.argmax(inside, axis=0)
        out = utc[pick, np.arange(month.size)]
        out[~inside.any(axis=0)] = first - 1
        pick.fill(0)
        inside.fill(False)
    finally:
        utc.fill(0)
        valid.fill(False)
    return out


def years_by_clock(month: np.ndarray, day: np.ndarray, sod: np.ndarray, zone: Zone,
                   now: float) -> np.ndarray:
    """UNIX seconds of year-less local times in the year that puts each nearest to ``now`` (the
    clock's year, the one before or the one after: a ``Dec 31`` line read on ``Jan 1`` is last
    year's, a ``Jan 1`` line read on ``Dec 31`` by a clock a little behind the writer's is next
    year's); a time of the hour a clock falls back takes, likewise, the pass nearest to ``now``."""
    y0 = utc_year(now)
    years = [y0 - 1, y0, y0 + 1]
    utc, valid = _candidates(month, day, sod, zone, years, y0 - 1, y0 + 1, now)
    try:
        far = np.int64(1) << np.int64(62)
        dist = np.where(valid, np.abs(utc - np.int64(int(now))), far)
        pick = np.argmin(dist, axis=0)
        out = utc[pick, np.arange(month.size)]
        # a Feb 29 with no leap year among the three: no year puts it near now
        out[~valid.any(axis=0)] = _jan1(y0 - 1) - 10 * DAY
        dist.fill(0)
        pick.fill(0)
    finally:
        utc.fill(0)
        valid.fill(False)
    return out
