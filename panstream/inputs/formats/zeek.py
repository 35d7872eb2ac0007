"""Zeek TSV logs (``zeek:FIELD``): ``conn.log``, ``http.log``, ...

``#separator`` and ``#fields`` name the separator and the columns; every ``#`` line is read in
order, so a new header (Zeek's ``#close`` then ``#fields``) applies from its line on
(:class:`panstream.inputs.extractors.Columns`). The time is the ``ts`` field (epoch seconds);
before any header the published layout is assumed (``ts`` is column 1, tab-separated).
"""

from __future__ import annotations

import numpy as np

from panstream.inputs.extractors import Columns
from panstream.inputs.formats.base import Detection, Format, LogFormat, Sample, TimeRule, column_arg, register
from panstream.inputs.formats.w3c import published_layout
from panstream.inputs.timestamps import EPOCH_WIDTH, read_epoch, spans_times


class ZeekTimes:
    """The ``ts`` field of one Zeek stream (its header kept across chunks)."""

    def __init__(self, fmt: Format) -> None:
        self._cols = [Columns("zeek", "ts", 1 << 30)]

    def __call__(self, b: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        published_layout(self._cols, (1,))
        ts = self._cols[0]
        if ts.sep is None:
            ts.sep = 9
        return spans_times(b, starts, ts.locate(b, starts, ends), read_epoch, EPOCH_WIDTH)


def _detect(s: Sample) -> Detection | None:
    zeek = next((ln for ln in s.lines if ln.startswith(b"#fields")), None)
    if zeek is None and not s.first.startswith(b"#separator"):
        return None
    names = (zeek or b"").decode("utf-8", "replace").split()[1:]
    name = "id.orig_h" if "id.orig_h" in names or not names else next(
        (n for n in names if n.endswith("_h")), "id.orig_h")
    return s.found(f"zeek:{name}")


register(LogFormat(
    "zeek", "Zeek log", order=80, help="zeek:FIELD", aliases={"zeek": "zeek:id.orig_h"},
    arg="required", parse_arg=lambda spec, arg: column_arg(spec, "zeek", arg),
    extractor=lambda fmt, n: Columns("zeek", fmt.arg, n), detect=_detect, rank=200,
    fix=lambda kind, arg: f"-f zeek:id.orig_h (client) or zeek:id.resp_h (not {arg!r})",
    where_help="zeek:FIELD", hash_headers=True,
    time=TimeRule(reader=ZeekTimes, note="Zeek: ts")))
