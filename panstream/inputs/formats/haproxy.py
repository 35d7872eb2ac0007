"""HAProxy's logs (``haproxy``): the http and tcp log formats, through syslog or on stdout.

The client is ``CLIENT:PORT [ACCEPT_DATE]`` (IPv6 clients are written ``ADDR:PORT`` too: the last
``:PORT`` before `` [`` is the port), read with a regular expression
(:class:`panstream.inputs.extractors.Regex`). ``-f auto`` names it when most first lines match.
The time is the accept date ``[30/Jul/2018:09:03:52.726]``: the proxy host's local time, so a
windowed run needs ``--time-zone``.
"""

from __future__ import annotations

import re

import numpy as np

from panstream.inputs.extractors import Regex
from panstream.inputs.formats.base import Detection, LogFormat, Sample, TimeRule, register
from panstream.inputs.scan import windows
from panstream.inputs.timestamps import (
    digits,
    end_fraction,
    first_per_line,
    hms,
    line_of,
    local_date,
    month_of,
    no_local,
    place,
    wipe,
)

PATTERN = (r"(?:^|\s)(?P<ip>\S+):\d{1,5} \[\d{2}/[A-Za-z]{3}/\d{4}:\d{2}:\d{2}:\d{2}"
           r"(?:\.\d+)?\] ")
_PATTERN = re.compile(PATTERN.encode())


#: ``[30/Jul/2018:09:03:52.726]``: 21 bytes to the seconds, room for a fraction and the ``]``.
_HAPROXY_WIDTH = 32


def haproxy_times(b: np.ndarray, starts: np.ndarray, ends: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """HAProxy's accept date ``CLIENT:PORT [dd/Mmm/yyyy:HH:MM:SS.mmm]`` (the first ``[`` of the
    line, after a blank, that opens such a date: a syslog tag ``haproxy[PID]:`` comes before it):
    ``(local seconds, good)`` per line."""
    n = starts.size
    local, good = no_local(n)
    br = np.flatnonzero(b == ord("["))
    br = br[br > 0]
    br = br[b[br - 1] == ord(" ")]  # not the syslog tag's "haproxy[PID]": no window for it
    if n == 0 or br.size == 0:
        return local, good
    line = line_of(br, ends)
    ok = line < n
    w = windows(b, br, _HAPROXY_WIDTH)
    try:
        inside = (br[:, None] + np.arange(_HAPROXY_WIDTH)[None, :]) >= ends[np.minimum(line, n - 1)][:, None]
        w[inside] = 0
        day, okd = digits(w, [1, 2])
        year, oky = digits(w, [8, 9, 10, 11])
        month, okm = month_of(w, 4)
        sod, okt = hms(w, 13)
        ok &= okd & oky & okm & okt
        ok &= (w[:, 3] == ord("/")) & (w[:, 7] == ord("/")) & (w[:, 12] == ord(":"))
        ok &= end_fraction(w, 21, ord("]"))
        secs, okc = local_date(year, month, day, sod)
        ok &= okc
        rows, k = first_per_line(line, ok)
        place(local, good, rows, secs[k])
        wipe(secs, sod, day, year, month, line, k)
    finally:
        w.fill(0)
    return local, good


def _detect(s: Sample) -> Detection | None:
    return s.found("haproxy") if 2 * s.hits(_PATTERN) > len(s.lines) else None


register(LogFormat(
    "haproxy", "HAProxy log", order=160, help="haproxy",
    extractor=lambda fmt, n: Regex(PATTERN, n), detect=_detect, rank=510,
    candidate=lambda s: s.hits(_PATTERN) > 0, sparse=True, where_help="haproxy",
    time=TimeRule(local=haproxy_times,
                  what="haproxy's accept date ([30/Jul/2018:09:03:52.726])",
                  whose="the proxy host's zone", note="haproxy: the accept date")))
