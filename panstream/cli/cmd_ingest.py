"""``panstream ingest``: read IP logs from stdin or files into a private bit table."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

import click

from panstream import estimators
from panstream.calibration import DEFAULT_MODULUS
from panstream.cli.common import (
    AliasOption,
    FiniteFloatRange,
    SpecParam,
    StatePath,
    apply_split,
    budget_option,
    calibration_option,
    check_family_options,
    check_inputs,
    emit_json,
    env,
    epsilon_option,
    estimator_options,
    expected_option,
    given,
    handle_errors,
    json_option,
    named_inputs,
    stop_on_signals,
    total_epsilon_options,
    universe_option,
    warn_settings,
)
from panstream.cli.sketch_hash import check_resumed_hash, sketch_hash_option, with_sketch_hash
from panstream.cli.telemetry_options import telemetry_options
from panstream.cli.window_options import refuse_window_only, run_windowed, window_options
from panstream.errors import ConfigurationError, InputFormatError, SourceError, StateError
from panstream.estimators.base import Estimator
from panstream.inputs.formats import format_examples
from panstream.inputs.parser import Format, parse_format, tune_allocator
from panstream.release.honesty import CLAMP_MARK_NOTE, NOISE_FLAG, shown, shown_count
from panstream.release.telemetry import TelemetryPolicy
from panstream.sources.ingest import Ingestor, IngestStats
from panstream.state import persist
from panstream.state.files import state_lock
from panstream.universe import Universe
from panstream.windows.series import ReleaseMetrics


def no_state_notice(releases: bool) -> str:
    """Said at the start of a run without ``-s`` (issue 37: the table was discarded in silence).
    Not an error: a run whose periodic releases are its output needs no state.

    >>> no_state_notice(False)
    'no --state given: the table is discarded at exit; pass -s FILE to keep it'
    """
    why = " (the periodic releases are this run's only output)" if releases else ""
    return f"no --state given: the table is discarded at exit{why}; pass -s FILE to keep it"


def _open_estimator(ctx: click.Context, state: str | None, universe: Universe | None,
                    epsilon: float, calibration: str, budget: float, split: bool = False,
                    kind: str = "density", modulus: int = DEFAULT_MODULUS
                    ) -> tuple[Estimator, bool]:
    """Resume the state at ``state`` (checking the parameters given, its family included; with
    ``split``, the epsilon and budget of --total-epsilon too) or create a new estimator."""
    asked = {"kind": kind, "universe": universe, "epsilon": epsilon, "calibration": calibration,
             "modulus": modulus}
    option = {"kind": "estimator"}
    expect = {k: v for k, v in asked.items()
              if given(ctx, option.get(k, k)) or (split and k == "epsilon")}
    if state is not None and os.path.exists(state):
        est = persist.load(state, expect=expect)
        check_resumed_hash(ctx, state, est)
        if est.ledger.blocked is not None:  # an older copy put back: refuse before any input
            raise StateError(est.ledger.blocked)
        if est.ledger.shard:
            msg = (f"{state} is one shard of a Kafka consumer group: resume it with 'panstream "
                   "kafka', not ingest (a shard has no budget of its own)")
            raise StateError(msg)
        if (split or ("budget" in ctx.params and given(ctx, "budget"))) \
                and budget != est.ledger.budget:
            msg = (f"the state has an output budget of {est.ledger.budget:g}, not {budget:g}: the "
                   "budget is fixed when a state is created")
            raise ConfigurationError(msg)
        return est, True
    if kind == "sketch" or (universe is not None and universe.kind == "sketch"):
        from panstream.estimators.sketch.sfm import SketchGrid

        if kind != "sketch" and universe is not None:
            raise click.UsageError(f"--universe {universe.spec} is a sketch grid: add --estimator "
                                   "sketch")
        if universe is not None and universe.kind != "sketch":
            raise click.UsageError(f"--estimator sketch counts any items in a hashed grid, not "
                                   f"cells of {universe.spec}: drop --universe, or give a grid "
                                   "such as --universe sketch:4096x24:ip (or :id for any IDs)")
        universe = universe if universe is not None else SketchGrid()
    if universe is None:
        raise click.UsageError("--universe is required when starting a new state "
                               "(or set PANSTREAM_UNIVERSE)")
    return estimators.new(kind, universe, epsilon, calibration=calibration, modulus=modulus,
                          budget=budget), False


def _counts(s: IngestStats, outside: str = "outside") -> str:
    """The counts of ``s`` for a human line (an opt-in): ``~`` marks noisy ones (shown >= 0)."""
    if s.exact_counts:
        return (f"{s.accepted:,} accepted, {s.malformed:,} malformed, {s.outside:,} {outside}, "
                f"{s.empty:,} empty, {s.headers:,} header/comment")
    return (f"~{max(s.accepted, 0):,} accepted, ~{max(s.malformed, 0):,} malformed, "
            f"~{max(s.outside, 0):,} {outside}, ~{max(s.empty, 0):,} empty, "
            f"~{max(s.headers, 0):,} header/comment")


def release_line(rel: dict[str, Any]) -> str:
    """One human line for a periodic release of either family (its ``to_dict()``).

    Figures are shown clamped at 0 (the density also at 1), each clamped one marked ``*`` and
    the line ending with what that means; the JSON keeps the released, unbiased values."""
    eps = rel["epsilon"]
    eps_out = eps["release"] if isinstance(eps, dict) else eps
    flag = (f", {NOISE_FLAG} (interval wider than the value)" if rel.get("noise_dominated")
            else "")
    tail = f"epsilon {eps_out:g}, budget left {rel['budget_remaining']:g}{flag}"

    def c(x: float | None) -> str:
        return "-" if x is None else shown_count(x)

    if "cardinality" in rel:  # a sketch
        line = f"release: distinct {c(rel['distinct'])} [{c(rel['low'])}, {c(rel['high'])}], {tail}"
    elif "distinct" in rel:
        d = float(rel["density"])
        ds = shown(d, 0, 1)
        line = (f"release: distinct {c(rel['distinct'])} [{c(rel['distinct_low'])}, "
                f"{c(rel['distinct_high'])}], density {ds:.6f}{'*' if ds != d else ''}, {tail}")
    else:
        s = rel["stats"]

        def iv(name: str) -> str:
            v = s[name]
            return f"{c(v['value'])} [{c(v['low'])}, {c(v['high'])}]"

        line = (f"release: present {iv('present')}, seen once {iv('once')}, returning "
                f"{iv('returning')}, {tail}")
    # nothing else on the line holds a '*' (the tail is numbers and NOISE_FLAG's words)
    return line + (f" ({CLAMP_MARK_NOTE})" if "*" in line else "")


def _lines(s: IngestStats) -> str:
    return f"{s.lines:,} lines" if s.exact_counts else f"~{max(s.lines, 0):,} lines"


def _size(n: int) -> str:
    """Bytes for a human line (1,024-based units)."""
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if x < 1024 or unit == "GiB":
            return f"{x:,.0f} {unit}" if unit == "B" else f"{x:,.1f} {unit}"
        x /= 1024
    return f"{n} B"  # pragma: no cover


def _where(s: IngestStats) -> str:
    """What is being read: a file's position (public to its readers), a stream's name only."""
    if s.position is not None and s.size is not None:
        pct = 100.0 * s.position / s.size if s.size else 100.0
        return f"reading {s.input}: {_size(s.position)} of {_size(s.size)} ({pct:.0f} %)"
    return f"reading {s.input}" if s.input else "waiting for input"


def progress_line(s: IngestStats) -> str:
    """One progress line. By default it shows only what the clock and the input's own position
    say (alive, uptime on the schedule's instants, checkpoints, releases, a file's byte offset):
    nothing an arrival can move. Counts appear only under an opt-in."""
    msg = (f"panstream: alive {s.seconds:,.0f} s, {s.checkpoints} checkpoint(s), "
           f"{s.releases} release(s); {_where(s)}")
    if s.counted:
        msg += f"; {_lines(s)}, {_counts(s)}"
    return msg


def _progress_printer(tty: bool) -> Any:
    def show(s: IngestStats) -> None:
        msg = progress_line(s)
        if tty:
            sys.stderr.write("\r\x1b[K" + msg)
        else:
            sys.stderr.write(msg + "\n")
        sys.stderr.flush()

    return show


def summary_record(est: Estimator, stats: IngestStats, telemetry: TelemetryPolicy,
                   state: str | None, resumed: bool) -> dict[str, Any]:
    """The ``--json`` summary: parameters, the clock's figures, and the deployment's total.

    ``epsilon_total`` covers everything this run kept and emitted, per person: the table, the
    releases charged so far and the telemetry (0: nothing counted). Under a counting opt-in no
    per-person total exists (it grows with a person's arrivals): it is ``None`` and
    ``telemetry_epsilon_per_arrival`` says what each arrival costs (``None`` for exact counts:
    infinity). ``epsilon_total_at_budget`` is the total once the whole budget is spent.
    """
    eps_state, led = est.epsilon_state, est.ledger
    counted = telemetry.counts
    return {
        "state": state, "resumed": resumed, "estimator": est.kind, "universe": est.universe.spec,
        "epsilon_state": eps_state, **est.describe(),
        "budget": led.budget, "budget_spent": led.spent, **stats.to_dict(),
        "epsilon_total": None if counted else eps_state + led.spent,
        "epsilon_total_at_budget": None if counted else eps_state + led.budget,
        "telemetry_epsilon_per_arrival": telemetry.epsilon if counted else 0.0,
        # the common names (docs/schema/release.schema.json); release: the budget spent so far
        "family": est.kind,
        "epsilon": {"state": eps_state, "release": led.spent,
                    "total": None if counted else eps_state + led.spent},
    }


def total_line(eps_state: float, spent: float, budget: float, telemetry: TelemetryPolicy) -> str:
    """The deployment's pan-private total, per person, for one human line."""
    core = f"epsilon_state {eps_state:.6f} + releases {spent:g}"
    if not telemetry.counts:
        return (f"pan-private total {eps_state + spent:.6f} per person = {core} + telemetry 0 "
                f"(nothing counted); at most {eps_state + budget:.6f} once the budget of "
                f"{budget:g} is spent")
    return (f"pan-private total: {core} = {eps_state + spent:.6f} for the table and releases, "
            f"{telemetry.total_clause()}: no per-person total while counts are on")


def summary_lines(est: Estimator, stats: IngestStats, telemetry: TelemetryPolicy,
                  state: str | None, resumed: bool) -> list[str]:
    """The human summary (stderr), one string per line."""
    where = f"state {state} ({'resumed' if resumed else 'created'})" if state else \
        "no --state: the table was not saved"
    if state and not resumed and stats.inputs and len(stats.empty_inputs) == stats.inputs:
        # said by a notice per input already; the consequence for the new state, once
        where = (f"state {state} (created over no log line: an empty table, a valid start that a "
                 "later run resumes; released now, it estimates about 0)")
    head = f"panstream ingest: done in {stats.seconds:.2f} s"
    if stats.bytes_read:
        head += f", {_size(stats.bytes_read)} of files read"
    if stats.counted:
        head += (f"; {_lines(stats)} ({stats.lines_per_second / 1e6:,.2f} M lines/s); "
                 f"{_counts(stats, f'outside {est.universe.spec}')}")
    out = [head]
    if stats.counted and not stats.exact_counts:
        out.append(f"panstream ingest: {telemetry.describe()}; these totals: sd "
                   f"{stats.count_sd:,.0f} each, {stats.lines_sd:,.0f} for lines")
    elif not stats.counted:
        out.append(f"panstream ingest: {telemetry.describe()}")
    out.append(f"panstream ingest: {where}; epsilon_state = {est.epsilon_state:.6f} realized; "
               f"{stats.checkpoints} checkpoint(s), {stats.releases} release(s)"
               + (" [interrupted]" if stats.interrupted else ""))
    out.append("panstream ingest: " + total_line(est.epsilon_state, est.ledger.spent,
                                                 est.ledger.budget, telemetry))
    return out


@click.command()
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False))
@universe_option(required=False)
@epsilon_option(default=1.0)
@estimator_options()
@sketch_hash_option()
@calibration_option()
@click.option("-s", "--state", type=StatePath(for_writing=True), default=None,
              help="State file: created if missing, resumed if present (without it the table is "
                   "lost at exit).", **env("STATE"))
