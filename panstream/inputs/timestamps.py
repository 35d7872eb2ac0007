"""The times written in log lines, read vectorized: the pieces every format's time reader uses.

A format module (:mod:`panstream.inputs.formats`) says where its time is and reads it with these:
ISO 8601 (:func:`read_iso`: ``YYYY-MM-DDTHH:MM:SS`` with an optional fraction and ``Z``,
``+hh:mm``, ``+hhmm`` or ``+hh``; no zone: UTC) and UNIX epochs (:func:`read_epoch`: 1 to 12
digits of seconds, an optional fraction) at the start of each row of an ``n x width`` byte matrix;
the pieces of the local formats (:func:`month_of`, :func:`hms`, :func:`digits`,
:func:`local_date`); :func:`spans_times` for a field an extractor located. Fractions are dropped
(windows are whole seconds), never rounded up. No Python work per line: each value's bytes are
gathered into a matrix (:func:`panstream.inputs.scan.windows`), checked (digits, separators,
month names, ranges, the value's end) and converted with integer arithmetic (days from the civil
date, minus the UTC offset).

The per-line times are data (when someone came): callers wipe the arrays once they are used.
These lived in ``panstream.windows.eventtime`` until issue 36 (a line's time is read in
``inputs/``, beside its address).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable

import numpy as np

from panstream.inputs.extractors import SPAN, Spans
from panstream.inputs.scan import windows
from panstream.inputs.zones import days_from_civil, days_in_month

#: Not-a-time, the value of a line without a time.
NAT = np.datetime64("NaT", "s")

_MONTHS = (b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct",
           b"Nov", b"Dec")
_MONTH_CODES = np.array([(m[0] << 16) | (m[1] << 8) | m[2] for m in _MONTHS], dtype=np.int64)
_MONTH_ORDER = np.argsort(_MONTH_CODES)
_MONTH_SORTED = _MONTH_CODES[_MONTH_ORDER]

def label(start: int | float) -> str:
    """The ISO 8601 UTC name of an instant: ``2026-11-24T10:00:00Z``."""
    return _dt.datetime.fromtimestamp(int(start), _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

def seconds(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(int64 UNIX seconds, valid)`` of a :func:`times` array (seconds are 0 where not valid)."""
    valid = ~np.isnat(t)
    s = t.astype("datetime64[s]").astype(np.int64)
    s[~valid] = 0
    return s, valid


def as_u8(chunk: bytes | bytearray | memoryview | np.ndarray) -> np.ndarray:
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

# ---------------------------------------------------------------- ISO 8601 and epoch fields
#: Bytes read from the start of a time value: ``2026-11-24T10:00:00.123456789+05:30`` and room.
ISO_WIDTH = 40
ISO_DIGITS = np.array([0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18])
_ISO_SEPS = np.array([4, 7, 13, 16])
_ISO_SEP_VALUES = np.array([ord(c) for c in "--::"], dtype=np.uint8)
EPOCH_WIDTH = 24


def stop_at(w: np.ndarray, col: int) -> np.ndarray:
    """Per row, the first column ``>= col`` that is not a digit (``w.shape[1]`` if none)."""
    nd = (w[:, col:] - np.uint8(48)) > 9
    return np.where(nd.any(axis=1), np.argmax(nd, axis=1) + col, w.shape[1])


