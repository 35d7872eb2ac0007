"""Merge the shard tables of a consumer group into one estimate (pure: no I/O, no Kafka).

A consumer group keeps one bit table per input partition (a *shard*). Two ways to combine them:

**Sum of shard estimates** (:func:`merge_sum`). Each shard's table is a complete estimator over the
whole universe X; shard ``j`` estimates the number of distinct cells *seen in partition j*. When
every item lives in one partition (messages keyed by the item), these sets are disjoint and the sum
of the shard estimates is an unbiased estimate of the distinct count. But every shard contributes the
noise of a whole table of |X| coin flips, so the variance is ``K`` times that of one table:
the standard error of the distinct count grows as ``sqrt(K)`` with the number of shards ``K``.
(If the same item appears in several partitions the sum counts it several times: biased upward,
and one person then changes the summed count of ones by up to ``K``: a release must scale its noise
to that, see :func:`panstream.state.stores.merge_store`.)

**Partition-aware merge** (:func:`merge_partitioned`). When messages are keyed by the item's text with
Kafka's default partitioner, the partition of every cell is a public function of the cell:
``(murmur2(key) & 0x7fffffff) % K`` (or librdkafka's ``crc32(key) % K``: :mod:`panstream.state.keying`).
Only the member can know that the topic is keyed so: it checks every message it applies, and its
shards record it (issue 39); :func:`panstream.state.stores.merge_store` merges this way only shards
with that record. Cell ``c`` can only have been seen in its owner partition, so
the merged table takes ``b[c]`` from the owner's shard and ignores the other ``K - 1`` shards' coin
flips for that cell. The merged table has exactly the law of one table fed the whole stream: its
error does not grow with ``K``, and it is itself an estimator that can be released (sensitivity of
its count of ones stays 1, whatever the keying). Each merged bit is one shard bit, so the merged
table is as private as a shard (``epsilon_state``); the shard *files* are not, if an item's messages
reach several partitions (each holds a redrawn bit of its cell: ``K x epsilon_state``).

``docs/kafka.md`` shows both errors measured (``bench/merge_error.py``).

>>> import numpy as np
>>> from panstream.universe import Universe
>>> owner = kafka_partitions_of_cells(Universe.range(8), 3)
>>> owner.tolist() == [murmur2_partition(str(c).encode(), 3) for c in range(8)]
True
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from panstream.errors import StateError
from panstream.estimators.base import Estimator
from panstream.estimators.bittable import BitTable
from panstream.estimators.density import DensityEstimator
from panstream.estimators.frequency import FrequencyEstimator
from panstream.estimators.frequency import merge_partitioned as merge_frequency_partitioned
from panstream.release.frequency import MergedHistograms, sum_histograms
from panstream.release.ledger import ShardLedger
from panstream.release.stats import Figures
from panstream.state import keying
from panstream.state.slices import SKETCH_SLICE, SliceLayout
from panstream.universe import Universe


@dataclass(frozen=True)
class MergedEstimate(Figures):
    """A noiseless merged estimate (diagnostics and tests; publish through a release).

    Attributes:
        method: ``"sum"`` or ``"partitioned"``.
        shards: number of shard tables merged.
        density, distinct: the merged estimates.
        stderr_density, stderr_distinct: their binomial-model standard errors.
        size: number of cells |X|.
    """

    method: str
    shards: int
    density: float
    distinct: float
    stderr_density: float
    stderr_distinct: float
    size: int


def _check_compatible(estimators: Sequence[DensityEstimator]) -> DensityEstimator:
    if not estimators:
        msg = "no shard tables to merge: is the state directory/topic the right one?"
        raise StateError(msg)
    first = estimators[0]
    for e in estimators[1:]:
        if (e.universe != first.universe or e.p != first.p or e.calibration != first.calibration):
            msg = (f"shard tables disagree (universe {e.universe.spec} p={e.p} vs "
                   f"{first.universe.spec} p={first.p}): they were not made by one consumer group "
                   "configuration; merge only shards of one group")
            raise StateError(msg)
    return first


def merge_sum(estimators: Sequence[DensityEstimator]) -> MergedEstimate:
    """Sum the shard estimates: unbiased when items are disjoint across shards; variance grows ~K.

    Raises:
        StateError: no shards, or shards with different universes or probabilities.
    """
    first = _check_compatible(estimators)
    size = first.size
    ests = [e.estimate() for e in estimators]
    distinct = math.fsum(e.distinct for e in ests)
    se_distinct = math.sqrt(math.fsum(e.stderr_distinct ** 2 for e in ests))
    return MergedEstimate("sum", len(ests), distinct / size, distinct, se_distinct / size,
                          se_distinct, size)


def concatenate(shards: Sequence[DensityEstimator]) -> DensityEstimator:
    """The sum merge as one releasable estimator: the shard tables laid end to end.

    The result ranges over ``K * |X|`` cells (universe ``range:K|X|``, or ``hashed:K|X|`` for hashed
    shards) with the shards' ``p``. Its count of ones is the sum of the shards' counts, so its
    distinct estimate ``density * K|X|`` is the sum of the shard estimates, and a release of it adds
    noise of sensitivity 1 to that count: right when one person's items land in one partition (messages
    keyed by the person's item). For hashed universes the linear-counting correction is applied to the
    mean density (exact when the shards are equally full, slightly low otherwise). Like
    :func:`merge_partitioned`, the result has no budget of its own.

    Raises:
        StateError: no shards, incompatible shards, or more than 2**32 cells in all.
    """
    first = _check_compatible(shards)
    total = first.size * len(shards)
    if total > 1 << 32:
        msg = (f"{len(shards)} shards of {first.size} cells exceed 2**32 cells: release the shards "
               "separately or use the partition-aware merge")
        raise StateError(msg)
    bits = np.empty(total, dtype=np.uint8)
    for i, e in enumerate(shards):
        b = e.bits()
        bits[i * first.size:(i + 1) * first.size] = b
        b.fill(0)  # no stray copies of a shard table in freed memory
    packed = np.packbits(bits, bitorder="little")
    bits.fill(0)
    kind = Universe.hashed if first.universe.is_hashed else Universe.range
    table = BitTable.from_packed(total, packed.data)
    packed.fill(0)
    return DensityEstimator(kind(total), epsilon=first.epsilon, calibration=first.calibration,
                            _table=table, _ledger=ShardLedger())


def merge_partitioned(shards: Mapping[int, DensityEstimator], owner: np.ndarray
                      ) -> DensityEstimator:
    """One table from the shards: cell ``c`` takes its bit from shard ``owner[c]``.

    A partition that has no shard was never consumed, so its cells were never seen: they get fresh
    D0 = Bernoulli(q) bits from the OS CSPRNG (q of the shards' calibration: 1/2 for tight and
    paper, 1/(1+e^epsilon) for rr), which is their correct law.

    Args:
        shards: ``{partition: estimator}``.
        owner: ``owner[c]`` is the partition of cell ``c`` (:func:`kafka_partitions_of_cells`).

    Returns:
        A new :class:`DensityEstimator` with the shards' parameters and no budget of its own (a
        :class:`~panstream.release.ledger.ShardLedger`): the group's one ledger is attached by
        :func:`panstream.state.stores.release_store`.

    Raises:
        StateError: no shards, incompatible shards, or ``owner`` of the wrong length.
    """
    ests = [shards[k] for k in sorted(shards)]
    first = _check_compatible(ests)
    size = first.size
    if owner.shape != (size,):
        msg = f"cell-owner map has {owner.size} entries for a universe of {size} cells"
        raise StateError(msg)
    fresh = BitTable.random(size, "packed", first.q_numerator)  # D0 for unconsumed partitions
    merged = fresh.bits()
    fresh.wipe()
    for part, est in shards.items():
        cells = np.flatnonzero(owner == part)
        bits = est.bits()
        merged[cells] = bits[cells]
        bits.fill(0)
    packed = np.packbits(merged, bitorder="little")
    merged.fill(0)
    table = BitTable.from_packed(size, packed.data, first.layout)
    packed.fill(0)
    return DensityEstimator(first.universe, epsilon=first.epsilon, calibration=first.calibration,
                            _table=table, _ledger=ShardLedger())


def merged_estimate(est: DensityEstimator, shards: int) -> MergedEstimate:
    """The :class:`MergedEstimate` view of a partition-aware merged table."""
    e = est.estimate()
    return MergedEstimate("partitioned", shards, e.density, e.distinct, e.stderr_density,
                          e.stderr_distinct, e.size)


# ---------------------------------------------------------------------- the producers' partitioner
def murmur2_partition(key: bytes, partitions: int) -> int:
    """Kafka's default partition of a keyed message: ``(murmur2(key) & 0x7fffffff) % partitions``
    (:func:`panstream.state.keying.partition_of_key`)."""
    return keying.partition_of_key(key, partitions, "murmur2")


def kafka_partitions_of_cells(universe: Universe, partitions: int,
                              partitioner: str = "murmur2") -> np.ndarray:
    """The partition of every cell when messages are keyed by the item's text: the canonical text
    of the cell (the dotted IPv4 address, or the decimal integer of a ``range`` universe), placed
    by ``partitioner`` (``murmur2``, Kafka's default; or ``crc32``, librdkafka's; see
    :mod:`panstream.state.keying`).

    Raises:
        ConfigurationError: for ``ipv6`` and ``hashed`` universes, whose cells do not determine
            the message key (many addresses or identifiers share a cell): use :func:`merge_sum`.
    """
    return keying.partitions_of_cells(universe, partitions, partitioner)


# ---------------------------------------------------------------------- either family
def merge_group_partitioned(shards: Mapping[int, Estimator], owner: np.ndarray) -> Estimator:
    """The partition-aware merge of a group's shards, whichever family they are: cell ``c`` takes
    its bit (:func:`merge_partitioned`) or its counter
    (:func:`panstream.estimators.frequency.merge_partitioned`) from shard ``owner[c]``.

    Raises:
        StateError: no shards, shards of different families or parameters.
    """
    kind = _one_kind(shards.values())
    if kind == FrequencyEstimator.kind:
        return merge_frequency_partitioned(
            {p: e for p, e in shards.items() if isinstance(e, FrequencyEstimator)}, owner)
    return merge_partitioned({p: e for p, e in shards.items() if isinstance(e, DensityEstimator)},
                             owner)


def merge_group_sum(shards: Sequence[Estimator]) -> DensityEstimator | MergedHistograms:
    """The sum merge of a group's shards, whichever family they are: density tables laid end to
    end (:func:`concatenate`), counter histograms added
    (:func:`panstream.release.frequency.sum_histograms`).

    Raises:
        StateError: no shards, shards of different families or parameters.
    """
    kind = _one_kind(shards)
    if kind == "sketch":
        msg = ("the shards hold Sketch-Flip-Merge sketches, one per partition, which do not add up "
               "to one sketch: run the group with --layout slices (it routes by bucket range and "
               "its slices make one sketch), or merge exported epochs with 'panstream "
               "merge-sketches'")
        raise StateError(msg)
    if kind == FrequencyEstimator.kind:
        return sum_histograms([e for e in shards if isinstance(e, FrequencyEstimator)])
    return concatenate([e for e in shards if isinstance(e, DensityEstimator)])


def _one_kind(shards: Iterable[Estimator]) -> str:
    kinds = {e.kind for e in shards}
    if not kinds:
        msg = "no shard tables to merge: is the state directory/topic the right one?"
        raise StateError(msg)
    if len(kinds) > 1:
        msg = (f"the store holds shards of different estimator families ({', '.join(sorted(kinds))}):"
               " one consumer group runs one family; use one state directory or topic per group")
        raise StateError(msg)
    return kinds.pop()


# ---------------------------------------------------------------------- routed slices
def _bits_per_cell(est: Estimator) -> int:
    if isinstance(est, FrequencyEstimator):
        return 4 if est.modulus <= 16 else 8
    return 1


def _append_bits(out: np.ndarray, bitpos: int, src: np.ndarray, nbits: int) -> None:
    """OR the first ``nbits`` bits of the little-endian bit stream ``src`` into ``out`` at bit
    ``bitpos`` (``out`` is zero from there on). Temporaries are zeroed."""
    nb = (nbits + 7) // 8
    if not nb:
        return
    part = src[:nb].copy()
    tail = nbits % 8
    if tail:
        part[-1] &= np.uint8((1 << tail) - 1)  # never a padding bit into the next slice's cells
    shift, byte = bitpos % 8, bitpos // 8
    try:
        if shift == 0:
            out[byte:byte + nb] |= part
            return
        wide = part.astype(np.uint16) << np.uint16(shift)
        low = wide.astype(np.uint8)  # the low byte of each (a cast keeps it)
        out[byte:byte + nb] |= low
        np.right_shift(wide, np.uint16(8), out=wide)
        np.copyto(low, wide, casting="unsafe")
        room = min(nb, out.size - byte - 1)
        out[byte + 1:byte + 1 + room] |= low[:room]
        wide.fill(0)
        low.fill(0)
    finally:
        part.fill(0)


def merge_slices(slices: Mapping[int, Estimator], layout: SliceLayout) -> Estimator:
    """One table over the whole universe from a routed group's slices, laid end to end (for a
    sketch grid: one :class:`~panstream.estimators.sketch.estimator.SketchEstimator`).

    Slice ``r`` holds cells ``[lo_r, hi_r)`` of ``layout`` (:mod:`panstream.state.slices`); every
    arrival of a cell was applied to its one slice, so the result has exactly the law of one table
    fed the whole stream, over the universe ``layout.universe`` itself (maps by prefix work on it).
    A slice with no snapshot was never consumed, so its cells were never seen: it gets a fresh
    initial draw (D0 bits, or D counters), as :func:`merge_partitioned` does. The payloads are
    concatenated at bit level (no byte-per-cell copy of the whole universe); every temporary is
    zeroed. The result has no budget of its own (a
    :class:`~panstream.release.ledger.ShardLedger`).

    Raises:
        StateError: no slices, slices of different families or parameters, or a slice whose size
            does not match the layout.

    >>> from panstream.estimators.density import DensityEstimator
    >>> lay = SliceLayout(Universe.parse("ipv4:10.0.0.0/28"), 3)
    >>> parts = {r: DensityEstimator(lay.slice_universe(r), epsilon=30) for r in range(3)}
    >>> for r, e in parts.items():
    ...     e.update_indices(np.arange(e.size))
    6
    5
    5
    >>> full = merge_slices(parts, lay)
    >>> full.universe.spec, int(full.count_ones())
    ('ipv4:10.0.0.0/28', 16)
    """
    from panstream import estimators

    kind = _one_kind(slices.values())
    first = slices[min(slices)]
    if layout.is_sketch and (kind, getattr(first, "calibration", None)) != SKETCH_SLICE:
        msg = (f"the slices of {layout.universe.spec} must be bit tables with randomized response "
               f"(density, rr); these are {kind} tables: not a sketch group's slices")
        raise StateError(msg)
    params = {k: v for k, v in first.params().items() if k not in ("universe", "cells")}
    for r, est in slices.items():
        mine = {k: v for k, v in est.params().items() if k not in ("universe", "cells")}
        if mine != params:
            msg = (f"slice {r} was made with other parameters ({mine}) than slice {min(slices)} "
                   f"({params}): merge only the slices of one group configuration")
            raise StateError(msg)
        if est.size != layout.size(r):
            msg = f"slice {r} has {est.size} cells; the layout gives it {layout.size(r)}"
            raise StateError(msg)
    bits = _bits_per_cell(first)
    size = layout.universe.size
    payload = np.zeros((size * bits + 7) // 8, dtype=np.uint8)
    try:
        for r in range(layout.count):
            lo, _ = layout.bounds(r)
            got = slices.get(r)
            if got is None:  # never consumed: a fresh initial table, its correct law
                eps = float(params["epsilon"])
                est = estimators.new(kind, layout.slice_universe(r), eps,
                                     calibration=str(params.get("calibration", "rr")),
                                     modulus=int(params.get("modulus", 16)),
                                     layout=layout.table_layout)
                fresh = True
            else:
                est, fresh = got, False
            view = est._payload_view()
            try:
                _append_bits(payload, lo * bits, np.frombuffer(view, dtype=np.uint8),
                             est.size * bits)
            finally:
                est._wipe_payload_view(view)
                if fresh:
                    est.wipe()
        if layout.is_sketch:
            return _sketch_of_slices(payload, layout, params)
        full = {**first.params(), "universe": layout.universe.spec, "cells": size}
        return estimators.family(kind)._from_snapshot(full, ShardLedger(), payload, "auto")
    except BaseException:
        payload.fill(0)
        raise


def _sketch_of_slices(payload: np.ndarray, layout: SliceLayout, params: Mapping[str, Any]
                      ) -> Estimator:
    """The sketch whose bits, in bucket-major routing order, are the packed ``payload``: transposed
    back to Presto's ``level * B + bucket`` order. ``params`` are the slices' (epsilon, rr).
    ``payload`` and every temporary are wiped."""
    from panstream.estimators.sketch.estimator import SketchEstimator
    from panstream.estimators.sketch.sfm import SketchGrid

    grid = layout.universe
    assert isinstance(grid, SketchGrid)
    bits = np.unpackbits(payload, count=grid.size, bitorder="little")
    payload.fill(0)
    ordered = layout.grid_order(bits)
    bits.fill(0)
    packed = np.packbits(ordered, bitorder="little")
    ordered.fill(0)
    try:
        table = BitTable.from_packed(grid.size, packed.data)
    finally:
        packed.fill(0)
    return SketchEstimator(float(params["epsilon"]), grid.buckets, grid.levels, grid.items,
                           hashing=grid.hashing, _table=table, _ledger=ShardLedger())
