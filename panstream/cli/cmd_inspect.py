"""``panstream inspect``: the public parameters and budget of a state file, never its estimate."""

from __future__ import annotations

import os
from typing import Any

import click

from panstream.cli.common import StatePath, emit_json, env, handle_errors, json_option
from panstream.estimators.density import DensityEstimator
from panstream.state.format import PREAMBLE, read_frame


def describe(path: str) -> dict[str, Any]:
    """Everything public about the state at ``path`` (verified in full, checksum included).

    Raises:
        StateError: missing, unreadable, corrupt or foreign file.
    """
    est = DensityEstimator.load(path)
    with open(path, "rb") as f:
        frame = read_frame(f.read(PREAMBLE.size))
    led = est.ledger
    out = {
        "state": path, "format_version": frame.version, "bytes": os.path.getsize(path),
        "universe": est.universe.spec, "kind": est.universe.kind, "cells": est.size,
        "epsilon_requested": est.epsilon, "calibration": est.calibration, "p": str(est.p),
        "p_float": float(est.p), "epsilon_state": est.epsilon_state,
        "budget": led.budget, "budget_spent": led.spent, "budget_remaining": led.remaining,
        "releases": len(led.entries), "epsilon_total": est.epsilon_state + led.spent,
    }
    est._table.wipe()
    return out


@click.command()
@click.option("-s", "--state", type=StatePath(), required=True,
              help="State file written by 'panstream ingest'.", **env("STATE"))
@json_option()
@handle_errors
def command(state: str, as_json: bool) -> None:
    """Show a state's parameters, realized epsilon, budget spent and left, and format version.

    It never shows the estimate: reading it out is a release and spends budget (use 'panstream
    release').

    \b
    Example:
      panstream inspect -s web.pst
      panstream inspect -s web.pst --json
    """
    d = describe(state)
    if as_json:
        emit_json(d)
        return
    click.echo(f"state            {d['state']} (format version {d['format_version']}, "
               f"{d['bytes']:,} bytes)")
    click.echo(f"universe         {d['universe']} ({d['cells']:,} cells)")
    click.echo(f"state privacy    epsilon_state = {d['epsilon_state']:.6f} realized (asked "
               f"{d['epsilon_requested']:g}, {d['calibration']} calibration, p = {d['p']} "
               f"= {d['p_float']:.9f})")
    click.echo(f"output budget    {d['budget']:g}: spent {d['budget_spent']:g} in "
               f"{d['releases']} release(s), {d['budget_remaining']:g} left")
    click.echo(f"pan-private      epsilon_state + spent = {d['epsilon_total']:.6f}")
