"""The vectorized IPv6 core: IPv6 client tokens read and written with NumPy, over whole chunks.

Issue 38: every IPv6 line used to leave the vectorized parse and go through Python one line at a
time (:func:`panstream.universe.addresses.address_key`, about 3 us a line), and the sketch wrote each
client's text with ``socket.inet_ntop``. Here both are array code, as
:mod:`panstream.inputs.ipv4` is for IPv4:

**Reading** (:func:`address_lines`, :func:`address_spans`): the token's first 40 bytes (64 for
longer tokens) are gathered into an ``n x 40`` matrix; its colons packed into one 64-bit mask per
row; the fields between the colons found in eight steps of a 32-entry table (each step reads the
next five bits of the mask); every field's one to four hex digits taken as one 32-bit word (from
the two aligned words it spans) and decoded by two lookups in a 65,536-entry table of two
characters (value, and how many of the two are hex digits: a count that does not match the
field's length rejects the row); ``::`` expanded by placing the fields after it at the right end.
The rarer spellings take a second vectorized pass over the rows the first rejected: ``[v6]``
and ``[v6]:port`` (the port checked as :mod:`panstream.inputs.ipv4` checks ``a.b.c.d:port``),
a zone id ``%eth0`` (dropped), an embedded dotted quad (``::ffff:a.b.c.d``,
``64:ff9b::a.b.c.d``; read by :func:`panstream.inputs.ipv4.ipv4_from_windows`), nine fields
(``1:2:3:4:5:6:7::``). An IPv4-mapped result is the IPv4 client, as everywhere
(:mod:`panstream.universe.addresses`).

Strictness: a row is accepted only when :func:`panstream.universe.addresses.address_key` would
return the same key (glibc's ``inet_pton`` rules: groups of one to four hex digits, one ``::`` at
most and never an empty address, a dotted quad only last and only after a colon, eight words in
all, fewer with ``::``); every row it does not accept (other spellings, junk, blanks, control or
non-ASCII bytes, tokens over 60 bytes) keeps going to that reference one line at a time, so the
fast path changes no result (``tests/parse/test_ipv6_fast.py`` fuzzes both against each other).

**Writing** (:func:`ipv6_text`): the RFC 5952 text of 128-bit keys, built from the integers with
tables: each 16-bit word's lowercase hex from a 65,536-entry table, the longest run of two or more
zero words (the first of equal runs) from a 256-entry table of the zero-word masks, and the pieces
placed at their offsets in a zero-padded ``n x 48`` byte matrix. It is bit-exact with
:func:`panstream.universe.addresses.canonical_text` for every key that is not IPv4 (what Presto's
``CAST(ipaddress AS varchar)`` prints: Guava's ``InetAddresses.toAddrString``).

The working arrays that hold addresses are overwritten with zeros before returning.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from panstream.inputs.extractors import windows
from panstream.inputs.ipv4 import (
    V6Keys,
    _address_lines,
    _ipv4_spans,
    ipv4_from_windows,
    port_ok,
)
from panstream.universe import register_token_reader
from panstream.universe.addresses import AddressKeys

_U = np.uint64
_WD = 64  #: bytes of a token read (a token must fit in the first ``_WD - 4``)
_MAX_TOKEN = _WD - 4
_SHORT = 40  #: bytes read first: an address without brackets, port or zone has 39 at most
_ZERO, _ONE = _U(0), _U(1)
_V4_HIGH = _U(0xFFFF)


def _two_char_table() -> np.ndarray:
    """For every two bytes ``c0 | c1 << 8`` (``c0`` first in the text): ``value | count << 8``,
    where count is how many leading characters are hex digits before a zero byte (0, 1 or 2) and
    value their hex value; 7 where the pair is neither two digits, one digit then a zero byte, nor
    two zero bytes."""
    val = np.full(256, -1, dtype=np.int64)
    for c in b"0123456789":
        val[c] = c - 48
    for c in b"abcdef":
        val[c] = val[c - 32] = c - 87
    c0 = np.arange(1 << 16) & 0xFF
    c1 = np.arange(1 << 16) >> 8
    v0, v1 = val[c0], val[c1]
    two = (v0 >= 0) & (v1 >= 0)
    one = (v0 >= 0) & (c1 == 0)
    none = (c0 == 0) & (c1 == 0)
    out = np.full(1 << 16, 7 << 8, dtype=np.int64)
    out[two] = (v0[two] << 4 | v1[two]) | 2 << 8
    out[one] = v0[one] | 1 << 8
    out[none] = 0
    return out.astype(np.uint16)


def _field_table() -> np.ndarray:
    """For every 5-bit slice of a separator mask: the index of its lowest set bit (the length of
    the field that starts there), 5 when no separator comes within five bytes."""
    out = np.full(32, 5, dtype=np.int64)
    for m in range(1, 32):
        out[m] = (m & -m).bit_length() - 1
    return out


_T2 = _two_char_table()
_STEP = (_field_table() + 1).astype(_U)  #: how far the next field starts
_LENMASK = np.array([0, 0xFF, 0xFFFF, 0xFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF], dtype=np.uint32)


def _mask64(flags: np.ndarray) -> np.ndarray:
    """Each row of an ``n x w`` boolean matrix (``w <= 64``) as one ``uint64`` (column j = bit j)."""
    n, width = flags.shape  # (width a multiple of 8: one flat packbits is much the fastest)
    packed = np.packbits(flags.reshape(-1), bitorder="little")
    if width == 64:
        return packed.view("<u8")
    out = np.zeros((n, 8), dtype=np.uint8)
    out[:, : width // 8] = packed.reshape(n, width // 8)
    return out.view("<u8")[:, 0]


def _ctz64(x: np.ndarray) -> np.ndarray:
    """Index of the lowest set bit of each ``uint64`` (64 where none)."""
    with np.errstate(over="ignore"):
        low = x & (~x + _ONE)
    pos = np.frexp(low.astype(np.float64))[1].astype(np.intp) - 1  # exact: a power of two
    pos[x == 0] = 64
    return pos


def _low(bits: np.ndarray) -> np.ndarray:
    """Masks of the ``bits`` (0..63) lowest bits."""
    return (_ONE << bits.astype(_U)) - _ONE


def _hex_words(w: np.ndarray, a0: np.ndarray, h: np.ndarray, extra: np.ndarray, fields: int = 9
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Read ``w[i, a0[i] : a0[i] + h[i]]`` as the hex part of an IPv6 address.

    The hex part is groups of one to four hex digits separated by single colons, with one ``::``
    at most; ``extra`` (0 or 2) words follow it (a dotted quad the caller reads and adds to the
    low word). Without ``::`` the words must number exactly eight, with it seven at most (glibc's
    ``inet_pton``). Returns ``(hi, lo, ok)``: the two 64-bit halves of the address (garbage where
    not ``ok``). The fields are held field-major (``fields x n``), so every step is one pass over
    contiguous rows; a hex part of more than ``fields`` fields (9 at most: ``1:2:3:4:5:6:7::``)
    is refused.
    """
    n, width = w.shape
    hu = np.clip(h, 0, width - 1).astype(_U)
    cm = _mask64(w == 58) >> a0.astype(_U)
    cm &= _low(hu)
    ok = (h >= 1) & (h + a0 <= width - 1)
    dc = cm & (cm >> _ONE)  # bit p: colons at p and p + 1
    with np.errstate(over="ignore"):
        ok &= (dc & (dc - _ONE)) == 0  # one '::' at most (':::' is two)
    ok &= ((cm & _U(3)) != _ONE)  # no leading single colon
    tail = (cm >> (np.maximum(hu, _U(2)) - _U(2))) & _U(3)
    ok &= (tail != _U(2)) & ~((hu == 1) & (cm != 0))  # no trailing single colon
    sep = cm | (_ONE << hu)  # the separators: the colons, and the end of the hex part
    starts = np.empty((fields, n), dtype=np.intp)
    lens = np.empty((fields, n), dtype=np.intp)
    pos = np.zeros(n, dtype=_U)
    m = np.empty(n, dtype=_U)
    for j in range(fields):
        starts[j] = pos.view(np.intp)
        np.right_shift(sep, pos, out=m)
        m &= _U(31)
        step = _STEP[m.view(np.intp)]
        lens[j] = step.view(np.intp)
        pos += step
    ok &= pos.view(np.intp) > h  # every field read
    lens -= 1
    live = starts <= h
    lens *= live
    ok &= (lens <= 4).all(axis=0)
    full = lens > 0
    nfull = full.sum(axis=0)
    has_dc = dc != 0
    ok &= np.where(has_dc, nfull + extra <= 7, nfull + extra == 8)
    # Each field's characters as one 32-bit word from the window (its first byte lowest).
    # (from the two aligned 32-bit words it spans: faster than an unaligned gather)
    words32 = w.reshape(-1).view("<u4")
    np.minimum(starts, width - 1 - a0, out=starts)  # (fields past the end: read, then masked)
    starts += np.arange(0, n * width, width, dtype=np.intp) + a0
    q = starts >> 2
    r = (starts & 3).astype(np.uint32)
    r <<= np.uint32(3)
    x = words32[q]
    x >>= r
    q += 1  # (past the matrix: clipped; those bytes lie past the field, masked below)
    y = np.take(words32, q, mode="clip")
    np.subtract(np.uint32(32), r, out=r)
    y <<= r  # (a shift by 32 is 0)
    x |= y
    y.fill(0)
    x &= _LENMASK[lens]
    tlo = _T2[x & np.uint32(0xFFFF)]
    x >>= np.uint32(16)
    thi = _T2[x]
    x.fill(0)
    chi = thi >> np.uint16(8)
    ok &= ((tlo >> np.uint16(8)) + chi == lens).all(axis=0)
    val = tlo & np.uint16(0xFF)
    val <<= chi << np.uint16(2)
    val |= thi & np.uint16(0xFF)
    tlo.fill(0)
    thi.fill(0)
    # Field j is word j, except after a '::': there the fields are moved to the right end.
    words = val[:8]
    dcr = np.flatnonzero(has_dc & ok)
    if dcr.size:
        f = full[:, dcr]
        empty = ~f & live[:, dcr]
        elast = fields - 1 - np.argmax(empty[::-1], axis=0)  # the last empty field of the '::'
        j = np.arange(fields)[:, None]
        slot = j + (j >= elast) * (8 - extra[dcr] - nfull[dcr] - empty.sum(axis=0))
        placed = np.zeros((9, dcr.size), dtype=np.uint16)
        cols = np.broadcast_to(np.arange(dcr.size), slot.shape)
        placed[np.where(f, slot, 8), cols] = val[:, dcr]
        words = words.copy()
        words[:, dcr] = placed[:8]
        placed.fill(0)
    t = np.ascontiguousarray(words.T)
    hl = t.astype(">u2").view(">u8").astype(_U)
    for a in (t, words, val):
        a.fill(0)
    hi, lo = hl[:, 0].copy(), hl[:, 1].copy()
    hl.fill(0)
    return hi, lo, ok


