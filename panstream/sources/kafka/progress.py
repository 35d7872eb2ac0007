"""What a routed group still owes: source messages not yet routed, routed records not yet applied.

A routed group (:mod:`.member`) has *drained* when

1. every source partition's committed offset (consumer group ``<group>``) is at its end: every
   message was routed and its routed records acknowledged (:meth:`.route.RouteStage.commit`), and
2. every partition of the internal topic ``<group>-cells`` has its committed offset (consumer
   group ``<group>-slices``) at its end: every routed record was applied to its slice and the
   slice's snapshot made durable before the commit (:class:`~panstream.state.checkpoint.
   Checkpointer`).

Only then is the store exactly one table fed every arrival whose source offset was committed.
:func:`group_pending` asks the broker, in that order (sources first: a routing commit made after
the internal topic's ends were read could otherwise add records unseen), and returns a
:class:`Pending` that says in one line what is left. ``panstream kafka --idle-timeout`` exits 0
only on an empty :class:`Pending`; ``panstream release -b`` and ``inspect -b`` print it.

**End offsets come from fetch responses.** A broker's ListOffsets(LATEST) is the usual way, but
Tansu (the test broker) answers it with the last batch's base offset + 1 (1 for a partition
holding hundreds of records written in one batch), which would make a group look drained while
it is not. A fetch response carries the partition's high-water mark on every broker, so the
probe assigns the partitions to a group-less consumer, seeks each to the group's committed offset
and fetches once (at most one small batch per partition, dropped unread): the high-water marks are
then exact. Reading the committed offsets (OffsetFetch) and the marks reveals nothing a client of
the group could not see (``kafka-consumer-groups --describe`` shows both).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

from panstream.errors import SourceError
from panstream.sources.kafka.config import unreachable_message
from panstream.sources.kafka.topology import (
    Shape,
    describe,
    identity_changes,
    no_auto_create,
    offset_changes,
)


class PendingWorkError(SourceError):
    """A bounded run stopped while its group still had work pending (exit 1, one line)."""


@dataclass(frozen=True)
class Pending:
    """Work a routed group has not finished (empty: drained).

    Attributes:
        source: source partition -> messages past the group's committed offset (end - committed).
        cells: internal partition (= slice) -> routed records past ``<group>-slices``' committed
            offset.
        internal_topic: the internal topic's name (for messages).
        never_routed: internal partitions that never held a record (end offset 0): the slices
            that truly never received anything.
        expired: internal partition -> routed records that left the topic (retention) before
            any slice applied them: lost, not pending (:func:`~.slices.expired`).
        changed: the group's topics changed identity under it (:func:`~.topology.offset_changes`:
            a topic gone, fewer partitions, ends below the commits), one phrase each: such a
            group is not drained, whatever its counts say (issue 35).
    """

    source: dict[tuple[str, int], int] = field(default_factory=dict)
    cells: dict[int, int] = field(default_factory=dict)
    internal_topic: str = ""
    never_routed: frozenset[int] = frozenset()
    expired: dict[int, int] = field(default_factory=dict)
    changed: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.source or self.cells or self.changed)

    @property
    def records(self) -> int:
        """Routed records not yet applied (all slices)."""
        return sum(self.cells.values())

    @property
    def messages(self) -> int:
        """Source messages not yet routed and committed."""
        return sum(self.source.values())

    def describe(self) -> str:
        """One line: what is pending (``"nothing pending"`` when drained).

        >>> Pending({("logs", 3): 12}, {8: 40, 9: 2}, "g-cells").describe()
        '42 routed records unapplied in g-cells (slices 8-9) and 12 source messages not yet routed (logs/3)'
        """
        parts = []
        if self.cells:
            parts.append(f"{self.records:,} routed records unapplied in {self.internal_topic} "
                         f"(slices {ranges(sorted(self.cells))})")
        if self.source:
            where = ", ".join(f"{t}/{p}" for t, p in sorted(self.source))
            parts.append(f"{self.messages:,} source messages not yet routed ({where})")
        out = " and ".join(parts) if parts else "nothing pending"
        if self.changed:
            out = f"the group's topics changed under it: {'; '.join(self.changed)} ({out})"
        if self.expired:
            out += (f"; {sum(self.expired.values()):,} routed records of slices "
                    f"{ranges(self.expired)} expired from {self.internal_topic} unapplied (lost)")
        return out

    def to_dict(self) -> dict[str, Any]:
        """For ``--json``: counts by partition (offsets, which any client of the group sees)."""
        return {"drained": not self, "routed_records_unapplied": self.records,
                "slices_pending": sorted(self.cells),
                "source_messages_unrouted": self.messages,
                "routed_records_expired": sum(self.expired.values()),
                "topology_changed": list(self.changed)}


def ranges(xs: Iterable[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"``.

    >>> ranges([0, 1, 2, 5, 7, 8])
    '0-2, 5, 7-8'
    """
    out: list[str] = []
    run: list[int] = []
    for x in sorted(xs):
        if run and x == run[-1] + 1:
            run.append(x)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [x]
    if run:
        out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ", ".join(out) if out else "-"


