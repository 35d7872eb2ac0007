"""The randomized bit table: the only state panstream keeps about a stream.

Two layouts hold the same logical table of ``size`` bits:

* ``"bytes"``: one ``uint8`` (0 or 1) per cell. An update is a bare NumPy scatter ``t[idx] = draws``,
  the fastest layout, used automatically up to :data:`AUTO_BYTES_MAX_CELLS` cells.
* ``"packed"``: eight cells per byte (cell ``i`` is bit ``i % 8``, least significant first, of byte
  ``i // 8``), so 2**32 cells take 512 MiB. Used above that size.

Semantics of :meth:`BitTable.redraw`: every cell named in the batch ends with exactly one fresh draw
from Bernoulli(p), however often it is named. In the byte layout duplicates are harmless because the
scatter keeps one of the independent draws written to the cell, chosen by position, never by value.
The packed layout writes the eight bit positions of a byte in eight separate passes, so two different
cells of one byte are never read-modified-written at once.

Both layouts serialize to the same packed little-endian bit order (:meth:`BitTable.to_packed`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Literal

import numpy as np

from panstream.randomness import bernoulli, bernoulli_half_packed

Layout = Literal["bytes", "packed"]

#: Tables up to this many cells use one byte per cell when the layout is "auto".
AUTO_BYTES_MAX_CELLS = 1 << 28

#: Batches at least this large overlap drawing randomness (in a helper thread) with writing.
_PIPELINE_MIN = 1 << 17
_CHUNK = 1 << 18

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
    raise ValueError(msg)


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
    def random(cls, size: int, layout: str = "auto") -> BitTable:
        """A fresh table whose every bit is an independent fair coin (D0) from the OS CSPRNG."""
        lay = choose_layout(size, layout)
        nbytes = (size + 7) // 8
        packed = _random_packed(nbytes)
        return cls._from_packed_array(size, packed, lay)

    @classmethod
    def from_packed(cls, size: int, data: bytes | bytearray | memoryview, layout: str = "auto"
                    ) -> BitTable:
        """Rebuild a table from :meth:`to_packed` output. Padding bits past ``size`` must be zero."""
        nbytes = (size + 7) // 8
        if len(data) != nbytes:
            msg = f"packed table of {size} cells needs {nbytes} bytes, got {len(data)}"
            raise ValueError(msg)
        packed = np.frombuffer(bytearray(data), dtype=np.uint8)
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

        ``idx`` must be an ``intp`` array of valid cell indices (the caller validates). Random draws
        are produced in a helper thread one chunk ahead of the writes, so drawing and writing overlap
        on two cores; the draws of each chunk are overwritten once written.
        """
        n = idx.size
        if n == 0:
            return
        write = self._write_bytes if self.layout == "bytes" else self._write_packed
        if n < _PIPELINE_MIN:
            v = bernoulli(n, numerator)
            write(idx, v)
            v.fill(False)
            return
        self._pipelined(idx, numerator, write)

    def _pipelined(self, idx: np.ndarray, numerator: int,
                   write: Callable[[np.ndarray, np.ndarray], None]) -> None:
        pool = _executor()
        slices = list(_chunks(idx.size))
        nxt: Future[np.ndarray] = pool.submit(bernoulli, slices[0].stop - slices[0].start, numerator)
        for i, sl in enumerate(slices):
            v = nxt.result()
            if i + 1 < len(slices):
                s2 = slices[i + 1]
                nxt = pool.submit(bernoulli, s2.stop - s2.start, numerator)
            write(idx[sl], v)
            v.fill(False)

    def _write_bytes(self, idx: np.ndarray, v: np.ndarray) -> None:
        self._t[idx] = v.view(np.uint8)

    def _write_packed(self, idx: np.ndarray, v: np.ndarray) -> None:
        t = self._t
        pos = (idx & 7).astype(np.uint8)
        order = np.argsort(pos, kind="stable")
        bounds = np.searchsorted(pos[order], np.arange(9, dtype=np.uint8))
        byte = (idx >> 3)[order]
        val = v.view(np.uint8)[order]
        for j in range(8):
            lo, hi = int(bounds[j]), int(bounds[j + 1])
            if lo == hi:
                continue
            b = byte[lo:hi]
            # All cells of this pass share bit j, so duplicate bytes here are duplicate cells: the
            # gather happens before the scatter and the last write keeps one draw.
            t[b] = (t[b] & np.uint8(0xFF ^ (1 << j))) | (val[lo:hi] << np.uint8(j))
        for a in (pos, order, byte, val):
            a.fill(0)

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

    def nbytes(self) -> int:
        """Memory held by the table."""
        return int(self._t.nbytes)

    def wipe(self) -> None:
        """Overwrite the table's memory with zeros (before dropping it on an epoch rotation)."""
        self._t.fill(0)


def _random_packed(nbytes: int) -> np.ndarray:
    """``nbytes`` CSPRNG bytes; large tables are filled by two threads (getrandom drops the GIL)."""
    if nbytes < (1 << 24):
        return bernoulli_half_packed(nbytes)
    out = np.empty(nbytes, dtype=np.uint8)
    half = nbytes // 2

    def fill(sl: slice) -> None:
        step = 1 << 24
        for s in range(sl.start, sl.stop, step):
            e = min(sl.stop, s + step)
            out[s:e] = bernoulli_half_packed(e - s)

    fut = _executor().submit(fill, slice(0, half))
    fill(slice(half, nbytes))
    fut.result()
    return out
