"""``panstream ingest --window``: tumbling windows, a released series, metrics (issue 23).

The options are added to ``ingest`` by :func:`window_options`; with ``--window`` the command hands
over to :func:`run_windowed`, which wires :class:`panstream.sources.windowed.WindowedIngestor` to files or
standard input, the series file, signals, the metrics server and the printed accounting. Nothing
here changes ``ingest`` without ``--window``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any

import click

from panstream import estimators
from panstream.cli.common import (
    F,
    Interrupt,
    check_inputs,
    emit_json,
    env,
    given,
    named_inputs,
    stop_on_signals,
)
from panstream.cli.window_export import check_export_dir, presto_exporter
from panstream.errors import ConfigurationError, InputFormatError, SourceError, StateError
from panstream.inputs.parser import Format, tune_allocator
from panstream.inputs.times import LOCAL_FORMATS, check_time, has_time, needs_zone
from panstream.inputs.zones import Zone, parse_zone
from panstream.planning import plan_split
from panstream.release.honesty import CLAMP_MARK_NOTE, shown_count
from panstream.release.telemetry import TelemetryPolicy
from panstream.sources.windowed import WindowedIngestor, WindowStats, window_stem
from panstream.state.files import state_lock
from panstream.universe import Universe
from panstream.windows import WindowSchedule, duration_text, horizon_line, windows_met
from panstream.windows.eventtime import label, parse_duration
from panstream.windows.schedule import parse_instant
from panstream.windows.series import Series, SeriesMetrics, dropped_text, read

#: The options only a windowed run takes (checked when --window is missing).
WINDOW_ONLY = ("time", "lateness", "series", "horizon", "close_at_end", "export_presto_dir",
               "range_from", "range_to", "time_zone")

#: Default allowed lateness of event-time windows.
DEFAULT_LATENESS = "5m"


def _duration(what: str, zero_ok: bool = False) -> Callable[..., int | None]:
    def convert(ctx: click.Context, param: click.Parameter, value: Any) -> int | None:
        if value is None:
            return None
        try:
            secs = parse_duration(value, what)
        except ConfigurationError as exc:
            raise click.BadParameter(str(exc)) from None
        if secs == 0 and not zero_ok:
            raise click.BadParameter(f"{what} must be longer than 0 seconds")
        return secs

    return convert


def _instant(what: str) -> Callable[..., int | None]:
    def convert(ctx: click.Context, param: click.Parameter, value: Any) -> int | None:
        if value is None:
            return None
        try:
            return parse_instant(value, what)
        except ConfigurationError as exc:
            raise click.BadParameter(str(exc)) from None

    return convert


def _zone(ctx: click.Context, param: click.Parameter, value: Any) -> Zone | None:
    if value is None:
        return None
    try:
        return parse_zone(value)
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc)) from None


def time_zone_option(prefix: str = "") -> Callable[[F], F]:
    """``--time-zone``: the zone of the formats that write a local time without one."""
    return click.option(
        "--time-zone", "time_zone", default=None, metavar="ZONE", callback=_zone,
        help=f"With --window, event time: the zone of logs written in local time "
             f"({', '.join(LOCAL_FORMATS[:3])}, ...): UTC, +02:00 or Europe/Berlin.",
        **env(f"{prefix}TIME_ZONE"))


def zone_notice(fmt_spec: str, zone: Zone | None, mode: str = "event") -> str | None:
    """The one-line notice for a ``--time-zone`` that a format does not use (``None``: it does)."""
    kind = fmt_spec.partition(":")[0]
    if zone is None or kind == "auto" or (mode == "event" and needs_zone(fmt_spec)):
        return None
    if mode != "event":
        return "--time-zone is not used with processing time (lines take the clock's time)"
    return (f"--time-zone {zone.name} is not used: {kind} lines carry their own zone (or are "
            "UTC)")


def range_options(prefix: str = "") -> list[Callable[[F], F]]:
    """``--from`` and ``--to``: the declared range of windows (public, never read off the data)."""
    return [
        click.option("--from", "range_from", default=None, metavar="TIME",
                     callback=_instant("--from"),
                     help="With --window: the start of the first window (2026-11-16, ISO or UNIX "
                          "seconds); required for event time over FILES.", **env(f"{prefix}FROM")),
        click.option("--to", "range_to", default=None, metavar="TIME", callback=_instant("--to"),
                     help="With --window: the end of the last window (exclusive, on the grid).",
                     **env(f"{prefix}TO")),
    ]


def window_options() -> Callable[[F], F]:
    """The ``--window`` family of options (the command receives them as keyword arguments)."""
    opts = [
        click.option("--window", default=None, metavar="DURATION", callback=_duration("--window"),
                     help="Tumbling windows (1h, 1d, 15m, ...; UTC-aligned): a fresh table each, "
                          "released once when it closes (docs/windows.md).",
                     **env("WINDOW")),
        click.option("--time", "time_mode", type=click.Choice(["auto", "event", "processing"]),
                     default="auto", show_default=True,
                     help="With --window: event (the time in each line), processing (the clock), or "
                          "auto (event for FILES, processing for stdin).",
                     **env("TIME")),
        click.option("--lateness", default=DEFAULT_LATENESS, show_default=True, metavar="DURATION",
                     callback=_duration("--lateness", zero_ok=True),
                     help="Live event time: how long a window stays open on the clock after its end "
                          "(not used by a replay of FILES).",
                     **env("LATENESS")),
        *range_options(),
        time_zone_option(),
        click.option("--series", type=click.Path(dir_okay=False), default=None, metavar="FILE",
                     help="With --window: append one record per closed window (JSON lines, or CSV "
                          "for .csv); required with --state.", **env("SERIES")),
        click.option("--horizon", default=None, metavar="DURATION", callback=_duration("--horizon"),
                     help="With --window: print the epsilon of a person seen in every window of any "
                          "span this long.",
                     **env("HORIZON")),
        click.option("--close-at-end/--keep-open", "close_at_end", default=None,
                     help="With --window: at the end of the input release every open window, or keep "
                          "them for the next run (default: by input).",
                     **env("CLOSE_AT_END")),
        click.option("--metrics-port", type=click.IntRange(min=0, max=65535), default=None,
                     help="Serve Prometheus metrics on /metrics (0: any free port): the last release "
                          "and liveness; nothing about arrivals.",
                     **env("METRICS_PORT")),
        click.option("--metrics-host", default="127.0.0.1", show_default=True,
                     help="Address the metrics server binds.", **env("METRICS_HOST")),
        click.option("--export-presto-dir", type=click.Path(file_okay=False), default=None,
                     metavar="DIR",
                     help="With --window --estimator sketch: write each closed window's sketch to "
                          "DIR/<start>.sfm (this publishes it).",
                     **env("EXPORT_PRESTO_DIR")),
    ]

    def deco(f: F) -> F:
        for o in reversed(opts):
            f = o(f)
        return f

    return deco


def refuse_window_only(ctx: click.Context) -> None:
    """Refuse a window option given without ``--window``."""
    bad = [f"--{n.removeprefix('range_').replace('_', '-')}" for n in WINDOW_ONLY
           if n in ctx.params and given(ctx, n)]
    if bad:
        raise click.UsageError(f"{', '.join(bad)} go(es) with --window (e.g. --window 1d)")


def _size(n: int) -> str:
    x = float(n)
    for unit in ("B", "KiB", "MiB"):
        if x < 1024:
            return f"{x:,.0f} {unit}" if unit == "B" else f"{x:,.1f} {unit}"
        x /= 1024
    return f"{x:,.1f} GiB"


def progress_line(s: WindowStats) -> str:
    """One progress line: the clock, the windows released and open, a file's byte offset. Nothing
    counts arrivals (the windows open follow the input's own times, or the clock)."""
    msg = (f"panstream: alive {s.seconds:,.0f} s, {s.released} window(s) released, {s.open} "
           f"open, {s.checkpoints} checkpoint(s)")
    if s.position is not None and s.size is not None:
        pct = 100.0 * s.position / s.size if s.size else 100.0
        return f"{msg}; reading {s.input}: {_size(s.position)} of {_size(s.size)} ({pct:.0f} %)"
    return f"{msg}; reading {s.input}" if s.input else msg


def _progress_printer() -> Callable[[WindowStats], None]:
    tty = sys.stderr.isatty()

    def show(s: WindowStats) -> None:
        sys.stderr.write(("\r\x1b[K" if tty else "") + progress_line(s) + ("" if tty else "\n"))
        sys.stderr.flush()

    return show


def say_window(rec: dict[str, Any], as_json: bool) -> None:
    """Print a closed window's record on stdout at once: one JSON line (``--json``) or
    :func:`window_line`."""
    if as_json:
        emit_json({"window": {k: v for k, v in rec.items() if k != "release"}})
    else:
        click.echo(window_line(rec))
    sys.stdout.flush()


def window_line(rec: dict[str, Any]) -> str:
    """One human line for a closed window's record."""
    pct = f"{100 * float(rec.get('confidence') or 0.95):g} %"
    figures = [shown_count(rec[k]) for k in ("estimate", "low", "high")]
    line = (f"window {rec['window']} .. {label(rec['end'])}: {rec['statistic']} "
            f"{figures[0]} [{figures[1]}, {figures[2]}] ({pct})"
            + (" NOISE-DOMINATED (interval wider than the value)"
               if rec.get("noise_dominated") else "") + ", epsilon "
            f"{rec['epsilon_window']:.6g} (state {rec['epsilon_state']:.6g} + release "
            f"{rec['epsilon_release']:g})")
    if rec.get("late_records") is not None:
        line += f"; {dropped_text(rec)}"
    return line + (f" ({CLAMP_MARK_NOTE})" if any(f.endswith("*") for f in figures) else "")


def run_windowed(ctx: click.Context, *, files: tuple[str, ...], universe: Universe | None,
                 epsilon: float, estimator: str, modulus: int, calibration: str,
                 state: str | None, fmt: Format, checkpoint_every: float,
                 release_every: float | None, release_epsilon: float | None,
                 release_mechanism: str, total_epsilon: float | None, releases: int | None,
                 telemetry: TelemetryPolicy, as_json: bool, window: int, time_mode: str,
                 progress: bool | None = None,
                 lateness: int, series: str | None, horizon: int | None,
                 close_at_end: bool | None, metrics_port: int | None, metrics_host: str,
                 export_presto_dir: str | None = None, range_from: int | None = None,
                 range_to: int | None = None, time_zone: Zone | None = None,
                 **_: Any) -> None:
    """``ingest --window``: check the options, plan the window's epsilons, run, summarize."""
    if release_every is not None:
        raise click.UsageError("--window releases each window once, when it closes: drop "
                               "--release-every")
    if "budget" in ctx.params and given(ctx, "budget"):
        raise click.UsageError("--window gives each window a budget of exactly its one release: "
                               "drop --budget")
    if releases is not None:
        raise click.UsageError("--window releases each window once: drop --releases")
    if universe is None and estimator == "sketch":  # the sketch's default grid, as ingest
        from panstream.estimators.sketch.sfm import SketchGrid

        universe = SketchGrid()
    if universe is None:
        raise click.UsageError("--window needs --universe (each window starts a new table)")
    if state is not None and series is None:
        raise click.UsageError("--window with --state needs --series FILE: the series records "
                               "which windows were released, so a restart never releases one "
                               "twice")
    if export_presto_dir is not None:
        check_export_dir(export_presto_dir, estimator)
    size = window
    per_horizon = windows_met(horizon, size) if horizon else None
    if total_epsilon is not None:
        clash = [f"--{k.replace('_', '-')}" for k in ("epsilon", "release_epsilon")
                 if given(ctx, k)]
        if clash:
            raise click.UsageError(f"--total-epsilon chooses the state and release epsilon of "
                                   f"each window: drop {', '.join(clash)}")
        per_window = total_epsilon / (per_horizon or 1)
        b = plan_split(per_window, universe, 1, 0.0, calibration).best
        epsilon, release_epsilon = b.epsilon_state_asked, b.epsilon_release
        where = (f"{total_epsilon:g} over {per_horizon} windows = {per_window:.6g} per window"
                 if per_horizon else f"{total_epsilon:g} per window")
        click.echo(f"panstream: total epsilon {where}: epsilon_state {b.epsilon_state:.6f} "
                   f"(realized) + one release at {b.epsilon_release:g}; one release +- "
                   f"{b.density_95:.6f} density at 95 %", err=True)
    if release_epsilon is None:
        raise click.UsageError("--window needs --release-epsilon E (each window's one release) "
                               "or --total-epsilon E (split per window)")
    mode = time_mode if time_mode != "auto" else ("event" if files else "processing")
    if mode == "event" and files:  # a finite input: the declared range, released at its end
        schedule = WindowSchedule.replay(size, range_from, range_to, inputs=_inputs_text(files))
    else:  # live: on the clock
        schedule = WindowSchedule.live(size, lateness if mode == "event" else 0, range_from,
                                       range_to)
    if close_at_end is None:  # a replay ends with its input; live windows end on the clock
        close_at_end = schedule.finite
    if mode == "event" and has_time(fmt.spec):  # a local time without its zone: refused now
        check_time(fmt.spec, time_zone, schedule.span)
    unused = zone_notice(fmt.spec, time_zone, mode)
    if unused:
        click.echo(f"panstream: {unused}", err=True)
    check_inputs(files, "tail -F access.log | panstream ingest --window 1h ...")
    tune_allocator()
    eps_out = float(release_epsilon)

    def make() -> Any:
        return estimators.new(estimator, universe, epsilon, calibration=calibration,
                              modulus=modulus, budget=eps_out)

    eps_state = estimators.state_epsilon(estimator, epsilon, calibration=calibration,
                                         modulus=modulus)
    eps_window = eps_state + eps_out + telemetry.cost(0)
    when = f"{mode} time"
    tele = ("(telemetry 0: nothing counted)" if not telemetry.counts
            else f"{telemetry.total_clause()}")
    head = (f"panstream ingest: {duration_text(size)} windows ({when}); each window: "
            f"epsilon_state {eps_state:.6f} + one release {eps_out:g} = {eps_window:.6f} per "
            f"person per window {tele}")
    click.echo(head, err=True)
    click.echo(f"panstream ingest: the schedule: {schedule.describe()}", err=True)
    acct = (f"panstream ingest: a person seen in W windows is covered at W x {eps_window:.6g} "
            "against whoever reads the whole series"
            + (f"; {horizon_line(eps_window, size, horizon)}" if horizon else ""))
    click.echo(acct, err=True)
    if export_presto_dir is not None:
        click.echo(f"panstream ingest: each closed window's sketch is published to "
                   f"{export_presto_dir}/<start>.sfm: an exported sketch is "
                   f"{eps_state:.6g}-DP by itself, the window's release adds nothing beyond "
                   f"{eps_window:.6g} per person per window", err=True)

    with contextlib.ExitStack() as held:
        # one writer per series and per state stem: two runs appending to one series could each
        # release the same window (twice the budget); the lock comes before the series is read
        if series is not None:
            try:
                held.enter_context(state_lock(series, "ingest --window (its series)"))
            except StateError:
                msg = (f"the series {series} is being written by another 'panstream ingest "
                       "--window': stop it first (one writer per series, or a window could be "
                       "released twice)")
                raise StateError(msg) from None
        if state is not None:
            held.enter_context(state_lock(state, "ingest --window"))
        ser = Series(series) if series is not None else None
        stats, interrupt = _run(ser, held, files=files, universe=universe, fmt=fmt, size=size, make=make,
                     eps_out=eps_out, release_mechanism=release_mechanism, state=state,
                     mode=mode, schedule=schedule, checkpoint_every=checkpoint_every,
                     close_at_end=close_at_end, epsilon=epsilon, estimator=estimator,
                     calibration=calibration, modulus=modulus, telemetry=telemetry,
                     as_json=as_json, progress=progress, metrics_port=metrics_port,
                     metrics_host=metrics_host, export_presto_dir=export_presto_dir,
                     time_zone=time_zone)
    _summary(stats, as_json, ser, state, eps_state, eps_out, eps_window, size, horizon)
    interrupt.exit()  # Ctrl+C: 130, after the final checkpoint and the summary


def _inputs_text(files: tuple[str, ...]) -> str:
    """How the declared-range message names the inputs of a replay (issue 37: it said "files"
    when the input was standard input)."""
    if files == ("-",):
        return ("standard input ('-': read to its end as a replay; for a live stream such as "
                "tail -F give no FILE, its windows run on the clock)")
    return "files and standard input ('-')" if "-" in files else "files"


def _run(ser: Series | None, held: contextlib.ExitStack, *, files: tuple[str, ...],
         universe: Universe, fmt: Format, size: int, make: Callable[[], Any], eps_out: float,
         release_mechanism: str, state: str | None, mode: str, schedule: WindowSchedule,
         checkpoint_every: float, close_at_end: bool, epsilon: float, estimator: str,
         calibration: str, modulus: int, telemetry: TelemetryPolicy, as_json: bool,
         progress: bool | None, metrics_port: int | None, metrics_host: str,
         export_presto_dir: str | None = None, time_zone: Zone | None = None
         ) -> tuple[WindowStats, Interrupt]:
    """Serve the metrics, run the windows over the inputs (under the locks in ``held``)."""
    metrics = SeriesMetrics(metrics_port, metrics_host) if metrics_port is not None else None
    if metrics is not None:
        held.callback(metrics.close)
        click.echo(f"panstream: metrics of the last closed window on "
                   f"http://{metrics_host}:{metrics.port}/metrics", err=True)
        if ser is not None and ser.released():
            metrics.show(read(ser.path)[-1], count=False)

    def on_close(rec: dict[str, Any]) -> None:
        say_window(rec, as_json)
        if metrics is not None:
            metrics.show(rec)

    def notice(msg: str) -> None:
        click.echo(f"panstream: {msg}", err=True)

    show_progress = sys.stderr.isatty() if progress is None else progress
    expect = estimators.expect_of(estimator, universe, epsilon, calibration, modulus)
    ing = WindowedIngestor(make, universe, fmt, size, release_epsilon=eps_out,
                           release_mechanism=release_mechanism, series=ser, state_path=state,
                           time_mode=mode, schedule=schedule,
                           checkpoint_every=checkpoint_every, close_at_end=close_at_end,
                           expect=expect, on_close=on_close, on_notice=notice,
                           on_export=(presto_exporter(export_presto_dir, notice)
                                      if export_presto_dir is not None else None),
                           on_progress=_progress_printer() if show_progress else None,
                           telemetry=telemetry, time_zone=time_zone)

    with stop_on_signals(ing) as interrupt:
        try:
            return ing.run(named_inputs(files, ing)), interrupt
        except InputFormatError as exc:  # -f auto found no format: the line plain ingest gives
            kept = (f"; the open windows are saved in {window_stem(state)}.*.pst, nothing of "
                    "this input in them" if state else "")
            raise InputFormatError(f"{exc}{kept}") from None
        except SourceError as exc:
            kept = (f"the open windows are saved in {window_stem(state)}.*.pst"
                    if state else "no --state: the open windows were lost")
            raise SourceError(f"{exc}; windows released so far are in the series; "
                              f"{kept}. Repair the file and run again") from None


def _summary(stats: WindowStats, as_json: bool, ser: Series | None, state: str | None,
             eps_state: float, eps_out: float, eps_window: float, size: int,
             horizon: int | None) -> None:
    released_total = len(ser.released()) if ser is not None else stats.released
    if as_json:
        emit_json({"summary": {
            "seconds": stats.seconds, "window_seconds": size, "released": stats.released,
            "series": ser.path if ser is not None else None, "series_windows": released_total,
            "open": stats.open, "restored": stats.restored, "skipped": stats.skipped,
            "checkpoints": stats.checkpoints, "exported": stats.exported,
            "interrupted": stats.interrupted,
            "bytes_read": stats.bytes_read, "epsilon_state": eps_state,
            "epsilon_release": eps_out, "epsilon_window": eps_window,
            "horizon_seconds": horizon,
            "horizon_windows": windows_met(horizon, size) if horizon else None,
            "epsilon_horizon": windows_met(horizon, size) * eps_window if horizon else None}})
        return
    where = (f"; {stats.open} open window(s) kept in {window_stem(state)}.*.pst"
             if state and stats.open else (f"; {stats.open} open window(s) lost (no --state)"
                                           if stats.open else ""))
    click.echo(f"panstream ingest: done in {stats.seconds:.2f} s; {stats.released} window(s) "
               f"released" + (f" to {ser.path} ({released_total} in all)" if ser else "")
               + where + (f"; {stats.exported} exported" if stats.exported else "")
               + (" [interrupted]" if stats.interrupted else ""), err=True)
    click.echo(f"panstream ingest: per window {eps_window:.6g} per person (state "
               f"{eps_state:.6g} + release {eps_out:g})"
               + (f"; {horizon_line(eps_window, size, horizon)}" if horizon else ""), err=True)
