"""The Sketch-Flip-Merge family under audit: a person is an *item*, and its hash names one grid bit.

A sketch's cells are not the universe's items: any item hashes (Presto's Murmur3) to the bit
``level * buckets + bucket`` of the grid. So that the standard worlds
(:func:`~panstream.audit.scenarios.neighbouring_worlds`, over indices ``0..cells-1``) speak about
items, :class:`SketchItems` fixes, for each grid bit ``i``, one item whose hash lands on it (the
smallest non-negative ``bigint`` ID, or IPv4 address for an ``ip`` grid): world index ``i`` *is*
that item. The target (index ``cells // 2``) is then the only item of its bit, the other traffic
hits every other bit, and the neighbouring streams differ exactly by the target's arrivals. The
target's bit is found by hashing the target item (:meth:`SketchItems.target_bits`), which is the
audit's :data:`~panstream.audit.joint.TargetBits` for the family: a sketch has no field per item,
only the bit its hash picks.

Finding an item for every bit takes about ``buckets * 2**(levels - 1) * ln(buckets)`` hashes (the
top level is hit with probability ``2**-(levels - 1)``), so the audit runs on a small grid
(:data:`AUDIT_GRID`, 64 x 8); the guarantee is per bit, so the grid's size does not change it.

>>> from panstream.estimators.sketch.sfm import SketchGrid
>>> items = SketchItems.find(SketchGrid(16, 4, "id"))
>>> bool((items.grid.indices(items.values.copy()).indices == range(64)).all())
True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from panstream.audit.classic import snapshot_distinguishers
from panstream.audit.scenarios import Distinguisher, Runner
from panstream.errors import ConfigurationError
from panstream.estimators.sketch import sfm
from panstream.estimators.sketch.estimator import SketchEstimator
from panstream.estimators.sketch.sfm import SketchGrid
from panstream.release.ledger import PrivacyLedger
from panstream.state.format import read_frame

#: The grid ``panstream audit --estimator sketch`` uses by default: 512 bits over 8 levels, whose
#: items are found in 0.02 s; a run costs about 1.5 times a 64-cell table's (hashing, and batches
#: 8 times larger): bench/bench_sketch_audit.py.
AUDIT_GRID = "sketch:64x8:id"
#: Candidate items hashed at most while looking for one item per grid bit: IDs ``0..`` for an
#: ``id`` grid (vectorized), IPv4 addresses ``0..`` for an ``ip`` grid (written out one by one,
#: about 7 s for the limit).
MAX_ITEM_SEARCH = {"id": 1 << 23, "ip": 1 << 20}
_CHUNK = 1 << 16

#: Builds the sketch one run of the audit updates (the real one by default; tests pass broken ones).
SketchFactory = Callable[[SketchGrid, float], SketchEstimator]


@dataclass(frozen=True)
class SketchItems:
    """One item per grid bit: ``values[i]`` is an item (``int64``) whose hash lands on bit ``i``.

    Attributes:
        grid: the sketch grid.
        values: the items, as integers (``bigint`` IDs, or IPv4 addresses for an ``ip`` grid).
        hashes: their Presto hashes (``uint64``), for the ``ip`` fast path.
    """

    grid: SketchGrid
    values: np.ndarray
    hashes: np.ndarray

    @classmethod
    def find(cls, grid: SketchGrid, limit: int | None = None) -> SketchItems:
        """The smallest item of every grid bit, hashing candidates ``0, 1, 2, ...``.

        Args:
            grid: the sketch grid.
            limit: candidates hashed at most (default :data:`MAX_ITEM_SEARCH` of the item kind).

        Raises:
            ConfigurationError: some bit has no item among the first ``limit`` candidates, or is
                not expected to (the grid has too many levels or buckets for an audit).
        """
        if grid.items not in MAX_ITEM_SEARCH:
            msg = (f"the audit runs on one sketch grid (items ip or id), not on {grid.spec}: audit "
                   f"{AUDIT_GRID} (a by-country state is one such grid per country)")
            raise ConfigurationError(msg)
        limit = MAX_ITEM_SEARCH[grid.items] if limit is None else limit
        # A top-level bit is hit by a candidate with probability 2**-(levels - 1) / buckets; all
        # ``buckets`` of them take about that inverse times the harmonic number ln(B) + 0.58.
        expected = grid.buckets * 2 ** (grid.levels - 1) * (np.log(grid.buckets) + 0.58)
        if expected > limit:
            raise _too_large(grid, f"its top level needs about {expected:,.0f} candidate items, "
                                   f"more than the {limit:,} the audit hashes")
        values = np.full(grid.size, -1, dtype=np.int64)
        hashes = np.zeros(grid.size, dtype=np.uint64)
        # Chunks grow from a few times the expected need to _CHUNK: a small ``ip`` grid (each
        # address written out as text to be hashed) is done in a few hundred candidates, not 65,536.
        lo, step = 0, int(min(_CHUNK, max(1024, 2 * expected)))
        while lo < limit:
            cand = np.arange(lo, min(lo + step, limit), dtype=np.int64)
            lo, step = lo + cand.size, min(2 * step, _CHUNK)
            h = _hashes(cand, grid)
            cells = grid.cells_of_hashes(h)
            # the first candidate of each bit in this chunk, for bits still without an item
            first_cells, at = np.unique(cells, return_index=True)
            new = values[first_cells] < 0
            values[first_cells[new]] = cand[at[new]]
            hashes[first_cells[new]] = h[at[new]]
            if (values >= 0).all():
                return cls(grid, values, hashes)
        missing = int(np.count_nonzero(values < 0))
        raise _too_large(grid, f"{missing} of its {grid.size} bits are hit by none of the first "
                               f"{limit:,} candidate items")

    def cell_of_target(self, target: int) -> int:
        """The grid bit the hash of item ``values[target]`` picks (``target`` by construction,
        computed here from the item so that a wrong item table cannot go unnoticed)."""
        h = _hashes(self.values[target : target + 1], self.grid)
        return int(self.grid.cells_of_hashes(h)[0])

    def target_bits(self, dump: Any, target: int) -> list[int]:
        """The family's :data:`~panstream.audit.joint.TargetBits`: the target item's hashed bit in
        a sketch snapshot, as the offset ``8 * byte + bit`` (the payload is the grid, packed least
        significant bit first, bit ``level * buckets + bucket``: ``docs/snapshot-format.md``)."""
        return [8 * read_frame(dump).head_size + self.cell_of_target(target)]


def _too_large(grid: SketchGrid, why: str) -> ConfigurationError:
    msg = (f"the audit gives every bit of the grid an item of its own, but {grid.spec} is too "
           f"large for that ({why}): audit a smaller grid such as {AUDIT_GRID} (the guarantee is "
           "per bit, so the grid's size does not change it)")
    return ConfigurationError(msg)


def _hashes(values: np.ndarray, grid: SketchGrid) -> np.ndarray:
    """The grid's hashes of candidate items (its own hash: murmur3 or Presto SQL's XXH64)."""
    if grid.items == "id" and grid.hashing == "murmur3":
        return sfm.hash64_ints(values)
    # IPv4 addresses 0..2**32-1, or IDs as the grid's SQL type takes them
    h, malformed, _ = sfm.hash_items(values.tolist(), grid.items, grid.hashing)
    if malformed:  # pragma: no cover - every integer below 2**32 is an IPv4 address
        raise ConfigurationError("candidate items outside the item kind")
    return h


def real_sketch(grid: SketchGrid, epsilon: float) -> SketchEstimator:
    """The sketch as panstream builds it (the ledger's random epoch label fixed to ``"audit"``,
    as :func:`~panstream.audit.classic.estimator_runner` does, so "non-table bytes differ"
    compares exactly)."""
    return SketchEstimator(epsilon, grid.buckets, grid.levels, grid.items,
                           hashing=grid.hashing, _ledger=PrivacyLedger(epoch="audit"))


def sketch_runner(items: SketchItems, epsilon: float = 1.0, *, rotate_after: Sequence[int] = (),
                  make: SketchFactory = real_sketch) -> Runner:
    """The sketch as a :data:`~panstream.audit.scenarios.Runner`: a fresh sketch per run, world
    index ``i`` arrives as item ``items.values[i]`` (hashed by the real ``update`` path; ``ip`` grids
    take the precomputed hashes through ``update_hashes``), dumps are ``snapshot()`` bytes.

    Args:
        items: the item of each grid bit.
        epsilon: the sketch's epsilon.
        rotate_after: batch indices after which the epoch is rotated (after that batch's dump).
        make: builds the sketch of one run (default :func:`real_sketch`).
    """
    grid = items.grid

    def run(batches: Sequence[np.ndarray], dumps: Sequence[int]) -> list[Any]:
        est = make(grid, epsilon)
        out: list[Any] = []
        for i, batch in enumerate(batches):
            if grid.items == "id":
                est.update(items.values[batch])  # a copy: update() wipes what it is handed
            else:
                est.update_hashes(items.hashes[batch])
            if i in dumps:
                out.append(est.snapshot())
            if i in rotate_after:
                est.rotate()
                est.ledger.epoch = "audit"
        return out

    return run


def sketch_distinguishers(items: SketchItems, target: int, dumps: int,
                          reference: Sequence[bytes]) -> dict[str, Distinguisher]:
    """The intruder's fixed tests on sketch snapshots: the target item's hashed bit is 1 in dump k
    (the optimal test against one dump: D0 against D1), that bit changed between dumps k and
    k+1, and any byte outside the grid differs from world A (``reference``)."""
    return snapshot_distinguishers(items.cell_of_target(target), dumps, reference,
                                   what="target's hashed bit")
