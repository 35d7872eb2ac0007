"""W3C extended logs (``w3c:FIELD``): CloudFront, IIS.

A ``#Fields:`` header names the columns (tab- or space-separated); every ``#`` line is read in
order, so a new header (rotated files concatenated) applies from its line on
(:class:`panstream.inputs.extractors.Columns`). The time is the ``date`` and ``time`` fields,
UTC; before any header the published layout is assumed (CloudFront: ``date`` and ``time`` are
columns 1 and 2), so a Kafka topic of header-less lines still reads.
"""

from __future__ import annotations

import numpy as np

from panstream.inputs.extractors import SPAN, Columns
from panstream.inputs.formats.base import Detection, Format, LogFormat, Sample, TimeRule, column_arg, register
from panstream.inputs.scan import windows
from panstream.inputs.timestamps import NAT, read_iso


def published_layout(cols: list[Columns], defaults: tuple[int, ...]) -> None:
    """Before any header, the columns of the published layout (kept once a header names them)."""
    for c, default in zip(cols, defaults, strict=False):
        if c.col is None and not c.seen_first:
            c.col = default  # no header yet: the published layout
            c.seen_first = True


class W3cTimes:
    """The ``date`` and ``time`` fields of one W3C stream (its header kept across chunks)."""

    def __init__(self, fmt: Format) -> None:
        big = 1 << 30
        self._cols = [Columns("w3c", "date", big), Columns("w3c", "time", big)]

    def __call__(self, b: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        published_layout(self._cols, (1, 2))
        date = self._cols[0].locate(b, starts, ends)
        tm = self._cols[1].locate(b, starts, ends)
        out = np.full(starts.size, NAT)
        rows = np.flatnonzero((date.state == SPAN) & (tm.state == SPAN)
                              & (date.te - date.ts == 10) & (tm.te - tm.ts >= 8))
        if rows.size == 0:
            return out
        dw = windows(b, date.ts[rows], 10)
        tw = windows(b, tm.ts[rows], 8)
        w = np.zeros((rows.size, 20), dtype=np.uint8)
        try:
            w[:, :10] = dw
            w[:, 10] = ord("T")
            w[:, 11:19] = tw
            # an optional fraction of the time field is dropped: the value ends after the seconds
            secs, good = read_iso(w)
            out[rows[good]] = secs[good].astype("datetime64[s]")
            secs.fill(0)
        finally:
            dw.fill(0)
            tw.fill(0)
            w.fill(0)
        return out


def _detect(s: Sample) -> Detection | None:
    w3c = next((ln for ln in s.lines if ln[:8].lower() == b"#fields:"), None)
    if w3c is None:
        return None
    names = w3c[8:].decode("utf-8", "replace").split()
    name = "c-ip" if "c-ip" in names else next((n for n in names if n.endswith("-ip")), "c-ip")
    return s.found(f"w3c:{name}")


register(LogFormat(
    "w3c", "W3C extended log (CloudFront, IIS)", order=70, help="w3c:FIELD",
    aliases={"w3c": "w3c:c-ip", "cloudfront": "w3c:c-ip", "iis": "w3c:c-ip"},
    shown_aliases=("cloudfront",), arg="required",
    parse_arg=lambda spec, arg: column_arg(spec, "w3c", arg),
    extractor=lambda fmt, n: Columns("w3c", fmt.arg, n), detect=_detect, rank=100,
    fix=lambda kind, arg: (f"-f w3c:c-ip (CloudFront, IIS) or the #Fields: name of the client "
                           f"(not {arg!r})"),
    where_help="w3c:FIELD", hash_headers=True,
    time=TimeRule(reader=W3cTimes, note="W3C: date and time")))
