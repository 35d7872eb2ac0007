"""The ingest loop: parse chunks of log lines, update the table, checkpoint, release.

One object, :class:`Ingestor`, owns the order in which things become durable. For every chunk:

1. parse the chunk into cell indices (:class:`panstream.inputs.parser.LineParser`); wipe the chunk;
2. apply the indices to the table in large batches (``update_indices``, which wipes them);
3. when ``checkpoint_every`` seconds have passed: flush pending indices, then **save the state
   atomically** (temp file, fsync, rename). Work since the last checkpoint is the only thing a crash
   (``kill -9``) can lose; the state file is never half-written;
4. when ``release_every`` seconds have passed: flush, ``est.release()`` (which charges the ledger
   *before* drawing noise), **save the state with the charged ledger**, and only then hand the
   release to ``on_release`` for publication. A crash between charging and saving loses the release
   unpublished, never publishes one whose charge was lost. When the budget is spent the release is
   refused, reported once through ``on_notice``, and periodic releases stop while ingestion goes on;
5. on stop (end of input or :meth:`Ingestor.request_stop`, e.g. from SIGINT/SIGTERM): flush and write
   a final checkpoint.

Periodic events run on a fixed clock (:mod:`panstream.schedule`): the k-th checkpoint is due at
``start + k * checkpoint_every`` (releases, progress reports and telemetry windows likewise), no
arrival can move it, and a reader that waits for input (a pipe) is told to wake at the next
instant at the latest (``ChunkReader.set_idle``), so the event runs at its instant and not at the
next arrival or idle tick. A periodic save also sets the state file's access and modification
times to the scheduled instant (``os.utime``), so they show the schedule and not when the write
finished.

Nothing counts arrivals by default (:mod:`panstream.release.telemetry`): :class:`IngestStats` holds the
run's clock (seconds, checkpoints, releases) and, for file inputs, the read position in bytes; the
line and item counts exist only under an explicit opt-in (noisy per-window counts at an
event-level epsilon, or exact counts). Nothing here imports click or touches signals; the command
line (``panstream ingest``) wires both.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from panstream.errors import BudgetExhaustedError, ConfigurationError, InputFormatError
from panstream.estimators.base import Estimator
from panstream.inputs.check import SAMPLE_LINES as _SAMPLE_LINES
from panstream.inputs.check import empty_input_line, verdict
from panstream.inputs.parser import Format, detect
from panstream.release.telemetry import NOTHING_COUNTED, CountWindow, TelemetryPolicy
from panstream.schedule import Schedule, wait_before
from panstream.sources.driver import Driver
from panstream.sources.files import ChunkReader

#: The counts of one reporting window. One log line is exactly one of these, so the window's count
#: vector has L1 sensitivity 1; the lines total is their sum.
COUNT_FIELDS = ("accepted", "empty", "malformed", "outside", "headers")

#: Apply pending indices once this many have accumulated (the table's pipelined update likes >= 2**17;
#: a 2 MiB chunk of plain addresses holds about 150,000 lines, so it goes straight to the table).
BATCH = 1 << 17

#: The longest a reader of a stream waits for input before an idle tick (seconds).
IDLE_TICK = 0.2

#: The loud-failure check judges each input on the exact counts of its first this many non-empty
#: lines (or all of a shorter input); the counts are dropped once judged. One rule for every source.
SAMPLE_LINES = _SAMPLE_LINES

#: A chunk shorter than this means the reader drained its input: flush pending indices.
DRAINED_BELOW = 1 << 20


@dataclass
class IngestStats:
    """Operational figures of one run (printed, never stored).

    By default (:meth:`TelemetryPolicy.none`) nothing here counts arrivals: ``counted`` is false,
    the count fields stay 0 and :meth:`to_dict` leaves them out. Under an opt-in they are sums of
    the per-window releases of :mod:`panstream.release.telemetry` (noisy, possibly slightly negative, or
    exact under :meth:`TelemetryPolicy.exact_counts`).

    Attributes:
        seconds: time of the run; checkpoints, releases: how many were written (on the clock's
        schedule, plus the final checkpoint); refused_releases: releases refused for lack of budget;
        interrupted: stopped by a signal; input: the input being read; position, size: bytes of the
        current *file* input read so far and its size (``None`` for a stream: a pipe's volume is not
        shown); bytes_read: bytes of the file inputs finished; formats: format used per file input;
        counted: whether counts are kept (an opt-in); lines, accepted, empty, malformed, outside,
        headers: the counts (lines read; items applied to the table; lines skipped for each
        reason: blank, malformed, outside the universe, a header or comment line);
        exact_counts, telemetry_epsilon: the opt-in; count_sd, lines_sd: noise sd of each count
        and of ``lines``; windows: telemetry windows released; inputs: inputs begun;
        empty_inputs: the names of those that held no log line (blank or header lines only, or
        nothing: one notice each, part of the loud-failure decision; none under ``--keep-going``).
    """

    seconds: float = 0.0
    checkpoints: int = 0
    releases: int = 0
    refused_releases: int = 0
    interrupted: bool = False
    input: str = ""
    position: int | None = None
    size: int | None = None
    bytes_read: int = 0
    formats: list[str] = field(default_factory=list)
    counted: bool = False
    lines: int = 0
    accepted: int = 0
    empty: int = 0
    malformed: int = 0
    outside: int = 0
    headers: int = 0
    exact_counts: bool = False
    telemetry_epsilon: float | None = None
    count_sd: float = 0.0
    lines_sd: float = 0.0
    windows: int = 0
    inputs: int = 0
    empty_inputs: list[str] = field(default_factory=list)

    @property
    def lines_per_second(self) -> float:
        return max(self.lines, 0) / self.seconds if self.seconds > 0 else 0.0

    def absorb(self, window: CountWindow) -> None:
        """Take the released totals of ``window`` (nothing exact unless the policy is exact)."""
        t = window.totals
        self.accepted, self.empty = t["accepted"], t["empty"]
        self.malformed, self.outside = t["malformed"], t["outside"]
        self.headers = t["headers"]
        self.lines = sum(t[k] for k in COUNT_FIELDS)
        self.windows = window.windows
        self.count_sd = window.total_sd()
        self.lines_sd = window.total_sd(len(COUNT_FIELDS))

    def to_dict(self) -> dict[str, Any]:
        """The figures for ``--json``: no count key at all unless counts were opted into."""
        d = asdict(self)
        if self.counted:
            d["lines_per_second"] = self.lines_per_second
        else:
            for k in (*COUNT_FIELDS, "lines", "exact_counts", "telemetry_epsilon", "count_sd",
                      "lines_sd", "windows"):
                del d[k]
            d["telemetry"] = NOTHING_COUNTED
        return d


@dataclass
class Input:
    """One input: a name for messages, a :class:`ChunkReader`, and for a file its read position
    (``f() -> (bytes read, size)`` or ``None``; see ``panstream.sources.files``)."""

    name: str
    reader: ChunkReader
    position: Callable[[], tuple[int, int] | None] | None = None


class Ingestor(Driver):
    """Run log inputs into an estimator (either family), owning the checkpoint and release order.

    Args:
        est: the estimator to update.
        fmt: the log format (``auto`` is resolved per input from its first chunk).
        state_path: where to checkpoint (``None``: keep the table in memory only).
        checkpoint_every: seconds between periodic checkpoints, on a fixed grid from the start
            (``None`` or 0: only the final one).
        release_every: seconds between periodic releases (``None``: none), on a fixed grid.
        release_epsilon: output epsilon of each periodic release.
        release_mechanism: ``laplace`` or ``geometric``.
        on_release: called with each release's ``to_dict()`` after its ledger charge is durable.
        on_notice: called with one-line operational messages (e.g. a refused release).
        on_progress: called every ``progress_every`` seconds (fixed grid) with the running stats;
            ``progress_every <= 0`` reports at every loop turn (tests only: turns follow arrivals).
        check: fail loudly (:class:`InputFormatError`) when (almost) nothing of an input is
            accepted: judged on the exact counts of each input's first :data:`SAMPLE_LINES`
            non-empty lines (or of the whole input if shorter), which exist only until that
            decision, and, when counts are opted into, also on the released totals after every
            window and at the end of the run (:func:`panstream.inputs.check.verdict`). ``False``:
            go on anyway (``--keep-going``).
        telemetry: whether and how arrivals are counted (default: nothing counted).
        clock: monotonic clock (for tests).
        wall_clock: wall clock, for the state file's times (for tests).

    Example (exact counts, an explicit opt-in):
        >>> import io
        >>> from panstream.sources import ChunkReader
        >>> from panstream import DensityEstimator
        >>> est = DensityEstimator("ipv4:10.0.0.0/24", epsilon=1.0)
        >>> ing = Ingestor(est, Format("plain"), telemetry=TelemetryPolicy.exact_counts())
        >>> data = io.BytesIO(b"10.0.0.1\\n10.0.0.2\\nnope\\n")
        >>> s = ing.run([Input("example", ChunkReader(data.readinto))])
        >>> s.lines, s.accepted, s.malformed
        (3, 2, 1)
        >>> one = ChunkReader(io.BytesIO(b"10.0.0.3\\n").readinto)
        >>> s = Ingestor(est, Format("plain")).run([Input("x", one)])
        >>> s.counted, "accepted" in s.to_dict(), s.to_dict()["telemetry"]
        (False, False, 'telemetry: nothing counted')
    """

    def __init__(self, est: Estimator, fmt: Format, *, state_path: str | None = None,
                 checkpoint_every: float | None = None, release_every: float | None = None,
                 release_epsilon: float | None = None, release_mechanism: str = "laplace",
                 on_release: Callable[[dict[str, Any]], None] | None = None,
                 on_notice: Callable[[str], None] | None = None,
                 on_progress: Callable[[IngestStats], None] | None = None,
                 progress_every: float = 1.0, telemetry: TelemetryPolicy | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time, check: bool = True) -> None:
        if release_every and not release_epsilon:
            msg = "periodic releases need a release epsilon"
            raise ConfigurationError(msg)
        super().__init__(est.universe, fmt, state_path=state_path,
                         release_epsilon=release_epsilon, release_mechanism=release_mechanism,
                         on_notice=on_notice, on_progress=on_progress,
                         progress_every=progress_every, telemetry=telemetry, clock=clock,
                         wall_clock=wall_clock)
        self.est = est
        self.checkpoint_every = checkpoint_every or None
        self.release_every = release_every or None
        self.on_release = on_release
        self.stats = IngestStats(counted=self.telemetry.counts,
                                 exact_counts=self.telemetry.exact,
                                 telemetry_epsilon=self.telemetry.epsilon)
        self._window: CountWindow | None = None
        self._pending: list[np.ndarray] = []
        self._npending = 0
        self.check = check
        self._failure: str | None = None
        self._kind = fmt.spec  # the format of the current input (for the verdict)
        # The exact counts of the current input's first lines, kept only until the loud-failure
        # decision on them is made (then None): see _sample_chunk.
        self._sample: dict[str, int] | None = None
        self._input = ""  # the name of the current input (for its notices)
        self._binary = False  # -f auto found the current input to be binary, not text

    # ------------------------------------------------------------------ steps
    def flush(self) -> None:
        """Apply pending indices to the table (step 2)."""
        if not self._pending:
            return
        if len(self._pending) == 1:
            idx = self._pending[0]  # update_indices wipes it after use
        else:
            idx = np.concatenate(self._pending)
            for a in self._pending:  # wipe the parts; the joined copy is wiped by update_indices
                a.fill(0)
        self._pending.clear()
        self._npending = 0
        self.est.update_indices(idx)  # wipes idx

    def checkpoint(self, at: float | None = None) -> None:
        """Flush, then save the state atomically (step 3). No-op without a state path.

        Args:
            at: the scheduled instant (monotonic clock) of a periodic checkpoint: the file's
                access and modification times are set to it, so they show the schedule rather
                than when the write finished. ``None`` (the final checkpoint, at the end of input
                or on a signal): the file keeps the real time.
        """
        self.flush()
        if self.state_path is None:
            return
        self._save(self.est, self.state_path, at)
        self.stats.checkpoints += 1

    def release_now(self, at: float | None = None) -> dict[str, Any] | None:
        """Flush, release (charging the ledger), checkpoint, then publish (step 4).

        Returns the release as a dict, or ``None`` if the budget refused it.
        """
        assert self.release_epsilon is not None
        self.flush()
        try:
            rel = self.est.release(self.release_epsilon, self.release_mechanism)
        except BudgetExhaustedError as exc:
            self.stats.refused_releases += 1
            self.release_every = None
            if self.on_notice:
                self.on_notice(f"{exc}; periodic releases stop, ingestion continues")
            return None
        self.checkpoint(at)
        out = rel.to_dict()
        self.stats.releases += 1
        if self.on_release:
            self.on_release(out)
        return out

    def _close_window(self, now: float) -> None:
        """Release the window's counts (an opt-in) into the stats; forget the exact ones."""
        if self._window is None:
            return
        self._window.close(now)
        self.stats.absorb(self._window)

    def _ingest_chunk(self, kind: str, chunk: memoryview) -> None:
        res = self._parser(kind).parse(chunk)
        if self._sample is not None:
            self._sample_chunk(res)
        if self._window is not None:  # counts only under an opt-in; by default none outlive this
            self._window.add(accepted=int(res.indices.size), empty=res.empty,
                             malformed=res.malformed, outside=res.outside, headers=res.headers)
        if res.indices.size:
            self._pending.append(res.indices)
            self._npending += int(res.indices.size)
            if self._npending >= BATCH:
                self.flush()

    # ------------------------------------------------------------------ loop
    def run(self, inputs: Iterable[Input]) -> IngestStats:
        """Ingest every input in turn, then flush and write the final checkpoint (step 5).

        Returns:
            The run's :class:`IngestStats` (also kept in :attr:`stats`).

        Raises:
            SourceError: an input failed (the final checkpoint is still written).
            InputFormatError: (almost) nothing was accepted (with ``check``; the final checkpoint
                is still written).
            StateError: a checkpoint could not be written.
        """
        t0 = self._t0 = self.clock()
        wall0 = self._wall0 = self.wall_clock()

        def grid(every: float | None) -> Schedule | None:
            return Schedule(t0, every, wall0) if every and every > 0 else None

        ckpt = grid(self.checkpoint_every)
        rel = grid(self.release_every)
        prog = grid(self.progress_every) if self.on_progress else None
        every_turn = self.on_progress is not None and prog is None
        win = grid(self.telemetry.window) if self.telemetry.counts else None
        self._window = CountWindow(self.telemetry, COUNT_FIELDS, now=t0) if win else None
        schedules = [ckpt, rel, prog, win]
        stats = self.stats
        try:
            for inp in inputs:
                if self._stop:
                    break
                stats.input = inp.name
                where = inp.position() if inp.position else None
                stats.position, stats.size = where if where else (None, None)
                set_idle = getattr(inp.reader, "set_idle", None)
                if set_idle is not None:
                    set_idle(wait_before(self.clock(), schedules, IDLE_TICK))
                kind = None if self.format.kind == "auto" else self.format.spec
                self._binary = False
                self._parsers.clear()  # header formats: each input has its own header
                self._sample = dict.fromkeys(COUNT_FIELDS, 0)
                stats.inputs += 1
                self._input = inp.name
                for chunk in inp.reader:
                    if len(chunk):
                        if kind is None:
                            kind = self._detect(inp.name, chunk, announce=where is not None)
                        self._kind = kind
                        self._ingest_chunk(kind, chunk)
                    if len(chunk) < DRAINED_BELOW:
                        # The input is drained (a short chunk or an idle tick): apply what is
                        # pending now, so recent items never wait in memory for more traffic.
                        self.flush()
                    now = self.clock()
                    if ckpt is not None and ckpt.due(now):
                        self.checkpoint(ckpt.advance(now))
                    if rel is not None and self.release_every and rel.due(now):
                        self.release_now(rel.advance(now))  # may switch releases off
                        if not self.release_every:
                            schedules[1] = rel = None
                    if win is not None and win.due(now):
                        self._close_window(win.advance(now))
                        self._check_released()
                    if prog is not None and prog.due(now) or every_turn:
                        at = prog.advance(now) if prog is not None else now
                        stats.seconds = at - t0  # the scheduled instant: no loop timing in it
                        if where is not None and inp.position is not None:
                            where = inp.position() or where
                            stats.position, stats.size = where
                        assert self.on_progress is not None
                        self.on_progress(stats)
                    if self._stop:
                        stats.interrupted = self._failure is None
                        break
                    if set_idle is not None:
                        set_idle(wait_before(self.clock(), schedules, IDLE_TICK))
                if where is not None and inp.position is not None:
                    where = inp.position() or where
                    stats.bytes_read += where[0]
                    stats.position, stats.size = where
                if self._stop and self._failure is None:
                    # a signal during the input's last read (Ctrl+C also ends a tail -F)
                    stats.interrupted = True
                self._decide_sample()  # a short input: judged on all of it
                if self._failure is not None:
                    break
        finally:
            self.checkpoint()
            end = self.clock()
            self._close_window(end)  # the last (partial) window, released like the others
            stats.seconds = end - t0
        if self._failure is None and self.check and not stats.interrupted and stats.counted:
            self._failure = self._verdict()
        if self._failure is not None:
            raise InputFormatError(self._failure)
        return stats

    def _detect(self, name: str, chunk: memoryview, announce: bool) -> str:
        """``auto``: recognise the input's format from its first chunk; for a file, say so (one
        notice). A stream's format is not announced: when it is detected would tell when the first
        line arrived."""
        det = detect(chunk)
        self._binary = det.binary
        if announce:
            self.stats.formats.append(f"{name}: {det.spec}")
            if self.on_notice and not det.known:  # said once; the loud failure follows
                self.on_notice(f"{name}: no known log format fits its first lines: {det.note}")
            elif self.on_notice:
                note = f"; {det.note}" if det.note else ""
                self.on_notice(f"{name}: format {det.name} detected (-f {det.spec}){note}")
        return det.spec

    def _verdict(self) -> str | None:
        """The loud-failure decision on the released totals (only when counts are opted into)."""
        return verdict(self.stats, self._kind, self.est.universe,
                       auto=self.format.kind == "auto", sd=self.stats.count_sd, released=True,
                       binary=self._binary)

    def _check_released(self) -> None:
        """After each released window (counts opted into): stop the run if the totals show
        (almost) nothing accepted (the verdict waits until they are large enough to tell)."""
        if not self.check or self._failure is not None or not self.stats.counted:
            return
        self._failure = self._verdict()
        if self._failure is not None:
            self._stop = True

    def _sample_chunk(self, res: Any) -> None:
        """Add a parsed chunk's exact counts to the current input's sample; decide once it holds
        :data:`SAMPLE_LINES` non-empty lines. The counts live in this process only, and only until
        that decision (docs/threat-model.md, "The loud-failure decision")."""
        s = self._sample
        if s is None:
            return
        s["accepted"] += int(res.indices.size)
        s["empty"] += res.empty
        s["malformed"] += res.malformed
        s["outside"] += res.outside
        s["headers"] += res.headers
        if s["accepted"] + s["malformed"] + s["outside"] >= SAMPLE_LINES:
            self._decide_sample()

    def _decide_sample(self) -> None:
        """Judge the sample in hand (full, or the whole of a short input: whatever its size, with
        the same one-bit line), then forget it. An input cut short by a signal is not judged.

        An input that held no log line at all (nothing, or blank and header lines only) is said
        in one notice (issue 37: it used to pass in silence, and a release of the empty table
        followed); the notice names the input only, never a count."""
        s, self._sample = self._sample, None
        if s is None or not self.check or self._failure is not None or self.stats.interrupted:
            if s is not None:
                s.clear()
            return
        self._failure = verdict(s, self._kind, self.est.universe, auto=self.format.kind == "auto",
                                binary=self._binary)
        if self._failure is None and s["accepted"] + s["malformed"] + s["outside"] == 0:
            self.stats.empty_inputs.append(self._input)
            if self.on_notice:
                self.on_notice(empty_input_line(self._input))
        s.clear()
        if self._failure is not None:
            self._stop = True
