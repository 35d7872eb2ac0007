"""Event time for the logs that write the local wall clock: HAProxy's accept date, Apache's and
nginx's error logs, syslog (sshd, pam), plus Squid's epoch and the CLF of vhost and xff.

A local time with no zone read as UTC would be off by the host's offset in every window, silently.
So these formats are refused unless the operator names the zone (``--time-zone``), and syslog's
``Dec 10 06:55:46``, which has no year either, takes its year from a public rule: the replay's
declared range, or the clock. The vectors are the first lines of real third-party logs
(``../shared/reallogs``, SOURCES.md), each checked to the second in UTC, in a fixed offset, and in
an IANA zone whose offset changes (Europe/Berlin: +1 in winter, +2 in summer); then each whole
file is checked against Python's own parse, and replayed through ``ingest --window`` with every
line placed."""

from __future__ import annotations

import calendar
import datetime as dt
import json
import os
import re
import subprocess
import sys
import zoneinfo
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from logsamples import reallogs

from panstream.errors import ConfigurationError
from panstream.windows.eventtime import (
    LOCAL_FORMATS,
    TIMED_FORMATS,
    TimeReader,
    check_time,
    has_time,
    needs_zone,
    seconds,
    times,
)
from panstream.windows.zones import parse_zone, years_by_clock, years_by_range

H = 3600
DAY = 86400


def _real(name: str) -> bytes:
    return (reallogs() / name).read_bytes()


def _at(y: int, mo: int, d: int, h: int, mi: int, s: int) -> int:
    """The wall-clock reading as if it were UTC (what a zone's offset is taken from)."""
    return calendar.timegm((y, mo, d, h, mi, s))


def _utc(data: bytes, fmt: str, zone: str, span: tuple[int, int] | None = None,
         clock: Callable[[], float] | None = None) -> list[int | None]:
    secs, valid = seconds(times(data, fmt, TimeReader(fmt, zone, span, clock)))
    return [int(s) if v else None for s, v in zip(secs.tolist(), valid.tolist(), strict=True)]


# ---------------------------------------------------------------- the first lines, to the second
#: (format, real file, the declared range of a replay of it, first lines' local readings). The
#: range decides a syslog time's year, and the years whose zone offsets are looked up (public:
#: never read off the lines); a time years outside it is off by the zone's change at most, which
#: places it in no window either way.
FIRST_LINES = {
    # Jul 30 09:03:52 localhost haproxy[32450]: 1.2.3.4:38862 [30/Jul/2018:09:03:52.726] ...
    # (the syslog tag's '[' comes first: the accept date is the '[' after the client's blank)
    "haproxy": ("beats_haproxy.log", (_at(2018, 7, 26, 0, 0, 0), _at(2021, 6, 24, 0, 0, 0)),
                [_at(2018, 7, 30, 9, 3, 52), _at(2021, 5, 22, 2, 22, 22),
                 _at(2021, 6, 22, 12, 2, 53)]),
    # [Sun Dec 04 04:47:44 2005] [notice] workerEnv.init() ok ...
    "apache-error": ("loghub_Apache_2k.log", (_at(2005, 12, 4, 0, 0, 0), _at(2005, 12, 6, 0, 0, 0)),
                     [_at(2005, 12, 4, 4, 47, 44), _at(2005, 12, 4, 4, 47, 44),
                      _at(2005, 12, 4, 4, 51, 8)]),
    # Dec 10 06:55:46 LabSZ sshd[24200]: reverse mapping checking getaddrinfo ... (no year: the
    # declared range says 2026)
    "sshd": ("loghub_OpenSSH_2k.log", (_at(2026, 12, 10, 0, 0, 0), _at(2026, 12, 11, 0, 0, 0)),
             [_at(2026, 12, 10, 6, 55, 46)] * 3),
    # Jun 14 15:16:01 combo sshd(pam_unix)[19939]: authentication failure; ... rhost=218.188.2.4
    "pam": ("loghub_Linux_2k.log", (_at(2005, 6, 14, 0, 0, 0), _at(2005, 7, 28, 0, 0, 0)),
            [_at(2005, 6, 14, 15, 16, 1), _at(2005, 6, 14, 15, 16, 2),
             _at(2005, 6, 14, 15, 16, 2)]),
}

