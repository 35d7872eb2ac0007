"""Tumbling windows: a fresh table per window, released once when it closes, then wiped.

``panstream ingest --window 1d`` answers "distinct clients per day" without re-releasing one
growing table: every window (aligned to UTC: ``1d`` from 00:00, ``1h`` on the hour, or any duration)
gets its *own* table, a fresh draw from D0 with a new epoch and a ledger whose budget is exactly one
release. When the window closes, :class:`WindowedIngestor` owns the order in which things become
durable (the commit order):

1. release the window's table once (``est.release``: the ledger is charged before noise is drawn);
2. append the window's record to the **series** (:class:`panstream.windows.series.Series`: one line,
   ``fsync``). This is the commit point: a window whose record is in the series was released;
3. if asked (``on_export``, e.g. ``--export-presto-dir``), export the table itself (the sketch
   family's Presto file), durably, *after* the commit point and before the wipe;
4. wipe the table, forget the window, remove its state file (and its lock): nothing of a closed
   window remains on disk or in memory;
5. only then publish (``on_close``: a stdout line, the metrics).

A crash (``kill -9``) before 2 loses an unpublished release: the restart restores the window from
its last checkpoint and releases it then, once. A crash between 2 and 4 leaves a state file of a
released window: the restart finds its record in the series and deletes the file without releasing
(or exporting) it again. So every window appears in the series exactly once, and is exported at
most once: a crash (or a failed write) between 2 and the end of 3 loses that window's export,
never its release. Exporting before 2 would be worse: a crash between the export and the record
would release and export the window again from its last checkpoint, a second published state of
one table (invariant 5: the two would show who arrived in between).

Which windows exist and when each is released is decided by a public
:class:`~panstream.windows.schedule.WindowSchedule`, never by a line (issue 27):

* a **replay** (event time over FILES): the windows of the declared range (``--from``/``--to``),
  all opened at the start, all released at the end of the input in order, empty or not;
* **live** (standard input): window ``s`` is open on the clock from ``s`` to ``s + size +
  lateness`` and released at that instant, empty or not.

A line belongs to the window of the time it carries (``"event"``: :func:`panstream.inputs.
times.times`, e.g. CLF ``[24/Nov/2026:10:00:00 +0000]``) or of the clock when it is read
(``"processing"``). A line whose window is not open (outside the range, closed, not yet begun by
the clock, or released by an earlier run) or without a readable time is dropped: it opens, closes,
advances or delays nothing. Dropped lines are counted only under a telemetry opt-in
(:mod:`panstream.release.telemetry`: noisy per arrival, or exact) and reported in the next window's record.
A record's ``released_at`` (and the series file's time) is the schedule's instant: the close
instant of a live window, the start of the run for a replay.

Open windows are checkpointed (state files ``<stem>.<YYYYmmddTHHMMSSZ>.pst`` beside the
``--state`` path, one per open window, each under its own lock) on the fixed clock of
:mod:`panstream.schedule`; memory holds only the open windows' tables.

Nothing here imports click; the command line (``panstream ingest --window``) wires it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from panstream.errors import BudgetExhaustedError, ConfigurationError
from panstream.estimators.base import Estimator
from panstream.inputs.detection import detect
from panstream.inputs.parser import Format
from panstream.inputs.times import TimeReader, has_time, lines_and_times
from panstream.inputs.timestamps import label, seconds
from panstream.inputs.zones import Zone, parse_zone
from panstream.release.telemetry import TelemetryPolicy
from panstream.schedule import Schedule, wait_before
from panstream.sources.driver import Driver
from panstream.sources.ingest import IDLE_TICK, Input
from panstream.sources.window_files import (
    memory_available,
    start_of_id,
    window_files,
    window_path,
    window_stem,
)
from panstream.sources.window_lines import (
    blank_lines,
    in_open,
    no_format,
    nothing_placed,
    range_over,
    split_apply,
    untimed_format,
)
from panstream.state import persist
from panstream.state.files import state_lock
from panstream.universe import Universe
from panstream.windows.schedule import (
    WindowSchedule,
    duration_text,
    horizon_line,
    window_of,
    windows_met,
)
from panstream.windows.series import Series, record

#: A live window is released this long after its instant: the moment the idle wake-up is set for
#: (a wake-up rounded down to the millisecond by ``poll`` still lands after the instant).
WAKE_SLACK = 0.001

__all__ = ["WAKE_SLACK", "WindowStats", "WindowedIngestor", "duration_text", "horizon_line", "window_files",
           "window_path", "window_stem", "windows_met"]

@dataclass
class WindowStats:
    """Operational figures of a windowed run (printed, never stored; nothing counts arrivals).

    Attributes:
        seconds: time of the run; checkpoints: checkpoints written; released: windows released by
        this run; open: windows still open at the end (checkpointed); restored: open windows read
        back from their state files; skipped: state files of windows already in the series
        (removed); exported: windows exported (``on_export``) by this run; interrupted: stopped
        by a signal; bytes_read: bytes of the file inputs read;
        formats: the format of each file input; last: the last record released; input, position,
        size: the input being read and, for a file, the bytes read of it and its size.
    """

    seconds: float = 0.0
    checkpoints: int = 0
    released: int = 0
    open: int = 0
    restored: int = 0
    skipped: int = 0
    exported: int = 0
    interrupted: bool = False
    bytes_read: int = 0
    formats: list[str] = field(default_factory=list)
    last: dict[str, Any] | None = None
    input: str = ""
    position: int | None = None
    size: int | None = None


@dataclass
class _Open:
    """One open window: its table, and the lock held on its state file."""

    start: int
    est: Estimator
    lock: contextlib.ExitStack


class WindowedIngestor(Driver):
    """Run log inputs into one fresh table per tumbling window, releasing each once (see the module
    docstring for the commit order and the time modes).

    Args:
        make: returns a fresh estimator for a new window (any family; its ledger's budget should
            be ``release_epsilon``: one release).
        universe: the universe of the windows' tables (for the line parser).
        fmt: the log format (``auto`` is resolved per input from its first chunk).
        size: window length in seconds (windows start at multiples of it from the UNIX epoch, UTC).
        release_epsilon, release_mechanism: of each window's one release.
        series: where closed windows are recorded (``None``: only ``on_close``; a crash may then
            lose a release, never repeat one, as nothing is restored without a series).
        state_path: stem of the open windows' state files (``None``: memory only).
        time_mode: ``"event"`` (a line's own time) or ``"processing"`` (the clock when read).
        schedule: the public schedule (:class:`~panstream.windows.schedule.WindowSchedule`) that
            decides which windows exist and when each is released; ``None``: live on the clock,
            with ``lateness`` in event time and none in processing time.
        lateness: with ``schedule=None``: seconds a live window stays open after its end.
        checkpoint_every: seconds between checkpoints of the open windows (fixed clock).
        close_at_end: close every open window at the end of the input (else checkpoint them).
        expect: parameters a restored window file must match (``estimators.expect_of``).
        on_close: called with each record after it is durable in the series.
        on_export: called as ``on_export(start, est)`` with each released window's table after its
            record is durable and before the wipe; returns whether it exported (it must write
            durably; if it raises, the window is still wiped and released, its export lost).
            Exporting publishes the table.
        on_notice: one-line operational messages.
        on_progress: called every ``progress_every`` seconds (fixed clock) with the stats.
        telemetry: whether late/untimed lines are counted (default: nothing counted).
        time_zone: the zone of formats that write a local time without one (``haproxy``,
            ``apache-error``, ``nginx-error``, ``sshd``, ``pam``: ``--time-zone``); event time over
            such a format is refused without it. A year-less syslog time takes the year that puts
            it in the replay's declared range, or live, nearest to the wall clock.
        clock, wall_clock: monotonic and wall clocks (for tests).
    """

    def __init__(self, make: Callable[[], Estimator], universe: Universe, fmt: Format, size: int,
                 *,
                 release_epsilon: float, release_mechanism: str = "laplace",
                 series: Series | None = None, state_path: str | None = None,
                 time_mode: str = "event", schedule: WindowSchedule | None = None,
                 lateness: float = 0.0,
                 checkpoint_every: float | None = None, close_at_end: bool = True,
                 expect: Mapping[str, Any] | None = None,
                 on_close: Callable[[dict[str, Any]], None] | None = None,
                 on_export: Callable[[int, Estimator], bool] | None = None,
                 on_notice: Callable[[str], None] | None = None,
                 on_progress: Callable[[WindowStats], None] | None = None,
                 progress_every: float = 1.0,
                 telemetry: TelemetryPolicy | None = None,
                 time_zone: Zone | str | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time) -> None:
        if not (isinstance(size, int) and size > 0):
            raise ConfigurationError(f"a window must last a whole number of seconds > 0, got {size!r}")
        if time_mode not in ("event", "processing"):
            raise ConfigurationError(f"time must be 'event' or 'processing', got {time_mode!r}")
        if not (math.isfinite(lateness) and lateness >= 0):
            raise ConfigurationError(f"lateness must be a number of seconds >= 0, got {lateness!r}")
        if state_path is not None and series is None:
            msg = ("windows kept in state files need a --series file: it is the record of which "
                   "windows were released, so that a restart never releases one twice")
            raise ConfigurationError(msg)
        super().__init__(universe, fmt, state_path=state_path, release_epsilon=release_epsilon,
                         release_mechanism=release_mechanism, on_notice=on_notice,
                         on_progress=on_progress, progress_every=progress_every,
                         telemetry=telemetry, clock=clock, wall_clock=wall_clock)
        self.release_epsilon: float = release_epsilon
        self.make = make
        self.size = size
        self.series = series
        self.time_mode = time_mode
        if schedule is None:
            schedule = WindowSchedule.live(size, int(lateness) if time_mode == "event" else 0)
        if schedule.size != size:
            msg = f"the schedule's windows last {schedule.size} s, not {size} s"
            raise ConfigurationError(msg)
        if time_mode == "processing" and schedule.finite:
            msg = ("processing time places lines by the clock: it runs on a live schedule, not "
                   "on a declared replay range")
            raise ConfigurationError(msg)
        self.schedule = schedule
        self.lateness = float(schedule.lateness)
        self.checkpoint_every = checkpoint_every or None
        self.close_at_end = close_at_end
        self.expect = dict(expect or {})
        self.on_close = on_close
        self.on_export = on_export
        self.time_zone = parse_zone(time_zone) if isinstance(time_zone, str) else time_zone
        self.stats = WindowStats()
        self._open: dict[int, _Open] = {}
        self._released: set[int] = set()
        if series is not None:
            other = sorted(series.lengths - {size})
            if other:
                msg = (f"the series {series.path} holds windows of {duration_text(other[0])}, "
                       f"not {duration_text(size)}: give each window length its own --series file")
                raise ConfigurationError(msg)
            self._released = {start_of_id(w) for w in series.released()}
        # exact counts, kept only under a telemetry opt-in, zeroed at each close: lines dropped
        # early (before the declared range, or for a window the clock has not begun), late (after
        # the range, or for a window closed or released) and without a readable time
        self._early = self._late = self._untimed = 0
        self._clocks: dict[str, TimeReader] = {}  # event-time readers (keep w3c/zeek headers)
        self._placed = False  # whether a line of this run went into a window (W1d: only that)
        self._fresh: set[int] = set()  # windows opened by this run (not restored)
        self._refused: set[int] = set()  # scheduled windows found already in the series
        #: A table made by :meth:`_check_memory` to measure, handed to the first window opened.
        self._spare: Estimator | None = None

    # ------------------------------------------------------------------ control
    def open_windows(self) -> list[int]:
        """Starts of the windows open now (their tables are the only state in memory)."""
        return sorted(self._open)

    # ------------------------------------------------------------------ windows
    def _detect(self, name: str, chunk: memoryview, announce: bool) -> str:
        """``auto``: the input's format from its first chunk (recorded for a file); stop the run
        when no known format fits, as plain ``ingest`` does, before any line is read (in event
        time it would otherwise blame the format ``'none'`` for carrying no time)."""
        det = detect(chunk)
        if not det.known:
            raise no_format(name, det.note, announce, self._notice, det.binary)
        if announce:
            self.stats.formats.append(f"{name}: {det.spec}")
        return det.spec

    def _lock(self, start: int) -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        if self.state_path is not None:
            stack.enter_context(state_lock(window_path(self.state_path, start),
                                           "ingest --window"))
        return stack

    def _open_one(self, start: int) -> None:
        if start in self._open or start in self._released:
            return
        lock = self._lock(start)
        est, self._spare = (self._spare, None) if self._spare is not None else (self.make(), None)
        self._open[start] = _Open(start, est, lock)
        self._fresh.add(start)

    def _check_memory(self) -> None:
        """Refuse, before any line is read, a schedule whose windows held open at once need more
        memory than the machine has available: a replay holds every window of its declared range
        (which windows exist must not depend on the lines), a live run those of one window's
        life plus its lateness. One table is made to measure (it becomes the first window's).

        Raises:
            ConfigurationError: the tables would not fit (:func:`memory_available`).
        """
        sch = self.schedule
        live = -(-(self.size + sch.lateness) // self.size) + 1  # a window's life + lateness
        count = (len(sch.starts()) if sch.finite else live) - len(self._open)
        available = memory_available()
        if count <= 1 or available is None:
            return
        self._spare = self.make()
        each = self._spare.nbytes()
        need = each * (count + len(self._open))
        if need > available:
            self._spare.wipe()
            self._spare = None
            msg = (f"{count:,} windows of {self.universe.spec} held open at once need "
                   f"{need / 2**30:,.1f} GiB ({each / 2**20:,.1f} MiB each), more than the "
                   f"{available / 2**30:,.1f} GiB this machine has available: declare a shorter "
                   "range per run (--from/--to, --keep-open between runs), longer windows, or a "
                   "smaller universe (hashed-ip:M for public clients; 'panstream plan' sizes it)")
            raise ConfigurationError(msg)

    def restore(self) -> None:
        """Read back the open windows' state files; remove those already in the series."""
        if self.state_path is None:
            return
        for start, path in sorted(window_files(self.state_path).items()):
            if start % self.size:
                msg = (f"{path} is a window that does not start on a {self.size}-s boundary: it "
                       "was made with another --window; finish it with that --window first")
                raise ConfigurationError(msg)
            if start in self._released:
                with state_lock(path, "ingest --window"):
                    os.unlink(path)  # released before a crash: never release it twice
                self.stats.skipped += 1
                self._notice(f"window {label(start)} is already in the series: its state file "
                             "was removed, not released again")
                continue
            lock = self._lock(start)
            try:
                est = persist.load(path, expect=self.expect)
                if est.ledger.entries:
                    est.wipe()
                    msg = (f"{path} is an open window that was released from outside 'ingest "
                           "--window' (its ledger holds a release): its one release is spent and "
                           "its figure is not in the series. Delete the file to go on without "
                           "that window")
                    raise ConfigurationError(msg)
                if not math.isclose(est.ledger.budget, self.release_epsilon, rel_tol=1e-12):
                    est.wipe()
                    msg = (f"{path} is an open window made for one release at epsilon "
                           f"{est.ledger.budget:g}, not {self.release_epsilon:g}: resume it with "
                           "the same --release-epsilon (or --total-epsilon and --horizon)")
                    raise ConfigurationError(msg)
            except BaseException:
                lock.close()
                raise
            self._open[start] = _Open(start, est, lock)
            self.stats.restored += 1

    def _late_figures(self) -> dict[str, Any] | None:
        """The early/late/untimed counts since the last close, released under the opt-in (else
        None). A dropped line is one of the three (or none), so one arrival moves the triple by
        at most 1."""
        if not self.telemetry.counts:
            return None
        release = self.telemetry.release
        early, late, untimed = release(self._early), release(self._late), release(self._untimed)
        self._early = self._late = self._untimed = 0
        return {"early_records": early, "late_records": late, "untimed_records": untimed,
                "late_sd": self.telemetry.noise_sd}

    def close_window(self, start: int, at: float | None = None) -> dict[str, Any] | None:
        """Release the window once, record it durably, export it (if asked), wipe it, remove its
        file, then publish.

        Args:
            start: the window.
            at: the schedule's instant of this release (wall clock): the record's
                ``released_at`` and the series file's time (default: now).

        Returns:
            The series record, or ``None`` if the window's budget refused the release.
        """
        w = self._open[start]
        try:
            rel = w.est.release(self.release_epsilon, self.release_mechanism)
        except BudgetExhaustedError as exc:
            self._notice(f"window {label(start)}: {exc}; the window is dropped unreleased")
            self._forget(w)
            return None
        when = float(self.wall_clock() if at is None else at)
        out = rel.to_dict()
        out["time"] = when  # the schedule's instant, not the moment the loop got here
        rec = record(label(start), start, start + self.size, w.est.kind, out,
                     epsilon_state=w.est.epsilon_state, late=self._late_figures())
        if self.series is not None:
            self.series.append(rec)  # the commit point: from here on the window is released
            ns = int(round(when * 1e9))
            with contextlib.suppress(OSError):
                os.utime(self.series.path, ns=(ns, ns))  # the file's time: the schedule's too
        self._released.add(start)
        try:
            if self.on_export is not None:
                # after the commit point: lost by a crash, never repeated
                self.stats.exported += bool(self.on_export(start, w.est))
        finally:
            self._forget(w)
        self.stats.released += 1
        self.stats.last = rec
        if self.on_close:
            self.on_close(rec)
        return rec

    def _forget(self, w: _Open) -> None:
        """Wipe the table, drop it, remove its state file and lock."""
        w.est.wipe()
        del self._open[w.start]
        if self.state_path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(window_path(self.state_path, w.start))
        w.lock.close()

    def checkpoint(self, at: float | None = None) -> None:
        """Save every open window's table atomically (times set to the scheduled instant ``at``)."""
        if self.state_path is None:
            return
        for start, w in sorted(self._open.items()):
            self._save(w.est, window_path(self.state_path, start), at)
        self.stats.checkpoints += 1

    def _tick(self, now: float) -> None:
        """The clock's turn (the only place windows open and close): release every window the
        schedule has due at ``now`` (at its instant), then open every window it has open. Lines
        never get here: what exists and what is released is a function of ``now`` alone.

        A live window is released at the first turn at or after its instant + :data:`WAKE_SLACK`,
        the moment the reader's idle wake-up is set for (:meth:`_next_instant`): an arrival just
        after the instant is read first and the release still waits for that moment, so the
        release comes at the wake-up whether or not a line arrived."""
        sch = self.schedule
        for start in sorted(self._open):
            if sch.due(start, now - WAKE_SLACK):
                self.close_window(start, at=sch.close_at(start))
        for start in sch.open_at(now):
            if start in self._released:
                if start not in self._refused:  # on the clock, whether or not a line comes
                    self._refused.add(start)
                    self._notice(f"window {label(start)} is already in the series: its lines "
                                 "are dropped")
                continue
            self._open_one(start)

    def _next_instant(self, now: float) -> float | None:
        """The next instant the live schedule acts at (a close, or a window's start)."""
        sch = self.schedule
        if sch.finite:
            return None
        nxt = [sch.close_at(s) + WAKE_SLACK for s in self._open]
        nxt.append(window_of(now, self.size) + self.size)
        return min(nxt)

    # ------------------------------------------------------------------ lines
    def _apply(self, kind: str, start: int, data: memoryview) -> None:
        res = self._parser(kind).parse(data)
        if res.indices.size:
            self._open[start].est.update_indices(res.indices)  # wipes them

    def _event_chunk(self, kind: str, chunk: memoryview) -> None:
        """Place each line in the window of its own time if the schedule has that window open
        now; drop it otherwise (no watermark: one line's time never moves another's fate)."""
        self._tick(self.wall_clock())
        b = np.frombuffer(chunk, dtype=np.uint8)
        reader = self._reader(kind)
        starts, ends, t = lines_and_times(b, kind, reader)
        secs, valid = seconds(t)
        t.view(np.int64).fill(0)
        size = self.size
        ws = (secs // size) * size
        try:
            keep = in_open(ws, valid, sorted(self._open), size)
            if self.telemetry.counts:
                blank = blank_lines(b, starts, ends, headers=reader.hash_headers)
                dropped = valid & ~keep
                early = int((dropped & self._before(ws)).sum())
                self._early += early
                self._late += int(dropped.sum()) - early
                self._untimed += int((~valid & ~blank).sum())
            self._placed = self._placed or bool(keep.any())
            wins = np.unique(ws[keep])
            if wins.size == 1 and bool(keep.all()):
                self._apply(kind, int(wins[0]), chunk)
            elif wins.size:
                split_apply(lambda start, data: self._apply(kind, start, data), b, chunk,
                            starts, ends, keep, ws, wins)
            wins.fill(0)
        finally:
            secs.fill(0)
            ws.fill(0)

    def _before(self, ws: np.ndarray) -> np.ndarray:
        """Which window starts ``ws`` (of dropped lines) are early: before the declared range,
        or (live) for a window the clock has not begun; the other dropped lines are late."""
        sch = self.schedule
        if sch.finite:
            assert sch.first is not None
            return ws < sch.first
        return (ws > self.wall_clock()) | ((ws < sch.first) if sch.first is not None else False)

    def _reader(self, kind: str) -> TimeReader:
        """The event-time reader of format ``kind`` (one per format: it keeps W3C/Zeek headers):
        the zone of local times, and the public rule of a year-less time's year (the declared
        range of a replay, else the wall clock). Raises the one-line refusal of a format whose
        times cannot be placed."""
        reader = self._clocks.get(kind)
        if reader is None:
            reader = self._clocks[kind] = TimeReader(kind, self.time_zone, self.schedule.span,
                                                     self.wall_clock)
        return reader

    def _processing_chunk(self, kind: str, chunk: memoryview) -> None:
        """Place the chunk in the window of the clock, if the schedule has it open (it does
        unless it was released by an earlier run or lies outside the range)."""
        now = self.wall_clock()
        self._tick(now)
        start = window_of(now, self.size)
        if start not in self._open:
            if self.telemetry.counts:
                n = self._parser(kind).parse(chunk).lines
                if self._before(np.array([start]))[0]:
                    self._early += n
                else:
                    self._late += n
            return
        self._placed = True
        self._apply(kind, start, chunk)

    # ------------------------------------------------------------------ loop
    def run(self, inputs: Iterable[Input]) -> WindowStats:
        """Restore, ingest every input, then close (or checkpoint) the open windows.

        Raises:
            SourceError: an input failed (the open windows are still checkpointed);
            ConfigurationError: event time over a format without a time; StateError: a state or
            series file could not be written.
        """
        t0 = self._t0 = self.clock()
        self._wall0 = self.wall_clock()
        stats = self.stats
        self.restore()
        ckpt = Schedule(t0, self.checkpoint_every, self._wall0) if self.checkpoint_every else None
        prog = (Schedule(t0, self.progress_every, self._wall0)
                if self.on_progress is not None and self.progress_every > 0 else None)
        if not self.schedule.finite and self.schedule.first is None:
            # live without --from: from the window the run starts in (an earlier window still in
            # its lateness was not read by this run: it is not released as empty)
            self.schedule = dataclasses.replace(self.schedule,
                                                first=window_of(self._wall0, self.size))
        self._check_memory()
        self._tick(self._wall0)  # opens the schedule's windows; releases restored ones now due
        last_kind: str | None = None  # the format of the last input that held a byte
        try:
            if self.time_mode == "processing" and self.schedule.stop is not None \
                    and self._wall0 >= self.schedule.stop:
                raise range_over(self.schedule.stop)  # the clock and the range: public, no data
            for inp in inputs:
                if self._stop:
                    break
                set_idle = getattr(inp.reader, "set_idle", None)
                stats.input = inp.name
                where = inp.position() if inp.position else None
                stats.position, stats.size = where if where else (None, None)
                kind = None if self.format.kind == "auto" else self.format.spec
                if kind is not None and self.time_mode == "event":
                    if not has_time(kind):
                        raise untimed_format(kind, inp.name)
                    self._reader(kind)  # a local time without --time-zone: refused now
                for chunk in inp.reader:
                    if len(chunk):
                        if kind is None:
                            kind = self._detect(inp.name, chunk, announce=inp.position is not None)
                            if self.time_mode == "event":
                                if not has_time(kind):
                                    raise untimed_format(kind, inp.name)
                                self._reader(kind)
                        if self.time_mode == "event":
                            self._event_chunk(kind, chunk)
                        else:
                            self._processing_chunk(kind, chunk)
                        last_kind = kind
                    else:
                        self._tick(self.wall_clock())  # an idle turn: the clock's, as any turn
                    now = self.clock()
                    if ckpt is not None and ckpt.due(now):
                        self.checkpoint(ckpt.advance(now))
                    if prog is not None and prog.due(now):
                        stats.seconds = prog.advance(now) - t0  # the instant: no loop timing
                        if inp.position is not None:
                            where = inp.position() or where
                            stats.position, stats.size = where if where else (None, None)
                        stats.open = len(self._open)
                        assert self.on_progress is not None
                        self.on_progress(stats)
                    if self._stop:
                        stats.interrupted = True
                        break
                    if set_idle is not None:
                        wait = wait_before(self.clock(), [ckpt, prog], IDLE_TICK)
                        wall = self.wall_clock()
                        nxt = self._next_instant(wall)
                        if nxt is not None:  # wake at the schedule's next instant, not later
                            wait = min(wait, max(0.0, nxt - wall))
                        set_idle(wait)
                if inp.position is not None:
                    where = inp.position()
                    if where is not None:
                        stats.bytes_read += where[0]
                if self._stop:  # a signal during the input's last read (Ctrl+C ends tail -F)
                    stats.interrupted = True
            if self.time_mode == "event" and self.schedule.finite and last_kind is not None \
                    and not self._placed and self._fresh and not stats.interrupted:
                # a replay of which no line went into a window: one line, exit 2, and the empty
                # windows it opened are dropped, not released (nor kept for the next run)
                for start in sorted(self._fresh & set(self._open)):
                    self._forget(self._open[start])
                raise nothing_placed(last_kind, self.schedule, self._late_figures())
            if self.close_at_end and not stats.interrupted:
                # the end of the input: a replay's schedule releases its windows now, in order;
                # a live run asked to close at the end releases what is open at this moment
                at = self._wall0 if self.schedule.finite else self.wall_clock()
                for start in sorted(self._open):
                    self.close_window(start, at=at)
        finally:
            self.checkpoint(self.clock())  # the files' time: the clock's, as every checkpoint
            stats.open = len(self._open)
            if self.state_path is None and self._open:
                self._notice(f"{len(self._open)} open window(s) not saved (no --state): they are "
                             "lost at exit, unreleased")
            for w in list(self._open.values()):
                w.est.wipe()
                w.lock.close()
            self._open.clear()
            stats.seconds = self.clock() - t0
        return stats

