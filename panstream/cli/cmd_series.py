"""``panstream series``: read, plot and check the series a windowed ``ingest`` writes."""

from __future__ import annotations

import math
import statistics
from typing import Any

import click

from panstream.cli.common import emit_json, handle_errors, json_option
from panstream.release.honesty import NOISE_FLAG, clamp_note, shown_count
from panstream.windows import horizon_line
from panstream.windows.eventtime import label, parse_duration
from panstream.windows.series import dropped_text, plot_series, read


@click.group()
def command() -> None:
    """The released series of 'ingest --window': one record per closed window.

    \b
      panstream series show daily.jsonl
      panstream series show daily.jsonl --horizon 7d
      panstream series plot daily.jsonl -o daily.png
    """


@command.command("show")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--horizon", default=None, metavar="DURATION",
              help="Also print what a person seen in every window of any span this long is "
                   "covered at (e.g. 7d).")
@json_option()
@handle_errors
def show(file: str, horizon: str | None, as_json: bool) -> None:
    """Print the windows of FILE (JSON lines, or CSV by its name), oldest first."""
    recs = read(file)
    if as_json:
        for r in recs:
            emit_json({"window": {k: v for k, v in r.items() if k != "release"}})
        return
    if not recs:
        click.echo(f"{file}: no window released yet")
        return
    clamped = False
    for r in recs:
        late = "" if r.get("late_records") is None else f"  {dropped_text(r)}"
        flag = f"  {NOISE_FLAG}" if r.get("noise_dominated") else ""
        figures = [shown_count(float(r[k])) for k in ("estimate", "low", "high")]
        clamped |= any(f.endswith("*") for f in figures)
        click.echo(f"{r['window']} .. {label(float(r['end']))}  {r['statistic']} "
                   f"{figures[0]:>10}  [{figures[1]}, {figures[2]}]  epsilon "
                   f"{float(r['epsilon_window']):.6g}{late}{flag}")
    if clamped:
        click.echo(clamp_note("--json", indent=""))
    line = series_advice(recs)
    if line:
        click.echo(line)
    ids = [r["window"] for r in recs]
    if len(set(ids)) != len(ids):
        click.echo("WARNING: some windows appear more than once: their budget was spent twice",
                   err=True)
    if horizon is not None:
        size = int(float(recs[-1]["end"]) - float(recs[-1]["start"]))
        secs = parse_duration(horizon, "--horizon")
        click.echo(horizon_line(float(recs[-1]["epsilon_window"]), size, secs))


def series_advice(recs: list[dict[str, Any]]) -> str | None:
    """One line when windows are noise-dominated: how many, and what would make them usable
    (``None`` when none is). The numbers: the median window's interval width against its value;
    a window ``k`` times longer holds up to ``k`` times the count for the same noise (a bit
    table's noise is fixed by its universe), and the release noise falls as ``1/epsilon``."""
    noisy = [r for r in recs if r.get("noise_dominated")]
    if not noisy:
        return None
    width = statistics.median(float(r["high"]) - float(r["low"]) for r in recs)
    value = statistics.median(abs(float(r["estimate"])) for r in recs)
    k = math.ceil(width / value) if value > 0 else None
    longer = (f"windows about {k}x longer (if the count grows with the window)" if k
              else "longer windows")
    return (f"{NOISE_FLAG}: {len(noisy)} of {len(recs)} window(s) have an interval wider than "
            f"their value (median width {width:,.0f} against a median value {value:,.0f}): read "
            f"them as 'small', not as values; to make them usable: {longer}, a larger epsilon "
            "or a smaller universe ('panstream plan' gives the error of each)")


@command.command("plot")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="The PNG to write.")
@click.option("--title", default=None, help="Title of the picture (default: what it shows).")
@handle_errors
def plot(file: str, output: str, title: str | None) -> None:
    """Draw each window's estimate with its interval over time (a PNG; needs the plot extra:
    pip install 'panstream[plot]')."""
    recs: list[dict[str, Any]] = read(file)
    plot_series(recs, output, title)
    click.echo(f"panstream: {len(recs)} window(s) drawn to {output}", err=True)
