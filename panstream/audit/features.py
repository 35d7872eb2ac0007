"""How the learned distinguisher reads dumps: each run's dumps become one row of small integers.

:class:`_Codes` reads the ``k``-th dump of a run (snapshot bytes or a NumPy array); :class:`_Layout`
lays every run's dumps out as one feature vector (bits, lengths, array elements, and the change
between consecutive dumps), fixed on the training runs only.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import panstream as ps
from panstream.errors import ConfigurationError
from panstream.state.format import decode, read_frame

#: Bytes of feature matrix materialized at once (training counts, test scoring).
_BLOCK_BYTES = 1 << 25


class _Codes:
    """Turns the ``k``-th dump of every run into a row of small integers, fixed on the training runs.

    Bytes (snapshots) are padded or cut to the longest training dump; arrays are quantized: bools and
    integers in 0..255 stay as they are, anything else is mapped to the index of the largest
    training value (or, past 256 distinct values, training quantile) at or below it.
    """

    def __init__(self, k: int, train: Sequence[Any]) -> None:
        self.k = k
        self.is_bytes = all(isinstance(d, (bytes, bytearray, memoryview)) for d in train)
        self.edges: np.ndarray | None = None
        self.frame: tuple[int, int] | None = None
        self.bits_per_cell = 1
        self.shape: tuple[int, ...] = ()
        if self.is_bytes:
            lengths = np.array([len(d) for d in train])
            self.length = int(lengths.max(initial=0))
            self.length_varies = bool((lengths != lengths[0]).any())
            try:
                first = bytes(train[0])
                f = read_frame(first)
                self.frame = (f.head_size, f.payload_size)
                # A payload bit is a cell of a bit table; counters take several bits per cell.
                cells = int(decode(first).params["cells"])
                self.bits_per_cell = max(1, 8 * f.payload_size // max(1, cells))
            except ps.PanstreamError:
                self.frame = None
            return
        if not all(isinstance(d, np.ndarray) for d in train):
            kinds = sorted({type(d).__name__ for d in train})
            msg = (f"the learned distinguisher reads dumps that are NumPy arrays or bytes; dump {k + 1} "
                   f"is {', '.join(kinds)}: pass encode= (one dump -> array or bytes) or "
                   "distinguishers=")
            raise ConfigurationError(msg)
        self.shape = train[0].shape
        if any(d.shape != self.shape for d in train):
            msg = f"dump {k + 1} has different shapes in different runs: the learned distinguisher needs one"
            raise ConfigurationError(msg)
        x = np.stack(train)
        if x.dtype.kind not in "biuf":
            msg = f"dump {k + 1} has dtype {x.dtype}: the learned distinguisher reads numbers"
            raise ConfigurationError(msg)
        small = x.dtype.kind in "iu" and (x.size == 0 or (x.min() >= 0 and x.max() <= 255))
        if x.dtype.kind == "b" or small:
            return
        edges = np.unique(x)
        if edges.size > 256:
            edges = np.unique(np.quantile(x, np.linspace(0.0, 1.0, 256)))
        self.edges = edges

    def matrix(self, dumps: Sequence[Any]) -> np.ndarray:
        """The dumps as a ``(runs, width)`` ``uint8`` matrix (bytes, or codes of array elements)."""
        n = len(dumps)
        if self.is_bytes:
            raw = [bytes(d) for d in dumps]
            if all(len(d) == self.length for d in raw):
                return np.frombuffer(b"".join(raw), np.uint8).reshape(n, self.length)
            out = np.zeros((n, self.length), np.uint8)
            for i, d in enumerate(raw):
                cut = d[: self.length]
                out[i, : len(cut)] = np.frombuffer(cut, np.uint8)
            return out
        x = np.stack([np.asarray(d) for d in dumps]).reshape(n, -1)
        if self.edges is None:
            return np.clip(x, 0, 255).astype(np.uint8)
        idx = np.searchsorted(self.edges, x, side="right") - 1
        return np.clip(idx, 0, 255).astype(np.uint8)

    def lengths(self, dumps: Sequence[Any]) -> np.ndarray:
        """The byte length of each dump as 32 little-endian bits (``(runs, 32)`` ``uint8``)."""
        lens = np.array([len(d) for d in dumps], dtype="<u4").reshape(-1, 1).view(np.uint8)
        return np.unpackbits(lens, axis=1, bitorder="little")

    def byte_name(self, offset: int, bit: int) -> str:
        if self.frame is not None:
            head, table = self.frame
            if head <= offset < head + table:
                position = (offset - head) * 8 + bit
                if self.bits_per_cell == 1:
                    return f"table cell {position}"
                return (f"table cell {position // self.bits_per_cell} bit "
                        f"{position % self.bits_per_cell}")
            if offset >= head + table:
                return f"checksum byte {offset - head - table} bit {bit}"
            return f"head byte {offset} bit {bit}"
        return f"byte {offset} bit {bit}"

    def element_name(self, i: int) -> str:
        if len(self.shape) == 1:
            return f"cell {i}"
        return "[" + ", ".join(str(int(c)) for c in np.unravel_index(i, self.shape)) + "]"


@dataclass(frozen=True)
class _Part:
    """A contiguous block of features: ``kind`` is ``bits`` (bytes k, unpacked), ``length``
    (length of dump k), ``codes`` (array k), ``xor`` (bytes k vs k+1) or ``ne`` (array k vs k+1)."""

    kind: str
    k: int
    cols: np.ndarray  # byte offsets (bits, xor) or element indices (codes, ne); unused for length
    width: int
    values: int = 2  # feature values 0..values-1 seen in training (codes); 2 for the others


class _Layout:
    """How the dumps of one run become one feature vector; fixed on the training runs only.

    Features, per dump: every bit of the bytes that vary among the training dumps (and the length, if
    it varies), or every element of an array; per pair of consecutive dumps of one kind: the same
    bits XORed, or whether each element changed. A change between two dumps of one epoch is what
    reveals an arrival in between, and no per-dump feature shows it.
    """

    def __init__(self, train: Sequence[Sequence[Any]]) -> None:
        m = len(train[0])
        if m == 0 or any(len(r) != m for r in train):
            msg = "the learned distinguisher needs the same number (>= 1) of dumps in every run"
            raise ConfigurationError(msg)
        self.codes = [_Codes(k, [r[k] for r in train]) for k in range(m)]
        mats = [c.matrix([r[c.k] for r in train]) for c in self.codes]
        parts: list[_Part] = []
        varying: list[np.ndarray] = []
        for c, x in zip(self.codes, mats, strict=True):
            if c.is_bytes:
                cols = np.flatnonzero((x != x[:1]).any(axis=0))
                varying.append(cols)
                parts.append(_Part("bits", c.k, cols, 8 * cols.size))
                if c.length_varies:
                    parts.append(_Part("length", c.k, np.arange(0), 32))
            else:
                varying.append(np.arange(0))
                parts.append(_Part("codes", c.k, np.arange(x.shape[1]), x.shape[1],
                                   max(2, int(x.max(initial=0)) + 1)))
        for k in range(m - 1):
            a, b = self.codes[k], self.codes[k + 1]
            if a.is_bytes and b.is_bytes and a.length == b.length:
                cols = np.union1d(varying[k], varying[k + 1])
                parts.append(_Part("xor", k, cols, 8 * cols.size))
            elif not a.is_bytes and not b.is_bytes and a.shape == b.shape:
                parts.append(_Part("ne", k, np.arange(mats[k].shape[1]), mats[k].shape[1]))
        self.parts = parts
        self.starts = np.cumsum([0] + [p.width for p in parts])
        self.n_features = int(self.starts[-1])
        self.values = max([p.values for p in parts], default=2)

    def block(self, runs: Sequence[Sequence[Any]], columns: np.ndarray | None = None) -> np.ndarray:
        """Features of ``runs`` as a ``(len(runs), n)`` ``uint8`` matrix (``columns`` only, if given)."""
        mats: dict[int, np.ndarray] = {}

        def mat(k: int) -> np.ndarray:
            if k not in mats:
                mats[k] = self.codes[k].matrix([r[k] for r in runs])
            return mats[k]

        out, emitted = [], []
        for p, start in zip(self.parts, self.starts[:-1], strict=True):
            if columns is None:
                want = None
            else:
                inside = np.flatnonzero((columns >= start) & (columns < start + p.width))
                if inside.size == 0:
                    continue
                want = columns[inside] - start
                emitted.append(inside)
            if p.kind in ("bits", "xor"):
                # unpack only the bytes that hold a wanted bit
                need = np.arange(p.cols.size) if want is None else np.unique(want // 8)
                byts = mat(p.k)[:, p.cols[need]]
                if p.kind == "xor":
                    byts = byts ^ mat(p.k + 1)[:, p.cols[need]]
                x = np.unpackbits(byts, axis=1, bitorder="little")
                if want is not None:
                    want = np.searchsorted(need, want // 8) * 8 + want % 8
            elif p.kind == "length":
                x = self.codes[p.k].lengths([r[p.k] for r in runs])
            elif p.kind == "codes":
                x = mat(p.k)
            else:
                x = (mat(p.k) != mat(p.k + 1)).view(np.uint8)
            out.append(x if want is None else x[:, want])
        width = self.n_features if columns is None else columns.size
        full = np.zeros((len(runs), width), np.uint8)
        if out and columns is None:
            full = np.concatenate(out, axis=1)
        elif out:
            full[:, np.concatenate(emitted)] = np.concatenate(out, axis=1)
        return full

    def blocks(self, runs: Sequence[Sequence[Any]], columns: np.ndarray | None = None,
               budget: int = _BLOCK_BYTES) -> Iterator[np.ndarray]:
        """:meth:`block` over ``runs`` in slices of about ``budget`` bytes each."""
        width = self.n_features if columns is None else columns.size
        step = max(1, budget // max(1, width))
        for i in range(0, len(runs), step):
            yield self.block(runs[i : i + step], columns)

    def name(self, j: int) -> str:
        """A readable name of feature ``j``."""
        i = int(np.searchsorted(self.starts, j, side="right")) - 1
        p, off = self.parts[i], j - int(self.starts[i])
        c = self.codes[p.k]
        if p.kind == "bits":
            return f"dump {p.k + 1} {c.byte_name(int(p.cols[off // 8]), off % 8)}"
        if p.kind == "length":
            return f"dump {p.k + 1} length bit {off}"
        if p.kind == "codes":
            return f"dump {p.k + 1} {c.element_name(off)}"
        what = c.byte_name(int(p.cols[off // 8]), off % 8) if p.kind == "xor" else c.element_name(off)
        return f"{what} changed between dumps {p.k + 1} and {p.k + 2}"

    def binary(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The two-valued features that describe one dump, as three arrays: feature index, dump
        ``k`` and position in that dump (bit offset ``8 * byte + bit`` of bytes, least significant bit
        first, or flat element index of an array with values 0 and 1).

        These are what pairs are formed from (:mod:`panstream.audit.joint`). Left out: lengths,
        changes between dumps (already a joint feature of two dumps), and the checksum of a
        snapshot (a hash of everything before it, so pairs of its bits say nothing more).
        """
        feats, dumps, pos = [], [], []
        for p, start in zip(self.parts, self.starts[:-1], strict=True):
            c = self.codes[p.k]
            if p.kind == "bits":
                offsets = (8 * p.cols[:, None] + np.arange(8)).ravel()
                keep = np.ones(offsets.size, bool)
                if c.frame is not None:
                    keep = offsets < 8 * (c.frame[0] + c.frame[1])
                idx = np.flatnonzero(keep)
                feats.append(start + idx)
                pos.append(offsets[idx])
            elif p.kind == "codes" and p.values == 2:
                feats.append(start + np.arange(p.width))
                pos.append(np.arange(p.width))
            else:
                continue
            dumps.append(np.full(feats[-1].size, p.k))
        if not feats:
            empty = np.arange(0)
            return empty, empty, empty
        return np.concatenate(feats), np.concatenate(dumps), np.concatenate(pos)

    def aligned(self, k: int, position: np.ndarray, target: int, cells: int) -> np.ndarray:
        """Which ``position``s of dump ``k`` belong to cell ``target`` of a ``cells``-cell universe
        on the simplest layout: in a snapshot's table, cell ``(bit - table start) // bits per
        cell``; in an array or other bytes, element or bit ``i``; each taken modulo ``cells``, so
        the same cell of every part of a dump (a table and whatever is stored beside it) counts."""
        c = self.codes[k]
        if c.frame is not None:
            head, table = c.frame
            rel = position - 8 * head
            inside = (rel >= 0) & (rel < 8 * table)
            return inside & ((rel // c.bits_per_cell) % cells == target)
        return position % cells == target
