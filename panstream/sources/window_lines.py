"""Where a line of ``panstream ingest --window`` goes: into the open window of its time, or nowhere.

:class:`panstream.sources.windowed.WindowedIngestor` reads a chunk's lines and their times
(:func:`panstream.inputs.times.lines_and_times`), and the public schedule says which windows
are open; the vectorized steps in between are here, as functions of arrays (no state of the run):

* :func:`in_open`: which lines fall in an open window (one table lookup a line);
* :func:`split_apply`: a chunk that spans several windows, applied window by window without
  copying the lines of one run;
* :func:`blank_lines`: the lines that are no record (blank, or a W3C/Zeek ``#`` header), which
  the telemetry opt-in does not count as untimed.

And the one-line refusals of a run that can place no line (:func:`no_format`,
:func:`untimed_format`, :func:`range_over`, :func:`nothing_placed`): each decided from the clock,
the declared range, the format and at most one bit of the whole run (docs/threat-model.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from panstream.errors import ConfigurationError, InputFormatError
from panstream.inputs.check import no_format_line
from panstream.inputs.times import TIMED_FORMATS, time_notes
from panstream.inputs.timestamps import label
from panstream.windows.schedule import WindowSchedule
from panstream.windows.series import dropped_text

__all__ = ["blank_lines", "in_open", "no_format", "nothing_placed", "range_over", "split_apply",
           "untimed_format"]


def in_open(ws: np.ndarray, valid: np.ndarray, opened: Sequence[int], size: int) -> np.ndarray:
    """Which lines (window starts ``ws``, ``valid`` where a time was read) fall in one of the
    ``opened`` windows (sorted starts): one table lookup a line (a replay may hold hundreds of
    windows open; no sort, no search).

    >>> in_open(np.array([0, 10, 20, 30]), np.array([True, True, False, True]), [10, 30], 10)
    array([False,  True, False,  True])
    """
    keep = valid.copy()
    if not opened:
        keep[:] = False
        return keep
    lo = opened[0]
    n = (opened[-1] - lo) // size + 1
    table = np.zeros(n, dtype=bool)
    table[[(s - lo) // size for s in opened]] = True
    idx = (ws - lo) // size
    keep &= (idx >= 0) & (idx < n)
    keep[keep] = table[idx[keep]]
    idx.fill(0)
    return keep


def split_apply(apply: Callable[[int, memoryview], None], b: np.ndarray, chunk: memoryview,
                starts: np.ndarray, ends: np.ndarray, keep: np.ndarray, ws: np.ndarray,
                wins: np.ndarray) -> None:
    """Apply (``apply(window start, lines)``) the kept lines of a chunk that spans the windows
    ``wins``, window by window.

    Logs are nearly in time order, so a window's lines mostly form one run: a run is parsed in
    place (a slice of the chunk, no copy); where other lines interleave, only the window's
    span is compressed into a new buffer (wiped after use)."""
    g = np.full(starts.size, -1, dtype=np.int8 if wins.size < 127 else np.int32)
    g[keep] = np.searchsorted(wins, ws[keep])
    lens = ends - starts + 1
    lens[-1] -= int(ends[-1] >= b.size)  # a final line without its newline
    for k, s in enumerate(wins.tolist()):
        rows = np.flatnonzero(g == k)
        i, j = int(rows[0]), int(rows[-1]) + 1
        lo, hi = int(starts[i]), int(starts[i] + lens[i:j].sum())
        if rows.size == j - i:  # one run
            apply(int(s), chunk[lo:hi])
            continue
        buf = b[lo:hi][np.repeat(g[i:j] == k, lens[i:j])]
        try:
            apply(int(s), buf.data)
        finally:
            buf.fill(0)


def blank_lines(b: np.ndarray, starts: np.ndarray, ends: np.ndarray, headers: bool) -> np.ndarray:
    """Which lines of the chunk ``b`` are no record: empty (or a lone ``\\r``), and with
    ``headers`` (W3C, Zeek) the ``#`` header lines."""
    n = ends - starts
    blank = (n == 0) | ((n == 1) & (b[np.maximum(ends - 1, 0)] == 13))
    if headers:
        blank |= (n > 0) & (b[np.minimum(starts, max(b.size - 1, 0))] == 35)
    return blank


def no_format(name: str, note: str, announce: bool, notice: Callable[[str], None],
              binary: bool = False) -> InputFormatError:
    """``-f auto`` found no known format: the notice plain ``ingest`` gives (files only: a stream's
    detection is not announced) and its loud-failure line, without ``--keep-going`` (no window
    could place the lines)."""
    if announce:
        notice(f"{name}: no known log format fits its first lines: {note}")
    return InputFormatError(no_format_line(keep_going=False, binary=binary))


def range_over(stop: int) -> ConfigurationError:
    """The one line of processing time over a declared range that ended before the run began: every
    line would take the clock's time, after the range, and be dropped (issue 37: it was exit 0 and
    nothing said). Decided from the clock and the range alone, before any line is read."""
    return ConfigurationError(
        f"the declared range ends at {label(stop)}, before now, and processing time stamps each "
        "line with the clock: no line could go into a window of it; nothing was read. Use --time "
        "event to window the lines by their own times, or a --to after now")


def nothing_placed(kind: str, schedule: WindowSchedule,
                   dropped: Mapping[str, Any] | None = None) -> ConfigurationError:
    """The one line of a replay of which no line went into a window (W1d, issue 37).

    It is a function of one bit of the whole run (whether any line was placed in a window of the
    declared range) and of public parameters; it does not say whether the lines had readable
    times outside the range or no readable time at all: that would be a second bit, which a
    single dropped line could move (docs/threat-model.md). Under a counting opt-in (``dropped``:
    the released early/late/untimed counts) the line adds them, at their printed cost."""
    first, stop = schedule.span or (0, 0)
    why = "" if dropped is None else f" ({dropped_text(dropped)})"
    return ConfigurationError(
        f"not one line went into a window of the declared range {label(first)} .. {label(stop)}"
        f"{why}: "
        f"either their times lie outside it (check --from/--to against the log's dates) or none "
        f"carries a time this panstream reads as {kind!r} ({time_notes()}; "
        "docs/windows.md has the table: check --format, or use --time processing); nothing was "
        "released and the range's empty windows were dropped")


def untimed_format(kind: str, name: str) -> ConfigurationError:
    """The one line of event time over a format whose lines carry no time."""
    return ConfigurationError(
        f"{name}: lines of format {kind!r} carry no time, so event-time windows cannot place "
        f"them: use a timed format ({', '.join(TIMED_FORMATS)}), or --time processing "
        "(windows by the clock when lines are read)")
