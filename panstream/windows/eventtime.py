"""Event time: the time written in each log line, vectorized per chunk, and window arithmetic.

A windowed ``ingest`` (:mod:`panstream.windows`) puts every line in the window of the time the
line itself carries (*event time*), so that a week of rotated files replayed at once still gives one
release per day. This module is pure: it turns a chunk of complete lines into one time per line
and knows nothing of tables, files or clocks.

* :func:`times` (``chunk, format -> datetime64[s]`` per line, ``NaT`` where a line has no time
  that parses) is the one entry point; :data:`TIMED_FORMATS` names the format kinds that carry a
  time, and :class:`TimeReader` reads one input stream (it keeps the ``#Fields:``/``#fields``
  header of W3C and Zeek logs from one chunk to the next):

  ==============  ========================================================================
  ``clf``         ``[24/Nov/2026:10:00:00 +0000]`` (any UTC offset)
  ``json:PATH``   the first of the keys ``ts``, ``timestamp``, ``start_time``, ``time``,
                  ``@timestamp`` a line has: epoch seconds (Caddy) or ISO 8601 (GCP, Envoy)
  ``w3c:FIELD``   the ``date`` and ``time`` fields (UTC: CloudFront, IIS)
  ``zeek:FIELD``  the ``ts`` field (epoch seconds)
  ``alb``         field 2, ``elb`` field 1 (ISO 8601, UTC)
  ``vhost``,      the CLF ``[...]`` (the first ``[`` of the line)
  ``xff``
  ``squid``       field 1, epoch seconds (UTC); through syslog, the value after ``: ``
  ``haproxy``     the accept date ``[30/Jul/2018:09:03:52.726]``: local, needs a zone
  ``apache-       ``[Thu Nov 26 10:00:00.123456 2026]``: local, needs a zone
  error``
  ``nginx-error`` ``2026/11/26 10:00:00``: local, needs a zone
  ``sshd``,       syslog's ``Dec 10 06:55:46`` (local, no year: the declared range's year,
  ``pam``         or the one nearest the clock) or an RFC 5424 / ISO 8601 stamp
  ==============  ========================================================================

  A local time without a zone (:data:`LOCAL_FORMATS`) is refused without ``--time-zone``
  (:func:`check_time`); :mod:`panstream.windows.zones` makes it UTC (fixed offsets, IANA zones
  with their daylight saving changes) and gives a syslog time its year.

  ISO 8601 is ``YYYY-MM-DDTHH:MM:SS`` with an optional fraction and ``Z``, ``+hh:mm``,
  ``+hhmm`` or ``+hh`` (no zone: UTC); epochs are 1 to 12 digits of seconds with an optional
  fraction. Fractions are dropped (windows are whole seconds), never rounded up.
* Every extractor is vectorized: the time field is located per chunk (the ``[`` of CLF; the
  fields with :mod:`panstream.inputs.extractors`'s locators; JSON keys by one ``bytes.split`` in C), the
  bytes from each value's start gathered into an ``n x width`` matrix, checked (digits,
  separators, month name, ranges, the value's end) and converted with integer arithmetic (days
  from the civil date, minus the UTC offset). No Python work per line.
* :func:`parse_duration` reads ``15m``, ``1h``, ``1d``, ``7d``, ``90s`` (or plain seconds);
  :func:`window_start` aligns to UTC (``floor(t / size) * size`` from the UNIX epoch, so ``1d``
  windows start at 00:00 UTC and ``1h`` windows on the hour); :func:`label` names a window.

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
>>> parse_duration("1d"), parse_duration("15m"), parse_duration("90")
(86400, 900, 90)
>>> label(window_start(1_795_514_400, 86400))
'2026-11-24T00:00:00Z'
"""

from __future__ import annotations

import datetime as _dt
import re
import time as _time
from collections.abc import Callable

import numpy as np

from panstream.errors import ConfigurationError
from panstream.inputs import extractors as _extract
from panstream.windows.zones import (
    MAX_YEARLESS_RANGE,
    Zone,
    days_in_month,
    parse_zone,
    utc_year,
    years_by_clock,
    years_by_range,
)
from panstream.windows.zones import days_from_civil as _days_from_civil

__all__ = ["JSON_TIME_KEYS", "LOCAL_FORMATS", "NAT", "TIMED_FORMATS", "YEARLESS_FORMATS",
           "TimeReader", "check_time", "has_time", "label", "line_bounds", "lines_and_times",
           "needs_zone", "parse_duration", "seconds", "times", "window_start"]

#: Not-a-time, the value of a line without a time.
NAT = np.datetime64("NaT", "s")

#: Formats whose lines carry a time :func:`times` can read.
TIMED_FORMATS = ("clf", "json", "w3c", "zeek", "alb", "elb", "vhost", "xff", "squid", "haproxy",
                 "apache-error", "nginx-error", "sshd", "pam")

#: Formats whose time is the writer's local wall clock, with no zone: they need ``--time-zone``.
LOCAL_FORMATS = ("haproxy", "apache-error", "nginx-error", "sshd", "pam")

#: Formats whose time (syslog's ``Dec 10 06:55:46``) has no year either.
YEARLESS_FORMATS = ("sshd", "pam")

