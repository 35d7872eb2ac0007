"""A group's store as one table: the merge of its shards or slices, what it holds, its rotation.

No I/O of its own: it reads and writes through the store (any :class:`~panstream.state.stores.
protocol.Store`); every snapshot read is parsed, restored and zeroed, and the tables are merged by
:mod:`panstream.state.merge`. :func:`merge_store` is the group's
one releasable estimator (:class:`GroupState`), :func:`store_layout` what ``panstream inspect``
says a store holds, :func:`rotate_slice_store` the end of a routed group's epoch. The release and
its ledger are :mod:`panstream.state.stores.release`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from panstream import estimators
from panstream.errors import ConfigurationError, PanstreamError, StateError
from panstream.estimators.base import Estimator
from panstream.release.frequency import MergedHistograms
from panstream.release.ledger import ShardLedger
from panstream.state import merge as m
from panstream.state import persist
from panstream.state.keying import RECORD, Keying, group_keying, keying_of
from panstream.state.slices import SliceLayout, encode_slice, head_params, slice_of
from panstream.state.stores.protocol import Store

MERGES = ("auto", "partitioned", "sum")


@dataclass(frozen=True)
class GroupState:
    """The shards of a state store, merged into one releasable estimator.

    Attributes:
        estimator: the merged estimator (its ledger is the state directory's release ledger): a
            table of the shards' family, or (frequency sum merge) the shards' summed histograms.
        method: ``"partitioned"`` or ``"sum"`` (per-partition shards), or ``"slices"`` (a routed
            group's slices laid end to end, :func:`merge_slice_store`); shards: number of shards
            or slices; topics: the shards' topics (none for slices).
        partitions: the partition count used by the partition-aware merge (0 for ``sum``).
        keyed: whether the operator asserted that messages are keyed by the item (default
            partitioner), so an item's messages reach one partition per topic.
        sensitivity: how much one person can change the merged statistic: the family's unit (1
            for a count of ones, 2 for a counter histogram) for the partition-aware merge (one cell
            per cell); for the sum merge that times the number of shards an item can reach (its
            topics if keyed, every shard if not).
        state_tables: how many stored shard tables one person's arrivals can change (the same
            bound for the shards on disk), which multiplies the state epsilon.
        layout: ``"partitions"`` (one full table per input partition) or ``"slices"``.
    """

    estimator: Estimator | MergedHistograms
    method: str
    shards: int
    topics: tuple[str, ...]
    partitions: int
    keyed: bool = False
    sensitivity: int = 1
    state_tables: int = 1
    layout: str = "partitions"


def merge_store(store: Store, merge: str = "auto",
                partitions: int | None = None, keyed: bool = False) -> GroupState:
    """Load every shard of ``store`` and merge them (see :mod:`panstream.state.merge`).

    Args:
        store: the shard store.
        merge: ``"partitioned"`` (messages keyed by the item's text: only shards whose members
            checked that, and recorded it, :mod:`panstream.state.keying`, issue 39), ``"sum"``
            (any keying that keeps each item in one partition), or ``"auto"``: partitioned for
            one topic over an ``ipv4``/``range`` universe, else sum.
        partitions: the topic's partition count (default: the shards' record; it must agree).
        keyed: the operator asserts that every message is keyed by its item with the default
            partitioner, so one item reaches one partition per topic. Without it the privacy
            accounting assumes the worst case: one person's item may be in every shard, changing
            every shard table (state epsilon times the shard count) and, for the sum merge, the
            summed count of ones by up to the shard count (noise scaled to it).

    Raises:
        StateError: no shards, or shards that do not belong together; for the partition-aware
            merge (``auto`` included), shards without the keying record or with different ones
            (nothing is spent: the release has not begun).
        ConfigurationError: ``partitioned`` asked for where it is impossible.
    """
    if merge not in MERGES:
        msg = f"unknown merge {merge!r}: use one of {', '.join(MERGES)}"
        raise ConfigurationError(msg)
    keys = store.keys()
    if not keys:
        msg = f"no shard snapshots in {store!r}: point at the consumers' --state-dir/--state-topic"
        raise StateError(msg)
    shards: dict[tuple[str, int], Estimator] = {}
    sliced: dict[int, tuple[SliceLayout, Estimator]] = {}
    records: dict[str, Keying | None] = {}  # each shard's keying record (issue 39)
    for key in keys:
        data = store.load(key)
        if data is not None:
            topic, _, part = key.rpartition("/")
            try:
                params = head_params(data)
                where = slice_of(params)
                table = persist.restore(data)
                if where is None:
                    shards[(topic, int(part))] = table
                    records[key] = keying_of(params)
                else:
                    sliced[where[1]] = (where[0], table)
            finally:
                if isinstance(data, bytearray):
                    data[:] = bytes(len(data))
    if sliced:
        return merge_slice_store(sliced, shards, merge)
    topics = tuple(sorted({t for t, _ in shards}))
    first = next(iter(shards.values()))
    method = merge
    if merge == "auto":
        method = ("partitioned" if len(topics) == 1 and first.universe.kind in ("ipv4", "range")
                  else "sum")
    if method == "partitioned":
        try:
            if len(topics) != 1:
                msg = f"the partition-aware merge needs the shards of one topic, found {topics}"
                raise ConfigurationError(msg)
            # only shards whose members checked that each item sat in its owner partition
            verified = group_keying(records, partitions)
        except PanstreamError:
            for e in shards.values():
                e.wipe()
            raise
        k = verified.partitions
        owner = m.kafka_partitions_of_cells(first.universe, k, verified.partitioner)
        est: Estimator | MergedHistograms = m.merge_group_partitioned(
            {p: e for (_, p), e in shards.items()}, owner)
    else:
        k = 0
        est = m.merge_group_sum([shards[key] for key in sorted(shards)])
    for e in shards.values():
        e.wipe()
    est.ledger = ShardLedger()  # releasable only once the group's one ledger is attached
    reach = len(topics) if keyed else len(shards)  # shards one person's item can change
    # One person changes one table's statistic by the family's unit (a count of ones by 1, a
    # histogram by 2); the sum merge adds the tables one person can reach.
    sensitivity = first.unit_sensitivity * (1 if method == "partitioned" else reach)
    return GroupState(est, method, len(shards), topics, k, keyed, sensitivity, reach)


def merge_slice_store(sliced: dict[int, tuple[SliceLayout, Estimator]],
                      shards: dict[tuple[str, int], Estimator], merge: str = "auto") -> GroupState:
    """The :class:`GroupState` of a routed group's store: its slices laid end to end
    (:func:`panstream.state.merge.merge_slices`), one table over the whole universe.

    Every cell lives in one slice and every arrival was applied to its cell's slice, whatever the
    producers' keying: the count of ones has the family's unit sensitivity and the stored tables
    are one table (``state_tables`` 1), with no ``keyed`` assertion needed. Slices no member has
    consumed yet get fresh initial draws.

    Raises:
        StateError: slices of different layouts, or slices mixed with per-partition shards.
        ConfigurationError: ``merge`` other than ``auto`` (the slices need no merge method).
    """
    try:
        if shards:
            msg = (f"the store holds routed slices and {len(shards)} per-partition shard(s) "
                   f"({', '.join(f'{t}/{p}' for t, p in sorted(shards))}): one store per group "
                   "and layout; move one kind to its own --state-dir or --state-topic")
            raise StateError(msg)
        layouts = {lay for lay, _ in sliced.values()}
        if len(layouts) > 1:
            msg = (f"the store holds slices of {len(layouts)} different layouts "
                   f"({', '.join(sorted(f'{x.universe.spec} in {x.count}' for x in layouts))}): "
                   "a group restarted with another --universe or --slices on the same state")
            raise StateError(msg)
        if merge != "auto":
            msg = (f"--merge {merge} does not apply: this store holds routed slices, which are "
                   "one table laid end to end (leave --merge at auto)")
            raise ConfigurationError(msg)
        layout = layouts.pop()
        est = m.merge_slices({r: e for r, (_, e) in sliced.items()}, layout)
    finally:
        for _, e in sliced.values():
            e.wipe()
        for e in shards.values():
            e.wipe()
    est.ledger = ShardLedger()
    return GroupState(est, "slices", len(sliced), (), layout.count, True, est.unit_sensitivity, 1,
                      layout="slices")


def rotate_slice_store(store: Store,
                       export: Callable[[Estimator], None] | None = None) -> GroupState:
    """End the epoch of a routed group's table: optionally ``export`` the merged table (e.g. the
    sketch in Presto's format, written durably; an exception from it rotates nothing), then
    overwrite every stored slice with a fresh
    initial draw (D0 bits or D counters), under the store's ledger lock.

    After an export the published table *is* the state: a later copy of the same slices would let
    anyone compare the two and see which bits were redrawn in between (who arrived). Fresh slices
    make every later state independent of the exported one. The group's ledger is kept as it is
    (its spent budget still counts: conservative); the members must be stopped first, or the next
    checkpoint of a running member would put its old slices back.

    Returns:
        The ending epoch's :class:`GroupState` (its estimator already wiped).

    Raises:
        StateError: the store holds no routed slices (per-partition shards are not rotated here),
            or a snapshot could not be read or written (if the export was written but the slices
            were not all replaced, run the rotation again without the export).
    """
    with store.ledger_lock():
        group = merge_store(store)
        try:
            if group.layout != "slices":
                msg = (f"{store!r} holds per-partition shards, not a routed group's slices: "
                       "rotate them by stopping the group and starting a new --state-dir")
                raise StateError(msg)
            if export is not None:
                assert isinstance(group.estimator, Estimator)
                export(group.estimator)  # durable before any slice is replaced
        finally:
            if isinstance(group.estimator, Estimator):
                group.estimator.wipe()
        for key, params in _heads(store):
            where = slice_of(params)
            if where is None:
                continue
            lay, r = where
            fresh = estimators.new(str(params["kind"]), lay.slice_universe(r),
                                   float(params["epsilon"]),
                                   calibration=str(params.get("calibration", "rr")),
                                   modulus=int(params.get("modulus", 16)), ledger=ShardLedger(),
                                   layout=lay.table_layout)
            buf = encode_slice(fresh, lay, r)
            try:
                store.save(key, buf)
            finally:
                buf[:] = bytes(len(buf))
                fresh.wipe()
    return group


def _heads(store: Store) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(key, public parameters)`` of every snapshot in ``store`` (each snapshot read, its head
    parsed, the bytes zeroed: no table outlives the call)."""
    keys = store.keys()  # a store's list of keys, not a dict's view
    for key in keys:
        data = store.load(key)
        if data is None:
            continue
        try:
            params = head_params(data)
        finally:
            if isinstance(data, bytearray):
                data[:] = bytes(len(data))
        yield key, params


