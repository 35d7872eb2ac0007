"""``panstream release``: publish a noisy estimate from a state file and record it in its ledger."""

from __future__ import annotations

import click

from panstream.cli.common import emit_json, env, handle_errors, json_option
from panstream.estimator import DensityEstimator
from panstream.noise import MECHANISMS
from panstream.release import format_release


@click.command()
@click.option("-s", "--state", "state", type=click.Path(dir_okay=False), default=None,
              help="State file written by 'panstream ingest' (its ledger records this release).",
              **env("STATE"))
@click.option("--state-dir", type=click.Path(file_okay=False, exists=True), default=None,
              help="Instead of --state: the shard directory of 'panstream kafka'; all shards are "
                   "merged (see --merge) and the release is recorded in its release ledger.",
              **env("STATE_DIR"))
@click.option("--merge", type=click.Choice(["auto", "partitioned", "sum"]), default="auto",
              show_default=True, help="With --state-dir: partitioned (messages keyed by the item, "
              "default partitioner: error independent of the shard count) or sum of the shard "
              "estimates; auto picks partitioned for one topic over ipv4/range.",
              **env("RELEASE_MERGE"))
@click.option("--partitions", type=click.IntRange(min=1), default=None,
              help="With --merge partitioned: the topic's partition count (default: highest "
                   "shard partition + 1).", **env("RELEASE_PARTITIONS"))
@click.option("--keyed/--unkeyed", default=False, show_default=True,
              help="With --state-dir: assert that every message is keyed by its item (default "
                   "partitioner), so one item reaches one partition per topic. Without it the "
                   "privacy accounting assumes an item may be in every shard: the state epsilon "
                   "counts every shard and the sum merge's noise is scaled to the shard count.",
              **env("RELEASE_KEYED"))
@click.option("--new-ledger", is_flag=True, default=False,
              help="With --state-dir: start a new release ledger although shards exist (only if no "
                   "release was ever made from them; a lost ledger would otherwise reset the "
                   "budget silently).", **env("RELEASE_NEW_LEDGER"))
@click.option("--epsilon", type=click.FloatRange(min=0, min_open=True), required=True,
              help="Output epsilon of this release, spent from the state's output budget.",
              **env("RELEASE_EPSILON"))
@click.option("--mechanism", type=click.Choice(MECHANISMS), default="laplace", show_default=True,
              help="laplace: discretized Laplace noise (unbiased); geometric: integer two-sided "
                   "geometric noise, count clamped to [0, |X|] (for 'panstream.remap').",
              **env("MECHANISM"))
@json_option()
@handle_errors
def command(state: str | None, state_dir: str | None, merge: str, partitions: int | None,
            keyed: bool, new_ledger: bool, epsilon: float, mechanism: str, as_json: bool) -> None:
    """Release the noisy density and distinct count of a state, spending output budget.

    Loads the state, adds exact noise of scale 1/EPSILON to its count of ones, debiases, records
    the release (epsilon, mechanism, time) in the state's privacy ledger and saves the state
    atomically *before* printing anything. A release that would exceed the budget is refused and
    nothing is drawn or written. The epsilon printed is the realized one.
    """
    if (state is None) == (state_dir is None):
        raise click.UsageError("give exactly one of --state FILE or --state-dir DIR")
    if state_dir is not None:  # shards of 'panstream kafka' (panstream.statestore)
        from panstream.statestore import release_state_dir

        rel, _ = release_state_dir(state_dir, epsilon, mechanism, merge, partitions, keyed,
                                   new_ledger)
    else:
        assert state is not None
        est = DensityEstimator.load(state)
        rel = est.release(epsilon, mechanism)
        est.save(state)  # the ledger is durable before the number is shown
    if as_json:
        emit_json(rel.to_dict())
    else:
        click.echo(format_release(rel))
