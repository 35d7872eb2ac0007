"""One client is one cell however a log spells its address, in every universe and every format.

Logs write a client as ``a.b.c.d``, ``a.b.c.d:port`` (AWS ALB/ELB, Envoy, HAProxy),
``[v6]:port``, ``v6%zone``, ``::ffff:a.b.c.d`` (a dual-stack listener) and in any case of hex.
panstream reads all of them with one normalization (:func:`panstream.inputs.normalize.address_key`)
shared by every address universe: ``ipv4:``, ``ipv6:``, ``hashed-ip:M`` and the sketch's ``:ip``
grid (issue 28: ``hashed-ip`` and the sketch refused every ``addr:port``, so the real ALB sample
had 0 of its 9 clients counted).

The tests below walk one table of spellings through every universe kind and every path (the
Python API, and the line formats, vectorized or not), then a *held-out* table written apart
from it, whose spellings the code was not developed against: each group of spellings must land
in exactly one cell, the same one, and different clients in different cells.
"""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path

import numpy as np
import pytest

from panstream.inputs.normalize import address_key, canonical_text, normalize_address
from panstream.inputs.parser import LineParser
from panstream.sketch.sfm import SketchGrid, hash64_bytes, hash64_ipv4_text
from panstream.universe import Universe
from tests.logsamples import generate

#: (canonical client, its spellings). The developed-against table.
SPELLINGS = [
    ("198.51.100.7", ["198.51.100.7", "198.51.100.7:51234", "198.51.100.7:0", "198.51.100.7:65535",
                      "::ffff:198.51.100.7", "::FFFF:198.51.100.7", "[::ffff:198.51.100.7]:443",
                      "::ffff:c633:6407", "[::ffff:198.51.100.7]"]),
    ("10.0.0.1", ["10.0.0.1", "10.0.0.1:80", "::ffff:10.0.0.1", "[::ffff:10.0.0.1]:8080"]),
    ("2001:db8::1", ["2001:db8::1", "2001:DB8::1", "2001:db8:0:0:0:0:0:1", "2001:0db8::0001",
                     "[2001:db8::1]:443", "[2001:db8::1]", "2001:db8::1%eth0",
                     "[2001:db8::1%eth0]:443"]),
    ("2001:db8::a:b", ["2001:db8::a:b", "2001:db8::0.10.0.11", "[2001:DB8::A:B]:65535"]),
]

#: Written apart from the table above: other clients, other combinations of the same rules.
HELD_OUT = [
    ("203.0.113.255", ["203.0.113.255:1", "[::FfFf:203.0.113.255]:99", "::ffff:cb00:71ff",
                       "0:0:0:0:0:ffff:203.0.113.255", "[0::ffff:cb00:71ff]"]),
    ("0.0.0.0", ["0.0.0.0", "0.0.0.0:0", "::ffff:0.0.0.0", "[::ffff:0:0]:1"]),
    ("2001:db8::42:8329", ["2001:0DB8:0000:0000:0000:0000:0042:8329", "[2001:db8::42:8329]:8443",
                           "2001:db8:0::42:8329%25", "2001:db8::0.66.131.41"]),
    ("2001:db8:1::ff00:5", ["[2001:DB8:1:0::FF00:5%wlan0]:443", "2001:db8:1::255.0.0.5"]),
    ("2001:db8::", ["2001:db8::", "2001:db8:0:0::", "[2001:db8::%en0]:1"]),
]

#: No client: malformed in every universe and every format.
JUNK = ["-", "unknown", "localhost", "::ffff:198.51.100.7:443", "198.51.100.7:65536",
        "198.51.100.7:", "198.51.100.7::80",
        "[198.51.100.7]", "[198.51.100.7]:80", "[2001:db8::1]:", "[2001:db8::1]x", "2001:db8::1%",
        "010.0.0.1", "10.0.0.1:8o", ":80", "1::2::3", "::ffff:1.2.3", "-:22222"]

UNIVERSES = ["ipv4:0.0.0.0/0", "ipv4:198.51.100.0/24", "ipv6:2001:db8::/96@128",
             "hashed-ip:1048576", "sketch:4096x24:ip", "sketch:4096x24:ip:xxhash64-varchar"]

