"""Real third-party logs (``../shared/reallogs/``, SOURCES.md) read with ``-f auto``, as a new user
would: each is recognised, counted exactly right, and ends with exit 0 and something counted.

The files are other projects' sample and test logs (elastic, loghub, Zeek, beats), copied byte for
byte, with their exact distinct-client truths computed independently (awk/grep and ``sort -u``).
They are not in this repository (several MiB, other licences); the tests skip where they are
absent. Issue 29 found syslog-wrapped formats (pam ``rhost=``, an Apache error log, HAProxy)
announced as "Apache/nginx common or combined log (-f clf)", and 10 HAProxy lines read as CLF
exiting 0 with nothing counted.

Two checks per file:

* exact: the format ``auto`` picks, and the distinct IPv4 clients its parser accepts (through
  :class:`~panstream.inputs.parser.LineParser`, no noise) equal the truth of SOURCES.md (its IPv6
  clients are counted as outside an ``ipv4`` universe);
* end to end: ``panstream ingest -f auto`` into a hashed table exits 0, names that format on
  stderr, accepts what the parser accepts, and the release's interval at confidence 1 - 1e-6
  holds the truth (a false failure below 1e-6 per file).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from panstream.estimators import load
from panstream.inputs.parser import LineParser, detect
from panstream.universe import Universe

REAL = Path(__file__).resolve().parents[3] / "shared" / "reallogs"
if not REAL.is_dir():
    REAL = Path("/work/shared/reallogs")

#: file -> (the format ``auto`` must pick, distinct IPv4 clients, distinct IPv6 clients), from
#: SOURCES.md.
TRUTH = {
    "elastic_apache_logs": ("clf", 1753, 0),
    "apachelabor_labor-07-example-access.log": ("clf", 185, 0),
    "loghub_OpenSSH_2k.log": ("sshd", 25, 0),
    "loghub_Linux_2k.log": ("pam", 27, 0),
    "loghub_Apache_2k.log": ("apache-error", 32, 0),
    "zeek_cisco-fabric-path_conn.log": ("zeek:id.orig_h", 15, 15),
    "zeek_http-methods_http.log": ("zeek:id.orig_h", 1, 0),
    "zeektraining_ex2_conn_head.log": ("zeek:id.orig_h", 7, 4),
    "beats_aws_example-alb-http.log": ("alb", 3, 0),
    "beats_nginx_access_test.log": ("clf", 3, 0),
    "beats_iis_access_test.log": ("w3c:c-ip", 2, 0),
    "beats_traefik_access_test.log": ("clf", 2, 0),
    "beats_haproxy.log": ("haproxy", 1, 0),
}

pytestmark = pytest.mark.skipif(not REAL.is_dir(), reason="../shared/reallogs is not here")


def test_every_sample_has_a_truth() -> None:
    files = sorted(p.name for p in REAL.iterdir() if p.name != "SOURCES.md")
    assert files == sorted(TRUTH)


@pytest.mark.parametrize("name", sorted(TRUTH))
def test_auto_recognises_the_sample_and_counts_its_truth_exactly(name: str) -> None:
    spec, v4, _ = TRUTH[name]
    data = (REAL / name).read_bytes()
    d = detect(data)
    assert (d.spec, d.known) == (spec, True)
    r = LineParser(Universe.parse("ipv4:0.0.0.0/0"), spec).parse(data)
    assert len(set(r.indices.tolist())) == v4


@pytest.mark.parametrize("name", sorted(TRUTH))
def test_ingest_auto_counts_the_sample(name: str, tmp_path: Path, run_cli) -> None:
    spec, v4, v6 = TRUTH[name]
    state = tmp_path / "s.pst"
    r = run_cli(["ingest", "-u", "hashed-ip:65536", "-s", str(state), "--json", "--exact-counts",
                 str(REAL / name)])
    assert r.returncode == 0, r.stderr.decode()
    assert f"detected (-f {spec})".encode() in r.stderr
    s = json.loads(r.stdout.decode().splitlines()[-1])["summary"]
    assert s["accepted"] > 0  # never "exit 0 with nothing counted"
    rel = load(str(state)).release(1.0, confidence=1 - 1e-6).to_dict()
    assert rel["distinct_low"] <= v4 + v6 <= rel["distinct_high"], rel