class GroupProgress:
    """Asks the broker what a routed group has not finished (module docstring).

    Args:
        client: connection and security settings (:func:`~.config.client_config`).
        group: the routed group (``-g``); its slices group is ``<group>-slices``.
        topics: the source topics (``None``: check only the internal topic, as a release does).
        internal_topic: ``<group>-cells``.
        timeout: seconds to wait for the high-water marks.
        recorded: the source topics' identity as the group definition recorded it (``release
            -b`` and ``inspect -b``): one that differs now, and that no member has read since,
            is a change (:func:`~.topology.identity_changes`). A member passes none: it says a
            re-created topic at start and leaves it to the offsets (docs/kafka.md).
    """

    def __init__(self, client: Mapping[str, Any], group: str, topics: list[str] | None,
                 internal_topic: str, timeout: float = 15.0,
                 recorded: Mapping[str, Shape | None] | None = None) -> None:
        self.client = dict(client)
        self.recorded = dict(recorded or {})
        self.group = group
        self.topics = list(topics) if topics is not None else None
        self.internal_topic = internal_topic
        self.timeout = timeout
        self._admin: Any = None
        self._probe: Any = None

    def _open(self) -> None:
        try:
            if self._admin is None:
                self._admin = KafkaAdminClient(**self.client)
            if self._probe is None:
                self._probe = no_auto_create(KafkaConsumer(
                                            **self.client, group_id=None, enable_auto_commit=False,
                                            allow_auto_create_topics=False,
                                            auto_offset_reset="earliest", fetch_max_wait_ms=50,
                                            max_partition_fetch_bytes=1024,
                                            fetch_max_bytes=1 << 16))
        except KafkaError as exc:
            raise SourceError(unreachable_message(self.client, exc)) from None

    def committed(self, group: str) -> dict[TopicPartition, int]:
        """A group's committed offsets (OffsetFetch; ``describe_groups`` fails on Tansu)."""
        self._open()
        res = self._admin.list_group_offsets(group)
        res = res.get(group, res)
        out = {}
        for tp, om in res.items():
            off = om.offset if hasattr(om, "offset") else om[0]
            if off is not None and off >= 0:
                out[tp] = int(off)
        return out

    def partitions(self, topic: str) -> list[TopicPartition]:
        """The partitions of ``topic`` (waits for metadata; none if it does not exist)."""
        self._open()
        deadline = time.monotonic() + self.timeout
        while True:
            parts = self._probe.partitions_for_topic(topic)
            if parts or time.monotonic() > deadline:
                return [TopicPartition(topic, p) for p in sorted(parts or ())]
            time.sleep(0.1)

    def ends(self, tps: list[TopicPartition], start: Mapping[TopicPartition, int]
             ) -> dict[TopicPartition, int]:
        """High-water marks of ``tps`` from fetch responses (the probe seeks to ``start``).

        Raises:
            SourceError: the broker did not answer for every partition within the timeout.
        """
        self._open()
        if not tps:
            return {}
        c = self._probe
        c.assign(tps)
        for tp in tps:
            c.seek(tp, start.get(tp, 0))
        deadline = time.monotonic() + self.timeout
        while any(c.highwater(tp) is None for tp in tps):
            if time.monotonic() > deadline:
                missing = [f"{tp.topic}/{tp.partition}" for tp in tps if c.highwater(tp) is None]
                msg = (f"the broker gave no high-water mark for {', '.join(missing)} within "
                       f"{self.timeout:g} s: cannot tell whether the group has drained")
                raise SourceError(msg)
            got = c.poll(timeout_ms=100, max_records=1)
            got.clear()  # the records themselves are not needed: only the marks
        out = {tp: int(c.highwater(tp)) for tp in tps}
        c.assign([])
        return out

    def pending(self) -> Pending:
        """What the group has not finished: sources first, then the internal topic.

        Raises:
            SourceError: the broker cannot be reached or gives no high-water mark.
        """
        try:
            source: dict[tuple[str, int], int] = {}
            done = self.committed(self.group)
            # every topic the group committed on, not only -t's (a release knows none of them)
            names = sorted({*(self.topics or ()), *(tp.topic for tp in done)})
            shapes = describe(self._admin, [*names, *self.recorded, self.internal_topic])
            counts = {t: (s.partitions if s else None) for t, s in shapes.items()}
            tps = [TopicPartition(t, p) for t in names for p in range(counts.get(t) or 0)]
            src_ends = self.ends(tps, done)
            for tp, end in src_ends.items():
                if self.topics and tp.topic in self.topics and end > done.get(tp, 0):
                    source[(tp.topic, tp.partition)] = end - done.get(tp, 0)
            applied = self.committed(f"{self.group}-slices")
            tps = self.partitions(self.internal_topic) if counts.get(self.internal_topic) else []
            cells: dict[int, int] = {}
            never: set[int] = set()
            lost: dict[int, int] = {}
            ends = self.ends(tps, applied)
            starts = self._probe.beginning_offsets(tps) if tps else {}
            for tp, end in ends.items():
                upto, start = applied.get(tp, 0), int(starts.get(tp) or 0)
                if end == 0:
                    never.add(tp.partition)
                if tp in applied and start > upto:  # left the topic before a slice applied them
                    lost[tp.partition] = start - upto
                if end > max(upto, start):
                    cells[tp.partition] = end - max(upto, start)
            changed = offset_changes(_keyed(done), _keyed(src_ends), counts)
            changed += offset_changes(_keyed(applied), _keyed(ends), counts)
            changed += identity_changes(self.recorded, shapes, {tp.topic for tp in done})
        except KafkaError as exc:
            msg = f"cannot ask the broker what the group has pending: {exc}"
            raise SourceError(msg) from None
        return Pending(source, cells, self.internal_topic, frozenset(never), lost, tuple(changed))

    def close(self) -> None:
        for c in (self._probe, self._admin):
            if c is not None:
                with contextlib.suppress(Exception):
                    c.close()
        self._probe = self._admin = None


def _keyed(offsets: Mapping[TopicPartition, int]) -> dict[tuple[str, int], int]:
    return {(tp.topic, tp.partition): off for tp, off in offsets.items()}


def group_of_internal(topic: str) -> str:
    """The routed group of an internal topic name (``<group>-cells`` -> ``<group>``)."""
    return topic.removesuffix("-cells")


__all__ = ["GroupProgress", "Pending", "PendingWorkError", "group_of_internal", "ranges"]
