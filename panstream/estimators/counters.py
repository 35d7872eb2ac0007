"""The modular counter table: the only state the frequency estimator keeps about a stream.

One counter ``c`` in Z_k per cell (k = ``modulus``, a power of two from 4 to 256). Each counter
starts as a draw of D (0 with probability alpha, otherwise uniform on Z_k: :meth:`CounterTable.random`)
and every arrival adds 1 modulo k (:meth:`CounterTable.add`; no randomness).

**Fields.** A counter lives in the *top* ``log2 k`` bits of its field (a byte, or a nibble), the lower
bits are always 0: field value ``c * F / k`` with F = 256 for a byte and 16 for a nibble. Adding
``256 / k`` to a byte whose top bits hold the counter then wraps around modulo 256, which is exactly
``c + 1 mod k``: an update is one ``np.add.at`` with no reduction step, and no bit above the counter
ever holds the count's higher digits.

**Layouts.** Two layouts hold the same logical table:

* ``"bytes"``: one byte per cell (value ``c * 256 / k``). The fastest, used automatically up to
  :data:`AUTO_BYTES_MAX_CELLS` cells, and always for k >= 32.
* ``"packed"`` (k <= 16 only): two cells per byte, cell ``i`` in nibble ``i % 2`` (low nibble first)
  of byte ``i // 2``, each nibble ``c * 16 / k``; the padding nibble of an odd-sized table is 0.
  This is also the snapshot payload for k <= 16, so a packed table is saved without a copy
  (2**32 cells take 2 GiB).

In the packed layout the high nibble wraps like a byte (adding ``256 / k`` to the byte), but a carry
out of the low nibble would spill into its neighbour. So an update takes the odd cells (high
nibbles) in one ``np.add.at`` pass, and the even cells by swapping the nibbles of the bytes they
touch, adding in the high position, and swapping back; two cells of one byte are never added to in
the same pass, and duplicate indices inside a pass all name the same cell.

>>> import numpy as np
>>> t = CounterTable.from_counters(np.array([0, 15, 3], dtype=np.uint8), 16)
>>> t.add(np.array([1, 2, 2, 2], dtype=np.intp))
>>> t.counters().tolist(), t.histogram().tolist()[:7]
([0, 0, 6], [2, 0, 0, 0, 0, 0, 1])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np

from panstream.errors import ConfigurationError
from panstream.estimators.bittable import _executor
from panstream.randomness import bernoulli, fill_secure

Layout = Literal["bytes", "packed"]

#: Tables up to this many cells use one byte per cell when the layout is "auto" (as the bit table).
AUTO_BYTES_MAX_CELLS = 1 << 28

#: Cells (or bytes) handled per step by initialization and reading, to bound temporaries.
_CHUNK = 1 << 22


def _log2(modulus: int) -> int:
    return modulus.bit_length() - 1


def choose_layout(size: int, modulus: int, layout: str = "auto") -> Layout:
    """Resolve ``"auto"`` for a table of ``size`` cells: bytes up to :data:`AUTO_BYTES_MAX_CELLS`
    cells, packed nibbles above. For ``modulus >= 32`` a byte per cell *is* the packed form, so
    both names resolve to ``"bytes"``.

    Raises:
        ConfigurationError: an unknown layout name.
    """
    if layout not in ("auto", "bytes", "packed"):
        msg = f"unknown table layout {layout!r}: use 'auto', 'bytes' or 'packed'"
        raise ConfigurationError(msg)
    if modulus > 16:
        return "bytes"
    if layout == "auto":
        return "bytes" if size <= AUTO_BYTES_MAX_CELLS else "packed"
    return layout  # type: ignore[return-value]


def payload_size(size: int, modulus: int) -> int:
    """Bytes of the snapshot payload: ``ceil(size / 2)`` for k <= 16, ``size`` for k >= 32."""
    return (size + 1) // 2 if modulus <= 16 else size


def payload_problem(size: int, modulus: int, payload: np.ndarray) -> str | None:
    """Why ``payload`` cannot be the counters of ``size`` cells modulo ``modulus``, or ``None``.

    Checks the length, that every field's bits below its counter are 0, and (k <= 16, odd size)
    that the padding nibble is 0. Reads the payload in chunks and makes no copy of it.
    """
    want = payload_size(size, modulus)
    if payload.size != want:
        return f"a {payload.size}-byte payload cannot hold {size} counters modulo {modulus}"
    if modulus <= 16:
        low = (16 // modulus) - 1
        low |= low << 4
    else:
        low = (256 // modulus) - 1
    if low:
        for s in range(0, payload.size, _CHUNK):
            part = payload[s : s + _CHUNK]
            if np.any(np.bitwise_and(part, np.uint8(low))):
                return (f"counter fields have bits set below their counter (modulo {modulus} every "
                        "field is a multiple of its step)")
    if modulus <= 16 and size % 2 and payload.size and int(payload[-1]) >> 4:
        return "the padding nibble after the last counter is set (the format requires 0)"
    return None


def payload_counter(payload: bytes | memoryview | np.ndarray, cell: int, modulus: int) -> int:
    """The counter of ``cell`` read from a snapshot payload (``docs/snapshot-format.md``).

    >>> payload_counter(bytes([0x3F]), 1, 16), payload_counter(bytes([0x3F]), 0, 16)
    (3, 15)
    """
    if modulus <= 16:
        byte = int(payload[cell // 2])
        field = (byte >> 4) if cell % 2 else (byte & 0x0F)
        return field >> (4 - _log2(modulus))
    return int(payload[cell]) >> (8 - _log2(modulus))


class CounterTable:
    """A table of ``size`` counters modulo ``modulus``. See the module docstring."""

    __slots__ = ("_inc", "_t", "layout", "modulus", "size")

    def __init__(self, size: int, modulus: int, data: np.ndarray, layout: Layout) -> None:
        # Private: use CounterTable.random(), from_counters() or _from_payload_array().
        self.size = size
        self.modulus = modulus
        self.layout = layout
        self._t = data
        self._inc = np.uint8(256 // modulus)  # +1 mod k in the top bits of a byte or high nibble

    # ------------------------------------------------------------------ construction
    @classmethod
    def random(cls, size: int, modulus: int, alpha_numerator: int, layout: str = "auto"
               ) -> CounterTable:
        """A fresh table: every counter an independent draw of D from the OS CSPRNG.

        D is exact: Bernoulli(``alpha_numerator / 2**32``) (:func:`panstream.randomness.bernoulli`)
        decides "0", otherwise the counter keeps ``log2 k`` uniform CSPRNG bits. Random bytes and
        draws are read straight into the table or wiped after use.
        """
        lay = choose_layout(size, modulus, layout)
        if lay == "bytes":
            t = np.empty(size, dtype=np.uint8)
            _in_two_threads(t, lambda part: _init_bytes(part, modulus, alpha_numerator))
            return cls(size, modulus, t, "bytes")
        t = np.empty((size + 1) // 2, dtype=np.uint8)
        _in_two_threads(t, lambda part: _init_nibbles(part, modulus, alpha_numerator))
        if size % 2:
            t[-1] &= np.uint8(0x0F)  # padding nibble
        return cls(size, modulus, t, "packed")

    @classmethod
    def from_counters(cls, counters: np.ndarray, modulus: int, layout: str = "auto") -> CounterTable:
        """A table holding the given counter values (``uint8``, each below ``modulus``); for tests,
        golden files and merges. ``counters`` is not modified.

        Raises:
            ConfigurationError: a value is not below ``modulus``.
        """
        c = np.asarray(counters, dtype=np.uint8).reshape(-1)
        converted = not (isinstance(counters, np.ndarray) and np.shares_memory(c, counters))
        try:
            if c.size and int(c.max()) >= modulus:
                msg = f"counter values must lie in 0..{modulus - 1}"
                raise ConfigurationError(msg)
            size = c.size
            shift = 8 - _log2(modulus)
            if choose_layout(size, modulus, layout) == "bytes":
                return cls(size, modulus, np.left_shift(c, shift), "bytes")
            t = np.zeros((size + 1) // 2, dtype=np.uint8)
            np.left_shift(c[0::2], shift - 4, out=t)
            hi = np.left_shift(c[1::2], shift)
            t[: size // 2] |= hi
            hi.fill(0)
            return cls(size, modulus, t, "packed")
        finally:
            if converted:
                c.fill(0)  # our own converted copy of the counters

    @classmethod
    def _from_payload_array(cls, size: int, modulus: int, payload: np.ndarray, layout: str
                            ) -> CounterTable:
        """Adopt a verified snapshot payload (:func:`payload_problem` found nothing). A packed table
        or a byte table with k >= 32 keeps the array itself; unpacking to bytes zeroes it."""
        lay = choose_layout(size, modulus, layout)
        if lay == "packed" or modulus > 16:
            return cls(size, modulus, payload, lay)
        t = np.empty(size, dtype=np.uint8)
        np.left_shift(payload, np.uint8(4), out=t[0::2])  # low nibble field -> top of the byte
        np.bitwise_and(payload[: size // 2], np.uint8(0xF0), out=t[1::2])
        payload.fill(0)
        return cls(size, modulus, t, "bytes")

    # ------------------------------------------------------------------ the hot path
    def add(self, idx: np.ndarray) -> None:
        """Add each cell's multiplicity in ``idx`` to its counter, modulo k.

        ``idx`` must be an ``intp`` array of valid cell indices (the caller validates and wipes it).
        Deterministic: no draw. Every temporary derived from the indices is wiped here.
        """
        if idx.size == 0:
            return
        if self.layout == "bytes":
            np.add.at(self._t, idx, self._inc)
        else:
            _add_packed(self._t, idx, self._inc)

    # ------------------------------------------------------------------ reading
    def counters(self) -> np.ndarray:
        """A ``uint8`` copy of the counters (values ``0..k-1``), one per cell."""
        if self.layout == "bytes":
            return np.right_shift(self._t, np.uint8(8 - _log2(self.modulus)))
        out = np.empty(self.size, dtype=np.uint8)
        s4 = 4 - _log2(self.modulus)
        lo = out[0::2]
        np.bitwise_and(self._t, np.uint8(0x0F), out=lo)
        if s4:
            lo >>= np.uint8(s4)
        np.right_shift(self._t[: self.size // 2], np.uint8(4 + s4), out=out[1::2])
        return out

    def histogram(self) -> np.ndarray:
        """``H``: the number of cells holding each counter value, ``int64`` of length k.

        Counts byte values chunk by chunk (into a buffer zeroed afterwards), then folds them to
        counter values: no table-sized temporary.
        """
        k = self.modulus
        by_byte = np.zeros(256, dtype=np.int64)
        t = self._t
        buf = np.empty(min(_CHUNK, t.size), dtype=np.intp)
        try:
            for s in range(0, t.size, _CHUNK):
                part = t[s : s + _CHUNK]
                b = buf[: part.size]
                np.copyto(b, part)
                by_byte += np.bincount(b, minlength=256)
        finally:
            buf.fill(0)
        values = np.arange(256)
        if self.layout == "bytes":
            return by_byte[values[:: 256 // k]].copy()
        s4 = 4 - _log2(k)
        hist = np.bincount((values & 0x0F) >> s4, weights=by_byte, minlength=k)
        hist += np.bincount((values >> 4) >> s4, weights=by_byte, minlength=k)
        out = hist.astype(np.int64)
        if self.size % 2:
            out[0] -= 1  # the padding nibble is not a cell
        return out

    def payload_view(self) -> memoryview:
        """The table as its snapshot payload (``docs/snapshot-format.md``), without copying it when
        the live table already is that (packed, or one byte per cell with k >= 32). A byte table
        with k <= 16 is packed into a fresh copy: pass it to :meth:`wipe_payload_view` once written.
        """
        if self.layout == "packed" or self.modulus > 16:
            return self._t.data.cast("B")
        n = self.size
        p = np.empty((n + 1) // 2, dtype=np.uint8)
        np.right_shift(self._t[0::2], np.uint8(4), out=p)
        np.bitwise_or(p[: n // 2], self._t[1::2], out=p[: n // 2])
        return p.data.cast("B")

    def wipe_payload_view(self, view: memoryview) -> None:
        """Zero ``view`` if :meth:`payload_view` made it as a copy (never the live table)."""
        if self.layout == "bytes" and self.modulus <= 16 and not view.readonly:
            np.frombuffer(view, dtype=np.uint8).fill(0)

    def nbytes(self) -> int:
        """Memory held by the table."""
        return int(self._t.nbytes)

    def wipe(self) -> None:
        """Overwrite the table's memory with zeros (before dropping it)."""
        self._t.fill(0)