#: What each local format's time looks like, and whose zone it is (for the refusal).
_LOCAL_WHAT = {
    "haproxy": ("haproxy's accept date ([30/Jul/2018:09:03:52.726])", "the proxy host's zone"),
    "apache-error": ("the Apache error log's time ([Thu Nov 26 10:00:00.123456 2026])",
                     "the web server's zone"),
    "nginx-error": ("the nginx error log's time (2026/11/26 10:00:00)", "the web server's zone"),
    "sshd": ("sshd's syslog time (Dec 10 06:55:46)", "the zone of the host that wrote it"),
    "pam": ("pam's syslog time (Dec 10 06:55:46)", "the zone of the host that wrote it"),
}

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$", re.IGNORECASE)

_MONTHS = (b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct",
           b"Nov", b"Dec")
_MONTH_CODES = np.array([(m[0] << 16) | (m[1] << 8) | m[2] for m in _MONTHS], dtype=np.int64)
_MONTH_ORDER = np.argsort(_MONTH_CODES)
_MONTH_SORTED = _MONTH_CODES[_MONTH_ORDER]

#: ``24/Nov/2026:10:00:00 +0000`` is 26 bytes; the ``]`` follows it.
_CLF_LEN = 26
_DIGIT_COLS = np.array([0, 1, 7, 8, 9, 10, 12, 13, 15, 16, 18, 19, 22, 23, 24, 25])
# columns of the 27-byte window that starts at the '[': separators and the closing ']'
_SEP_COLS = np.array([3, 7, 12, 15, 18, 21, 27])
_SEP_VALUES = np.array([ord(c) for c in "//::: ]"], dtype=np.uint8)


def parse_duration(text: str | float, what: str = "duration") -> int:
    """Whole seconds of ``15m``, ``1h``, ``1d``, ``2w``, ``90s`` or a plain number of seconds.

    Raises:
        ConfigurationError: not a duration, or not a positive whole number of seconds.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value, unit = float(text), ""
    else:
        m = _DURATION.match(str(text))
        if m is None:
            msg = (f"{what} {text!r} is not a duration: write e.g. 90s, 15m, 1h, 1d or 7d "
                   "(or a number of seconds)")
            raise ConfigurationError(msg)
        value, unit = float(m.group(1)), m.group(2).lower()
    secs = value * _UNITS.get(unit, 1)
    if secs != int(secs) or secs < 0:
        msg = f"{what} {text!r} must be a whole number of seconds >= 0"
        raise ConfigurationError(msg)
    return int(secs)


def window_start(t: int | float, size: int) -> int:
    """Start (UNIX seconds) of the ``size``-second window holding ``t``, aligned to the epoch (UTC).

    >>> window_start(3599, 3600), window_start(3600, 3600)
    (0, 3600)
    """
    return int(t // size) * size


def label(start: int | float) -> str:
    """The ISO 8601 UTC name of an instant: ``2026-11-24T10:00:00Z``."""
    return _dt.datetime.fromtimestamp(int(start), _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def has_time(fmt: str) -> bool:
    """Whether lines of format ``fmt`` (a ``--format`` spec) carry a time :func:`times` reads."""
    return _kind(fmt) in _KINDS


def needs_zone(fmt: str) -> bool:
    """Whether the time of format ``fmt`` is a local time without a zone (``--time-zone``)."""
    return _kind(fmt) in LOCAL_FORMATS


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
    kind = _kind(fmt)
    if kind not in _KINDS:
        msg = (f"lines of format {fmt!r} carry no time this panstream can read (timed "
               f"formats: {', '.join(TIMED_FORMATS)}): use --time processing")
        raise ConfigurationError(msg)
    if kind not in LOCAL_FORMATS:
        return
    what, whose = _LOCAL_WHAT[kind]
    if zone is None:
        msg = (f"{what} has no zone: give --time-zone UTC, or {whose} such as Europe/Berlin "
               "(or an offset such as +02:00)")
        raise ConfigurationError(msg)
    if kind in YEARLESS_FORMATS and span is not None and span[1] - span[0] > MAX_YEARLESS_RANGE:
        msg = (f"{what} has no year, and the declared range {label(span[0])} .. "
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
    b = _as_u8(chunk)
    starts, ends = line_bounds(b)
    return starts, ends, fn(b, starts, ends)


def seconds(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(int64 UNIX seconds, valid)`` of a :func:`times` array (seconds are 0 where not valid)."""
    valid = ~np.isnat(t)
    s = t.astype("datetime64[s]").astype(np.int64)
    s[~valid] = 0
    return s, valid


# ------------------------------------------------------------------------------------ internals
def _as_u8(chunk: bytes | bytearray | memoryview | np.ndarray) -> np.ndarray:
    if isinstance(chunk, np.ndarray):
        return chunk.reshape(-1).view(np.uint8)
    return np.frombuffer(chunk, dtype=np.uint8)


