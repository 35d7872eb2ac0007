"""Slices: one table over a universe X cut into R contiguous cell ranges (pure: no Kafka, no I/O).

A consumer group that *routes* arrivals by cell (``panstream kafka``, the default layout) keeps one
table laid out as R **slices**: slice ``r`` holds cells ``[lo_r, hi_r)`` with
``lo_r = ceil(r |X| / R)`` (so cell ``c`` is in slice ``floor(c R / |X|)``), a table of its own
over ``range:(hi_r - lo_r)``. Every arrival of cell ``c`` is applied to exactly one slice, the one
whose range holds ``c``, whichever member, partition or producer it came through; so the slices
laid end to end *are* one table fed the whole stream, with exactly its law: sensitivity 1, state
epsilon x1, for every universe kind and both families.

This module holds the pure parts of that layout:

* :class:`SliceLayout`: the public layout (universe, R), the slice bounds, and the **routed
  encoding** of a batch of cell indices: one radix sort by slice number, one split per slice,
  each part the raw little-endian local offsets ``c - lo_r`` (``uint16`` when every slice has at
  most 2**16 cells, else ``uint32``), multiplicities kept (the counter family needs them);
* :func:`encode_slice` / :func:`slice_of`: a slice's snapshot is an ordinary estimator snapshot of
  its range table plus one public parameter, ``"slice": {"of": <X spec>, "index": r, "count": R}``,
  so a store of slices says by itself which universe they rebuild
  (:func:`panstream.state.merge.merge_slices` lays them end to end).

**Sketch grids are routed by bucket range.** A Sketch-Flip-Merge grid
(:class:`~panstream.estimators.sketch.sfm.SketchGrid`, ``B`` buckets x ``P`` levels) numbers its bits
``level * B + bucket`` (Presto's order). Cut in that order, slice 0 would hold level 0, which half
of all arrivals hit (a level is the hash's number of trailing zeros). So a grid is routed in
**bucket-major order**, ``bucket * P + level`` (:meth:`SliceLayout.routing_order`): the slice
boundaries fall on whole buckets (:attr:`SliceLayout.unit` = P cells), slice ``r`` holds buckets
``[ceil(r B / R), ceil((r + 1) B / R))`` at every level, and the buckets, being the hash's top bits,
spread the arrivals evenly over the slices. Each slice is a bit table with the sketch's own
randomized response (calibration ``rr``, the same exact q: :func:`slice_family`); the merge
transposes the slices laid end to end back into Presto's order (:meth:`SliceLayout.grid_order`).

>>> from panstream.universe import Universe
>>> lay = SliceLayout(Universe.parse("range:10"), 3)
>>> [lay.bounds(r) for r in range(3)]
[(0, 4), (4, 7), (7, 10)]
>>> parts = lay.route(np.array([9, 0, 4, 9, 2], dtype=np.intp))
>>> [(r, lay.decode(r, data).tolist()) for r, data in parts]
[(0, [0, 2]), (1, [0]), (2, [2, 2])]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from panstream.errors import ConfigurationError, StateError
from panstream.estimators.base import Estimator
from panstream.estimators.sketch.sfm import SketchGrid
from panstream.state import format as fmt
from panstream.state import persist
from panstream.universe import Universe

#: Default number of slices (internal partitions) of a routed group.
DEFAULT_SLICES = 16

#: Largest slice count accepted (a Kafka topic of more partitions is unusual and every member
#: fetches all of them).
MAX_SLICES = 4096

#: :meth:`SliceLayout.route` with ``distinct=True`` marks a batch's cells in a mask of the whole
#: universe (one byte a cell, wiped after) when the universe has at most this many cells per
#: arrival of the batch; a larger universe (or a smaller batch) keeps the sort and the repeats.
#: Measured (2**16 cells, 16 slices; split, copy, decode and apply per line): 28 -> 4.5 ns at
#: 600,000 arrivals a poll, 37 -> 21 ns at 60,000; at 6,000 (11 cells an arrival) the mask cost
#: 8 % more than it saved.
DISTINCT_MASK_RATIO = 8

#: Above this many cells a universe's slices use packed tables (the bit table's and the counter
#: table's own ``auto`` threshold, applied to the whole universe rather than to one slice, so that
#: 16 slices of 2**32 cells take 32 MiB each, not 256 MiB in one byte per cell).
PACKED_ABOVE = 1 << 28


@dataclass(frozen=True)
class SliceLayout:
    """R contiguous slices of a universe (public parameters only).

    Args:
        universe: the whole universe X.
        count: R, the number of slices (1 <= R <= min(|X|, :data:`MAX_SLICES`)).

    Raises:
        ConfigurationError: R out of range.
    """

    universe: Universe
    count: int

    def __post_init__(self) -> None:
        top = min(self.universe.size // self.unit, MAX_SLICES)
        if isinstance(self.count, bool) or not 1 <= int(self.count) <= top:
            what = (f"{self.universe.size // self.unit:,} buckets: a slice holds whole buckets"
                    if self.unit > 1 else f"{self.universe.size:,} cells")
            msg = f"--slices {self.count}: need 1 to {top} slices for {self.universe.spec} ({what})"
            raise ConfigurationError(msg)

    @property
    def unit(self) -> int:
        """Cells a slice boundary never splits: a sketch grid's ``P`` levels of one bucket, else 1."""
        return self.unit_of(self.universe)

    @staticmethod
    def unit_of(universe: Universe) -> int:
        """:attr:`unit` of a layout of ``universe``."""
        return universe.levels if isinstance(universe, SketchGrid) else 1

    @property
    def is_sketch(self) -> bool:
        """Whether the universe is a Sketch-Flip-Merge grid (routed in bucket-major order)."""
        return isinstance(self.universe, SketchGrid)

    # ------------------------------------------------------------------ geometry
    def bounds(self, r: int) -> tuple[int, int]:
        """``(lo, hi)``: slice ``r`` holds cells ``lo <= c < hi`` (in routing order: bucket-major
        for a sketch grid, whose boundaries are multiples of :attr:`unit`)."""
        if not 0 <= r < self.count:
            msg = f"slice {r} out of range 0..{self.count - 1}"
            raise StateError(msg)
        u, n = self.unit, self.universe.size // self.unit
        return u * -(-r * n // self.count), u * -(-(r + 1) * n // self.count)

    def size(self, r: int) -> int:
        """Cells of slice ``r``."""
        lo, hi = self.bounds(r)
        return hi - lo

    def edges(self) -> np.ndarray:
        """The R + 1 slice boundaries ``lo_0 = 0 < lo_1 < ... < lo_R = |X|`` (int64)."""
        u, n = self.unit, self.universe.size // self.unit
        return np.array([u * -(-r * n // self.count) for r in range(self.count + 1)],
                        dtype=np.int64)

    def slice_universe(self, r: int) -> Universe:
        """The universe of slice ``r``'s own table: ``range:(hi - lo)``."""
        return Universe.range(self.size(r))

    @property
    def width(self) -> int:
        """Bytes per routed cell index: 2 when every slice has at most 2**16 cells, else 4."""
        widest = self.unit * -(-(self.universe.size // self.unit) // self.count)
        return 2 if widest <= 1 << 16 else 4

    @property
    def table_layout(self) -> str:
        """Layout of the slice tables: ``packed`` for universes over :data:`PACKED_ABOVE` cells."""
        return "packed" if self.universe.size > PACKED_ABOVE else "auto"

    def table_bytes(self, r: int, kind: str = "density", modulus: int = 16) -> int:
        """Memory of slice ``r``'s table (what a member holds for it)."""
        n = self.size(r)
        packed = self.table_layout == "packed"
        if kind == "frequency":
            return (n + 1) // 2 if packed and modulus <= 16 else n
        return (n + 7) // 8 if packed else n

    # ------------------------------------------------------------------ routed encoding
    def slice_of_cells(self, idx: np.ndarray) -> np.ndarray:
        """The slice of every cell (in routing order): ``floor(c R / |X|)``, or for a sketch grid
        ``floor((c // P) R / B)`` (exact in 64 bits: ``c R < 2**44``)."""
        c = np.asarray(idx, dtype=np.int64)
        if self.unit > 1:
            whole = c
            c = c // self.unit
            if whole is not idx:
                whole.fill(0)  # a converted copy of the caller's cells
        out = c * self.count
        out //= self.universe.size // self.unit
        if c is not idx:
            c.fill(0)
        return out

    def routing_order(self, idx: np.ndarray) -> np.ndarray:
        """Cells in routing order: the identity, except that a sketch grid's cells
        ``level * B + bucket`` become ``bucket * P + level`` (a new ``int64`` array; ``idx`` is
        left alone)."""
        c = np.asarray(idx, dtype=np.int64)
        if not self.is_sketch:
            return c.copy() if c is idx else c
        grid = self.universe
        assert isinstance(grid, SketchGrid)
        level = c // grid.buckets
        out = c % grid.buckets
        out *= grid.levels
        out += level
        level.fill(0)
        if c is not idx:
            c.fill(0)  # a converted copy of the caller's cells
        return out

    def grid_order(self, bits: np.ndarray) -> np.ndarray:
        """One value per cell in routing order (``bits``, length |X|) back in the universe's order:
        for a sketch grid the transpose of bucket-major to Presto's ``level * B + bucket``
        (a new array); otherwise ``bits`` itself."""
        if not self.is_sketch:
            return bits
        grid = self.universe
        assert isinstance(grid, SketchGrid)
        return np.ascontiguousarray(bits.reshape(grid.buckets, grid.levels).T).reshape(-1)

    def route(self, idx: np.ndarray, distinct: bool = False) -> list[tuple[int, bytearray]]:
        """Split a batch of cell indices by slice: ``[(r, encoded local offsets), ...]`` for the
        slices that received any, multiplicities kept. One stable radix sort by slice number (no
        sort of the cells themselves: the order within a part is the batch's). ``idx`` and every
        temporary holding cells are overwritten with zeros.

        ``distinct=True`` (a family whose arrival redraws its cell, however often it is named: the
        bit table, a sketch's slices; never the counters) may send each cell of the batch once
        (:meth:`_route_distinct`, for universes small beside the batch): the same table law, fewer
        bytes to route, fetch and apply. The encoding is the same, so any member decodes it.

        >>> lay = SliceLayout(Universe.parse("range:10"), 3)
        >>> parts = lay.route(np.array([9, 0, 4, 9, 2, 0], dtype=np.intp), distinct=True)
        >>> [(r, lay.decode(r, data).tolist()) for r, data in parts]
        [(0, [0, 2]), (1, [0]), (2, [2])]
        """
        arr = np.asarray(idx).reshape(-1)
        if not arr.size:
            return []
        lo_c, hi_c = int(arr.min()), int(arr.max())
        if lo_c < 0 or hi_c >= self.universe.size:
            msg = f"cell index out of range 0..{self.universe.size - 1} (saw {lo_c}..{hi_c})"
            raise StateError(msg)
        if distinct and self.universe.size <= DISTINCT_MASK_RATIO * arr.size:
            return self._route_distinct(arr, idx)
        if self.is_sketch:  # bucket-major, so that slices are whole buckets (module docstring)
            arr = self.routing_order(arr)
        r = self.slice_of_cells(arr)
        keys = r.astype(np.uint8 if self.count <= 256 else np.uint16)
        order = np.argsort(keys, kind="stable")  # a radix sort for small integer keys
        cuts = np.concatenate([[0], np.cumsum(np.bincount(keys, minlength=self.count))])
        srt = arr[order]
        for a in (r, keys, order):
            a.fill(0)
        if arr is not idx and self.is_sketch:
            arr.fill(0)
        if isinstance(idx, np.ndarray) and idx.flags.writeable:
            idx.fill(0)
        return self._parts(srt, cuts)

    def _parts(self, srt: np.ndarray, cuts: np.ndarray) -> list[tuple[int, bytearray]]:
        """Cells grouped by slice (``srt[cuts[r]:cuts[r + 1]]`` is slice ``r``'s) as the routed
        parts: local offsets in the layout's width. ``srt`` is overwritten with zeros."""
        edges = self.edges()
        dtype = np.dtype("<u2") if self.width == 2 else np.dtype("<u4")
        out: list[tuple[int, bytearray]] = []
        try:
            for s in np.flatnonzero(np.diff(cuts)):
                part = srt[cuts[s]:cuts[s + 1]]
                part -= edges[s]
                local = part.astype(dtype)
                out.append((int(s), bytearray(local.data)))
                local.fill(0)
        finally:
            srt.fill(0)
        return out

    def _route_distinct(self, arr: np.ndarray, idx: np.ndarray) -> list[tuple[int, bytearray]]:
        """:meth:`route` of the batch's distinct cells: one scatter into a mask of the universe
        (in routing order), whose set positions come out sorted, so every slice's part is one
        contiguous run cut at the slice edges (no sort at all). The mask, ``idx`` and every
        temporary holding cells are overwritten with zeros."""
        cells = self.routing_order(arr) if self.is_sketch else arr
        mask = np.zeros(self.universe.size, dtype=np.bool_)
        try:
            mask[cells] = True
            if cells is not idx:
                cells.fill(0)
            if arr is not idx and arr is not cells:
                arr.fill(0)
            if isinstance(idx, np.ndarray) and idx.flags.writeable:
                idx.fill(0)
            got = np.flatnonzero(mask)
        finally:
            mask.fill(False)
        return self._parts(got, np.searchsorted(got, self.edges()))

    def decode(self, r: int, data: bytes | bytearray | memoryview) -> np.ndarray:
        """The local offsets (``intp``, 0 <= offset < size of slice ``r``) of one routed part.

        Raises:
            StateError: the bytes are not a routed part of slice ``r`` of this layout (wrong length,
                an offset beyond the slice): a foreign record in the internal topic, or a group
                restarted with another universe or slice count on the same topic.
        """
        raw = memoryview(data).cast("B")
        if len(raw) % self.width:
            msg = (f"a routed record of slice {r} has {len(raw)} bytes, not a multiple of "
                   f"{self.width}: the internal topic holds records of another layout")
            raise StateError(msg)
        dtype = np.dtype("<u2") if self.width == 2 else np.dtype("<u4")
        local = np.frombuffer(raw, dtype=dtype).astype(np.intp)
        if local.size and int(local.max()) >= self.size(r):
            local.fill(0)
            msg = (f"a routed record of slice {r} names a cell beyond its {self.size(r):,} cells: "
                   "the internal topic was written with another universe or --slices")
            raise StateError(msg)
        return local

    # ------------------------------------------------------------------ snapshots
    def slice_param(self, r: int) -> dict[str, Any]:
        """The ``slice`` snapshot parameter of slice ``r``."""
        self.bounds(r)
        return {"of": self.universe.spec, "index": r, "count": self.count}

    def describe(self, kind: str = "density", modulus: int = 16) -> str:
        """One line: what each slice holds (cells and memory).

        >>> SliceLayout(Universe.parse("ipv4:0.0.0.0/0"), 16).describe()
        '16 slices of ipv4:0.0.0.0/0 (4,294,967,296 cells): 268,435,456 cells = 32.0 MiB each'
        """
        big = max(range(self.count), key=self.size)
        whole = (f" = {self.size(big) // self.unit:,} buckets x {self.unit} levels"
                 if self.is_sketch else "")
        return (f"{self.count} slices of {self.universe.spec} ({self.universe.size:,} cells): "
                f"{self.size(big):,} cells{whole} = "
                f"{mib(self.table_bytes(big, kind, modulus))} each")


def mib(n: float) -> str:
    """A memory size for people: ``"32.0 MiB"``, ``"512 KiB"``.

    >>> mib(2**29), mib(8192.0)
    ('512.0 MiB', '8.0 KiB')
    """
    return f"{n / 2**20:,.1f} MiB" if n >= 2**20 else f"{n / 2**10:,.1f} KiB"


#: The family and calibration of a sketch grid's slices: bit tables with the sketch's randomized
#: response (D0 = Bernoulli(q), D1 = Bernoulli(1 - q), the same exact dyadic q).
SKETCH_SLICE = ("density", "rr")


def whole_universe(spec: str) -> Universe:
    """The universe a ``slice`` parameter names: :meth:`Universe.parse`, or a sketch grid
    (``sketch:4096x24:ip``).

    Raises:
        UniverseError: not a universe spec.
    """
    if spec.startswith("sketch:"):
        return SketchGrid.parse_spec(spec)
    return Universe.parse(spec)


def slice_family(kind: str, calibration: str) -> tuple[str, str]:
    """The estimator family and calibration of one slice of a group of family ``kind``.

    A density or frequency slice is a table of its family; a sketch's slice (whole buckets of the
    grid) is a bit table with randomized response (:data:`SKETCH_SLICE`): the calibration ``rr``
    that :class:`~panstream.estimators.sketch.estimator.SketchEstimator` uses, so each of its bits starts as
    D0 = Bernoulli(q) and is redrawn from D1 = Bernoulli(1 - q) with exactly the sketch's q.

    >>> slice_family("sketch", "tight"), slice_family("density", "tight")
    (('density', 'rr'), ('density', 'tight'))
    """
    return SKETCH_SLICE if kind == "sketch" else (kind, calibration)


def encode_slice(est: Estimator, layout: SliceLayout, r: int) -> bytearray:
    """The snapshot of slice ``r``'s table: the estimator's own (no ledger: a slice has no budget)
    plus the public ``slice`` parameter. A ``bytearray`` the caller wipes once written."""
    if est.size != layout.size(r):
        msg = f"slice {r} has {layout.size(r)} cells, its table {est.size}"
        raise StateError(msg)
    return persist.snapshot_buffer(est, as_shard=True, extra={"slice": layout.slice_param(r)})


def head_params(data: bytes | bytearray | memoryview) -> dict[str, Any]:
    """The parameters of snapshot bytes, read from the head only (the checksum is checked when the
    table is restored).

    Raises:
        StateError: not a snapshot.
    """
    mv = memoryview(data).cast("B")
    frame = fmt.read_frame(mv[:fmt.PREFIX_SIZE])
    if len(mv) < frame.head_size:
        msg = "snapshot truncated before the end of its parameters"
        raise fmt.CorruptSnapshotError(msg)
    params, _ = fmt.parse_head(frame, mv[:frame.head_size])
    return params


def slice_of(params: Mapping[str, Any]) -> tuple[SliceLayout, int] | None:
    """The layout and index a snapshot's parameters name, or ``None`` for a whole table (or an
    old per-partition shard).

    Raises:
        StateError: a ``slice`` parameter that makes no sense.
    """
    raw = params.get("slice")
    if raw is None:
        return None
    try:
        lay = SliceLayout(whole_universe(str(raw["of"])), int(raw["count"]))
        r = int(raw["index"])
        if lay.slice_universe(r).spec != params["universe"]:
            raise ValueError
        if lay.is_sketch and (params.get("kind"), params.get("calibration")) != SKETCH_SLICE:
            raise ValueError
    except (KeyError, TypeError, ValueError, ConfigurationError, StateError):
        msg = f"snapshot's slice parameter {raw!r} does not describe its table"
        raise fmt.CorruptSnapshotError(msg) from None
    return lay, r
