"""``panstream demo``: the embedded default job, needing no server and no data."""

from __future__ import annotations

import time

import click
import numpy as np

from panstream.cli.common import (
    calibration_option,
    emit_json,
    env,
    epsilon_option,
    handle_errors,
    json_option,
    universe_option,
)
from panstream.demo import synthetic_ipv4_log
from panstream.estimator import DensityEstimator
from panstream.universe import Universe

_BATCH = 1 << 16


@click.command()
@universe_option(required=False, default="ipv4:10.0.0.0/16", show_default=True)
@epsilon_option(default=1.0)
@calibration_option()
@click.option("--distinct", type=click.IntRange(min=1), default=20_000, show_default=True,
              help="Distinct client addresses in the synthetic log.", **env("DEMO_DISTINCT"))
@click.option("--lines", type=click.IntRange(min=1), default=2_000_000, show_default=True,
              help="Log lines to generate.", **env("DEMO_LINES"))
@click.option("--seed", type=int, default=None,
              help="Seed of the *synthetic data* generator (privacy draws are never seeded).",
              **env("DEMO_SEED"))
@json_option()
@handle_errors
def command(universe: Universe, epsilon: float, calibration: str, distinct: int, lines: int,
            seed: int | None, as_json: bool) -> None:
    """Stream a synthetic IP log with a known truth through the estimator; print estimate vs truth.

    Generates LINES client addresses (DISTINCT of them inside the universe, Zipf-skewed load, 5 %
    from outside), feeds them in batches, and compares the estimate with the exact truth, with the
    realized epsilon of the table.
    """
    if universe.kind != "ipv4":
        raise click.UsageError("the demo generates IPv4 logs: give an ipv4:CIDR universe")
    if distinct > universe.size:
        raise click.UsageError(f"--distinct {distinct} exceeds the universe's {universe.size} cells")
    lines = max(lines, distinct)
    log = synthetic_ipv4_log(universe, distinct, lines, seed=seed)
    est = DensityEstimator(universe, epsilon=epsilon, calibration=calibration)
    t0 = time.perf_counter()
    rejected = 0
    for start in range(0, log.addresses.size, _BATCH):
        r = est.update(np.array(log.addresses[start:start + _BATCH]))
        rejected += r.rejected
    elapsed = time.perf_counter() - t0
    e = est.estimate()
    lines_total = int(log.addresses.size)
    out: dict[str, object] = {
        "universe": universe.spec, "cells": universe.size, "lines": lines_total,
        "rejected_outside_universe": rejected, "true_distinct": log.distinct_inside,
        "estimated_distinct": e.distinct, "stderr_distinct": e.stderr_distinct,
        "true_density": log.distinct_inside / universe.size, "estimated_density": e.density,
        "epsilon_requested": est.epsilon, "epsilon_state": est.epsilon_state,
        "calibration": est.calibration, "p": str(est.p), "seconds": elapsed,
    }
    log.addresses.fill(0)
    if as_json:
        emit_json(out)
        return
    z = (e.distinct - log.distinct_inside) / e.stderr_distinct
    click.echo(f"panstream demo: {lines_total:,} synthetic log lines over {universe.spec} "
               f"({universe.size:,} cells), {rejected:,} outside the universe skipped")
    click.echo(f"  true distinct clients    {log.distinct_inside:>12,}")
    click.echo(f"  estimated (noiseless)    {e.distinct:>12,.0f}  +- {1.96 * e.stderr_distinct:,.0f}"
               f" (95%)   z = {z:+.2f}")
    click.echo(f"  density true/estimated   {log.distinct_inside / universe.size:.4f} / {e.density:.4f}")
    click.echo(f"  state privacy            epsilon_state = {est.epsilon_state:.6f} realized "
               f"(asked {est.epsilon:g}, {est.calibration} calibration, p = {float(est.p):.6f})")
    click.echo(f"  throughput               {lines_total / elapsed / 1e6:,.1f} M lines/s")
    click.echo("The table is all that was kept; a dump of it is epsilon_state-DP. Publish with "
               "'panstream release', which adds output noise and spends budget.")
