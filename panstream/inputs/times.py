"""Event time: the time written in each log line, vectorized per chunk.

A windowed ``ingest`` (:mod:`panstream.windows`) puts every line in the window of the time the
line itself carries (*event time*). This module turns a chunk of complete lines into one time per
line and knows nothing of tables, files or clocks. Each format says, in its own module
(:mod:`panstream.inputs.formats`, its :class:`~panstream.inputs.formats.base.TimeRule`), where its
time is and how it reads; this module asks the registry (issue 36: it used to be
``panstream.windows.eventtime``, which still re-exports these names).

* :func:`times` (``chunk, format -> datetime64[s]`` per line, ``NaT`` where a line has no time
  that parses) is the one entry point; :data:`TIMED_FORMATS` names the format kinds that carry a
  time, and :class:`TimeReader` reads one input stream (it keeps the ``#Fields:``/``#fields``
  header of W3C and Zeek logs from one chunk to the next). docs/windows.md has the table of
  what each format's time looks like.
* A local time without a zone (:data:`LOCAL_FORMATS`) is refused without ``--time-zone``
  (:func:`check_time`); :mod:`panstream.inputs.zones` makes it UTC (fixed offsets, IANA zones
  with their daylight saving changes) and gives a syslog time its year
  (:data:`YEARLESS_FORMATS`).

The per-line times are data (when someone came): callers wipe the arrays once they are used.

>>> chunk = (b'10.0.0.1 - - [24/Nov/2026:10:00:00 +0000] "GET / HTTP/1.1" 200 5\\n'
...          b'10.0.0.2 - - [24/Nov/2026:12:30:00 +0230] "GET / HTTP/1.1" 200 5\\n'
...          b'10.0.0.3 no time here\\n')
>>> times(chunk, "clf").tolist()[:2]
[datetime.datetime(2026, 11, 24, 10, 0), datetime.datetime(2026, 11, 24, 10, 0)]
>>> bool(np.isnat(times(chunk, "clf")[2]))
True
>>> lines = (b'{"level":"info","ts":1795514400.25,"request":{"remote_ip":"10.0.0.1"}}\\n'
...          b'{"timestamp": "2026-11-24T15:30:00.5+05:30", "httpRequest": {"remoteIp": "10.0.0.2"}}\\n')
>>> [str(t) for t in times(lines, "json:request.remote_ip")]
['2026-11-24T10:00:00', '2026-11-24T10:00:00']
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable

import numpy as np

from panstream.errors import ConfigurationError
from panstream.inputs.formats import all_formats, lookup
from panstream.inputs.formats.base import Format, TimeRule
from panstream.inputs.timestamps import NAT, as_u8, label, line_bounds
from panstream.inputs.zones import (
    MAX_YEARLESS_RANGE,
    Zone,
    parse_zone,
    utc_year,
    years_by_clock,
    years_by_range,
)

__all__ = ["LOCAL_FORMATS", "TIMED_FORMATS", "YEARLESS_FORMATS", "TimeReader", "check_time",
           "has_time", "lines_and_times", "needs_zone", "time_notes", "times"]

#: Formats whose lines carry a time :func:`times` can read: those with a zone (or UTC) first,
#: then those that need ``--time-zone``.
TIMED_FORMATS = tuple(f.name for f in sorted((f for f in all_formats() if f.time is not None),
                                             key=lambda f: f.time is not None and bool(f.time.local)))

#: Formats whose time is the writer's local wall clock, with no zone: they need ``--time-zone``.
LOCAL_FORMATS = tuple(f.name for f in all_formats() if f.time is not None and f.time.local)

#: Formats whose time (syslog's ``Dec 10 06:55:46``) has no year either.
YEARLESS_FORMATS = tuple(f.name for f in all_formats() if f.time is not None and f.time.yearless)


def _kind(fmt: str) -> str:
    return fmt.partition(":")[0].strip().lower()


def _rule(fmt: str) -> TimeRule | None:
    f = lookup(_kind(fmt))
    return f.time if f is not None else None


def time_notes() -> str:
    """What each format's time looks like, in a few words each (for messages)."""
    notes = [f.time.note for f in all_formats() if f.time is not None and f.time.note]
    return "; ".join(dict.fromkeys(notes))


