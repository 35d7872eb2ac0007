"""The strict parser accepts exactly what ipaddress.IPv4Address accepts, and never crashes."""

from __future__ import annotations

import gzip
import io
import ipaddress

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from panstream.inputs.normalize import normalize_address
from panstream.inputs.parser import LineParser, detect_format, parse_format, parse_ipv4
from panstream.sources import ChunkReader, open_input
from panstream.universe import Universe


def reference(token: str) -> int | None:
    """What the parser must accept: ipaddress's IPv4 addresses, after the spellings of
    panstream.inputs.normalize (``a.b.c.d:port``, ``::ffff:a.b.c.d``, ``[..]:port``) are reduced."""
    try:
        t = token.encode("utf-8", "surrogatepass")
        return int(ipaddress.IPv4Address(normalize_address(t).decode("ascii")))
    except (ValueError, UnicodeDecodeError):
        return None


def parsed(lines: list[bytes], fmt: str = "plain") -> list[int | None]:
    """Parse each line alone (so a rejection can be attributed to its line)."""
    out = []
    for line in lines:
        a, n, empty, bad, v6 = parse_ipv4(line + b"\n", fmt)
        assert n == 1 and a.size + empty + bad + v6 == 1
        out.append(int(a[0]) if a.size else None)
    return out


ADVERSARIAL = [
    "1.2.3.4", "0.0.0.0", "255.255.255.255", "256.1.1.1", "1.2.3.256", "01.2.3.4", "1.02.3.4",
    "1.2.3.04", "00.0.0.0", "010.1.1.1", "1", "1.2", "1.2.3", "1.2.3.4.5", "1..3.4", ".1.2.3",
    "1.2.3.", "1.2.3.4.", "0x7f.0.0.1", "1.2.3.4 ", "+1.2.3.4", "-1.2.3.4", "1.2.3.4/32",
    "1234.1.1.1", "1.1.1.1234", "999.999.999.999", "100.100.100.100", "١.٢.٣.٤", "1.2.3.4\x00",
    "12.34.56.78", "9.99.199.249", "1.2.3.a", "a.b.c.d", "", "...", "1.2.3.4:80", "::1",
    "1.2.3.00", "1.2.3.0", "200.250.255.249", "260.0.0.0", "25.5.25.5",
    # '/' shares the digits' byte range and ':' '>' share nibbles with digits or the dot
    "1/2.3.4", "1.2/.3.4", "/.1.2.3", "1.2.3./", "1.2.3.4/", "12/.1.1.1", "1.2.3.4>", "1>2.3.4.5",
    "1.>.3.4", "1.2.3.:", "1.2.3.4:", "\x00.1.2.3", "1.2.3.\x0e", "1.2.3.\x0f", "9.9.9.>9",
    "111.222.233.244", "255.255.255.2550", "1.2.3.4\x00\x00\x00\x00\x00\x00\x00\x00",
]


def test_adversarial_strings_match_ipaddress() -> None:
    lines = [s.encode("utf-8") for s in ADVERSARIAL]
    got = parsed(lines)
    # plain tolerates surrounding blanks: compare with ipaddress on the stripped token
    want = [reference(s.strip(" \t\v\f\r")) for s in ADVERSARIAL]
    want[ADVERSARIAL.index("")] = None
    assert got == want


octet = st.one_of(st.integers(0, 300).map(str), st.sampled_from(["00", "01", "007", "0255", ""]),
                  st.text("0123456789", min_size=1, max_size=4))
dotted = st.lists(octet, min_size=1, max_size=6).map(".".join)
junk = st.text(st.sampled_from("0123456789.:abx \t/-\x00\xff"), max_size=20)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(dotted, junk), min_size=1, max_size=40))
def test_random_lines_match_ipaddress_in_one_buffer(tokens: list[str]) -> None:
    tokens = [t for t in tokens if "\n" not in t and "\r" not in t]
    buf = "".join(t + "\n" for t in tokens).encode("utf-8", "surrogatepass")
    addr, n, empty, bad, v6 = parse_ipv4(buf)
    want = []
    n_empty = 0
    for t in tokens:
        s = t.strip(" \t")
        if not s:
            n_empty += 1
        elif reference(s) is not None:
            want.append(reference(s))
    assert n == len(tokens)
    assert addr.tolist() == want
    assert empty == n_empty
    assert bad + v6 == len(tokens) - len(want) - n_empty


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=300))
def test_every_address_round_trips_plain_and_clf(values: list[int]) -> None:
    text = [str(ipaddress.IPv4Address(v)) for v in values]
    plain = "".join(t + "\n" for t in text).encode()
    clf = "".join(f'{t} - - [01/Jan/2024:00:00:00 +0000] "GET / HTTP/1.1" 200 5\r\n' for t in text)
    assert parse_ipv4(plain)[0].tolist() == values
    assert parse_ipv4(clf.encode(), "clf")[0].tolist() == values


clf_token = st.one_of(dotted, junk.filter(lambda t: " " not in t and "\t" not in t))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(clf_token, st.sampled_from([" - - x", "\t- x", " ", "", "\x00 x"])),
                min_size=1, max_size=40))
def test_clf_first_field_matches_ipaddress_in_one_buffer(rows: list[tuple[str, str]]) -> None:
    """The CLF item ends at the first space or tab; everything else on the line is ignored."""
    lines = [(t + rest).encode("utf-8", "surrogatepass") for t, rest in rows]
    buf = b"".join(line + b"\n" for line in lines)
    addr, n, empty, bad, v6 = parse_ipv4(buf, "clf")
    want = []
    for t, rest in rows:
        token = t if not rest or rest[0] in " \t" else t + rest.split(" ", 1)[0]
        if reference(token) is not None:
            want.append(reference(token))
    assert n == len(rows)
    assert addr.tolist() == want
    assert addr.size + empty + bad + v6 == n


