"""``panstream rotate``: start a new epoch of a state file after an announced intrusion."""

from __future__ import annotations

import click

from panstream import estimators
from panstream.calibration import CALIBRATIONS
from panstream.cli.common import (
    FiniteFloatRange,
    StatePath,
    UniverseParam,
    emit_json,
    env,
    handle_errors,
    json_option,
)
from panstream.errors import StateError
from panstream.estimators.base import Estimator
from panstream.state.files import state_lock
from panstream.universe import Universe


@click.command()
@click.option("-s", "--state", "state", type=StatePath(), required=True,
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
        est = estimators.load(state)
        _check_guards(state, est, universe, epsilon, calibration)
        old = est.rotate()
        est.save(state)
    out = {"state": state, "universe": est.universe.spec, "epsilon_state": est.epsilon_state,
           "old_epoch_releases": len(old.entries), "old_epoch_spent": old.spent,
           "budget": est.ledger.budget}
    if as_json:
        emit_json(out)
        return
    click.echo(f"rotated {state}: new epoch of its {est.kind} estimator over "
               f"{est.universe.spec} with a fresh table "
               f"(epsilon_state {est.epsilon_state:.6f}) and a fresh output budget of "
               f"{est.ledger.budget:g}")
    click.echo(f"  old epoch: {len(old.entries)} release(s), epsilon {old.spent:g} spent; those "
               "releases stay valid. The old table was wiped from memory and replaced on disk.")


def _check_guards(state: str, est: Estimator, universe: Universe | None,
                  epsilon: float | None, calibration: str | None) -> None:
    """Refuse to rotate a state whose parameters contradict ``-u``/``--epsilon``/``--calibration``.

    These options only guard against rotating the wrong file: a rotation keeps the parameters, so
    the message says which file holds what, not "resume with" as for ingest.
    """
    given = [("-u", "universe", est.universe.spec, universe.spec if universe else None),
             ("--epsilon", "epsilon", repr(est.epsilon), None if epsilon is None else repr(epsilon)),
             ("--calibration", "calibration", est.describe().get("calibration"), calibration)]
    for flag, name, stored, asked in given:
        if asked is not None and asked != stored:
            msg = (f"{state} holds {name} {stored}, not {asked}: nothing was rotated. Rotation keeps a "
                   f"state's parameters; if this is the right file, run 'panstream rotate -s {state}' "
                   f"without {flag} (or with {flag} {stored}). To count with {name} {asked} instead, "
                   f"start a new state: 'panstream ingest {flag} {asked} -s NEW.pst'")
            raise StateError(msg)