#: Europe/Berlin's offset at each file's first lines: summer (+2) for July, May, June; winter (+1)
#: for December.
BERLIN = {"haproxy": [2 * H, 2 * H, 2 * H], "apache-error": [H, H, H], "sshd": [H, H, H],
          "pam": [2 * H, 2 * H, 2 * H]}


@pytest.mark.parametrize("fmt", sorted(FIRST_LINES))
def test_the_first_lines_of_each_real_log_to_the_second(fmt: str) -> None:
    name, span, local = FIRST_LINES[fmt]
    head = b"\n".join(_real(name).split(b"\n")[:3]) + b"\n"
    # UTC: the reading itself
    assert _utc(head, fmt, "UTC", span) == local
    # a fixed offset: 10:00 at -05:00 is 15:00 UTC
    assert _utc(head, fmt, "-05:00", span) == [t + 5 * H for t in local]
    assert _utc(head, fmt, "+0530", span) == [t - 5 * H - 30 * 60 for t in local]
    # an IANA zone: the offset of that date (CEST in summer, CET in winter)
    assert _utc(head, fmt, "Europe/Berlin", span) == [t - o for t, o in zip(local, BERLIN[fmt],
                                                                            strict=True)]
    # America/New_York: EDT (-4) in summer, EST (-5) in winter
    ny = [4 * H if o == 2 * H else 5 * H for o in BERLIN[fmt]]
    assert _utc(head, fmt, "America/New_York", span) == [t + o for t, o in zip(local, ny,
                                                                              strict=True)]


def test_nginx_error_squid_vhost_and_xff_lines() -> None:
    """The formats with no real sample here, in their published shapes."""
    nginx = (b"2026/11/26 10:00:00 [error] 1234#0: *5 open() \"/x\" failed (2: No such file), "
             b"client: 10.0.0.1, server: example.com, request: \"GET /x HTTP/1.1\"\n"
             b"2026/07/01 23:59:59 [warn] 1#0: *6 ..., client: 10.0.0.2, server: a\n")
    assert _utc(nginx, "nginx-error", "Europe/Berlin") == [_at(2026, 11, 26, 9, 0, 0),
                                                           _at(2026, 7, 1, 21, 59, 59)]
    # Squid's native log: epoch seconds (UTC: no zone needed), through syslog too
    squid = (b"1795514400.123    150 10.0.0.1 TCP_MISS/200 1234 GET http://a/ - DIRECT/1.2.3.4 -\n"
             b"Nov 24 10:00:01 proxy squid[42]: 1795514401.999 7 10.0.0.2 TCP_HIT/200 5 GET "
             b"http://b/ - NONE/- -\n")
    assert not needs_zone("squid")
    assert seconds(times(squid, "squid"))[0].tolist() == [1795514400, 1795514401]
    # vhost and xff: the CLF time with its own offset
    vhost = b'www.example.com:443 10.0.0.1 - - [24/Nov/2026:11:00:00 +0100] "GET / HTTP/1.1" 200 5\n'
    xff = (b'10.0.0.9 - - [24/Nov/2026:10:00:00 +0000] "GET / HTTP/1.1" 200 5 "-" "curl" '
           b'"203.0.113.7, 10.0.0.9"\n')
    assert seconds(times(vhost, "vhost"))[0].tolist() == [_at(2026, 11, 24, 10, 0, 0)]
    assert seconds(times(xff, "xff"))[0].tolist() == [_at(2026, 11, 24, 10, 0, 0)]


def test_apache_error_with_a_fraction_and_a_wrong_weekday() -> None:
    """Apache 2.4 writes microseconds; the weekday must agree with the date (a line whose
    weekday disagrees is no date this reader trusts: untimed, never a wrong window)."""
    data = (b"[Thu Nov 26 10:00:00.123456 2026] [core:error] [pid 1] [client 10.0.0.1:5] x\n"
            b"[Fri Nov 26 10:00:00 2026] [core:error] [pid 1] [client 10.0.0.2:5] x\n"
            b"[Thu Nov 26 10:00:00. 2026] [core:error] [pid 1] [client 10.0.0.3:5] x\n")
    assert _utc(data, "apache-error", "UTC") == [_at(2026, 11, 26, 10, 0, 0), None, None]


