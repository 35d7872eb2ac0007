"""Local-time logs through the real broker: ``panstream kafka --window --time-zone``.

HAProxy's accept date and syslog's ``Oct 25 02:30:00`` are the wall-clock time of the host that
wrote them, with no zone (and syslog's has no year). On Kafka a window is open on the **wall
clock** (from its start to its end + lateness), so a line is placed only if the time read off it,
made UTC with ``--time-zone`` and given the clock's year, lands in a window the clock has open.
These tests send such lines through the Tansu broker the suite starts and read the series:

* **sshd, Europe/Berlin, across the autumn change.** Four 2-second windows on the public grid
  around 01:00:00 UTC on 25 October 2026, when Berlin's clocks fall back from 03:00 CEST to 02:00
  CET. Every line's stamp is a *repeated* local time (``02:59:5x`` before the change, ``02:00:0x``
  after it), built from the real OpenSSH sample's ``Failed``/``Accepted`` lines (host, pid, user,
  port and the ``ssh2`` tail as written by LabSZ; its other lines, which carry no login, mixed in
  with addresses that must never be counted). The member runs on a **shifted wall clock** (below)
  so that its clock crosses the change during the test. Each window's release is checked against
  its exact truth; the windows after the change get their lines only if the second pass of
  ``02:xx`` is read as CET (with Python's fold=0 they would sit an hour early, in closed windows:
  the bug this file found, see panstream.windows.zones.Zone.to_utc).
* **haproxy, a fixed offset (-07:00), on the real clock**: three windows, one empty, lines built
  from the real beats HAProxy sample (syslog prefix and accept date both local). Its first
  window has 700 lines, under the 1,000 of the routing stage's first sample: the held records
  reached their slices after the window closed and the window came out empty, until the sample
  was also judged at the end of its earliest window (the second bug this file found; unit test in
  tests/kafka/test_windows_units.py).
* **The loud failure**: a local-time format on Kafka without ``--time-zone`` stops with one line
  (exit 2, no traceback), before reading when ``-f`` names it, at the first lines with ``-f auto``;
  the group commits nothing, so a restart with ``--time-zone`` reads every line.

**The shifted clock.** The members are separate processes on the machine's clock; no real clock
is near a DST change today. ``SHIFTED`` starts the unchanged CLI with ``time.time`` replaced by
``real + shift`` (a constant, so every interval the Kafka client, the checkpoints and the
schedule measure is real; panstream reads the wall clock only through ``time.time``). libfaketime
would do the same from outside; it is not installed.

**The statistics.** The tables run at state epsilon 30 (``p = 1 - 2^-32``, ``q = 2^-32``): a
cell's bit disagrees with "seen" with probability 2^-32, and three or more such cells among the
7 windows x 4,096 cells of this file happen with probability below 1e-16; each changes an
estimate by 1. So a window's error is its Laplace noise (scale 1/epsilon_out) plus at most 2:
``|estimate - truth| <= ln(K / 1e-7) / epsilon_out + 2`` over K windows fails with probability
at most 1e-7. Fixed trials, no retries; the file's false-failure rate is below 2e-7.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import re
import signal
import subprocess
import sys
import time
import zoneinfo
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _kafka_helpers import Broker, committed_offsets, kill_left
from logsamples import reallogs
from test_broker import start, wait_for
from test_routed import member_argv, send_round_robin

from panstream.errors import ConfigurationError
from panstream.state.stores import DirectoryStore
from panstream.universe import Universe
from panstream.windows.eventtime import check_time, label
from panstream.windows.series import read

pytestmark = pytest.mark.kafka

EPS_OUT = 1.0
UNIVERSE = Universe.parse("ipv4:10.9.0.0/20")  # 4,096 clients
NOISE_POOL = range(3000, 4096)  # clients only in lines that must never be counted

#: ``python -c SHIFTED SHIFT kafka ...``: the panstream CLI with its wall clock moved by SHIFT
#: seconds (time.time is replaced before panstream is imported, so every default clock binds it).
SHIFTED = ("import runpy, sys, time\n"
           "shift = float(sys.argv.pop(1))\n"
           "real = time.time\n"
           "time.time = lambda: real() + shift\n"
           "runpy.run_module('panstream', run_name='__main__', alter_sys=True)\n")


def _bound(windows: int) -> float:
    """Laplace tail over ``windows`` releases at false-failure 1e-7, plus 2 flipped cells."""
    return math.log(windows / 1e-7) / EPS_OUT + 2


def _check_series(state: Path, group: str, starts: list[int], truth: list[int], size: int,
                  lateness: int) -> list[dict[str, Any]]:
    """The declared windows, in order, once each, each within the noise of its exact truth,
    released at end + lateness; nothing of a closed window left, one ledger entry a window."""
    recs = read(state / f"{group}-series.jsonl")
    assert [r["window"] for r in recs] == [label(s) for s in starts]
    bound = _bound(len(starts))
    for r, t in zip(recs, truth, strict=True):
        assert abs(r["estimate"] - t) <= bound, (r["window"], r["estimate"], t)
        assert r["end"] - r["start"] == size and r["released_at"] == r["end"] + lateness
    assert DirectoryStore(state / "windows").keys() == []
    for name in sorted(p.name for p in (state / "windows" / "ledgers").iterdir()):
        rep = DirectoryStore(state / "windows" / "ledgers" / name).ledger_replay()
        assert rep.ledger is not None and len(rep.ledger.entries) == 1
    return recs


def _clients(rng: np.random.Generator, d: int) -> list[str]:
    """``d`` distinct clients, each seen once or twice, shuffled."""
    if not d:
        return []
    c = rng.choice(NOISE_POOL.start, d, replace=False)
    seq = np.concatenate([c, rng.choice(c, d)])
    return [UNIVERSE.item_of(int(x)) for x in rng.permutation(seq)]


def _run_windows(kafka_broker: Broker, topic: str, group: str, state: Path, logs: Path,
                 argv_extra: list[str], starts: list[int], size: int, lateness: int,
                 lines_of: Callable[[int, int], list[str]], shift: float = 0.0) -> None:
    """One member on ``starts`` (wall clock moved by ``shift``); window k's lines
    (``lines_of(k, start)``) sent 0.3 s after it opens on that clock, 50 lines a message, round
    robin over 4 partitions; then wait for every window in the series and stop the member."""
    argv = member_argv(kafka_broker, topic, group, UNIVERSE.spec, state, "--epsilon", "30",
                       "--value-format", "lines", "--slices", "4", "--window", f"{size}s",
                       "--lateness", f"{lateness}s", "--release-epsilon", str(EPS_OUT),
                       "--from", str(starts[0]), "--to", str(starts[-1] + size), *argv_extra)
    if shift:
        assert argv[1:3] == ["-m", "panstream"]
        argv = [sys.executable, "-c", SHIFTED, repr(shift), *argv[3:]]
    member = start(argv, logs)
    series = state / f"{group}-series.jsonl"
    hw: dict[int, int] = {}
    try:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, acks="all",
                                 linger_ms=5)
        try:
            for k, s0 in enumerate(starts):
                time.sleep(max(0.0, s0 - shift + 0.3 - time.time()))
                assert time.time() + shift < s0 + size, "the producer fell behind the clock"
                lines = lines_of(k, s0)
                msgs = ["\n".join(lines[i:i + 50]).encode() for i in range(0, len(lines), 50)]
                hw = send_round_robin(producer, topic, msgs, 4, hw)
        finally:
            producer.close()
        wait_for(lambda: series.exists() and len(read(series)) >= len(starts),
                 starts[-1] + size + lateness + 20 - (time.time() + shift),
                 "every window in the series", [member])
        member.send_signal(signal.SIGTERM)
        assert member.wait(timeout=60) == 0, logs.read_text()[-3000:]
    finally:
        kill_left(member)
    assert "Traceback" not in logs.read_text(errors="replace")


# ------------------------------------------------------------------ (a) sshd across Berlin's DST
FALL_BACK = 1792890000  # 2026-10-25T01:00:00Z: Berlin 03:00 CEST -> 02:00 CET
BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")
W_SSH, L_SSH = 2, 3
SSH_TRUTH = [300, 120, 450, 200]  # windows at FALL_BACK - 8, - 4, + 0, + 4

_STAMP = re.compile(r"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d ")
_IPV4 = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")


def sshd_templates() -> tuple[list[str], list[str]]:
    """The real OpenSSH sample's lines without their stamp, as ``{ip}`` templates: the login
    lines ``-f sshd`` counts (``Failed``/``Accepted ... from ADDR port N ssh2``) and the other
    lines that name an address (``Received disconnect from``, ``pam_unix ... rhost=``, ...)."""
    logins, others = [], []
    for line in (reallogs() / "loghub_OpenSSH_2k.log").read_text().splitlines():
        m = _STAMP.match(line)
        if m is None or len(_IPV4.findall(line)) != 1:
            continue
        body = _IPV4.sub("{ip}", line[m.end():])
        (logins if re.search(r"sshd\[\d+\]: (Failed|Accepted) ", body) else others).append(body)
    assert len(logins) > 400 and len(others) > 400  # 523 logins, 1,211 others
    return logins, others


def syslog_stamp(t: int, zone: dt.tzinfo) -> str:
    """RFC 3164's local ``Mmm dd HH:MM:SS`` (day blank-padded) of UNIX second ``t``."""
    d = dt.datetime.fromtimestamp(t, zone)
    return f"{d:%b} {d.day:2d} {d:%H:%M:%S}"


