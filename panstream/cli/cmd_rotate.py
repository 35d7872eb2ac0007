"""``panstream rotate``: start a new epoch of a state file after an announced intrusion."""

from __future__ import annotations

import click

from panstream.calibration import CALIBRATIONS
from panstream.cli.common import (
    FiniteFloatRange,
    UniverseParam,
    emit_json,
    env,
    handle_errors,
    json_option,
    state_options,
)
from panstream.errors import StateError
from panstream.estimators.base import Estimator
from panstream.state import persist
from panstream.state.files import state_lock
from panstream.universe import Universe


@click.command()
@state_options(
    state="State file to rotate (written by 'panstream ingest').",
    state_dir="Instead of --state: the state directory of a routed 'panstream kafka' group (stopped "
              "first): export its one table if asked, then replace every slice with a fresh one. "
              "The group's ledger is kept.")
@click.option("-u", "--universe", type=UniverseParam(), default=None,
              help="If given, refuse unless the state's universe is this one.", **env("UNIVERSE"))
@click.option("--epsilon", type=FiniteFloatRange(min=0, min_open=True), default=None,
              help="If given, refuse unless the state's epsilon is this one.", **env("EPSILON"))
@click.option("--calibration", type=click.Choice(CALIBRATIONS), default=None,
              help="If given, refuse unless the state's calibration is this one.",
              **env("CALIBRATION"))
@click.option("--export-presto", "export", type=click.Path(dir_okay=False), default=None,
              help="Sketch states: first write the ending epoch's sketch to this file in Presto's "
                   "SfmSketch format (a varbinary for cardinality()/merge in Presto or Velox), "
                   "then rotate. The file is the state itself: publish it as an eps_state-DP "
                   "sketch.", **env("EXPORT_PRESTO"))
@json_option()
@handle_errors
def command(state: str | None, state_dir: str | None, universe: Universe | None,
            epsilon: float | None, calibration: str | None, export: str | None,
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

    A sketch state (--estimator sketch) can be handed to a warehouse at the end of its epoch:
    --export-presto FILE writes the table in Presto's SfmSketch format, durably, and only then
    rotates, so no later state of this file can be compared with the published one.

    \b
      panstream rotate -s web.pst --export-presto web-2026-11-24.sfm

    A routed consumer group's sketch (panstream kafka --estimator sketch) is exported the same
    way from its --state-dir, once its members are stopped: the slices laid end to end are
    written as one Presto sketch, then every slice is replaced with a fresh one (D0 draws).

    \b
      panstream rotate --state-dir /var/lib/panstream --export-presto day.sfm
    """
    if (state is None) == (state_dir is None):
        raise click.UsageError("give exactly one of -s/--state FILE or --state-dir DIR")
    if state_dir is not None:
        _rotate_group(state_dir, universe, epsilon, calibration, export, as_json)
        return
    assert state is not None
    with state_lock(state, "rotate"):  # a running ingest would put the old table back
        est = persist.load(state)
        _check_guards(state, est, universe, epsilon, calibration)
        if export is not None:
            _export_presto(est, state, export)
        old = est.rotate()
        persist.save(est, state)
    out = {"state": state, "universe": est.universe.spec, "epsilon_state": est.epsilon_state,
           "old_epoch_releases": len(old.entries), "old_epoch_spent": old.spent,
           "budget": est.ledger.budget, "exported_presto": export}
    if as_json:
        emit_json(out)
        return
    click.echo(f"rotated {state}: new epoch of its {est.kind} estimator over "
               f"{est.universe.spec} with a fresh table "
               f"(epsilon_state {est.epsilon_state:.6f}) and a fresh output budget of "
               f"{est.ledger.budget:g}")
    if export is not None:
        click.echo(f"  the ending epoch's sketch was written to {export} (Presto SfmSketch format, "
                   f"epsilon_state {est.epsilon_state:.6f}-DP) before the rotation")
    click.echo(f"  old epoch: {len(old.entries)} release(s), epsilon {old.spent:g} spent; those "
               "releases stay valid. The old table was wiped from memory and replaced on disk.")


def _export_presto(est: Estimator, state: str, path: str) -> None:
    """Write ``est``'s table in Presto's format to ``path`` (atomically, durably) before rotating.

    Raises:
        StateError: not a sketch state, or the file could not be written (nothing rotated).
    """
    from panstream.estimators.sketch.estimator import SketchEstimator
    from panstream.state.sketch_params import write_export

    if not isinstance(est, SketchEstimator):
        msg = (f"--export-presto writes a Sketch-Flip-Merge sketch; {state} holds a {est.kind} "
               "state: nothing was exported or rotated")
        raise StateError(msg)
    write_export(path, est)  # its hash beside it first (panstream.state.sketch_params)


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


def _rotate_group(state_dir: str, universe: Universe | None, epsilon: float | None,
                  calibration: str | None, export: str | None, as_json: bool) -> None:
    """``rotate --state-dir``: the group's one table exported (if asked), then fresh slices."""
    from panstream.state.stores import DirectoryStore, rotate_slice_store

    def end(est: Estimator) -> None:  # guards first: a refusal rotates nothing
        _check_guards(state_dir, est, universe, epsilon, calibration)
        if export is not None:
            _export_presto(est, state_dir, export)

    group = rotate_slice_store(DirectoryStore(state_dir), end)
    est = group.estimator
    assert isinstance(est, Estimator)
    out = {"state_dir": state_dir, "universe": est.universe.spec, "estimator": est.kind,
           "slices": group.shards, "epsilon_state": est.epsilon_state, "exported_presto": export}
    if as_json:
        emit_json(out)
        return
    click.echo(f"rotated {state_dir}: {group.shards} slice(s) of its {est.kind} group over "
               f"{est.universe.spec} replaced with fresh ones (epsilon_state "
               f"{est.epsilon_state:.6f}); the group's release ledger is kept")
    if export is not None:
        click.echo(f"  the ending epoch's sketch was written to {export} (Presto SfmSketch format, "
                   f"epsilon_state {est.epsilon_state:.6f}-DP) before the rotation")
