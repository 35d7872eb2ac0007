"""``panstream demo``: the embedded default job, needing no server and no data."""

from __future__ import annotations

import time

import click
import numpy as np

from panstream.audit import AuditResult, audit_estimator, standard_scenarios
from panstream.cli.common import (
    FiniteFloatRange,
    calibration_option,
    emit_json,
    env,
    epsilon_option,
    handle_errors,
    json_option,
    universe_option,
)
from panstream.demo import synthetic_ipv4_log
from panstream.estimators.density import DensityEstimator
from panstream.estimators.frequency import FrequencyEstimator
from panstream.inputs.parser import LineParser, format_ipv4_lines
from panstream.release.honesty import NOISE_FLAG, flag_line, noise_dominated, shown
from panstream.release.incidence import Interval
from panstream.universe import Universe

_CHUNK = 1 << 21


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
@click.option("--release-epsilon", type=FiniteFloatRange(min=0, min_open=True), default=0.5,
              show_default=True, help="Output epsilon of the demo's noisy release (laplace).",
              **env("DEMO_RELEASE_EPSILON"))
@click.option("--audit-trials", type=click.IntRange(min=0), default=3000, show_default=True,
              help="Runs per world of the short subpoena simulation (0 skips it).",
              **env("DEMO_AUDIT_TRIALS"))
@click.option("--map-png", default=None, metavar="FILE.png",
              help="Also draw the demo's density map as a PNG (needs the plot extra: "
                   "pip install 'panstream[plot]'); without it the map is printed as text.",
              **env("DEMO_MAP_PNG"))
