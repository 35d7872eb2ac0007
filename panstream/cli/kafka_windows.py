"""``panstream kafka --window``: tumbling windows on the routed layout (issue 23, Kafka part).

:func:`kafka_window_options` adds the options to ``panstream kafka``; :func:`windowed_member`
builds the member (:mod:`panstream.sources.kafka.windows`: a windowed routing stage and slice
stage) and prints the accounting, as ``ingest --window`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from panstream.cli.common import F, FiniteFloatRange, env
from panstream.cli.window_options import DEFAULT_LATENESS, _duration, range_options, time_zone_option
from panstream.inputs.times import TIMED_FORMATS

#: The options only ``kafka --window`` takes.
WINDOW_ONLY = ("lateness", "release_epsilon", "series", "series_topic", "horizon", "range_from",
               "range_to", "time_zone")


def kafka_window_options() -> Callable[[F], F]:
    """``--window``, ``--lateness``, ``--release-epsilon``, ``--series``, ``--horizon``."""
    opts = [
        click.option("--window", default=None, metavar="DURATION", callback=_duration("--window"),
                     help="Tumbling windows by event time (1h, 1d, 15m; aligned to UTC): a "
                          "fresh table per window, released ONCE at --release-epsilon after its "
                          "end + --lateness, appended to --series. Needs a timed -f "
                          f"({TIMED_FORMATS[0]}, ...) and --state-dir (docs/windows.md).",
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
