"""What the two file drivers share: ``panstream ingest`` (:class:`panstream.sources.ingest.Ingestor`)
and ``panstream ingest --window`` (:class:`panstream.sources.windowed.WindowedIngestor`).

:class:`Driver` holds their common settings (the log format and one line parser per format
met, the state path, the release's epsilon and mechanism, the callbacks, the telemetry policy, the
clocks), the stop flag a signal handler sets, and the one way a periodic checkpoint is written
(:meth:`Driver._save`: atomically, its file's times set to the scheduled instant, so they show
the schedule rather than when the write finished). Each driver owns its own commit order.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from panstream.estimators.base import Estimator
from panstream.inputs.parser import Format, LineParser, parse_format
from panstream.release.telemetry import TelemetryPolicy
from panstream.state import persist
from panstream.universe import Universe

__all__ = ["Driver"]


class Driver:
    """The settings, parsers, stop flag and checkpoint writes both file drivers share.

    Args:
        universe: the universe lines are parsed into.
        fmt: the log format (``auto`` is resolved per input from its first chunk).
        state_path: where state is checkpointed (``None``: memory only).
        release_epsilon, release_mechanism: of each release.
        on_notice: one-line operational messages.
        on_progress: called on the progress schedule with the driver's stats.
        progress_every: seconds between progress reports.
        telemetry: whether and how arrivals are counted (default: nothing counted).
        clock, wall_clock: monotonic and wall clocks (for tests).
    """

    def __init__(self, universe: Universe, fmt: Format, *, state_path: str | None,
                 release_epsilon: float | None, release_mechanism: str,
                 on_notice: Callable[[str], None] | None, on_progress: Callable[[Any], None] | None,
                 progress_every: float, telemetry: TelemetryPolicy | None,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.universe = universe
        self.format = fmt
        self.state_path = os.fspath(state_path) if state_path is not None else None
        self.release_epsilon = release_epsilon
        self.release_mechanism = release_mechanism
        self.on_notice = on_notice
        self.on_progress = on_progress
        self.progress_every = progress_every
        self.telemetry = telemetry or TelemetryPolicy()
        self.clock = clock
        self.wall_clock = wall_clock
        self._parsers: dict[str, LineParser] = {}
        self._stop = False
        self._t0 = 0.0  # the run's start on the monotonic clock
        self._wall0 = 0.0  # and on the wall clock

    # ------------------------------------------------------------------ control
    def request_stop(self) -> None:
        """Ask the loop to stop after the current chunk (safe to call from a signal handler)."""
        self._stop = True

    @property
    def stopping(self) -> bool:
        return self._stop

    # ------------------------------------------------------------------ steps
    def _notice(self, msg: str) -> None:
        if self.on_notice:
            self.on_notice(msg)

    def _parser(self, kind: str) -> LineParser:
        """The line parser of format ``kind`` (one per format met)."""
        p = self._parsers.get(kind)
        if p is None:
            fmt = self.format if kind == self.format.spec else parse_format(kind)
            p = self._parsers[kind] = LineParser(self.universe, fmt)
        return p

    def _save(self, est: Estimator, path: str, at: float | None) -> None:
        """Save ``est`` to ``path`` atomically; ``at``, the scheduled instant of a periodic
        checkpoint (monotonic clock), becomes the file's access and modification times."""
        persist.save(est, path)
        if at is not None:
            wall = int(round((self._wall0 + (at - self._t0)) * 1e9))
            os.utime(path, ns=(wall, wall))
