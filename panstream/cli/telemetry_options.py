"""Telemetry options shared by ``panstream ingest`` and ``panstream kafka``.

``--telemetry-epsilon`` sets the event-level epsilon of the operational counts (summary, progress
lines, metrics), which are released per 1-s window with geometric noise (see
:mod:`panstream.telemetry`); ``--exact-counts`` (or ``PANSTREAM_EXACT_COUNTS=1``) is the explicit
opt-in to exact counts, announced by a warning line at startup that says what they reveal.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import click

from panstream.cli.common import FiniteFloatRange, env
from panstream.errors import PanstreamError
from panstream.telemetry import DEFAULT_TELEMETRY_EPSILON, EXACT_COUNTS_WARNING, TelemetryPolicy

F = TypeVar("F", bound=Callable[..., Any])


def telemetry_options(sensitivity: int, what: str) -> Callable[[F], F]:
    """Add ``--telemetry-epsilon`` and ``--exact-counts``; the command receives ``telemetry``.

    Args:
        sensitivity: L1 change of one window's counts for one item (1: log lines; 2: Kafka
            messages and their items).
        what: where the counts appear, for the help text (e.g. "summary and --progress").
    """
    options = [
        click.option("--telemetry-epsilon", type=FiniteFloatRange(min=0, min_open=True),
                     default=DEFAULT_TELEMETRY_EPSILON, show_default=True,
                     help=f"Event-level epsilon of the counts in the {what}: each 1-s window's "
                          "counts get two-sided geometric noise, the exact counts are then "
                          "forgotten. Separate from the table's and the releases' epsilon.",
                     **env("TELEMETRY_EPSILON")),
        click.option("--exact-counts", is_flag=True, default=False,
                     help=f"Show exact counts in the {what} instead. They reveal the stream "
                          "exactly (one item more changes them by one: epsilon = infinity for "
                          "those counts); the table, state and releases keep their guarantee.",
                     **env("EXACT_COUNTS")),
    ]

    def decorate(f: F) -> F:
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            eps = kwargs.pop("telemetry_epsilon")
            if kwargs.pop("exact_counts"):
                click.echo(f"panstream: WARNING: {EXACT_COUNTS_WARNING}", err=True)
                kwargs["telemetry"] = TelemetryPolicy.exact_counts(sensitivity)
            else:
                try:
                    kwargs["telemetry"] = TelemetryPolicy(eps, sensitivity)
                except PanstreamError as exc:
                    raise click.BadParameter(str(exc), param_hint="--telemetry-epsilon") from None
            return f(*args, **kwargs)

        out: Any = wrapper
        for option in reversed(options):
            out = option(out)
        return out

    return decorate
