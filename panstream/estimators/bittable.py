"""The randomized bit table: the only state panstream keeps about a stream.

Two layouts hold the same logical table of ``size`` bits:

* ``"bytes"``: one ``uint8`` (0 or 1) per cell. An update is a bare NumPy scatter ``t[idx] = draws``,
  the fastest layout, used automatically up to :data:`AUTO_BYTES_MAX_CELLS` cells.
* ``"packed"``: eight cells per byte (cell ``i`` is bit ``i % 8``, least significant first, of byte
  ``i // 8``), so 2**32 cells take 512 MiB. Used above that size.

Semantics of :meth:`BitTable.redraw`: every cell named in the batch ends with exactly one fresh draw
from Bernoulli(p), however often it is named. In the byte layout duplicates are harmless because the
scatter keeps one of the independent draws written to the cell, chosen by position, never by value.
The packed layout writes each cell's bit without disturbing the other seven of its byte: by the
optional C kernel :mod:`panstream.estimators._packed` (one pass in item order, issue 38) when it is
built, else in eight NumPy passes, one per bit position, so two different cells of one byte are
never read-modified-written at once. ``PANSTREAM_NATIVE=0`` (read once, at import) forces the NumPy
path.

Both layouts serialize to the same packed little-endian bit order (:meth:`BitTable.to_packed`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from fractions import Fraction
from typing import Any, Literal

import numpy as np

from panstream._moved import optional_extension
from panstream.calibration import Calibrated, calibrate
from panstream.errors import ConfigurationError
from panstream.randomness import (
    bernoulli,
    bernoulli_from_bytes,
    bernoulli_half_packed,
    bernoulli_packed,
    fill_secure,
    secure_bytes,
)

Layout = Literal["bytes", "packed"]


def packed_size(cells: int, bits_per_cell: int = 1) -> int:
    """Bytes of a payload of ``cells`` cells of ``bits_per_cell`` bits: ``ceil(cells * bits / 8)``
    (a snapshot's payload, :mod:`panstream.state.format`)."""
    return (cells * bits_per_cell + 7) // 8


#: Tables up to this many cells use one byte per cell when the layout is "auto".
AUTO_BYTES_MAX_CELLS = 1 << 28

#: Batches at least this large overlap drawing randomness (in a helper thread) with writing.
_PIPELINE_MIN = 1 << 17
_CHUNK = 1 << 18

#: D0 with q = 1/2 (the default of BitTable.random) is plain CSPRNG bytes.
_HALF = 1 << 31


def _load_native() -> Any:
    """The optional C kernel ``panstream.estimators._packed`` (issue 38), or None when it was not
    built, fails to import, or ``PANSTREAM_NATIVE=0`` asks for the NumPy path. Read once, at import."""
    return optional_extension("panstream.estimators._packed")


#: The packed write's C kernel, or None: :func:`_packed_write` then runs its NumPy passes.
_native: Any = _load_native()

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="panstream-draws")
        return _pool


def choose_layout(size: int, layout: str = "auto") -> Layout:
    """Resolve ``"auto"`` to a concrete layout for a table of ``size`` cells."""
    if layout == "auto":
        return "bytes" if size <= AUTO_BYTES_MAX_CELLS else "packed"
    if layout in ("bytes", "packed"):
        return layout  # type: ignore[return-value]
    msg = f"unknown table layout {layout!r}: use 'auto', 'bytes' or 'packed'"
    raise ConfigurationError(msg)


def _chunks(n: int) -> Iterator[slice]:
    for start in range(0, n, _CHUNK):
        yield slice(start, min(n, start + _CHUNK))