def test_syslog_iso_stamps_carry_their_own_zone() -> None:
    """RFC 5424 / rsyslog's ISO stamps: with an offset the time is exact whatever --time-zone
    says; without one it is local like RFC 3164's. A <PRI> and version are skipped."""
    data = (b"2026-11-26T10:00:00.123+01:00 host sshd[1]: Failed password for root from "
            b"10.0.0.1 port 22 ssh2\n"
            b"<38>1 2026-11-26T10:00:00Z host sshd 1 - - Accepted password for a from 10.0.0.2 "
            b"port 22 ssh2\n"
            b"2026-11-26T10:00:00 host sshd[1]: Failed password for b from 10.0.0.3 port 22 ssh2\n"
            b"Nov  6 10:00:00 host sshd[1]: Failed password for c from 10.0.0.4 port 22 ssh2\n")
    span = (_at(2026, 11, 1, 0, 0, 0), _at(2026, 12, 1, 0, 0, 0))
    for zone, off in (("UTC", 0), ("America/New_York", -5 * H)):
        assert _utc(data, "sshd", zone, span) == [
            _at(2026, 11, 26, 9, 0, 0), _at(2026, 11, 26, 10, 0, 0),
            _at(2026, 11, 26, 10, 0, 0) - off, _at(2026, 11, 6, 10, 0, 0) - off]


# ------------------------------------------------------------------------ daylight saving time
def test_a_skipped_hour_shifts_forward_and_a_repeated_hour_takes_the_earlier_instant() -> None:
    """Berlin, 2026: 29 March 02:00 -> 03:00 (02:30 does not exist: shifted forward to 03:30
    CEST = 01:30 UTC); 25 October 03:00 -> 02:00 (02:30 happens twice: the earlier, 02:30 CEST =
    00:30 UTC). Python's fold=0 (PEP 495) agrees. (A replay's rule: its declared range; live,
    the clock decides the repeated hour, below.)"""
    data = (b"2026/03/29 01:59:59 [error] x, client: 10.0.0.1, server: a\n"
            b"2026/03/29 02:30:00 [error] x, client: 10.0.0.1, server: a\n"
            b"2026/03/29 03:00:00 [error] x, client: 10.0.0.1, server: a\n"
            b"2026/10/25 02:30:00 [error] x, client: 10.0.0.1, server: a\n"
            b"2026/10/25 03:00:00 [error] x, client: 10.0.0.1, server: a\n")
    got = _utc(data, "nginx-error", "Europe/Berlin",
               (_at(2026, 3, 1, 0, 0, 0), _at(2026, 11, 1, 0, 0, 0)))
    assert got == [_at(2026, 3, 29, 0, 59, 59), _at(2026, 3, 29, 1, 30, 0),
                   _at(2026, 3, 29, 1, 0, 0), _at(2026, 10, 25, 0, 30, 0),
                   _at(2026, 10, 25, 2, 0, 0)]
    berlin = zoneinfo.ZoneInfo("Europe/Berlin")
    oracle = [int(dt.datetime(*d, tzinfo=berlin).timestamp()) for d in (
        (2026, 3, 29, 1, 59, 59), (2026, 3, 29, 2, 30), (2026, 3, 29, 3), (2026, 10, 25, 2, 30),
        (2026, 10, 25, 3))]
    assert got == oracle


