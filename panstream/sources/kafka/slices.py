"""The slice stage: the internal topic ``<group>-cells`` into the slices of one table.

The members of a routed group also consume the internal topic, as a second consumer group
(``<group>-slices``). Partition ``r`` of the internal topic carries the cells of slice ``r``
(:class:`~panstream.state.slices.SliceLayout`), so the member assigned partition ``r`` owns slice
``r``: a table of ``|X|/R`` cells (``range:(hi - lo)``), restored from the store on assignment
(or a fresh D0 table), checkpointed before commit exactly as the per-partition shards are
(:class:`~panstream.sources.kafka.tail.KafkaTail` and :class:`~panstream.state.checkpoint.
Checkpointer`: every owned slice written on the clock, whatever arrived, then the offsets
committed), handed over on a rebalance. Slice snapshots carry the public ``slice`` parameter
(:func:`~panstream.state.slices.encode_slice`) and live under the key ``<group>-cells/<r>`` in the
``--state-dir`` or state topic.

After a checkpoint is durable and committed, the internal records it covers are no longer needed:
the stage asks the broker to delete them (``DeleteRecords``), since they say which cells arrived.
A broker without DeleteRecords (Tansu 0.6 drops the connection) is told once, and the records then
expire with the topic's ``retention.ms`` (as long as the source topics keep the raw lines:
:func:`~panstream.sources.kafka.route.internal_retention`).

**Fenced snapshots** (:mod:`panstream.state.fence`), inherited from
:class:`~panstream.sources.kafka.tail.KafkaTail`. On assignment the stage claims each new slice in
the store with its generation in ``<group>-slices`` before reading the snapshot, and every later
save of the slice carries that epoch: a member evicted while it went on running (a "zombie") can
no longer replace the new owner's snapshot (the directory store refuses the save with
:class:`~panstream.errors.FencedError`, exit 1; readers of a state topic ignore it). A claim lower
than the stored epoch is allowed only if a commit proves the member current
(:meth:`~panstream.sources.kafka.tail.KafkaTail._still_current`).

**A commit that meets a rebalance** (kafka-python's ``RebalanceInProgressError``, or
``CommitFailedError`` for a generation the group has left: librdkafka's ``ILLEGAL_GENERATION``)
does not stop the member (:class:`~panstream.sources.kafka.tail.KafkaTail` decides, for every
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

Counts: the routing stage already counted messages and items (telemetry windows); this stage
counts nothing.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from kafka import KafkaAdminClient, TopicPartition

from panstream import estimators
from panstream.errors import StateError
from panstream.estimators.base import Estimator
from panstream.release.ledger import ShardLedger
from panstream.sources.kafka.identity import RecordGate, decoded
from panstream.sources.kafka.metrics import Metrics
from panstream.sources.kafka.progress import ranges
from panstream.sources.kafka.tail import KafkaTail, TailConfig
from panstream.state.checkpoint import Checkpointer, Shard, shard_key
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


class SliceStage(KafkaTail):
    """A member of ``<group>-slices`` owning the slices of its assigned internal partitions.

    Args:
        config: a :class:`TailConfig` whose ``topics`` is ``[internal topic]``, ``universe`` the
            whole universe and ``consumer`` the settings of the ``<group>-slices`` group.
        layout: the slice layout (the internal topic has ``layout.count`` partitions).
        metrics: the member's metrics (assigned partitions, checkpoints, lag).
        admin_client: connection settings for DeleteRecords (``None``: never delete).
    """

    def __init__(self, config: TailConfig, layout: SliceLayout, metrics: Metrics | None = None,
                 admin_client: Mapping[str, Any] | None = None, **kw: Any) -> None:
        super().__init__(config, metrics, **kw)
        self.layout = layout
        self._slice_of: dict[int, int] = {}  # id(estimator) -> slice index, for the encoder
        self.checkpointer = Checkpointer(self.saves, self._commit_sync, self._encode_slice)
        self._admin_client = dict(admin_client) if admin_client is not None else None
        self._admin: Any = None
        self.deletes = "on" if admin_client is not None else "off"
        self.on_assign: Any = None  # callback(list of slice indices) for the startup notice
        #: Where one-line operational notices go (the CLI prints them on stderr).
        self.notice: Callable[[str], None] = log.info
        #: Admits the internal records of this group's definition (``None``: every record, as
        #: before issue 35; :mod:`panstream.sources.kafka.identity`).
        self.gate: RecordGate | None = None

    # -------------------------------------------------------------- slices
    def _encode_slice(self, est: Estimator) -> bytearray:
        return encode_slice(est, self.layout, self._slice_of[id(est)])

    def _fresh_slice(self, r: int) -> Estimator:
        c = self.config
        kind, calibration = slice_family(c.estimator, c.calibration)  # a sketch's: rr bits
        return estimators.new(kind, self.layout.slice_universe(r), c.epsilon,
                              calibration=calibration, modulus=c.modulus,
                              ledger=ShardLedger(), layout=self.layout.table_layout)

    def _restore(self, tp: TopicPartition) -> Shard:
        r = tp.partition
        key = shard_key(tp.topic, r)
        c = self.config
        self._claim(tp)
        data = c.store.load(key)
        if data is None:
            est = self._fresh_slice(r)
        else:
            try:
                where = slice_of(head_params(data))
                if where is None or where[1] != r or where[0] != self.layout:
                    msg = (f"{key} in the store is not slice {r} of {self.layout.count} of "
                           f"{self.layout.universe.spec}: resume with the --universe and --slices "
                           "it was written with, or use a new state and group")
                    raise StateError(msg)
                kind, calibration = slice_family(c.estimator, c.calibration)
                expect = estimators.expect_of(kind, self.layout.slice_universe(r),
                                              c.epsilon, calibration, c.modulus)
                est = estimators.restore(data, expect=expect, layout=self.layout.table_layout)
                est.ledger = ShardLedger()
            finally:
                if isinstance(data, bytearray):
                    data[:] = bytes(len(data))
        self._slice_of[id(est)] = r
        return Shard(key, tp, est)

    def _restore_pending(self) -> None:
        fresh = sorted(self._pending)
        super()._restore_pending()
        if fresh:
            lost = expired(self.consumer, fresh)
            if lost:
                self.notice(expired_warning(self.config.topics[0], lost))
        if fresh and self.on_assign is not None:
            self.on_assign(sorted(tp.partition for tp in self.shards))

    def _release(self, tps: set[TopicPartition], save: bool) -> Any:
        gone = [self.shards[tp].estimator for tp in tps if tp in self.shards]
        out = super()._release(tps, save)
        self._last_activity = time.monotonic()  # a rebalance is not idleness
        for est in gone:
            self._slice_of.pop(id(est), None)
        return out

    def _apply(self, records: Mapping[TopicPartition, list[Any]]) -> None:
        for tp, recs in records.items():
            shard = self.shards.get(tp)
            if shard is None or not recs:
                continue
            r, gate, parts = tp.partition, self.gate, []
            for rec in recs:
                if not rec.value or (gate is not None and not gate.admits(rec, r)):
                    continue
                a = decoded(gate, r, self.layout.decode, r, rec.value)
                if a is not None:
                    parts.append(a)
            if parts:
                idx = parts[0] if len(parts) == 1 else np.concatenate(parts)
                for a in parts:
                    if a is not idx:
                        a.fill(0)
                shard.estimator.update_indices(idx)  # wipes idx
            shard.applied(recs[-1].offset)

    # -------------------------------------------------------------- checkpoint, then delete
    def checkpoint(self) -> None:
        """Every owned slice durable, then the offsets committed, then the records before them
        deleted; a commit that met a rebalance is said and left to the next checkpoint (nothing
        deleted: the records stay for whoever re-applies them)."""
        res = self.checkpointer.checkpoint(list(self.shards.values()))
        if res.saved:
            self.metrics.checkpoints.inc()
            self.summary.checkpoints += 1
        if res.committed:
            self._delete(res.committed)
        self._defer(res.deferred, res.why)

    #: What the notices call the partitions of the internal topic this stage owns.
    _unit = "slices"

    def _delete(self, committed: Mapping[Any, int]) -> None:
        """Delete the internal records before the committed offsets (durable in a slice)."""
        if self.deletes != "on" or self._admin_client is None:
            return
        try:
            if self._admin is None:
                self._admin = KafkaAdminClient(**self._admin_client)
            self._admin.delete_records({tp: off for tp, off in committed.items()})
        except Exception as exc:  # noqa: BLE001 - retention is the fallback; never fail on it
            self.deletes = "unsupported"
            self.notice(f"the broker did not delete consumed internal records "
                        f"({type(exc).__name__}); they expire with the internal topic's "
                        "retention.ms instead (never shorter than the source topics')")
            self._close_admin()

    def _close_admin(self) -> None:
        if self._admin is not None:
            with contextlib.suppress(Exception):  # closing a broken client
                self._admin.close()
            self._admin = None

    def close(self) -> None:
        super().close()
        self._close_admin()
        self._slice_of.clear()
