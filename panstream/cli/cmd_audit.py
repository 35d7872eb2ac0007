"""``panstream audit``: rerun the subpoena simulation and compare claimed with empirical epsilon."""

from __future__ import annotations

import math
import sys
import textwrap
import time
from typing import Any

import click

from panstream.audit import (
    AUDIT_GRID,
    COVERS,
    DISTINGUISHERS,
    NOT_COVERED,
    AuditResult,
    audit_estimator,
    standard_scenarios,
)
from panstream.cli.common import (
    FiniteFloatRange,
    calibration_option,
    check_family_options,
    emit_json,
    env,
    epsilon_option,
    estimator_options,
    handle_errors,
    json_option,
    parse_universe,
    universe_option,
)
from panstream.universe import Universe

#: Exit code when a scenario the design covers is refuted.
EXIT_VIOLATION = 3


def _fmt(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.4f}"


@click.command()
@universe_option(required=False, default=None,
                 help="A small public universe [default: range:64; with --estimator sketch a small "
                      "grid, sketch:64x8:id, each of whose bits gets an item that hashes to it].")
@epsilon_option(default=1.0)
@estimator_options()
@calibration_option()
@click.option("--trials", type=click.IntRange(min=100), default=10_000, show_default=True,
              help="Runs of the estimator per world and scenario.", **env("AUDIT_TRIALS"))
@click.option("--occurrences", type=click.IntRange(min=1), default=None,
              help="Arrivals of the target in world B for the 'many times' scenarios, and per "
                   "batch for the heavy-user ones [default: 16; frequency: modulus - 1, the largest "
                   "count a counter tells apart].",
              **env("AUDIT_OCCURRENCES"))
@click.option("--alpha", type=FiniteFloatRange(min=0, max=1, min_open=True, max_open=True),
              default=1e-6, show_default=True,
              help="Error probability of each empirical bound (confidence 1 - alpha).",
              **env("AUDIT_ALPHA"))
@click.option("--distinguisher", type=click.Choice(DISTINGUISHERS), default="learned",
              show_default=True,
              help="learned: find the leaking bits on 30% of the runs, certify on the rest; classic: "
                   "the fixed tests (target bit, change between dumps, non-table bytes) on all runs; "
                   "both: alpha split between them.", **env("AUDIT_DISTINGUISHER"))
