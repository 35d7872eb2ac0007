"""``panstream kafka --window``: tumbling windows on the routed layout (issue 23, Kafka part).

:func:`kafka_window_options` adds the options to ``panstream kafka``; :func:`windowed_member`
builds the member (:mod:`panstream.sources.kafka.windows`: a windowed routing stage and slice
stage) and prints the accounting, as ``ingest --window`` does.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from panstream import estimators
from panstream.cli.common import FiniteFloatRange, emit_json, env
from panstream.cli.window_options import (
    DEFAULT_LATENESS,
    _duration,
    range_options,
    time_zone_option,
    window_line,
    zone_notice,
)
from panstream.errors import ConfigurationError
from panstream.state.slices import mib
from panstream.windows import duration_text, horizon_line
from panstream.windows.eventtime import check_time, has_time
from panstream.windows.zones import Zone

F = TypeVar("F", bound=Callable[..., Any])

#: The options only ``kafka --window`` takes.
WINDOW_ONLY = ("lateness", "release_epsilon", "series", "series_topic", "horizon", "range_from",
               "range_to", "time_zone")


def kafka_window_options() -> Callable[[F], F]:
    """``--window``, ``--lateness``, ``--release-epsilon``, ``--series``, ``--horizon``."""
    opts = [
        click.option("--window", default=None, metavar="DURATION", callback=_duration("--window"),
                     help="Tumbling windows by event time (1h, 1d, 15m; aligned to UTC): a "
                          "fresh table per window, released ONCE at --release-epsilon after its "
                          "end + --lateness, appended to --series. Needs a timed -f (clf, ...) "
                          "and --state-dir (docs/windows.md).",
                     **env("KAFKA_WINDOW")),
        click.option("--lateness", default=DEFAULT_LATENESS, show_default=True,
                     metavar="DURATION", callback=_duration("--lateness", zero_ok=True),
                     help="With --window: a window stays open on the wall clock this long after "
                          "its end, then is released; a line whose window is not open when it "
                          "is routed is dropped.", **env("KAFKA_LATENESS")),
        click.option("--release-epsilon", type=FiniteFloatRange(min=0, min_open=True),
                     default=None, help="With --window: the epsilon of each window's one release.",
                     **env("KAFKA_RELEASE_EPSILON")),
        click.option("--series", type=click.Path(dir_okay=False), default=None, metavar="FILE",
                     help="With --window: the series file (JSON lines, or CSV if it ends in .csv) "
                          "shared by the members; a window in it is never released again. "
                          "Default: STATE_DIR/GROUP-series.jsonl.", **env("KAFKA_SERIES")),
        click.option("--series-topic", default=None, metavar="TOPIC",
                     help="With --window: also publish each released window's record, keyed by "
                          "the window, to this compacted topic (created if missing; 'none': "
                          "do not). Default: GROUP-series.", **env("KAFKA_SERIES_TOPIC")),
        click.option("--horizon", default=None, metavar="DURATION",
                     callback=_duration("--horizon"),
                     help="With --window: print the epsilon of a person seen in every window "
                          "any span this long meets (any 7d meets at most 8 1d windows: 8 x a "
                          "window's epsilon).",
                     **env("KAFKA_HORIZON")),
        *range_options("KAFKA_"),
        time_zone_option("KAFKA_"),
    ]

    def deco(f: F) -> F:
        for o in reversed(opts):
            f = o(f)
        return f

    return deco


def check_window_args(ctx: click.Context, *, window: int | None, layout: str,
                      state_dir: str | None, total_epsilon: float | None,
                      release_epsilon: float | None, **_: Any) -> None:
    """Refuse what ``kafka --window`` does not take (one ``panstream: error:`` line each)."""
    from panstream.cli.common import given

    if window is None:
        bad = [f"--{n.removeprefix('range_').replace('_', '-')}" for n in WINDOW_ONLY
               if given(ctx, n)]
        if bad:
            raise click.UsageError(f"{', '.join(bad)} go(es) with --window")
        return
    if layout != "slices":
        raise click.UsageError("--window runs on the routed layout: drop --layout partition")
    if state_dir is None:
        raise click.UsageError("--window keeps its window-slices, ledgers and series in "
                               "--state-dir DIR (shared by the members); --state-topic is not "
                               "supported with --window yet")
    if total_epsilon is not None:
        raise click.UsageError("--window takes --epsilon (each window's state epsilon) and "
                               "--release-epsilon (its one release), not --total-epsilon")
    if release_epsilon is None:
        raise click.UsageError("--window needs --release-epsilon E (each window's one release)")


def windowed_member(tail_cfg: Any, metrics: Any, group: str, overrides: tuple[str, ...],
                    security: dict[str, Any], slice_count: int, cells_retention: float, *,
                    window: int, lateness: int, release_epsilon: float, series: str | None,
                    series_topic: str | None,
                    horizon: int | None, state_dir: str, as_json: bool,
                    range_from: int | None = None, range_to: int | None = None,
                    time_zone: Zone | None = None) -> Any:
    """The windowed member: routing and slice stages over ``<group>-wcells``; prints the
    per-window accounting and, as each window is released, its record."""
    from panstream.sources import kafka as src
    from panstream.sources.kafka.member import Member
    from panstream.sources.kafka.route import RouteConfig
    from panstream.sources.kafka.windows import (
        SeriesTopic,
        WindowRouteStage,
        WindowSliceStage,
        WindowSpec,
        window_topic,
    )
    from panstream.state.slices import SliceLayout
    from panstream.state.stores import DirectoryStore

    c = tail_cfg
    lay = SliceLayout(c.universe, slice_count)
    topic = window_topic(group)
    if topic in c.topics:
        raise ConfigurationError(f"-t {topic} is the group's own internal topic: tail the source "
                                 "topics instead")
    spec = WindowSpec(window, lateness, float(release_epsilon), first=range_from, stop=range_to,
                      time_zone=time_zone.name if time_zone is not None else None)
    spec.schedule  # noqa: B018  (refuses a --from/--to off the window grid, before connecting)
    if has_time(c.fmt):  # a local time without --time-zone: refused now (never for auto)
        check_time(c.fmt, spec.zone)
    unused = zone_notice(c.fmt, time_zone)
    if unused:
        click.echo(f"panstream: {unused}", err=True)
    ser = series or os.path.join(state_dir, f"{group}-series.jsonl")
    parsed = src.parse_overrides(overrides)
    slice_consumer = src.internal_config(",".join(c.consumer["bootstrap_servers"]),
                                         f"{group}-slices", parsed, security)
    client = src.client_config(c.consumer)
    route = WindowRouteStage(RouteConfig(c.consumer, client, c.topics, lay, topic,
                                         c.value_format, c.fmt), metrics, spec)
    scfg = dataclasses.replace(c, consumer=slice_consumer, topics=[topic], value_format="item",
                               fmt="plain")

    def on_release(rec: dict[str, Any]) -> None:
        if as_json:
            emit_json({"window": {k: v for k, v in rec.items() if k != "release"}})
        else:
            click.echo(window_line(rec))
        sys.stdout.flush()

    results_topic = series_topic or f"{group}-series"
    results = None if results_topic.lower() == "none" else SeriesTopic(client, results_topic)
    slices = WindowSliceStage(scfg, lay, metrics, admin_client=client, spec=spec, group=group,
                              sources=list(c.topics),
                              wstore=DirectoryStore(os.path.join(state_dir, "windows")),
                              series_path=ser, on_release=on_release, results=results)
    eps_state = estimators.state_epsilon(c.estimator, c.epsilon, calibration=c.calibration,
                                         modulus=c.modulus)
    eps_window = eps_state + spec.release_epsilon
    whole = sum(lay.table_bytes(r, c.estimator, c.modulus) for r in range(lay.count))
    click.echo(f"panstream kafka: {duration_text(window)} windows (event time, lateness "
               f"{duration_text(lateness)}; a window is open on the wall clock from its start "
               "to its end + lateness and released then, empty or not); each window: "
               "epsilon_state "
               f"{eps_state:.6f} + one release {spec.release_epsilon:g} = {eps_window:.6f} per "
               f"person per window; series {ser}"
               + (f" and topic {results_topic}" if results is not None else ""), err=True)
    click.echo(f"panstream kafka: a person seen in W windows is covered at W x {eps_window:.6g} "
               "against whoever reads the whole series"
               + (f"; {horizon_line(eps_window, window, horizon)}" if horizon else ""), err=True)
    click.echo(f"panstream: routed layout: {lay.describe(c.estimator, c.modulus)}, routed through "
               f"{topic}; each open window is one table of {mib(whole)} in {lay.count} slices "
               f"(with N members about {mib(whole)}/N per open window)", err=True)

    def held(owned: list[int]) -> None:
        click.echo(f"panstream: this member now holds {len(owned)} of {lay.count} slices "
                   f"({', '.join(map(str, owned)) or '-'}) of every open window", err=True)

    slices.on_assign = held
    slices.notice = lambda msg: click.echo(f"panstream: {msg}", err=True)
    return Member(route, slices, client, int(cells_retention * 1000))