#: How each format carries a token (what its published shape looks like around the client).
LINES = {
    "plain": lambda t: t,
    "clf": lambda t: f'{t} - - [24/Nov/2026:10:00:00 +0000] "GET / HTTP/1.1" 200 612',
    "alb": lambda t: (f"https 2026-11-24T10:00:00.000Z app/lb/50dc6c495c0c9188 {t} 10.1.0.9:80 "
                      '0.000 0.001 0.000 200 200 34 366 "GET https://example.com:443/ HTTP/1.1"'),
    "elb": lambda t: f"2026-11-24T10:00:00.000Z my-elb {t} 10.1.0.9:80 0.000 0.001 0.000 200 200",
    "json:downstream_remote_address": lambda t: json.dumps(
        {"start_time": "2026-11-24T10:00:00.000Z", "downstream_remote_address": t,
         "upstream_host": "10.1.0.9:8080"}),
    "field:6": lambda t: (f"Nov 24 10:00:00 lb1 haproxy[32450]: {t} [24/Nov/2026:10:00:00.726] "
                          "www~ app/node1 0/0/1/0/2 200 168"),
}


def universe(spec: str) -> Universe:
    return SketchGrid.parse_spec(spec) if spec.startswith("sketch:") else Universe.parse(spec)


def family_inside(spec: str, client: str) -> bool:
    """Whether the client lies in the universe (a hashed universe or a grid holds every client)."""
    if spec.startswith(("ipv4:", "ipv6:")):
        net = ipaddress.ip_network(spec[5:].partition("@")[0])
        return ipaddress.ip_address(client) in net
    return True


def cells(spec: str, fmt: str, tokens: list[str]) -> tuple[list[int], int, int]:
    """(cells, outside, malformed) of ``tokens`` through one path, in one chunk (or one batch)."""
    u = universe(spec)
    if fmt == "api":
        r = u.indices(list(tokens))
        return r.indices.tolist(), r.outside, r.malformed
    if fmt == "api-batch":  # 64 copies of each token as bytes: the vectorized batch path
        r = u.indices([t.encode() for t in tokens] * 64)
        assert r.outside % 64 == r.malformed % 64 == 0
        return sorted(r.indices.tolist())[::64], r.outside // 64, r.malformed // 64
    data = "".join(LINES[fmt](t) + "\n" for t in tokens).encode()
    p = LineParser(u, fmt).parse(data)
    assert p.lines == len(tokens) and p.empty == 0
    return p.indices.tolist(), p.outside, p.malformed


PATHS = ["api", "api-batch", *LINES]


@pytest.mark.parametrize("fmt", PATHS)
@pytest.mark.parametrize("spec", UNIVERSES)
@pytest.mark.parametrize("table", ["spellings", "held-out"])
def test_each_client_is_one_cell_however_it_is_spelled(table: str, spec: str, fmt: str) -> None:
    groups = SPELLINGS if table == "spellings" else HELD_OUT
    seen: dict[int, str] = {}
    for client, spellings in groups:
        got, outside, malformed = cells(spec, fmt, spellings)
        assert malformed == 0, (client, spellings)
        if not family_inside(spec, client):
            assert (got, outside) == ([], len(spellings)), client
            continue
        assert outside == 0 and len(got) == len(spellings), client
        assert len(set(got)) == 1, (client, spellings, got)  # one client, one cell
        assert seen.setdefault(got[0], client) == client  # and another client elsewhere


@pytest.mark.parametrize("fmt", PATHS)
@pytest.mark.parametrize("spec", UNIVERSES)
def test_the_cell_is_the_canonical_items_and_order_does_not_matter(spec: str, fmt: str) -> None:
    """All spellings of both tables shuffled into one chunk (the vectorized paths and the
    per-token reference mixed): the multiset of cells is the canonical items' cells."""
    u = universe(spec)
    tokens, want = [], []
    for client, spellings in SPELLINGS + HELD_OUT:
        tokens += spellings
        if family_inside(spec, client):
            want += [u.index_of(client)] * len(spellings)
    order = np.random.default_rng(28).permutation(len(tokens))
    got, _, malformed = cells(spec, fmt, [tokens[i] for i in order.tolist()])
    assert malformed == 0 and sorted(got) == sorted(want)