def has_time(fmt: str) -> bool:
    """Whether lines of format ``fmt`` (a ``--format`` spec) carry a time :func:`times` reads."""
    return _rule(fmt) is not None


def needs_zone(fmt: str) -> bool:
    """Whether the time of format ``fmt`` is a local time without a zone (``--time-zone``)."""
    rule = _rule(fmt)
    return rule is not None and rule.local is not None


def check_time(fmt: str, zone: Zone | str | None = None,
               span: tuple[int, int] | None = None) -> None:
    """Refuse, with one line saying what to give, a format whose times cannot be placed: no time
    at all, a local time without ``zone``, or a year-less time with a declared range ``span``
    longer than 365 days (a time would fit two years).

    >>> try:
    ...     check_time("haproxy")
    ... except ConfigurationError as exc:
    ...     print(str(exc)[:80])
    haproxy's accept date ([30/Jul/2018:09:03:52.726]) has no zone: give --time-zone
    """
    rule = _rule(fmt)
    if rule is None:
        msg = (f"lines of format {fmt!r} carry no time this panstream can read (timed "
               f"formats: {', '.join(TIMED_FORMATS)}): use --time processing")
        raise ConfigurationError(msg)
    if rule.local is None:
        return
    if zone is None:
        msg = (f"{rule.what} has no zone: give --time-zone UTC, or {rule.whose} such as "
               "Europe/Berlin (or an offset such as +02:00)")
        raise ConfigurationError(msg)
    if rule.yearless and span is not None and span[1] - span[0] > MAX_YEARLESS_RANGE:
        msg = (f"{rule.what} has no year, and the declared range {label(span[0])} .. "
               f"{label(span[1])} spans more than 365 days, so such a time could fall in two "
               "years: replay at most 365 days a run (split --from/--to over runs)")
        raise ConfigurationError(msg)


def times(chunk: bytes | bytearray | memoryview | np.ndarray, fmt: str,
          reader: TimeReader | None = None) -> np.ndarray:
    """The time of every line of ``chunk`` (complete lines, ``\\n``-separated) as ``datetime64[s]``
    (UTC), ``NaT`` for a line without a readable time. One entry per line, in order (a missing
    final newline is implied, as the parser does).

    Args:
        chunk: the lines.
        fmt: a ``--format`` spec whose kind is one of :data:`TIMED_FORMATS`.
        reader: the :class:`TimeReader` of the stream the chunk comes from (keeps the header of
            ``w3c`` and ``zeek`` across chunks); ``None``: a fresh one (the chunk stands alone).

    Raises:
        ConfigurationError: ``fmt`` carries no time.
    """
    return lines_and_times(chunk, fmt, reader)[2]