def test_live_a_repeated_hour_takes_the_pass_the_clock_has_reached() -> None:
    """Read live (a clock, no declared range), Berlin's repeated 02:xx of 25 October 2026 takes
    the pass the clock is in. At 01:30 UTC (the second pass: 02:30 CET) a sshd line stamped
    ``Oct 25 02:10:00`` was written at 01:10 UTC, 20 minutes ago; fold=0 would put it at 00:10
    UTC, in a window the clock closed an hour ago, so the whole second pass of every autumn was
    dropped (or, with a lateness over an hour, put an hour early). The rule: the later instant
    unless it is more than 5 minutes ahead of the clock. At 00:59:50 UTC (the first pass)
    ``Oct 25 02:59:45`` is 00:59:45 UTC, as fold=0 says. A replay (a declared range, no clock
    to ask) keeps fold=0. The haproxy accept date follows the same rule."""
    change = _at(2026, 10, 25, 1, 0, 0)  # 03:00 CEST -> 02:00 CET
    second = float(change + 1800)
    assert _utc(_bsd(["Oct 25 02:10:00", "Oct 25 02:59:59", "Oct 25 03:00:00"]), "sshd",
                "Europe/Berlin", clock=lambda: second) == [
        change + 600,  # the second pass: 20 minutes ago
        change - 1,  # 01:59:59 UTC is half an hour ahead: the first pass, 00:59:59 UTC
        change + 3600]  # 03:00 CET happens once
    first = float(change - 10)
    assert _utc(_bsd(["Oct 25 02:59:45", "Oct 25 02:20:00", "Oct 25 02:00:05"]), "sshd",
                "Europe/Berlin", clock=lambda: first) == [
        change - 15, change - 2400,  # 01:20 UTC has not come: the first pass
        change + 5]  # 01:00:05 is 15 s ahead (a writer's clock a little fast): the second pass
    ha = (b"Oct 25 02:10:00 lb haproxy[1]: 10.0.0.1:4000 [25/Oct/2026:02:10:00.120] fe be/s "
          b'0/0/0/1/1 200 5 - - ---- 1/1/0/0/0 0/0 "GET / HTTP/1.1"\n')
    assert _utc(ha, "haproxy", "Europe/Berlin", clock=lambda: second) == [change + 600]
    span = (_at(2026, 10, 19, 0, 0, 0), _at(2026, 10, 26, 0, 0, 0))
    assert _utc(_bsd(["Oct 25 02:10:00"]), "sshd", "Europe/Berlin", span) == [change - 3000]
    # the zone's rule directly: both passes, the tie to the earlier, a skipped time unchanged
    z = parse_zone("Europe/Berlin")
    local = np.array([_at(2026, 10, 25, 2, 30, 0), _at(2026, 3, 29, 2, 30, 0)], dtype=np.int64)
    assert z.to_utc(local, 2026, 2026).tolist() == [change - 1800, _at(2026, 3, 29, 1, 30, 0)]
    assert z.to_utc(local.copy(), 2026, 2026, near=change + 1800).tolist() == [
        change + 1800, _at(2026, 3, 29, 1, 30, 0)]
    # at 01:00 UTC, 01:30 UTC is 30 minutes ahead: not written yet, the first pass
    assert z.to_utc(local.copy(), 2026, 2026, near=change).tolist()[0] == change - 1800


@pytest.mark.parametrize("name", ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe",
                                  "America/Sao_Paulo", "Asia/Kolkata", "Pacific/Apia"])
def test_the_zone_agrees_with_python_fold_0_everywhere(name: str) -> None:
    """Random local times over 2010-2021 and every minute around each change (Lord Howe moves by
    30 minutes, Apia skipped a whole day in 2011): vectorized = Python's fold=0."""
    z = parse_zone(name)
    tz = zoneinfo.ZoneInfo(name)
    rng = np.random.default_rng(11)
    lo = _at(2010, 1, 1, 0, 0, 0)
    bounds, _ = z.table(2010, 2021)
    local = np.concatenate([rng.integers(lo, lo + 12 * 365 * DAY, 3000),
                            (bounds[:, None] + np.arange(-3 * H, 3 * H, 60)[None, :]).ravel()])
    got = z.to_utc(local.astype(np.int64), 2010, 2021)
    want = [int(dt.datetime.fromtimestamp(int(t), dt.timezone.utc).replace(tzinfo=tz).timestamp())
            for t in local.tolist()]
    assert got.tolist() == want