@json_option()
@click.pass_context
@handle_errors
def command(ctx: click.Context, universe: Universe, epsilon: float, estimator: str, modulus: int,
            calibration: str, trials: int, occurrences: int | None, alpha: float,
            distinguisher: str, as_json: bool) -> None:
    """Subpoena simulation: can an intruder holding dumps of the state tell if a target arrived?

    Runs the real estimator TRIALS times in world A (no target) and world B (the target arrives once,
    OCCURRENCES times spread over the batches, or as a heavy user OCCURRENCES times within one batch
    or within each batch, among other traffic) and takes snapshot dumps. The default, learned
    distinguisher reads every bit of the dumps, what changed between two dumps and the XOR of pairs
    of bits on the first 30% of the runs, learns which of them tell the worlds apart and fixes a
    test; the other 70% certify an empirical epsilon lower bound (Clopper-Pearson, confidence
    1 - ALPHA), printed next to the claimed, realized epsilon_state. --distinguisher classic applies
    the fixed tests instead (the target's cell bit, a change between two dumps, any non-table byte)
    to all runs.

    What it covers: the state dumps (snapshot bytes). What it does not: telemetry (metrics,
    progress, logs), file times and the timing of writes, releases. The report says so too.

    \b
    Exit codes: 0 every covered scenario stays within its claim; 3 a violation (a covered
    scenario's certified lower bound exceeds the claim); 2 bad parameters.
    Two dumps of one epoch are shown but not covered: they reveal who arrived in between
    (see docs/threat-model.md); rotate the epoch after a dump.

    \b
    Examples:
      panstream audit                                  # range:64, epsilon 1, about 25 s
      panstream audit --epsilon 0.5 --calibration paper --trials 2000
      panstream audit --distinguisher classic          # the fixed tests only
      panstream audit --estimator frequency --modulus 8   # the counters (target seen 7 times)
      panstream audit --estimator sketch               # a 64 x 8 sketch grid, about 50 s

    For the frequency estimator the dumps are counter tables: the target's counter is D shifted
    by its count modulo --modulus, every shift within e^epsilon_state of D (docs/frequency.md).
    For the sketch the target is an item whose hash lands on one bit of the grid (D0 without it,
    D1 with it); every other bit gets an item of its own as other traffic (docs/sketch.md).
    """
    check_family_options(ctx, estimator)
    if universe is None:
        universe = parse_universe(AUDIT_GRID if estimator == "sketch" else "range:64")
    elif (universe.kind == "sketch") != (estimator == "sketch"):
        raise click.UsageError(
            f"--universe {universe.spec} is a sketch grid: add --estimator sketch"
            if universe.kind == "sketch" else
            f"--estimator sketch is audited over a small grid such as --universe {AUDIT_GRID}, "
            f"not {universe.spec}")
    if occurrences is None:
        occurrences = modulus - 1 if estimator == "frequency" else 16
    t0 = time.perf_counter()
    results = audit_estimator(universe, epsilon, calibration, trials=trials, alpha=alpha,
                              scenarios=standard_scenarios(occurrences), distinguisher=distinguisher,
                              estimator=estimator, modulus=modulus)
    seconds = time.perf_counter() - t0
    violations = [r for r in results if r.violation]
    if as_json:
        family: dict[str, Any] = {"calibration": calibration} if estimator == "density" else \
            {"modulus": modulus} if estimator == "frequency" else \
            {"buckets": universe.buckets, "levels": universe.levels}  # type: ignore[attr-defined]
        emit_json({"estimator": estimator, "universe": universe.spec,
                   "epsilon_requested": epsilon, **family,
                   "claimed_epsilon_state": results[0].claimed,
                   "trials": trials, "alpha": alpha, "distinguisher": distinguisher,
                   "seconds": seconds, "covers": list(COVERS), "not_covered": list(NOT_COVERED),
                   "violation": bool(violations), "scenarios": [r.to_dict() for r in results]})
    else:
        what = (f"{calibration}" if estimator == "density"
                else f"frequency estimator, counters mod {modulus}" if estimator == "frequency"
                else "Sketch-Flip-Merge, randomized response; world index i is an item hashing "
                     "to grid bit i")
        _print(universe, epsilon, what, trials, alpha, distinguisher, results, seconds)
    if violations:
        sys.exit(EXIT_VIOLATION)


def _print(universe: Universe, epsilon: float, calibration: str, trials: int, alpha: float,
           distinguisher: str, results: list[AuditResult], seconds: float) -> None:
    claimed = results[0].claimed
    click.echo(f"panstream audit: {universe.spec}, epsilon {epsilon:g} ({calibration}); claimed "
               f"epsilon_state = {claimed:.6f} (realized from the exact probabilities)")
    click.echo(f"  {trials:,} runs per world and scenario; each empirical bound holds with "
               f"confidence 1 - {alpha:g}; {distinguisher} distinguisher; {seconds:.1f} s")
    click.echo("")
    click.echo(f"  {'scenario':<68} {'claimed':>8} {'empirical >=':>12}  verdict")
    for r in results:
        if r.violation:
            verdict = "VIOLATION"
        elif r.exceeded:
            verdict = "exceeds, not covered (expected: rotate after a dump)"
        else:
            verdict = "ok"
        click.echo(f"  {r.scenario:<68} {_fmt(r.claimed):>8} {_fmt(r.empirical):>12}  {verdict}")
        click.echo(f"  {'':<4}best test: {r.best}")
        if r.learned is not None:
            click.echo(f"  {'':<4}(learned on {r.learned.train_runs:,} runs per world, certified on "
                       f"{r.learned.test_runs:,})")
    click.echo("")
    for title, items in (("What this audit covers:", COVERS),
                         ("What it does not cover (each needs its own argument, "
                          "docs/threat-model.md):", NOT_COVERED)):
        click.echo(title)
        for item in items:
            click.echo(textwrap.fill(item, 100, initial_indent="  - ", subsequent_indent="    "))
    click.echo("")
    if any(r.violation for r in results):
        click.echo("VIOLATION: a leaked state reveals more than the claimed epsilon_state.")
    else:
        click.echo("No violation: one leaked snapshot stays within epsilon_state; two snapshots of "
                   "one epoch do not (see docs/threat-model.md).")