def _init_bytes(t: np.ndarray, modulus: int, alpha_numerator: int) -> None:
    """Fill ``t`` (one byte per cell) with independent draws of D, chunk by chunk: uniform CSPRNG
    bytes keep their top ``log2 k`` bits (uniform on Z_k), then an exact Bernoulli(alpha) draw per
    cell zeroes its counter. Draws are wiped."""
    top = np.uint8(0xFF ^ (256 // modulus - 1))
    for s in range(0, t.size, _CHUNK):
        part = t[s : s + _CHUNK]
        fill_secure(part)
        part &= top
        keep = bernoulli(part.size, alpha_numerator)
        np.logical_not(keep, out=keep)
        part *= keep.view(np.uint8)  # 0 where the alpha draw said "zero"
        keep.fill(False)


def _init_nibbles(t: np.ndarray, modulus: int, alpha_numerator: int) -> None:
    """:func:`_init_bytes` for the packed layout: two cells per byte (the draw for a padding cell
    is made and discarded by the caller's mask)."""
    nib = 0x0F ^ (16 // modulus - 1)
    both = np.uint8(nib | nib << 4)
    for s in range(0, t.size, _CHUNK):
        part = t[s : s + _CHUNK]
        fill_secure(part)
        part &= both
        zero = bernoulli(2 * part.size, alpha_numerator).view(np.uint8)
        mask = np.empty(part.size, dtype=np.uint8)
        try:
            for half, nibble in ((zero[0::2], 0x0F), (zero[1::2], 0xF0)):
                np.multiply(half, np.uint8(nibble), out=mask)
                mask ^= np.uint8(0xFF)  # clears the nibble whose draw said "zero"
                part &= mask
        finally:
            zero.fill(0)
            mask.fill(0)


def _in_two_threads(t: np.ndarray, fill: Callable[[np.ndarray], None]) -> None:
    """Run ``fill`` on the two halves of a large ``t`` at once (CSPRNG reads and NumPy's loops
    release the GIL), on the whole of a small one."""
    if t.size < _CHUNK * 4:
        fill(t)
        return
    half = t.size // 2
    fut = _executor().submit(fill, t[:half])
    try:
        fill(t[half:])
    finally:
        fut.result()


def _swap_nibbles(w: np.ndarray, tmp: np.ndarray) -> None:
    """Exchange the two nibbles of every byte of ``w`` in place (``tmp``: scratch of its size)."""
    np.left_shift(w, np.uint8(4), out=tmp)
    w >>= np.uint8(4)
    w |= tmp


def _add_packed(t: np.ndarray, idx: np.ndarray, inc: np.uint8) -> None:
    """Packed layout: add multiplicities to nibble counters (see the module docstring).

    Odd cells sit in high nibbles: ``np.add.at`` of ``inc`` to their bytes wraps exactly modulo k
    and leaves the low nibble alone. Even cells sit in low nibbles: their bytes are gathered, their
    nibbles swapped and scattered back (duplicates write the same value), ``inc`` is added at the
    high position, and the bytes are swapped back. Odd cells go first, so no byte is swapped while
    its other cell is being added to. All index and byte temporaries are wiped.
    """
    key = idx.astype(np.uint8)
    key &= np.uint8(1)
    eq = key.view(bool)  # 0/1 bytes are valid booleans: "cell is odd"
    odd = np.flatnonzero(eq)
    b = np.take(idx, odd)
    odd.fill(0)
    try:
        b >>= 1
        np.add.at(t, b, inc)
        b.fill(0)
        np.logical_not(eq, out=eq)
        even = np.flatnonzero(eq)
        b = np.take(idx, even)
        even.fill(0)
        b >>= 1
        w = np.take(t, b)
        tmp = np.empty_like(w)
        try:
            _swap_nibbles(w, tmp)
            t[b] = w
            np.add.at(t, b, inc)
            np.take(t, b, out=w)
            _swap_nibbles(w, tmp)
            t[b] = w
        finally:
            w.fill(0)
            tmp.fill(0)
    finally:
        b.fill(0)
        key.fill(0)
