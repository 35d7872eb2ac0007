r"""The slice stage: the internal topic ``<group>-cells`` into the slices of one table.

The members of a routed group also consume the internal topic, as a second consumer group
(``<group>-slices``). Partition ``r`` of the internal topic carries the cells of slice ``r``
(:class:`~panstream.state.slices.SliceLayout`), so the member assigned partition ``r`` owns slice
``r``: a table of ``|X|/R`` cells (``range:(hi - lo)``), restored from the store on assignment
(or a fresh D0 table), checkpointed before commit exactly as the per-partition shards are
(:class:`~panstream.sources.kafka.group.GroupLoop` and :class:`~panstream.state.checkpoint.
Checkpointer`: every owned slice written on the clock, whatever arrived, then the offsets
committed), handed over on a rebalance. Slice snapshots carry the public ``slice`` parameter
(:func:`~panstream.state.slices.encode_slice`) and live under the key ``<group>-cells/<r>`` in the
``--state-dir`` or state topic.

After a checkpoint is durable and committed, the internal records it covers are no longer needed:
the stage asks the broker to delete them (``DeleteRecords``), since they say which cells arrived.
A broker without DeleteRecords (Tansu 0.6 drops the connection) is told once, and the records then
expire with the topic's ``retention.ms`` (as long as the source topics keep the raw lines:
:func:`~panstream.sources.kafka.route.internal_retention`).

**Fenced snapshots** (:mod:`panstream.state.fence`), the group loop's for every layout
(:class:`~panstream.sources.kafka.group.GroupLoop`). On assignment the stage claims each new slice
in the store with its generation in ``<group>-slices`` before reading the snapshot, and every later
save of the slice carries that epoch: a member evicted while it went on running (a "zombie") can
no longer replace the new owner's snapshot (the directory store refuses the save with
:class:`~panstream.errors.FencedError` and the loop drops the slice unsaved and goes on; readers of
a state topic ignore it). A claim lower
than the stored epoch is allowed only if a commit proves the member current
(:meth:`~panstream.sources.kafka.group.GroupLoop._still_current`).

**A commit that meets a rebalance** (kafka-python's ``RebalanceInProgressError``, or
``CommitFailedError`` for a generation the group has left: librdkafka's ``ILLEGAL_GENERATION``)
does not stop the member (:class:`~panstream.sources.kafka.group.GroupLoop` decides, for every
layout), as it does not the routing stage's
(:meth:`~panstream.sources.kafka.route.RouteStage.commit`): the snapshots were made durable under
the member's fenced epoch first, so the :class:`~panstream.state.checkpoint.Checkpointer` leaves
the offsets uncommitted (:class:`~panstream.errors.CommitDeferredError`), the member says so once
per checkpoint, and nothing is deleted. If the member keeps the slice, its next checkpoint (or the
save on revoke) commits them; if the slice moves, its next owner restores the snapshot and
re-applies the records after the last commit: a replay, harmless for the bit table, counted twice
by the counter family, as after a crash. A bounded member exits 0 only once the broker's commits
show the group drained, and a final checkpoint whose commit meets a rebalance stops with one line
(exit 1) unless the broker already holds those offsets. Without a fenced store (tests) the member
stops as before.

The stage is a :class:`~panstream.sources.kafka.group.GroupLoop` holding :class:`SliceTask`\ s
(:class:`SliceTasks`: the layout; DeleteRecords after each commit is the loop's,
:class:`~panstream.sources.kafka.group.RecordDeletes`);
before issue 35 it was a subclass of the per-partition member.

Counts: the routing stage already counted messages and items (telemetry windows); this stage
counts nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from kafka import TopicPartition

from panstream import estimators
from panstream.errors import StateError
from panstream.estimators.base import Estimator
from panstream.release.ledger import ShardLedger
from panstream.sources.kafka.group import GroupLoop, TailConfig
from panstream.sources.kafka.identity import decoded
from panstream.sources.kafka.joins import group_consumer
from panstream.sources.kafka.metrics import Metrics
from panstream.sources.kafka.progress import ranges
from panstream.sources.kafka.task import NO_COUNTS, Counts, KindSteps, TaskState
from panstream.state.checkpoint import Shard, save_durable, shard_key
from panstream.state.slices import (
    SliceLayout,
    encode_slice,
    head_params,
    slice_family,
    slice_of,
)

log = logging.getLogger("panstream.kafka")


def expired(consumer: Any, tps: list[TopicPartition]) -> dict[int, int]:
    """Routed records that left the internal topic before any slice applied them: for each
    partition whose committed offset lies below its log start, how many (``{slice: records}``).

    That happens only when the whole group was down longer than the topic's ``retention.ms`` (or
    someone deleted records by hand): DeleteRecords never goes past a committed offset. The
    consumer then resumes at the log start (``auto_offset_reset=earliest``) and those arrivals are
    lost; nothing can bring them back, but a member must say so instead of going on silently.
    """
    try:
        done = {tp: consumer.committed(tp) for tp in tps}
        asked = [tp for tp in tps if done[tp] is not None]  # a new group's slices: nothing to ask
        start = consumer.beginning_offsets(asked) if asked else {}
    except Exception:  # noqa: BLE001 - a broker that cannot say: nothing to report
        return {}
    return {tp.partition: int(start[tp]) - int(done[tp]) for tp in tps
            if done.get(tp) is not None and start.get(tp) is not None
            and int(start[tp]) > int(done[tp])}


def expired_warning(topic: str, lost: Mapping[int, int]) -> str:
    """The one line a member prints for :func:`expired` records.

    >>> expired_warning("g-cells", {3: 12, 4: 1})[:66]
    'warning: 13 routed records of slices 3-4 expired from g-cells befo'
    """
    return (f"warning: {sum(lost.values()):,} routed records of slices {ranges(lost)} expired "
            f"from {topic} before a slice applied them (the group was down longer than its "
            "retention.ms): those arrivals are lost, and releases of this table miss them")


def restore_slice(data: bytes | bytearray, key: str, where: str, layout: SliceLayout, r: int,
                  config: TailConfig, family: tuple[str, str]) -> Estimator:
    """Slice ``r`` of ``layout`` from its snapshot ``data`` (wiped after), checked against the
    configured parameters of ``family`` (``(estimator, calibration)``: a routed table's is
    :func:`~panstream.state.slices.slice_family`'s).

    Raises:
        StateError: it is not slice ``r`` of this layout, or was written with other parameters.
    """
    try:
        at = slice_of(head_params(data))
        if at is None or at[1] != r or at[0] != layout:
            msg = (f"{key} in {where} is not slice {r} of {layout.count} of "
                   f"{layout.universe.spec}: resume with the --universe and --slices it was "
                   "written with, or use a new state and group")
            raise StateError(msg)
        expect = estimators.expect_of(family[0], layout.slice_universe(r), config.epsilon,
                                      family[1], config.modulus)
        est = estimators.restore(data, expect=expect, layout=layout.table_layout)
        est.ledger = ShardLedger()
        return est
    finally:
        if isinstance(data, bytearray):
            data[:] = bytes(len(data))


def fresh_slice(layout: SliceLayout, r: int, config: TailConfig) -> Estimator:
    """A fresh D0 table for slice ``r`` (the routed family: a sketch's slices are rr bits)."""
    c = config
    kind, calibration = slice_family(c.estimator, c.calibration)
    return estimators.new(kind, layout.slice_universe(r), c.epsilon, calibration=calibration,
                          modulus=c.modulus, ledger=ShardLedger(), layout=layout.table_layout)


def apply_cells(loop: Any, r: int, decode: Callable[..., Any], est: Estimator,
                value: bytes) -> None:
    """One routed payload of slice ``r`` into ``est`` (a payload that does not decode as this
    group's is said through the loop's gate and skipped)."""
    part = decoded(loop.gate, r, decode, r, value)
    if part is not None:
        est.update_indices(part)  # wipes the offsets


class SliceTasks(KindSteps):
    """The kind of the routed layout: slice ``r`` is partition ``r`` of the internal topic."""

    unit = "slices"
    counts = False
    every_checkpoint = False
    one_sync = True

    def __init__(self, config: TailConfig, layout: SliceLayout) -> None:
        self.config = config
        self.layout = layout

    def task(self, tp: TopicPartition) -> SliceTask:
        return SliceTask(self, tp)

    def claim_key(self, tp: TopicPartition) -> str:
        return shard_key(tp.topic, tp.partition)

    def restored(self, fresh: list[TopicPartition]) -> None:
        """Say what expired from the internal topic before a slice applied it."""
        lost = expired(self.loop.consumer, fresh)
        if lost:
            self.loop.notice(expired_warning(self.config.topics[0], lost))


class SliceTask:
    """Slice ``r``: a table of ``|X|/R`` cells under the store key ``<group>-cells/<r>``."""

    def __init__(self, kind: SliceTasks, tp: TopicPartition) -> None:
        self.kind = kind
        self.r = tp.partition
        self.shard = Shard(shard_key(tp.topic, self.r), tp, None)  # type: ignore[arg-type]
        self.state = TaskState.CREATED

    def restore(self) -> None:
        k = self.kind
        data = k.config.store.load(self.shard.key)
        c = k.config
        self.shard.estimator = (
            fresh_slice(k.layout, self.r, c) if data is None else
            restore_slice(data, self.shard.key, "the store", k.layout, self.r, c,
                          slice_family(c.estimator, c.calibration)))

    def apply(self, records: list[Any]) -> Counts:
        k, r, parts = self.kind, self.r, []
        for rec in records:
            if rec.value:
                a = decoded(k.loop.gate, r, k.layout.decode, r, rec.value)
                if a is not None:
                    parts.append(a)
        if parts:
            idx = parts[0] if len(parts) == 1 else np.concatenate(parts)
            for a in parts:
                if a is not idx:
                    a.fill(0)
            self.shard.estimator.update_indices(idx)  # wipes idx
        return NO_COUNTS

    def snapshot(self, now: float | None) -> None:
        k = self.kind
        save_durable(k.loop.saves, self.shard.key,
                     encode_slice(self.shard.estimator, k.layout, self.r))

    def close(self) -> None:
        if self.shard.estimator is not None:
            self.shard.estimator.wipe()


class SliceStage(GroupLoop):
    r"""A member of ``<group>-slices`` owning the slices of its assigned internal partitions: a
    :class:`~panstream.sources.kafka.group.GroupLoop` of :class:`SliceTask`\ s.

    Args:
        config: a :class:`TailConfig` whose ``topics`` is ``[internal topic]``, ``universe`` the
            whole universe and ``consumer`` the settings of the ``<group>-slices`` group.
        layout: the slice layout (the internal topic has ``layout.count`` partitions).
        metrics: the member's metrics (assigned partitions, checkpoints, lag).
        admin_client: connection settings for DeleteRecords (``None``: never delete).
    """

    def __init__(self, config: TailConfig, layout: SliceLayout, metrics: Metrics | None = None,
                 admin_client: Mapping[str, Any] | None = None,
                 consumer_factory: Callable[..., Any] = group_consumer) -> None:
        self.slices = SliceTasks(config, layout)
        super().__init__(config, self.slices, metrics, consumer_factory, admin_client=admin_client)
        self.layout = layout