def test_zone_spellings_and_a_zone_that_does_not_exist() -> None:
    assert [parse_zone(s).fixed for s in ("UTC", "Z", "+02:00", "-0530", "+2", "UTC+01:00")] == \
        [0, 0, 7200, -19800, 7200, 3600]
    with pytest.raises(ConfigurationError, match="Europe/Berlin"):
        parse_zone("Mars/Olympus_Mons")
    with pytest.raises(ConfigurationError, match="at most"):
        parse_zone("+15:00")


# --------------------------------------------------------------------------------- the year
def _bsd(lines: list[str]) -> bytes:
    return "".join(f"{ln} host sshd[1]: Failed password for x from 10.0.0.1 port 22 ssh2\n"
                   for ln in lines).encode()


def test_a_replay_takes_the_year_that_puts_the_time_in_its_range() -> None:
    """A declared week across New Year: Dec 31 is 2026's, Jan 1 is 2027's. A time the range does
    not hold in any year (Feb 29 in 2027; a June day) is outside: dropped like any out-of-range
    line (its time is put just before the range)."""
    first, stop = _at(2026, 12, 28, 0, 0, 0), _at(2027, 1, 4, 0, 0, 0)
    got = _utc(_bsd(["Dec 31 23:59:59", "Jan  1 00:00:01", "Jun 15 12:00:00", "Feb 29 12:00:00"]),
               "sshd", "UTC", (first, stop))
    assert got == [_at(2026, 12, 31, 23, 59, 59), _at(2027, 1, 1, 0, 0, 1), first - 1, first - 1]
    # with a zone the range is still in UTC: Jan 1 00:30 in Berlin is Dec 31 23:30 UTC, 2026
    got = _utc(_bsd(["Jan  1 00:30:00"]), "sshd", "Europe/Berlin",
               (_at(2026, 12, 31, 0, 0, 0), _at(2027, 1, 1, 0, 0, 0)))
    assert got == [_at(2026, 12, 31, 23, 30, 0)]
    # a leap day in a leap year's range
    assert _utc(_bsd(["Feb 29 12:00:00"]), "pam", "UTC",
                (_at(2028, 2, 1, 0, 0, 0), _at(2028, 3, 1, 0, 0, 0))) == [_at(2028, 2, 29, 12, 0, 0)]


def test_live_takes_the_year_nearest_to_the_clock_across_new_year() -> None:
    """Read at 00:00:03 on 1 January 2027, a line written at 23:59:58 on 31 December is 2026's;
    read at 23:59:59 on 31 December by a clock a little behind the writer's, a 1 January line is
    2027's."""
    jan1 = float(_at(2027, 1, 1, 0, 0, 3))
    assert _utc(_bsd(["Dec 31 23:59:58", "Jan  1 00:00:01"]), "sshd", "UTC",
                clock=lambda: jan1) == [_at(2026, 12, 31, 23, 59, 58), _at(2027, 1, 1, 0, 0, 1)]
    dec31 = float(_at(2026, 12, 31, 23, 59, 59))
    assert _utc(_bsd(["Jan  1 00:00:05", "Dec 31 23:59:50"]), "sshd", "UTC",
                clock=lambda: dec31) == [_at(2027, 1, 1, 0, 0, 5), _at(2026, 12, 31, 23, 59, 50)]


def test_the_year_rules_directly() -> None:
    utc = parse_zone("UTC")
    m, d, sod = np.array([12, 1]), np.array([31, 1]), np.array([86399, 1])
    assert years_by_range(m, d, sod, utc, _at(2026, 12, 1, 0, 0, 0),
                          _at(2027, 2, 1, 0, 0, 0)).tolist() == [_at(2026, 12, 31, 23, 59, 59),
                                                                  _at(2027, 1, 1, 0, 0, 1)]
    assert years_by_clock(m, d, sod, utc, _at(2027, 6, 1, 0, 0, 0)).tolist() == [
        _at(2026, 12, 31, 23, 59, 59), _at(2027, 1, 1, 0, 0, 1)]


# ---------------------------------------------------------------------------- the refusals
@pytest.mark.parametrize("fmt", LOCAL_FORMATS)
def test_a_local_time_without_a_zone_is_refused_with_one_line(fmt: str) -> None:
    assert has_time(fmt) and needs_zone(fmt) and fmt in TIMED_FORMATS
    with pytest.raises(ConfigurationError) as exc:
        TimeReader(fmt)
    msg = str(exc.value)
    assert "has no zone: give --time-zone UTC" in msg and "\n" not in msg