def line_bounds(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (exclusive, before ``\\n``) of every line of the bytes ``b``; a missing final
    newline is implied."""
    ends = np.flatnonzero(b == 10)
    if b.size and (ends.size == 0 or ends[-1] != b.size - 1):
        ends = np.append(ends, b.size)
    starts = np.empty_like(ends)
    if ends.size:
        starts[0] = 0
        starts[1:] = ends[:-1] + 1
    return starts, ends


def _clf(b: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """CLF/combined ``[dd/Mon/yyyy:HH:MM:SS +zzzz]``: the first ``[`` of each line."""
    n = starts.size
    out = np.full(n, NAT)
    brackets = np.flatnonzero(b == ord("["))
    if n == 0 or brackets.size == 0:
        return out
    k = np.searchsorted(brackets, starts)
    np.minimum(k, brackets.size - 1, out=k)
    pos = brackets[k]
    ok = (pos >= starts) & (pos + _CLF_LEN + 1 < ends)  # a '[' of this line, its ']' inside it
    rows = np.flatnonzero(ok)
    if rows.size == 0:
        return out
    # one row gather of 27-byte windows (a strided view, no copy until indexed)
    w = np.lib.stride_tricks.sliding_window_view(b, _CLF_LEN + 2)[pos[rows]]
    try:
        d8 = w[:, _DIGIT_COLS + 1] - np.uint8(48)  # uint8: anything below '0' wraps past 9
        good = (d8 <= 9).all(axis=1)
        good &= (w[:, _SEP_COLS] == _SEP_VALUES).all(axis=1)
        sign = w[:, 22]
        good &= (sign == ord("+")) | (sign == ord("-"))
        month, okm = _month_of(w, 4)
        good &= okm
        d = d8.astype(np.int64)
        day = d[:, 0] * 10 + d[:, 1]
        year = d[:, 2] * 1000 + d[:, 3] * 100 + d[:, 4] * 10 + d[:, 5]
        hh, mm, ss = d[:, 6] * 10 + d[:, 7], d[:, 8] * 10 + d[:, 9], d[:, 10] * 10 + d[:, 11]
        zh, zm = d[:, 12] * 10 + d[:, 13], d[:, 14] * 10 + d[:, 15]
        good &= (day >= 1) & (day <= days_in_month(year, month)) & (hh < 24) & (mm < 60)
        good &= (ss <= 60) & (zh <= 14) & (zm < 60)
        offset = np.where(sign == ord("-"), -1, 1) * (zh * 3600 + zm * 60)
        secs = _days_from_civil(year, month, day) * 86400 + hh * 3600 + mm * 60 + ss - offset
        out[rows[good]] = secs[good].astype("datetime64[s]")
        d.fill(0)
        d8.fill(0)
    finally:
        w.fill(0)
    return out



# ---------------------------------------------------------------- ISO 8601 and epoch fields
#: Bytes read from the start of a time value: ``2026-11-24T10:00:00.123456789+05:30`` and room.
_ISO_WIDTH = 40
_ISO_DIGITS = np.array([0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18])
_ISO_SEPS = np.array([4, 7, 13, 16])
_ISO_SEP_VALUES = np.array([ord(c) for c in "--::"], dtype=np.uint8)
_EPOCH_WIDTH = 24


def _stop_at(w: np.ndarray, col: int) -> np.ndarray:
    """Per row, the first column ``>= col`` that is not a digit (``w.shape[1]`` if none)."""
    nd = (w[:, col:] - np.uint8(48)) > 9
    return np.where(nd.any(axis=1), np.argmax(nd, axis=1) + col, w.shape[1])


def _civil_seconds(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(seconds, good)`` of the int64 digit matrix ``YYYYMMDDHHMMSS`` (14 columns), UTC."""
    year = d[:, 0] * 1000 + d[:, 1] * 100 + d[:, 2] * 10 + d[:, 3]
    month, day = d[:, 4] * 10 + d[:, 5], d[:, 6] * 10 + d[:, 7]
    hh, mm, ss = d[:, 8] * 10 + d[:, 9], d[:, 10] * 10 + d[:, 11], d[:, 12] * 10 + d[:, 13]
    good = (month >= 1) & (month <= 12)
    m1 = np.clip(month, 1, 12)
    good &= (day >= 1) & (day <= days_in_month(year, m1)) & (hh < 24) & (mm < 60) & (ss <= 60)
    secs = _days_from_civil(year, m1, day) * 86400 + hh * 3600 + mm * 60 + ss
    return secs, good


def _iso(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(seconds, good)`` of ISO 8601 values at the start of each row of ``w`` (``n x 40``):
    ``YYYY-MM-DDTHH:MM:SS`` (``T`` or a blank), an optional fraction (dropped: windows are whole
    seconds), then ``Z``, ``+hh:mm``, ``+hhmm`` or ``+hh``; no zone at all is read as UTC (W3C
    and most JSON writers log UTC). Anything else is not good."""
    secs, good, zoned = _iso_parts(w)
    zoned.fill(False)
    return secs, good


def _iso_parts(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(seconds, good, zoned)`` of :func:`_iso`: ``zoned`` says which values carried a zone
    (their seconds are UTC); the others' seconds are the local reading (as if UTC)."""
    d8 = w[:, _ISO_DIGITS] - np.uint8(48)
    good = (d8 <= 9).all(axis=1)
    good &= (w[:, _ISO_SEPS] == _ISO_SEP_VALUES).all(axis=1)
    t = w[:, 10]
    good &= (t == ord("T")) | (t == ord("t")) | (t == ord(" "))
    d = d8.astype(np.int64)
    secs, ok = _civil_seconds(d)
    good &= ok
    rows = np.arange(w.shape[0])
    z = np.full(w.shape[0], 19)
    frac = w[:, 19] == ord(".")
    if bool(frac.any()):
        z[frac] = _stop_at(w[frac], 20)
    width = w.shape[1]
    zc = np.minimum(z, width - 1)
    zone = np.where(z < width, w[rows, zc], 0)
    utc = (zone == ord("Z")) | (zone == ord("z"))
    signed = (zone == ord("+")) | (zone == ord("-"))
    # the value ends (its closing quote, or the end of its field): no zone, read as UTC
    bare = (zone == 0) | (zone == ord('"'))
    offset = np.zeros(w.shape[0], dtype=np.int64)
    if bool(signed.any()):
        r = np.flatnonzero(signed)
        c = zc[r, None] + np.arange(1, 6)
        c = np.minimum(c, width - 1)
        zz = w[r[:, None], c].astype(np.int64) - 48
        dig = (zz >= 0) & (zz <= 9)
        colon = zz[:, 2] == ord(":") - 48
        hh = zz[:, 0] * 10 + zz[:, 1]
        mm = np.where(colon, zz[:, 3] * 10 + zz[:, 4], zz[:, 2] * 10 + zz[:, 3])
        has_mm = np.where(colon, dig[:, 3] & dig[:, 4], dig[:, 2] & dig[:, 3])
        mm = np.where(has_mm, mm, 0)
        okz = dig[:, 0] & dig[:, 1] & (hh <= 14) & (mm < 60)
        sign = np.where(zone[r] == ord("-"), -1, 1)
        offset[r] = sign * (hh * 3600 + mm * 60)
        signed[r] = okz
        zz.fill(0)
    good &= utc | signed | bare
    d.fill(0)
    d8.fill(0)
    return secs - offset, good, (utc | signed) & good


def _epoch(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(seconds, good)`` of UNIX epoch seconds at the start of each row of ``w``: 1 to 12
    digits, then an optional fraction (dropped), then the value's end."""
    n = w.shape[0]
    stop = _stop_at(w, 0)
    good = (stop >= 1) & (stop <= 12)
    width = w.shape[1]
    rows = np.arange(n)
    after = w[rows, np.minimum(stop, width - 1)]
    frac = good & (after == ord("."))
    end = stop.copy()
    if bool(frac.any()):
        r = np.flatnonzero(frac)
        sub = w[r].copy()
        sub[np.arange(r.size), stop[r]] = ord("0")  # the point read as a digit: find the end
        end[r] = _stop_at(sub, 0)
        sub.fill(0)
    tail = w[rows, np.minimum(end, width - 1)]
    good &= (end < width) & np.isin(tail, np.frombuffer(b'\x00\t\r\n "\',}]', dtype=np.uint8))
    d = (w[:, :12].astype(np.int64) - 48)
    keep = np.arange(12)[None, :] < stop[:, None]
    d = np.where(keep, d, 0)
    # right-align the digits: value = sum d[j] * 10^(stop-1-j)
    place = stop[:, None] - 1 - np.arange(12)[None, :]
    secs = (d * np.where(keep, 10 ** np.clip(place, 0, 11), 0)).sum(axis=1)
    d.fill(0)
    return secs, good


def _spans_times(b: np.ndarray, starts: np.ndarray, sp: _extract.Spans,
                 parse: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]], width: int
                 ) -> np.ndarray:
    """Times of the located fields ``b[ts:te]`` (bytes past a field's end are zeroed)."""
    out = np.full(starts.size, NAT)
    rows = np.flatnonzero(sp.state == _extract.SPAN)
    if rows.size == 0:
        return out
    ts, te = sp.ts[rows], sp.te[rows]
    w = _extract.windows(b, ts, width)
    try:
        w[(ts[:, None] + np.arange(width)[None, :]) >= te[:, None]] = 0
        secs, good = parse(w)
        out[rows[good]] = secs[good].astype("datetime64[s]")
        secs.fill(0)
    finally:
        w.fill(0)
    return out


# ------------------------------------------------------- local times: no zone (and no year)
def _month_of(w: np.ndarray, col: int) -> tuple[np.ndarray, np.ndarray]:
    """``(month 1..12, good)`` of the English month abbreviation at column ``col`` of ``w``."""
    code = (w[:, col].astype(np.int64) << 16) | (w[:, col + 1].astype(np.int64) << 8) | w[:, col + 2]
    mi = np.minimum(np.searchsorted(_MONTH_SORTED, code), 11)
    good = _MONTH_SORTED[mi] == code
    month = _MONTH_ORDER[mi] + 1
    code.fill(0)
    return month, good


def _two(d: np.ndarray, j: int) -> np.ndarray:
    return d[:, j] * 10 + d[:, j + 1]


def _hms(w: np.ndarray, col: int) -> tuple[np.ndarray, np.ndarray]:
    """``(second of the day, good)`` of ``HH:MM:SS`` at column ``col``."""
    d8 = w[:, [col, col + 1, col + 3, col + 4, col + 6, col + 7]] - np.uint8(48)
    good = (d8 <= 9).all(axis=1) & (w[:, col + 2] == ord(":")) & (w[:, col + 5] == ord(":"))
    d = d8.astype(np.int64)
    hh, mm, ss = _two(d, 0), _two(d, 2), _two(d, 4)
    good &= (hh < 24) & (mm < 60) & (ss <= 60)
    sod = hh * 3600 + mm * 60 + ss
    d.fill(0)
    d8.fill(0)
    return sod, good


def _digits(w: np.ndarray, cols: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """``(value, good)`` of the decimal digits at ``cols`` of each row."""
    d8 = w[:, cols] - np.uint8(48)
    good = (d8 <= 9).all(axis=1)
    v = np.zeros(w.shape[0], dtype=np.int64)
    for j in range(len(cols)):
        v = v * 10 + d8[:, j]
    d8.fill(0)
    return v, good


def _date(year: np.ndarray, month: np.ndarray, day: np.ndarray, sod: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray]:
    """``(local seconds, good)`` of a civil date and second of the day (the day checked)."""
    good = (day >= 1) & (day <= days_in_month(year, month))
    return _days_from_civil(year, month, day) * 86400 + sod, good


def _end_fraction(w: np.ndarray, col: int, closing: int) -> np.ndarray:
    """Whether column ``col`` holds ``closing``, or a ``.`` and digits then ``closing``."""
    at = w[:, col]
    ok = at == closing
    frac = at == ord(".")
    if bool(frac.any()):
        r = np.flatnonzero(frac)
        stop = _stop_at(w[r], col + 1)
        ok[r] = (stop > col + 1) & (stop < w.shape[1]) & (w[r, np.minimum(stop, w.shape[1] - 1)]
                                                            == closing)
    return ok


def _in_line(pos: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The line of each position (``ends``: the lines' exclusive ends, sorted)."""
    return np.searchsorted(ends, pos, side="left")


def _first_per_line(line: np.ndarray, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(lines, index into the candidates)`` of the first good candidate of each line
    (candidates in position order)."""
    idx = np.flatnonzero(ok)
    rows, first = np.unique(line[idx], return_index=True)
    return rows, idx[first]


#: ``[30/Jul/2018:09:03:52.726]``: 21 bytes to the seconds, room for a fraction and the ``]``.
_HAPROXY_WIDTH = 32


def _haproxy(b: np.ndarray, starts: np.ndarray, ends: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """HAProxy's accept date ``CLIENT:PORT [dd/Mmm/yyyy:HH:MM:SS.mmm]`` (the first ``[`` of the
    line, after a blank, that opens such a date: a syslog tag ``haproxy[PID]:`` comes before it):
    ``(local seconds, good)`` per line."""
    n = starts.size
    local = np.zeros(n, dtype=np.int64)
    good = np.zeros(n, dtype=bool)
    br = np.flatnonzero(b == ord("["))
    br = br[br > 0]
    br = br[b[br - 1] == ord(" ")]  # not the syslog tag's "haproxy[PID]": no window for it
    if n == 0 or br.size == 0:
        return local, good
    line = _in_line(br, ends)
    ok = line < n
    w = _extract.windows(b, br, _HAPROXY_WIDTH)
    try:
        inside = (br[:, None] + np.arange(_HAPROXY_WIDTH)[None, :]) >= ends[np.minimum(line, n - 1)][:, None]
        w[inside] = 0
        day, okd = _digits(w, [1, 2])
        year, oky = _digits(w, [8, 9, 10, 11])
        month, okm = _month_of(w, 4)
        sod, okt = _hms(w, 13)
        ok &= okd & oky & okm & okt
        ok &= (w[:, 3] == ord("/")) & (w[:, 7] == ord("/")) & (w[:, 12] == ord(":"))
        ok &= _end_fraction(w, 21, ord("]"))
        secs, okc = _date(year, month, day, sod)
        ok &= okc
        rows, k = _first_per_line(line, ok)
        local[rows] = secs[k]
        good[rows] = True
        for a in (secs, sod, day, year, month, line, k):
            a.fill(0)
    finally:
        w.fill(0)
    return local, good


_WEEKDAYS = (b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed")  # 1970-01-01 was a Thursday
_WEEKDAY_CODES = np.array([(d[0] << 16) | (d[1] << 8) | d[2] for d in _WEEKDAYS], dtype=np.int64)
_APACHE_WIDTH = 40


def _apache_error(b: np.ndarray, starts: np.ndarray, ends: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Apache's error log, ``[Www Mmm dd HH:MM:SS(.ffffff) yyyy]`` opening the line (the weekday
    must agree with the date): ``(local seconds, good)`` per line."""
    n = starts.size
    local = np.zeros(n, dtype=np.int64)
    good = np.zeros(n, dtype=bool)
    if n == 0:
        return local, good
    w = _extract.windows(b, starts, _APACHE_WIDTH)
    try:
        w[(starts[:, None] + np.arange(_APACHE_WIDTH)[None, :]) >= ends[:, None]] = 0
        ok = (w[:, 0] == ord("[")) & (w[:, 4] == ord(" ")) & (w[:, 8] == ord(" "))
        ok &= w[:, 11] == ord(" ")
        month, okm = _month_of(w, 5)
        day, okd = _digits(w, [9, 10])
        sod, okt = _hms(w, 12)
        ok &= okm & okd & okt
        # the year after the seconds' optional fraction: " yyyy]"
        y0 = np.full(n, 20)
        frac = w[:, 20] == ord(".")
        if bool(frac.any()):
            y0[frac] = _stop_at(w[frac], 21)
        ok &= (y0 + 6 <= _APACHE_WIDTH) & ((y0 > 21) | ~frac)
        c = np.minimum(y0, _APACHE_WIDTH - 6)[:, None] + np.arange(6)[None, :]
        yw = w[np.arange(n)[:, None], c]
        year, oky = _digits(yw, [1, 2, 3, 4])
        ok &= oky & (yw[:, 0] == ord(" ")) & (yw[:, 5] == ord("]"))
        secs, okc = _date(year, month, day, sod)
        ok &= okc
        wd = (w[:, 1].astype(np.int64) << 16) | (w[:, 2].astype(np.int64) << 8) | w[:, 3]
        ok &= _WEEKDAY_CODES[np.floor_divide(secs, 86400) % 7] == wd
        local[ok] = secs[ok]
        good[ok] = True
        for a in (yw, secs, sod, day, year, month, wd):
            a.fill(0)
    finally:
        w.fill(0)
    return local, good


#: ``yyyy/mm/dd HH:MM:SS``: the separators' columns and bytes (the digits are ISO 8601's columns).
_NGINX_SEPS = np.array([4, 7, 10, 13, 16])
_NGINX_SEP_VALUES = np.frombuffer(b"// ::", dtype=np.uint8)


def _nginx_error(b: np.ndarray, starts: np.ndarray, ends: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """nginx's error log, ``yyyy/mm/dd HH:MM:SS [level]`` opening the line: ``(local seconds,
    good)`` per line."""
    n = starts.size
    local = np.zeros(n, dtype=np.int64)
    good = np.zeros(n, dtype=bool)
    if n == 0:
        return local, good
    w = _extract.windows(b, starts, 20)
    try:
        w[(starts[:, None] + np.arange(20)[None, :]) >= ends[:, None]] = 0
        d8 = w[:, _ISO_DIGITS] - np.uint8(48)  # the digits sit in ISO 8601's columns
        ok = (d8 <= 9).all(axis=1) & (w[:, _NGINX_SEPS] == _NGINX_SEP_VALUES).all(axis=1)
        ok &= (w[:, 19] == ord(" ")) | (w[:, 19] == 0)
        d = d8.astype(np.int64)
        secs, okc = _civil_seconds(d)
        ok &= okc
        local[ok] = secs[ok]
        good[ok] = True
        for a in (secs, d, d8):
            a.fill(0)
    finally:
        w.fill(0)
    return local, good


def _squid(b: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Squid's native access.log: field 1, epoch seconds with milliseconds (UTC); through syslog
    (``... squid[PID]: 1795514400.123 ...``) the value after the first ``: ``."""
    n = starts.size
    out = np.full(n, NAT)
    if n == 0:
        return out
    vs = starts.copy()
    head = b[np.minimum(starts, max(b.size - 1, 0))]
    wrapped = ((head - np.uint8(48)) > 9) & (ends > starts)
    if bool(wrapped.any()):
        colon = np.flatnonzero(b[:-1] == ord(":")) if b.size > 1 else np.zeros(0, dtype=np.intp)
        colon = colon[b[colon + 1] == ord(" ")]
        r = np.flatnonzero(wrapped)
        k = np.searchsorted(colon, starts[r])
        has = k < colon.size
        pos = colon[np.minimum(k, max(colon.size - 1, 0))] if colon.size else starts[r]
        has &= pos < ends[r]
        vs[r] = np.where(has, pos + 2, ends[r])
    sp = _extract.Spans.new(n)
    rows = np.flatnonzero(vs < ends)
    sp.state[rows] = _extract.SPAN
    sp.ts[rows], sp.te[rows] = vs[rows], ends[rows]
    return _spans_times(b, starts, sp, _epoch, _EPOCH_WIDTH)


def _syslog(b: np.ndarray, starts: np.ndarray, ends: np.ndarray
            ) -> dict[str, np.ndarray]:
    """The syslog time opening each line (after an optional ``<PRI>`` and RFC 5424's version
    ``1 ``): RFC 3164's ``Mmm dd HH:MM:SS`` (the day blank-padded or not; no year, no zone), or
    an RFC 5424 / ISO 8601 time (``2026-11-26T10:00:00.123+01:00``; one without a zone is local).

    Returns arrays per line: ``bsd`` (an RFC 3164 time: ``month``, ``day``, ``sod``), ``iso``
    (an ISO time: ``secs``, already UTC where ``zoned``, else local)."""
    n = starts.size
    w = _extract.windows(b, starts, _ISO_WIDTH + 8)
    width = w.shape[1]
    try:
        w[(starts[:, None] + np.arange(width)[None, :]) >= ends[:, None]] = 0
        skip = np.zeros(n, dtype=np.int64)
        pri = w[:, 0] == ord("<")
        if bool(pri.any()):  # "<34>" or "<34>1 "
            r = np.flatnonzero(pri)
            gt = np.argmax(w[r, :6] == ord(">"), axis=1)
            okp = (gt >= 2) & (w[r, gt] == ord(">"))
            after = gt + 1
            v1 = (w[r, np.minimum(after, width - 1)] == ord("1")) & \
                 (w[r, np.minimum(after + 1, width - 1)] == ord(" "))
            skip[r] = np.where(okp, after + 2 * v1, 0)
        c = skip[:, None] + np.arange(_ISO_WIDTH)[None, :]
        v = w[np.arange(n)[:, None], np.minimum(c, width - 1)]
        iso = v[:, 4] == ord("-")
        out: dict[str, np.ndarray] = {}
        month, ok = _month_of(v, 0)
        ok &= ~iso & (v[:, 3] == ord(" ")) & (v[:, 6] == ord(" ")) & (v[:, 15] == ord(" "))
        d1 = v[:, 4]
        pad = d1 == ord(" ")
        day, okd = _digits(v, [4, 5])
        d2, okd2 = _digits(v, [5])
        day = np.where(pad, d2, day)
        ok &= np.where(pad, okd2, okd) & (day >= 1) & (day <= days_in_month(
            np.full(n, 2000, dtype=np.int64), month))  # Feb 29 exists in some year
        sod, okt = _hms(v, 7)
        ok &= okt
        out["bsd"], out["month"], out["day"], out["sod"] = ok, month, day, sod
        secs = np.zeros(n, dtype=np.int64)
        good = np.zeros(n, dtype=bool)
        zoned = np.zeros(n, dtype=bool)
        r = np.flatnonzero(iso)
        if r.size:
            vi = v[r]
            blank = np.cumsum(vi[:, 19:] == ord(" "), axis=1) > 0  # the stamp ends at a blank
            vi[:, 19:][blank] = 0
            s_, g_, z_ = _iso_parts(vi)
            vi.fill(0)
            secs[r], good[r], zoned[r] = s_, g_, z_
            s_.fill(0)
        out["iso"], out["secs"], out["zoned"] = good, secs, zoned
        v.fill(0)
        d2.fill(0)
    finally:
        w.fill(0)
    return out



class TimeReader:
    """The time of every line of one input stream in format ``fmt`` (a ``--format`` spec).

    Header formats (``w3c``, ``zeek``) keep their ``#Fields:``/``#fields`` header from one chunk
    to the next, as :class:`panstream.inputs.parser.LineParser` does: use one reader per input stream.
    Before any header, the published layouts are assumed (CloudFront: ``date`` and ``time`` are
    columns 1 and 2; Zeek: ``ts`` is column 1), so a Kafka topic of header-less lines still reads.

    * ``clf`` (and ``vhost``, ``xff``: the same ``[...]``): ``[24/Nov/2026:10:00:00 +0000]``;
    * ``json:PATH``: the first of the top-level keys ``ts``, ``timestamp``, ``start_time``,
      ``time``, ``@timestamp`` in the line: epoch seconds (Caddy's ``"ts":1795600000.123``, as a
      number or a string) or ISO 8601 (GCP's ``timestamp``, Envoy's ``start_time``);
    * ``w3c:FIELD``: the ``date`` and ``time`` fields (UTC, CloudFront and IIS);
    * ``zeek:FIELD``: the ``ts`` field (epoch seconds);
    * ``alb``: field 2, ``elb``: field 1 (ISO 8601, UTC);
    * ``squid``: field 1, epoch seconds (UTC);
    * local times, which need ``zone`` (:data:`LOCAL_FORMATS`): ``haproxy``'s accept date
      ``[30/Jul/2018:09:03:52.726]``, ``apache-error``'s ``[Thu Nov 26 10:00:00.123456 2026]``,
      ``nginx-error``'s ``2026/11/26 10:00:00``, and the syslog time of ``sshd`` and ``pam``
      lines: ``Dec 10 06:55:46`` (no year either: :data:`YEARLESS_FORMATS`) or an RFC 5424 /
      ISO 8601 stamp (with a zone it is exact; without one it is local).

    Args:
        fmt: the format.
        zone: the zone of the local times (:func:`panstream.windows.zones.parse_zone` or its
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
        self.zone = parse_zone(zone) if isinstance(zone, str) else zone
        self.span = span
        self.clock = clock
        big = 1 << 30
        if self.kind == "w3c":
            self._cols = [_extract.Columns("w3c", "date", big), _extract.Columns("w3c", "time", big)]
        elif self.kind == "zeek":
            self._cols = [_extract.Columns("zeek", "ts", big)]
        elif self.kind in ("alb", "elb"):
            self._field = _extract.WhitespaceField(2 if self.kind == "alb" else 1, big)

    def __call__(self, b: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        if self.kind in ("clf", "vhost", "xff"):
            return _clf(b, starts, ends)
        if self.kind == "json":
            return _json(b, starts, ends)
        if self.kind in ("alb", "elb"):
            return _spans_times(b, starts, self._field.locate(b, starts, ends), _iso, _ISO_WIDTH)
        if self.kind == "squid":
            return _squid(b, starts, ends)
        if self.kind in LOCAL_FORMATS:
            return self._local(b, starts, ends)
        for c, default in zip(self._cols, (1, 2), strict=False):
            if c.col is None and not c.seen_first:
                c.col = default  # no header yet: the published layout
                c.seen_first = True
        if self.kind == "zeek":
            if self._cols[0].sep is None:
                self._cols[0].sep = 9
            return _spans_times(b, starts, self._cols[0].locate(b, starts, ends), _epoch,
                                _EPOCH_WIDTH)
        return self._w3c(b, starts, ends)

    def _years(self, now: float) -> tuple[int, int]:
        """The public years whose zone offsets are looked up: the range's, or the clock's +- 1."""
        if self.span is not None:
            return utc_year(self.span[0]) - 1, utc_year(self.span[1]) + 1
        y = utc_year(now)
        return y - 1, y + 1

    def _local(self, b: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """A local time per line, made UTC with the zone (and, for syslog, given its year)."""
        zone = self.zone
        assert zone is not None
        n = starts.size
        out = np.full(n, NAT)
        now = float(self.clock() if self.clock is not None else _time.time())
        lo, hi = self._years(now)
        if self.kind == "haproxy":
            parts = [_haproxy(b, starts, ends)]
        elif self.kind == "apache-error":
            parts = [_apache_error(b, starts, ends)]
        elif self.kind == "nginx-error":
            parts = [_nginx_error(b, starts, ends)]
        else:
            sl = _syslog(b, starts, ends)
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

    def _w3c(self, b: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        date = self._cols[0].locate(b, starts, ends)
        tm = self._cols[1].locate(b, starts, ends)
        out = np.full(starts.size, NAT)
        rows = np.flatnonzero((date.state == _extract.SPAN) & (tm.state == _extract.SPAN)
                              & (date.te - date.ts == 10) & (tm.te - tm.ts >= 8))
        if rows.size == 0:
            return out
        dw = _extract.windows(b, date.ts[rows], 10)
        tw = _extract.windows(b, tm.ts[rows], 8)
        w = np.zeros((rows.size, 20), dtype=np.uint8)
        try:
            w[:, :10] = dw
            w[:, 10] = ord("T")
            w[:, 11:19] = tw
            # an optional fraction of the time field is dropped: the value ends after the seconds
            secs, good = _iso(w)
            out[rows[good]] = secs[good].astype("datetime64[s]")
            secs.fill(0)
        finally:
            dw.fill(0)
            tw.fill(0)
            w.fill(0)
        return out


#: JSON keys of a record's time, in order of preference, in the published shapes: Caddy and
#: Zeek (``ts``), GCP Cloud Logging (``timestamp``), Envoy (``start_time``), then common names.
JSON_TIME_KEYS = ("ts", "timestamp", "start_time", "time", "@timestamp")
_JSON_KEYS = [(k, b'"%s"' % k.encode()) for k in JSON_TIME_KEYS]


def _find_key(data: bytes, key: bytes) -> np.ndarray:
    """Every position of ``key`` in ``data``: one ``bytes.split`` in C (a memchr-speed literal
    search), the positions from the pieces' lengths; no Python work per hit. The pieces (the
    chunk's bytes between keys) are dropped at once."""
    if key not in data:  # a search without copies: most chunks hold only one of the keys
        return np.zeros(0, dtype=np.intp)
    pieces = data.split(key)
    try:
        if len(pieces) == 1:
            return np.zeros(0, dtype=np.intp)
        lens = np.fromiter(map(len, pieces), dtype=np.intp, count=len(pieces))
    finally:
        pieces.clear()
    lens[:-1] += len(key)
    pos = np.cumsum(lens[:-1]) - len(key)
    lens.fill(0)
    return pos


def _json_values(b: np.ndarray, data: bytes, key: bytes, klen: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``(value starts, quoted)`` after every ``"key"`` followed by ``:`` (a blank allowed on each
    side), vectorized."""
    pos = _find_key(data, key)
    if pos.size == 0:
        return pos, np.zeros(0, dtype=bool)
    w = _extract.windows(b, pos + klen, 4)
    try:
        colon1 = w[:, 0] == ord(":")
        colon2 = (w[:, 0] == ord(" ")) & (w[:, 1] == ord(":"))
        after = np.where(colon1, 1, 2)  # past the colon
        ok = colon1 | colon2
        blank = w[np.arange(w.shape[0]), after] == ord(" ")
        after += blank
        quoted = w[np.arange(w.shape[0]), np.minimum(after, 3)] == ord('"')
        vs = pos + klen + after + quoted
    finally:
        w.fill(0)
    pos.fill(0)
    return vs[ok], quoted[ok]


def _json(b: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """JSON lines: the value of the first time key (:data:`JSON_TIME_KEYS`, in order) a line has,
    its first occurrence: an ISO 8601 string or epoch seconds (a number or a string). Keys are
    searched as literals (:func:`_find_key`) over the whole chunk (the next key only while lines
    are left without a time); the values are parsed vectorized."""
    n = starts.size
    out = np.full(n, NAT)
    if n == 0:
        return out
    left = n
    done = np.zeros(n, dtype=bool)
    data = b.tobytes()  # one copy of the chunk for the searches, gone with the call
    for k, key in _JSON_KEYS:
        vs, q = _json_values(b, data, key, len(k) + 2)
        if vs.size == 0:
            continue
        line = np.searchsorted(ends, vs, side="left")
        inside = line < n
        vs, q, line = vs[inside], q[inside], line[inside]
        rows, first = np.unique(line, return_index=True)  # the key's first occurrence per line
        new = ~done[rows]
        rows, vs, q = rows[new], vs[first[new]], q[first[new]]
        if rows.size:
            _json_parse(b, ends, rows, vs, q, out)
            done[rows] = True
            left -= int(rows.size)
        line.fill(0)
        if left == 0:
            break
    return out


def _json_parse(b: np.ndarray, ends: np.ndarray, rows: np.ndarray, vs: np.ndarray, q: np.ndarray,
                out: np.ndarray) -> None:
    w = _extract.windows(b, vs, _ISO_WIDTH)
    try:
        w[(vs[:, None] + np.arange(_ISO_WIDTH)[None, :]) >= ends[rows][:, None]] = 0
        # an ISO date has '-' at column 4; anything else is read as epoch seconds
        iso = w[:, 4] == ord("-")
        for sel, parse in ((iso & q, _iso), (~iso, _epoch)):
            r = np.flatnonzero(sel)
            if r.size:
                secs, good = parse(w[r])
                out[rows[r[good]]] = secs[good].astype("datetime64[s]")
                secs.fill(0)
    finally:
        w.fill(0)


def _kind(fmt: str) -> str:
    return fmt.partition(":")[0].strip().lower()


_KINDS = TIMED_FORMATS
