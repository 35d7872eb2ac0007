"""``panstream merge-sketches``: merge exported Sketch-Flip-Merge sketches of different streams."""

from __future__ import annotations

from pathlib import Path

import click

from panstream.cli.common import emit_json, env, handle_errors, json_option
from panstream.errors import StateError

ASSUME_CHOICES = ("murmur3", "presto-sql", "xxhash64-varchar", "xxhash64-bigint")


@click.command()
@click.argument("sketches", nargs=-1, type=click.Path(dir_okay=False, exists=True))
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True,
              help="Where to write the merged sketch (Presto SfmSketch format).",
              **env("MERGE_OUTPUT"))
@click.option("--assume-hash", type=click.Choice(ASSUME_CHOICES), default=None,
              help="The hash of inputs that record none (no FILE.params.json beside them: a "
                   "sketch Presto wrote, or an older export): presto-sql for noisy_approx_set_sfm "
                   "over a VARCHAR, xxhash64-bigint over a BIGINT, murmur3 for SfmSketch.add.",
              **env("MERGE_ASSUME_HASH"))
@json_option()
@handle_errors
def command(sketches: tuple[str, ...], output: str, assume_hash: str | None,
            as_json: bool) -> None:
    """Merge sketches of different streams (sites, days) into one sketch of their union.

    Each SKETCH is a file in Presto's SfmSketch format, as 'panstream rotate --export-presto'
    writes them (or Presto's noisy_approx_set_sfm returns them). The merge is Presto's randomized
    merge in its unbiased form (Theorem 4.8 of Hehir, Ting and Cormode; docs/sketch.md, "Merge"),
    with draws from the OS CSPRNG: the result has the law of one sketch of the union at the merged
    epsilon -ln(e^-e1 + e^-e2 - e^-(e1+e2)), below every input's. It reads only published sketches,
    so it spends no budget; someone who holds the inputs still has each of them.

    Sketches merge only if they hashed their items the same way: panstream's exports record their
    hash in SKETCH.params.json (murmur3 as Presto's Java SfmSketch.add, or xxhash64-varchar /
    xxhash64-bigint as Presto SQL's noisy_approx_set_sfm), and sketches whose hashes differ are
    refused (their merge would count every common item twice). Give --assume-hash for inputs
    that record none; the output records the inputs' common hash.

    \b
    Example:
      panstream merge-sketches site-a.sfm site-b.sfm -o both.sfm
      panstream merge-sketches ours.sfm from-presto-sql.sfm --assume-hash presto-sql -o all.sfm
      panstream inspect -s both.sfm
    """
    from panstream.estimators.sketch import sfm
    from panstream.estimators.sketch.estimator import merge
    from panstream.estimators.sketch.hashing import SQL_TYPE, resolve
    from panstream.state.files import atomic_write
    from panstream.state.sketch_params import read_hash, write_params

    if len(sketches) < 2:
        msg = "give at least two sketch files to merge"
        raise StateError(msg)
    assumed = None if assume_hash is None else resolve(assume_hash, "id")
    hashes: dict[str, str | None] = {}
    for path in sketches:
        recorded = read_hash(path)
        hashes[path] = recorded if recorded is not None else assumed
    known = {h for h in hashes.values() if h is not None}
    if len(known) > 1:
        by = ", ".join(f"{p} {h or 'unrecorded'}" for p, h in hashes.items())
        msg = (f"cannot merge sketches hashed differently ({by}): their merge would count every "
               "common item twice; rebuild them with one --sketch-hash")
        raise StateError(msg)
    merged = None
    for path in sketches:
        try:
            sk = sfm.from_presto(Path(path).read_bytes())
        except StateError as exc:
            msg = f"{path}: {exc}"
            raise StateError(msg) from None
        merged = sk if merged is None else merge(merged, sk)
    assert merged is not None
    common = known.pop() if known else None
    unrecorded = [p for p, h in hashes.items() if h is None]
    if common is not None:
        write_params(output, {"format": "panstream-sfm-params", "version": 1,
                              "buckets": merged.buckets, "levels": merged.levels,
                              "hash": common, "sql_type": SQL_TYPE[common]})
    atomic_write(output, sfm.to_presto(merged))
    fit = sfm.mple(merged.ones_by_level(), merged.buckets, merged.flip)
    out = {"output": output, "inputs": list(sketches), "buckets": merged.buckets,
           "levels": merged.levels, "flip": merged.flip, "epsilon": merged.epsilon,
           "cardinality": merged.cardinality(), "stderr": fit.stderr, "hash": common,
           "unrecorded_hash": unrecorded}
    if as_json:
        emit_json(out)
        return
    click.echo(f"merged {len(sketches)} sketches into {output}: {merged.buckets} x {merged.levels}, "
               f"flip probability {merged.flip:.6g} (epsilon {merged.epsilon:.6g}), hash "
               f"{common or 'unrecorded'}")
    click.echo(f"  distinct {out['cardinality']:,} (+- {fit.stderr:,.0f} standard error)")
    if unrecorded:
        click.echo(f"  note: no hash recorded for {', '.join(unrecorded)}: merged as if hashed like the "
                   "others (give --assume-hash to check)", err=True)
