"""Internet-facing logs and settings that do not mean what they seem (issue 20).

A public web server sees clients from the whole address space. ``ipv4:0.0.0.0/0`` counts them with
a 95 % error of +-123,000 at 50,000 clients (and a 512 MiB table); ``hashed:M`` counts every junk
token as a client. ``hashed-ip:M`` validates addresses, then hashes them into a table sized for the
clients expected; ``plan`` and ``ingest`` say so when a universe cannot count what it is given,
and nonsense epsilons are warned about or refused before anything is spent.
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import numpy as np
import pytest

from panstream import DensityEstimator

N_V4, N_V6 = 45_000, 5_000


def _public_clients(rng: np.random.Generator) -> tuple[list[str], list[str]]:
    """45,000 global IPv4 and 5,000 global IPv6 addresses (synthetic; NumPy is fine for data)."""
    v4: set[ipaddress.IPv4Address] = set()
    while len(v4) < N_V4:
        for x in rng.integers(0, 1 << 32, size=N_V4, dtype=np.uint64).tolist():
            a = ipaddress.IPv4Address(x)
            if a.is_global and len(v4) < N_V4:
                v4.add(a)
    v6: set[ipaddress.IPv6Address] = set()
    while len(v6) < N_V6:
        hi = int(rng.integers(0x2A00_0000, 0x2A0F_FFFF))
        v6.add(ipaddress.IPv6Address((hi << 96) | int(rng.integers(0, 1 << 62)) << 32
                                     | int(rng.integers(1, 1 << 32))))
    return [str(a) for a in v4], [str(a) for a in v6]


def _combined(client: str, i: int) -> bytes:
    return (f'{client} - - [10/Oct/2025:13:55:{i % 60:02d} +0000] "GET /item/{i} HTTP/1.1" 200 '
            f'{512 + i % 977} "https://example.com/" "Mozilla/5.0 (X11; Linux x86_64)"\n').encode()


@pytest.fixture(scope="module")
def public_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, int]:
    """An nginx combined log of 50,000 public clients (IPv4, IPv6, and IPv4 also written as
    ``::ffff:a.b.c.d`` by a dual-stack listener) and 3,000 lines whose client is junk."""
    rng = np.random.default_rng(2020)
    v4, v6 = _public_clients(rng)
    lines: list[bytes] = []
    for i, c in enumerate(v4):
        lines.append(_combined(c, i))
        if i % 5 == 0:  # the same client again, logged by the IPv6 socket
            lines.append(_combined(f"::ffff:{c}", i + 1))
    lines += [_combined(c.upper() if i % 2 else c, i) for i, c in enumerate(v6)]
    junk = [_combined(tok, i) for i, tok in enumerate(["-", "unknown", "localhost"] * 1000)]
    lines += junk
    order = rng.permutation(len(lines))
    path = tmp_path_factory.mktemp("public") / "access.log"
    path.write_bytes(b"".join(lines[k] for k in order))
    return path, len(lines), len(junk)


def test_hashed_ip_counts_50000_public_clients_within_its_interval(public_log, tmp_path: Path,
                                                                   run_cli) -> None:
    log, n_lines, n_junk = public_log
    state = tmp_path / "web.pst"
    r = run_cli(["ingest", "-u", "hashed-ip:131072", "-n", "50000", "-f", "clf", "-s", str(state),
                 "--json", "--exact-counts", str(log)])
    assert r.returncode == 0, r.stderr
    assert b"warning: the planned" not in r.stderr  # the table fits the clients
    s = json.loads(r.stdout.decode().splitlines()[-1])["summary"]
    # every junk client is malformed, every address accepted (nothing is "outside" an address hash)
    assert (s["lines"], s["malformed"], s["outside"]) == (n_lines, n_junk, 0)
    assert s["accepted"] == n_lines - n_junk
    # The release interval (table noise, release noise and hash collisions) at confidence
    # 1 - 1e-6 covers the truth: a false failure has probability below 1e-6.
    est = DensityEstimator.load(state)
    rel = est.release(0.5, confidence=1 - 1e-6)
    assert rel.distinct_low <= N_V4 + N_V6 <= rel.distinct_high, rel
    assert rel.distinct_high - rel.distinct_low < 0.2 * (N_V4 + N_V6)  # and it is informative
    # the command-line release of the same state
    r = run_cli(["release", "-s", str(state), "--epsilon", "0.5", "--json"])
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["universe"] == "hashed-ip:131072" and out["distinct_low"] < out["distinct_high"]


def test_plan_names_the_universe_that_would_count_the_clients(run_cli) -> None:
    r = run_cli(["plan", "-u", "ipv4:0.0.0.0/0", "--epsilon", "1", "-n", "50000"])
    assert r.returncode == 0
    err = r.stderr.decode()
    assert "exceeds the 50,000 distinct expected" in err and "use hashed-ip:131072" in err
    r = run_cli(["plan", "-u", "ipv4:0.0.0.0/0", "--epsilon", "1", "-n", "50000", "--json"])
    assert "hashed-ip:131072" in json.loads(r.stdout)["warning"]
    r = run_cli(["plan", "-u", "hashed-ip:131072", "--epsilon", "1", "-n", "50000", "--json"])
    assert json.loads(r.stdout)["warning"] is None and r.stderr == b""
    assert b"hashed-ip:131072" in r.stdout
    # a saturated hashed table is told the size that would work
    r = run_cli(["plan", "-u", "hashed:1024", "--epsilon", "1", "-n", "50000"])
    assert b"use hashed:131072" in r.stderr


def test_ingest_warns_about_a_universe_sized_for_the_address_space(tmp_path: Path,
                                                                  run_cli) -> None:
    # ipv4:16.0.0.0/4 (2**28 cells, 32 MiB) stands for 0.0.0.0/0 (512 MiB) to keep the test light.
    r = run_cli(["ingest", "-u", "ipv4:16.0.0.0/4", "-f", "plain"], stdin=b"16.0.0.1\n")
    err = r.stderr.decode()
    assert r.returncode == 0 and "warning: ipv4:16.0.0.0/4 (268,435,456 cells)" in err, err
    assert "cannot be told from none" in err and "hashed-ip:" in err
    r = run_cli(["ingest", "-u", "ipv4:16.0.0.0/4", "-n", "5000"], stdin=b"16.0.0.1\n")
    assert b"exceeds the 5,000 distinct expected" in r.stderr and b"use hashed-ip:8192" in r.stderr
    r = run_cli(["ingest", "-u", "ipv4:10.0.0.0/16"], stdin=b"10.0.0.1\n")
    assert b"warning" not in r.stderr
    r = run_cli(["ingest", "--help"])
    assert b"0.0.0.0/0 -s" not in r.stdout and b"hashed-ip:" in r.stdout


def test_nonsense_state_epsilons_are_warned_about_with_what_they_mean(tmp_path: Path,
                                                                     run_cli) -> None:
    r = run_cli(["ingest", "-u", "ipv4:10.0.0.0/16", "--epsilon", "1000"], stdin=b"10.0.0.1\n")
    err = r.stderr.decode()
    assert "--epsilon 1000 cannot be realized" in err and "22.18" in err, err
    r = run_cli(["ingest", "-u", "ipv4:10.0.0.0/16", "--epsilon", "1e-9", "-s",
                 str(tmp_path / "tiny.pst")], stdin=b"10.0.0.1\n")
    err = r.stderr.decode()
    assert "epsilon 1e-09 is too small for ipv4:10.0.0.0/16" in err and "says nothing" in err
    r = run_cli(["ingest", "-u", "ipv4:10.0.0.0/16", "--calibration", "paper", "--epsilon", "1.9"],
                stdin=b"10.0.0.1\n")
    assert b"--epsilon 1.9 realizes epsilon 2.996, more than asked" in r.stderr
    # and that state's release is refused before anything is spent (it printed -427,508,596,736)
    r = run_cli(["release", "-s", str(tmp_path / "tiny.pst"), "--epsilon", "0.5"])
    assert r.returncode == 2 and b"cannot say anything" in r.stderr and r.stdout == b""
    assert DensityEstimator.load(tmp_path / "tiny.pst").ledger.spent == 0


def test_nonsense_release_epsilons_are_refused_or_warned(tmp_path: Path, run_cli) -> None:
    state = tmp_path / "s.pst"
    assert run_cli(["ingest", "-u", "ipv4:10.0.0.0/16", "-s", str(state)],
                   stdin=b"10.0.0.1\n10.0.0.2\n").returncode == 0
    r = run_cli(["release", "-s", str(state), "--epsilon", "1e-9"])
    err = r.stderr.decode()
    assert r.returncode == 2 and err.count("\n") == 1 and "too small to say anything" in err, err
    assert "nothing was spent" in err and DensityEstimator.load(state).ledger.spent == 0
    r = run_cli(["release", "-s", str(state), "--epsilon", "1e-4"])  # allowed, but says nothing
    assert r.returncode == 0 and b"warning: this release says nothing" in r.stderr
    r = run_cli(["release", "-s", str(state), "--epsilon", "1000"])  # over budget anyway
    assert b"practically no privacy" in r.stderr and r.returncode == 1


def test_kafka_warns_like_ingest_before_it_connects(run_cli) -> None:
    # No --state-dir: refused right after the settings are checked, before any broker is reached.
    r = run_cli(["kafka", "-b", "127.0.0.1:1", "-t", "t", "-g", "g", "-u", "ipv4:10.0.0.0/16",
                 "--epsilon", "1000"])
    err = r.stderr.decode().splitlines()
    assert r.returncode == 2 and len(err) == 2, err
    assert "--epsilon 1000 cannot be realized" in err[0] and err[1].startswith("panstream: error:")


def test_kafka_takes_the_expected_distinct_count_and_warns_like_ingest(run_cli) -> None:
    # The same -n as ingest: the plan's 95 % error against N, and the universe that would count
    # them, before any broker is reached (no --state-dir: refused right after the warning).
    r = run_cli(["kafka", "-b", "127.0.0.1:1", "-t", "t", "-g", "g", "-u", "ipv4:16.0.0.0/4",
                 "--epsilon", "1", "-n", "5000"])
    err = r.stderr.decode().splitlines()
    assert r.returncode == 2 and len(err) == 2, err
    assert "exceeds the 5,000 distinct expected" in err[0] and "use hashed-ip:8192" in err[0]
    assert err[1].startswith("panstream: error:")
    r = run_cli(["kafka", "-b", "127.0.0.1:1", "-t", "t", "-g", "g", "-u", "ipv4:10.0.0.0/16",
                 "--epsilon", "1", "-n", "5000"])
    assert b"warning" not in r.stderr and r.returncode == 2