def civil_seconds(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(seconds, good)`` of the int64 digit matrix ``YYYYMMDDHHMMSS`` (14 columns), UTC."""
    year = d[:, 0] * 1000 + d[:, 1] * 100 + d[:, 2] * 10 + d[:, 3]
    month, day = d[:, 4] * 10 + d[:, 5], d[:, 6] * 10 + d[:, 7]
    hh, mm, ss = d[:, 8] * 10 + d[:, 9], d[:, 10] * 10 + d[:, 11], d[:, 12] * 10 + d[:, 13]
    good = (month >= 1) & (month <= 12)
    m1 = np.clip(month, 1, 12)
    good &= (day >= 1) & (day <= days_in_month(year, m1)) & (hh < 24) & (mm < 60) & (ss <= 60)
    secs = days_from_civil(year, m1, day) * 86400 + hh * 3600 + mm * 60 + ss
    return secs, good


def read_iso(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(seconds, good)`` of ISO 8601 values at the start of each row of ``w`` (``n x 40``):
    ``YYYY-MM-DDTHH:MM:SS`` (``T`` or a blank), an optional fraction (dropped: windows are whole
    seconds), then ``Z``, ``+hh:mm``, ``+hhmm`` or ``+hh``; no zone at all is read as UTC (W3C
    and most JSON writers log UTC). Anything else is not good."""
    secs, good, zoned = iso_parts(w)
    zoned.fill(False)
    return secs, good


def iso_parts(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(seconds, good, zoned)`` of :func:`read_iso`: ``zoned`` says which values carried a zone
    (their seconds are UTC); the others' seconds are the local reading (as if UTC)."""
    d8 = w[:, ISO_DIGITS] - np.uint8(48)
    good = (d8 <= 9).all(axis=1)
    good &= (w[:, _ISO_SEPS] == _ISO_SEP_VALUES).all(axis=1)
    t = w[:, 10]
    good &= (t == ord("T")) | (t == ord("t")) | (t == ord(" "))
    d = d8.astype(np.int64)
    secs, ok = civil_seconds(d)
    good &= ok
    rows = np.arange(w.shape[0])
    z = np.full(w.shape[0], 19)
    frac = w[:, 19] == ord(".")
    if bool(frac.any()):
        z[frac] = stop_at(w[frac], 20)
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


def read_epoch(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(seconds, good)`` of UNIX epoch seconds at the start of each row of ``w``: 1 to 12
    digits, then an optional fraction (dropped), then the value's end."""
    n = w.shape[0]
    stop = stop_at(w, 0)
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
        end[r] = stop_at(sub, 0)
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


def spans_times(b: np.ndarray, starts: np.ndarray, sp: Spans,
                 parse: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]], width: int
                 ) -> np.ndarray:
    """Times of the located fields ``b[ts:te]`` (bytes past a field's end are zeroed)."""
    out = np.full(starts.size, NAT)
    rows = np.flatnonzero(sp.state == SPAN)
    if rows.size == 0:
        return out
    ts, te = sp.ts[rows], sp.te[rows]
    w = windows(b, ts, width)
    try:
        w[(ts[:, None] + np.arange(width)[None, :]) >= te[:, None]] = 0
        secs, good = parse(w)
        out[rows[good]] = secs[good].astype("datetime64[s]")
        secs.fill(0)
    finally:
        w.fill(0)
    return out

# ------------------------------------------------------- local times: no zone (and no year)
def month_of(w: np.ndarray, col: int) -> tuple[np.ndarray, np.ndarray]:
    """``(month 1..12, good)`` of the English month abbreviation at column ``col`` of ``w``."""
    code = (w[:, col].astype(np.int64) << 16) | (w[:, col + 1].astype(np.int64) << 8) | w[:, col + 2]
    mi = np.minimum(np.searchsorted(_MONTH_SORTED, code), 11)
    good = _MONTH_SORTED[mi] == code
    month = _MONTH_ORDER[mi] + 1
    code.fill(0)
    return month, good


def _two(d: np.ndarray, j: int) -> np.ndarray:
    return d[:, j] * 10 + d[:, j + 1]


def hms(w: np.ndarray, col: int) -> tuple[np.ndarray, np.ndarray]:
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


def digits(w: np.ndarray, cols: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """``(value, good)`` of the decimal digits at ``cols`` of each row."""
    d8 = w[:, cols] - np.uint8(48)
    good = (d8 <= 9).all(axis=1)
    v = np.zeros(w.shape[0], dtype=np.int64)
    for j in range(len(cols)):
        v = v * 10 + d8[:, j]
    d8.fill(0)
    return v, good


def local_date(year: np.ndarray, month: np.ndarray, day: np.ndarray, sod: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray]:
    """``(local seconds, good)`` of a civil date and second of the day (the day checked)."""
    good = (day >= 1) & (day <= days_in_month(year, month))
    return days_from_civil(year, month, day) * 86400 + sod, good


def end_fraction(w: np.ndarray, col: int, closing: int) -> np.ndarray:
    """Whether column ``col`` holds ``closing``, or a ``.`` and digits then ``closing``."""
    at = w[:, col]
    ok = at == closing
    frac = at == ord(".")
    if bool(frac.any()):
        r = np.flatnonzero(frac)
        stop = stop_at(w[r], col + 1)
        ok[r] = (stop > col + 1) & (stop < w.shape[1]) & (w[r, np.minimum(stop, w.shape[1] - 1)]
                                                            == closing)
    return ok


def line_of(pos: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The line of each position (``ends``: the lines' exclusive ends, sorted)."""
    return np.searchsorted(ends, pos, side="left")


def first_per_line(line: np.ndarray, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(lines, index into the candidates)`` of the first good candidate of each line
    (candidates in position order)."""
    idx = np.flatnonzero(ok)
    rows, first = np.unique(line[idx], return_index=True)
    return rows, idx[first]


#: ``[30/Jul/2018:09:03:52.726]``: 21 bytes to the seconds, room for a fraction and the ``]``.


def head_window(b: np.ndarray, starts: np.ndarray, ends: np.ndarray, width: int) -> np.ndarray:
    """The first ``width`` bytes of each line (zero past its end), for a time that opens the
    line; the caller wipes it."""
    w = windows(b, starts, width)
    w[(starts[:, None] + np.arange(width)[None, :]) >= ends[:, None]] = 0
    return w


def no_local(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(local seconds, good)`` of ``n`` lines none of which has a time yet."""
    return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)


def wipe(*arrays: np.ndarray) -> None:
    """Overwrite working arrays with zeros once used (they hold times or where they are)."""
    for a in arrays:
        a.fill(0)


def place(local: np.ndarray, good: np.ndarray, rows: np.ndarray, secs: np.ndarray) -> None:
    """Set the local seconds ``secs`` (one per row) of the lines ``rows`` and mark them good."""
    local[rows] = secs
    good[rows] = True
