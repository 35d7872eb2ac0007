"""One classification everywhere: accepted, empty, malformed or outside (defined in docs/cli.md).

The same item must land in the same class whether it comes through the Python API
(``Universe.indices`` / ``DensityEstimator.update``) or through any ``--format`` of the command line
(the vectorized ``ipv4`` path or the per-line path). Issue 14 found two disagreements: an IPv6
address in an ``ipv4`` universe was "outside" in the CLI but "malformed" in the API, and a
whitespace-only line was "empty" in ``plain``/``field:N`` but "malformed" in ``clf``.
"""

from __future__ import annotations

import pytest

from panstream.inputs.parser import LineParser
from panstream.universe import Universe

#: (universe, item text, class). Blank items are written without the surrounding line.
CASES = [
    ("ipv4:10.0.0.0/8", "10.1.2.3", "accepted"),
    ("ipv4:10.0.0.0/8", "11.1.2.3", "outside"),
    ("ipv4:10.0.0.0/8", "2001:db8::1", "outside"),  # dual-stack log: outside everywhere
    ("ipv4:10.0.0.0/8", "::ffff:10.0.0.1", "accepted"),  # IPv4-mapped: the IPv4 address
    ("ipv4:10.0.0.0/8", "10.1.2.3:8080", "accepted"),  # client:port (ALB, ELB, Envoy)
    ("ipv4:10.0.0.0/8", "[::ffff:10.0.0.1]:443", "accepted"),
    ("ipv4:10.0.0.0/8", "10.1.2.3:99999", "malformed"),  # no port
    ("ipv6:2001:db8::/48@64", "[2001:db8::1]:443", "accepted"),
    ("ipv6:2001:db8::/48@64", "fe80::1%eth0", "outside"),  # zone id dropped, then outside
    ("ipv4:10.0.0.0/8", "10.1.2", "malformed"),
    ("ipv4:10.0.0.0/8", "010.1.2.3", "malformed"),
    ("ipv4:10.0.0.0/8", "nonsense", "malformed"),
    ("ipv4:10.0.0.0/8", "", "empty"),
    ("ipv4:10.0.0.0/8", "   \t ", "empty"),  # whitespace-only: empty everywhere
    ("ipv6:2001:db8::/48@64", "2001:db8::1", "accepted"),
    ("ipv6:2001:db8::/48@64", "2001:db9::1", "outside"),
    ("ipv6:2001:db8::/48@64", "10.0.0.1", "outside"),
    ("ipv6:2001:db8::/48@64", "2001:db8::g", "malformed"),
    ("ipv6:2001:db8::/48@64", "  ", "empty"),
    ("range:100", "42", "accepted"),
    ("range:100", "100", "outside"),
    ("range:100", "-5", "outside"),  # as the integer -5 is through the API
    ("range:100", "4x", "malformed"),
    ("range:100", " ", "empty"),
    ("hashed:1024", "alice@example.com", "accepted"),
    ("hashed:1024", " \t", "empty"),
]

FORMATS = ["api", "plain", "clf", "field:1", "field:2"]



def _line(fmt: str, item: str) -> bytes:
    if not item.strip():
        return item.encode()  # a blank line is blank in every format
    if fmt == "clf":
        return item.encode() + b' - - [10/Oct/2024:13:55:36 +0000] "GET / HTTP/1.1" 200 1'
    if fmt == "field:1":
        return item.encode() + b" GET /index.html"
    if fmt == "field:2":
        return b"2024-10-10T13:55:36Z " + item.encode() + b" GET /"
    return b"  " + item.encode() + b" \r"  # plain tolerates surrounding blanks and a CR


def classify(spec: str, fmt: str, item: str) -> str:
    u = Universe.parse(spec)
    if fmt == "api":
        r = u.indices([item])
        counts = {"accepted": int(r.indices.size), "empty": r.empty, "malformed": r.malformed,
                  "outside": r.outside}
    else:
        p = LineParser(u, fmt).parse(_line(fmt, item) + b"\n")
        counts = {"accepted": p.accepted, "empty": p.empty, "malformed": p.malformed,
                  "outside": p.outside}
    (cls,) = [k for k, v in counts.items() if v == 1]
    assert sum(counts.values()) == 1, counts
    return cls


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(("spec", "item", "expected"), CASES)
def test_every_path_puts_an_item_in_the_same_class(spec: str, item: str, expected: str,
                                                    fmt: str) -> None:
    assert classify(spec, fmt, item) == expected


def test_bytes_items_classify_like_text() -> None:
    u = Universe.parse("ipv4:10.0.0.0/8")
    r = u.indices([b"10.0.0.1", b"2001:db8::1", b"  ", b"\xff"])
    assert (r.indices.size, r.outside, r.empty, r.malformed) == (1, 1, 1, 1)


def test_update_reports_empty_items() -> None:
    import panstream as ps

    est = ps.DensityEstimator("hashed:1024")
    r = est.update(["alice", "", "  ", " alice "])
    assert (r.accepted, r.empty, r.rejected) == (2, 2, 2)


def test_hashed_items_ignore_surrounding_whitespace_like_the_plain_format() -> None:
    u = Universe.parse("hashed:1048576")
    via_api = u.indices(["alice", " alice\t"]).indices.tolist()
    via_cli = LineParser(u, "plain").parse(b"alice\n alice\t\n").indices.tolist()
    assert via_api[0] == via_api[1] == via_cli[0] == via_cli[1]
