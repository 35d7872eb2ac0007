"""Prometheus metrics of a consumer: operational figures, counts only as noisy window releases."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from panstream.errors import ConfigurationError
from panstream.telemetry import CountWindow, TelemetryPolicy

#: The counts of one telemetry window. One item (a message in the ``item`` format, a line in
#: ``lines``) adds at most one message and one of items/malformed/outside: L1 sensitivity 2.
COUNT_FIELDS = ("messages", "items", "malformed", "outside")
KAFKA_TELEMETRY_SENSITIVITY = 2


class Metrics:
    """Prometheus metrics (``prometheus_client``), operational figures only.

    Every figure that counts messages or items is a per-window release of
    :class:`~panstream.telemetry.CountWindow`: the exact counts of a 1-s window get two-sided
    geometric noise at the telemetry epsilon (sensitivity 2: a message and its item) and are then
    forgotten; the gauges show the noisy rates of the last window (which may dip below zero when
    traffic is near zero), and :attr:`window` keeps only noisy totals. Nothing cumulative and
    exact is kept or exported. The other figures do not count items: per-partition consumer lag
    (the broker exposes it to any client), seconds since the last durable checkpoint,
    rebalances, checkpoints, partitions owned, and the telemetry epsilon and noise sd themselves.
    ``port=None`` disables the HTTP endpoint (figures still kept).

    Args:
        port, host: where to serve ``/metrics``.
        telemetry: the release policy of the counts (default: noisy at
            :data:`~panstream.telemetry.DEFAULT_TELEMETRY_EPSILON`, sensitivity 2).
        clock: monotonic clock (for tests).
    """

    def __init__(self, port: int | None = None, host: str = "127.0.0.1",
                 telemetry: TelemetryPolicy | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.telemetry = telemetry or TelemetryPolicy(sensitivity=KAFKA_TELEMETRY_SENSITIVITY)
        self._clock = clock
        self.window = CountWindow(self.telemetry, COUNT_FIELDS, now=clock())
        self.registry = CollectorRegistry()
        r = self.registry
        noisy = ("" if self.telemetry.exact else
                 ", noisy: geometric noise at panstream_kafka_telemetry_epsilon")
        self.messages_rate = Gauge("panstream_kafka_messages_per_second",
                                   f"Messages consumed per second (last window{noisy})", registry=r)
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
                                       "Event-level epsilon of the per-window counts (+Inf: exact "
                                       "counts, --exact-counts)", registry=r)
        self.telemetry_epsilon.set(math.inf if self.telemetry.epsilon is None
                                   else self.telemetry.epsilon)
        self.noise_sd = Gauge("panstream_kafka_telemetry_noise_sd",
                              "Noise sd of each count of one window (divide by the window's "
                              "seconds for the rates)", registry=r)
        self.noise_sd.set(self.telemetry.noise_sd)
        self.lag = Gauge("panstream_kafka_consumer_lag",
                         "Messages behind the partition's high-water mark", ["topic", "partition"],
                         registry=r)
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

    def batch(self, messages: int, items: int, malformed: int = 0, outside: int = 0) -> None:
        """Add one applied batch's exact counts to the current window (released at its close)."""
        self.window.add(messages=messages, items=items, malformed=malformed, outside=outside)

    def tick(self, now: float | None = None) -> None:
        """Close the window if it is due (call often, traffic or not: the schedule is the clock's)."""
        now = self._clock() if now is None else now
        if self.window.due(now):
            self.close_window(now)

    def close_window(self, now: float | None = None) -> None:
        """Release the current window's counts to the gauges and forget the exact ones."""
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