@click.option("-f", "--format", "fmt", type=SpecParam("FORMAT", parse_format, Format), default="auto",
              show_default=True,
              help=f"Where the client address is: {format_examples(4)}, ..., or auto "
                   "(detected, named on stderr; docs/logs.md).", **env("FORMAT"))
@click.option("--trusted-proxy", "trusted", multiple=True, metavar="CIDR",
              help="With -f xff: a trusted proxy network (repeatable); the client is the last hop "
                   "outside them.", **env("TRUSTED_PROXY"))
@click.option("--keep-going", is_flag=True, default=False,
              help="Go on when (almost) nothing is accepted (by default the run stops, exit 1, "
                   "under 1 % accepted).", **env("KEEP_GOING"))
@click.option("--checkpoint-every", "--checkpoint-interval", "checkpoint_every", cls=AliasOption,
              hidden_aliases=("--checkpoint-interval",),  # kafka's spelling (issue 37)
              type=FiniteFloatRange(min=0), default=60.0, show_default=True, metavar="SECONDS",
              help="Save the state this often (0: only at exit). A crash loses at most this much "
              "input.", **env("CHECKPOINT_EVERY"))
@click.option("--release-every", type=FiniteFloatRange(min=0, min_open=True), default=None,
              metavar="SECONDS", help="Publish a noisy release this often (one line on stdout, JSON with "
              "--json); each spends --release-epsilon of the budget.", **env("RELEASE_EVERY"))
