"""``panstream report``: one self-contained HTML page of released results (no state, no budget)."""

from __future__ import annotations

import click

from panstream.cli.common import env, handle_errors
from panstream.errors import ConfigurationError
from panstream.windows.eventtime import parse_duration


@click.command()
@click.option("--series", "series", multiple=True, type=click.Path(dir_okay=False),
              metavar="FILE",
              help="A released series (JSON lines or CSV) of 'ingest --window' or 'kafka --window'; "
                   "repeat for several.", **env("REPORT_SERIES"))
@click.option("--release", "releases", multiple=True, type=click.Path(dir_okay=False),
              metavar="FILE", help="The output of 'panstream release --json' (one figure; a map "
              "is drawn as a map, 'release --by country --json' as a ranked chart of "
              "countries); repeat for several.", **env("REPORT_RELEASE"))
@click.option("--map", "maps", multiple=True, type=click.Path(dir_okay=False), metavar="FILE",
              help="The output of 'panstream release --by /24 --json'; repeat for several.",
              **env("REPORT_MAP"))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="The HTML file to write.", **env("REPORT_OUTPUT"))
@click.option("--title", default="panstream report", show_default=True,
              help="The page's heading.", **env("REPORT_TITLE"))
@click.option("--horizon", default=None, metavar="DURATION",
              help="Also show what a person seen in every window of any span this long is covered "
                   "at (e.g. 7d).", **env("REPORT_HORIZON"))
@click.option("--same-state", is_flag=True, default=False,
              help="The --release/--map files were all released from one state (one ledger): "
                   "count its largest total once instead of adding them up. Refused when their "
                   "state ids differ (each release JSON names its state).",
              **env("REPORT_SAME_STATE"))
@handle_errors
def command(series: tuple[str, ...], releases: tuple[str, ...], maps: tuple[str, ...],
            output: str, title: str, horizon: str | None, same_state: bool) -> None:
    """Write one self-contained HTML page of what may be published.

    Reads released results only (series files and release JSON): it never opens a state and
    never spends budget, so anyone may run it on the published files. The page draws every
    estimate with its interval (inline SVG, a table of the same numbers under each chart), marks
    noise-dominated values, adds up each release's epsilon into the total per person, and says
    what the deployment keeps and never keeps. No script, font, image or link to fetch: it opens
    offline and can be mailed.

    \b
    Examples:
      panstream report --series daily.jsonl -o report.html
      panstream release -s week.pst --epsilon 0.5 --by /24 --json > map.json
      panstream report --series daily.jsonl --map map.json --horizon 7d -o report.html
      panstream report --release r.json --title "Distinct clients, November" -o r.html
      panstream release -s geo.pst --epsilon 1 --by country --json > countries.json
      panstream report --release countries.json -o countries.html
      panstream report --series /var/lib/panstream/hourly-series.jsonl -o group.html   # Kafka
    """
    from panstream.report import load_release, load_series, render, write
    from panstream.report.page import check_same_state

    if not (series or releases or maps):
        msg = "nothing to report: give --series FILE, --release FILE or --map FILE"
        raise ConfigurationError(msg)
    secs = None if horizon is None else parse_duration(horizon, "--horizon")
    s_inputs = [load_series(p) for p in series]
    m_inputs = [load_release(p, "--map") for p in maps]
    for p, r in zip(maps, m_inputs, strict=True):
        from panstream.report.fields import is_map

        if not is_map(r.data):
            raise ConfigurationError(f"--map {p}: no rows per bucket in it; give the output of "
                                     "'panstream release --by /24 --json' (or use --release)")
    r_inputs = m_inputs + [load_release(p) for p in releases]  # maps first, under the series
    unchecked = check_same_state(r_inputs) if same_state else None
    if unchecked:
        click.echo(f"panstream: warning: {unchecked}", err=True)
    html = render(s_inputs, r_inputs, title=title, horizon=secs, same_state=same_state)
    size = write(output, html)
    click.echo(f"panstream: report written to {output} ({size / 1024:,.0f} KiB, "
               f"{len(s_inputs)} series, {len(r_inputs)} release(s); self-contained)", err=True)
