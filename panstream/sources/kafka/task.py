"""What the group loop holds: a task per assigned partition, behind one small interface.

Kafka Streams' ``TaskManager`` owns the group's life and holds ``Task``s that it does not look
inside; panstream's :class:`~panstream.sources.kafka.group.GroupLoop` does the same (issue 35).
A **task** is the state of one assigned partition: a partition shard (``--layout partition``,
:mod:`.tail`), a routed slice (:mod:`.slices`) or a window slice (``--window``, :mod:`.windows`).
Its four verbs are all the loop calls:

* :meth:`Task.restore`: read the partition's snapshot (or start fresh D0 tables), after the loop
  has claimed the partition (:mod:`panstream.state.fence`);
* :meth:`Task.apply`: apply one poll's records of the partition;
* :meth:`Task.snapshot`: make the partition's state durable (steps 1-3 of
  :mod:`panstream.state.checkpoint`; on the clock, time-driven state moves first);
* :meth:`Task.close`: wipe every table (the partition was handed over, or the member stops).

A **task kind** (:class:`TaskKind`) makes the tasks of one layout and holds what they share
(the decoder, the slice layout, the window store); it adds the layout's steps around the loop's
(windows released after a checkpoint); :class:`KindSteps` gives the steps a kind does not take.

The loop moves each task through named states (:class:`TaskState`), as Kafka Streams' do:
``CREATED`` (assigned, claimed) -> ``RESTORING`` (its snapshot read) -> ``RUNNING`` (applying,
snapshotted on the clock) -> ``SUSPENDED`` (revoked: made durable for its next owner) ->
``CLOSED`` (wiped). A partition whose claim meets a rebalance has no task yet: it stays paused
in the loop's pending set and is claimed after the next poll.
"""

from __future__ import annotations

import enum
from typing import Any, Protocol

from panstream.state.checkpoint import Shard

#: A poll's counts of one partition: messages, items, malformed, outside (telemetry).
Counts = tuple[int, int, int, int]
NO_COUNTS: Counts = (0, 0, 0, 0)


class TaskState(enum.Enum):
    """Where a task is in its life (module docstring)."""

    CREATED = "created"
    RESTORING = "restoring"
    RUNNING = "running"
    SUSPENDED = "suspended"
    CLOSED = "closed"


class Task(Protocol):
    """One assigned partition's state (module docstring).

    Attributes:
        shard: the partition's store key, its handle and where the task is in it
            (``next_offset``: the last applied offset + 1, committed after :meth:`snapshot`).
        state: the task's :class:`TaskState` (set by the loop).
    """

    shard: Shard
    state: TaskState

    def restore(self) -> None:
        """Read the snapshot (or start fresh), after the loop's claim.

        Raises:
            StateError: the snapshot is corrupt or was written with other parameters.
            FencedError: another member claimed the partition since.
        """

    def apply(self, records: list[Any]) -> Counts:
        """Apply one poll's records of the partition; returns their telemetry counts."""

    def snapshot(self, now: float | None) -> None:
        """Make the state durable; ``now`` (the wall clock of a checkpoint on the clock):
        time-driven state moves first (windows close); ``None``: a save on revoke.

        Raises:
            FencedError, StateError, OSError: not made durable (nothing is committed).
        """

    def close(self) -> None:
        """Wipe every table of the task."""


class TaskKind(Protocol):
    """The tasks of one layout, and the layout's steps around the loop's (module docstring).

    Attributes:
        unit: what notices call the partitions (``partitions``, ``slices``).
        counts: whether :meth:`Task.apply`'s counts feed the telemetry window (the per-partition
            layout; the routed layouts count in the routing stage).
        every_checkpoint: whether a checkpoint that saved nothing counts all the same (windows:
            it follows the schedule).
        one_sync: whether a checkpoint's snapshots share one directory fsync at its end
            (:func:`~panstream.state.files.one_directory_sync`: the state store's; not the
            window store's, whose writes happen under a slice's claim).
    """

    unit: str
    counts: bool
    every_checkpoint: bool
    one_sync: bool

    def bind(self, loop: Any) -> None:
        """Called once by the loop that holds the tasks (their context: consumer, notices)."""

    def task(self, tp: Any) -> Task:
        """A new task (``CREATED``) for the assigned partition ``tp``."""

    def claim_key(self, tp: Any) -> str:
        """The store key the partition's claim is held under."""

    def claims(self) -> Any:
        """The fenced store claims are made in (``None``: the loop's state store)."""

    def turn(self, now: float) -> None:
        """Each loop turn, before a checkpoint that may be due (``now``: the wall clock)."""

    def restored(self, fresh: list[Any]) -> None:
        """After a batch of new tasks was restored."""

    def checkpointed(self, final: bool) -> None:
        """After every checkpoint (``final``: the last before leaving)."""

    def open(self) -> None:
        """When the loop joins its group."""

    def close(self) -> None:
        """When the loop leaves its group (after its tasks were closed)."""


class KindSteps:
    """The steps a :class:`TaskKind` does not take, as nothing (its ``loop`` set by
    :meth:`bind`); a kind defines the steps it takes."""

    loop: Any = None

    def bind(self, loop: Any) -> None:
        self.loop = loop

    def claims(self) -> Any:
        return None

    def turn(self, now: float) -> None:
        pass

    def restored(self, fresh: list[Any]) -> None:
        pass

    def checkpointed(self, final: bool) -> None:
        pass

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass
