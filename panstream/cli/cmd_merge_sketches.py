"""``panstream merge-sketches``: merge exported Sketch-Flip-Merge sketches of different streams."""

from __future__ import annotations

from pathlib import Path

import click

from panstream.cli.common import emit_json, env, handle_errors, json_option
from panstream.errors import StateError


@click.command()
@click.argument("sketches", nargs=-1, type=click.Path(dir_okay=False, exists=True))
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True,
              help="Where to write the merged sketch (Presto SfmSketch format).",
              **env("MERGE_OUTPUT"))
@json_option()
@handle_errors
def command(sketches: tuple[str, ...], output: str, as_json: bool) -> None:
    """Merge sketches of different streams (sites, days) into one sketch of their union.

    Each SKETCH is a file in Presto's SfmSketch format, as 'panstream rotate --export-presto'
    writes them (or Presto's noisy_approx_set_sfm returns them). The merge is Presto's randomized
    merge in its unbiased form (Theorem 4.8 of Hehir, Ting and Cormode; docs/sketch.md, "Merge"),
    with draws from the OS CSPRNG: the result has the law of one sketch of the union at the merged
    epsilon -ln(e^-e1 + e^-e2 - e^-(e1+e2)), below every input's. It reads only published sketches,
    so it spends no budget; someone who holds the inputs still has each of them.

    \b
    Example:
      panstream merge-sketches site-a.sfm site-b.sfm -o both.sfm
      panstream inspect -s both.sfm
    """
    from panstream import sfm
    from panstream.estimators.sketch import merge
    from panstream.state.files import atomic_write

    if len(sketches) < 2:
        msg = "give at least two sketch files to merge"
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
    atomic_write(output, sfm.to_presto(merged))
    fit = sfm.mple(merged.ones_by_level(), merged.buckets, merged.flip)
    out = {"output": output, "inputs": list(sketches), "buckets": merged.buckets,
           "levels": merged.levels, "flip": merged.flip, "epsilon": merged.epsilon,
           "cardinality": merged.cardinality(), "stderr": fit.stderr}
    if as_json:
        emit_json(out)
        return
    click.echo(f"merged {len(sketches)} sketches into {output}: {merged.buckets} x {merged.levels}, "
               f"flip probability {merged.flip:.6g} (epsilon {merged.epsilon:.6g})")
    click.echo(f"  distinct {out['cardinality']:,} (+- {fit.stderr:,.0f} standard error)")