@pytest.mark.parametrize("fmt", PATHS)
@pytest.mark.parametrize("spec", UNIVERSES)
def test_junk_is_malformed_everywhere(spec: str, fmt: str) -> None:
    got, outside, malformed = cells(spec, fmt, JUNK)
    assert (got, outside, malformed) == ([], 0, len(JUNK))


def test_the_sketch_hashes_the_canonical_text_as_presto_varchar() -> None:
    """The sketch's cell of a client is that of Presto's hash of its canonical text (what
    ``noisy_approx_set_sfm(CAST(ip AS varchar))`` hashes), whatever the spelling."""
    g = SketchGrid(4096, 24, "ip")
    for client, spellings in SPELLINGS + HELD_OUT:
        text = canonical_text(address_key(client))  # type: ignore[arg-type]
        assert text == client.encode()
        want = int(g.cells_of_hashes(hash64_bytes([text]))[0])
        assert g.indices(spellings).indices.tolist() == [want] * len(spellings)
        assert {normalize_address(s.encode()) for s in spellings} == {text}


def test_the_vectorized_ipv4_hash_is_the_text_hash() -> None:
    """The IPv4 clients of a log are hashed from their integers, without writing the text in
    Python: bit-exact with Murmur3 of the dotted-decimal bytes for every length (7 to 15)."""
    rng = np.random.default_rng(5)
    a = rng.integers(0, 1 << 32, size=20_000, dtype=np.uint64).astype(np.uint32)
    a[:8] = [0, 1, 0xFFFFFFFF, 0x01020304, 0x0A0A0A0A, 0x64646464, 0xFFFF0000, 0x0000FFFF]
    text = [b"%d.%d.%d.%d" % (x >> 24, x >> 16 & 255, x >> 8 & 255, x & 255) for x in a.tolist()]
    assert {len(t) for t in text} == set(range(7, 16))
    assert (hash64_ipv4_text(a) == hash64_bytes(text)).all()


def test_a_presto_sql_grid_hashes_the_same_text_with_xxh64() -> None:
    """A grid hashed as Presto SQL's ``noisy_approx_set_sfm`` hashes (``xxhash64-varchar``): the
    vectorized path gives each IPv4 client the cell of XXH64 of its dotted text, as the per-item
    hash of the text does, for every text length (7 to 15) and with ports."""
    from panstream.sketch.hashing import hash_blobs

    g = SketchGrid(4096, 24, "ip", "xxhash64-varchar")
    rng = np.random.default_rng(8)
    a = rng.integers(0, 1 << 32, size=3000, dtype=np.uint64).astype(np.uint32)
    a[:5] = [0, 0xFFFFFFFF, 0x01020304, 0x0A0A0A0A, 0x0102032D]  # 7, 15, 7, 11, 8 bytes
    text = [b"%d.%d.%d.%d" % (x >> 24, x >> 16 & 255, x >> 8 & 255, x & 255) for x in a.tolist()]
    assert {len(t) for t in text} == set(range(7, 16))
    want = g.cells_of_hashes(hash_blobs(text, "xxhash64-varchar")[0]).tolist()
    data = b"".join(LINES["alb"](t.decode() + ":443").encode() + b"\n" for t in text)
    assert sorted(LineParser(g, "alb").parse(data).indices.tolist()) == sorted(want)


# ------------------------------------------------------------------ logs in their published shapes
REALLOGS = Path(__file__).resolve().parents[3] / "shared" / "reallogs"
KINDS = ["ipv4:0.0.0.0/0", "hashed-ip:65536", "sketch:4096x24:ip"]


def _real(name: str) -> bytes:
    for d in (REALLOGS, Path("/work/shared/reallogs")):
        if (d / name).exists():
            return (d / name).read_bytes()
    pytest.skip(f"{name} (../shared/reallogs) is not here")
    raise AssertionError


@pytest.mark.parametrize("spec", KINDS)
def test_the_real_alb_sample_is_counted_in_every_universe_kind(spec: str) -> None:
    """elastic/beats' AWS ALB test lines (``client:port`` in field 4): 9 requests from 3 clients,
    and one line without a client field (malformed)."""
    r = LineParser(universe(spec), "alb").parse(_real("beats_aws_example-alb-http.log"))
    assert (r.accepted, len(set(r.indices.tolist())), r.outside) == (9, 3, 0)
    six = LineParser(universe("ipv6:2001:db8::/32@64"), "alb").parse(
        _real("beats_aws_example-alb-http.log"))
    assert (six.accepted, six.outside) == (0, 9)  # IPv4 clients, outside an ipv6 universe


