"""Read the published files a report is made from: series files and release JSON.

Only released results are read: a series file (JSON lines or CSV, :func:`panstream.windows.series.read`)
and the JSON that ``panstream release --json`` (or ``release --by ... --json``) prints. A state
file is refused with a message saying which file to give instead: the report never loads a table.
"""

from __future__ import annotations

import json
import os
from typing import Any

from panstream.errors import PanstreamError, SourceError
from panstream.report.page import ReleaseInput, SeriesInput
from panstream.state.format import MAGIC
from panstream.windows.series import read

__all__ = ["load_release", "load_series"]


def _name(path: str) -> str:
    return os.path.basename(path) or path


def load_series(path: str) -> SeriesInput:
    """The records of a series file.

    Raises:
        SourceError: missing or unreadable file, not a series, or no window in it.
    """
    _refuse_state(path)
    try:
        recs = read(path)
    except PanstreamError as exc:  # series.read's StateError, said as an input error
        raise SourceError(f"--series {path}: {exc}") from None
    if not recs:
        raise SourceError(f"--series {path}: no window released yet (the file is empty)")
    return SeriesInput(_name(path), recs)


def load_release(path: str, option: str = "--release") -> ReleaseInput:
    """One release JSON object from ``path`` (the output of ``panstream release --json``).

    Raises:
        SourceError: missing or unreadable file, not JSON, not one object.
    """
    _refuse_state(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError:
        raise SourceError(f"{option} {path}: not a text file; give the output of "
                          "'panstream release --json'") from None
    except OSError as exc:
        raise SourceError(f"{option} {path}: cannot read it: {exc.strerror}") from None
    lines = [ln for ln in text.splitlines() if ln.strip()]
    data: Any
    try:
        data = json.loads(text)
    except ValueError:
        data = None
        if len(lines) > 1:
            try:
                objs = [json.loads(ln) for ln in lines]
            except ValueError:
                objs = []
            if objs:
                msg = (f"{option} {path}: holds {len(objs)} JSON lines; give one release per file "
                       "(a series file goes to --series)")
                raise SourceError(msg) from None
        raise SourceError(f"{option} {path}: not JSON; give the output of "
                          "'panstream release --json' (or --by /24 --json for a map)") from None
    if not isinstance(data, dict):
        raise SourceError(f"{option} {path}: not a JSON object; give the output of "
                          "'panstream release --json'")
    return ReleaseInput(_name(path), data)


def _refuse_state(path: str) -> None:
    try:
        with open(path, "rb") as f:
            head = f.read(len(MAGIC))
    except OSError:
        return  # the reader says what is wrong
    if head == MAGIC:
        msg = (f"{path} is a panstream state, not a published result: the report reads only "
               "released files (a series, or 'panstream release --json' output), so it never "
               "touches a table or spends budget")
        raise SourceError(msg)
