"""Apache/nginx access logs: common and combined (``clf``), ``vhost_combined`` (``vhost``), and
the client behind proxies in the X-Forwarded-For field (``xff``).

All three carry the request time ``[24/Nov/2026:10:00:00 +0000]`` (any UTC offset): the first
``[`` of the line. ``clf``'s client is the first field, read by the parser's own vectorized line
reader; ``vhost``'s is field 2; ``xff``'s the first hop of the last quoted field, or with trusted
proxies the last hop outside them (:class:`panstream.inputs.extractors.ForwardedFor`).
"""

from __future__ import annotations

import ipaddress
import re

import numpy as np

from panstream.inputs.extractors import ForwardedFor, WhitespaceField
from panstream.inputs.formats.base import (
    CLF_TIME,
    Detection,
    Format,
    LogFormat,
    Sample,
    TimeRule,
    bad_format,
    is_address,
    register,
)
from panstream.inputs.timestamps import NAT, month_of
from panstream.inputs.zones import days_from_civil, days_in_month

#: ``24/Nov/2026:10:00:00 +0000`` is 26 bytes; the ``]`` follows it.
_CLF_LEN = 26
_DIGIT_COLS = np.array([0, 1, 7, 8, 9, 10, 12, 13, 15, 16, 18, 19, 22, 23, 24, 25])
# columns of the 27-byte window that starts at the '[': separators and the closing ']'
_SEP_COLS = np.array([3, 7, 12, 15, 18, 21, 27])
_SEP_VALUES = np.array([ord(c) for c in "//::: ]"], dtype=np.uint8)


def clf_times(b: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """CLF/combined ``[dd/Mon/yyyy:HH:MM:SS +zzzz]``: the first ``[`` of each line."""
    n = starts.size
    out = np.full(n, NAT)
    brackets = np.flatnonzero(b == ord("["))
    if n == 0 or brackets.size == 0:
        return out
    k = np.searchsorted(brackets, starts)
    np.minimum(k, brackets.size - 1, out=k)
    pos = brackets[k]
    ok = (pos >= starts) & (pos + _CLF_LEN + 1 < ends)  # a '[' of this line, its ']' inside it
    rows = np.flatnonzero(ok)
    if rows.size == 0:
        return out
    # one row gather of 27-byte windows (a strided view, no copy until indexed)
    w = np.lib.stride_tricks.sliding_window_view(b, _CLF_LEN + 2)[pos[rows]]
    try:
        d8 = w[:, _DIGIT_COLS + 1] - np.uint8(48)  # uint8: anything below '0' wraps past 9
        good = (d8 <= 9).all(axis=1)
        good &= (w[:, _SEP_COLS] == _SEP_VALUES).all(axis=1)
        sign = w[:, 22]
        good &= (sign == ord("+")) | (sign == ord("-"))
        month, okm = month_of(w, 4)
        good &= okm
        d = d8.astype(np.int64)
        day = d[:, 0] * 10 + d[:, 1]
        year = d[:, 2] * 1000 + d[:, 3] * 100 + d[:, 4] * 10 + d[:, 5]
        hh, mm, ss = d[:, 6] * 10 + d[:, 7], d[:, 8] * 10 + d[:, 9], d[:, 10] * 10 + d[:, 11]
        zh, zm = d[:, 12] * 10 + d[:, 13], d[:, 14] * 10 + d[:, 15]
        good &= (day >= 1) & (day <= days_in_month(year, month)) & (hh < 24) & (mm < 60)
        good &= (ss <= 60) & (zh <= 14) & (zm < 60)
        offset = np.where(sign == ord("-"), -1, 1) * (zh * 3600 + zm * 60)
        secs = days_from_civil(year, month, day) * 86400 + hh * 3600 + mm * 60 + ss - offset
        out[rows[good]] = secs[good].astype("datetime64[s]")
        d.fill(0)
        d8.fill(0)
    finally:
        w.fill(0)
    return out


#: The time of all three: the CLF ``[...]``.
CLF_TIME_RULE = TimeRule(reader=lambda fmt: clf_times, note="CLF: [24/Nov/2026:10:00:00 +0000]")
_SHARED_TIME = TimeRule(reader=lambda fmt: clf_times)  # the note is clf's

_XFF = re.compile(rb'"([^"]*)"\s*$')


def _detect_vhost(s: Sample) -> Detection | None:
    if s.most_fields(lambda f: len(f) > 2 and not is_address(f[0]) and b":" in f[0]
                     and is_address(f[1])):
        return s.found("vhost")
    return None


def _detect_clf(s: Sample) -> Detection | None:
    clf_time = s.most(CLF_TIME.search)
    if not (s.multi and (s.most_fields(lambda f: is_address(f[0]))
                         or (clf_time and any(is_address(f[0]) for f in s.split)))):
        return None

    def has_xff(ln: bytes) -> bool:
        m = _XFF.search(ln)
        return m is not None and is_address(m.group(1).split(b",")[0])

    note = ""
    if s.most(has_xff):
        note = ("its last quoted field holds addresses (X-Forwarded-For?): behind a proxy, "
                "count the clients with -f xff (and --trusted-proxy CIDR)")
    elif not s.most_fields(lambda f: is_address(f[0])):
        note = ("some lines start with no single address (an address list, a name): they are "
                "counted as malformed")
    return s.found("clf", note)


def _trusted_proxies(spec: str, arg: str) -> Format:
    arg = arg.strip()
    for c in arg.split(","):
        try:
            ipaddress.ip_network(c.strip(), strict=False)
        except ValueError:
            raise bad_format(spec, f" ({c.strip()!r} is no trusted-proxy CIDR, e.g. "
                                   "10.0.0.0/8)") from None
    return Format("xff", 0, ",".join(c.strip() for c in arg.split(",")))


register(
    LogFormat(
        "clf", "Apache/nginx common or combined log", order=20, help="clf (combined, common)",
        aliases={"combined": "clf", "common": "clf", "ncsa": "clf", "traefikclf": "clf",
                 "nginx": "clf", "apache": "clf"},
        shown_aliases=("traefikclf",), detect=_detect_clf, rank=700, where="the first field",
        time=CLF_TIME_RULE),
    LogFormat(
        "xff", "X-Forwarded-For", order=100, help="xff[:TRUSTED_CIDR,...]", arg="optional",
        parse_arg=_trusted_proxies, extractor=lambda fmt, n: ForwardedFor(fmt.arg, n),
        fix=lambda kind, arg: ("check the log_format (the client first, X-Forwarded-For the "
                               "last quoted field), or use -f field:N or -f 'regex:...'"),
        time=_SHARED_TIME),
    LogFormat(
        "vhost", "Apache vhost_combined", order=130, help="vhost (vcombined)",
        aliases={"vcombined": "vhost", "vcommon": "vhost"}, field=2,
        extractor=lambda fmt, n: WhitespaceField(fmt.field, n), detect=_detect_vhost, rank=650,
        where="field 2", where_help="vhost", time=_SHARED_TIME),
)
