"""The per-partition layout under the topology watch of the routed one (issue 35).

A per-partition member (:class:`~.tail.KafkaTail`, ``--layout partition``) keeps one table per
source partition, each restored from and checkpointed to the offsets group ``GROUP`` committed.
When a source topic is deleted and re-created under the same name, those offsets belong to the
old topic: before this, such a member went on and committed its old positions onto the new topic
(or its commits failed), silently. :class:`WatchedTail` gives it the routed member's watch
(:class:`~.topology.TopologyWatch`, a thread describing the topics every 2 s): on a new topic id,
a topic gone or fewer partitions it stops the member as a signal would, **commits no offset** from
then on (its positions belong to the old topic), makes the final checkpoint (the snapshots hold
what was applied) and stops with exit 1 and the one line of :func:`~.topology.stop_line`. Every
commit also looks at the topics first: a checkpoint between two looks of the watch would
otherwise commit the old topic's positions onto the new one (measured on Tansu: it did, every
partition's).

The hook into :class:`~.tail.KafkaTail` is its ``consumer_factory`` argument alone: the watched
runner hands it the group consumer wrapped so that its commits are held once a change is seen.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kafka.errors import KafkaError

from panstream.errors import SourceError
from panstream.sources.kafka.config import client_config, unreachable_message
from panstream.sources.kafka.joins import group_consumer
from panstream.sources.kafka.topology import TopologyError, TopologyWatch, stop_line


class _Either:
    """Set when either the caller's stop or the watch's is (duck-typed ``threading.Event``)."""

    def __init__(self, *events: threading.Event) -> None:
        self.events = events

    def is_set(self) -> bool:
        return any(e.is_set() for e in self.events)

    def set(self) -> None:
        self.events[-1].set()

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True


class HeldCommits:
    """A group consumer whose commits are skipped once ``held()`` says so (everything else is
    the consumer's own)."""

    def __init__(self, consumer: Any, held: Callable[[], bool]) -> None:
        self._consumer = consumer
        self._held = held

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)

    def commit(self, *args: Any, **kwargs: Any) -> Any:
        if self._held():
            return None
        return self._consumer.commit(*args, **kwargs)

    def commit_async(self, *args: Any, **kwargs: Any) -> Any:
        if self._held():
            async def nothing() -> None:
                return None

            return nothing()
        return self._consumer.commit_async(*args, **kwargs)


class WatchedTail:
    """Run a per-partition member under the topology watch (module docstring).

    Args:
        config: the member's :class:`~.tail.TailConfig`.
        notice: where one-line notices go.
        admin_factory: builds the watch's admin client (tests inject one).
        consumer: builds the group consumer (tests inject one).

    The builder makes the :class:`~.tail.KafkaTail` with ``consumer_factory=``
    :meth:`consumer_factory` and sets :attr:`tail`.
    """

    def __init__(self, config: Any, notice: Callable[[str], None],
                 admin_factory: Callable[[], Any] | None = None,
                 consumer: Callable[..., Any] = group_consumer) -> None:
        self.config = config
        self.notice = notice
        self.tail: Any = None
        self._consumer = consumer
        self._changed = threading.Event()
        self.watch = TopologyWatch(admin_factory or self._admin, list(config.topics), "", 0,
                                   on_change=self._changed.set)

    def _admin(self) -> Any:
        from kafka import KafkaAdminClient

        client = client_config(self.config.consumer)
        try:
            return KafkaAdminClient(**client)
        except KafkaError as exc:
            raise SourceError(unreachable_message(client, exc)) from None

    def consumer_factory(self, **settings: Any) -> HeldCommits:
        """The group consumer :class:`~.tail.KafkaTail` reads with; its commits stop once the
        topics changed."""
        return HeldCommits(self._consumer(**settings), self._held)

    def _held(self) -> bool:
        """Whether commits are held: the topics changed, as the watch saw it or a look now sees
        it. Every commit looks first (one Metadata request, about 2 ms on Tansu, once a
        checkpoint): the watch looks every 2 s, and a checkpoint inside that span would commit
        the old topic's positions onto a topic deleted or re-created under the same name."""
        if not self._changed.is_set() and self.watch.check():
            self._changed.set()
        return self._changed.is_set()

    @property
    def summary(self) -> Any:
        return self.tail.summary

    def run(self, stop: threading.Event | None = None) -> Any:
        """The member's run, stopped by ``stop`` or by a change of its topics.

        Raises:
            TopologyError: the source topics changed under the member (exit 1, one line).
            SourceError, StateError: as :meth:`~.tail.KafkaTail.run`.
        """
        stop = stop or threading.Event()
        self.watch.start()
        try:
            try:
                summary = self.tail.run(_Either(stop, self._changed))
            except (SourceError, KafkaError):
                self._topology_stop()  # an error the change caused says the change instead
                raise
            self._topology_stop()
            return summary
        finally:
            self.watch.stop()

    def _topology_stop(self) -> None:
        changes = self.watch.check()  # what it kept, or a look now
        if changes:
            self._changed.set()
            self.tail.summary.stopped_by = "topology"
            raise TopologyError(stop_line(changes, "")) from None


__all__ = ["HeldCommits", "WatchedTail"]
