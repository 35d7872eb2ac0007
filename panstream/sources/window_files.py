"""The open windows' state files of ``panstream ingest --window``, and the memory they may take.

Every open window is checkpointed to its own state file beside the ``--state`` path, named after
the window's start (``web.pst`` -> ``web.20261124T000000Z.pst``), each under its own lock
(:class:`panstream.sources.windowed.WindowedIngestor` owns when they are written and removed).
This module only names them, finds them again, and reads the series' window ids back into starts;
:func:`memory_available` is what a schedule's open tables are measured against before any line is
read.
"""

from __future__ import annotations

import calendar
import glob
import re
import time

from panstream.errors import ConfigurationError
from panstream.windows.eventtime import label

__all__ = ["memory_available", "start_of_id", "window_files", "window_path", "window_stem"]

_STAMP = re.compile(r"\.(\d{8}T\d{6}Z)\.pst$")


def _stamp(start: int) -> str:
    return label(start).replace("-", "").replace(":", "")


def memory_available() -> int | None:
    """Bytes of memory this machine can give a process without swapping (Linux's
    ``MemAvailable``), ``None`` where it cannot be read (the check is then skipped)."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def window_stem(state_path: str) -> str:
    """The common stem of the open windows' state files (``web.pst`` -> ``web``)."""
    return state_path[:-4] if state_path.endswith(".pst") else state_path


def window_path(state_path: str, start: int) -> str:
    """The state file of the open window starting at ``start`` (``web.pst`` ->
    ``web.20261124T000000Z.pst``).

    >>> window_path("/s/web.pst", 1795478400)
    '/s/web.20261124T000000Z.pst'
    """
    return f"{window_stem(state_path)}.{_stamp(start)}.pst"


def window_files(state_path: str) -> dict[int, str]:
    """The open-window state files beside ``state_path``, by window start."""
    stem = window_stem(state_path) + "."
    out = {}
    for p in glob.glob(glob.escape(stem) + "*.pst"):
        m = _STAMP.fullmatch(p[len(stem) - 1:])
        if m:
            out[calendar.timegm(time.strptime(m.group(1), "%Y%m%dT%H%M%SZ"))] = p
    return out


def start_of_id(window: str) -> int:
    """The start of the window a series record names (its ISO 8601 UTC id).

    >>> start_of_id("2026-11-24T00:00:00Z")
    1795478400

    Raises:
        ConfigurationError: the id is not such a time.
    """
    try:
        return calendar.timegm(time.strptime(window, "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        msg = f"the series holds a window id {window!r} that is not an ISO 8601 UTC time"
        raise ConfigurationError(msg) from None