def test_a_yearless_time_over_more_than_a_year_is_refused() -> None:
    span = (_at(2026, 1, 1, 0, 0, 0), _at(2027, 1, 2, 0, 0, 0))
    with pytest.raises(ConfigurationError, match="more than 365 days"):
        check_time("sshd", "UTC", span)
    check_time("sshd", "UTC", (span[0], span[0] + 365 * DAY))  # exactly a year: one fit
    check_time("haproxy", "UTC", span)  # HAProxy's accept date has its year


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PANSTREAM_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _panstream(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "panstream", *args], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, env=_env(), timeout=300, check=False)


def test_the_cli_refuses_haproxy_without_time_zone() -> None:
    log = str(reallogs() / "beats_haproxy.log")
    r = _panstream("ingest", "-u", "ipv4:1.2.3.0/24", "--window", "1d", "--from", "2018-07-30",
                   "--to", "2018-07-31", "--release-epsilon", "1", "-f", "haproxy", log)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        "panstream: error: haproxy's accept date ([30/Jul/2018:09:03:52.726]) has no zone: give "
        "--time-zone UTC, or the proxy host's zone such as Europe/Berlin (or an offset such as "
        "+02:00)")
    bad = _panstream("ingest", "-u", "ipv4:1.2.3.0/24", "--window", "1d", "--from", "2018-07-30",
                     "--to", "2018-07-31", "--release-epsilon", "1", "-f", "haproxy",
                     "--time-zone", "Berlin", log)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert "'Berlin' is not a zone this system knows" in bad.stderr


# ------------------------------------------------- whole real files: Python's parse, then ingest
def _oracle(fmt: str, line: str, zone: str, year: int | None) -> int:
    """Python's own reading of one line (strptime, then zoneinfo's fold=0)."""
    if fmt == "haproxy":
        m = re.search(r" \[(\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d)", line)
        assert m is not None
        t = dt.datetime.strptime(m.group(1), "%d/%b/%Y:%H:%M:%S")
    elif fmt == "apache-error":
        t = dt.datetime.strptime(line[1:25], "%a %b %d %H:%M:%S %Y")
    else:
        t = dt.datetime.strptime(f"{year} {line[:15]}", "%Y %b %d %H:%M:%S")
    return int(t.replace(tzinfo=zoneinfo.ZoneInfo(zone)).timestamp())


#: (format, file, --window, --from, --to, universe, lines, windows, lines per window in UTC+0)
REPLAYS = [
    ("haproxy", "beats_haproxy.log", "7d", "2018-07-26", "2021-06-24", "ipv4:1.2.3.0/24", 10, 152,
     None),
    ("apache-error", "loghub_Apache_2k.log", "1d", "2005-12-04", "2005-12-06",
     "ipv4:0.0.0.0/16", 2000, 2, {"2005-12-04": 1051, "2005-12-05": 949}),
    ("sshd", "loghub_OpenSSH_2k.log", "1h", "2026-12-10", "2026-12-11", "ipv4:173.234.0.0/16",
     2000, 24, None),
    ("pam", "loghub_Linux_2k.log", "1d", "2005-06-14", "2005-07-28", "ipv4:218.188.0.0/16", 2000,
     44, {"2005-06-14": 3, "2005-07-27": 99}),
]