def test_sshd_lines_across_berlin_s_autumn_change_land_in_their_windows(
        kafka_broker: Broker, topic_factory: Callable[..., str], tmp_path: Path) -> None:
    """Windows 00:59:56, 00:59:58 (CEST, stamped ``02:59:5x``), 01:00:00 and 01:00:02 UTC (CET,
    stamped ``02:00:0x``: the same local times the host wrote an hour earlier). Each window's
    lines are its truth's clients; every window also gets 100 lines stamped in the window three
    before it (closed on the clock: never counted) and 100 real non-login lines; every window
    must come out at its truth."""
    logins, others = sshd_templates()
    rng = np.random.default_rng(1025)
    starts = [FALL_BACK + W_SSH * k for k in (-2, -1, 0, 1)]
    assert all(s % W_SSH == 0 for s in starts)  # the public grid
    sent: dict[int, set[str]] = {}

    def lines_of(k: int, s0: int) -> list[str]:
        ips = _clients(rng, SSH_TRUTH[k])
        sent[k] = set(ips)
        out = [syslog_stamp(int(t), BERLIN) + " " + logins[int(j)].format(ip=ip)
               for ip, t, j in zip(ips, rng.integers(s0, s0 + W_SSH, len(ips)),
                                   rng.integers(0, len(logins), len(ips)), strict=True)]
        late = s0 - 3 * W_SSH + 1  # closed at s0 - 2W + L < now; before --from for k < 3
        out += [syslog_stamp(late, BERLIN) + " " + logins[int(j)].format(
            ip=UNIVERSE.item_of(int(c)))
            for c, j in zip(rng.choice(np.array(NOISE_POOL), 100),
                            rng.integers(0, len(logins), 100), strict=True)]
        out += [syslog_stamp(s0 + 1, BERLIN) + " " + others[int(j)].format(
            ip=UNIVERSE.item_of(int(c)))
            for c, j in zip(rng.choice(np.array(NOISE_POOL), 100),
                            rng.integers(0, len(others), 100), strict=True)]
        return [out[i] for i in rng.permutation(len(out))]

    # the stamps around the change repeat: 02:59:5x before it, 02:00:0x after it
    assert syslog_stamp(starts[1], BERLIN) == "Oct 25 02:59:58"
    assert syslog_stamp(starts[2], BERLIN) == "Oct 25 02:00:00"
    # the member's clock reaches the first window 10 s after it starts (it joins in ~4 s; lines
    # are read as long as their window is open: until its end + lateness, 15 s after the start)
    shift = float(starts[0] - 10) - time.time()
    state = tmp_path / "state"
    _run_windows(kafka_broker, topic_factory(4), "g-berlin", state, tmp_path / "m.log",
                 ["-f", "sshd", "--time-zone", "Europe/Berlin"], starts, W_SSH, L_SSH,
                 lines_of, shift)
    assert [len(sent[k]) for k in range(4)] == SSH_TRUTH
    _check_series(state, "g-berlin", starts, SSH_TRUTH, W_SSH, L_SSH)