def lines_and_times(chunk: bytes | bytearray | memoryview | np.ndarray, fmt: str,
                    reader: TimeReader | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(starts, ends, times)``: the bounds of every line (:func:`line_bounds`) and its time
    (:func:`times`), from one pass over the line breaks.

    Raises:
        ConfigurationError: ``fmt`` carries no time.
    """
    fn = reader if reader is not None else TimeReader(fmt)
    b = as_u8(chunk)
    starts, ends = line_bounds(b)
    return starts, ends, fn(b, starts, ends)


class TimeReader:
    """The time of every line of one input stream in format ``fmt`` (a ``--format`` spec).

    Header formats (``w3c``, ``zeek``) keep their ``#Fields:``/``#fields`` header from one chunk
    to the next, as :class:`panstream.inputs.parser.LineParser` does: use one reader per input
    stream. What each format's time looks like is its module's (:mod:`panstream.inputs.formats`;
    docs/windows.md has the table); local times need ``zone`` (:data:`LOCAL_FORMATS`), and
    syslog's ``Dec 10 06:55:46`` has no year either (:data:`YEARLESS_FORMATS`).

    Args:
        fmt: the format.
        zone: the zone of the local times (:func:`panstream.inputs.zones.parse_zone` or its
            text); required by :data:`LOCAL_FORMATS`, not used by the others.
        span: a replay's declared range ``[first, stop)``: a year-less time takes the year that
            puts it inside (at most 365 days); the public years of the zone's offsets.
        clock: without ``span``: the wall clock; a year-less time takes the year that puts it
            nearest to the clock when its chunk is read, and a local time of the hour a clock
            falls back the pass nearest to it (default :func:`time.time`; with ``span``, a
            repeated hour takes the earlier instant).

    Raises:
        ConfigurationError: ``fmt`` carries no time; a local time without ``zone``; a year-less
            time with a ``span`` longer than 365 days.
    """

    def __init__(self, fmt: str, zone: Zone | str | None = None,
                 span: tuple[int, int] | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        self.fmt = fmt
        self.kind = _kind(fmt)
        check_time(fmt, zone, span)
        f = lookup(self.kind)
        assert f is not None and f.time is not None
        self.rule = f.time
        #: ``#`` lines are headers, not records (W3C, Zeek).
        self.hash_headers = f.hash_headers
        self.zone = parse_zone(zone) if isinstance(zone, str) else zone
        self.span = span
        self.clock = clock
        arg = fmt.partition(":")[2].strip()
        self._read = (self.rule.reader(Format(self.kind, f.field, arg))
                      if self.rule.reader is not None else None)

    def __call__(self, b: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        if self._read is not None:
            return self._read(b, starts, ends)
        return self._local(b, starts, ends)

    def _years(self, now: float) -> tuple[int, int]:
        """The public years whose zone offsets are looked up: the range's, or the clock's +- 1."""
        if self.span is not None:
            return utc_year(self.span[0]) - 1, utc_year(self.span[1]) + 1
        y = utc_year(now)
        return y - 1, y + 1

    def _local(self, b: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """A local time per line, made UTC with the zone (and, for syslog, given its year)."""
        zone = self.zone
        assert zone is not None and self.rule.local is not None
        n = starts.size
        out = np.full(n, NAT)
        now = float(self.clock() if self.clock is not None else _time.time())
        lo, hi = self._years(now)
        if not self.rule.yearless:
            parts = [self.rule.local(b, starts, ends)]
        else:
            sl = self.rule.local(b, starts, ends)
            try:
                self._syslog_years(sl, zone, now, out)
                local_iso = sl["iso"] & ~sl["zoned"]
                zoned = np.flatnonzero(sl["iso"] & sl["zoned"])
                out[zoned] = sl["secs"][zoned].astype("datetime64[s]")
                parts = [(sl["secs"], local_iso)]
            finally:
                for a in ("month", "day", "sod", "bsd", "iso", "zoned"):
                    sl[a].fill(0)
        near = None if self.span is not None else now  # live: a repeated hour by the clock
        for local, good in parts:
            r = np.flatnonzero(good)
            if r.size:
                utc = zone.to_utc(local[r], lo, hi, near)
                out[r] = utc.astype("datetime64[s]")
                utc.fill(0)
            local.fill(0)
        return out

    def _syslog_years(self, sl: dict[str, np.ndarray], zone: Zone, now: float,
                      out: np.ndarray) -> None:
        r = np.flatnonzero(sl["bsd"])
        if r.size == 0:
            return
        m, d, sod = sl["month"][r], sl["day"][r], sl["sod"][r]
        if self.span is not None:
            utc = years_by_range(m, d, sod, zone, self.span[0], self.span[1])
        else:
            utc = years_by_clock(m, d, sod, zone, now)
        out[r] = utc.astype("datetime64[s]")
        for a in (utc, m, d, sod):
            a.fill(0)
