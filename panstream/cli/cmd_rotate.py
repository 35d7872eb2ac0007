"""``panstream rotate``: start a new epoch of a state file after an announced intrusion."""

from __future__ import annotations

import click

from panstream.calibration import CALIBRATIONS
from panstream.cli.common import FiniteFloatRange, UniverseParam, emit_json, env, handle_errors, json_option
from panstream.estimator import DensityEstimator
from panstream.storage import state_lock
from panstream.universe import Universe


@click.command()
@click.option("-s", "--state", "state", type=click.Path(dir_okay=False), required=True,
              help="State file to rotate (written by 'panstream ingest').", **env("STATE"))
@click.option("-u", "--universe", type=UniverseParam(), default=None,
              help="If given, refuse unless the state's universe is this one.", **env("UNIVERSE"))
@click.option("--epsilon", type=FiniteFloatRange(min=0, min_open=True), default=None,
              help="If given, refuse unless the state's epsilon is this one.", **env("EPSILON"))
@click.option("--calibration", type=click.Choice(CALIBRATIONS), default=None,
              help="If given, refuse unless the state's calibration is this one.",
              **env("CALIBRATION"))
@json_option()
@handle_errors
def command(state: str, universe: Universe | None, epsilon: float | None, calibration: str | None,
            as_json: bool) -> None:
    """Start a fresh epoch: wipe the table, draw a new one, and replace STATE atomically.

    Run it after an announced intrusion (a snapshot was handed over, copied or read from memory):
    later states are then independent of the dumped one, so a second dump reveals nothing about
    who arrived in between. The parameters stay; the new epoch gets a fresh privacy ledger with the
    same output budget. Releases already published from the old epoch stay valid.

    Stop any consumer that writes STATE first: a running consumer would overwrite the new epoch
    with the old table at its next checkpoint.

    \b
    Example (release the old epoch's figures first if you need them):
      panstream release -s web.pst --epsilon 0.5
      panstream rotate -s web.pst
    """
    with state_lock(state, "rotate"):  # a running ingest would put the old table back
        est = DensityEstimator.load(state, expect={"universe": universe, "epsilon": epsilon,
                                                   "calibration": calibration})
        old = est.rotate()
        est.save(state)
    out = {"state": state, "universe": est.universe.spec, "epsilon_state": est.epsilon_state,
           "old_epoch_releases": len(old.entries), "old_epoch_spent": old.spent,
           "budget": est.ledger.budget}
    if as_json:
        emit_json(out)
        return
    click.echo(f"rotated {state}: new epoch over {est.universe.spec} with a fresh table "
               f"(epsilon_state {est.epsilon_state:.6f}) and a fresh output budget of "
               f"{est.ledger.budget:g}")
    click.echo(f"  old epoch: {len(old.entries)} release(s), epsilon {old.spent:g} spent; those "
               "releases stay valid. The old table was wiped from memory and replaced on disk.")
