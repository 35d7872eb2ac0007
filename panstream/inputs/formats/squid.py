"""Squid's native access.log (``squid``).

``TIME.MS ELAPSED CLIENT CODE/STATUS BYTES METHOD URL ...``, the elapsed time right-aligned (runs
of blanks); also through syslog (``squid[PID]: TIME.MS ...``). The client is field 3, read with a
regular expression (:class:`panstream.inputs.extractors.Regex`); ``-f auto`` names it when most
first lines match (and suggests it when some do). The time is field 1, epoch seconds with
milliseconds (UTC); through syslog, the value after the first ``: ``.
"""

from __future__ import annotations

import re

import numpy as np

from panstream.inputs.extractors import SPAN, Regex, Spans
from panstream.inputs.formats.base import LogFormat, TimeRule, register
from panstream.inputs.timestamps import EPOCH_WIDTH, NAT, read_epoch, spans_times

PATTERN = r"(?:^|: )\d{9,11}\.\d{3}\s+-?\d+\s+(?P<ip>\S+)\s+[A-Z_]+/\d{3}\s"
_PATTERN_RE = re.compile(PATTERN.encode())


def squid_times(b: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Squid's native access.log: field 1, epoch seconds with milliseconds (UTC); through syslog
    (``... squid[PID]: 1795514400.123 ...``) the value after the first ``: ``."""
    n = starts.size
    out = np.full(n, NAT)
    if n == 0:
        return out
    vs = starts.copy()
    head = b[np.minimum(starts, max(b.size - 1, 0))]
    wrapped = ((head - np.uint8(48)) > 9) & (ends > starts)
    if bool(wrapped.any()):
        colon = np.flatnonzero(b[:-1] == ord(":")) if b.size > 1 else np.zeros(0, dtype=np.intp)
        colon = colon[b[colon + 1] == ord(" ")]
        r = np.flatnonzero(wrapped)
        k = np.searchsorted(colon, starts[r])
        has = k < colon.size
        pos = colon[np.minimum(k, max(colon.size - 1, 0))] if colon.size else starts[r]
        has &= pos < ends[r]
        vs[r] = np.where(has, pos + 2, ends[r])
    sp = Spans.new(n)
    rows = np.flatnonzero(vs < ends)
    sp.state[rows] = SPAN
    sp.ts[rows], sp.te[rows] = vs[rows], ends[rows]
    return spans_times(b, starts, sp, read_epoch, EPOCH_WIDTH)


register(LogFormat(
    "squid", "Squid native access log", order=170, help="squid", aliases={"squid-native": "squid"},
    extractor=lambda fmt, n: Regex(PATTERN, n),
    detect=lambda s: s.found("squid") if 2 * s.hits(_PATTERN_RE) > len(s.lines) else None,
    rank=520, candidate=lambda s: s.hits(_PATTERN_RE) > 0, where="field 3", where_help="squid",
    time=TimeRule(reader=lambda fmt: squid_times, note="squid: epoch seconds")))
