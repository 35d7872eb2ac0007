"""Syslog-wrapped auth logs: OpenSSH's logins (``sshd``) and PAM's failures (``pam``).

``sshd``: ``Failed``/``Accepted ... for [invalid user ]NAME from ADDR port N`` (OpenSSH's
auth.log wording); ``-f auto`` names it on one such line (an auth.log is mostly other lines) or
when most lines are sshd's. ``pam``: pam_unix/pam_sss ``authentication failure; ... rhost=ADDR``
(an empty ``rhost=`` is a local login: malformed); named on any such line, after sshd (whose
auth.log carries pam_unix lines too) and after the request logs. Both are read with a regular
expression (:class:`panstream.inputs.extractors.Regex`) and most of their lines name no client.

Their time is syslog's, opening the line (after an optional ``<PRI>`` and RFC 5424's version
``1 ``): RFC 3164's ``Dec 10 06:55:46`` (local, no year: the declared range's year, or the one
nearest the clock) or an RFC 5424 / ISO 8601 stamp (with a zone it is exact; without one, local).
"""

from __future__ import annotations

import re

import numpy as np

from panstream.inputs.extractors import Regex
from panstream.inputs.formats.base import Detection, LogFormat, Sample, TimeRule, register
from panstream.inputs.timestamps import ISO_WIDTH, digits, head_window, hms, iso_parts, month_of
from panstream.inputs.zones import days_in_month

#: The sshd lines that carry a login attempt's source address (OpenSSH's auth.log wording):
#: ``Failed password for [invalid user ]NAME from ADDR port N ssh2``, ``Accepted publickey for ...``.
SSHD_PATTERN = (r"sshd(?:-session)?\[\d+\]: (?:Failed|Accepted) \S+ for (?:invalid user )?.*? "
                r"from (?P<ip>\S+) port \d+")

#: pam_unix/pam_sss "authentication failure; ... rhost=ADDR [user=NAME]".
PAM_PATTERN = r"\brhost=(?P<ip>[^\s;]+)"

_SSHD = re.compile(SSHD_PATTERN.encode())
_PAM = re.compile(PAM_PATTERN.encode())


def syslog_parts(b: np.ndarray, starts: np.ndarray, ends: np.ndarray
                 ) -> dict[str, np.ndarray]:
    """The syslog time opening each line (after an optional ``<PRI>`` and RFC 5424's version
    ``1 ``): RFC 3164's ``Mmm dd HH:MM:SS`` (the day blank-padded or not; no year, no zone), or
    an RFC 5424 / ISO 8601 time (``2026-11-26T10:00:00.123+01:00``; one without a zone is local).

    Returns arrays per line: ``bsd`` (an RFC 3164 time: ``month``, ``day``, ``sod``), ``iso``
    (an ISO time: ``secs``, already UTC where ``zoned``, else local)."""
    n = starts.size
    w = head_window(b, starts, ends, ISO_WIDTH + 8)
    width = w.shape[1]
    try:
        skip = np.zeros(n, dtype=np.int64)
        pri = w[:, 0] == ord("<")
        if bool(pri.any()):  # "<34>" or "<34>1 "
            r = np.flatnonzero(pri)
            gt = np.argmax(w[r, :6] == ord(">"), axis=1)
            okp = (gt >= 2) & (w[r, gt] == ord(">"))
            after = gt + 1
            v1 = (w[r, np.minimum(after, width - 1)] == ord("1")) & \
                 (w[r, np.minimum(after + 1, width - 1)] == ord(" "))
            skip[r] = np.where(okp, after + 2 * v1, 0)
        c = skip[:, None] + np.arange(ISO_WIDTH)[None, :]
        v = w[np.arange(n)[:, None], np.minimum(c, width - 1)]
        iso = v[:, 4] == ord("-")
        out: dict[str, np.ndarray] = {}
        month, ok = month_of(v, 0)
        ok &= ~iso & (v[:, 3] == ord(" ")) & (v[:, 6] == ord(" ")) & (v[:, 15] == ord(" "))
        d1 = v[:, 4]
        pad = d1 == ord(" ")
        day, okd = digits(v, [4, 5])
        d2, okd2 = digits(v, [5])
        day = np.where(pad, d2, day)
        ok &= np.where(pad, okd2, okd) & (day >= 1) & (day <= days_in_month(
            np.full(n, 2000, dtype=np.int64), month))  # Feb 29 exists in some year
        sod, okt = hms(v, 7)
        ok &= okt
        out["bsd"], out["month"], out["day"], out["sod"] = ok, month, day, sod
        secs = np.zeros(n, dtype=np.int64)
        good = np.zeros(n, dtype=bool)
        zoned = np.zeros(n, dtype=bool)
        r = np.flatnonzero(iso)
        if r.size:
            vi = v[r]
            blank = np.cumsum(vi[:, 19:] == ord(" "), axis=1) > 0  # the stamp ends at a blank
            vi[:, 19:][blank] = 0
            s_, g_, z_ = iso_parts(vi)
            vi.fill(0)
            secs[r], good[r], zoned[r] = s_, g_, z_
            s_.fill(0)
        out["iso"], out["secs"], out["zoned"] = good, secs, zoned
        v.fill(0)
        d2.fill(0)
    finally:
        w.fill(0)
    return out


def _detect_sshd(s: Sample) -> Detection | None:
    if s.hits(_SSHD) or s.most(lambda ln: b" sshd[" in ln or b" sshd-session[" in ln):
        return s.found("sshd")
    return None


def _detect_pam(s: Sample) -> Detection | None:
    return s.found("pam") if s.hits(_PAM) else None


def _syslog_time(name: str) -> TimeRule:
    return TimeRule(local=syslog_parts, yearless=True,
                    what=f"{name}'s syslog time (Dec 10 06:55:46)",
                    whose="the zone of the host that wrote it", note="sshd/pam: the syslog time")


register(
    LogFormat(
        "sshd", "sshd auth log", order=140, help="sshd",
        aliases={"auth": "sshd", "openssh": "sshd", "syslog-sshd": "sshd"},
        extractor=lambda fmt, n: Regex(SSHD_PATTERN, n), detect=_detect_sshd, rank=500,
        sparse=True, where_help="sshd", time=_syslog_time("sshd")),
    LogFormat(
        "pam", "PAM auth log (rhost=)", order=150, help="pam",
        extractor=lambda fmt, n: Regex(PAM_PATTERN, n), detect=_detect_pam, rank=530,
        sparse=True, where_help="pam", time=_syslog_time("pam")),
)
