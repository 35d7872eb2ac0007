"""Web servers' error logs: Apache's (``apache-error``) and nginx's (``nginx-error``).

Apache: ``[client ADDR]`` (2.2) or ``[client ADDR:PORT]`` (2.4); nginx: ``..., client: ADDR,
server: ...``; read with a regular expression (:class:`panstream.inputs.extractors.Regex`); most
lines of an error log name no client. ``-f auto`` names them when most first lines open the
way each writes its lines. The time opens the line: Apache's ``[Thu Nov 26 10:00:00.123456
2026]`` (the weekday must agree with the date), nginx's ``2026/11/26 10:00:00``: the web
server's local time, so a windowed run needs ``--time-zone``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from panstream.inputs.extractors import Regex
from panstream.inputs.formats.base import Detection, LogFormat, Sample, TimeRule, register
from panstream.inputs.timestamps import (
    ISO_DIGITS,
    civil_seconds,
    digits,
    head_window,
    hms,
    local_date,
    month_of,
    no_local,
    place,
    stop_at,
    wipe,
)

APACHE_PATTERN = r"\[client (?P<ip>[^\]\s]+)\]"
NGINX_PATTERN = r", client: (?P<ip>[^,\s]+), server: "

#: Apache's error log line head: ``[Sun Dec 04 04:47:44 2005] [notice]`` (2.2) or
#: ``[Wed Oct 11 14:32:52.123456 2000] [core:error]`` (2.4).
_APACHE_ERROR = re.compile(rb"^\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)? "
                           rb"\d{4}\] \[[\w:]+\] ")
#: nginx's error log line head: ``2024/01/02 03:04:05 [error] 1234#0: ``.
_NGINX_ERROR = re.compile(rb"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d \[[a-z]+\] \d+#\d+: ")


_WEEKDAYS = (b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed")  # 1970-01-01 was a Thursday
_WEEKDAY_CODES = np.array([(d[0] << 16) | (d[1] << 8) | d[2] for d in _WEEKDAYS], dtype=np.int64)
_APACHE_WIDTH = 40


def apache_error_times(b: np.ndarray, starts: np.ndarray, ends: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Apache's error log, ``[Www Mmm dd HH:MM:SS(.ffffff) yyyy]`` opening the line (the weekday
    must agree with the date): ``(local seconds, good)`` per line."""
    n = starts.size
    local, good = no_local(n)
    if n == 0:
        return local, good
    w = head_window(b, starts, ends, _APACHE_WIDTH)
    try:
        ok = (w[:, 0] == ord("[")) & (w[:, 4] == ord(" ")) & (w[:, 8] == ord(" "))
        ok &= w[:, 11] == ord(" ")
        month, okm = month_of(w, 5)
        day, okd = digits(w, [9, 10])
        sod, okt = hms(w, 12)
        ok &= okm & okd & okt
        # the year after the seconds' optional fraction: " yyyy]"
        y0 = np.full(n, 20)
        frac = w[:, 20] == ord(".")
        if bool(frac.any()):
            y0[frac] = stop_at(w[frac], 21)
        ok &= (y0 + 6 <= _APACHE_WIDTH) & ((y0 > 21) | ~frac)
        c = np.minimum(y0, _APACHE_WIDTH - 6)[:, None] + np.arange(6)[None, :]
        yw = w[np.arange(n)[:, None], c]
        year, oky = digits(yw, [1, 2, 3, 4])
        ok &= oky & (yw[:, 0] == ord(" ")) & (yw[:, 5] == ord("]"))
        secs, okc = local_date(year, month, day, sod)
        ok &= okc
        wd = (w[:, 1].astype(np.int64) << 16) | (w[:, 2].astype(np.int64) << 8) | w[:, 3]
        ok &= _WEEKDAY_CODES[np.floor_divide(secs, 86400) % 7] == wd
        place(local, good, ok, secs[ok])
        wipe(yw, secs, sod, day, year, month, wd)
    finally:
        w.fill(0)
    return local, good


#: ``yyyy/mm/dd HH:MM:SS``: the separators' columns and bytes (the digits are ISO 8601's columns).
_NGINX_SEPS = np.array([4, 7, 10, 13, 16])
_NGINX_SEP_VALUES = np.frombuffer(b"// ::", dtype=np.uint8)


def nginx_error_times(b: np.ndarray, starts: np.ndarray, ends: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
    """nginx's error log, ``yyyy/mm/dd HH:MM:SS [level]`` opening the line: ``(local seconds,
    good)`` per line."""
    n = starts.size
    local, good = no_local(n)
    if n == 0:
        return local, good
    w = head_window(b, starts, ends, 20)
    try:
        d8 = w[:, ISO_DIGITS] - np.uint8(48)  # the digits sit in ISO 8601's columns
        ok = (d8 <= 9).all(axis=1) & (w[:, _NGINX_SEPS] == _NGINX_SEP_VALUES).all(axis=1)
        ok &= (w[:, 19] == ord(" ")) | (w[:, 19] == 0)
        d = d8.astype(np.int64)
        secs, okc = civil_seconds(d)
        ok &= okc
        place(local, good, ok, secs[ok])
        wipe(secs, d, d8)
    finally:
        w.fill(0)
    return local, good


_Local = Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def _error_log(name: str, title: str, order: int, pattern: str, head: re.Pattern[bytes],
               rank: int, aliases: dict[str, str], local: _Local, what: str) -> LogFormat:
    def detect(s: Sample) -> Detection | None:
        return s.found(name) if s.most(head.match) else None

    return LogFormat(
        name, title, order=order, help=name, aliases=aliases,
        extractor=lambda fmt, n: Regex(pattern, n), detect=detect, rank=rank, sparse=True,
        where_help=name, time=TimeRule(local=local, what=what, whose="the web server's zone"))


register(
    _error_log("apache-error", "Apache error log", 180, APACHE_PATTERN, _APACHE_ERROR, 540,
               {"apache_error": "apache-error", "error_log": "apache-error"}, apache_error_times,
               "the Apache error log's time ([Thu Nov 26 10:00:00.123456 2026])"),
    _error_log("nginx-error", "nginx error log", 190, NGINX_PATTERN, _NGINX_ERROR, 550,
               {"nginx_error": "nginx-error"}, nginx_error_times,
               "the nginx error log's time (2026/11/26 10:00:00)"),
)
