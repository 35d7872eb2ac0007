"""The ingest loop: parse chunks of log lines, update the table, checkpoint, release.

One object, :class:`Ingestor`, owns the order in which things become durable. For every chunk:

1. parse the chunk into cell indices (:class:`panstream.parse.LineParser`); wipe the chunk;
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

The counts in :class:`IngestStats` (lines, malformed, ...) are operational and never written to the
state. They are covered by the printed guarantee (see :mod:`panstream.telemetry`): exact counts live
only in the current reporting window (1 s) and are released with geometric noise at a separate
event-level telemetry epsilon; the stats hold only the running sums of those noisy releases, unless
the run opted into exact counts (:meth:`TelemetryPolicy.exact_counts`). Nothing here imports click
or touches signals; the command line (``panstream ingest``) wires both.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from panstream.errors import BudgetExhaustedError, ConfigurationError, InputFormatError
from panstream.estimators.base import Estimator
from panstream.parse import Format, LineParser, detect, parse_format
from panstream.parse_check import verdict
from panstream.sources.files import ChunkReader
from panstream.telemetry import CountWindow, TelemetryPolicy

#: The counts of one reporting window. One log line is exactly one of these, so the window's count
#: vector has L1 sensitivity 1; the lines total is their sum.
COUNT_FIELDS = ("accepted", "empty", "malformed", "outside")

#: Apply pending indices once this many have accumulated (the table's pipelined update likes >= 2**17;
#: a 2 MiB chunk of plain addresses holds about 150,000 lines, so it goes straight to the table).
BATCH = 1 << 17

#: A chunk shorter than this means the reader drained its input: flush pending indices.
DRAINED_BELOW = 1 << 20


@dataclass
class IngestStats:
    """Operational figures of one run (printed, never stored).

    The counts are sums of the noisy per-window releases of :mod:`panstream.telemetry` (exact only
    under :meth:`TelemetryPolicy.exact_counts`); a noisy count may be slightly negative.

    Attributes:
        lines: lines read; accepted: items applied to the table; empty, malformed, outside: lines
        skipped for each reason (malformed includes over-long lines and binary junk);
        exact_counts: whether the counts are exact; telemetry_epsilon: event-level epsilon of the
        counts (``None`` when exact); count_sd, lines_sd: noise sd of each count and of ``lines``;
        windows: reporting windows released; seconds: wall-clock time of the run; checkpoints,
        releases: how many were written; refused_releases: releases refused for lack of budget;
        formats: format used per input.
    """

    lines: int = 0
    accepted: int = 0
    empty: int = 0
    malformed: int = 0
    outside: int = 0
    exact_counts: bool = False
    telemetry_epsilon: float | None = None
    count_sd: float = 0.0
    lines_sd: float = 0.0
    windows: int = 0
    seconds: float = 0.0
    checkpoints: int = 0
    releases: int = 0
    refused_releases: int = 0
    interrupted: bool = False
    formats: list[str] = field(default_factory=list)

    @property
    def lines_per_second(self) -> float:
        return max(self.lines, 0) / self.seconds if self.seconds > 0 else 0.0

    def absorb(self, window: CountWindow) -> None:
        """Take the released totals of ``window`` (nothing exact unless the policy is exact)."""
        t = window.totals
        self.accepted, self.empty = t["accepted"], t["empty"]
        self.malformed, self.outside = t["malformed"], t["outside"]
        self.lines = self.accepted + self.empty + self.malformed + self.outside
        self.windows = window.windows
        self.count_sd = window.total_sd()
        self.lines_sd = window.total_sd(len(COUNT_FIELDS))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["lines_per_second"] = self.lines_per_second
        return d


@dataclass
class Input:
    """One input: a name for messages and a :class:`ChunkReader`."""

    name: str
    reader: ChunkReader


class Ingestor:
    """Run log inputs into an estimator (either family), owning the checkpoint and release order.

    Args:
        est: the estimator to update.
        fmt: the log format (``auto`` is resolved per input from its first chunk).
        state_path: where to checkpoint (``None``: keep the table in memory only).
        checkpoint_every: seconds between periodic checkpoints (``None`` or 0: only the final one).
        release_every: seconds between periodic releases (``None``: none).
        release_epsilon: output epsilon of each periodic release.
        release_mechanism: ``laplace`` or ``geometric``.
        on_release: called with each release's ``to_dict()`` after its ledger charge is durable.
        on_notice: called with one-line operational messages (e.g. a refused release).
        on_progress: called about every ``progress_every`` seconds with the running stats.
        check: fail loudly (:class:`InputFormatError`) when (almost) nothing of the input is
            accepted, judged on the released totals after every window and at the end of the run
            (:func:`panstream.parse_check.verdict`). ``False``: go on anyway (``--keep-going``).
        telemetry: how the operational counts are released (default: noisy, event-level
            epsilon :data:`panstream.telemetry.DEFAULT_TELEMETRY_EPSILON` per 1-s window).
        clock: monotonic clock (for tests).

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
    """

    def __init__(self, est: Estimator, fmt: Format, *, state_path: str | None = None,
                 checkpoint_every: float | None = None, release_every: float | None = None,
                 release_epsilon: float | None = None, release_mechanism: str = "laplace",
                 on_release: Callable[[dict[str, Any]], None] | None = None,
                 on_notice: Callable[[str], None] | None = None,
                 on_progress: Callable[[IngestStats], None] | None = None,
                 progress_every: float = 1.0, telemetry: TelemetryPolicy | None = None,
                 clock: Callable[[], float] = time.monotonic, check: bool = True) -> None:
        if release_every and not release_epsilon:
            msg = "periodic releases need a release epsilon"
            raise ConfigurationError(msg)
        self.est = est
        self.format = fmt
        self.state_path = os.fspath(state_path) if state_path is not None else None
        self.checkpoint_every = checkpoint_every or None
        self.release_every = release_every or None
        self.release_epsilon = release_epsilon
        self.release_mechanism = release_mechanism
        self.on_release = on_release
        self.on_notice = on_notice
        self.on_progress = on_progress
        self.progress_every = progress_every
        self.clock = clock
        self.telemetry = telemetry or TelemetryPolicy()
        self.stats = IngestStats(exact_counts=self.telemetry.exact,
                                 telemetry_epsilon=self.telemetry.epsilon)
        self._window: CountWindow | None = None
        self._stop = False
        self._pending: list[np.ndarray] = []
        self._npending = 0
        self._parsers: dict[str, LineParser] = {}
        self.check = check
        self._failure: str | None = None
        self._kind = fmt.spec  # the format of the current input (for the verdict)

    # ------------------------------------------------------------------ control
    def request_stop(self) -> None:
        """Ask the loop to stop after the current chunk (safe to call from a signal handler)."""
        self._stop = True

    @property
    def stopping(self) -> bool:
        return self._stop

    # ------------------------------------------------------------------ steps
    def _parser(self, kind: str) -> LineParser:
        p = self._parsers.get(kind)
        if p is None:
            fmt = self.format if kind == self.format.spec else parse_format(kind)
            p = self._parsers[kind] = LineParser(self.est.universe, fmt)
        return p

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

    def checkpoint(self) -> None:
        """Flush, then save the state atomically (step 3). No-op without a state path."""
        self.flush()
        if self.state_path is None:
            return
        self.est.save(self.state_path)
        self.stats.checkpoints += 1

    def release_now(self) -> dict[str, Any] | None:
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
        self.checkpoint()
        out = rel.to_dict()
        self.stats.releases += 1
        if self.on_release:
            self.on_release(out)
        return out

    def _close_window(self, now: float) -> None:
        """Release the window's counts (noisy by default) into the stats; forget the exact ones."""
        assert self._window is not None
        self._window.close(now)
        self.stats.absorb(self._window)

    def _ingest_chunk(self, kind: str, chunk: memoryview) -> None:
        res = self._parser(kind).parse(chunk)
        assert self._window is not None
        self._window.add(accepted=int(res.indices.size), empty=res.empty,
                         malformed=res.malformed, outside=res.outside)
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
        t0 = self.clock()
        now = t0
        self._window = CountWindow(self.telemetry, COUNT_FIELDS, now=t0)
        next_ckpt = t0 + self.checkpoint_every if self.checkpoint_every else None
        next_rel = t0 + self.release_every if self.release_every else None
        next_prog = t0 + self.progress_every
        try:
            for inp in inputs:
                if self._stop:
                    break
                kind = None if self.format.kind == "auto" else self.format.spec
                self._parsers.clear()  # header formats: each input has its own header
                for chunk in inp.reader:
                    if len(chunk):
                        if kind is None:
                            kind = self._detect(inp.name, chunk)
                        self._kind = kind
                        self._ingest_chunk(kind, chunk)
                    if len(chunk) < DRAINED_BELOW:
                        # The input is drained (a short chunk or an idle tick): apply what is
                        # pending now, so recent items never wait in memory for more traffic.
                        self.flush()
                    now = self.clock()
                    if next_ckpt is not None and now >= next_ckpt:
                        self.checkpoint()
                        next_ckpt = now + (self.checkpoint_every or 0)
                    if next_rel is not None and self.release_every and now >= next_rel:
                        self.release_now()  # may switch releases off (budget spent)
                        next_rel = now + self.release_every if self.release_every else None
                    if self._window.due(now):
                        self._close_window(now)
                        self._check_sample()
                    if self.on_progress and now >= next_prog:
                        self.stats.seconds = now - t0
                        self.on_progress(self.stats)
                        next_prog = now + self.progress_every
                    if self._stop:
                        self.stats.interrupted = self._failure is None
                        break
                if self._failure is not None:
                    break
        finally:
            self.checkpoint()
            end = self.clock()
            self._close_window(end)  # the last (partial) window, released like the others
            self.stats.seconds = end - t0
        if self._failure is None and self.check and not self.stats.interrupted:
            self._failure = self._verdict()
        if self._failure is not None:
            raise InputFormatError(self._failure)
        return self.stats

    def _detect(self, name: str, chunk: memoryview) -> str:
        """``auto``: recognise the input's format from its first chunk and say so (one notice)."""
        det = detect(chunk)
        self.stats.formats.append(f"{name}: {det.spec}")
        if self.on_notice:
            note = f"; {det.note}" if det.note else ""
            self.on_notice(f"{name}: format {det.name} detected (-f {det.spec}){note}")
        return det.spec

    def _verdict(self) -> str | None:
        """The loud-failure decision on the released totals (noisy unless --exact-counts)."""
        return verdict(self.stats, self._kind, self.est.universe,
                       auto=self.format.kind == "auto", sd=self.stats.count_sd)

    def _check_sample(self) -> None:
        """After each released window: stop the run if the totals show (almost) nothing accepted
        (the verdict waits until they are large enough to tell, see parse_check.verdict)."""
        if not self.check or self._failure is not None:
            return
        self._failure = self._verdict()
        if self._failure is not None:
            self._stop = True