@pytest.mark.parametrize("spec", KINDS)
@pytest.mark.parametrize("fmt", ["field:6", r"regex:haproxy\[\d+\]: (?P<ip>\S+) \["])
def test_the_real_haproxy_sample_is_counted_in_every_universe_kind(spec: str, fmt: str) -> None:
    """elastic/beats' HAProxy syslog lines: ``1.2.3.4:38862`` once, ``-:port`` (no client) nine
    times. The client field (``-f field:6``, or a regex taking ``ip:port``) keeps its port."""
    r = LineParser(universe(spec), fmt).parse(_real("beats_haproxy.log"))
    assert (r.accepted, r.malformed) == (1, 9)
    assert r.indices.tolist() == [universe(spec).index_of("1.2.3.4")]


@pytest.mark.parametrize("spec", [*KINDS, "ipv4:10.0.0.0/16"])
@pytest.mark.parametrize("name", ["envoy", "alb", "elb", "plain-port"])
def test_generated_logs_with_ports_are_counted_in_every_universe_kind(spec: str, name: str) -> None:
    """Envoy's ``downstream_remote_address``, ALB, classic ELB and plain ``addr:port`` lines of
    2,000 requests: every line is a client (11.0.0.0/16 ones outside ``ipv4:10.0.0.0/16``), and
    the distinct cells are the distinct clients (no two share a cell at these sizes)."""
    s = generate("plain" if name == "plain-port" else name, lines=2000, distinct=500, seed=3)
    data, fmt = s.data, {"envoy": "json:downstream_remote_address", "alb": "alb", "elb": "elb",
                         "plain-port": "plain"}[name]
    if name == "plain-port":
        data = re.sub(rb"(?m)$", b":51234", data.rstrip(b"\n")) + b"\n"
    r = LineParser(universe(spec), fmt).parse(data)
    assert r.malformed == 0 and r.accepted + r.outside == 2000
    if spec.startswith("ipv4:10."):
        assert (r.accepted, len(set(r.indices.tolist()))) == (s.accepted, s.truth)
    else:
        assert r.accepted == 2000


@pytest.mark.parametrize("spec", ["ipv4:0.0.0.0/0", "hashed-ip:262144", "sketch:4096x24:ip",
                                  "sketch:4096x24:ip:xxhash64-varchar"])
@pytest.mark.parametrize("fmt", ["clf", "plain-port", "alb", "json:downstream_remote_address"])
def test_ipv4_clients_never_take_the_per_token_path(spec: str, fmt: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The speed of the public-client paths, checked without a clock: on IPv4 clients (with
    ports, in the formats that carry them) no line reaches the Python reference
    (:func:`address_key`, :func:`canonical_text`): parse, canonical text, hash, bucket and
    level are vectorized for ``hashed-ip`` and the sketch as for the bit table."""
    import panstream.inputs.ipv4 as ipv4_mod
    import panstream.inputs.normalize as norm
    import panstream.inputs.parser as parse_mod
    import panstream.sketch.sfm as sfm_mod

    calls = []

    def spy(name: str, real: object) -> object:
        def f(*a: object, **k: object) -> object:
            calls.append(name)
            return real(*a, **k)  # type: ignore[operator]
        return f

    for mod in (norm, ipv4_mod, parse_mod, sfm_mod):
        for name in ("address_key", "canonical_text"):
            if hasattr(mod, name):
                monkeypatch.setattr(mod, name, spy(name, getattr(mod, name)))
    name = {"clf": "clf", "plain-port": "plain", "alb": "alb",
            "json:downstream_remote_address": "envoy"}[fmt]
    s = generate(name, lines=5000, distinct=1000, seed=4)
    data = s.data
    if fmt == "plain-port":
        data = re.sub(rb"(?m)$", b":443", data.rstrip(b"\n")) + b"\n"
    r = LineParser(universe(spec), "plain" if fmt == "plain-port" else fmt).parse(data)
    assert r.accepted + r.outside == 5000 and r.malformed == 0
    assert calls == []