class BitTable:
    """A table of ``size`` bits with D0 initialization and D1 redraws. See the module docstring."""

    __slots__ = ("_t", "layout", "size")

    def __init__(self, size: int, data: np.ndarray, layout: Layout) -> None:
        # Private: use BitTable.random() or BitTable.from_packed().
        self.size = size
        self.layout = layout
        self._t = data

    # ------------------------------------------------------------------ construction
    @classmethod
    def random(cls, size: int, layout: str = "auto", q_numerator: int = _HALF) -> BitTable:
        """A fresh table whose every bit is an independent D0 = Bernoulli(``q_numerator / 2**32``)
        draw from the OS CSPRNG (a fair coin by default). ``q != 1/2`` is drawn exactly by
        :func:`~panstream.randomness.bernoulli_packed`, shared with the helper thread."""
        lay = choose_layout(size, layout)
        nbytes = (size + 7) // 8
        if q_numerator == _HALF:
            packed = _random_packed(nbytes)
        else:
            packed = bernoulli_packed(nbytes, q_numerator, executor=_executor())
        return cls._from_packed_array(size, packed, lay)

    @classmethod
    def from_packed(cls, size: int, data: bytes | bytearray | memoryview, layout: str = "auto"
                    ) -> BitTable:
        """Rebuild a table from :meth:`to_packed` output. Padding bits past ``size`` must be zero."""
        nbytes = (size + 7) // 8
        if len(data) != nbytes:
            msg = f"packed table of {size} cells needs {nbytes} bytes, got {len(data)}"
            raise ConfigurationError(msg)
        # A NumPy-owned copy (not a bytearray): NumPy backs large arrays with huge pages, which
        # keeps random updates on a 512 MiB table free of TLB misses.
        packed = np.frombuffer(data, dtype=np.uint8).copy()
        return cls._from_packed_array(size, packed, choose_layout(size, layout))

    @classmethod
    def _from_packed_array(cls, size: int, packed: np.ndarray, lay: Layout) -> BitTable:
        if size % 8:
            packed[-1] &= np.uint8((1 << (size % 8)) - 1)  # padding bits are always zero
        if lay == "packed":
            return cls(size, packed, "packed")
        t = np.unpackbits(packed, count=size, bitorder="little")
        packed.fill(0)
        return cls(size, t, "bytes")

    # ------------------------------------------------------------------ the hot path
    def redraw(self, idx: np.ndarray, numerator: int) -> None:
        """Give every cell in ``idx`` a fresh Bernoulli(``numerator / 2**32``) bit.

        ``idx`` must be an ``intp`` array of valid cell indices (the caller validates). Work is shared
        with one helper thread (see :func:`_executor`); all draws and index buffers made here are
        overwritten once written, and nothing is drawn ahead for a later call.
        """
        n = idx.size
        if n == 0:
            return
        if self.layout == "packed":
            self._redraw_packed(idx, numerator)
        elif n < _PIPELINE_MIN:
            v = bernoulli(n, numerator)
            self._t[idx] = v.view(np.uint8)
            v.fill(False)
        else:
            self._redraw_bytes_pipelined(idx, numerator)

    def _redraw_bytes_pipelined(self, idx: np.ndarray, numerator: int) -> None:
        """Byte layout: the helper thread reads chunk ``i + 1``'s random bytes while this thread
        turns chunk ``i``'s bytes into draws and scatters them.

        Only the CSPRNG read runs in the helper: it releases the GIL for its whole duration, while
        NumPy's scatter holds it. (Measured on 2 cores: smaller or growing chunks, and pipelining
        batches below ``_PIPELINE_MIN``, are slower, as each hand-off costs a GIL round trip.) A duplicate
        cell keeps the draw written last, chosen by position, never by value.
        """
        t = self._t
        for sl, v in _pipelined_draws(idx.size, numerator):
            try:
                t[idx[sl]] = v.view(np.uint8)
            finally:
                v.fill(False)

    def _redraw_packed(self, idx: np.ndarray, numerator: int) -> None:
        """Packed layout: the helper thread reads chunk ``i + 1``'s random bytes while this thread
        draws and writes chunk ``i`` (:func:`_packed_write`: the C kernel, one pass in item order,
        when it is built; it releases the GIL, so the read and the write run at once).

        Without the kernel, each chunk's cells are grouped by bit position ``i % 8`` and written in eight
        gather/modify/scatter passes, so two different cells of one byte are never
        read-modified-written at once, and a duplicate byte inside a pass is a duplicate cell (the
        last write keeps one draw, chosen by position). The draws are consumed in pass
        order: they are i.i.d. and independent of the indices, so which draw goes to which cell does
        not change any cell's law, and no permutation of the draws is needed.

        Only the CSPRNG reads run in the helper thread: they release the GIL, NumPy's fancy indexing
        does not (measured: a second thread gathering or scattering gains nothing).
        """
        n = idx.size
        if n < _PIPELINE_MIN:
            v = bernoulli(n, numerator)
            try:
                _packed_write(self._t, idx, v.view(np.uint8))
            finally:
                v.fill(False)
            return
        for sl, v in _pipelined_draws(n, numerator):
            try:
                _packed_write(self._t, idx[sl], v.view(np.uint8))
            finally:
                v.fill(False)

    # ------------------------------------------------------------------ reading
    def count_ones(self) -> int:
        """Number of cells whose bit is 1."""
        if self.layout == "bytes":
            return int(np.count_nonzero(self._t))
        t = self._t
        n8 = t.size - t.size % 8
        total = int(np.bitwise_count(t[:n8].view(np.uint64)).sum(dtype=np.int64)) if n8 else 0
        if n8 < t.size:
            total += int(np.bitwise_count(t[n8:]).sum(dtype=np.int64))
        return total

    def count_ones_by(self, bucket_cells: int) -> np.ndarray:
        """Number of ones in each run of ``bucket_cells`` consecutive cells (the last run may be
        shorter), as an ``int64`` array of ``ceil(size / bucket_cells)`` entries.

        Works chunk by chunk (cumulative counts at the bucket boundaries), so a 2**32-cell table needs
        no table-sized temporary.
        """
        b = int(bucket_cells)
        if b < 1:
            msg = f"bucket_cells must be at least 1, got {bucket_cells!r}"
            raise ValueError(msg)
        if self.layout == "packed" and b % 64 == 0 and self.size % b == 0:
            return self._count_words_by(b // 64)
        bounds = np.minimum(np.arange(0, self.size + b, b, dtype=np.int64), self.size)
        bounds = bounds[: -(-self.size // b) + 1]
        return np.diff(self._ones_before(bounds))

    def _count_words_by(self, words: int) -> np.ndarray:
        """Fast path of :meth:`count_ones_by` for whole buckets of ``words`` 64-bit words."""
        w = self._t.view(np.uint64).reshape(-1, words)
        out = np.empty(w.shape[0], dtype=np.int64)
        rows = max(1, (1 << 22) // words)
        for r0 in range(0, w.shape[0], rows):
            out[r0:r0 + rows] = np.bitwise_count(w[r0:r0 + rows]).sum(axis=1, dtype=np.int64)
        return out

    def _ones_before(self, ks: np.ndarray) -> np.ndarray:
        """Number of ones in cells ``[0, k)`` for each sorted ``k`` of ``ks``."""
        t = self._t
        packed = self.layout == "packed"
        unit = ks // 8 if packed else ks  # element (byte or cell) holding boundary k
        out = np.zeros(ks.size, dtype=np.int64)
        carry = 0
        step = 1 << 22
        for c0 in range(0, t.size, step):
            c1 = min(c0 + step, t.size)
            pop = np.bitwise_count(t[c0:c1]) if packed else t[c0:c1]
            cum = np.cumsum(pop, dtype=np.int64)
            sel = (unit >= c0) & (unit < c1)
            # ones in elements [0, unit): carry + cum[unit - c0 - 1]
            u = unit[sel] - c0
            out[sel] = carry + np.where(u > 0, cum[np.maximum(u - 1, 0)], 0)
            carry += int(cum[-1])
        out[unit >= t.size] = carry
        if packed:
            part = ks % 8
            has = (part > 0) & (unit < t.size)
            if has.any():
                masks = ((1 << part[has]) - 1).astype(np.uint8)
                out[has] += np.bitwise_count(t[unit[has]] & masks).astype(np.int64)
        return out

    def bits(self) -> np.ndarray:
        """A ``uint8`` 0/1 copy of the table, one entry per cell."""
        if self.layout == "bytes":
            return self._t.copy()
        return np.unpackbits(self._t, count=self.size, bitorder="little")

    def to_packed(self) -> bytes:
        """The table as ``ceil(size/8)`` bytes, cell ``i`` at bit ``i % 8`` of byte ``i // 8``."""
        if self.layout == "packed":
            return self._t.tobytes()
        return np.packbits(self._t, bitorder="little").tobytes()

    def packed_view(self) -> memoryview:
        """The table in packed form (as :meth:`to_packed`), without copying a packed table.

        For the byte layout the view is of a fresh packed *copy* (a NumPy array, so it can be
        wiped): pass it to :meth:`wipe_packed_view` once written. A copy of an old table left in
        freed memory would let one later memory read see two tables of one run (who arrived in
        between).
        """
        if self.layout == "packed":
            return self._t.data.cast("B")  # zero-copy: a 2**32-cell table is 512 MiB
        return np.packbits(self._t, bitorder="little").data.cast("B")

    def wipe_packed_view(self, view: memoryview) -> None:
        """Zero ``view`` if it is a packed copy made by :meth:`packed_view` (never the live table)."""
        if self.layout != "packed" and not view.readonly:
            np.frombuffer(view, dtype=np.uint8).fill(0)

    def nbytes(self) -> int:
        """Memory held by the table."""
        return int(self._t.nbytes)

    def wipe(self) -> None:
        """Overwrite the table's memory with zeros (before dropping it on an epoch rotation)."""
        self._t.fill(0)


def _pipelined_draws(n: int, numerator: int) -> Iterator[tuple[slice, np.ndarray]]:
    """Yield ``(slice, draws)`` chunk by chunk over ``0..n``, reading the next chunk's random bytes in
    the helper thread meanwhile. Each draws array belongs to the caller, who wipes it once written;
    the bytes still in flight when the caller stops early are wiped here. Nothing is read for a
    later call.
    """
    pool = _executor()
    slices = list(_chunks(n))
    nxt: Future[np.ndarray] = pool.submit(secure_bytes, slices[0].stop - slices[0].start)
    try:
        for i, sl in enumerate(slices):
            first = nxt.result()
            if i + 1 < len(slices):
                s2 = slices[i + 1]
                nxt = pool.submit(secure_bytes, s2.stop - s2.start)
            yield sl, bernoulli_from_bytes(first, numerator)
    finally:
        with contextlib.suppress(Exception):
            nxt.result().fill(0)


def _packed_write(t: np.ndarray, idx: np.ndarray, v: np.ndarray) -> None:
    """Write the i.i.d. 0/1 draws ``v`` (``uint8``, one per entry of ``idx``) into the packed table.

    With the C kernel (:data:`_native`): one pass in item order, bit ``i % 8`` of byte ``i // 8``
    set to the entry's draw, a repeated cell keeping the draw of its last entry (by position). The
    kernel copies nothing and leaves ``v`` as it was (the caller wipes it). An index dtype it does
    not take (``TypeError``) goes to the NumPy passes below. The kernel runs without the GIL: one
    thread writes a table at a time, as before (the NumPy passes were never atomic either).
    """
    if _native is not None:
        try:
            _native.write(t, idx, v)
            return
        except TypeError:
            pass
    _packed_write_numpy(t, idx, v)


def _packed_write_numpy(t: np.ndarray, idx: np.ndarray, v: np.ndarray) -> None:
    """The NumPy path of :func:`_packed_write` (the fallback without the C kernel).

    One pass per bit position ``j``: the cells with ``i % 8 == j`` are selected (``flatnonzero``,
    measured 2x cheaper than a stable argsort on the 3-bit key), their bytes gathered, bit ``j``
    replaced by the next unused draws, and the bytes scattered back. The draws are thus consumed in
    pass order (entries of position 0 first), not item order; within a pass a repeated cell keeps
    the draw of its last entry. ``v`` is consumed (shifted in place) and every temporary derived
    from the indices is wiped before returning.
    """
    key = idx.astype(np.uint8)
    key &= np.uint8(7)  # bit position of each cell in its byte
    eq = np.empty(idx.size, dtype=bool)
    used = 0
    try:
        for j in range(8):
            np.equal(key, j, out=eq)
            sel = np.flatnonzero(eq)
            m = sel.size
            if m == 0:
                continue
            b = np.take(idx, sel)
            sel.fill(0)
            b >>= 3
            # One bit position per pass: a duplicate byte here is a duplicate cell. The gather comes
            # before the scatter, and the last write keeps one of the draws (chosen by position).
            w = t[b]
            w &= np.uint8(0xFF ^ (1 << j))
            vj = v[used : used + m]
            used += m
            if j:
                vj <<= np.uint8(j)
            w |= vj
            t[b] = w
            w.fill(0)
            b.fill(0)
    finally:
        key.fill(0)
        eq.fill(False)


def _random_packed(nbytes: int) -> np.ndarray:
    """``nbytes`` CSPRNG bytes; large tables are filled by two threads (getrandom drops the GIL)."""
    if nbytes < (1 << 24):
        return bernoulli_half_packed(nbytes)
    out = np.empty(nbytes, dtype=np.uint8)
    half = nbytes // 2

    def fill(sl: slice) -> None:
        # Read straight into the table (D0: fair bits are uniform bytes): no temporary, no copy.
        step = 1 << 22
        for s in range(sl.start, sl.stop, step):
            fill_secure(out[s : min(sl.stop, s + step)])

    fut = _executor().submit(fill, slice(0, half))
    fill(slice(half, nbytes))
    fut.result()
    return out


class RedrawnBits:
    """The state part of a family whose table is one :class:`BitTable` of D0 bits, each arrival
    redrawing its cell from D1 (the density family and the sketch): one copy of the delegations.

    A family using it sets ``universe`` and ``_table``, takes its probabilities from
    :meth:`_calibrate` (``_numerator``: p = 1 - q under rr, times 2**32; ``_q_numerator``: q times
    2**32), and lists this class before :class:`~panstream.estimators.base.Estimator` among its
    bases.
    """

    universe: Any
    _table: BitTable
    _numerator: int
    _q_numerator: int
    epsilon: float
    p: Fraction
    q: Fraction
    epsilon_state: float

    def _calibrate(self, epsilon: float, calibration: str) -> Calibrated:
        """Take the exact p and q that :func:`~panstream.calibration.calibrate` chooses for
        ``epsilon`` (their numerators, the epsilon asked for and the realized state epsilon)."""
        cal = calibrate(epsilon, calibration)
        self.epsilon = cal.epsilon
        self._numerator = cal.numerator
        self._q_numerator = cal.q_numerator
        self.p = cal.p
        self.q = cal.q
        self.epsilon_state = cal.epsilon_state
        return cal

    @property
    def size(self) -> int:
        """Number of cells (bits) of the table."""
        return int(self.universe.size)

    @property
    def p_numerator(self) -> int:
        """``p * 2**32``: the exact integer threshold of the D1 sampler."""
        return self._numerator

    @property
    def q_numerator(self) -> int:
        """``q * 2**32``: the exact integer threshold of the D0 sampler."""
        return self._q_numerator

    @property
    def layout(self) -> str:
        """The table layout in use: ``"bytes"`` or ``"packed"``."""
        return self._table.layout

    def _apply(self, idx: np.ndarray) -> None:
        """Every named cell gets a fresh draw from D1 (however often it is named)."""
        self._table.redraw(idx, self._numerator)

    def _payload_view(self) -> memoryview:
        return self._table.packed_view()

    def _wipe_payload_view(self, view: memoryview) -> None:
        self._table.wipe_packed_view(view)

    def _fresh_table(self) -> None:
        self._table.wipe()
        self._table = BitTable.random(self.size, self.layout, self._q_numerator)

    def wipe(self) -> None:
        """Overwrite the table's memory with zeros (before it is dropped)."""
        self._table.wipe()

    def bits(self) -> np.ndarray:
        """A ``uint8`` 0/1 copy of the table: exactly what an intruder reading memory would see."""
        return self._table.bits()

    def count_ones(self) -> int:
        """Number of ones in the table (sensitivity 1 with respect to one person)."""
        return self._table.count_ones()
