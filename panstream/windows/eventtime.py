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
  ==============  ========================================================================

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
from collections.abc import Callable

import numpy as np

from panstream.errors import ConfigurationError
from panstream.inputs import extractors as _extract

__all__ = ["JSON_TIME_KEYS", "NAT", "TIMED_FORMATS", "TimeReader", "has_time", "label",
           "line_bounds", "lines_and_times", "parse_duration", "seconds", "times", "window_start"]

#: Not-a-time, the value of a line without a time.
NAT = np.datetime64("NaT", "s")

#: Formats whose lines carry a time :func:`times` can read.
TIMED_FORMATS = ("clf", "json", "w3c", "zeek", "alb", "elb")

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
    return _kind(fmt) in _KINDS


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
    leap = ((year % 4 == 0) & (year % 100 != 0)) | (year % 400 == 0)
    dim = _DAYS_IN_MONTH[m1 - 1] - ((m1 == 2) & ~leap)
    good &= (day >= 1) & (day <= dim) & (hh < 24) & (mm < 60) & (ss <= 60)
    secs = _days_from_civil(year, m1, day) * 86400 + hh * 3600 + mm * 60 + ss
    return secs, good


def _iso(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(seconds, good)`` of ISO 8601 values at the start of each row of ``w`` (``n x 40``):
    ``YYYY-MM-DDTHH:MM:SS`` (``T`` or a blank), an optional fraction (dropped: windows are whole
    seconds), then ``Z``, ``+hh:mm``, ``+hhmm`` or ``+hh``; no zone at all is read as UTC (W3C
    and most JSON writers log UTC). Anything else is not good."""
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
    return secs - offset, good


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


class TimeReader:
    """The time of every line of one input stream in format ``fmt`` (a ``--format`` spec).

    Header formats (``w3c``, ``zeek``) keep their ``#Fields:``/``#fields`` header from one chunk
    to the next, as :class:`panstream.inputs.parser.LineParser` does: use one reader per input stream.
    Before any header, the published layouts are assumed (CloudFront: ``date`` and ``time`` are
    columns 1 and 2; Zeek: ``ts`` is column 1), so a Kafka topic of header-less lines still reads.

    * ``clf``: ``[24/Nov/2026:10:00:00 +0000]``;
    * ``json:PATH``: the first of the top-level keys ``ts``, ``timestamp``, ``start_time``,
      ``time``, ``@timestamp`` in the line: epoch seconds (Caddy's ``"ts":1795600000.123``, as a
      number or a string) or ISO 8601 (GCP's ``timestamp``, Envoy's ``start_time``);
    * ``w3c:FIELD``: the ``date`` and ``time`` fields (UTC, CloudFront and IIS);
    * ``zeek:FIELD``: the ``ts`` field (epoch seconds);
    * ``alb``: field 2, ``elb``: field 1 (ISO 8601, UTC).

    Raises:
        ConfigurationError: ``fmt`` carries no time.
    """

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self.kind = _kind(fmt)
        if self.kind not in _KINDS:
            msg = (f"lines of format {fmt!r} carry no time this panstream can read (timed "
                   f"formats: {', '.join(TIMED_FORMATS)}): use --time processing")
            raise ConfigurationError(msg)
        big = 1 << 30
        if self.kind == "w3c":
            self._cols = [_extract.Columns("w3c", "date", big), _extract.Columns("w3c", "time", big)]
        elif self.kind == "zeek":
            self._cols = [_extract.Columns("zeek", "ts", big)]
        elif self.kind in ("alb", "elb"):
            self._field = _extract.WhitespaceField(2 if self.kind == "alb" else 1, big)

    def __call__(self, b: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        if self.kind == "clf":
            return _clf(b, starts, ends)
        if self.kind == "json":
            return _json(b, starts, ends)
        if self.kind in ("alb", "elb"):
            return _spans_times(b, starts, self._field.locate(b, starts, ends), _iso, _ISO_WIDTH)
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