@pytest.mark.parametrize("case", REPLAYS, ids=[c[0] for c in REPLAYS])
def test_each_real_log_replayed_every_line_placed(case: tuple, tmp_path: Path) -> None:  # type: ignore[type-arg]
    """Every line of the file gets the time Python reads (Europe/Berlin), and a windowed replay of
    the declared range places every one of them: with exact counts (--exact-counts), no line is
    late (out of range) and none untimed, in any window."""
    fmt, name, window, frm, to, universe, lines, windows, per_day = case
    data = _real(name)
    text = data.decode().splitlines()
    assert len(text) == lines  # SOURCES.md's line counts
    first, stop = calendar.timegm(time_tuple(frm)), calendar.timegm(time_tuple(to))
    year = int(frm[:4])
    got = _utc(data, fmt, "Europe/Berlin", (first, stop))
    assert got == [_oracle(fmt, ln, "Europe/Berlin", year) for ln in text]
    assert all(first <= t < stop for t in got if t is not None)
    if per_day:  # the local days' line counts, in UTC
        days = np.array(_utc(data, fmt, "UTC", (first, stop))) // DAY * DAY
        for day, n in per_day.items():
            assert int((days == calendar.timegm(time_tuple(day))).sum()) == n
    series = tmp_path / "s.jsonl"
    r = _panstream("ingest", "-u", universe, "--window", window, "--from", frm, "--to", to,
                   "--release-epsilon", "1", "-f", fmt, "--time-zone", "Europe/Berlin",
                   "--exact-counts", "--series", str(series), str(reallogs() / name))
    assert r.returncode == 0, r.stderr
    recs = [json.loads(ln) for ln in series.read_text().splitlines()]
    assert len(recs) == windows
    assert sum(x["late_records"] for x in recs) == 0
    assert sum(x["untimed_records"] for x in recs) == 0


def time_tuple(day: str) -> tuple[int, int, int, int, int, int]:
    y, m, d = (int(x) for x in day.split("-"))
    return (y, m, d, 0, 0, 0)


# ------------------------------------------------------------------- the Kafka windowed member
def test_the_kafka_router_places_sshd_lines_by_the_zone_and_the_clock_year() -> None:
    """``kafka --window --time-zone Europe/Berlin``: a syslog line's local ``Nov 24 11:30:00`` is
    10:30 UTC, placed in the 10:00 window the clock (10:40, lateness 10 min) has open; a line of
    09:20 local (08:20 UTC, closed) is dropped. The year is the clock's (live)."""
    from kafka import TopicPartition

    from panstream.sources.kafka.metrics import Metrics
    from panstream.sources.kafka.route import RouteConfig
    from panstream.sources.kafka.windows import WindowRouteStage, WindowSpec, decode_record
    from panstream.state.slices import SliceLayout
    from panstream.universe import Universe

    layout = SliceLayout(Universe.parse("ipv4:10.9.0.0/24"), 2)
    spec = WindowSpec(3600, 600, 1.0, time_zone="Europe/Berlin")
    ten = _at(2026, 11, 24, 10, 0, 0)
    router = WindowRouteStage(RouteConfig({}, {}, ["logs"], layout, "g-wcells", "lines", "sshd"),
                              Metrics(), spec, wall_clock=lambda: float(ten + 2400))
    buf = bytearray(_bsd(["Nov 24 11:30:00", "Nov 24 09:20:00"]).replace(b"10.0.0.1", b"10.9.0.7"))
    out: list[tuple[int, bytes]] = []
    router._partition(TopicPartition("logs", 0), buf, "sshd", out)
    assert [decode_record(v)[:2] for _, v in out] == [("D", ten)]