@click.option("--release-epsilon", type=FiniteFloatRange(min=0, min_open=True), default=None,
              help="Output epsilon of each periodic release.", **env("RELEASE_EPSILON"))
@click.option("--release-mechanism", type=click.Choice(["laplace", "geometric"]), default="laplace",
              show_default=True, help="Noise of periodic releases.", **env("RELEASE_MECHANISM"))
@budget_option()
@total_epsilon_options()
@expected_option()
@click.option("--progress/--no-progress", default=None,
              help="Progress on stderr (default: when stderr is a terminal).", **env("PROGRESS"))
@telemetry_options(sensitivity=1, what="summary and --progress lines")
@window_options()
@json_option()
@click.pass_context
@handle_errors
def command(ctx: click.Context, files: tuple[str, ...], universe: Universe | None, epsilon: float,
            estimator: str, modulus: int, calibration: str, state: str | None, fmt: Format,
            trusted: tuple[str, ...], keep_going: bool, checkpoint_every: float,
            release_every: float | None, release_epsilon: float | None, release_mechanism: str,
            budget: float, total_epsilon: float | None, releases: int | None,
            expected_distinct: int | None, progress: bool | None, telemetry: TelemetryPolicy,
            as_json: bool, sketch_hash: str | None, **windowing: Any) -> None:
    """Read IP logs from FILES or standard input ('-') into a pan-private table.

    Only the randomized table and public parameters are saved (gzip, bzip2, xz, zstd read as
    they come); nothing counts arrivals unless you opt in. SIGINT/SIGTERM: final checkpoint.

    \b
    Essentials:
      -u UNIVERSE [--epsilon E]        the public cells (ipv4:CIDR, hashed-ip:M, ...); E = 1
      -s FILE                          the state: created if missing, resumed if present
      -f FORMAT                        where the address is (clf, json:PATH, ...; default auto)
      -n N                             clients you expect: warns if the table cannot count them
      --release-every S --release-epsilon E   periodic noisy releases, within --budget
      --window 1d --series FILE        one table per window, each released once

    \b
    Examples:
      tail -n +1 -F access.log | panstream ingest -u ipv4:10.0.0.0/16 -s web.pst -f clf
      panstream ingest -u hashed-ip:131072 -n 50000 -s web.pst logs/access.log*
      panstream ingest -u ipv4:10.0.0.0/16 -s freq.pst --estimator frequency access.log
      panstream release -s web.pst --epsilon 0.5

    Every option is listed below, briefly; docs/cli.md ('Every ingest option') explains each,
    docs/logs.md the formats, docs/windows.md the windows.
    """
    check_family_options(ctx, estimator)
    universe = with_sketch_hash(ctx, estimator, universe, sketch_hash)
    fmt = _with_trusted_proxies(fmt, trusted)
    if windowing.get("window") is not None:
        run_windowed(ctx, files=files, universe=universe, epsilon=epsilon, estimator=estimator,
                     modulus=modulus, calibration=calibration, state=state, fmt=fmt,
                     checkpoint_every=checkpoint_every, release_every=release_every,
                     release_epsilon=release_epsilon, release_mechanism=release_mechanism,
                     total_epsilon=total_epsilon, releases=releases, telemetry=telemetry,
                     as_json=as_json, progress=progress, **windowing)
        return
    refuse_window_only(ctx)
    split = total_epsilon is not None
    if releases is not None and not split:
        raise click.UsageError("--releases goes with --total-epsilon")
    if split:
        epsilon, budget, per_release = apply_split(ctx, total_epsilon, releases, universe,
                                                   calibration, release_epsilon, telemetry)
        release_epsilon = per_release if release_every else None
    if release_every and not release_epsilon:
        raise click.UsageError("--release-every needs --release-epsilon")
    if release_epsilon and not release_every:
        raise click.UsageError("--release-epsilon needs --release-every (or use 'panstream "
                               "release' for a one-off release)")
    # before a new state file is created for a run that cannot start
    check_inputs(files, "tail -n +1 -F access.log | panstream ingest ...")
    if (universe is not None or estimator == "sketch") and \
            (state is None or not os.path.exists(state)):  # a new table (the sketch's grid default)
        warn_settings(universe, epsilon, calibration, estimator, modulus, expected_distinct)
    tune_allocator()
    with contextlib.ExitStack() as held:
        if state is not None:  # one process at a time: see panstream.storage.state_lock
            held.enter_context(state_lock(state, "ingest"))
        _run(ctx, universe, epsilon, calibration, state, fmt, checkpoint_every, release_every,
             release_epsilon, release_mechanism, budget, progress, telemetry, as_json, files, split,
             estimator, modulus, keep_going,
             metrics=(windowing.get("metrics_port"), windowing.get("metrics_host", "127.0.0.1")))


