"""A member of a routed group: the routing stage and the slice stage, one thread each.

``panstream kafka`` (default ``--layout slices``) runs one :class:`Member` per process: the
routing stage (:class:`~panstream.sources.kafka.route.RouteStage`: parse, route, send; commit
the source offsets after ``acks=all`` on the checkpoint clock) in a thread of its own, and the
slice stage (:class:`~panstream.sources.kafka.slices.SliceStage`: apply to the owned slices,
checkpoint, commit, DeleteRecords) in the calling thread, which also ticks the telemetry window.

Why two threads: each kafka-python consumer must be waiting in its own ``poll()`` when its group
join completes (kafka-python 3.0.12 discards a JoinGroup that finished between two polls and
joins again; against Tansu, whose joins take seconds, two consumers polled in turn from one
thread rejoined forever). Each consumer's rebalance listener runs on that consumer's IO thread
while its owner thread waits in ``poll()``, so a stage's state is never touched by two threads.
The only shared object is the telemetry window, behind a lock.

Stopping (SIGTERM/SIGINT, or both stages idle for ``idle_timeout``): the routing thread decides
a still-open sample, flushes and commits, and leaves its group; the slice stage then drains what
was routed to its partitions (at most ``drain_seconds``), makes its final checkpoint and leaves.
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
        self._lock = threading.Lock()
        self._route_stop = threading.Event()
        self._route_error: BaseException | None = None
        metrics = slices.metrics

        def count(messages: int, items: int, malformed: int, outside: int) -> None:
            with self._lock:
                metrics.batch(messages, items, malformed, outside)

        route.count = count

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

    # -------------------------------------------------------------- the routing thread
    def _route_loop(self) -> None:
        r = self.route
        interval = self.slices.config.checkpoint_interval
        timeout = self.slices.config.poll_timeout_ms
        try:
            with kafka_errors():
                r.open()
                last_commit = time.monotonic()
                while not self._route_stop.is_set():
                    r.poll_once(timeout)
                    if time.monotonic() - last_commit >= interval:
                        r.commit()
                        last_commit = time.monotonic()
                r.finish()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread, raised there
            self._route_error = exc
        finally:
            r.close()

    # -------------------------------------------------------------- the main thread
    def run(self, stop: threading.Event | None = None) -> RunSummary:
        """Route and apply until ``stop`` is set or both stages are idle; final commits first.

        Raises:
            SourceError: a broker is unreachable, a commit or an acknowledgement failed, or the
                topic's values do not parse (first sample).
            StateError: a slice could not be saved or restored.
            ConfigurationError: the internal topic has another partition count than ``--slices``.
        """
        stop = stop or threading.Event()
        s = self.slices
        t0 = time.monotonic()
        self._ensure_topic()
        router = threading.Thread(target=self._route_loop, name="panstream-route", daemon=True)
        try:
            with kafka_errors():
                s.open()
                router.start()
                while not stop.is_set() and self._route_error is None:
                    applied = s.poll_once()
                    now = time.monotonic()
                    if not applied and self._idle(now):
                        self.summary.stopped_by = "idle-timeout"
                        break
                    with self._lock:
                        s.metrics.tick(now)
                    s.maintain(now)
                else:
                    self.summary.stopped_by = "signal" if self._route_error is None else "error"
                self._route_stop.set()
                router.join()
                if self._route_error is None:
                    self._drain()
                s.final_checkpoint()
            if self._route_error is not None:
                raise self._route_error
        finally:
            self._route_stop.set()
            if router.is_alive():
                router.join(timeout=30)
            s.close()
            with self._lock:
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