@json_option()
@handle_errors
def command(universe: Universe, epsilon: float, calibration: str, distinct: int, lines: int,
            seed: int | None, release_epsilon: float, audit_trials: int, map_png: str | None,
            as_json: bool) -> None:
    """Stream a synthetic IP log with a known truth through the estimator; print estimate vs truth.

    Generates LINES client addresses (DISTINCT of them inside the universe, Zipf-skewed load, 5 %
    from outside), formats them as a plain text log, parses it with the same strict parser as
    'panstream ingest' (2 MiB chunks), feeds the table, and compares the estimate with the exact
    truth, with the realized epsilon of the table. It then publishes one noisy release and runs a
    short subpoena simulation (see 'panstream audit').

    \b
    Examples:
      panstream demo
      panstream demo --distinct 5000 --lines 200000 --epsilon 0.5 --audit-trials 0
      panstream demo --map-png demo-map.png       # the closing density map as a picture

    It ends with a density map of the universe by a prefix 8 bits longer (a /16 by /24), one more
    release at the same output epsilon (the whole map is charged once).
    """
    if map_png is not None:
        from panstream.release.plot import require_matplotlib

        require_matplotlib()
    if universe.kind != "ipv4":
        raise click.UsageError("the demo generates IPv4 logs: give an ipv4:CIDR universe")
    if distinct > universe.size:
        raise click.UsageError(f"--distinct {distinct} exceeds the universe's {universe.size} cells")
    lines = max(lines, distinct)
    log = synthetic_ipv4_log(universe, distinct, lines, seed=seed)
    est = DensityEstimator(universe, epsilon=epsilon, calibration=calibration,
                           budget=max(1.0, 2 * release_epsilon))  # one release and one map
    # How often, not only whether: a second family's table over the same log (its own state
    # epsilon; a dump of both tables at once is the sum of both: demo_guarantee below).
    freq = FrequencyEstimator(universe, epsilon=epsilon, budget=release_epsilon)
    # The log as text, parsed the way 'panstream ingest' parses a plain log (2 MiB chunks).
    text = bytearray(format_ipv4_lines(log.addresses))
    parser = LineParser(universe, "plain")
    t0 = time.perf_counter()
    t_freq = 0.0
    rejected = 0
    view = memoryview(text)
    start = 0
    while start < len(text):
        end = text.rfind(b"\n", start, start + _CHUNK) + 1 or len(text)
        r = parser.parse(view[start:end])
        t1 = time.perf_counter()
        freq.update_indices(r.indices, wipe=False)  # not part of the timed density pipeline
        t_freq += time.perf_counter() - t1
        est.update_indices(r.indices)
        rejected += r.malformed + r.outside + r.empty
        start = end
    elapsed = time.perf_counter() - t0 - t_freq
    view.release()
    text[:] = bytes(len(text))
    e = est.estimate()
    rel = est.release(release_epsilon, "laplace")
    frel = freq.release(release_epsilon, "laplace")
    freq.wipe()
    truth = _true_counts(log.addresses, universe, freq.modulus)  # the log's truth, to compare
    dmap = est.release_map(release_epsilon, f"/{min(32, universe._prefix + 8)}")
    audit = _short_audit(est.epsilon, est.calibration, audit_trials)
    lines_total = int(log.addresses.size)
    guarantee = demo_guarantee(est.epsilon_state, freq.epsilon_state, est.ledger.spent,
                               freq.ledger.spent)
    out: dict[str, object] = {
        "universe": universe.spec, "cells": universe.size, "lines": lines_total,
        "rejected_outside_universe": rejected, "true_distinct": log.distinct_inside,
        "estimated_distinct": e.distinct, "stderr_distinct": e.stderr_distinct,
        "true_density": log.distinct_inside / universe.size, "estimated_density": e.density,
        "epsilon_requested": est.epsilon, "epsilon_state": est.epsilon_state,
        "calibration": est.calibration, "p": str(est.p), "q": str(est.q), "seconds": elapsed,
        "release": rel.to_dict(), "map": dmap.to_dict(), "audit": [a.to_dict() for a in audit],
        "frequency": {"release": frel.to_dict(), "true_once": truth[0],
                      "true_returning": truth[1], "true_aliased": truth[2],
                      "true_once_modulo": truth[3]},
        **guarantee,
    }
    log.addresses.fill(0)
    if map_png is not None:
        dmap.plot(map_png)
    if as_json:
        emit_json(out)
        return
    z = (e.distinct - log.distinct_inside) / e.stderr_distinct
    click.echo(f"panstream demo: {lines_total:,} synthetic log lines over {universe.spec} "
               f"({universe.size:,} cells), {rejected:,} outside the universe skipped")
    click.echo(f"  true distinct clients    {log.distinct_inside:>12,}")
    half = 1.96 * e.stderr_distinct
    click.echo(f"  estimated (noiseless)    {shown(e.distinct, 0, universe.size):>12,.0f}  +- "
               f"{half:,.0f} (95%)   z = {z:+.2f}"
               + (f"  {NOISE_FLAG}" if noise_dominated(e.distinct, e.distinct - half,
                                                        e.distinct + half) else ""))
    click.echo(f"  density true/estimated   {log.distinct_inside / universe.size:.4f} / {e.density:.4f}")
    click.echo(f"  state privacy            epsilon_state = {est.epsilon_state:.6f} realized "
               f"(asked {est.epsilon:g}, {est.calibration} calibration, q = {float(est.q):.6f}, "
               f"p = {float(est.p):.6f})")
    click.echo(f"  throughput               {lines_total / elapsed / 1e6:,.1f} M lines/s")
    top = universe.size
    click.echo(f"  noisy release            {shown(rel.distinct, 0, top):>12,.0f}  95% CI "
               f"[{shown(rel.distinct_low, 0, top):,.0f}, {shown(rel.distinct_high, 0, top):,.0f}]"
               f"  (laplace, output epsilon {rel.epsilon:g})")
    flag = flag_line(rel.distinct, rel.distinct_low, rel.distinct_high, rel.confidence,
                     rel.advice(), indent="    ")
    if flag:
        click.echo(flag)
    st = frel.stats
    k = freq.modulus
    aliased = (f"; {truth[2]:,} heavy clients (>= {k} requests) alias: {truth[3]:,} have a "
               f"count of 1 mod {k}" if truth[2] else "")

    def iv(x: Interval) -> str:  # shown clamped to 0..cells, flagged when noise-dominated
        mark = " (noise-dominated)" if noise_dominated(x.value, x.low, x.high) else ""
        return (f"{shown(x.value, 0, top):,.0f} [{shown(x.low, 0, top):,.0f}, "
                f"{shown(x.high, 0, top):,.0f}]{mark}")

    click.echo(f"  how often (frequency)    seen once {iv(st.once)} (true {truth[0]:,}), returning "
               f"{iv(st.returning)} (true {truth[1]:,}); 95%, counters mod {k}, output epsilon "
               f"{frel.epsilon:g}{aliased}")
    for a in audit:
        verdict = "within the claim" if not a.exceeded else "REVEALS the target (not covered)"
        click.echo(f"  subpoena simulation      {a.scenario}: empirical epsilon >= {a.empirical:.3f} "
                   f"vs claimed {a.claimed:.3f} -> {verdict}")
    click.echo(f"  density map              {universe.spec} by {dmap.by}: {len(dmap.rows):,} buckets, "
               f"each +-{dmap.halfwidth:.3f} at 95% (output epsilon {dmap.epsilon:g} for the whole "
               f"map); {dmap.signals:,} told from empty at a {100 * dmap.fdr:g} % false-discovery "
               "rate over the whole map")
    if map_png is not None:
        click.echo(f"  map picture              written to {map_png}")
    else:
        from panstream.release.plot import text_map

        click.echo(text_map(dmap))
    g = guarantee
    click.echo(f"  pan-private total        {g['epsilon_total']:.6g} per person = density table "
               f"{g['epsilon_state_density']:.6f} + frequency table "
               f"{g['epsilon_state_frequency']:.6f} (one person is in both) + releases "
               f"{g['released_density']:g} (density and map) + {g['released_frequency']:g} "
               f"(frequency) + telemetry 0 (nothing counted)")
    click.echo(f"The two tables are all that was kept: a dump of both is "
               f"{g['epsilon_dump']:.6f}-DP (the sum of their state epsilons; one table alone is "
               f"its own). The truth lines above are the synthetic log's, printed to compare; a "
               f"real run prints none. Only the noisy releases are fit to publish (panstream "
               f"release, panstream release --by).")