def _run(ctx: click.Context, universe: Universe | None, epsilon: float, calibration: str,
         state: str | None, fmt: Format, checkpoint_every: float, release_every: float | None,
         release_epsilon: float | None, release_mechanism: str, budget: float,
         progress: bool | None, telemetry: TelemetryPolicy, as_json: bool,
         files: tuple[str, ...], split: bool = False, estimator: str = "density",
         modulus: int = DEFAULT_MODULUS, keep_going: bool = False,
         metrics: tuple[int | None, str] = (None, "127.0.0.1")) -> None:
    est, resumed = _open_estimator(ctx, state, universe, epsilon, calibration, budget, split,
                                   estimator, modulus)
    show_progress = sys.stderr.isatty() if progress is None else progress

    def notice(msg: str) -> None:
        click.echo(f"panstream: {msg}", err=True)

    served: list[ReleaseMetrics] = []  # --metrics-port (issue 37: none without --window)

    def on_release(rel: dict[str, Any]) -> None:
        for m in served:
            m.show(rel, estimator)
        if as_json:
            emit_json({"release": rel})
        else:
            click.echo(release_line(rel))
        sys.stdout.flush()

    ing = Ingestor(est, fmt, state_path=state, checkpoint_every=checkpoint_every,
                   release_every=release_every, release_epsilon=release_epsilon,
                   release_mechanism=release_mechanism, on_release=on_release, on_notice=notice,
                   on_progress=_progress_printer(sys.stderr.isatty()) if show_progress else None,
                   telemetry=telemetry, check=not keep_going)

    if metrics[0] is not None:
        served.append(ReleaseMetrics(metrics[0], metrics[1], lambda: ing.stats))
        click.echo(f"panstream: metrics (liveness, the last periodic release) on "
                   f"http://{metrics[1]}:{served[0].port}/metrics", err=True)
    if state is None:
        notice(no_state_notice(bool(release_every)))
    opened: list[str] = []
    try:
        with stop_on_signals(ing) as interrupt, contextlib.ExitStack() as serving:
            for m in served:
                serving.callback(m.close)
            stats = ing.run(named_inputs(files, ing, opened))
    except InputFormatError as exc:
        kept = (f"; the state {state} was {'saved' if resumed else 'created'} with what was "
                "accepted" + ("" if resumed else " (remove it to start over with another universe)")
                if state else "")
        raise InputFormatError(f"{exc}{kept}") from None
    except SourceError as exc:
        raise SourceError(_failed_input(exc, ing, state, files[len(opened):])) from None
    if show_progress and sys.stderr.isatty():
        sys.stderr.write("\n")
    if as_json:
        emit_json({"summary": summary_record(est, stats, telemetry, state, resumed)})
    else:
        for line in summary_lines(est, stats, telemetry, state, resumed):
            click.echo(line, err=True)
    interrupt.exit()  # Ctrl+C: 130, after the final checkpoint and the summary


