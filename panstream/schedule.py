"""A fixed clock: instants at ``start + k * interval`` that no arrival can move.

Whatever panstream does periodically (checkpoints, periodic releases, progress lines, telemetry
windows) is visible from outside: a state file's times and inode change, a line appears on stderr.
If the *moment* of such an event depended on the input (say, "``interval`` seconds after the last
checkpoint, at the first loop turn after that", where a loop turn ends early when a line arrives),
an observer who can only ``stat()`` the state file would learn that something arrived (issue 21 §2:
33 of 40 runs that received one line were flagged, against 0 of 40 idle runs). So periodic events
run on an absolute grid fixed when the run starts:

* the k-th event is due at ``start + k * interval`` on the monotonic clock, whatever happened
  before it; running one late (a long chunk in progress) does not shift the next one;
* instants passed over altogether (an event that took longer than the interval) are skipped, never
  made up in a burst;
* :meth:`Schedule.wall` maps a scheduled instant to the wall clock (``wall_start + k * interval``),
  so a file written for it can carry the scheduled instant as its time (``os.utime``) rather than
  the moment the write finished;
* a reader that waits for input should wake at :meth:`Schedule.next` at the latest (see
  :func:`wait_before`), so the event runs at its instant, not at the next arrival or idle tick.

>>> s = Schedule(start=100.0, interval=5.0, wall_start=1_700_000_000.0)
>>> s.next, s.due(104.9), s.due(105.0)
(105.0, False, True)
>>> s.advance(105.3)     # done: returns the instant it ran for
105.0
>>> s.next                # the grid, not 105.3 + 5
110.0
>>> s.advance(121.0), s.next   # 110 and 115 were passed over: the event runs for 120
(120.0, 125.0)
>>> s.wall(110.0)
1700000010.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from panstream.errors import ConfigurationError


@dataclass
class Schedule:
    """Instants ``start + k * interval``, ``k = 1, 2, ...`` (see the module docstring).

    Args:
        start: the monotonic clock reading the grid is anchored at (the run's start).
        interval: seconds between instants (> 0).
        wall_start: the wall-clock reading (``time.time()``) taken with ``start``, for :meth:`wall`.

    Raises:
        ConfigurationError: interval not a finite number > 0.
    """

    start: float
    interval: float
    wall_start: float = 0.0
    _k: int = field(default=1, repr=False)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.interval) and self.interval > 0):
            msg = f"a schedule's interval must be a number of seconds > 0, got {self.interval!r}"
            raise ConfigurationError(msg)

    @property
    def next(self) -> float:
        """The next instant due (monotonic clock)."""
        return self.start + self._k * self.interval

    def due(self, now: float) -> bool:
        """Whether the next instant has come."""
        return now >= self.next

    def advance(self, now: float) -> float:
        """Mark the instant due as done at ``now``; return the latest instant that has come (the
        one the event runs for). Instants passed over meanwhile are skipped, never made up."""
        k = max(self._k, math.floor((now - self.start) / self.interval))
        self._k = k + 1
        return self.start + k * self.interval

    def wall(self, instant: float) -> float:
        """The wall-clock time of the monotonic ``instant`` (for file times)."""
        return self.wall_start + (instant - self.start)


def wait_before(now: float, schedules: list[Schedule | None], cap: float) -> float:
    """Seconds a reader may wait for input before the earliest of ``schedules`` is due.

    At most ``cap`` (the idle tick), at least 0, plus 1 ms so that a wake-up rounded down to the
    millisecond (``poll``) lands just after the instant rather than just before it.

    >>> wait_before(1.0, [Schedule(0.0, 4.0), None], cap=0.2)
    0.2
    >>> round(wait_before(3.95, [Schedule(0.0, 4.0)], cap=0.2), 3)
    0.051
    """
    nxt = [s.next for s in schedules if s is not None]
    if not nxt:
        return cap
    return min(cap, max(0.0, min(nxt) - now) + 0.001)
