"""``--sketch-hash``: hash a sketch's items as Presto's Java ``add`` (murmur3) or as Presto SQL."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from panstream.cli.common import env, given
from panstream.errors import ConfigurationError, StateError, UniverseError
from panstream.universe import Universe

F = TypeVar("F", bound=Callable[..., Any])

CHOICES = ("murmur3", "presto-sql", "xxhash64-varchar", "xxhash64-bigint")
HELP = ("With --estimator sketch: how items are hashed (murmur3: Presto's Java add; "
        "presto-sql: its SQL; docs/sketch.md).")


def sketch_hash_option() -> Callable[[F], F]:
    """The ``--sketch-hash`` option (``ingest``, ``kafka``)."""
    return click.option("--sketch-hash", "sketch_hash", type=click.Choice(CHOICES),
                        default=None, help=HELP, **env("SKETCH_HASH"))


def with_sketch_hash(ctx: click.Context, estimator: str, universe: Universe | None,
                     sketch_hash: str | None) -> Universe | None:
    """The universe to use: ``universe`` (or the default grid) hashed by ``--sketch-hash``.

    Raises:
        click.UsageError: --sketch-hash without the sketch, or disagreeing with the grid's spec.
    """
    if sketch_hash is None:
        return universe
    if estimator != "sketch":
        raise click.UsageError("--sketch-hash concerns the sketch: add --estimator sketch")
    from panstream.estimators.sketch.sfm import SketchGrid

    if universe is not None and not isinstance(universe, SketchGrid):
        return universe  # the caller refuses a sketch over a non-grid universe
    grid = universe if universe is not None else SketchGrid()
    try:
        out = SketchGrid.parse_spec(f"sketch:{grid.buckets}x{grid.levels}:{grid.items}:"
                                    f"{sketch_hash}")
    except (ConfigurationError, UniverseError) as exc:
        raise click.UsageError(str(exc)) from None
    if given(ctx, "universe") and grid.spec.count(":") == 3 and out.hashing != grid.hashing:
        raise click.UsageError(f"--universe {grid.spec} hashes with {grid.hashing}, "
                               f"--sketch-hash with {out.hashing}: give one of them")
    return out


def check_resumed_hash(ctx: click.Context, state: str, est: Any) -> None:
    """Refuse to resume a sketch state with a different ``--sketch-hash`` than it was built with.

    Raises:
        StateError: the hashes differ (the sketch would mix two hashes of one item).
    """
    asked = ctx.params.get("sketch_hash")
    if asked is None or getattr(est, "kind", None) != "sketch":
        return
    from panstream.estimators.sketch.hashing import resolve

    want = resolve(asked, est.items)
    if want != est.hashing:
        msg = (f"{state} hashes its items with {est.hashing}, not {want}: one sketch cannot mix "
               "two hashes of an item (it would count it twice); start a new state for "
               f"--sketch-hash {asked}")
        raise StateError(msg)
