"""The vectorized IPv6 core: IPv6 client tokens read and written with NumPy, over whole chunks.

Issue 38: every IPv6 line used to leave the vectorized parse and go through Python one line at a
time (:func:`panstream.universe.addresses.address_key`, about 3 us a line), and the sketch wrote each
client's text with ``socket.inet_ntop``. Here both are array code, as
:mod:`panstream.inputs.ipv4` is for IPv4:

**Reading** (:func:`address_lines`, :func:`address_spans`): the token's first 64 bytes are
gathered into an ``n x 64`` matrix, so that each byte test over a row packs into one 64-bit mask
(colons; hex digits and colons; for the text, upper-case letters and zeros); the structure is
checked on those masks (one ``::`` at most, no single colon at either end, no group of five
digits, the number of groups from the colons); the fields found in eight steps of a 32-entry
table (each step reads the next five bits of the colon mask); every field's first four bytes
taken as one 32-bit word (from the two aligned words it spans), turned into nibbles in place
(``c & 15``, plus 9 for a letter), right-aligned by one shift that also drops the bytes past the
field, and packed into the 16-bit word by two more; ``::`` expanded by placing the fields after it
at the right end. The rarer spellings take a second vectorized pass over the rows the first
rejected: ``[v6]`` and ``[v6]:port`` (the port checked as :mod:`panstream.inputs.ipv4` checks
``a.b.c.d:port``), a zone id ``%eth0`` (dropped), an embedded dotted quad (``::ffff:a.b.c.d``,
``64:ff9b::a.b.c.d``; read by :func:`panstream.inputs.ipv4.ipv4_from_windows`), nine fields
(``1:2:3:4:5:6:7::``). An IPv4-mapped result is the IPv4 client, as everywhere
(:mod:`panstream.universe.addresses`).

**The first pass in C** (issue 38): the optional extension ``panstream.inputs._v6`` (built by
``setup.py`` where a C compiler is present; ``PANSTREAM_NATIVE=0`` switches it off) runs the first
pass as one loop over the tokens, reading each row's 48 bytes once (16 at a time) instead of the
dozens of NumPy passes over the matrix, with exactly :func:`_hex_words`' answers
(:func:`_first_pass`; ``tests/parse/test_ipv6_kernel.py`` holds the two to each other on a fuzzed
corpus). :func:`_hex_words` stays the reference and the fallback, and reads the second pass's rows.
The same extension finds where each window's token ends (:func:`_first_blank`).

**A token that is already its text**: servers log IPv6 clients as ``inet_ntop`` writes them, in
RFC 5952 text, which is what the sketch hashes (Presto's ``CAST(ipaddress AS varchar)``). The
first pass tells, from the same masks and words, whether a token is exactly that text
(lowercase, no leading zero, the longest run of two or more zero words compressed and no other,
the first of equal runs) and then hands the token's window row to the sketch with the key
(:class:`panstream.inputs.ipv4.V6Keys`), so no text is written again from the key (issue 38;
``tests/parse/test_ipv6_fast.py`` checks the text carried is the key's text, token by token).
For a reader that hashes only the text (the sketch: ``text_only``), such a token is told from the
masks alone and not decoded at all (:func:`_canonical_masks`; its key is left 0, an IPv4-mapped
one is still decoded to its IPv4 client).

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

from functools import partial
from typing import Any

import numpy as np

from panstream._moved import optional_extension
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
_U32 = np.uint32
_WD = 64  #: bytes of a token read (a token must fit in the first ``_WD - 4``; a row's masks are one word)
_MAX_TOKEN = _WD - 4
_MAX_HEX = 39  #: the longest hex part: eight groups of four digits and seven colons
_ZERO, _ONE = _U(0), _U(1)
_V4_HIGH = _U(0xFFFF)
_MOVEMASK = _U(0x0102040810204080)  #: eight 0/1 bytes times this: their bits in the top byte


def _field_table() -> np.ndarray:
    """For every 5-bit slice of a separator mask: the index of its lowest set bit (the length of
    the field that starts there), 5 when no separator comes within five bytes."""
    out = np.full(32, 5, dtype=np.int64)
    for m in range(1, 32):
        out[m] = (m & -m).bit_length() - 1
    return out


_STEP = (_field_table() + 1).astype(np.intp)  #: how far the next field starts


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


_RUN_BASE, _RUN_LEN = _run_table()


def _mask64(flags: np.ndarray) -> np.ndarray:
    """Each row of an ``n x w`` boolean (or ``uint8``: nonzero is set) matrix (``w <= 64``, a
    multiple of 8) as one ``uint64`` (column j = bit j): one flat ``packbits`` (a view of it for
    ``w = 64``, the reader's windows)."""
    n, width = flags.shape
    packed = np.packbits(flags.reshape(-1), bitorder="little")
    if width == 64:
        return packed.view("<u8")
    out = np.zeros((n, 8), dtype=np.uint8)
    out[:, : width // 8] = packed.reshape(n, width // 8)
    return out.view("<u8")[:, 0]


def _ctz64(x: np.ndarray) -> np.ndarray:
    """Index of the lowest set bit of each ``uint64`` (64 where none): the bits below it,
    counted."""
    with np.errstate(over="ignore"):
        below = (x & (~x + _ONE)) - _ONE
    return np.bitwise_count(below).astype(np.intp)


def _low(bits: np.ndarray) -> np.ndarray:
    """Masks of the ``bits`` (0..63) lowest bits."""
    return (_ONE << bits.astype(_U)) - _ONE


def _any(rows: np.ndarray) -> np.ndarray:
    """``rows.any(axis=0)`` of a few long rows, as a chain of ``|`` (a reduction over the short
    axis is several times slower)."""
    acc = rows[0] != 0
    for r in rows[1:]:
        acc |= r != 0
    return acc


_MAPPED = _U(int.from_bytes(b"::ffff:", "little"))  #: the first seven bytes of an IPv4-mapped text


def _canonical_masks(zf: np.ndarray, dc: np.ndarray, has_dc: np.ndarray, z: np.ndarray
                     ) -> np.ndarray:
    """Where the zero words of a hex part are as RFC 5952 writes them, from its masks alone:
    ``zf`` (bit p: a field ``0`` ends at p), ``dc`` (bit p: ``::`` at p), ``z`` (the zero words
    ``::`` stands for). Without ``::``: no two ``0`` fields in a row. With it: it stands for two
    words or more, no ``0`` field touches it, and the runs of ``0`` fields (bits two apart) are
    shorter than ``z`` before it and no longer after it (the longest run, the first of equal
    ones)."""
    before = _low(np.minimum(_ctz64(dc), 63))
    after = ~_low(np.minimum(_ctz64(dc) + 2, 63))
    longer_before = np.zeros(zf.size, dtype=np.intp)  # the longest run before the '::'
    longer_after = np.zeros(zf.size, dtype=np.intp)
    pair = (zf & (zf >> _U(2))) == 0  # no two '0' fields in a row
    run = zf.copy()  # bit p: k '0' fields from p on
    for k in range(1, 8):
        if not run.any():  # (no run of k: the common case after one or two steps)
            break
        longer_before += (run & before) != 0
        longer_after += (run & after) != 0
        run &= zf >> _U(2 * k)
    touch = (zf & ((dc >> _ONE) | (dc << _U(2)))) != 0
    ok_dc = (z >= 2) & ~touch & (longer_before < z) & (longer_after <= z)
    return np.where(has_dc, ok_dc, pair)


def _hex_words(w: np.ndarray, h: np.ndarray, extra: np.ndarray, fields: int = 8,
               canon: bool = False, text_only: bool = False
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Read ``w[i, :h[i]]`` as the hex part of an IPv6 address.

    The hex part is groups of one to four hex digits separated by single colons, with one ``::``
    at most; ``extra`` (0 or 2) words follow it (a dotted quad the caller reads and adds to the
    low word). Without ``::`` the words must number exactly eight, with it seven at most (glibc's
    ``inet_pton``). A hex part of more than ``fields`` fields (9 at most: ``1:2:3:4:5:6:7::``) is
    refused. The fields are held field-major (``fields x n``), so every step is one pass over
    contiguous rows: each field's first four bytes are one 32-bit word (from the two aligned
    words it spans), its digits turned into nibbles in place (``c & 15``, plus 9 for a letter),
    right-aligned by a shift that also drops the bytes past the field, and packed into the word,
    big-endian, by two shifts; after a ``::`` the words move to the right end.

    Returns ``(hi, lo, ok, canon)``: the two 64-bit halves of the address (garbage where not
    ``ok``), and with ``canon`` where the hex part is the address's RFC 5952 text (lowercase, no
    leading zeros, the longest run of two or more zero words compressed, the first of equal
    runs: what :func:`ipv6_text` writes), else ``None``.

    ``text_only`` (with ``canon``; the sketch, which hashes the text, issue 38): the RFC 5952
    tokens are told from the masks alone (:func:`_canonical_masks`) and only the other rows are
    decoded; the RFC 5952 tokens that are not IPv4-mapped (``::ffff:x:y``, decoded: the IPv4
    client) get the key 0 (their text stands for them). ``ok`` and ``canon`` are the same as
    without it (``tests/parse/test_ipv6_fast.py``).
    """
    n, width = w.shape
    ok = (h >= 2) & (h <= _MAX_HEX)
    hu = np.minimum(h, _MAX_HEX).astype(_U)
    low = _low(hu)
    assert _MAX_HEX + fields < width  # (every field starts within its row)
    t = w - np.uint8(48)
    good = t < 11  # digits and ':'
    np.bitwise_or(w, np.uint8(32), out=t)
    t -= np.uint8(97)
    good |= t < 6  # a-f, A-F
    ok &= (_mask64(good) | ~low) == ~_ZERO
    cm = _mask64(np.equal(w, 58, out=good)) & low
    dc = cm & (cm >> _ONE)  # bit p: colons at p and p + 1
    with np.errstate(over="ignore"):
        ok &= (dc & (dc - _ONE)) == 0  # one '::' at most (':::' is two)
    ok &= (cm & _U(3)) != _ONE  # no leading single colon
    end2 = np.maximum(hu, _U(2)) - _U(2)
    ok &= ((cm >> end2) & _U(3)) != _U(2)  # no trailing single colon
    digit = low & ~cm
    five = digit & (digit >> _ONE)
    five &= five >> _U(2)
    five &= digit >> _U(4)
    ok &= five == 0  # no field of five digits or more
    has_dc = dc != 0
    # The fields: one empty field where '::' is, two when it opens or closes the text.
    nfull = np.bitwise_count(cm).astype(np.intp) + 1
    nfull -= has_dc
    nfull -= (dc & _ONE).astype(np.intp)
    nfull -= ((dc >> end2) & _ONE).astype(np.intp)
    ok &= np.where(has_dc, nfull + extra <= 7, nfull + extra == 8)
    bad = None
    if canon:  # an upper-case digit, or a leading zero
        np.bitwise_and(w, np.uint8(0x20), out=t)  # of the digits, only 'A' to 'F' lack it
        upper = ~_mask64(t)  # (a nonzero byte packs as a set bit)
        zero = _mask64(np.equal(w, 48, out=good))
        zero &= (cm << _ONE) | _ONE  # at a field's start
        zero &= digit >> _ONE  # and a digit after it
        bad = ((upper | zero) & low) != 0
    t.fill(0)
    if text_only:
        assert canon and bad is not None
        zf = _mask64(np.equal(w, 48, out=good)) & digit  # a field that is "0"
        zf &= (cm << _ONE) | _ONE
        zf &= (cm >> _ONE) | (low ^ (low >> _ONE))
        rfc = ok & ~bad & (np.bitwise_count(cm) < fields)  # (and every field read)
        rfc &= _canonical_masks(zf, dc, has_dc, 8 - extra - nfull)
        head = w[:, :8].copy().view("<u8")[:, 0] & _U((1 << 56) - 1)
        skip = rfc & ~((head == _MAPPED) & (np.bitwise_count(cm) == 4))
        head.fill(0)
        hi, lo = np.zeros(n, dtype=_U), np.zeros(n, dtype=_U)
        rest = np.flatnonzero(~skip)
        if rest.size:
            wr = w[rest]
            h2, l2, ok2, _ = _hex_words(wr, h[rest], extra[rest], fields)
            wr.fill(0)
            hi[rest], lo[rest] = h2, l2
            ok[rest] = ok2
            for a in (h2, l2):
                a.fill(0)
        return hi, lo, ok, rfc
    # Each field starts one past the previous one's separator (a colon, or the end: every bit
    # from there on, so the fields past the end are empty).
    sep = cm | ~low
    at = np.empty((fields + 1, n), dtype=np.intp)  # where each field starts, then where the next would
    at[0] = 0
    lens = np.empty((fields, n), dtype=np.intp)
    m = np.empty(n, dtype=_U)
    for j in range(fields):
        np.right_shift(sep, at[j].view(_U), out=m)
        m &= _U(31)
        np.take(_STEP, m.view(np.intp), out=lens[j])
        np.add(at[j], lens[j], out=at[j + 1])
    ok &= at[fields] > h  # every field read
    starts = at[:fields]
    lens -= 1
    dcr = np.flatnonzero(has_dc & ok)
    if dcr.size:
        full = lens[:, dcr] > 0
        live = starts[:, dcr] <= h[dcr]
    # Each field's first four bytes as one 32-bit word (its first byte lowest).
    # (a field starts at 47 at most: within its row)
    words32 = w.reshape(-1).view("<u4")
    r = starts.astype(_U32)
    r &= _U32(3)
    r <<= _U32(3)
    q = starts >> 2
    q += np.arange(0, n * (width >> 2), width >> 2, dtype=np.intp)
    x = np.take(words32, q)
    x >>= r
    q += 1  # (past the matrix: clipped; those bytes lie past the field, dropped below)
    y = np.take(words32, q, mode="clip")
    np.subtract(_U32(32), r, out=r)
    y <<= r  # (a shift by 32 is 0)
    x |= y
    # Digits to nibbles (one per byte), right-aligned: the last digit in the top byte.
    d = x & _U32(0x0F0F0F0F)
    np.right_shift(x, _U32(6), out=y)
    y &= _U32(0x01010101)
    y *= _U32(9)
    d += y
    sh = lens.astype(_U32)
    sh <<= _U32(3)
    np.subtract(_U32(32), sh, out=sh)  # 32 - 8 * length
    d <<= sh
    np.left_shift(d, _U32(4), out=y)  # bytes 0 and 2: the word's high and low byte
    d >>= _U32(8)
    d |= y
    d &= _U32(0x00FF00FF)
    np.right_shift(d, _U32(8), out=y)
    d |= y
    be = d.astype(np.uint16)  # the word, big-endian in memory
    for a in (x, y, d):
        a.fill(0)
    # Field j is word j, except after a '::': there the fields move to the right end.
    words = be[:8].T.copy()  # (a copy even of one row)
    if dcr.size:
        k = dcr.size
        seen = np.zeros(k, dtype=bool)  # past the '::'
        cnt = np.zeros(k, dtype=np.intp)  # full fields so far
        z = 8 - extra[dcr] - nfull[dcr]  # the zero words it stands for
        dcw = np.zeros(k, dtype=np.intp)  # the word the '::' starts at
        slot = np.empty((fields, k), dtype=np.intp)
        for j in range(fields):
            np.multiply(seen, z, out=slot[j])
            slot[j] += cnt
            seen |= live[j] & ~full[j]
            cnt += full[j]
            dcw += full[j] & ~seen
        slot[~full] = 8
        slot += np.arange(0, k * 9, 9, dtype=np.intp)
        placed = np.zeros(k * 9, dtype=np.uint16)
        placed[slot] = be[:, dcr]
        words[dcr] = placed.reshape(k, 9)[:, :8]
        placed.fill(0)
    be.fill(0)
    hl = words.view(">u8")
    hi, lo = hl[:, 0].astype(_U), hl[:, 1].astype(_U)
    rfc = None
    if canon:
        assert bad is not None
        zm = (words == 0).view(_U)[:, 0] * _MOVEMASK  # bit j: word j is 0
        zm >>= _U(56)
        zmi = zm.view(np.intp)
        base, run = _RUN_BASE[zmi], _RUN_LEN[zmi]
        rfc = ok & ~bad & (run == 0)  # no run to compress, and none compressed
        if dcr.size:  # the run compressed is the longest, the first of equal ones
            rfc[dcr] = ok[dcr] & ~bad[dcr] & (dcw == base[dcr]) & (z == run[dcr])
    words.fill(0)
    return hi, lo, ok, rfc


#: The first pass's C kernel (``panstream.inputs._v6``, issue 38), or None: :func:`_first_pass` then
#: runs :func:`_hex_words`.
_native: Any = optional_extension("panstream.inputs._v6")


def _first_pass(w: np.ndarray, tlen: np.ndarray, text_only: bool
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``_hex_words(w, tlen, 0, fields=8, canon=True, text_only=text_only)``: the first pass of
    :func:`_tokens`, by the C kernel :data:`_native` when it is built (one loop over the tokens,
    reading each token's bytes once, without the GIL; ``tests/parse/test_ipv6_kernel.py`` holds
    it to :func:`_hex_words` output for output), else by NumPy. The kernel's keys of refused rows
    are 0 (NumPy's are unspecified); arrays it does not take (``TypeError``: another dtype, not
    contiguous) go to NumPy."""
    if _native is not None:
        n = tlen.size
        hi, lo = np.empty(n, dtype=_U), np.empty(n, dtype=_U)
        ok, rfc = np.empty(n, dtype=bool), np.empty(n, dtype=bool)
        try:
            _native.hex_words(w, tlen, hi, lo, ok, rfc, text_only)
            return hi, lo, ok, rfc
        except TypeError:
            pass
    zero = np.zeros(tlen.size, dtype=np.intp)
    hi, lo, ok, canon = _hex_words(w, tlen, zero, fields=8, canon=True, text_only=text_only)
    assert canon is not None
    return hi, lo, ok, canon


def _first_blank(w: np.ndarray) -> np.ndarray:
    """Where each row of the windows ``w`` (64 bytes at most) has its first byte at or below the
    space (64 if none): where a token ends. By the C kernel where built (one pass of 16-byte
    compares a row), else ``_ctz64(_mask64(w <= 32))``."""
    if _native is not None:
        out = np.empty(w.shape[0], dtype=np.intp)
        try:
            _native.first_blank(w, out)
            return out
        except TypeError:
            pass
    return _ctz64(_mask64(w <= 32))


def _tokens(b: np.ndarray, ts: np.ndarray, w: np.ndarray, tlen: np.ndarray,
            text_only: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Keys ``(hi, lo, ok, rfc)`` of the tokens ``w[i, :tlen[i]]`` (``w``: their windows of 48
    or 64 bytes, gathered at ``ts`` in ``b``), known to hold no byte at or below the space;
    ``rfc``: where the token is the address's RFC 5952 text (:func:`_hex_words`).

    A first pass (:func:`_first_pass`: the C kernel where built) reads the tokens that are only
    hex digits and colons in eight fields at most; a second, over the rows it rejected, the
    spellings with brackets, a port, a zone id, a dotted quad or nine fields
    (``1:2:3:4:5:6:7::``), from 64-byte windows. ``text_only``: the keys of RFC 5952 tokens are
    left 0 (:func:`_hex_words`; for a reader that hashes the text).
    """
    hi, lo, ok, rfc = _first_pass(w, tlen, text_only)
    rest = np.flatnonzero(~ok & (tlen <= _MAX_TOKEN) & (tlen >= 2))
    if rest.size:
        w2 = w[rest] if w.shape[1] == _WD else windows(b, ts[rest], _WD)
        h2, l2, ok2 = _spelled(b, ts[rest], w2, tlen[rest])
        w2.fill(0)
        hi[rest], lo[rest], ok[rest] = h2, l2, ok2
        h2.fill(0)
        l2.fill(0)
    return hi, lo, ok, rfc


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
    wh = w
    if bool(br.any()):  # the hex part starts after the '[': shift those rows by one byte
        wh = w.copy()
        wh[br, :-1] = w[br, 1:]
    hi, lo, ok6, _ = _hex_words(wh, h, extra, fields=9)
    if wh is not w:
        wh.fill(0)
    ok &= ok6
    lo |= quad.astype(_U)
    quad.fill(0)
    return hi, lo, ok


def _text_rows(w: np.ndarray, tlen: np.ndarray, rfc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sketch's text of the tokens ``w[i, :tlen[i]]`` (64-byte window rows) that are already
    RFC 5952 text (``rfc``): the rows themselves (the bytes past a text are the rest of its line,
    which the hash leaves out) and the texts' lengths, 0 where the token is not RFC 5952 text
    (its text is written from the key)."""
    return w, tlen * rfc


def _place(rows: np.ndarray, hi: np.ndarray, lo: np.ndarray, addr: np.ndarray, ok: np.ndarray,
           v6: V6Keys, text: tuple[np.ndarray, np.ndarray] | None = None) -> None:
    """IPv4-mapped keys into ``addr``/``ok`` at their rows (the IPv4 client), the rest to ``v6``
    (with their ``text`` rows, :func:`_text_rows`), which then owns ``hi``, ``lo`` and ``text``
    (they are wiped)."""
    mapped = (hi == 0) & ((lo >> _U(32)) == _V4_HIGH)
    if not bool(mapped.any()):
        v6.extend(hi, lo, text)
        return
    r4 = rows[mapped]
    v4 = lo[mapped]
    addr[r4] = v4  # (the low 32 bits)
    v4.fill(0)
    ok[r4] = True
    if not bool(mapped.all()):
        keep = ~mapped
        t6 = None if text is None else (text[0][keep], text[1][keep])
        v6.extend(hi[keep], lo[keep], t6)
    for a in (hi, lo) if text is None else (hi, lo, *text):
        a.fill(0)


def _wipe_but(keep: np.ndarray, *arrays: np.ndarray) -> None:
    """Overwrite ``arrays`` with zeros, except ``keep`` (handed on), each once."""
    seen = {id(keep)}
    for a in arrays:
        if id(a) not in seen:
            seen.add(id(a))
            a.fill(0)


def _take(a: np.ndarray, sel: np.ndarray | None) -> np.ndarray:
    """``a[sel]``, or ``a`` itself when ``sel`` is ``None`` (every row)."""
    return a if sel is None else a[sel]


def _line_tokens(b: np.ndarray, ts: np.ndarray, length: np.ndarray, clf: bool
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The 64-byte windows of lines starting at ``ts``, the length of each line's token (the
    line, or in ``clf`` its first field: up to the first space), and where that token holds no
    byte at or below the space and ends within the window (``good``)."""
    w = windows(b, ts, _WD)
    p = _first_blank(w)  # the first space, control byte, newline or end of the buffer
    good = p < _WD
    if clf:
        stop = w[np.arange(ts.size), np.minimum(p, _WD - 1)]
        good &= (p >= length) | (stop == 32)
        tlen = np.minimum(p, length)
        stop.fill(0)
    else:
        good &= p >= length
        tlen = length
    return w, tlen, good


def _lines_v6(b: np.ndarray, starts: np.ndarray, ends: np.ndarray, rows: np.ndarray, clf: bool,
              max_line: int, addr: np.ndarray, ok: np.ndarray, v6: V6Keys,
              text_only: bool = False) -> np.ndarray:
    """The second look of :func:`panstream.inputs.ipv4._address_lines`: the IPv6 clients among
    the lines ``rows`` it could not read, vectorized (the token is the line, or in ``clf`` its
    first field: up to the first space, which must lie within the ``max_line + 1`` bytes read of a
    line), from 64-byte windows. The keys go to ``v6`` with the text of those the log already
    wrote as RFC 5952 text (the sketch hashes it). Returns the rows still unread (to the
    reference). ``text_only``: see :func:`address_lines`."""
    if rows.size == 0:
        return rows
    ts = starts[rows]
    w, tlen, good = _line_tokens(b, ts, ends[rows] - ts, clf)
    good &= tlen <= max_line
    sel = None if bool(good.all()) else np.flatnonzero(good)
    if sel is not None and sel.size == 0:
        w.fill(0)
        return rows
    ws, tl = _take(w, sel), _take(tlen, sel)
    hi, lo, got, rfc = _tokens(b, _take(ts, sel), ws, tl, text_only)
    g = None if bool(got.all()) else np.flatnonzero(got)
    done = _take(_take(np.arange(rows.size), sel), g)
    wg = _take(ws, g)
    text = _text_rows(wg, _take(tl, g), _take(rfc, g))
    _wipe_but(text[0], w, ws, wg)
    _place(rows[done], _take(hi, g), _take(lo, g), addr, ok, v6, text)
    if g is not None:
        hi.fill(0)
        lo.fill(0)
    left = np.ones(rows.size, dtype=bool)
    left[done] = False
    return rows[left]


def address_lines(data: bytes | bytearray | memoryview | np.ndarray, fmt: str, max_line: int,
                  text_only: bool = False) -> tuple[np.ndarray, np.ndarray, int, int, int, V6Keys]:
    """:func:`panstream.inputs.ipv4._address_lines` with the IPv6 clients read vectorized too:
    ``(addr, ok, lines, empty, malformed, v6)``, ``v6`` the keys of the IPv6 clients.

    ``text_only`` (a reader that hashes the IPv6 text: the sketch, issue 38): a token the log
    wrote as RFC 5952 text carries that text with the key 0, not decoded (an IPv4-mapped one is
    still the IPv4 client); the other keys and every count are the same.

    >>> a, ok, lines, empty, bad, v6 = address_lines(b"2001:db8::1\\n[::ffff:10.0.0.1]:80\\nx\\n",
    ...                                              "plain", 4096)
    >>> [hex(x) for x in a[ok]], [hex(int(h) << 64 | int(l)) for h, l in zip(*v6.arrays())], bad
    (['0xa000001'], ['0x20010db8000000000000000000000001'], 1)
    """
    return _address_lines(data, fmt, max_line,
                          partial(_lines_v6, text_only=True) if text_only else _lines_v6)


def address_spans(b: np.ndarray, ts: np.ndarray, te: np.ndarray, v6: V6Keys,
                  text_only: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The tokens ``b[ts:te]`` read vectorized, both families: :func:`panstream.inputs.ipv4._ipv4_spans`
    for the dotted quads (``:port``, ``::ffff:``), then the IPv6 spellings of the rest, whose keys
    go to ``v6`` (an IPv4-mapped one is the IPv4 client). Returns ``(addr, ok, done)``: the IPv4
    clients where ``ok``, and ``done`` where the token was read (IPv4 or IPv6); the other tokens
    are left to :func:`panstream.universe.addresses.address_key`. ``text_only``: see
    :func:`address_lines`."""
    addr, ok = _ipv4_spans(b, ts, te)
    done = ok.copy()
    rows = np.flatnonzero(~ok & (te - ts >= 2) & (te - ts <= _MAX_TOKEN))
    if rows.size:
        s = ts[rows]
        w = windows(b, s, _WD)
        tlen = te[rows] - s
        sel = np.flatnonzero(_first_blank(w) >= tlen)
        if sel.size:
            ws, tl = w[sel], tlen[sel]
            hi, lo, got, rfc = _tokens(b, s[sel], ws, tl, text_only)
            r = rows[sel[got]]
            wg = ws[got]
            text = _text_rows(wg, tl[got], rfc[got])
            _wipe_but(text[0], wg, ws)
            _place(r, hi[got], lo[got], addr, ok, v6, text)
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


_HEXTET = _hextet_table()
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
    hi, lo, text = v6.take()
    return AddressKeys(v4, hi, lo, malformed, empty, text)


register_token_reader(token_keys)
