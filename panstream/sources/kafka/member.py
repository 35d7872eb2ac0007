"""A member of a routed group: the routing stage and the slice stage in one loop.

``panstream kafka`` (default ``--layout slices``) runs one :class:`Member` per process. Each loop
turn polls the source topics (:class:`~panstream.sources.kafka.route.RouteStage`: parse, route,
send) and the internal topic (:class:`~panstream.sources.kafka.slices.SliceStage`: apply to the
owned slices), ticks the telemetry window, and on the checkpoint clock commits the routed source
offsets (after ``acks=all``) and checkpoints the slices (snapshots durable, then commit, then
DeleteRecords). One thread: kafka-python runs each group's protocol on its own IO thread, and the
rebalance listeners run there only while this thread waits in that consumer's ``poll()``.

Stopping (SIGTERM/SIGINT, or both stages idle for ``idle_timeout``): the routing stage decides
a still-open sample, flushes and commits; the slice stage then drains what is routed to its
partitions (at most ``drain_seconds``), makes its final checkpoint, and both leave their groups.
Records routed to partitions this member does not own stay in the internal topic for their owner:
while the whole group is down they wait there for at most the topic's ``retention.ms``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from kafka import KafkaConsumer
from kafka.errors import KafkaError

from panstream.errors import SourceError
from panstream.sources.kafka.config import unreachable_message
from panstream.sources.kafka.route import RouteStage, ensure_internal_topic
from panstream.sources.kafka.slices import SliceStage
from panstream.sources.kafka.tail import RunSummary, kafka_errors


class Member:
    """Run a :class:`RouteStage` and a :class:`SliceStage` until stopped (module docstring).

    Args:
        route, slices: the two stages (sharing one :class:`~panstream.sources.kafka.Metrics`).
        client: connection settings for creating the internal topic.
        retention_ms: ``retention.ms`` of a newly created internal topic.
        drain_seconds: how long the slice stage may drain on stop.
    """

    def __init__(self, route: RouteStage, slices: SliceStage, client: Mapping[str, Any],
                 retention_ms: int, drain_seconds: float = 10.0) -> None:
        self.route = route
        self.slices = slices
        self.client = dict(client)
        self.retention_ms = retention_ms
        self.drain_seconds = drain_seconds
        self.summary = slices.summary

    def _ensure_topic(self) -> None:
        try:
            probe = KafkaConsumer(**self.client)
        except KafkaError as exc:
            raise SourceError(unreachable_message(self.client, exc)) from None
        try:
            ensure_internal_topic(self.client, self.route.config.internal_topic,
                                  self.route.config.layout, self.retention_ms, probe)
        finally:
            probe.close()

    def _idle(self, now: float) -> bool:
        s = self.slices
        if s.config.idle_timeout is None:
            return False
        ready = s._ever_assigned and self.route.assignments > 0
        last = max(self.route.last_activity, s._last_activity)
        return now - last >= s.config.idle_timeout + (0.0 if ready else 30.0)

    def run(self, stop: threading.Event | None = None) -> RunSummary:
        """Route and apply until ``stop`` is set or both stages are idle; final commits first.

        Raises:
            SourceError: a broker is unreachable, a commit or an acknowledgement failed, or the
                topic's values do not parse (first sample).
            StateError: a slice could not be saved or restored.
            ConfigurationError: the internal topic has another partition count than ``--slices``.
        """
        stop = stop or threading.Event()
        s, r = self.slices, self.route
        t0 = time.monotonic()
        half = max(1, s.config.poll_timeout_ms // 2)
        self._ensure_topic()
        try:
            r.open()
            s.open()
            last_commit = time.monotonic()
            with kafka_errors():
                while not stop.is_set():
                    routed = r.poll_once(0 if s._pending else half)
                    applied = s.poll_once(0 if routed else half)
                    now = time.monotonic()
                    if not (routed or applied) and self._idle(now):
                        self.summary.stopped_by = "idle-timeout"
                        break
                    s.metrics.tick(now)
                    if now - last_commit >= s.config.checkpoint_interval:
                        r.commit()
                        last_commit = now
                    s.maintain(now)
                else:
                    self.summary.stopped_by = "signal"
                r.finish()
                self._drain()
                s.final_checkpoint()
        finally:
            r.close()
            s.close()
            s.metrics.close_window()
            s._summarize_counts()
            self.summary.seconds = time.monotonic() - t0
        return self.summary

    def _drain(self) -> None:
        """Apply what was routed to this member's slices, until caught up (bounded)."""
        s = self.slices
        deadline = time.monotonic() + self.drain_seconds
        quiet = 0
        while time.monotonic() < deadline and quiet < 2:
            quiet = 0 if s.poll_once(200) else quiet + 1
            if quiet and not self._caught_up():
                quiet = 0

    def _caught_up(self) -> bool:
        c = self.slices.consumer
        for tp in self.slices.shards:
            hw = c.highwater(tp)
            pos = c.position(tp, timeout_ms=0) if hw is not None else None
            if hw is not None and pos is not None and pos < hw:
                return False
        return True