# ------------------------------------------------------------------- (b) haproxy, fixed offset
W_HA, L_HA = 4, 3
HA_TRUTH = [350, 0, 500]
MINUS7 = dt.timezone(dt.timedelta(hours=-7))

_HA = re.compile(r"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d (\S+ haproxy\[\d+\]: )(\S+):(\d+) "
                 r"\[[^\]]+\](.*)$")


def haproxy_lines(rng: np.random.Generator, ips: list[str], ts: np.ndarray) -> list[str]:
    """Real beats HAProxy lines with each client and time replaced: the syslog prefix and the
    accept date (with milliseconds) in the proxy host's local time, UTC-7."""
    templates = [m.groups() for line in (reallogs() / "beats_haproxy.log").read_text()
                 .splitlines() if (m := _HA.match(line))]
    assert len(templates) == 10
    out = []
    for ip, t, j in zip(ips, ts.tolist(), rng.integers(0, len(templates), len(ips)), strict=True):
        tag, _, port, rest = templates[int(j)]
        d = dt.datetime.fromtimestamp(int(t), MINUS7)
        accept = f"{d:%d/%b/%Y:%H:%M:%S}.{int(rng.integers(1000)):03d}"
        out.append(f"{syslog_stamp(int(t), MINUS7)} {tag}{ip}:{port} [{accept}]{rest}")
    return out


