"""Vectorized scans of a chunk's lines: the bytes from each line's start, the k-th field.

Every extractor (:mod:`panstream.inputs.extractors`), every time reader
(:mod:`panstream.inputs.timestamps`) and every format (:mod:`panstream.inputs.formats`) locates
what it reads with these, over whole chunks (a ``uint8`` array, the line starts and ends), with no
Python work per line. They used to sit in ``panstream.inputs.extractors``, which still re-exports
them (issue 36).
"""

from __future__ import annotations

import numpy as np


def nth_field(b: np.ndarray, starts: np.ndarray, ends: np.ndarray, sp: np.ndarray, k: int,
              k0: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Span of the k-th field (1-based) of each line, fields separated by the bytes at the sorted
    positions ``sp`` (``k0``: ``searchsorted(sp, starts)`` if already known). Returns ``(ts, te,
    ok)``; ``ok`` is False where the line has fewer than k fields."""
    if k0 is None:
        k0 = np.searchsorted(sp, starts)
    last = sp.size - 1
    if k == 1:
        ts = starts.copy()
        ok = np.ones(starts.size, dtype=bool)
    else:
        i = k0 + (k - 2)
        has = i <= last
        pos = sp[np.minimum(i, max(last, 0))] if sp.size else np.zeros_like(starts)
        ok = has & (pos < ends)
        ts = np.where(ok, pos + 1, ends)
    i2 = k0 + (k - 1)
    if sp.size:
        nxt = np.where(i2 <= last, sp[np.minimum(i2, last)], ends)
        te = np.minimum(nxt, ends)
    else:
        te = ends.copy()
    return ts, te, ok


def windows(b: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """The ``n x width`` matrix of the ``width`` bytes from each start (zero past the buffer's
    end): one gather of ``V{width}`` items from a strided view of ``b``, no per-line work."""
    n = b.size
    if n >= width:
        lim = n - width
        view = np.ndarray((lim + 1,), dtype=f"V{width}", buffer=b, strides=(1,))
        w = view[np.minimum(starts, lim)].view(np.uint8).reshape(-1, width)
    else:
        lim = 0
        w = np.zeros((starts.size, width), dtype=np.uint8)
    tail = np.flatnonzero(starts > lim) if n >= width else np.arange(starts.size)
    if tail.size:  # starts within ``width`` bytes of the end (in any order): pad them
        pad = np.zeros(2 * width, dtype=np.uint8)
        pad[: n - lim] = b[lim:]
        view = np.ndarray((width + 1,), dtype=f"V{width}", buffer=pad, strides=(1,))
        w[tail] = view[starts[tail] - lim].view(np.uint8).reshape(-1, width)
        pad.fill(0)
    return w


#: Bytes of a line's head searched for the separators before a field (covers field 4 of an ALB
#: line, field 5 of CloudFront, column 4 of nfdump's CSV); a field beyond it is found the slow way.
HEAD = 128


def lowmask(length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 128-bit masks (as two uint64 words) of the bits below each ``length`` (capped at 128)."""
    one = np.uint64(1)
    full = np.uint64(0xFFFFFFFFFFFFFFFF)
    n0 = np.clip(length, 0, 64).astype(np.uint64)
    n1 = np.clip(length - 64, 0, 64).astype(np.uint64)
    with np.errstate(over="ignore"):
        lo = np.where(n0 >= 64, full, (one << np.minimum(n0, np.uint64(63))) - one)
        hi = np.where(n1 >= 64, full, (one << np.minimum(n1, np.uint64(63))) - one)
    return lo, hi


def pack128(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row of an ``n x 128`` boolean matrix as two uint64 words (column j = bit j)."""
    words = np.packbits(rows, axis=1, bitorder="little").view("<u8")
    return words[:, 0].copy(), words[:, 1].copy()


def highest(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Position of the highest set bit of each 128-bit (lo, hi) pair, -1 if none."""
    x = np.where(hi != 0, hi, lo)
    e = np.frexp(x.astype(np.float64))[1].astype(np.intp) - 1  # rounding may add one: fixed below
    e = np.clip(e, 0, 63)
    over = (x >> e.astype(np.uint64)) == 0
    e -= over
    e += 64 * (hi != 0)
    e[x == 0] = -1
    return e


def pop_lowest(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Position of the lowest set bit of each 128-bit (lo, hi) pair (-1 if none), clearing it in
    place."""
    use_lo = lo != 0
    x = np.where(use_lo, lo, hi)
    with np.errstate(over="ignore"):
        low = x & (~x + np.uint64(1))
        pos = np.frexp(low.astype(np.float64))[1].astype(np.intp) - 1  # exact: a power of two
        pos += 64 * ~use_lo
        pos[x == 0] = -1
        np.copyto(lo, lo & (lo - np.uint64(1)), where=use_lo)
        np.copyto(hi, hi & (hi - np.uint64(1)), where=~use_lo)
    return pos, pos >= 0


def prefix_xor(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bit j of the result is the XOR of bits 0..j of each 128-bit (lo, hi) pair: 1 inside a
    quoted part when the input marks the quotes."""
    lo, hi = lo.copy(), hi.copy()
    for sh in (1, 2, 4, 8, 16, 32):
        lo ^= lo << np.uint64(sh)
        hi ^= hi << np.uint64(sh)
    hi ^= np.uint64(0) - (lo >> np.uint64(63))  # an odd count in lo flips every bit of hi
    return lo, hi


def head_field(b: np.ndarray, starts: np.ndarray, ends: np.ndarray, sep: int, k: int,
               awk: bool = False, quotes: bool = False
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Span of the k-th ``sep``-separated field of each line, looking only at the first
    :data:`HEAD` bytes of each line (vectorized; the cost does not grow with the line's length):
    the separators of each head are packed into a 128-bit mask and the lowest k are popped.

    Returns ``(ts, te, ok, unsure)``: ``ok`` where the span was found; ``unsure`` where the head
    does not settle it (the field ends past the head, or with ``awk``, blanks that awk would merge:
    a leading blank, two in a row, a control character such as a tab) and the caller must look the
    slow way. Rows neither ``ok`` nor ``unsure`` have fewer than k fields. With ``quotes`` (CSV), a
    separator between double quotes does not count, and quotes around the field are dropped.
    """
    n = starts.size
    length = ends - starts
    w = windows(b, starts, HEAD)
    mlo, mhi = lowmask(length)
    lo, hi = pack128(w == sep)
    lo &= mlo
    hi &= mhi
    stray = None
    if quotes:
        qlo, qhi = pack128(w == 34)
        qlo &= mlo
        qhi &= mhi
        if bool((qlo | qhi).any()):
            ilo, ihi = prefix_xor(qlo, qhi)  # 1 from an opening quote to its closing one
            lo &= ~ilo  # separators outside quotes
            hi &= ~ihi
            # Simple quoting only: a quote opens a cell (after a separator outside quotes, at the
            # line start, or right after a quote: "c""d"), or closes one (before such a separator,
            # at the line end, or right before a quote), and every quote is closed. Any other row
            # (a"b, "e"f, an unclosed quote) is left to the csv module and its own rules.
            one, top, zero = np.uint64(1), np.uint64(63), np.uint64(0)
            last = length - 1
            elo = np.where((last >= 0) & (last < 64),
                           one << np.clip(last, 0, 63).astype(np.uint64), zero)
            ehi = np.where((last >= 64) & (last < 128),
                           one << np.clip(last - 64, 0, 63).astype(np.uint64), zero)
            start_lo = (lo << one) | one | (qlo << one)  # bit j: a separator/quote at j - 1, j = 0
            start_hi = (hi << one) | (lo >> top) | (qhi << one) | (qlo >> top)
            end_lo = (lo >> one) | (hi << top) | elo | (qlo >> one) | (qhi << top)
            end_hi = (hi >> one) | ehi | (qhi >> one)
            good_lo = (ilo & start_lo) | (~ilo & end_lo)
            good_hi = (ihi & start_hi) | (~ihi & end_hi)
            stray = ((qlo & ~good_lo) | (qhi & ~good_hi)) != 0
            stray |= ((ilo & elo) | (ihi & ehi)) != 0  # still inside quotes at the line's end
    bad = np.zeros(n, dtype=bool)
    prev = np.full(n, -1, dtype=np.intp)
    p0 = prev
    exists = np.ones(n, dtype=bool)
    enough = exists
    for _ in range(k):
        p0, enough = prev, exists
        prev, exists = pop_lowest(lo, hi)
        if awk:
            bad |= exists & (prev == p0 + 1)  # an empty field (two blanks, or a leading one)
    has_end = exists
    ts = starts + p0 + 1 if k > 1 else starts.copy()
    te = np.where(has_end, starts + prev, ends)
    short = length <= HEAD  # the whole line is in the head
    unsure = ~short & ~(enough & has_end)
    ok = enough & (has_end | short) & ~unsure
    if awk:
        clo, chi = pack128(w < 32)  # tabs and other control characters: awk's rules
        bad |= ((clo & mlo) | (chi & mhi)) != 0
        bad |= ok & (te == ts)
        unsure |= ok & bad
        ok &= ~bad
    if stray is not None:
        unsure |= stray
        ok &= ~stray
    if quotes:
        rows = np.flatnonzero(ok & (te - ts >= 2))
        first = b[ts[rows]] == 34
        last = b[te[rows] - 1] == 34
        both = rows[first & last]
        ts[both] += 1
        te[both] -= 1
        ok[rows[first ^ last]] = False  # a quote on one side only: let csv read it
        unsure[rows[first ^ last]] = True
    w.fill(0)
    return ts, te, ok, unsure
