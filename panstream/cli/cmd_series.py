"""``panstream series``: read, plot and check the series a windowed ``ingest`` writes."""

from __future__ import annotations

from typing import Any

import click

from panstream.cli.common import emit_json, handle_errors, json_option
from panstream.windows import horizon_line
from panstream.windows.eventtime import label, parse_duration
from panstream.windows.series import plot_series, read


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
    for r in recs:
        late = ("" if r.get("late_records") is None else
                f"  late ~{max(float(r['late_records']), 0):,.0f}, untimed "
                f"~{max(float(r['untimed_records'] or 0), 0):,.0f}")
        click.echo(f"{r['window']} .. {label(float(r['end']))}  {r['statistic']} "
                   f"{float(r['estimate']):>10,.0f}  [{float(r['low']):,.0f}, "
                   f"{float(r['high']):,.0f}]  epsilon {float(r['epsilon_window']):.6g}{late}")
    ids = [r["window"] for r in recs]
    if len(set(ids)) != len(ids):
        click.echo("WARNING: some windows appear more than once: their budget was spent twice",
                   err=True)
    if horizon is not None:
        size = int(float(recs[-1]["end"]) - float(recs[-1]["start"]))
        secs = parse_duration(horizon, "--horizon")
        click.echo(horizon_line(float(recs[-1]["epsilon_window"]), size, secs))


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
