"""Prometheus metrics of a consumer: liveness and lag by default; counts only as an opt-in."""

from __future__ import annotations

import time
import contextlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from panstream.errors import ConfigurationError
from panstream.release.telemetry import CountWindow, TelemetryPolicy
from panstream.schedule import Schedule

#: The counts of one telemetry window (an opt-in). One item (a message in the ``item`` format, a
#: line in ``lines``) adds at most one message and one of items/malformed/outside: L1 sensitivity 2.
COUNT_FIELDS = ("messages", "items", "malformed", "outside")
KAFKA_TELEMETRY_SENSITIVITY = 2


class Metrics:
    """Prometheus metrics (``prometheus_client``).

    By default nothing here counts messages or items (issue 21 §1: per-window counts with noise per
    *arrival* told a heavy client apart from its absence 266 times in 267). What is served shows
    that the consumer is alive and keeping up, from figures no arrival can move or that the broker
    already shows to any client of the group:

    * ``panstream_kafka_uptime_seconds`` (the clock), ``panstream_kafka_checkpoints`` and
      ``panstream_kafka_seconds_since_checkpoint`` (checkpoints run on a fixed schedule from the
      start, :mod:`panstream.schedule`), ``panstream_kafka_rebalances`` and
      ``panstream_kafka_assigned_partitions`` (the group's doing);
    * ``panstream_kafka_consumer_lag{topic,partition}`` (high-water mark minus position) and
      ``panstream_kafka_committed_offset{topic,partition}`` (what ``kafka-consumer-groups
      --describe`` shows anyone with access to the group), of every partition this member owns:
      the source topics' (routing stage; until issue 37 they were missing and only the internal
      topic's were served) and the internal topic's (slice stage), refreshed on the checkpoint
      clock.

    Under an opt-in (``--telemetry-epsilon``: noisy per-window releases of
    :class:`~panstream.telemetry.CountWindow` at an event-level epsilon, sensitivity 2; or
    ``--exact-counts``) the gauges ``panstream_kafka_{messages,items,malformed,outside}_per_second``
    exist too, with the last window's rate. ``panstream_kafka_telemetry_epsilon`` says which:
    0 (nothing counted), the epsilon per arrival, or +Inf (exact). ``port=None`` disables the HTTP
    endpoint (figures still kept).

    Args:
        port, host: where to serve ``/metrics``.
        telemetry: whether and how arrivals are counted (default: nothing counted).
        clock: monotonic clock (for tests).
    """

    def __init__(self, port: int | None = None, host: str = "127.0.0.1",
                 telemetry: TelemetryPolicy | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.telemetry = telemetry or TelemetryPolicy.none(KAFKA_TELEMETRY_SENSITIVITY)
        self._clock = clock
        self._start = clock()
        counting = self.telemetry.counts
        self.window: CountWindow | None = (CountWindow(self.telemetry, COUNT_FIELDS, now=self._start)
                                           if counting else None)
        self._windows = Schedule(self._start, self.telemetry.window) if counting else None
        self.registry = CollectorRegistry()
        r = self.registry
        if counting:
            noisy = ("" if self.telemetry.exact else
                     ", noisy: geometric noise at panstream_kafka_telemetry_epsilon per arrival")
            self.messages_rate = Gauge("panstream_kafka_messages_per_second",
                                       f"Messages consumed per second (last window{noisy})",
                                       registry=r)
            self.items_rate = Gauge("panstream_kafka_items_per_second",
                                    f"Items applied to the tables per second (last window{noisy})",
                                    registry=r)
            self.malformed_rate = Gauge("panstream_kafka_malformed_per_second",
                                        f"Malformed messages (or lines) skipped per second (last "
                                        f"window{noisy})", registry=r)
            self.outside_rate = Gauge("panstream_kafka_outside_per_second",
                                      f"Well-formed items outside the universe skipped per second "
                                      f"(last window{noisy})", registry=r)
        self.telemetry_epsilon = Gauge("panstream_kafka_telemetry_epsilon",
                                       "Epsilon per arrival of the message/item counts: 0 = nothing "
                                       "counted (default), +Inf = exact counts (--exact-counts)",
                                       registry=r)
        self.telemetry_epsilon.set(self.telemetry.cost(1))
        self.noise_sd = Gauge("panstream_kafka_telemetry_noise_sd",
                              "Noise sd of each count of one window (0 unless noisy counts are "
                              "on)", registry=r)
        self.noise_sd.set(self.telemetry.noise_sd)
        self.uptime = Gauge("panstream_kafka_uptime_seconds", "Seconds since the consumer started "
                            "(liveness)", registry=r)
        self.uptime.set_function(lambda: self._clock() - self._start)
        self.lag = Gauge("panstream_kafka_consumer_lag",
                         "Messages behind the partition's high-water mark", ["topic", "partition"],
                         registry=r)
        self.committed = Gauge("panstream_kafka_committed_offset",
                               "Offset committed at the last checkpoint (as the broker shows it)",
                               ["topic", "partition"], registry=r)
        self.since_checkpoint = Gauge("panstream_kafka_seconds_since_checkpoint",
                                      "Seconds since the last durable checkpoint", registry=r)
        self.rebalances = Counter("panstream_kafka_rebalances", "Partition assignments received",
                                  registry=r)
        self.checkpoints = Counter("panstream_kafka_checkpoints", "Durable checkpoints made",
                                   registry=r)
        self.assigned = Gauge("panstream_kafka_assigned_partitions", "Partitions owned",
                              registry=r)
        self.server: Any = None
        if port is not None:
            from prometheus_client import start_http_server

            try:
                self.server, _ = start_http_server(port, addr=host, registry=r)
            except OSError as exc:
                msg = f"cannot serve metrics on {host}:{port}: {exc.strerror}; pick a free port"
                raise ConfigurationError(msg) from None

    def show_lag(self, consumer: Any, tps: Iterable[Any]) -> None:
        """Each of ``tps``'s lag: its high-water mark minus ``consumer``'s position (a partition
        the consumer cannot say yet is left as it was). Call from the consumer's own thread."""
        for tp in list(tps):
            with contextlib.suppress(Exception):
                hw = consumer.highwater(tp)
                pos = consumer.position(tp, timeout_ms=0)
                if hw is not None and pos is not None:
                    self.lag.labels(tp.topic, str(tp.partition)).set(max(0, hw - pos))

    def show_committed(self, offsets: Mapping[Any, Any]) -> None:
        """The offsets just committed (``{TopicPartition: offset or OffsetAndMetadata}``)."""
        for tp, off in offsets.items():
            self.committed.labels(tp.topic, str(tp.partition)).set(getattr(off, "offset", off))

    def forget(self, tps: Iterable[Any]) -> None:
        """Drop the lag and committed gauges of partitions this member gave up."""
        for tp in tps:
            for g in (self.lag, self.committed):
                with contextlib.suppress(KeyError):
                    g.remove(tp.topic, str(tp.partition))

    def batch(self, messages: int, items: int, malformed: int = 0, outside: int = 0) -> None:
        """Add one applied batch's exact counts to the current window (an opt-in; by default the
        counts are dropped here and nothing outlives the batch)."""
        if self.window is not None:
            self.window.add(messages=messages, items=items, malformed=malformed, outside=outside)

    def tick(self, now: float | None = None) -> None:
        """Close the window if it is due (call often, traffic or not: the windows are a fixed grid
        from the start)."""
        if self._windows is None:
            return
        now = self._clock() if now is None else now
        if self._windows.due(now):
            self.close_window(self._windows.advance(now))

    def close_window(self, now: float | None = None) -> None:
        """Release the current window's counts to the gauges and forget the exact ones."""
        if self.window is None:
            return
        now = self._clock() if now is None else now
        out = self.window.close(now)
        dt = max(self.window.last_seconds, 1e-9)
        self.messages_rate.set(out["messages"] / dt)
        self.items_rate.set(out["items"] / dt)
        self.malformed_rate.set(out["malformed"] / dt)
        self.outside_rate.set(out["outside"] / dt)

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server = None
