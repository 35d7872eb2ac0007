"""Event time: the time written in each log line, vectorized per chunk, and window arithmetic.

A windowed ``ingest`` (:mod:`panstream.windows`) puts every line in the window of the time the
line itself carries (*event time*), so that a week of rotated files replayed at once still gives one
release per day. This module is pure: it turns a chunk of complete lines into one time per line
and knows nothing of tables, files or clocks.

* :func:`times` (``chunk, format -> datetime64[s]`` per line, ``NaT`` where a line has no time
  that parses) is the one entry point; :data:`TIMED_FORMATS` names the formats that carry a time.
  Only ``clf`` does today; a format that gains a time field (ISO 8601 or epoch fields of
  JSON/W3C/Zeek records) adds one extractor to :data:`_EXTRACTORS` and nothing else changes.
* The CLF extractor is vectorized: the first ``[`` of every line, then the 26 bytes
  ``24/Nov/2026:10:00:00 +0000`` gathered into an ``n x 26`` matrix, checked (digits, separators,
  month name, ranges, ``]``) and converted with integer arithmetic (days from the civil date,
  minus the UTC offset). No Python work per line.
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
>>> parse_duration("1d"), parse_duration("15m"), parse_duration("90")
(86400, 900, 90)
>>> label(window_start(1_795_514_400, 86400))
'2026-11-24T00:00:00Z'
"""

from __future__ import annotations

import datetime as _dt
import re

import numpy as np

from panstream.errors import ConfigurationError

__all__ = ["NAT", "TIMED_FORMATS", "has_time", "label", "line_bounds", "lines_and_times",
           "parse_duration", "seconds", "times", "window_start"]

#: Not-a-time, the value of a line without a time.
NAT = np.datetime64("NaT", "s")

#: Formats whose lines carry a time :func:`times` can read.
TIMED_FORMATS = ("clf",)

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$", re.IGNORECASE)

_MONTHS = (b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct",
           b"Nov", b"Dec")
_MONTH_CODES = np.array([(m[0] << 16) | (m[1] << 8) | m[2] for m in _MONTHS], dtype=np.int64)
_MONTH_ORDER = np.argsort(_MONTH_CODES)
_MONTH_SORTED = _MONTH_CODES[_MONTH_ORDER]
_DAYS_IN_MONTH = np.array([31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.int64)

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
    return fmt in _EXTRACTORS


def times(chunk: bytes | bytearray | memoryview | np.ndarray, fmt: str) -> np.ndarray:
    """The time of every line of ``chunk`` (complete lines, ``\\n``-separated) as ``datetime64[s]``
    (UTC), ``NaT`` for a line without a readable time. One entry per line, in order (a missing
    final newline is implied, as the parser does).

    Args:
        chunk: the lines.
        fmt: a format of :data:`TIMED_FORMATS`.

    Raises:
        ConfigurationError: ``fmt`` carries no time.
    """
    return lines_and_times(chunk, fmt)[2]


def lines_and_times(chunk: bytes | bytearray | memoryview | np.ndarray, fmt: str
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(starts, ends, times)``: the bounds of every line (:func:`line_bounds`) and its time
    (:func:`times`), from one pass over the line breaks.

    Raises:
        ConfigurationError: ``fmt`` carries no time.
    """
    fn = _EXTRACTORS.get(fmt)
    if fn is None:
        msg = (f"lines of format {fmt!r} carry no time this panstream can read (timed formats: "
               f"{', '.join(TIMED_FORMATS)}): use --time processing")
        raise ConfigurationError(msg)
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


def _days_from_civil(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of the proleptic Gregorian date (H. Hinnant's algorithm), vectorized."""
    y = y - (m <= 2)
    era = np.floor_divide(y, 400)
    yoe = y - era * 400
    mp = (m + 9) % 12
    doy = (153 * mp + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


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
        code = (w[:, 4].astype(np.int64) << 16) | (w[:, 5].astype(np.int64) << 8) | w[:, 6]
        mi = np.minimum(np.searchsorted(_MONTH_SORTED, code), 11)
        good &= _MONTH_SORTED[mi] == code
        month = _MONTH_ORDER[mi] + 1
        d = d8.astype(np.int64)
        day = d[:, 0] * 10 + d[:, 1]
        year = d[:, 2] * 1000 + d[:, 3] * 100 + d[:, 4] * 10 + d[:, 5]
        hh, mm, ss = d[:, 6] * 10 + d[:, 7], d[:, 8] * 10 + d[:, 9], d[:, 10] * 10 + d[:, 11]
        zh, zm = d[:, 12] * 10 + d[:, 13], d[:, 14] * 10 + d[:, 15]
        leap = ((year % 4 == 0) & (year % 100 != 0)) | (year % 400 == 0)
        dim = _DAYS_IN_MONTH[month - 1] - ((month == 2) & ~leap)
        good &= (day >= 1) & (day <= dim) & (hh < 24) & (mm < 60) & (ss <= 60)
        good &= (zh <= 14) & (zm < 60)
        offset = np.where(sign == ord("-"), -1, 1) * (zh * 3600 + zm * 60)
        secs = _days_from_civil(year, month, day) * 86400 + hh * 3600 + mm * 60 + ss - offset
        out[rows[good]] = secs[good].astype("datetime64[s]")
        d.fill(0)
        d8.fill(0)
    finally:
        w.fill(0)
    return out


_EXTRACTORS = {"clf": _clf}