def test_newline_finder_handles_runs_of_short_lines() -> None:
    from panstream.inputs.ipv4 import _newlines

    for data in (b"\n" * 37, b"1\n22\n\n333\n4444\n" * 50 + b"x", b"", b"abc", b"1.2.3.4\n" * 9):
        b = np.frombuffer(data, dtype=np.uint8)
        assert _newlines(b).tolist() == np.flatnonzero(b == 10).tolist()


def test_large_random_sample_vectorized() -> None:
    rng = np.random.default_rng(7)  # synthetic test data only
    v = rng.integers(0, 2**32, size=50_000, dtype=np.uint64)
    text = [str(ipaddress.IPv4Address(int(x))) for x in v]
    assert parse_ipv4("\n".join(text).encode())[0].tolist() == v.tolist()


def test_whitespace_crlf_and_empty_lines_in_plain() -> None:
    a, n, empty, bad, v6 = parse_ipv4(b"  1.2.3.4\t\r\n\r\n\n   \n5.6.7.8\r\n1.2.3.4 5.6.7.8\n")
    assert a.tolist() == [0x01020304, 0x05060708]
    assert (n, empty, bad, v6) == (6, 3, 1, 0)


def test_binary_junk_and_huge_lines_are_counted_never_crash() -> None:
    rng = np.random.default_rng(3)
    junk = rng.integers(0, 256, size=200_000, dtype=np.uint8).tobytes()
    data = junk + b"\n" + b"7" * 10_000 + b"\n1.1.1.1\n"
    for fmt in ("plain", "clf"):
        a, n, empty, bad, v6 = parse_ipv4(data, fmt)
        assert a.tolist()[-1] == 0x01010101
        assert a.size + empty + bad + v6 == n == data.count(b"\n")


def test_ipv6_in_ipv4_universe_counts_as_outside() -> None:
    p = LineParser(Universe.parse("ipv4:0.0.0.0/0"), "clf")
    r = p.parse(b"2001:db8::1 - - x\n1.2.3.4 - - x\nfoo - - x\n")
    assert (r.accepted, r.outside, r.malformed) == (1, 1, 1)


def test_universe_prefix_and_outside() -> None:
    p = LineParser(Universe.parse("ipv4:10.0.0.0/24"), "plain")
    r = p.parse(b"10.0.0.5\n10.0.1.5\n9.255.255.255\n10.0.0.255\n")
    assert r.indices.tolist() == [5, 255] and r.outside == 2


def test_slow_universes_and_field_format() -> None:
    u6 = Universe.parse("ipv6:2001:db8::/48@64")
    r = LineParser(u6, "clf").parse(b"2001:db8:0:5::1 - -\n2001:db9::1 - -\nzz - -\n\n")
    assert (r.indices.tolist(), r.outside, r.malformed, r.empty) == ([5], 1, 1, 1)
    h = LineParser(Universe.parse("hashed:1024"), "field:2").parse(b"a alice x\nb\nc bob\n")
    assert (h.accepted, h.malformed) == (2, 1)
    f = LineParser(Universe.parse("ipv4:0.0.0.0/0"), "field:3").parse(b"x y 1.2.3.4\nx y 01.2.3.4\n")
    assert (f.indices.tolist(), f.malformed) == ([0x01020304], 1)
    rg = LineParser(Universe.parse("range:100"), "plain").parse(b"5\n500\n-1\n")
    assert (rg.indices.tolist(), rg.outside + rg.malformed) == ([5], 2)


def test_format_detection_and_spec() -> None:
    assert detect_format(b"1.2.3.4\n\n5.6.7.8\n") == "plain"
    assert detect_format(b'1.2.3.4 - - [x] "GET /" 200 1\n') == "clf"
    assert parse_format("FIELD:2").spec == "field:2"


def test_reader_chunks_on_line_boundaries_and_cuts_overlong_to_its_head() -> None:
    lines = [b"%d.0.0.1" % (i % 256) for i in range(50_000)]
    data = b"\n".join(lines[:100]) + b"\n" + b"x" * 20_000 + b"\n" + b"\n".join(lines[100:])
    r = ChunkReader(io.BytesIO(data).readinto, chunk_size=8192, max_line=4096)
    chunks = [bytes(c) for c in r]
    assert all(c.endswith(b"\n") for c in chunks)
    # The over-long line keeps its first max_line + 1 bytes (so the parser still sees it is over-long
    # and can read a leading field); the rest of it is dropped, the buffer stays bounded.
    head = b"x" * 4097 + b"\n"
    assert b"".join(chunks) == b"\n".join(lines[:100]) + b"\n" + head + b"\n".join(lines[100:]) + b"\n"
    assert not hasattr(r, "overlong")  # no count of the data outlives its chunk (issue 10 §2)


def test_gzip_input(tmp_path) -> None:
    p = tmp_path / "a.log.gz"
    with gzip.open(p, "wb") as f:
        f.write(b"1.2.3.4\n5.6.7.8")
    with open_input(str(p)) as inp:
        assert b"".join(bytes(c) for c in inp.reader) == b"1.2.3.4\n5.6.7.8\n"


def test_vectorized_formatter_matches_ipaddress_and_round_trips() -> None:
    from panstream.inputs.parser import format_ipv4_lines

    v = np.array([0, 1, 9, 10, 99, 100, 255, 0x0A0B0C0D, 2**32 - 1], dtype=np.uint32)
    text = format_ipv4_lines(v)
    assert text.decode().split() == [str(ipaddress.IPv4Address(int(x))) for x in v]
    assert parse_ipv4(text)[0].tolist() == v.tolist()