def _failed_input(exc: SourceError, ing: Ingestor, state: str | None,
                  not_read: tuple[str, ...]) -> str:
    """The message of an input that failed mid-way: what went into the table, what did not, and
    whether the state holds it (the ingest loop writes its final checkpoint on every exit)."""
    s = ing.stats
    if s.exact_counts:
        applied = f"{s.accepted:,} items applied in this run"
    elif s.counted:
        applied = (f"about {max(s.accepted, 0):,} items applied in this run (noisy count, sd "
                   f"{s.count_sd:,.0f})")
    else:
        applied = "the items before it were applied in this run"
    saved = (f"the state {state} holds everything applied (final checkpoint written)"
             if state and s.checkpoints else "no --state: nothing was saved")
    later = f"; not read at all: {', '.join(not_read)}" if not_read else ""
    if not (state and s.checkpoints):
        return f"{exc}{later}. {applied}; {saved}. Repair or replace the file and run again"
    return (f"{exc}{later}. {applied}; {saved}. Repair or replace the file and ingest it again "
            "into this state (with the inputs not read): items seen twice only redraw their own "
            "cells, so the estimate stays right")


def _with_trusted_proxies(fmt: Format, trusted: tuple[str, ...]) -> Format:
    """Fold ``--trusted-proxy`` options into an ``xff`` format (``xff:CIDR,...``)."""
    if not trusted:
        return fmt
    if fmt.kind != "xff":
        raise click.UsageError("--trusted-proxy goes with -f xff (the client behind "
                               "X-Forwarded-For proxies)")
    cidrs = [c for c in fmt.arg.split(",") if c] + [c.strip() for t in trusted for c in t.split(",")]
    return parse_format("xff:" + ",".join(cidrs))
