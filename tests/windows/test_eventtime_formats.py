"""Event time beyond CLF: the ISO 8601 and epoch fields of JSON (Caddy, GCP, Envoy), W3C
(CloudFront), Zeek, ALB and ELB records, read vectorized per chunk.

Every sample comes from :mod:`logsamples` (tests/logsamples.py) (the published shapes) and every time is
checked exactly against the generator's own; a value that is not a time is NaT (an untimed line),
never a wrong window. ``ingest --window 1h`` then windows each family by the records' time."""

from __future__ import annotations

import calendar
import datetime as dt
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from logsamples import GENERATORS, UNIVERSE, generate

from panstream.inputs.parser import detect_format
from panstream.windows.eventtime import TIMED_FORMATS, TimeReader, has_time, seconds, times
from panstream.windows.series import read

LINES = 300
T10 = calendar.timegm((2026, 11, 24, 10, 0, 0))  # the hour of the generators' ISO times
EPOCH0 = 1_795_600_000  # the generators' epoch times start here (Caddy, Zeek)


def _iso_second(i: int) -> int:
    """logsamples._ts(i): 2026-11-24T10:MM:SS.fffZ."""
    return T10 + (i // 60 % 60) * 60 + i % 60


#: The time of the generators' line i, whole seconds (fractions are dropped, never rounded up).
EXPECTED = {
    "caddy": lambda i: EPOCH0 + i // 10,  # "ts": 1795600000.0 + i / 10
    "gcp": _iso_second, "envoy": _iso_second, "alb": _iso_second, "elb": _iso_second,
    "cloudfront": _iso_second,  # date 2026-11-24, time 10:MM:SS
    "zeek": lambda i: EPOCH0 + i,  # ts 1795600000+i.xxxxxx
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_record_time_matches_the_generator(name: str) -> None:
    data = generate(name, lines=LINES, distinct=100).data
    t = times(data, GENERATORS[name][1])
    secs, valid = seconds(t)
    assert secs[valid].tolist() == [EXPECTED[name](i) for i in range(LINES)]
    # the only untimed lines are the header formats' '#' lines
    untimed = [ln for ln, ok in zip(data.split(b"\n"), valid.tolist(), strict=False) if not ok]
    assert all(ln.startswith(b"#") for ln in untimed)


def test_the_iso_times_agree_with_python_across_zones_and_fractions() -> None:
    rng = np.random.default_rng(5)
    ts = rng.integers(-2_000_000_000, 4_000_000_000, 2000)
    zones = ["Z", "z", "+00:00", "+05:30", "-0800", "+14", "-03:30", ""]
    text = []
    for k, t in enumerate(ts.tolist()):
        z = zones[k % len(zones)]
        off = 0 if z in ("Z", "z", "") else (1 if z[0] == "+" else -1) * (
            int(z[1:3]) * 3600 + (int(z[-2:]) * 60 if len(z) > 3 else 0))
        local = dt.datetime.fromtimestamp(t + off, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
        frac = ["", ".5", ".123", ".123456789"][k % 4]
        text.append((local + frac + z, t))
    chunk = b"".join(b'{"timestamp": "%s", "ip": "10.0.0.1"}\n' % s.encode() for s, _ in text)
    got, valid = seconds(times(chunk, "json:ip"))
    assert valid.all()
    assert got.tolist() == [t for _, t in text]


@pytest.mark.parametrize("value", [
    '"2026-02-30T10:00:00Z"',   # no such day
    '"2100-02-29T10:00:00Z"',   # 2100 is not a leap year
    '"2026-13-01T10:00:00Z"',   # month 13
    '"2026-11-24T24:00:00Z"',   # hour 24
    '"2026-11-24T10:00Z"',      # no seconds
    '"2026-11-24"',             # a date is not an instant
    '"2026-11-24T10:00:00+25:00"',  # no such offset
    '"2026-11-24T10:00:00 PST"',  # a zone name, not an offset
    '"yesterday"',
    "null", "true", '""',
    "-5",                       # before 1970 as an epoch: not a log time
    "1795600000000",            # milliseconds (13 digits): not read as seconds
    "1795600000x",
])
def test_a_value_that_is_no_time_is_nat(value: str) -> None:
    line = f'{{"ts": {value}, "request": {{"remote_ip": "10.0.0.1"}}}}\n'.encode()
    assert bool(np.isnat(times(line, "json:request.remote_ip")[0]))


def test_json_epochs_as_numbers_or_strings_and_the_first_time_key_of_a_line() -> None:
    chunk = (b'{"ts":1795600000}\n'
             b'{"ts": "1795600001.9"}\n'
             b'{"time" : 1795600002.25, "ip": "10.0.0.1"}\n'
             b'{"level":"info","ts":1795600003.5,"request":{"ts":1}}\n'
             b'{"@timestamp":"2026-11-24T10:00:00.000Z"}\n'
             b'{"start_time":"2026-11-24T10:00:01Z"}\r\n'
             b'{"ip": "10.0.0.1"}\n'
             b'not json at all\n')
    got, valid = seconds(times(chunk, "json:ip"))
    assert valid.tolist() == [True] * 6 + [False, False]
    assert got[:6].tolist() == [EPOCH0, EPOCH0 + 1, EPOCH0 + 2, EPOCH0 + 3, T10, T10 + 1]


def test_w3c_and_zeek_keep_their_header_across_chunks_and_follow_a_new_one() -> None:
    iis = (b"#Software: Microsoft Internet Information Services 10.0\n"
           b"#Fields: time c-ip cs-method date s-ip\n"   # IIS: another order, blanks
           b"10:00:05 10.0.0.1 GET 2026-11-24 10.1.0.9\n")
    cf = generate("cloudfront", lines=10, distinct=5).data
    head, _, rest = cf.partition(b"\n#Fields:")
    header, _, rows = rest.partition(b"\n")
    reader = TimeReader("w3c:c-ip")
    first = times(head + b"\n#Fields:" + header + b"\n", "w3c:c-ip", reader)
    assert np.isnat(first).all()  # header lines only
    got, valid = seconds(times(rows, "w3c:c-ip", reader))  # the header came in an earlier chunk
    assert got[valid].tolist() == [_iso_second(i) for i in range(10)]
    got, valid = seconds(times(iis, "w3c:c-ip", reader))
    assert got[valid].tolist() == [T10 + 5]
    # a Kafka topic of bare lines: the published layouts (CloudFront date/time first, Zeek ts)
    assert seconds(times(rows.split(b"\n#")[0], "w3c:c-ip"))[0][0] == T10
    zeek = generate("zeek", lines=4, distinct=2).data
    bare = b"\n".join(ln for ln in zeek.split(b"\n") if ln and not ln.startswith(b"#"))
    assert seconds(times(bare, "zeek:id.orig_h"))[0].tolist() == [EPOCH0 + i for i in range(4)]


def test_auto_detection_gives_a_timed_format_for_each_family() -> None:
    for name in ("caddy", "gcp", "envoy", "alb", "elb", "cloudfront", "zeek"):
        spec = detect_format(generate(name, lines=64, distinct=10).data)
        assert has_time(spec), (name, spec)
    assert set(TIMED_FORMATS) >= {"clf", "json", "w3c", "zeek", "alb", "elb"}
    assert not has_time("csv:src_addr") and not has_time("plain")


# ---------------------------------------------------------------------------- the command line
def _shifted(name: str, hours: int) -> bytes:
    """A sample whose record times are moved on by ``hours`` (a later hour of the same log)."""
    data = generate(name, lines=LINES, distinct=100, seed=hours + 1).data
    data = re.sub(rb"17956\d{5}", lambda m: str(int(m.group()) + 3600 * hours).encode(), data)
    data = data.replace(b"T10:", b"T%d:" % (10 + hours))
    return re.sub(rb"(?m)^2026-11-24\t10:", b"2026-11-24\t%d:" % (10 + hours), data)


@pytest.mark.parametrize(("name", "fmt"), [
    ("caddy", "json:request.remote_ip"),
    ("gcp", "auto"),
    ("cloudfront", "w3c:c-ip"),
    ("zeek", "auto"),
    ("alb", "alb"),
])
def test_ingest_window_1h_windows_each_family_by_the_records_time(name: str, fmt: str,
                                                                   tmp_path: Path) -> None:
    log, series = tmp_path / f"{name}.log", tmp_path / "hourly.jsonl"
    log.write_bytes(b"".join(_shifted(name, h) for h in range(3)))
    # the declared range: the three hours the records were written in
    first = T10 if name in ("gcp", "cloudfront", "alb") else EPOCH0 // 3600 * 3600
    r = subprocess.run([sys.executable, "-m", "panstream", "ingest", "-u", UNIVERSE, "-f", fmt,
                        "--window", "1h", "--release-epsilon", "1", "--series", str(series),
                        "--from", str(first), "--to", str(first + 3 * 3600), str(log)],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    assert [rec["start"] for rec in read(series)] == [first + 3600 * h for h in range(3)]


def test_header_lines_are_not_counted_as_untimed_and_a_log_without_times_is_one_line(
        tmp_path: Path) -> None:
    log, series = tmp_path / "cf.log", tmp_path / "s.jsonl"
    log.write_bytes(_shifted("cloudfront", 0) + b"2026-11-24\tnot-a-time\tLAX50-C1\t392\t10.0.0.1\n")
    base = [sys.executable, "-m", "panstream", "ingest", "-u", UNIVERSE, "--window", "1h",
            "--release-epsilon", "1", "--from", str(T10), "--to", str(T10 + 3600)]
    r = subprocess.run([*base, "-f", "w3c:c-ip", "--exact-counts", "--series", str(series),
                        str(log)], capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    (rec,) = read(series)
    assert rec["untimed_records"] == 1  # the broken line; the four '#' header lines are not records
    bare = tmp_path / "bare.jsonl"
    bare.write_text('{"ip": "10.0.0.1"}\n{"ip": "10.0.0.2", "when": "2026-11-24T10:00:00Z"}\n')
    r = subprocess.run([*base, "-f", "json:ip", "--series", str(tmp_path / "b.jsonl"), str(bare)],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "not one line went into a window" in r.stderr and "ts/timestamp/start_time" in r.stderr
