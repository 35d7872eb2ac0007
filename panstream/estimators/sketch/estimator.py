"""The pan-private Sketch-Flip-Merge estimator: distinct counts of any items in kilobytes.

State: a grid of ``B`` buckets x ``P`` levels of bits (Presto's default 4096 x 24: 98,304 bits,
12 KiB), nothing else. An item's Presto hash (:mod:`panstream.estimators.sketch.sfm`) names one bit,
``level * B + bucket``. Every bit starts as a draw of D0 = Bernoulli(q) and every arrival redraws
its bit from D1 = Bernoulli(1 - q), with randomized response's exact dyadic
``q = 1/(1 + e^eps)`` rounded up (:func:`panstream.calibration.calibrate`, ``"rr"``).

**The state's law is the privatized sketch's.** Presto builds the sketch in the clear (bit = 1 iff
some item hit it) and then flips every bit independently with probability ``r = 1/(1 + e^eps)``:
a hit bit is 1 with probability ``1 - r``, a bit never hit is 1 with probability ``r``, bits
independent. Here a bit never hit still holds its D0 draw (1 with probability q) and a hit bit
holds its last D1 draw (1 with probability 1 - q), independent of everything before it, and the bits
are independent of one another: with ``r = q`` the two laws are equal, at every moment of the stream.
So a leaked state is exactly Presto's eps-DP sketch of the items so far (one person moves one bit
between D0 and D1: ``epsilon_state = ln((1 - q)/q) <= eps``), it has 12 KiB whatever the universe,
and it merges and counts like one (:meth:`SketchEstimator.presto`, :func:`merge`). The difference
from Presto is that the clear sketch never exists: it is never in memory to be leaked.

The estimate here is noiseless, for diagnostics and tests. Publish through
:meth:`SketchEstimator.release` (noise on the per-level counts, charged to the ledger), or hand
the state itself to a warehouse at the end of an epoch (:meth:`SketchEstimator.end_epoch_export`).

>>> import panstream as ps
>>> est = ps.SketchEstimator(epsilon=2.0, items="id")
>>> _ = est.update(range(20_000))
>>> e = est.estimate()
>>> abs(e.n - 20_000) < 6 * e.stderr
True
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from panstream.calibration import calibrate
from panstream.errors import (
    ConfigurationError,
    CorruptSnapshotError,
    SnapshotMismatchError,
    StateError,
)
from panstream.estimators.base import Estimator, register_family, variant
from panstream.estimators.bittable import BitTable, RedrawnBits, choose_layout, packed_size
from panstream.estimators.sketch import release as sketch_release
from panstream.estimators.sketch import sfm
from panstream.estimators.sketch.sfm import DEFAULT_BUCKETS, DEFAULT_LEVELS, Fit, PrestoSketch, SketchGrid
from panstream.randomness import P_BITS, bernoulli
from panstream.release.ledger import DEFAULT_BUDGET, PrivacyLedger

__all__ = ["SketchEstimator", "merge"]

#: The default hash's name in snapshots (Presto's Java ``add``), so that a change cannot be mixed
#: up with it; the Presto SQL hashes store their own names (:mod:`panstream.estimators.sketch.hashing`).
HASH = "murmur3_x64_128.hash64"


@register_family
class SketchEstimator(RedrawnBits, Estimator):
    """A pan-private Sketch-Flip-Merge sketch of the distinct items of a stream.

    Args:
        epsilon: the state epsilon asked for (randomized response; the realized one is
            :attr:`epsilon_state`).
        buckets: ``B``, a power of two (Presto's default 4096).
        levels: ``P`` (Presto's ``precision``, default 24): counts up to about ``B * 2**P``.
        items: ``"ip"`` (IPv4 and IPv6 addresses, written one canonical way first; anything else
            is malformed) or ``"id"`` (any identifier: ``int`` as a Presto ``bigint``, text as
            UTF-8, ``bytes`` as they are).
        budget: total output epsilon that releases may spend.
        layout: the bit table's layout (``"auto"``, ``"bytes"``, ``"packed"``).
        hashing: how items are hashed (:mod:`panstream.estimators.sketch.hashing`): ``"murmur3"`` (Presto's
            Java ``SfmSketch.add``, the default), or ``"xxhash64-varchar"`` /
            ``"xxhash64-bigint"`` (``"presto-sql"``), as Presto SQL's ``noisy_approx_set_sfm``.

    Attributes:
        universe: the :class:`~panstream.estimators.sketch.sfm.SketchGrid` (spec ``sketch:4096x24:ip``).
        q: the exact D0 probability and Presto flip probability (a dyadic Fraction); p = 1 - q.
        epsilon_state: ``ln((1 - q)/q)``, at most ``epsilon``.
        ledger: the output budget.

    Raises:
        ConfigurationError: invalid epsilon, grid or item kind.
    """

    kind: ClassVar[str] = "sketch"
    unit_sensitivity: ClassVar[int] = 1  # one person moves one bit: one level's count by 1

    universe: SketchGrid

    def __init__(self, epsilon: float = 1.0, buckets: int = DEFAULT_BUCKETS,
                 levels: int = DEFAULT_LEVELS, items: str = "ip", budget: float = DEFAULT_BUDGET,
                 layout: str = "auto", *, hashing: str | None = None,
                 _table: BitTable | None = None, _ledger: PrivacyLedger | None = None) -> None:
        self.universe = self._grid(buckets, levels, items, hashing)
        self._calibrate(epsilon, "rr")
        self.ledger = _ledger if _ledger is not None else PrivacyLedger(budget)
        if _table is not None and _table.size != self.universe.size:
            msg = "the bit table does not match the sketch grid"
            raise ConfigurationError(msg)
        self._table = _table if _table is not None else BitTable.random(
            self.universe.size, layout, self._q_numerator)

    @staticmethod
    def _grid(buckets: int, levels: int, items: str, hashing: str | None) -> SketchGrid:
        """The grid of the family (a by-country sketch lays one per country end to end)."""
        return SketchGrid(buckets, levels, items, hashing)

    # ------------------------------------------------------------------ properties
    @property
    def buckets(self) -> int:
        return self.universe.buckets

    @property
    def levels(self) -> int:
        return self.universe.levels

    @property
    def items(self) -> str:
        return self.universe.items

    @property
    def hashing(self) -> str:
        """The grid's hash (``murmur3``, ``xxhash64-varchar``, ``xxhash64-bigint``)."""
        return self.universe.hashing

    @property
    def hash_name(self) -> str:
        """The hash as the state's public parameters name it."""
        from panstream.estimators.sketch.hashing import stored_name

        return stored_name(self.hashing)

    # ------------------------------------------------------------------ the state
    def update_hashes(self, hashes: np.ndarray, *, wipe: bool = True) -> int:
        """Fast path: apply items given as Presto hashes (``uint64``, e.g. from
        :func:`panstream.estimators.sketch.sfm.hash64_ints`). Returns the number applied."""
        h = np.asarray(hashes, dtype=np.uint64)
        cells = self.universe.cells_of_hashes(h)
        try:
            self._apply(cells)
        finally:
            cells.fill(0)
            n = int(h.size)
            if h is not hashes:
                h.fill(0)  # our converted copy
            if wipe and isinstance(hashes, np.ndarray) and hashes.flags.writeable:
                hashes.fill(0)
        return n

    def params(self) -> dict[str, Any]:
        """The public parameters stored in snapshots (kind ``sketch``)."""
        return {"kind": self.kind, "universe": self.universe.spec, "cells": self.size,
                "epsilon": float(self.epsilon), "buckets": self.buckets, "levels": self.levels,
                "items": self.items, "hash": self.hash_name, "p_bits": P_BITS,
                "p_numerator": self._numerator, "q_numerator": self._q_numerator,
                **self.universe.state_params()}

    def describe(self) -> dict[str, Any]:
        """The grid and the exact flip probability, for ``panstream inspect``."""
        return {"buckets": self.buckets, "levels": self.levels, "items": self.items,
                "hash": self.hash_name, "grid_bytes": self.size // 8, "q": str(self.q),
                "q_float": float(self.q), "layout": self.layout}

    @classmethod
    def _from_snapshot(cls, params: Mapping[str, Any], ledger: PrivacyLedger,
                       payload: np.ndarray, layout: str) -> SketchEstimator:
        eps = params["epsilon"]
        try:
            grid = SketchGrid.parse_spec(str(params["universe"]))
        except Exception as exc:  # noqa: BLE001 - any failure is a bad parameter
            raise CorruptSnapshotError.of_params(str(exc)) from None
        by = variant(cls.kind, grid.items)  # ip-country: one grid per country (panstream.country)
        if by is not None and cls is SketchEstimator:
            return by._from_snapshot(params, ledger, payload, layout)
        dims = (params.get("buckets"), params.get("levels"), params.get("items"))
        if dims != (grid.buckets, grid.levels, grid.items) or params.get("cells") != grid.size:
            raise CorruptSnapshotError.of_params(f"grid {dims} does not match universe {grid.spec}")
        from panstream.estimators.sketch.hashing import stored_name

        if params.get("hash") != stored_name(grid.hashing):
            raise CorruptSnapshotError.of_params(f"hash {params.get('hash')!r} is not {stored_name(grid.hashing)!r}, "
                                 f"the hash of {grid.spec}")
        nums = (params.get("p_bits"), params.get("p_numerator"), params.get("q_numerator"))
        if payload.size != packed_size(grid.size):
            raise CorruptSnapshotError.of_params(f"a {payload.size}-byte table cannot hold {grid.size} bits")
        try:
            want = calibrate(eps, "rr")
        except ConfigurationError as exc:
            raise CorruptSnapshotError.of_params(f"the stored epsilon cannot be calibrated: {exc}") from None
        if nums != (P_BITS, want.numerator, want.q_numerator):
            msg = (f"snapshot stores probabilities {nums} for epsilon {eps!r}, but this panstream "
                   f"calibrates that to q = {want.q_numerator}/2**{P_BITS}: the snapshot came from "
                   "a different panstream version; resume it with the version that wrote it, or "
                   "start a new state")
            raise SnapshotMismatchError(msg)
        grid.pin_state(params)  # checked before the table is adopted (a by-country grid's countries)
        table = BitTable._from_packed_array(grid.size, payload, choose_layout(grid.size, layout))
        est = cls(eps, grid.buckets, grid.levels, grid.items, ledger.budget, layout,
                  hashing=grid.hashing, _table=table, _ledger=ledger)
        est.universe.pin_state(params)
        return est

    # ------------------------------------------------------------------ reading
    def ones_by_level(self) -> np.ndarray:
        """The per-level counts of ones (``int64``, length ``P``): the sufficient statistic of the
        pseudo-likelihood, L1 sensitivity 1 per person."""
        return self._table.count_ones_by(self.buckets)

    def estimate(self) -> Fit:
        """The noiseless maximum pseudo-likelihood estimate (diagnostics and tests, never for
        publication): ``n``, Presto's ``cardinality``, ``stderr``."""
        ones = self.ones_by_level()
        try:
            return sfm.mple(ones, self.buckets, float(self.q))
        finally:
            ones.fill(0)

    def release(self, epsilon: float, mechanism: str = "laplace", *, sensitivity: int = 1,
                state_tables: int = 1, **kwargs: Any) -> sketch_release.SketchRelease:
        """Publish a noisy distinct count, charged to the ledger. See
        :func:`panstream.estimators.sketch.release.release_sketch` (``confidence=``).

        ``sensitivity`` and ``state_tables`` are what a consumer group's store asks for
        (:func:`panstream.state.stores.release_store`): a routed group's slices are one sketch, so
        both are 1, the only values a sketch releases with.

        Raises:
            ConfigurationError: ``sensitivity`` or ``state_tables`` other than 1 (nothing charged).
        """
        if (sensitivity, state_tables) != (1, 1):
            msg = (f"a sketch releases one grid with sensitivity 1 (asked: sensitivity "
                   f"{sensitivity}, {state_tables} state tables): per-partition sketches do not "
                   "make one sketch; run the group with --layout slices")
            raise ConfigurationError(msg)
        return sketch_release.release_sketch(self, epsilon, mechanism, **kwargs)

    # ------------------------------------------------------------------ interop
    def presto(self) -> PrestoSketch:
        """The state as a Presto sketch (its flip probability is q exactly: a 32-bit dyadic is a
        double). This *publishes the state*: see :meth:`end_epoch_export`."""
        view = self._payload_view()
        try:
            data = bytes(view)
        finally:
            self._wipe_payload_view(view)
        return PrestoSketch(self.universe.bits, self.levels, float(self.q), data)

    def end_epoch_export(self) -> tuple[bytes, PrivacyLedger]:
        """Serialize the state in Presto's format, then rotate (a fresh table and ledger).

        The exported sketch *is* the state: once it is published, a later copy of the same table
        would let anyone compare the two and see which bits were redrawn in between (who arrived).
        Rotating right after the export makes every later state independent of the exported one, so
        each epoch publishes one eps-DP sketch per person, as Presto's epoch sketches do.

        Returns:
            ``(serialized Presto bytes, the old epoch's ledger)``.
        """
        data = sfm.to_presto(self.presto())
        return data, self.rotate()

    def __repr__(self) -> str:
        return (f"SketchEstimator(epsilon={self.epsilon:g}, buckets={self.buckets}, "
                f"levels={self.levels}, items={self.items!r}, hashing={self.hashing!r}, q={self.q}, "
                f"epsilon_state={self.epsilon_state:.6g})")


def merge(a: PrestoSketch, b: PrestoSketch) -> PrestoSketch:
    """The randomized merge of Presto's ``SfmSketch.mergeWith`` (Theorem 4.8 of Hehir, Ting and
    Cormode, in its unbiased form: see :func:`panstream.estimators.sketch.sfm.merge_probabilities`), with draws from
    the OS CSPRNG.

    Each merged bit is 1 with the probability :func:`panstream.estimators.sketch.sfm.merge_probabilities` gives for
    its two input bits. Those probabilities are exact rationals here, each rounded to the nearest
    ``k / 2**32`` before the exact Bernoulli draw (an error of at most ``2**-33`` per bit; Presto
    uses doubles and ``ThreadLocalRandom``). Two non-private sketches merge by OR, as in Presto.

    **What the merged sketch is.** Averaged over the inputs' flips, the merged bits are independent,
    1 with probability ``1 - r`` where either stream hit them and ``r`` elsewhere,
    ``r = (r1 + r2 - 3 r1 r2)/(1 - 2 r1 r2)``: exactly the law of one sketch of the *union* of the
    streams privatized with flip probability ``r``, i.e. ``eps* = -ln(e^-eps1 + e^-eps2 -
    e^-(eps1+eps2))`` (below both inputs' epsilons). Its estimate is that of such a sketch: unbiased
    like one, with the standard error of :func:`panstream.estimators.sketch.sfm.mple` at ``r`` (larger than either
    input's). Privacy: the merge reads only the inputs, so it costs nothing beyond them; but the
    inputs were published, and a person in both streams is covered by ``eps1 + eps2`` against
    someone who holds both inputs (``eps*`` only against someone who sees the merged sketch alone).

    Raises:
        StateError: the grids differ.
    """
    if (a.bits, a.levels) != (b.bits, b.levels):
        msg = (f"cannot merge sketches of different grids ({a.buckets} x {a.levels} and "
               f"{b.buckets} x {b.levels})")
        raise StateError(msg)
    n = a.buckets * a.levels
    x = np.unpackbits(np.frombuffer(a.bitmap, dtype=np.uint8), count=n, bitorder="little")
    y = np.unpackbits(np.frombuffer(b.bitmap, dtype=np.uint8), count=n, bitorder="little")
    r1, r2 = Fraction(a.flip), Fraction(b.flip)
    try:
        if r1 == 0 and r2 == 0:
            out = x | y
            packed = np.packbits(out, bitorder="little").tobytes()
            out.fill(0)
            return PrestoSketch(a.bits, a.levels, 0.0, packed)
        probs = sfm.merge_probabilities(r1, r2)
        out = np.zeros(n, dtype=np.uint8)
        for (b1, b2), pr in probs.items():
            cells = np.flatnonzero((x == b1) & (y == b2))
            num = min(1 << P_BITS, math.floor(pr * (1 << P_BITS) + Fraction(1, 2)))
            draws = bernoulli(cells.size, num)
            out[cells] = draws
            draws.fill(False)
            cells.fill(0)
        r = sfm.merge_flip_probability(r1, r2)
        packed = np.packbits(out, bitorder="little").tobytes()
        out.fill(0)
        return PrestoSketch(a.bits, a.levels, float(r), packed)
    finally:
        x.fill(0)
        y.fill(0)