def store_layout(store: Store) -> dict[str, Any]:
    """What a store holds, from the snapshots' public parameters only (``panstream inspect``):
    ``{"layout": "slices" | "partitions" | "empty", ...}`` with the universe, the slice count and
    the slices present, or the per-partition shards' topics and count and ``keying`` (the keying
    records their members wrote, and the shards without one: issue 39), and ``parameters``: the
    family's public parameters as a snapshot head carries them (epsilon, calibration or modulus,
    the exact probabilities' numerators).

    Raises:
        StateError: a snapshot cannot be read.
    """
    present: list[int] = []
    layouts: set[SliceLayout] = set()
    parts: list[str] = []
    kinds: set[str] = set()
    family: dict[str, Any] = {}
    records: dict[str, Keying | None] = {}
    for key, params in _heads(store):
        if not family:  # the family's public parameters (the same in every snapshot of a group)
            family = {k: v for k, v in params.items()
                      if k not in ("cells", "slice", "universe", RECORD)}
        where = slice_of(params)
        # a sketch's slices are rr bit tables; the group they make is the sketch
        kinds.add("sketch" if where is not None and where[0].is_sketch else str(params["kind"]))
        if where is None:
            parts.append(key)
            records[key] = keying_of(params)
        else:
            layouts.add(where[0])
            present.append(where[1])
    out: dict[str, Any] = {"estimator": sorted(kinds), "parameters": family}
    if layouts and parts:
        out.update(layout="mixed", slices_present=sorted(present), shards=parts)
    elif layouts:
        lay = next(iter(layouts)) if len(layouts) == 1 else None
        out.update(layout="slices", universe=lay.universe.spec if lay else None,
                   slices=lay.count if lay else None, slices_present=sorted(present))
    elif parts:
        out.update(layout="partitions", shards=parts,
                   topics=sorted({k.rpartition("/")[0] for k in parts}), keying=_keyings(records))
    else:
        out.update(layout="empty")
    return out


def _keyings(records: dict[str, Keying | None]) -> dict[str, Any]:
    """What ``inspect`` says of per-partition shards' keying records (issue 39): the records
    found (partitioner and partition count) and the shards without one."""
    found = sorted({(r.partitioner, r.partitions) for r in records.values() if r is not None})
    return {"verified": [{"partitioner": p, "partitions": k} for p, k in found],
            "unverified": sorted(k for k, r in records.items() if r is None)}
