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
commit also looks at the topics first (:class:`LookBeforeCommit`; the routed member's routing
stage is given the same, :func:`~.build.routed_member`).

The hook into :class:`~.tail.KafkaTail` is its ``consumer_factory`` argument alone: the watched
runner hands it the group consumer wrapped so that its commits are held once a change is seen.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kafka.errors import KafkaError

from panstream.errors import SourceError
from panstream.sources.kafka.config import client_config, unreachable_message
from panstream.sources.kafka.joins import group_consumer
from panstream.sources.kafka.topology import TopologyError, TopologyWatch, stop_line


def admin_of(client: Mapping[str, Any]) -> Callable[[], Any]:
    """A factory of kafka-python admin clients with ``client``'s settings (for a
    :class:`~.topology.TopologyWatch`); one that finds no broker raises the one-line
    :class:`~panstream.errors.SourceError`."""
    def make() -> Any:
        from kafka import KafkaAdminClient

        try:
            return KafkaAdminClient(**client)
        except KafkaError as exc:
            raise SourceError(unreachable_message(dict(client), exc)) from None

    return make


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

    def __init__(self, consumer: Any, held: Callable[[], bool],
                 on_close: Callable[[], None] | None = None) -> None:
        self._consumer = consumer
        self._held = held
        self._on_close = on_close

    def close(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._consumer.close(*args, **kwargs)
        finally:
            if self._on_close is not None:
                self._on_close()

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


class LookBeforeCommit:
    """Hold a consumer's commits once its topics changed: every commit first looks at them
    (:meth:`~.topology.TopologyWatch.check`: one Metadata request, about 2 ms on Tansu, a second
    look only when the first shows a change) against the baseline of ``watch``, taken when the
    first consumer is made if the watch has none yet. A broker that does not answer holds
    nothing (no answer is no change, as for the watch).

    Why: a watch looks every 2 s, and a checkpoint between two looks would commit the old
    topic's positions onto a topic deleted and re-created under the same name (measured on
    Tansu with the per-partition layout: it did, every partition's).
    """

    def __init__(self, watch: TopologyWatch, changed: threading.Event | None = None,
                 owns_watch: bool = False) -> None:
        self.watch = watch
        self.changed = changed or threading.Event()
        self.owns_watch = owns_watch  # close the watch's admin client with the consumer

    def held(self) -> bool:
        """Whether commits are held: a change was seen before, or a look now sees one."""
        if not self.changed.is_set() and self.watch.check():
            self.changed.set()
        return self.changed.is_set()

    def wrap(self, factory: Callable[..., Any]) -> Callable[..., HeldCommits]:
        """``factory``'s consumers, with their commits held once the topics changed."""
        def make(**settings: Any) -> HeldCommits:
            if not self.watch.baseline:
                with contextlib.suppress(Exception):  # no baseline: nothing held, as before
                    self.watch.baseline = self.watch.look()
            return HeldCommits(factory(**settings), self.held,
                               self.watch.stop if self.owns_watch else None)

        return make


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
        self._changed = threading.Event()
        self.watch = TopologyWatch(admin_factory or admin_of(client_config(config.consumer)),
                                   list(config.topics), "", 0,
                                   on_change=self._changed.set)
        #: The group consumer :class:`~.tail.KafkaTail` reads with (its ``consumer_factory``):
        #: its commits are held once the topics changed.
        self.consumer_factory = LookBeforeCommit(self.watch, self._changed).wrap(consumer)

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


__all__ = ["HeldCommits", "LookBeforeCommit", "WatchedTail", "admin_of"]
