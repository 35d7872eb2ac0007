"""Telemetry options shared by ``panstream ingest`` and ``panstream kafka``.

By default nothing counts arrivals (:mod:`panstream.release.telemetry`). Two explicit opt-ins, each
announced by a warning line at startup that says what it costs a person with k arrivals:
``--telemetry-epsilon E`` (noisy per-window counts, E per arrival) and ``--exact-counts`` (or
``PANSTREAM_EXACT_COUNTS=1``; exact counts, epsilon = infinity).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import click

from panstream.cli.common import FiniteFloatRange, env
from panstream.errors import PanstreamError
from panstream.release.telemetry import EXACT_COUNTS_WARNING, TelemetryPolicy, noisy_counts_warning

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
                     default=None,
                     help=f"Opt in to noisy counts in the {what}, at this epsilon per ARRIVAL "
                          "(k x it for a person with k arrivals).",
                     **env("TELEMETRY_EPSILON")),
        click.option("--exact-counts", is_flag=True, default=False,
                     help=f"Opt in to exact counts in the {what}: they reveal the stream "
                          "(epsilon = infinity for those counts).",
                     **env("EXACT_COUNTS")),
    ]

    def decorate(f: F) -> F:
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            eps = kwargs.pop("telemetry_epsilon")
            if kwargs.pop("exact_counts"):
                if eps is not None:
                    raise click.UsageError("--exact-counts and --telemetry-epsilon exclude each "
                                           "other: exact or noisy counts, or (default) none")
                click.echo(f"panstream: WARNING: {EXACT_COUNTS_WARNING}", err=True)
                kwargs["telemetry"] = TelemetryPolicy.exact_counts(sensitivity)
            elif eps is not None:
                try:
                    kwargs["telemetry"] = TelemetryPolicy.noisy(eps, sensitivity)
                except PanstreamError as exc:
                    raise click.BadParameter(str(exc), param_hint="--telemetry-epsilon") from None
                click.echo(f"panstream: WARNING: {noisy_counts_warning(eps)}", err=True)
            else:
                kwargs["telemetry"] = TelemetryPolicy.none(sensitivity)
            return f(*args, **kwargs)

        out: Any = wrapper
        for option in reversed(options):
            out = option(out)
        return out

    return decorate