def test_kafka_window_refuses_a_local_format_without_time_zone(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from panstream.cli.main import cli

    res = CliRunner().invoke(cli, ["kafka", "-b", "127.0.0.1:1", "-t", "logs", "-g", "g", "-u",
                                   "ipv4:10.9.0.0/24", "--epsilon", "1", "-f", "haproxy",
                                   "--window", "1h", "--release-epsilon", "1", "--state-dir",
                                   str(tmp_path)])
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert "has no zone: give --time-zone UTC" in res.output
    res = CliRunner().invoke(cli, ["kafka", "-b", "127.0.0.1:1", "-t", "logs", "-g", "g", "-u",
                                   "ipv4:10.9.0.0/24", "--epsilon", "1", "--time-zone", "UTC",
                                   "--state-dir", str(tmp_path)])
    assert res.exit_code == 2 and "--time-zone go(es) with --window" in res.output


# ---------------------------------------------------------------------- what the reader keeps
def test_the_zone_tables_follow_the_public_span_never_the_lines() -> None:
    """The attack: feed a reader lines stamped in unusual years (1999, 2040) and look at what it
    keeps. It keeps the zone's offset table of the declared range's years (public), the same with
    or without those lines; the odd lines are placed nowhere (outside the range), not made exact
    by a table computed for them."""
    span = (_at(2026, 11, 16, 0, 0, 0), _at(2026, 11, 23, 0, 0, 0))
    target = (b"1999/07/01 10:00:00 [error] x, client: 10.0.0.66, server: a\n"
              b"2040/07/01 10:00:00 [error] x, client: 10.0.0.66, server: a\n")
    crowd = b"2026/11/17 10:00:00 [error] x, client: 10.0.0.1, server: a\n"
    kept = []
    for data in (crowd, crowd + target):
        zone = parse_zone("Europe/Berlin")
        got = seconds(times(data, "nginx-error", TimeReader("nginx-error", zone, span)))[0]
        assert got[0] == _at(2026, 11, 17, 9, 0, 0)
        assert all(not span[0] <= t < span[1] for t in got[1:].tolist())
        kept.append(sorted(zone._tables))
    assert kept[0] == kept[1] == [(2025, 2027)]


def test_a_time_zone_a_format_does_not_use_gets_a_notice() -> None:
    from panstream.cli.window_options import zone_notice

    utc = parse_zone("UTC")
    assert zone_notice("clf", utc) == ("--time-zone UTC is not used: clf lines carry their own "
                                       "zone (or are UTC)")
    assert zone_notice("haproxy", utc) is None and zone_notice("auto", utc) is None
    assert zone_notice("clf", None) is None
    assert "processing time" in (zone_notice("haproxy", utc, "processing") or "")


def test_live_sshd_windows_across_new_year() -> None:
    """``tail -F /var/log/auth.log | panstream ingest -f sshd --window 1h --lateness 10m
    --time-zone UTC --from 2026-12-31T23:00Z``: read at 00:00:30 on 1 January, three clients'
    ``Dec 31 23:59:58`` lines are last year's and go into the 23:00 window (open until 00:10);
    ``Jan  1 00:00:10`` goes into the new year's first hour. Had the year been the clock's, the
    three lines would sit a year ahead, in no open window."""
    from panstream import estimators
    from panstream.ingest import Input
    from panstream.inputs.parser import Format
    from panstream.sources.windowed import WindowedIngestor
    from panstream.universe import Universe
    from panstream.windows import WindowSchedule

    new_year = _at(2027, 1, 1, 0, 0, 0)
    now = [float(new_year + 30)]
    lines = b"".join(f"{stamp} host sshd[1]: Failed password for x from 10.0.0.{k} port 22 "
                     f"ssh2\n".encode() for k, stamp in ((1, "Dec 31 23:59:58"),
                                                        (2, "Dec 31 23:59:58"),
                                                        (3, "Dec 31 23:59:59"),
                                                        (4, "Jan  1 00:00:10")))
    chunks = [(0, lines), (660, b"")]  # then the clock passes 00:10: the 23:00 window closes

    def feed() -> object:
        for step, d in chunks:
            now[0] += step
            yield memoryview(d)

    class Reader:
        def __iter__(self) -> object:
            return feed()

    small = Universe.parse("ipv4:10.0.0.0/28")  # 16 cells at epsilon 16: errors far below 1
    recs: list[dict] = []  # type: ignore[type-arg]
    ing = WindowedIngestor(lambda: estimators.new("density", small, 16.0, budget=16.0), small,
                           Format("sshd"), 3600, release_epsilon=16.0, time_mode="event",
                           schedule=WindowSchedule.live(3600, 600, first=new_year - 3600),
                           close_at_end=True, on_close=recs.append, time_zone="UTC",
                           wall_clock=lambda: now[0])
    ing.run([Input("stdin", Reader())])  # type: ignore[list-item]
    assert [r["window"] for r in recs] == ["2026-12-31T23:00:00Z", "2027-01-01T00:00:00Z"]
    # |error| > 1 needs Laplace(1/16) noise beyond 1 (e^-16) or a flipped bit (q ~ 1e-7)
    assert np.allclose([r["estimate"] for r in recs], [3, 1], atol=1.0)
