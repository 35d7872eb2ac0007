"""The vectorized IPv6 reader and writer agree with the one normalization, spelling by spelling.

Issue 38: IPv6 clients are read with NumPy (:mod:`panstream.inputs.ipv6`) instead of one line at a
time through :func:`panstream.inputs.normalize.address_key`, and the sketch writes their text from
the integers instead of ``socket.inet_ntop``. Neither may change a single result: the fast reader
accepts a token only when the reference would give the same key, and leaves every other token to
the reference. These tests read a fuzzed corpus of real spellings (the 21 of the privacy review,
mixed IPv4/IPv6, ports, brackets, zone ids, upper and lower case, leading zeros, every ``::``
choice, embedded dotted quads, and broken copies of all of them) both ways and compare, token by
token, line by line, in every line format. The fuzz uses NumPy's generator with a fixed seed: it
draws test data, never a privacy draw.
"""

from __future__ import annotations

import ipaddress
import json

import numpy as np
import pytest

from panstream.inputs import ipv6
from panstream.inputs.ipv4 import V6Keys, _address_lines, _line_bounds
from panstream.inputs.ipv6 import address_lines, address_spans, format_ipv6_lines, ipv6_text
from panstream.inputs.normalize import address_key, canonical_text
from panstream.inputs.parser import LineParser
from panstream.universe import Universe
from tests.core.test_address_spellings import HELD_OUT, JUNK, SPELLINGS

SEED = 20261129  # test data only