def demo_guarantee(eps_density: float, eps_frequency: float, spent_density: float,
                   spent_frequency: float) -> dict[str, float | str]:
    """What holds for what the demo keeps and releases, per person.

    The demo feeds one stream into a density table *and* a frequency table: a person's arrivals
    change a cell of each, so a dump of both tables is ``eps_density + eps_frequency``-DP (group
    privacy over two tables, docs/threat-model.md), and the pan-private total adds every release
    from either ledger (density release, density map, frequency release) and the telemetry (0:
    nothing counted). With the defaults: 1 + 1 + 0.5 + 0.5 + 0.5 = 3.5.

    >>> g = demo_guarantee(1.0, 1.0, 1.0, 0.5)
    >>> g["epsilon_dump"], g["epsilon_total"]
    (2.0, 3.5)
    """
    return {"epsilon_state_density": eps_density, "epsilon_state_frequency": eps_frequency,
            "released_density": spent_density, "released_frequency": spent_frequency,
            "epsilon_dump": eps_density + eps_frequency,
            "epsilon_total": eps_density + eps_frequency + spent_density + spent_frequency,
            "telemetry": "telemetry: nothing counted"}


def _short_audit(epsilon: float, calibration: str, trials: int) -> list[AuditResult]:
    """One dump (covered) and two dumps of one epoch (not covered), on a small universe."""
    if trials == 0:
        return []
    scen = standard_scenarios(8)
    return audit_estimator("range:64", epsilon, calibration, trials=trials,
                           scenarios=(scen[0], scen[3]))


def _true_counts(addresses: np.ndarray, universe: Universe, modulus: int
                 ) -> tuple[int, int, int, int]:
    """The synthetic log's truth for the frequency line: clients inside the universe seen exactly
    once, seen at least twice, seen at least ``modulus`` times (whose counters alias), and seen a
    number of times that is 1 modulo ``modulus`` (what the counters estimate as "once")."""
    cells = addresses.astype(np.int64) - _ipv4(universe.item_of(0))
    cells = cells[(cells >= 0) & (cells < universe.size)]
    counts = np.bincount(cells, minlength=universe.size)
    cells.fill(0)
    try:
        return (int((counts == 1).sum()), int((counts >= 2).sum()),
                int((counts >= modulus).sum()), int((counts % modulus == 1).sum()))
    finally:
        counts.fill(0)


def _ipv4(text: str) -> int:
    a, b, c, d = (int(x) for x in text.split("."))
    return a << 24 | b << 16 | c << 8 | d
