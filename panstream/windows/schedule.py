"""The public schedule of windows: which windows exist, when each opens, when each is released.

Everything an observer can see of a window (that it exists, its state file, its line on stdout,
its series record and ``released_at``, the series file's times, the progress lines, the Kafka
state directory) follows from this module's answers, and its answers depend only on **public
inputs**: the window length, the lateness, a declared range, and the clock. Never on a line. A
line is placed in a window the schedule has open, or dropped; it creates, advances or delays
nothing (issue 27: a line that opened, or closed, a window was an observable of that line).

Two schedules, one per kind of input:

* :meth:`WindowSchedule.replay` (a finite input read at once: event time over FILES): the windows
  are exactly those of the **declared range** ``[first, stop)`` (``--from``/``--to``, on the
  window grid). They are all open from the start of the run, and all released **at the end of the
  input**, in order, empty or not. A line stamped outside the range is dropped. There is no
  watermark and no lateness: a replay is complete, so a line's place in the file never matters.
* :meth:`WindowSchedule.live` (standard input, Kafka: an input without an end): window ``s`` is
  open on the clock from ``s`` until ``s + size + lateness`` (:meth:`close_at`), and released at
  that instant, empty or not. A line stamped for a window that is not open by the clock when it
  is read (closed already, or not begun) is dropped. Processing time is the case where a line's
  time *is* the clock and the lateness is 0.

The horizon arithmetic is here too (:func:`windows_met`): a span of ``H`` seconds that does not
start on the grid meets one window more than ``H / size``.

>>> s = WindowSchedule.replay(3600, first=0, stop=3 * 3600)
>>> s.starts()
[0, 3600, 7200]
>>> s.accepts(window_of(5000, 3600), now=0.0), s.accepts(window_of(11000, 3600), now=0.0)
(True, False)
>>> live = WindowSchedule.live(3600, lateness=300)
>>> live.open_at(3700.0), live.close_at(0)
([0, 3600], 3900)
>>> live.accepts(0, now=3899.0), live.accepts(0, now=3900.0), live.accepts(7200, now=3900.0)
(True, False, False)
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

import numpy as np

from panstream.errors import ConfigurationError

__all__ = ["MAX_WINDOWS", "WindowSchedule", "duration_text", "horizon_line", "parse_instant",
           "window_of", "windows_met"]

#: A replay holds every window of its declared range open at once: at most this many.
MAX_WINDOWS = 1000


def window_of(t: int | float, size: int) -> int:
    """Start (UNIX seconds) of the ``size``-second window holding ``t`` (UTC, from the epoch).

    >>> window_of(3599, 3600), window_of(3600, 3600)
    (0, 3600)
    """
    return int(t // size) * size


def _label(t: int) -> str:
    return _dt.datetime.fromtimestamp(int(t), _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_instant(text: str | float, what: str = "--from") -> int:
    """UNIX seconds of ``2026-11-16``, ``2026-11-16T00:00:00Z`` (any ISO 8601 with a zone; none
    is UTC) or a number of seconds.

    >>> parse_instant("2026-11-16"), parse_instant("2026-11-16T01:00:00+01:00")
    (1794787200, 1794787200)

    Raises:
        ConfigurationError: not a date, a time or a number.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return int(text)
    s = str(text).strip()
    try:
        return int(float(s))
    except ValueError:
        pass
    try:
        t = _dt.datetime.fromisoformat(s.replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        msg = (f"{what} {text!r} is not a time: write a date (2026-11-16), an ISO 8601 time "
               "(2026-11-16T00:00:00Z) or UNIX seconds")
        raise ConfigurationError(msg) from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    return int(t.timestamp())


@dataclass(frozen=True)
class WindowSchedule:
    """The windows of a run and their instants (module docstring). Build one with
    :meth:`replay` or :meth:`live`.

    Attributes:
        size: window length in seconds (windows start at multiples of it from the UNIX epoch).
        lateness: seconds a live window stays open after its end (0 for a replay).
        first: start of the first window (``None``: live, from whenever the run starts).
        stop: end of the last window, exclusive (``None``: live, no end).
        finite: a replay (released at the end of the input) rather than live (on the clock).
    """

    size: int
    lateness: int = 0
    first: int | None = None
    stop: int | None = None
    finite: bool = False

    def __post_init__(self) -> None:
        if self.size <= 0 or self.lateness < 0:
            msg = f"a window must last > 0 s and lateness >= 0 s (got {self.size}, {self.lateness})"
            raise ConfigurationError(msg)

    # -------------------------------------------------------------- construction
    @classmethod
    def replay(cls, size: int, first: int | None, stop: int | None, inputs: str = "files"
               ) -> WindowSchedule:
        """The schedule of a finite input: the windows of ``[first, stop)``, all released at its
        end. Both bounds must be declared and lie on the window grid. ``inputs`` names the input
        in the message of a missing bound (``"files"``, ``"standard input ..."``).

        Raises:
            ConfigurationError: a bound missing, off the grid, empty or too long a range.
        """
        if first is None or stop is None:
            msg = (f"event-time windows over {inputs} need a declared range, e.g. --from "
                   "2026-11-16 --to 2026-11-23: every window in it is released at the end of the input, "
                   "empty or not, and lines outside it are dropped (the range must not be read "
                   "off the data: which windows exist would show whose lines are in it)")
            raise ConfigurationError(msg)
        for what, t in (("--from", first), ("--to", stop)):
            _on_grid(what, t, size)
        if stop <= first:
            msg = f"--to {_label(stop)} must come after --from {_label(first)}"
            raise ConfigurationError(msg)
        n = (stop - first) // size
        if n > MAX_WINDOWS:
            msg = (f"--from/--to declare {n:,} windows of {duration_text(size)}; a replay keeps "
                   f"every window of its range open at once (at most {MAX_WINDOWS:,}): split the "
                   "range over runs (--keep-open between them) or use longer windows")
            raise ConfigurationError(msg)
        return cls(size, 0, first, stop, True)

    @classmethod
    def live(cls, size: int, lateness: int = 0, first: int | None = None,
             stop: int | None = None) -> WindowSchedule:
        """The schedule of an input without an end: windows open on the clock from their start
        to their end + ``lateness``, optionally only within ``[first, stop)`` (on the grid).

        Raises:
            ConfigurationError: a bound off the grid.
        """
        for what, t in (("--from", first), ("--to", stop)):
            if t is not None:
                _on_grid(what, t, size)
        return cls(size, int(lateness), first, stop, False)

    # -------------------------------------------------------------- answers
    @property
    def span(self) -> tuple[int, int] | None:
        """A replay's declared range ``[first, stop)`` (whence a year-less time's year), else
        ``None``."""
        if self.finite and self.first is not None and self.stop is not None:
            return self.first, self.stop
        return None

    def in_range(self, start: int) -> bool:
        """Whether the window at ``start`` is within the declared range."""
        return ((self.first is None or start >= self.first)
                and (self.stop is None or start + self.size <= self.stop))

    def starts(self) -> list[int]:
        """Every window of a bounded range, in order.

        Raises:
            ConfigurationError: the range has no end (live, no ``--to``).
        """
        if self.first is None or self.stop is None:
            msg = "this schedule has no declared range (no --from/--to): its windows never end"
            raise ConfigurationError(msg)
        return list(range(self.first, self.stop, self.size))

    def close_at(self, start: int) -> int:
        """The instant a live window closes and is released: its end + the lateness."""
        return start + self.size + self.lateness

    def open_at(self, now: float) -> list[int]:
        """The windows open at clock ``now`` (live): ``start <= now < close_at(start)``, within the
        range; a replay's windows are all open for the whole run."""
        if self.finite:
            return self.starts()
        last = window_of(now, self.size)
        first = window_of(now - self.size - self.lateness, self.size) + self.size
        return [s for s in range(first, last + self.size, self.size)
                if s <= now < self.close_at(s) and self.in_range(s)]

    def due(self, start: int, now: float) -> bool:
        """Whether the live window at ``start`` is to be released at clock ``now`` (never for a
        replay: its windows are released at the end of the input)."""
        return not self.finite and now >= self.close_at(start)

    def accepts(self, start: int, now: float) -> bool:
        """Whether a line of the window at ``start``, read at clock ``now``, is placed in it (else
        it is dropped, changing nothing)."""
        if self.finite:
            return self.in_range(start)
        return start <= now < self.close_at(start) and self.in_range(start)

    def accepts_many(self, starts: np.ndarray, now: float) -> np.ndarray:
        """:meth:`accepts` for an array of window starts (one per line), vectorized.

        >>> WindowSchedule.live(60, 30).accepts_many(np.array([0, 60, 120]), now=70.0).tolist()
        [True, True, False]
        """
        ok = np.ones(starts.shape, dtype=bool)
        if not self.finite:
            ok &= (starts <= now) & (now < starts + (self.size + self.lateness))
        if self.first is not None:
            ok &= starts >= self.first
        if self.stop is not None:
            ok &= starts + self.size <= self.stop
        return ok

    def describe(self) -> str:
        """One line for the operator: what decides the windows and their releases."""
        if self.finite:
            assert self.first is not None and self.stop is not None
            return (f"{(self.stop - self.first) // self.size} {duration_text(self.size)} windows "
                    f"from {_label(self.first)} to {_label(self.stop)} (declared), all released "
                    "at the end of the input, empty or not; lines outside are dropped")
        rng = ""
        if self.first is not None or self.stop is not None:
            rng = (f" from {_label(self.first) if self.first is not None else 'the start'}"
                   f" to {_label(self.stop) if self.stop is not None else 'no end'}")
        return (f"{duration_text(self.size)} windows{rng} on the clock: each released at its end"
                f" + {duration_text(self.lateness)}, empty or not; a line whose window is not open"
                " when it is read is dropped")


def _on_grid(what: str, t: int, size: int) -> None:
    if t % size:
        lo = window_of(t, size)
        msg = (f"{what} {_label(t)} is not the start of a {duration_text(size)} window (they "
               f"start at multiples of {duration_text(size)} from 1970-01-01T00:00:00Z): use "
               f"{_label(lo)} or {_label(lo + size)}")
        raise ConfigurationError(msg)


# ------------------------------------------------------------------ the horizon
def windows_met(horizon: int, size: int) -> int:
    """The most windows of ``size`` seconds that any span of ``horizon`` seconds meets.

    Times are whole seconds, so a span of ``H`` seconds is ``H`` consecutive seconds
    ``b, ..., b + H - 1`` for some ``b``; it meets the windows from ``b // size`` to
    ``(b + H - 1) // size``, at most ``1 + ceil((H - 1) / size)`` of them (a span that starts
    one second before a boundary). That is ``H / size + 1`` when ``H`` is a whole number of
    windows (7 days of daily windows: 8), and ``ceil(H / size) + 1`` unless ``H`` is one second
    past a whole number. ``tests/windows/test_schedule.py`` checks it against every offset.

    >>> windows_met(7 * 86400, 86400), windows_met(86400, 3600), windows_met(5400, 3600)
    (8, 25, 3)
    >>> windows_met(1, 86400), windows_met(86400, 86400)
    (1, 2)
    """
    if horizon <= 0 or size <= 0:
        msg = f"a horizon and a window must last > 0 s (got {horizon}, {size})"
        raise ConfigurationError(msg)
    return 1 + -(-(horizon - 1) // size)


def duration_text(s: int) -> str:
    """``86400`` -> ``1d``, ``5400`` -> ``90m``, ``0`` -> ``0s``.

    >>> duration_text(7 * 86400), duration_text(5400), duration_text(0)
    ('7d', '90m', '0s')
    """
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if s and s % n == 0:
            return f"{s // n}{unit}"
    return f"{s}s"


def horizon_line(epsilon_window: float, size: int, horizon: int) -> str:
    """The accounting of a horizon, for one human line.

    >>> horizon_line(1.5, 86400, 7 * 86400)
    'any 7d (any span of 7d meets at most 8 1d windows): 8 x 1.5 = 12 per person who appears in each'
    """
    w = windows_met(horizon, size)
    return (f"any {duration_text(horizon)} (any span of {duration_text(horizon)} meets at most "
            f"{w} {duration_text(size)} windows): {w} x {epsilon_window:.6g} = "
            f"{w * epsilon_window:.6g} per person who appears in each")

