"""``panstream plan``: how accurate a universe and epsilon will be, before anyone ingests.

The error model (explained in ``docs/cli.md``):

* table noise: the debiased density has standard error ``stderr_state(f, m, p, q)`` (binomial model
  of the randomized bits, :mod:`panstream.estimators.density`), the distinct count ``m`` times that
  (or, for a hashed universe, the linear-counting delta method ``m * se / (1 - f)``);
* output noise (with ``--release-epsilon``): Laplace noise of scale ``1/(eps_out m)`` on the fraction of
  ones, i.e. standard deviation ``sqrt(2) / (eps_out m (p - q))`` on the density;
* hashed universes only, occupancy: ``N`` distinct IDs hashed into ``m`` buckets occupy a random
  number of them; linear counting ``-m ln(1 - f)`` then has variance ``m (e^t - t - 1)`` and bias
  ``(e^t - t - 1) / 2`` with ``t = N / m`` (Whang, Vander-Zanden and Taylor 1990). Without the
  correction the raw count ``m f`` would miss ``N - m (1 - e^-t)``, about ``N^2 / 2m``.

A bigger table shrinks the occupancy error but grows the table noise (``~ sqrt(m)``): the planner
finds the ``m`` that minimizes the root-mean-square error of the distinct count.

With ``--total-epsilon E`` it instead splits one total pan-private epsilon between the state and
``--releases R`` releases so that one release is as accurate as possible
(:func:`panstream.planning.plan_split`), next to the naive half/half split.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import click

from panstream.calibration import calibrate
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
    universe_option,
)
from panstream.errors import ConfigurationError
from panstream.planning import (
    Z95,
    SplitPlan,
    accuracy_warning,
    best_table_size,
    calibrations,
    country_plan,
    expressible_distinct,
    hashed_error,
    plan_split,
    smallest_table_size,
)
from panstream.release.stats import stderr_distinct, stderr_state
from panstream.release.telemetry import TOTAL_TELEMETRY_NOTE
from panstream.universe import Universe

__all__ = ["Z95", "best_table_size", "command", "expressible_distinct", "hashed_error", "plan",
           "smallest_table_size"]


def _status(row: dict[str, Any], universe: Universe, expected: int | None) -> str:
    """``ok``, ``saturated`` (hashed: so many IDs for the buckets that linear counting cannot
    express them, or its 95 % interval reaches past all it can express) or ``too_small`` (the 95 %
    interval covers every possible value: the table says nothing)."""
    cap = expressible_distinct(universe)
    wide = not math.isfinite(row["stderr_distinct"]) or Z95 * row["stderr_distinct"] >= cap
    if universe.is_hashed and expected is not None and (expected >= cap or wide):
        return "saturated"
    if Z95 * row["stderr_density"] >= 1.0 or wide:
        return "too_small"
    return "ok"


def plan(universe: Universe, epsilon: float, expected: int | None,
         release_epsilon: float | None, target_error: float = 0.05) -> dict[str, Any]:
    """Accuracy of ``universe`` at ``epsilon`` for every calibration (and table sizing if hashed).

    Every error is one standard deviation, with its 95 % half-width beside it (``*_95``). Errors
    the universe cannot express (a density error over 1, a distinct-count error over
    :func:`expressible_distinct`) are reported as ``None`` in JSON with ``status`` saying why.
    For a hashed universe with ``expected``, ``smallest_size`` is the smallest table whose error is
    at most ``target_error`` times ``expected`` (1 sd), ``None`` if no size reaches it.
    """
    m = universe.size
    hashed = universe.is_hashed
    if expected is not None and not hashed and expected > m:
        msg = f"--expected-distinct {expected} exceeds the universe's {m} cells"
        raise ConfigurationError(msg)
    rows = []
    for cal, c, err in calibrations(epsilon):
        if c is None:
            rows.append(err)
            continue
        p, q = float(c.p), float(c.q)
        row: dict[str, Any] = {"calibration": cal, "p": str(c.p), "p_float": p, "q": str(c.q),
                               "q_float": q, "epsilon_state": c.epsilon_state}
        if hashed and expected is not None:
            row.update(hashed_error(expected, m, p, q, release_epsilon))
            row["stderr_distinct"] = row["rmse"]
            row["stderr_density"] = stderr_state(row["density"], m, p, q)
            best, pow2 = best_table_size(expected, p, q, release_epsilon)
            row["best_size"] = best
            row["best_size_rmse"] = hashed_error(expected, best, p, q, release_epsilon)["rmse"]
            row["best_power_of_two"] = pow2
            row["best_power_of_two_rmse"] = hashed_error(expected, pow2, p, q,
                                                         release_epsilon)["rmse"]
            row["target_error"] = target_error
            row["smallest_size"] = smallest_table_size(expected, p, q, target_error * expected,
                                                       best, release_epsilon)
        else:
            f = 0.0 if expected is None else (expected / m if not hashed else -math.expm1(-expected / m))
            se = stderr_state(f, m, p, q)
            rel = math.sqrt(2) / (release_epsilon * m * (p - q)) if release_epsilon else 0.0
            sd = math.sqrt(se**2 + rel**2)
            row.update({"density": f, "stderr_density": sd, "table_noise_density": se,
                        "release_noise_density": rel,
                        "stderr_distinct": stderr_distinct(f, sd, m, hashed)})
        row["status"] = _status(row, universe, expected)
        cap = expressible_distinct(universe)
        for key in ("stderr_density", "stderr_distinct", "rmse", "occupancy_sd", "bias",
                    "table_noise"):
            if key not in row:
                continue
            limit = 1.0 if key == "stderr_density" else cap
            if not math.isfinite(row[key]) or row[key] > limit:
                row[key] = None  # larger than anything the universe can express
        for key, limit in (("stderr_density", 1.0), ("stderr_distinct", cap)):
            half = None if row[key] is None else Z95 * row[key]
            row[f"{key}_95"] = None if half is None or half > limit else half
        rows.append(row)
    return {"universe": universe.spec, "cells": m, "epsilon": epsilon,
            "expected_distinct": expected, "release_epsilon": release_epsilon,
            "error_level": "1 sd (the *_95 fields: 95 % half-width)", "calibrations": rows}


@click.command()
@universe_option(required=False)
@epsilon_option(required=False, help="State epsilon: privacy of a leaked table (or give "
                "--total-epsilon instead).")
@click.option("--total-epsilon", type=FiniteFloatRange(min=0, min_open=True), default=None,
              help="Instead of --epsilon: one total pan-private epsilon (state + all releases); "
                   "prints the split minimizing the error of one release, beside half/half.",
              **env("TOTAL_EPSILON"))
@click.option("--releases", type=click.IntRange(min=1), default=None,
              help="With --total-epsilon: how many equal releases the budget pays for "
                   "[default: 1].", **env("RELEASES"))
@click.option("--density", type=FiniteFloatRange(min=0, max=1), default=None,
              help="With --total-epsilon: the expected density (fraction of cells that appear) "
                   "[default: 0, the worst case for tight; rr does not depend on it].",
              **env("DENSITY"))
@calibration_option(help="Calibration of --total-epsilon's split and of the --by table (the "
                    "--epsilon table shows every calibration).")
@estimator_options()
@click.option("--crop", type=click.IntRange(min=1), default=None, metavar="T",
              help="With --estimator frequency: the threshold of the cropped mean (default "
                   "min(4, modulus-1)).", **env("PLAN_CROP"))
@click.option("-n", "--expected-distinct", type=click.IntRange(min=1), default=None,
              help="Distinct items you expect; for hashed universes also sizes the table.",
              **env("EXPECTED_DISTINCT"))
@click.option("--release-epsilon", type=FiniteFloatRange(min=0, min_open=True), default=None,
              help="Include the noise of one release at this output epsilon.",
              **env("RELEASE_EPSILON"))
@click.option("--target-error", type=FiniteFloatRange(min=0, min_open=True, max=1), default=0.05,
              show_default=True,
              help="Hashed universes with -n: also print the smallest table whose distinct-count "
                   "error (1 sd) is at most this fraction of N.", **env("TARGET_ERROR"))
@click.option("--by", default=None, metavar="/LEN|CELLS",
              help="Also show the error of one bucket of a density map ('release --by'): "
                   "95 % half-width of a bucket's density for this bucket size and its "
                   "neighbours, per output epsilon.", **env("PLAN_BY"))
@click.option("--window", default=None, metavar="DURATION",
              help="With --total-epsilon: plan 'ingest --window' (1h, 1d, ...): the total is "
                   "split per window (one release each); see --horizon.", **env("PLAN_WINDOW"))
@click.option("--horizon", default=None, metavar="DURATION",
              help="With --window: --total-epsilon is what any span this long may cost a person "
                   "seen in every window it meets (any 7d span meets at most 8 1d windows: "
                   "each window gets total / 8).",
              **env("PLAN_HORIZON"))
@json_option()
@handle_errors
@click.pass_context
def command(ctx: click.Context, universe: Universe | None, epsilon: float | None,
            total_epsilon: float | None, releases: int | None, density: float | None,
            calibration: str, estimator: str, modulus: int, crop: int | None,
            expected_distinct: int | None, release_epsilon: float | None, target_error: float,
            by: str | None, window: str | None, horizon: str | None, as_json: bool) -> None:
    """How accurate will the density and distinct count be? Every calibration, before ingesting.

    Errors are 1 standard deviation, with the 95 % half-width in brackets. Without
    --expected-distinct they are given at density 0, where the table noise of tight and paper is
    largest (rr's is the same at every density). TOO SMALL
    means the 95 % interval covers every possible density (the table says nothing); SATURATED means
    a hashed table has too few buckets for N IDs. For hashed:M universes with --expected-distinct N
    it also prints the table size minimizing the total error (collision / occupancy error of linear
    counting against the table's binomial noise) and the smallest table within --target-error.
    With --expected-distinct N it warns (stderr; "warning" in JSON) when the 95 % error of the
    distinct count exceeds N, and names the hashed table that would count them (for addresses,
    hashed-ip:M: e.g. hashed-ip:131072 for 50,000 clients at epsilon 1).

    With --total-epsilon E (instead of --epsilon) it splits E between the state and --releases R
    equal releases so that one release is as accurate as possible, and shows the naive split
    (E/2 to the state, E/2R per release) beside it. 'ingest --total-epsilon E --releases R'
    applies the same split.

    Without -u, 'plan -n N' compares the families at N distinct items (the hashed table sized
    for N beside the sketch; epsilon 1 unless --epsilon) and says which to pick.

    \b
    Examples:
      panstream plan -n 20000                                    # which family, at 20,000
      panstream plan -u ipv4:10.0.0.0/16 --epsilon 1
      panstream plan -u ipv4:10.0.0.0/16 --epsilon 1 -n 20000 --release-epsilon 0.5
      panstream plan -u hashed:1048576 --epsilon 1 -n 100000     # also the best table size
      panstream plan -u hashed-ip:131072 --epsilon 1 -n 50000    # internet-facing: any address
      panstream plan -u ipv4:10.0.0.0/16 --epsilon 1 --by /24    # error of one /24 of a map
      panstream plan -u ipv4:10.0.0.0/16 --total-epsilon 2 --releases 4
      panstream plan -u ipv4:10.0.0.0/16 --epsilon 1 --estimator frequency -n 20000

    With --total-epsilon E --window 1d --horizon 7d it plans tumbling windows: any span of 7 days
    meets at most 8 daily windows (one that does not start at midnight), and those cost a person
    seen in each of them at most E, so each window gets E / 8, split between its fresh table and
    its one release ('ingest --window 1d --horizon 7d --total-epsilon E' applies it).

    With --estimator frequency it shows the worst-case 95 % half-widths of the frequency
    statistics (seen once, present, fraction seen once, cropped mean) for -n present cells and
    the --modulus, over every frequency profile (docs/frequency.md, "Sizing").
    """
    check_family_options(ctx, estimator)
    if universe is None and estimator != "sketch":
        if expected_distinct is None:
            raise click.UsageError("give -u/--universe (the table to plan), or -n N without it "
                                   "to compare the families at N distinct items")
        if estimator == "frequency" or any(x is not None for x in (
                total_epsilon, by, window, horizon, crop, releases, density)):
            raise click.UsageError("without -u, plan -n N only compares the families; give "
                                   "-u/--universe for the other options")
        _compare_families(expected_distinct, 1.0 if epsilon is None else epsilon,
                          release_epsilon, calibration, as_json, epsilon is None)
        return
    if estimator == "sketch" or (universe is not None and universe.kind == "sketch"):
        _sketch_plan(universe, epsilon, expected_distinct, release_epsilon, as_json)
        return
    assert universe is not None  # refused above for every family but the sketch
    if getattr(universe, "country_blocks", None):  # hashed-ip-country:M: one block per country
        if estimator != "density" or epsilon is None or any(x is not None for x in (
                total_epsilon, by, window, horizon, crop, releases, density)):
            raise click.UsageError(f"-u {universe.spec} plans with --epsilon, -n and "
                                   "--release-epsilon (one table of blocks per country)")
        _country_plan(universe, epsilon, expected_distinct, release_epsilon, as_json)
        return
    if estimator == "frequency":
        if epsilon is None or by is not None:
            raise click.UsageError("--estimator frequency plans with --epsilon (no --by maps)")
        _frequency_plan(universe, epsilon, modulus, expected_distinct, release_epsilon, crop,
                        as_json)
        return
    if crop is not None:
        raise click.UsageError("--crop concerns the frequency estimator: add --estimator frequency")
    if (epsilon is None) == (total_epsilon is None):
        raise click.UsageError("give exactly one of --epsilon (the state's) or --total-epsilon "
                               "(state and releases together)")
    if total_epsilon is None and (releases is not None or density is not None):
        raise click.UsageError("--releases and --density go with --total-epsilon")
    per_window = _window_plan(total_epsilon, releases, window, horizon)
    if total_epsilon is not None:
        if release_epsilon is not None:
            raise click.UsageError("--release-epsilon and --total-epsilon exclude each other: "
                                   "the split chooses the release epsilon")
        if density is not None and expected_distinct is not None:
            raise click.UsageError("give --density or --expected-distinct, not both")
        if density is None and expected_distinct is not None:
            m = universe.size
            density = (min(1.0, expected_distinct / m) if not universe.is_hashed
                       else -math.expm1(-expected_distinct / m))
        sp = plan_split(per_window["epsilon_window"] if per_window else total_epsilon, universe,
                        releases or 1, density or 0.0, calibration)
        d: dict[str, Any] = {"split": sp.to_dict()}
        if per_window:
            d["windows"] = per_window
        epsilon = sp.best.epsilon_state_asked
        eps_list: tuple[float, ...] = (sp.best.epsilon_release,)
    else:
        assert epsilon is not None
        d = plan(universe, epsilon, expected_distinct, release_epsilon, target_error)
        eps_list = (release_epsilon,) if release_epsilon else ()
        if expected_distinct is not None:
            d["sketch"] = _sketch_row(epsilon, expected_distinct, release_epsilon)
            d["warning"] = accuracy_warning(universe, epsilon, calibration, expected_distinct)
    d["telemetry"] = "nothing counted by default (0 per person)"
    mp = None
    if by is not None:
        from panstream.release.maps import PLAN_EPSILONS, map_plan

        cal = calibrate(epsilon, calibration)
        mp = map_plan(universe, by, cal.p, cal.q, epsilons=eps_list or PLAN_EPSILONS)
        mp["calibration"] = calibration
        d["map"] = mp
    if as_json:
        emit_json(d)
        return
    if total_epsilon is not None:
        if per_window:
            _echo_windows(per_window)
        _echo_split(sp)
        if per_window:
            click.echo(f"  apply it per window with 'ingest --window {window} --horizon "
                       f"{horizon or window} --total-epsilon {total_epsilon:g}'")
    else:
        _echo_plan(d, universe, epsilon, expected_distinct, release_epsilon, target_error)
        if d.get("warning"):
            click.echo(f"panstream: warning ({calibration}): {d['warning']}", err=True)
        if "sketch" in d:
            _echo_comparison(d, universe)
    if mp is not None:
        _echo_map_plan(mp)


def _country_plan(universe: Universe, epsilon: float, n: int | None,
                  release_epsilon: float | None, as_json: bool) -> None:
    """``plan -u hashed-ip-country:M``: one block of M hashed cells per country, errors per
    country (:func:`panstream.planning.country_plan`)."""
    from panstream.country.table import COUNTRIES

    block = int(universe.country_blocks)  # type: ignore[attr-defined]
    d = country_plan(block, len(COUNTRIES), epsilon, n, release_epsilon)
    d["telemetry"] = "nothing counted by default (0 per person)"
    if as_json:
        emit_json(d)
        return

    def err(e: dict[str, Any] | None) -> str:
        if e is None or e["stderr"] is None:
            return "more than a block can express"
        return f"+- {e['stderr']:,.1f} [{e['stderr_95']:,.1f}]"

    rel = f", one release at {release_epsilon:g}" if release_epsilon else ""
    click.echo(f"plan: {universe.spec}: {d['blocks']} blocks of {block:,} hashed cells, one per "
               f"country = {d['bits']:,} bits ({d['bytes']:,} bytes), epsilon {epsilon:g}{rel}")
    click.echo("  errors per country (each block is a hashed-ip:"
               f"{block} table of its own): +- 1 standard deviation [95 % half-width]")
    click.echo(f"  pan-private total per person: epsilon_state + the release's epsilon, once for "
               f"all countries (one person is in one country) {TOTAL_TELEMETRY_NOTE}")
    for r in d["calibrations"]:
        if "error" in r:
            click.echo(f"  {r['calibration']:<6} {r['error']}")
            continue
        line = (f"  {r['calibration']:<6} epsilon_state = {r['epsilon_state']:.4f}  "
                f"a country with no clients {err(r['empty_country'])}")
        if r["largest_country"] is not None:
            line += f"; the largest, with {n:,} (all of -n) {err(r['largest_country'])}"
        click.echo(line)
        click.echo(f"         total over all {d['blocks']} countries {err(r['total'])}")
    if n is None:
        click.echo("  give -n N (clients expected) for the error of the largest country")
    else:
        click.echo(f"  a country with fewer than {n:,} clients has an error between these two")


def _window_plan(total_epsilon: float | None, releases: int | None, window: str | None,
                 horizon: str | None) -> dict[str, Any] | None:
    """The per-window share of ``--total-epsilon`` over ``--horizon`` (``None`` without
    ``--window``)."""
    from panstream.windows import windows_met
    from panstream.windows.eventtime import parse_duration

    if window is None:
        if horizon is not None:
            raise click.UsageError("--horizon goes with --window (e.g. --window 1d --horizon 7d)")
        return None
    if total_epsilon is None:
        raise click.UsageError("--window plans a --total-epsilon per horizon: add --total-epsilon")
    if releases is not None:
        raise click.UsageError("--window plans one release per window: drop --releases")
    size = parse_duration(window, "--window")
    span = parse_duration(horizon, "--horizon") if horizon is not None else size
    if size <= 0 or span <= 0:
        raise click.UsageError("--window and --horizon must be longer than 0 seconds")
    w = windows_met(span, size)
    return {"window_seconds": size, "horizon_seconds": span, "windows_per_horizon": w,
            "total_epsilon": total_epsilon, "epsilon_window": total_epsilon / w}


def _echo_windows(pw: dict[str, Any]) -> None:
    from panstream.windows import duration_text, horizon_line

    click.echo(f"plan: {duration_text(pw['window_seconds'])} windows, horizon "
               f"{duration_text(pw['horizon_seconds'])}: total {pw['total_epsilon']:g} = "
               f"{pw['windows_per_horizon']} windows x {pw['epsilon_window']:.6g} per window "
               f"(any span of {duration_text(pw['horizon_seconds'])} meets at most "
               f"{pw['windows_per_horizon']}; each window: a fresh table and one release, split "
               "below)")
    click.echo("  " + horizon_line(pw["epsilon_window"], pw["window_seconds"],
                                   pw["horizon_seconds"]))


def _echo_plan(d: dict[str, Any], universe: Universe, epsilon: float,
               expected_distinct: int | None, release_epsilon: float | None,
               target_error: float) -> None:
    at = (f"at {expected_distinct:,} distinct" if expected_distinct is not None
          else "at density 0 (worst case)")
    click.echo(f"plan: {universe.spec} ({universe.size:,} cells), epsilon {epsilon:g}, {at}"
               + (f", one release at epsilon {release_epsilon:g}" if release_epsilon else ""))
    click.echo("  errors: +- 1 standard deviation [95 % half-width]")
    click.echo(f"  pan-private total per person: epsilon_state + the releases' budget "
               f"{TOTAL_TELEMETRY_NOTE}")
    cap = expressible_distinct(universe)
    n = expected_distinct or 0
    for r in d["calibrations"]:
        if "error" in r:
            click.echo(f"  {r['calibration']:<6} unavailable: {r['error']}")
            continue
        click.echo(f"  {r['calibration']:<6} q = {r['q_float']:.6f}  p = {r['p_float']:.6f}  "
                   f"epsilon_state = {r['epsilon_state']:.4f}  {_errors_line(r, universe, cap)}")
        if r["status"] == "saturated":
            click.echo(f"         SATURATED: {n:,} IDs in {universe.size:,} buckets "
                       f"leave about {universe.size * math.exp(-n / universe.size):.3g}"
                       f" empty; linear counting cannot go past about {cap:,.0f}.")
        elif r["status"] == "too_small":
            click.echo("         TOO SMALL: the 95 % interval covers every possible value; use a "
                       "larger universe or a larger epsilon.")
        if "best_size" in r:
            if None not in (r["occupancy_sd"], r["table_noise"], r["bias"]):
                click.echo(f"         occupancy sd {r['occupancy_sd']:,.1f}, table noise "
                           f"{r['table_noise']:,.1f}, LC bias {r['bias']:,.2f}")
            small = r["smallest_size"]
            goal = target_error * n
            kind = universe.kind
            within = (f"smallest table within {100 * target_error:g} % of N ({goal:,.0f} IDs): "
                      + (f"{kind}:{small}" if small is not None
                         else "none (even the best table misses it)"))
            click.echo(f"         {within}; best table: {kind}:{r['best_size']} (error "
                       f"{r['best_size_rmse']:,.1f}), power of two {kind}:{r['best_power_of_two']} "
                       f"(error {r['best_power_of_two_rmse']:,.1f})")


def _sketch_row(epsilon: float, n: int, release_epsilon: float | None,
                buckets: int = 4096, levels: int = 24) -> dict[str, Any]:
    """The Sketch-Flip-Merge grid's errors at ``n`` (1 sd and 95 %) and its memory."""
    from panstream.estimators.sketch.sfm import planned_error

    e = planned_error(n, epsilon, release_epsilon, buckets, levels)
    return {"grid": f"sketch:{buckets}x{levels}", "bytes": int(e["bytes"]),
            "stderr_distinct": e["total"], "stderr_distinct_95": Z95 * e["total"],
            "table_noise": e["state"], "release_noise": e["release"]}


def _echo_comparison(d: dict[str, Any], universe: Universe) -> None:
    """The bit table (rr) beside the sketch at the same -n and epsilon, and which to pick."""
    sk = d["sketch"]
    rr = next((r for r in d["calibrations"] if r.get("calibration") == "rr"), None)
    table_bytes = (universe.size + 7) // 8
    click.echo(f"  compare: --estimator sketch ({sk['grid']}, {sk['bytes']:,} bytes, any items, "
               f"IPv4 and IPv6): error +- {sk['stderr_distinct']:,.0f} "
               f"[{sk['stderr_distinct_95']:,.0f}]")
    if rr is None or rr.get("stderr_distinct") is None:
        click.echo("  pick the sketch: this table cannot express the count")
        return
    mine = rr["stderr_distinct"]
    better = "sketch" if sk["stderr_distinct"] < mine else "table"
    why = (f"its error is {mine / sk['stderr_distinct']:,.1f}x smaller in "
           f"{table_bytes / sk['bytes']:,.0f}x less memory" if better == "sketch" else
           f"its error is {sk['stderr_distinct'] / mine:,.1f}x smaller (a table's error is fixed "
           "by |X|, the sketch's grows with the count)"
           + ("; it also gives maps (--by)" if universe.kind in ("ipv4", "ipv6") else ""))
    click.echo(f"  pick the {'sketch' if better == 'sketch' else 'table ' + universe.spec} "
               f"(rr, {table_bytes:,} bytes, +- {mine:,.0f}): {why}")


def _compare_families(n: int, epsilon: float, release_epsilon: float | None, calibration: str,
                      as_json: bool, default_epsilon: bool) -> None:
    """``plan -n N`` without ``-u``: the hashed bit table sized for N beside the sketch, at the
    same epsilon, each with its 95 % error and whether it would be noise-dominated, and which to
    pick (the smaller error)."""
    from panstream.planning import suggest_universe
    from panstream.release.honesty import noise_dominated

    spec, _ = suggest_universe(n, epsilon, calibration)
    table = plan(Universe.parse(spec), epsilon, n, release_epsilon)
    row = next(r for r in table["calibrations"] if r.get("calibration") == calibration)
    sk = _sketch_row(epsilon, n, release_epsilon)
    fams = []
    for fam, where, sd, size in (
            ("density", spec, row.get("stderr_distinct"), (Universe.parse(spec).size + 7) // 8),
            ("sketch", sk["grid"], sk["stderr_distinct"], sk["bytes"])):
        half = None if sd is None else Z95 * sd
        fams.append({"family": fam, "universe": where, "bytes": int(size), "stderr": sd,
                     "halfwidth_95": half,
                     "noise_dominated": half is None or noise_dominated(n, n - half, n + half)})
    ok = [f for f in fams if f["stderr"] is not None]
    pick = min(ok, key=lambda f: f["stderr"])["family"] if ok else None
    if as_json:
        emit_json({"expected_distinct": n, "epsilon": epsilon, "release_epsilon": release_epsilon,
                   "calibration": calibration, "families": fams, "pick": pick})
        return
    eps = f"epsilon {epsilon:g}" + (" (the default; give --epsilon E)" if default_epsilon else "")
    click.echo(f"plan: {n:,} distinct items, {eps}"
               + (f", one release at epsilon {release_epsilon:g}" if release_epsilon else "")
               + "; 95 % error of the distinct count:")
    for f in fams:
        err = ("more than it can express" if f["halfwidth_95"] is None
               else f"+- {f['halfwidth_95']:,.0f} ({100 * f['halfwidth_95'] / n:.1f} %)")
        flag = "  NOISE-DOMINATED: interval wider than the count" if f["noise_dominated"] else ""
        click.echo(f"  {f['family']:<9} {f['universe']:<24} {f['bytes']:>12,} bytes  {err}{flag}")
    if pick is not None:
        click.echo(f"  pick the {pick} ({next(f['universe'] for f in fams if f['family'] == pick)})"
                   "; a frequency table ('--estimator frequency -u ...') also says how often; "
                   "'panstream plan -u UNIVERSE -n N' shows one in full")
    if all(f["noise_dominated"] for f in fams):
        click.echo("  every family is noise-dominated at this size: raise --epsilon or count over "
                   "a longer window")


def _sketch_plan(universe: Universe | None, epsilon: float | None, n: int | None,
                 release_epsilon: float | None, as_json: bool) -> None:
    """``plan --estimator sketch``: the grid's error at -n."""
    from panstream.estimators.sketch.sfm import SketchGrid

    if epsilon is None or n is None:
        raise click.UsageError("--estimator sketch plans with --epsilon and -n/--expected-distinct "
                               "(its error is relative to the count)")
    grid = universe if isinstance(universe, SketchGrid) else SketchGrid()
    row = _sketch_row(epsilon, n, release_epsilon, grid.buckets, grid.levels)
    if as_json:
        emit_json({"epsilon": epsilon, "expected_distinct": n, "release_epsilon": release_epsilon,
                   "sketch": row})
        return
    click.echo(f"plan: {grid.spec} ({row['bytes']:,} bytes), epsilon {epsilon:g}, at {n:,} "
               "distinct" + (f", one release at epsilon {release_epsilon:g}"
                             if release_epsilon else ""))
    click.echo(f"  distinct +- {row['stderr_distinct']:,.0f} [{row['stderr_distinct_95']:,.0f}] "
               f"({100 * row['stderr_distinct'] / n:.2f} %): table noise "
               f"{row['table_noise']:,.0f}, release noise {row['release_noise']:,.0f}")


def _echo_split(sp: SplitPlan) -> None:
    """The best and the half/half split of a total epsilon, with the error of one release."""
    click.echo(f"plan: {sp.universe} ({sp.cells:,} cells), total pan-private epsilon "
               f"{sp.total_epsilon:g} = state + {sp.releases} release(s), {sp.calibration} "
               f"calibration, {sp.mechanism} releases, at density {sp.density:g}")
    click.echo("  error of one release: +- 1 standard deviation [95 % half-width]; every epsilon "
               f"realized; the total is per person {TOTAL_TELEMETRY_NOTE}")
    for name, s in (("best split", sp.best), ("half/half", sp.naive)):
        click.echo(f"  {name:<10}  epsilon_state = {s.epsilon_state:.6f}, {s.releases} x release "
                   f"epsilon {s.epsilon_release:.6g} (budget {s.budget:.6g}; total "
                   f"{s.epsilon_total:.6f})")
        click.echo(f"              density +- {s.stderr_density:.6f} [{s.density_95:.6f}]  "
                   f"distinct +- {s.stderr_distinct:,.1f} [{s.distinct_95:,.1f}]  (state sd "
                   f"{s.state_sd_density:.6f}, release sd {s.release_sd_density:.6f})")
    b = sp.best
    click.echo(f"  the best split's error is {sp.improvement:.2f}x smaller. Apply it with "
               f"'ingest --total-epsilon {sp.total_epsilon:g} --releases {sp.releases}' (or "
               f"--epsilon {b.epsilon_state_asked:.10g} --budget {b.budget:.10g}"
               + ("" if sp.calibration == "rr" else f" --calibration {sp.calibration}") + ")")


def _echo_map_plan(mp: dict[str, Any]) -> None:
    """The bucket-size x output-epsilon table of 95 % half-widths (default calibration)."""
    eps = list(mp["rows"][0]["halfwidth"])
    click.echo(f"map by {mp['by']}: {mp['buckets']:,} buckets of {mp['bucket_cells']:,} cells; "
               f"95 % half-width of one bucket's density at density 0 ({mp['calibration']} "
               "calibration; the whole map costs the output epsilon once):")
    click.echo(f"  {'bucket':<14} {'cells':>12}  " + "  ".join(f"eps {e:<8}" for e in eps))
    for r in mp["rows"]:
        cols = "  ".join(f"+- {h:<9.4f}" if h < 1 else f"{'> 1':<12}" for h in r["halfwidth"].values())
        mark = "*" if r["by"] == mp["by"] else " "
        click.echo(f" {mark}{r['by']:<14} {r['bucket_cells']:>12,}  {cols}")
    click.echo("  (a half-width over 1 means such a bucket says nothing: use larger buckets)")


def _errors_line(r: dict[str, Any], universe: Universe, cap: float) -> str:
    """``density +- a [b]  distinct +- c [d]``, or the bound the universe can express."""
    what = "buckets can express" if universe.is_hashed else "cells"
    if r["stderr_density"] is None:
        dens = "density +- more than 1 (uninformative)"
    else:
        half = r["stderr_density_95"]
        dens = (f"density +- {r['stderr_density']:.6f} "
                + (f"[{half:.6f}]" if half is not None else "[more than 1]"))
    if r["stderr_distinct"] is None:
        dist = f"distinct +- more than {cap:,.0f} (all the {what})"
    else:
        half = r["stderr_distinct_95"]
        dist = (f"distinct +- {r['stderr_distinct']:,.1f} "
                + (f"[{half:,.1f}]" if half is not None else f"[more than {cap:,.0f}]"))
    return f"{dens}  {dist}"


def _frequency_plan(universe: Universe, epsilon: float, modulus: int,
                    expected_distinct: int | None, release_epsilon: float | None,
                    crop: int | None, as_json: bool) -> None:
    """The frequency estimator's plan (:func:`panstream.release.incidence.plan_frequency`)."""
    from panstream.release.incidence import plan_frequency

    n = expected_distinct if expected_distinct is not None else universe.size // 4
    if n > universe.size:
        raise click.UsageError(f"-n {n:,} is more than the universe's {universe.size:,} cells")
    fp = plan_frequency(universe.size, epsilon, modulus, n, release_epsilon=release_epsilon,
                        crop=crop)
    if as_json:
        emit_json({"frequency": fp.to_dict()})
        return
    given_n = "" if expected_distinct is not None else " (no -n: a quarter of the cells)"
    rel = (f", one release at epsilon {release_epsilon:g}" if release_epsilon
           else " (table noise only: add --release-epsilon)")
    click.echo(f"plan: frequency estimator over {universe.spec} ({universe.size:,} counters mod "
               f"{modulus}), epsilon {epsilon:g} (realized {fp.epsilon_state:.6f}, alpha "
               f"{float(Fraction(fp.alpha)):.6f}), {n:,} present cells{given_n}{rel}")
    click.echo("  worst case over every frequency profile, 95 % half-width:")
    click.echo(f"    seen exactly once           +- {fp.once:,.0f} cells")
    click.echo(f"    present (seen >= 1)         +- {fp.present:,.0f} cells")
    click.echo(f"    fraction seen once          +- {fp.fraction_once:.4f}")
    click.echo(f"    mean count cropped at {fp.crop:<5} +- {fp.cropped_mean:.4f}")
    click.echo(f"  counts of {modulus} or more are seen modulo {modulus} (aliasing): choose "
               "--modulus above the counts you need to tell apart; the error grows as its square "
               "root (docs/frequency.md)")