def _tokens(b: np.ndarray, ts: np.ndarray, w: np.ndarray, tlen: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Keys ``(hi, lo, ok)`` of the tokens ``w[i, :tlen[i]]`` (``w``: their windows of up to 64
    bytes, gathered at ``ts`` in ``b``), known to hold no byte at or below the space.

    A first pass reads the tokens that are only hex digits and colons in eight fields at most;
    a second, over the rows it rejected that hold a colon, the spellings with brackets, a port, a
    zone id, a dotted quad or nine fields (``1:2:3:4:5:6:7::``), from 64-byte windows.
    """
    zero = np.zeros(ts.size, dtype=np.intp)
    hi, lo, ok = _hex_words(w, zero, tlen, zero, fields=8)
    rest = np.flatnonzero(~ok & (tlen <= _MAX_TOKEN) & (tlen >= 2))
    if rest.size:
        w2 = w[rest] if w.shape[1] == _WD else windows(b, ts[rest], _WD)
        h2, l2, ok2 = _spelled(b, ts[rest], w2, tlen[rest])
        w2.fill(0)
        hi[rest], lo[rest], ok[rest] = h2, l2, ok2
        h2.fill(0)
        l2.fill(0)
    return hi, lo, ok


def _spelled(b: np.ndarray, ts: np.ndarray, w: np.ndarray, tlen: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The second pass of :func:`_tokens`: ``[v6]``, ``[v6]:port``, ``v6%zone`` (the zone
    non-empty, printable ASCII), ``[v6%zone]:port``, and a dotted quad after the last colon."""
    n = ts.size
    br = w[:, 0] == 91  # '['
    a0 = br.astype(np.intp)
    close = _ctz64(_mask64(w == 93))  # the first ']'
    ok = ~br | (close < tlen)
    end = np.where(br, close, tlen)  # the end of address and zone
    # After ']': nothing, or ':' and a port.
    after = np.where(br, close + 1, tlen)
    colon_after = w[np.arange(n), np.minimum(after, _WD - 1)] == 58
    has_port = br & (after < tlen)
    ok &= ~has_port | colon_after
    prow = np.flatnonzero(ok & has_port)
    if prow.size:
        ok[prow] &= port_ok(b, ts[prow] + after[prow] + 1, ts[prow] + tlen[prow])
    # A zone id: from the first '%' to the end, non-empty, no byte above '~'.
    lowend = _low(np.clip(end, 0, 63))
    pct = _ctz64(_mask64(w == 37) & lowend)
    zoned = pct < end
    ok &= ~zoned | (pct + 1 < end)
    ok &= (_mask64(w > 126) & lowend) == 0
    addr_end = np.where(zoned, pct, end)
    # A dotted quad: after the last colon of the address, read as IPv4.
    region = _low(np.clip(addr_end, 0, 63)) & ~_low(a0)
    dotted = (_mask64(w == 46) & region) != 0
    h = addr_end - a0
    extra = np.zeros(n, dtype=np.intp)
    quad = np.zeros(n, dtype=np.uint32)
    drow = np.flatnonzero(dotted & ok)
    if drow.size:
        cm = _mask64(w[drow] == 58) & region[drow]
        lastc = np.full(drow.size, -1, dtype=np.intp)
        nz = cm != 0
        lastc[nz] = np.frexp(cm[nz].astype(np.float64))[1].astype(np.intp) - 1
        # (a float rounds a 64-bit value up at most to the next power of two: fixed below)
        over = nz & ((cm >> np.clip(lastc, 0, 63).astype(_U)) == 0)
        lastc -= over
        q = lastc + 1  # where the dotted quad starts
        w16 = windows(b, ts[drow] + q, 16)
        a4, ok4 = ipv4_from_windows(w16, addr_end[drow] - q)
        w16.fill(0)
        ok4 &= lastc >= a0[drow]
        # The hex part ends before the colon, or after it when that colon closes a '::'.
        before = w[drow, np.clip(q - 2, 0, _WD - 1)] == 58
        h[drow] = np.where(before & (q - 2 >= a0[drow]), q, q - 1) - a0[drow]
        ok[drow] &= ok4
        quad[drow] = a4
        extra[drow] = 2
        a4.fill(0)
    ok &= ~dotted | (extra == 2)
    hi, lo, ok6 = _hex_words(w, a0, h, extra)
    ok &= ok6
    lo |= quad.astype(_U)
    quad.fill(0)
    return hi, lo, ok


def _place(rows: np.ndarray, hi: np.ndarray, lo: np.ndarray, addr: np.ndarray, ok: np.ndarray,
           v6: V6Keys) -> None:
    """IPv4-mapped keys into ``addr``/``ok`` at their rows (the IPv4 client), the rest to ``v6``;
    ``hi`` and ``lo`` are wiped."""
    mapped = (hi == 0) & ((lo >> _U(32)) == _V4_HIGH)
    r4 = rows[mapped]
    if r4.size:
        v4 = lo[mapped]
        addr[r4] = v4  # (the low 32 bits)
        v4.fill(0)
        ok[r4] = True
    if not bool(mapped.all()):
        v6.extend(hi[~mapped], lo[~mapped])
    hi.fill(0)
    lo.fill(0)


def _line_tokens(b: np.ndarray, ts: np.ndarray, length: np.ndarray, clf: bool, width: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The ``width``-byte windows of lines starting at ``ts``, the length of each line's token (the
    line, or in ``clf`` its first field: up to the first space), where that token holds no byte
    at or below the space (``good``), and where the window is too short to tell (``far``)."""
    w = windows(b, ts, width)
    p = _ctz64(_mask64(w <= 32))  # the first space, control byte, newline or end of the buffer
    seen = p < width
    if clf:
        stop = w[np.arange(ts.size), np.minimum(p, width - 1)]
        good = seen & ((p >= length) | (stop == 32))
        tlen = np.minimum(p, length)
        stop.fill(0)
    else:
        good = seen & (p >= length)
        tlen = length
    return w, tlen, good, ~seen


def _lines_v6(b: np.ndarray, starts: np.ndarray, ends: np.ndarray, rows: np.ndarray, clf: bool,
              max_line: int, addr: np.ndarray, ok: np.ndarray, v6: V6Keys) -> np.ndarray:
    """The second look of :func:`panstream.inputs.ipv4._address_lines`: the IPv6 clients among
    the lines ``rows`` it could not read, vectorized (the token is the line, or in ``clf`` its
    first field: up to the first space, which must lie within the ``max_line + 1`` bytes read of a
    line). Tokens of up to 39 bytes are found in 40-byte windows, longer ones in 64-byte windows.
    Returns the rows still unread (to the reference)."""
    if rows.size == 0:
        return rows
    left = np.ones(rows.size, dtype=bool)
    sub = np.arange(rows.size)
    for width in (_SHORT, _WD):
        ts = starts[rows[sub]]
        w, tlen, good, far = _line_tokens(b, ts, ends[rows[sub]] - ts, clf, width)
        sel = np.flatnonzero(good & (tlen <= max_line))
        if sel.size:
            ws = w if sel.size == sub.size else w[sel]
            hi, lo, got = _tokens(b, ts[sel], ws, tlen[sel])
            ws.fill(0)
            done = sub[sel[got]]
            _place(rows[done], hi[got], lo[got], addr, ok, v6)
            left[done] = False
            hi.fill(0)
            lo.fill(0)
        w.fill(0)
        sub = sub[far]
        if sub.size == 0:
            break
    return rows[left]


def address_lines(data: bytes | bytearray | memoryview | np.ndarray, fmt: str, max_line: int
                  ) -> tuple[np.ndarray, np.ndarray, int, int, int, V6Keys]:
    """:func:`panstream.inputs.ipv4._address_lines` with the IPv6 clients read vectorized too:
    ``(addr, ok, lines, empty, malformed, v6)``, ``v6`` the keys of the IPv6 clients.

    >>> a, ok, lines, empty, bad, v6 = address_lines(b"2001:db8::1\\n[::ffff:10.0.0.1]:80\\nx\\n",
    ...                                              "plain", 4096)
    >>> [hex(x) for x in a[ok]], [hex(int(h) << 64 | int(l)) for h, l in zip(*v6.arrays())], bad
    (['0xa000001'], ['0x20010db8000000000000000000000001'], 1)
    """
    return _address_lines(data, fmt, max_line, _lines_v6)


def address_spans(b: np.ndarray, ts: np.ndarray, te: np.ndarray, v6: V6Keys
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The tokens ``b[ts:te]`` read vectorized, both families: :func:`panstream.inputs.ipv4._ipv4_spans`
    for the dotted quads (``:port``, ``::ffff:``), then the IPv6 spellings of the rest, whose keys
    go to ``v6`` (an IPv4-mapped one is the IPv4 client). Returns ``(addr, ok, done)``: the IPv4
    clients where ``ok``, and ``done`` where the token was read (IPv4 or IPv6); the other tokens
    are left to :func:`panstream.universe.addresses.address_key`."""
    addr, ok = _ipv4_spans(b, ts, te)
    done = ok.copy()
    rows = np.flatnonzero(~ok & (te - ts >= 2) & (te - ts <= _MAX_TOKEN))
    if rows.size:
        s = ts[rows]
        w = windows(b, s, _WD)
        tlen = te[rows] - s
        sel = np.flatnonzero(_ctz64(_mask64(w <= 32)) >= tlen)
        if sel.size:
            hi, lo, got = _tokens(b, s[sel], w[sel], tlen[sel])
            r = rows[sel[got]]
            _place(r, hi[got], lo[got], addr, ok, v6)
            done[r] = True
            hi.fill(0)
            lo.fill(0)
        w.fill(0)
    return addr, ok, done


# ---------------------------------------------------------------------------------------- text


def _hextet_table() -> np.ndarray:
    """For every 16-bit word: its lowercase hex text without leading zeros, then ``:``, packed
    little-endian in the low bytes of a ``uint64``, and the text's length with the colon (2 to 5)
    in the top byte."""
    v = np.arange(1 << 16, dtype=_U)
    nd = _ONE + (v >= 16) + (v >= 256) + (v >= 4096)  # hex digits
    hexdig = np.frombuffer(b"0123456789abcdef", dtype=np.uint8).astype(_U)
    out = _U(0x3A) << (nd << _U(3))  # the colon after the digits
    for k in range(4):  # digit k from the left, where there is one
        has = nd > k
        shift = np.where(has, (nd - _ONE - _U(k)) << _U(2), _ZERO)
        digit = hexdig[((v >> shift) & _U(15)).astype(np.intp)]
        out |= np.where(has, digit << _U(8 * k), _ZERO)
    out |= (nd + _ONE) << _U(56)
    return out


def _run_table() -> tuple[np.ndarray, np.ndarray]:
    """For every 8-bit mask of zero words (bit j: word j is 0): where the longest run of two or
    more zero words starts (the first of equal runs; 8 if none) and its length (RFC 5952)."""
    base = np.full(256, 8, dtype=np.intp)
    size = np.zeros(256, dtype=np.intp)
    for m in range(256):
        best, blen, j = 8, 0, 0
        while j < 8:
            if m >> j & 1:
                k = j
                while k < 8 and m >> k & 1:
                    k += 1
                if k - j > blen:
                    best, blen = j, k - j
                j = k
            else:
                j += 1
        if blen >= 2:
            base[m], size[m] = best, blen
    return base, size


_HEXTET = _hextet_table()
_RUN_BASE, _RUN_LEN = _run_table()
_TEXT_W = 48  #: bytes of a text row (39 at most, then zeros)
_LOW56 = _U((1 << 56) - 1)


def ipv6_text(hi: np.ndarray, lo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The RFC 5952 text of 128-bit keys (``uint64`` halves), vectorized: an ``n x 48`` ``uint8``
    matrix of the texts, zero-padded, and their lengths (2 to 39).

    Each word's text (and the colon after it) comes from one 65,536-entry table; the rows with
    two or more zero words get their longest zero run replaced by ``::`` (a 256-entry table of
    the zero-word masks); the pieces are written in order at their offsets, each over the
    previous one's zero padding. Bit-exact with :func:`panstream.universe.addresses.canonical_text`
    of every key that is not an IPv4 client (those are written dotted,
    :func:`panstream.sketch.sfm.ipv4_text_words`).

    >>> rows, n = ipv6_text(np.array([0x20010DB8 << 32, 0], dtype=np.uint64),
    ...                     np.array([1, 1], dtype=np.uint64))
    >>> [rows[i, : n[i]].tobytes() for i in range(2)]
    [b'2001:db8::1', b'::1']
    """
    n = hi.size
    halves = np.empty((n, 2), dtype=">u8")
    halves[:, 0] = hi
    halves[:, 1] = lo
    words = np.ascontiguousarray(halves.view(">u2").T).astype(np.intp)  # 8 x n, word 0 first
    halves.fill(0)
    piece = _HEXTET[words]
    size = (piece >> _U(56)).astype(np.intp)
    piece &= _LOW56
    size[7] -= 1
    piece[7] &= ~(_U(0xFF) << (size[7].astype(_U) << _U(3)))  # no colon after the last word
    zero = words == 0
    words.fill(0)
    runs = np.flatnonzero(zero.sum(axis=0) >= 2)
    if runs.size:  # the longest run of zero words becomes '::'
        zm = np.packbits(zero[:, runs].T, axis=1, bitorder="little")[:, 0]
        base, run = _RUN_BASE[zm], _RUN_LEN[zm]
        j = np.arange(8)[:, None]
        inside = (j >= base) & (j < base + run)
        first = j == base
        p, z = piece[:, runs], size[:, runs]
        p[inside] = 0
        z[inside] = 0
        lead = np.broadcast_to(base == 0, first.shape)[first]  # '::' opens the text
        p[first] = np.where(lead, _U(0x3A3A), _U(0x3A))
        z[first] = np.where(lead, 2, 1)
        piece[:, runs] = p
        size[:, runs] = z
        p.fill(0)
    # Two pieces (10 bytes at most) make one 16-byte item: lo | hi << 64.
    pair = np.empty((n, 2), dtype=_U)
    bits = size.astype(_U)
    bits <<= _U(3)
    out = np.zeros(n * _TEXT_W + 16, dtype=np.uint8)
    v16 = np.ndarray((n * _TEXT_W + 1,), dtype="V16", buffer=out, strides=(1,))
    row0 = np.arange(0, n * _TEXT_W, _TEXT_W, dtype=np.intp)
    at = row0.copy()
    for k in range(0, 8, 2):  # in order: each pair's zero padding is overwritten by the next
        np.left_shift(piece[k + 1], bits[k], out=pair[:, 0])
        pair[:, 0] |= piece[k]
        np.right_shift(piece[k + 1], _U(64) - bits[k], out=pair[:, 1])  # (a shift by 64 is 0)
        v16[at] = pair.view("V16")[:, 0]
        at += size[k]
        at += size[k + 1]
    for x in (piece, pair, bits):
        x.fill(0)
    total = at - row0
    rows = out[: n * _TEXT_W].reshape(n, _TEXT_W)
    return rows, total


def format_ipv6_lines(hi: np.ndarray, lo: np.ndarray) -> bytes:
    """RFC 5952 lines for 128-bit keys, vectorized (for synthetic logs and benchmarks).

    >>> format_ipv6_lines(np.array([0x2A0104F8 << 32], dtype=np.uint64), np.array([2], dtype=np.uint64))
    b'2a01:4f8::2\\n'
    """
    rows, n = ipv6_text(np.asarray(hi, dtype=_U), np.asarray(lo, dtype=_U))
    rows[np.arange(n.size), n] = 10
    keep = np.arange(_TEXT_W) <= n[:, None]
    out = rows[keep].tobytes()
    rows.fill(0)
    return out


def token_keys(items: list[Any]) -> AddressKeys | None:
    """The canonical items of a batch of ``bytes`` tokens (a log's client fields), read like the
    lines of a log in one pass (dotted quads, ``:port``, ``::ffff:``, IPv6 vectorized; the rest by
    :func:`panstream.universe.addresses.address_key`), with the malformed and blank ones counted;
    ``None`` if the batch is not all ``bytes`` without newlines (then every item goes the per-item
    way). Registered as the universe's batch reader (:func:`panstream.universe.register_token_reader`,
    issue 36).

    >>> k = token_keys([b"10.0.0.1:443", b"::1", b"x", b" "])
    >>> k.v4.tolist(), k.v6_lo.tolist(), k.malformed, k.empty
    ([167772161], [1], 1, 1)
    """
    try:
        buf = bytearray(b"\n").join([*items, b""])
    except TypeError:
        return None
    try:
        b = np.frombuffer(buf, dtype=np.uint8)
        if int(np.count_nonzero(b == 10)) != len(items):
            return None
        addr, ok, _, empty, malformed, v6 = address_lines(b, "plain", 1 << 30)
        del b
    finally:
        buf[:] = bytes(len(buf))
    v4 = addr[ok]
    addr.fill(0)
    return AddressKeys(v4, *v6.arrays(), malformed, empty)


register_token_reader(token_keys)
