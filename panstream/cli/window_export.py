"""``ingest --window --export-presto-dir DIR``: each closed window's sketch in Presto's format.

With the sketch family, every closed window's table is written to ``DIR/<window start>.sfm``
(e.g. ``DIR/20261124T000000Z.sfm``), Presto's ``SfmSketch`` serialization, durably (written to a
temporary file, fsynced, renamed), after the window's record is durable in the series and before
the table is wiped (:class:`panstream.sources.windowed.WindowedIngestor`, commit order step 3). Daily files
then merge into a week, or across sites, with ``panstream merge-sketches``.

Exporting publishes the window's table: an exported window's sketch is ``epsilon_state``-DP by
itself, and the window's release is computed from that same table (post-processing plus fresh
noise), so the window's total stays ``epsilon_state + epsilon_release`` (printed as
``epsilon_window``); a person in W windows is covered at W x that. An existing file is never
overwritten (a second sketch of one window is a second publication of the same people).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import click

from panstream.errors import StateError


def export_path(directory: str, start: int) -> str:
    """``DIR/<start as YYYYmmddTHHMMSSZ>.sfm``, e.g. ``days/20261124T000000Z.sfm``."""
    return os.path.join(directory, time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(start)) + ".sfm")


def check_export_dir(directory: str, estimator: str) -> None:
    """Refuse ``--export-presto-dir`` with a family that has no Presto sketch; create DIR.

    Raises:
        click.UsageError: not the sketch family.
        StateError: DIR cannot be created.
    """
    if estimator != "sketch":
        raise click.UsageError("--export-presto-dir exports Presto sketches: it needs "
                               "--estimator sketch (and a sketch:BxP:items universe)")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        msg = f"cannot create --export-presto-dir {directory}: {exc.strerror or exc}"
        raise StateError(msg) from None


def presto_exporter(directory: str,
                    notice: Callable[[str], None]) -> Callable[[int, Any], bool]:
    """The ``on_export`` of :class:`panstream.sources.windowed.WindowedIngestor` writing Presto files."""
    from panstream.state.sketch_params import write_export

    def export(start: int, est: Any) -> bool:
        path = export_path(directory, start)
        if os.path.lexists(path):
            notice(f"{path} exists (a sketch of this window already published): not overwritten, "
                   "this window is not exported again")
            return False
        write_export(path, est)  # its hash beside it first (panstream.state.sketch_params)
        return True

    return export