def test_haproxy_lines_with_a_fixed_offset_on_the_clock(
        kafka_broker: Broker, topic_factory: Callable[..., str], tmp_path: Path) -> None:
    """``--time-zone -07:00`` on the real clock: three windows (the second without traffic),
    each window's lines stamped in the proxy's local time; 100 lines a window stamped in a
    closed window. Read as UTC the stamps would be 7 hours in the past (in no open window): every
    window coming out at its truth says the offset was applied, to each line."""
    rng = np.random.default_rng(2018)
    first = (math.ceil(time.time() / W_HA) + 2) * W_HA  # 4..8 s to join the group first
    starts = [first + W_HA * k for k in range(len(HA_TRUTH))]

    def lines_of(k: int, s0: int) -> list[str]:
        ips = _clients(rng, HA_TRUTH[k])
        out = haproxy_lines(rng, ips, rng.integers(s0, s0 + W_HA, len(ips)))
        late = [UNIVERSE.item_of(int(c)) for c in rng.choice(np.array(NOISE_POOL), 100)]
        out += haproxy_lines(rng, late, np.full(100, s0 - 2 * W_HA + 1))
        return [out[i] for i in rng.permutation(len(out))]

    state = tmp_path / "state"
    _run_windows(kafka_broker, topic_factory(4), "g-haproxy", state, tmp_path / "m.log",
                 ["-f", "haproxy", "--time-zone", "-07:00"], starts, W_HA, L_HA, lines_of)
    _check_series(state, "g-haproxy", starts, HA_TRUTH, W_HA, L_HA)


# ------------------------------------------------------------------------ (c) the loud failure
def test_a_local_time_format_without_time_zone_stops_with_one_line(
        kafka_broker: Broker, topic_factory: Callable[..., str], producer: Any, admin: Any,
        tmp_path: Path) -> None:
    """The real OpenSSH sample, as is, on a topic. ``-f sshd`` (or ``-f haproxy``) without
    ``--time-zone``: refused before a line is read; ``-f auto``: the member joins, detects sshd
    in the first lines and stops. Either way exit 2, one ``panstream: error:`` line that names
    the fix, no traceback, and no offset committed: the lines wait for a run with the zone."""
    topic = topic_factory(2)
    real = (reallogs() / "loghub_OpenSSH_2k.log").read_text().splitlines()[:500]
    msgs = ["\n".join(real[i:i + 50]).encode() for i in range(0, len(real), 50)]
    send_round_robin(producer, topic, msgs, 2, {})
    env = {k: v for k, v in os.environ.items() if not k.endswith("TIME_ZONE")}
    cases = (("sshd", "sshd"), ("haproxy", "haproxy"), ("auto", "sshd"))
    runs: dict[str, subprocess.Popen[bytes]] = {}  # the three at once (own groups and states)
    for fmt, _ in cases:
        argv = member_argv(kafka_broker, topic, f"g-nozone-{fmt}", UNIVERSE.spec, tmp_path / fmt,
                           "--epsilon", "1", "--value-format", "lines", "-f", fmt,
                           "--window", "1h", "--release-epsilon", "1")
        runs[fmt] = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        outs = {fmt: proc.communicate(timeout=60) for fmt, proc in runs.items()}
    finally:
        kill_left(*runs.values())
    for fmt, read_as in cases:
        with pytest.raises(ConfigurationError) as refused:
            check_time(read_as)
        says = f"panstream: error: {refused.value}"
        assert "has no zone: give --time-zone UTC" in says
        group = f"g-nozone-{fmt}"
        out, err = (x.decode() for x in outs[fmt])
        assert runs[fmt].returncode == 2, (fmt, err[-2000:])
        assert "Traceback" not in err + out, fmt
        assert [ln for ln in err.splitlines() if "error" in ln.lower()] == [says], (fmt, err)
        assert err.rstrip().splitlines()[-1] == says  # the last word, and the only error
        assert committed_offsets(admin, group, topic) == {}, fmt
        assert not (tmp_path / fmt / f"{group}-series.jsonl").exists()