@pytest.fixture(autouse=True, params=["kernel", "numpy"])
def first_pass(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test on both paths of the first pass (:func:`panstream.inputs.ipv6._first_pass`): the
    C kernel, skipped where it is not built, and ``_hex_words`` (the kernel switched off)."""
    if request.param == "numpy":
        monkeypatch.setattr(ipv6, "_native", None)
    elif ipv6._native is None:
        pytest.skip("the C kernel panstream.inputs._v6 is not built (or PANSTREAM_NATIVE=0)")
    return str(request.param)


def _spell_v6(rng: np.random.Generator, key: int) -> str:
    """One way a log may write the IPv6 address ``key``: any case, any leading zeros, any run of
    zero words compressed (or none), the last two words maybe as a dotted quad."""
    words = [(key >> (16 * (7 - j))) & 0xFFFF for j in range(8)]
    quad = rng.random() < 0.15
    n = 6 if quad else 8
    texts = []
    for v in words[:n]:
        t = f"{v:x}"
        t = "0" * int(rng.integers(0, 5 - len(t))) + t if rng.random() < 0.3 else t
        texts.append(t.upper() if rng.random() < 0.2 else t)
    if quad:
        texts.append(str(ipaddress.IPv4Address(key & 0xFFFFFFFF)))
    zeros = [j for j in range(n) if words[j] == 0]
    if zeros and rng.random() < 0.8:  # compress some run of zero words
        a = int(rng.choice(zeros))
        b = a
        while b + 1 < n and words[b + 1] == 0 and rng.random() < 0.9:
            b += 1
        left, right = ":".join(texts[:a]), ":".join(texts[b + 1:])
        return f"{left}::{right}"
    return ":".join(texts)


def _dress(rng: np.random.Generator, addr: str, v6: bool) -> str:
    """The address as a log writes a client: maybe a zone id, brackets, a port."""
    r = rng.random()
    if v6:
        zone = f"%{rng.choice(['eth0', 'en0', '25', 'wlan0', 'x:y'])}" if rng.random() < 0.1 else ""
        if r < 0.15:
            return f"[{addr}{zone}]:{int(rng.integers(0, 65536))}"
        if r < 0.2:
            return f"[{addr}{zone}]"
        return addr + zone
    if r < 0.2:
        return f"{addr}:{int(rng.integers(0, 65536))}"
    if r < 0.3:
        return f"::{rng.choice(['ffff', 'FFFF', 'ffFF'])}:{addr}"
    return addr


def _break(rng: np.random.Generator, token: str) -> str:
    """A broken copy: one character dropped, doubled, or replaced."""
    if not token:
        return ":"
    i = int(rng.integers(0, len(token)))
    r = rng.random()
    if r < 0.3:
        return token[:i] + token[i + 1:]
    if r < 0.6:
        return token[:i] + token[i] + token[i:]
    c = str(rng.choice(list(":.[]%0fFgx9 ") + ["::", "\u00e9"]))
    return token[:i] + c + token[i + 1:]


def corpus(n: int = 6000) -> list[str]:
    """The review's spellings, then ``n`` fuzzed ones (a third broken)."""
    rng = np.random.default_rng(SEED)
    out = [s for _, group in SPELLINGS + HELD_OUT for s in group] + list(JUNK)
    for _ in range(n):
        kind = rng.random()
        if kind < 0.3:
            a = int(rng.integers(0, 1 << 32))
            tok = _dress(rng, str(ipaddress.IPv4Address(a)), v6=False)
        else:
            hi = int(rng.integers(0, 1 << 63)) << 1 | int(rng.integers(0, 2))
            lo = int(rng.integers(0, 1 << 63)) << 1 | int(rng.integers(0, 2))
            key = hi << 64 | lo
            mask = int(rng.integers(0, 256))  # zero some words, so '::' has runs to choose from
            for j in range(8):
                if mask >> j & 1 and rng.random() < 0.6:
                    key &= ~(0xFFFF << (16 * j))
            if rng.random() < 0.1:
                key = 0xFFFF << 32 | (key & 0xFFFFFFFF)  # IPv4-mapped, written in hex
            tok = _dress(rng, _spell_v6(rng, key), v6=True)
        if rng.random() < 0.33:
            tok = _break(rng, tok)
        out.append(tok)
    return out


def _fast_keys(tokens: list[bytes]) -> tuple[dict[int, int], set[int]]:
    """Key per token index from the vectorized span reader, and the indices it left alone."""
    buf = b"\n".join(tokens) + b"\n"
    b = np.frombuffer(buf, dtype=np.uint8)
    starts, ends = _line_bounds(b)
    v6 = V6Keys()
    addr, ok, done = address_spans(b, starts, ends, v6)
    hi, lo = v6.arrays()
    six = iter(zip(hi.tolist(), lo.tolist(), strict=True))
    keys: dict[int, int] = {}
    for i in range(len(tokens)):
        if ok[i]:
            keys[i] = 0xFFFF << 32 | int(addr[i])
        elif done[i]:
            h, x = next(six)
            keys[i] = h << 64 | x
    return keys, {i for i in range(len(tokens)) if not done[i]}


def test_the_fast_reader_gives_the_reference_key_for_every_token_it_reads():
    tokens = [t.encode("utf-8") for t in corpus()]
    keys, left = _fast_keys(tokens)
    for i, t in enumerate(tokens):
        if i in keys:
            assert keys[i] == address_key(t), t
    # It reads the real spellings, not only the plain ones: every well-formed IPv6 token of the
    # review's table, and nearly all of the fuzz's well-formed ones.
    review = [s.encode() for _, g in SPELLINGS + HELD_OUT for s in g]
    rk, rleft = _fast_keys(review)
    assert not rleft, [review[i] for i in sorted(rleft)]
    good = [i for i, t in enumerate(tokens) if address_key(t) is not None]
    assert len(left & set(good)) <= 0.01 * len(good), [tokens[i] for i in sorted(left & set(good))][:20]


@pytest.mark.parametrize("fmt", ["plain", "clf"])
def test_each_spelling_alone_in_a_chunk(fmt):
    """A chunk of one line (the windows run past the buffer's end) reads as the reference does."""
    tail = " - - [29/Nov/2026:06:00:00 +0000] \"GET / HTTP/1.1\" 200 612" if fmt == "clf" else ""
    for tok in [s for _, g in SPELLINGS + HELD_OUT for s in g] + JUNK + ["::", "::1", "1::"]:
        data = (tok + tail).encode()
        fast, slow = address_lines(data, fmt, 4096), _address_lines(data, fmt, 4096)
        assert fast[1].tolist() == slow[1].tolist() and fast[2:5] == slow[2:5], tok
        assert [x.tolist() for x in fast[5].arrays()] == [x.tolist() for x in slow[5].arrays()], tok


@pytest.mark.parametrize("max_line", [4096, 24])
@pytest.mark.parametrize("fmt", ["plain", "clf"])
def test_lines_read_fast_and_slow_give_the_same_clients(fmt, max_line):
    """Whole lines: the two-family reader against the IPv4-only one (every IPv6 line through the
    reference), same IPv4 clients, same IPv6 keys, same counts of empty and malformed lines; also
    when only the head of a line is read (``max_line`` shorter than an address)."""
    toks = corpus(4000)
    tail = ' - - [29/Nov/2026:06:00:00 +0000] "GET / HTTP/1.1" 200 612' if fmt == "clf" else ""
    lines = [t + tail for t in toks] + ["", "   ", "\t"]
    data = ("\n".join(lines) + "\n").encode("utf-8")
    fast = address_lines(data, fmt, max_line)
    slow = _address_lines(data, fmt, max_line)
    assert fast[2:5] == slow[2:5]
    assert fast[1].tolist() == slow[1].tolist()
    assert fast[0][fast[1]].tolist() == slow[0][slow[1]].tolist()
    fh, fl = fast[5].arrays()
    sh, sl = slow[5].arrays()
    assert sorted(zip(fh.tolist(), fl.tolist(), strict=True)) == \
        sorted(zip(sh.tolist(), sl.tolist(), strict=True))


@pytest.mark.parametrize("fmt,line", [
    ("alb", lambda t: f"https 2026-11-24T10:00:00.000Z app/lb/5 {t} 10.1.0.9:80 0.000 0.001 0.000 "
                      '200 200 34 366 "GET https://example.com:443/ HTTP/1.1"'),
    ("json:client", lambda t: json.dumps({"client": t, "x": 1}, ensure_ascii=False)),
    ("field:2", lambda t: f"- {t} -"),
])
def test_every_format_counts_the_same_clients_as_the_reference(fmt, line):
    """The span formats: cells in the IPv6 and IPv4 universes equal those of the tokens read one
    by one with the reference."""
    toks = [t for t in corpus(2000) if '"' not in t and "\\" not in t and " " not in t]
    data = ("\n".join(line(t) for t in toks) + "\n").encode("utf-8")
    for spec in ("ipv6:::/0@24", "ipv6:2000::/3@32", "ipv4:0.0.0.0/1", "hashed-ip:65536"):
        u = Universe.parse(spec)
        got = LineParser(u, fmt).parse(data)
        ref = u.indices([t.encode("utf-8") for t in toks])
        assert sorted(got.indices.tolist()) == sorted(ref.indices.tolist()), spec
        assert got.outside == ref.outside


def test_the_text_of_an_ipv6_key_is_the_reference_text():
    """RFC 5952 from tables, bit for bit what :func:`canonical_text` (inet_ntop) writes, over
    random keys with every pattern of zero words, and the edge cases."""
    rng = np.random.default_rng(SEED + 1)
    keys = [0, 1, (1 << 128) - 1, 0x20010DB8 << 96 | 1, 1 << 112, 0xFFFF, 0x10000,
            0x20010DB8000000010000000000000001, 0x20010DB8000000000001000000000001,
            0x00010000000000000000000000000000, 0x00000000000100000000000000000000]
    for mask in range(256):
        for _ in range(8):
            k = int(rng.integers(0, 1 << 63)) << 65 | int(rng.integers(0, 1 << 63)) << 2
            k |= int(rng.integers(0, 4))
            for j in range(8):
                if mask >> j & 1:
                    k &= ~(0xFFFF << (16 * (7 - j)))
            keys.append(k)
    keys = [k for k in keys if k >> 32 != 0xFFFF]  # IPv4 clients are written dotted elsewhere
    hi = np.array([k >> 64 for k in keys], dtype=np.uint64)
    lo = np.array([k & (2**64 - 1) for k in keys], dtype=np.uint64)
    rows, n = ipv6_text(hi, lo)
    for i, k in enumerate(keys):
        assert rows[i, : n[i]].tobytes() == canonical_text(k), hex(k)
        assert not rows[i, n[i]:].any()
    assert format_ipv6_lines(hi, lo) == b"".join(canonical_text(k) + b"\n" for k in keys)


#: Guava's ``InetAddresses.toAddrString`` (what Presto's ``CAST(ipaddress AS varchar)`` calls for
#: an IPv6 address): the expectations of Guava's own ``InetAddressesTest.testToAddrStringIPv6``,
#: then two of ours.
PRESTO_TEXT = [
    ("1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8"),
    ("2001:0:0:4:0:0:0:8", "2001:0:0:4::8"),
    ("2001:0:0:4:5:6:7:8", "2001::4:5:6:7:8"),
    ("2001:0:3:4:5:6:7:8", "2001:0:3:4:5:6:7:8"),
    ("0:0:3:0:0:0:0:ffff", "0:0:3::ffff"),
    ("0:0:0:4:0:0:0:ffff", "::4:0:0:0:ffff"),
    ("0:0:0:0:5:0:0:ffff", "::5:0:0:ffff"),
    ("1:0:0:4:0:0:7:8", "1::4:0:0:7:8"),
    ("0:0:0:0:0:0:0:0", "::"),
    ("0:0:0:0:0:0:0:1", "::1"),
    ("2001:0658:022a:cafe::", "2001:658:22a:cafe::"),
    ("::1.2.3.4", "::102:304"),
    ("3ffe::1", "3ffe::1"),
    ("2A00:1450:4001:82A:0:0:0:200E", "2a00:1450:4001:82a::200e"),
]


@pytest.mark.parametrize("spelled,presto", PRESTO_TEXT)
def test_the_text_is_what_presto_prints(spelled, presto):
    k = address_key(spelled)
    rows, n = ipv6_text(np.array([k >> 64], dtype=np.uint64),
                        np.array([k & (2**64 - 1)], dtype=np.uint64))
    assert rows[0, : n[0]].tobytes().decode() == presto == canonical_text(k).decode()


@pytest.mark.parametrize("spec", ["ipv6:2001:db8::/32@64", "ipv6:::/0@32", "ipv6:2001:db8::/96@128",
                                  "ipv6:2001:db8:0:0:8000::/65@80", "ipv6:2a01:4f8::/40@64",
                                  "ipv6:2001:db8::1/128@128"])
def test_ipv6_cells_are_the_prefix_below_the_network(spec):
    """The ``ipv6`` universe maps whole arrays of keys (issue 38: it was one Python int each):
    the cell is the key's ``granularity``-bit prefix less the network's, for the keys inside."""
    u = Universe.parse(spec)
    shift = 128 - u._granularity
    net = u._base << shift
    rng = np.random.default_rng(SEED + 2)
    keys = [net, net | ((1 << (128 - u._prefix)) - 1), (1 << 128) - 1, 0]
    for _ in range(2000):  # near the network: flip some of its low bits
        keys.append(net ^ (int(rng.integers(0, 1 << 63)) << 65 | int(rng.integers(0, 1 << 63)))
                    >> int(rng.integers(0, 129)))
    hi = np.array([k >> 64 for k in keys], dtype=np.uint64)
    lo = np.array([k & (2**64 - 1) for k in keys], dtype=np.uint64)
    want = [c for c in ((k >> shift) - u._base for k in keys) if 0 <= c < u.size]
    assert u._ipv6_cells(hi, lo).tolist() == want
    assert want  # (the network itself is inside)


def _canonical_spellings(n: int) -> list[str]:
    """RFC 5952 text of random keys with every pattern of zero words: how servers log IPv6."""
    rng = np.random.default_rng(SEED + 3)
    out = [presto for _, presto in PRESTO_TEXT if address_key(presto) >> 32 not in (0, 0xFFFF)]
    while len(out) < n:
        k = int(rng.integers(0, 1 << 63)) << 65 | int(rng.integers(0, 1 << 63)) << 2 | 1
        for j in range(8):
            if rng.random() < 0.35:
                k &= ~(0xFFFF << (16 * j))
        if k >> 32 not in (0, 0xFFFF):
            out.append(canonical_text(k).decode())
    return out


@pytest.mark.parametrize("reader", ["lines", "spans"])
def test_a_token_carries_its_text_only_when_it_is_the_rfc5952_text(reader):
    """Issue 38: a token the log already wrote as RFC 5952 text hands that text to the sketch
    (no text written again from the key). Over the fuzz (upper case, leading zeros, every ``::``
    choice, brackets, zones, dotted quads) and the canonical spellings servers log, read as CLF
    lines and as the spans other formats find: a text is carried only where it is exactly
    :func:`canonical_text` of the key, and every plain canonical token carries it."""
    canon = _canonical_spellings(3000)
    toks = [t for t in corpus(3000) if " " not in t] + canon
    if reader == "lines":
        data = "".join(f"{t} - - [29/Nov/2026:06:00:00 +0000] \"GET / HTTP/1.1\" 200 1\n" for t in toks)
        _, _, _, _, _, v6 = address_lines(data.encode(), "clf", 4096)
    else:
        b = np.frombuffer(("\n".join(toks) + "\n").encode(), dtype=np.uint8)
        starts, ends = _line_bounds(b)
        v6 = V6Keys()
        address_spans(b, starts, ends, v6)
    hi, lo, text = v6.take()
    assert text is not None
    rows, n = text
    carried = 0
    for i, (h, x) in enumerate(zip(hi.tolist(), lo.tolist(), strict=True)):
        if n[i]:
            assert rows[i, : n[i]].tobytes() == canonical_text(h << 64 | x)
            carried += 1
    assert carried >= len(canon)


@pytest.mark.parametrize("hashing", ["murmur3", "xxhash64-varchar"])
@pytest.mark.parametrize("fmt", ["clf", "plain"])
def test_the_sketch_cells_of_a_log_are_those_of_its_tokens_one_by_one(fmt, hashing):
    """Whatever path a token takes (its own text, text written from the key, the reference one
    line at a time), the sketch puts it in the cell of Presto's hash of its canonical text: the
    cells of a fuzzed log equal those of its tokens read one by one."""
    from panstream.estimators.sketch.sfm import SketchGrid

    toks = [t for t in corpus(3000) if " " not in t] + _canonical_spellings(2000)
    tail = ' - - [29/Nov/2026:06:00:00 +0000] "GET / HTTP/1.1" 200 612' if fmt == "clf" else ""
    data = ("\n".join(t + tail for t in toks) + "\n").encode("utf-8")
    grid = SketchGrid(4096, 24, "ip", hashing)
    got = LineParser(grid, fmt).parse(data)
    ref = grid._indices_repeated([t.encode("utf-8") for t in toks])  # canonical_item, one by one
    assert sorted(got.indices.tolist()) == sorted(ref.indices.tolist())
    assert got.malformed + got.empty == ref.malformed + ref.empty


@pytest.mark.parametrize("share_v4", [0.05, 0.5, 0.95])
@pytest.mark.parametrize("fmt", ["plain", "clf"])
def test_every_line_gives_the_reference_client(fmt, share_v4):
    """Line by line against the reference one token at a time (:func:`address_key`): the IPv4
    client of each line where there is one, the same IPv6 keys, the same malformed count; with
    few, half and most lines IPv4 (a chunk whose lines mostly lack a dot skips the IPv4 read of
    those lines, issue 38)."""
    rng = np.random.default_rng(SEED + 4)
    toks = [t for t in corpus(3000) if t and len(t.split()) == 1 and t.strip() == t]
    v4 = [t for t in toks if "." in t and ":" not in t]
    rest = [t for t in toks if not ("." in t and ":" not in t)]
    want4 = int(share_v4 * len(rest) / (1 - share_v4))
    pick = [v4[int(i)] for i in rng.integers(0, len(v4), size=want4)] + rest
    pick = [pick[int(i)] for i in rng.permutation(len(pick))]
    tail = ' - - [29/Nov/2026:06:00:00 +0000] "GET / HTTP/1.1" 200 612' if fmt == "clf" else ""
    data = ("\n".join(t + tail for t in pick) + "\n").encode("utf-8")
    addr, ok, lines, empty, malformed, v6 = address_lines(data, fmt, 4096)
    assert lines == len(pick)
    six, bad = [], 0
    for i, t in enumerate(pick):
        k = address_key(t.encode("utf-8"))
        if k is None:
            bad += 1
            assert not ok[i], t
        elif k >> 32 == 0xFFFF:
            assert ok[i] and int(addr[i]) == k & 0xFFFFFFFF, t
        else:
            assert not ok[i], t
            six.append(k)
    hi, lo = v6.arrays()
    assert sorted(int(h) << 64 | int(x) for h, x in zip(hi.tolist(), lo.tolist(), strict=True)) \
        == sorted(six)
    assert (malformed, empty) == (bad, 0)


def _every_compression(n: int) -> list[str]:
    """Keys with many zero words, each written every way lowercase hex without leading zeros
    allows: no ``::``, or ``::`` for any run of zero words (one word, a shorter run than the
    longest, the second of equal runs, a run that a ``0`` field touches): only one is RFC 5952
    text. IPv4-mapped keys (``::ffff:x:y``) among them."""
    rng = np.random.default_rng(SEED + 4)
    out: list[str] = []
    while len(out) < n:
        words = [int(w) for w in rng.integers(1, 1 << 16, size=8)]
        for j in range(8):
            if rng.random() < 0.5:
                words[j] = 0
        if rng.random() < 0.1:
            words[:6] = [0, 0, 0, 0, 0, 0xFFFF]
        hexes = [f"{w:x}" for w in words]
        out.append(":".join(hexes))
        for a in range(8):
            for e in range(a + 1, 9):
                if all(w == 0 for w in words[a:e]):
                    out.append(":".join(hexes[:a]) + "::" + ":".join(hexes[e:]))
    return out


@pytest.mark.parametrize("reader", ["lines", "spans"])
def test_the_sketch_reader_skips_only_the_decode(reader):
    """Issue 38: for the sketch (``text_only``), a token already in RFC 5952 text is not decoded
    (its text is what the sketch hashes; the key is left 0), told from the byte masks alone.
    Over every way of compressing zero words, the fuzz and the canonical spellings: the same
    IPv4 clients and counts as the full reader, the same texts carried, the same keys where no
    text is carried, and every carried text is the full reader's key's text."""
    toks = _every_compression(3000) + [t for t in corpus(3000) if " " not in t]
    toks += _canonical_spellings(1000)

    def read(text_only):
        if reader == "lines":
            data = "".join(f"{t} - - [29/Nov/2026:06:00:00 +0000] \"GET / HTTP/1.1\" 200 1\n"
                           for t in toks)
            a, ok, lines, empty, bad, v6 = address_lines(data.encode(), "clf", 4096, text_only)
            counts = (lines, empty, bad)
        else:
            b = np.frombuffer(("\n".join(toks) + "\n").encode(), dtype=np.uint8)
            starts, ends = _line_bounds(b)
            v6 = V6Keys()
            a, ok, done = address_spans(b, starts, ends, v6, text_only)
            counts = tuple(done.tolist())
        hi, lo, text = v6.take()
        assert text is not None
        return a[ok].tolist(), ok.tolist(), counts, hi.tolist(), lo.tolist(), text

    fa, fok, fc, fhi, flo, (frows, fn) = read(False)
    sa, sok, sc, shi, slo, (srows, sn) = read(True)
    assert (sa, sok, sc) == (fa, fok, fc)
    assert sn.tolist() == fn.tolist()
    skipped = 0
    for i, n in enumerate(fn.tolist()):
        if n:
            assert srows[i, :n].tobytes() == frows[i, :n].tobytes()
            assert srows[i, :n].tobytes() == canonical_text(fhi[i] << 64 | flo[i])
            skipped += (shi[i], slo[i]) == (0, 0)
        else:
            assert (shi[i], slo[i]) == (fhi[i], flo[i])
    assert skipped >= 1000
