"""The IPv6 reader's first pass in C gives what its NumPy reference gives, token by token.

Issue 38: the first pass of the IPv6 reader (:func:`panstream.inputs.ipv6._tokens`) reads every
token that is only hex digits and colons. Its NumPy form, :func:`panstream.inputs.ipv6._hex_words`,
makes dozens of passes over the 64-byte windows; the optional C kernel ``panstream.inputs._v6``
reads each token once. The kernel must change no result: for every token it returns the same
``ok`` (accepted or refused by glibc's ``inet_pton`` rules), the same ``canon`` (the token is the
address's RFC 5952 text, which the sketch hashes as it stands), the same key ``hi, lo`` wherever
the token is accepted (0 where it is not: NumPy's keys there are unspecified), and with
``text_only`` the same key 0 for the RFC 5952 tokens that are not IPv4-mapped.

The tests hold the two to each other on every spelling the fast/slow agreement tests of
``test_ipv6_fast.py`` use, then on a fuzzed corpus of 240,000 tokens (random addresses written
every way: RFC 5952, full, leading zeros, upper case, ``::`` over any run of words, too many and
too few groups, five-digit groups, stray bytes, random strings, every length from 0 to 64). They
check what the kernel refuses (buffers of the wrong type or shape: an error, never a crash, and
nothing written), that no byte past a token changes its answer and no input changes, and that
panstream falls back to NumPy where the kernel is not built or ``PANSTREAM_NATIVE=0``. The fuzz
draws test data from a seeded generator, never a privacy draw. No test here is statistical.
"""

from __future__ import annotations

import random
import sys

import numpy as np
import pytest

from panstream import _moved
from panstream.inputs import ipv6
from panstream.inputs.ipv6 import _hex_words
from panstream.inputs.scan import windows
from tests.parse.test_ipv6_fast import (
    PRESTO_TEXT,
    _canonical_spellings,
    _every_compression,
    corpus,
)

SEED = 20261129  # test data only
WIDTH = 64  # the reader's window


@pytest.fixture
def kernel() -> object:
    """The C kernel; tests that need it are skipped where it is not built."""
    if ipv6._native is None:
        pytest.skip("the C kernel panstream.inputs._v6 is not built (or PANSTREAM_NATIVE=0)")
    return ipv6._native


def as_windows(tokens: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """The tokens' 64-byte windows, as the reader gathers them, and their lengths. The tokens lie
    back to back, so the bytes past each token are the next tokens (hex digits and colons)."""
    buf = b"".join(tokens)
    lens = np.array([len(t) for t in tokens], dtype=np.intp)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.intp)
    return windows(np.frombuffer(buf, dtype=np.uint8), starts, WIDTH), lens


def by_kernel(kernel: object, w: np.ndarray, tlen: np.ndarray, text_only: bool
              ) -> tuple[np.ndarray, ...]:
    n = tlen.size
    out = (np.full(n, 7, dtype=np.uint64), np.full(n, 7, dtype=np.uint64),
           np.full(n, True), np.full(n, True))
    kernel.hex_words(w, tlen, *out, text_only)  # type: ignore[attr-defined]
    return out


def assert_agree(kernel: object, tokens: list[bytes], text_only: bool) -> tuple[int, int]:
    """The kernel against ``_hex_words(w, tlen, 0, fields=8, canon=True, text_only=...)`` on
    ``tokens``; returns how many were accepted and how many are RFC 5952 text."""
    w, tlen = as_windows(tokens)
    zero = np.zeros(tlen.size, dtype=np.intp)
    want_hi, want_lo, want_ok, want_canon = _hex_words(w, tlen, zero, fields=8, canon=True,
                                                       text_only=text_only)
    hi, lo, ok, canon = by_kernel(kernel, w, tlen, text_only)

    def first(bad: np.ndarray) -> list[bytes]:
        return [tokens[i] for i in np.flatnonzero(bad)[:10]]

    assert want_canon is not None
    assert (ok == want_ok).all(), first(ok != want_ok)
    assert (canon == want_canon).all(), first(canon != want_canon)
    assert (hi[ok] == want_hi[ok]).all() and (lo[ok] == want_lo[ok]).all(), \
        first(ok & ((hi != want_hi) | (lo != want_lo)))
    assert not hi[~ok].any() and not lo[~ok].any()  # a refused token's key is 0
    return int(ok.sum()), int(canon.sum())


def spellings() -> list[bytes]:
    """Every token of the fast/slow agreement tests: the review's 21 spellings and the held-out
    ones, the junk, the fuzz, every ``::`` choice, the canonical spellings and Presto's table."""
    toks = corpus(6000) + _every_compression(3000) + _canonical_spellings(3000)
    toks += [s for pair in PRESTO_TEXT for s in pair] + ["::", "::1", "1::", ":::", ":", ""]
    toks += ["1:2:3:4:5:6:7::", "::1:2:3:4:5:6:7", "1:2:3:4:5:6:7:8:9", "::ffff:1:2",
             "::FFFF:1:2", "::ffff:0:0", "0:0:0:0:0:ffff:1:2"]
    return [t.encode("utf-8") for t in toks if len(t.encode("utf-8")) <= WIDTH]


@pytest.mark.parametrize("text_only", [False, True])
def test_the_kernel_reads_every_spelling_of_the_agreement_tests_as_numpy_does(kernel, text_only):
    accepted, rfc = assert_agree(kernel, spellings(), text_only)
    assert accepted > 5000 and rfc > 3000  # (the corpus exercises both answers)


# ------------------------------------------------------------------------------------- the fuzz


def _rfc5952(words: list[int]) -> str:
    """The RFC 5952 text of eight words (the longest run of two or more zero words compressed,
    the first of equal runs), in hex even for an IPv4-mapped address."""
    best, blen, j = 0, 0, 0
    while j < 8:
        k = j
        while k < 8 and words[k] == 0:
            k += 1
        if k - j > blen:
            best, blen = j, k - j
        j = max(k, j + 1)
    hexes = [f"{v:x}" for v in words]
    if blen < 2:
        return ":".join(hexes)
    return ":".join(hexes[:best]) + "::" + ":".join(hexes[best + blen:])


def _group(r: random.Random, v: int) -> str:
    """One word as a log may write it: plain, with leading zeros, with five digits, any case."""
    t = f"{v:x}"
    u = r.random()
    if u < 0.2:
        t = "0" * r.randint(0, 4 - len(t)) + t
    elif u < 0.25:
        t = "0" * (5 - len(t)) + t  # a five-digit group: refused
    if r.random() < 0.1:
        t = t.upper()
    elif r.random() < 0.05:
        t = "".join(c.upper() if r.random() < 0.5 else c for c in t)
    return t


def _address(r: random.Random) -> list[int]:
    """Eight words with runs of zeros (so ``::`` has runs to choose from); some IPv4-mapped,
    some all zero."""
    words = [r.getrandbits(16) for _ in range(8)]
    for j in range(8):
        if r.random() < 0.4:
            words[j] = 0
    u = r.random()
    if u < 0.05:
        words[:6] = [0, 0, 0, 0, 0, 0xFFFF]
    elif u < 0.07:
        words = [0] * 8
    return words


STRAY = [ord(c) for c in ":.[]%gGxX-/ "] + list(range(256))


def fuzz_token(r: random.Random) -> bytes:
    """One token of the fuzz."""
    words = _address(r)
    style = r.random()
    if style < 0.25:
        tok = _rfc5952(words)
    elif style < 0.4:
        tok = ":".join(_group(r, v) for v in words)  # full, maybe leading zeros, case, five digits
    elif style < 0.7:  # '::' over any run of words [a, e): zero or not, empty to all eight
        a = r.randint(0, 8)
        e = r.randint(a, 8)
        groups = [_group(r, v) for v in words]
        tok = ":".join(groups[:a]) + "::" + ":".join(groups[e:])
    elif style < 0.85:  # too many or too few groups, with or without '::'
        groups = [_group(r, v) for v in words]
        if r.random() < 0.5:
            groups += [_group(r, r.getrandbits(16)) for _ in range(r.randint(1, 3))]
        else:
            del groups[r.randrange(8):][: r.randint(1, 3)]
        tok = ":".join(groups)
        if r.random() < 0.5:
            i = r.randint(0, len(tok))
            tok = tok[:i] + r.choice([":", "::", ":::"]) + tok[i:]
    else:  # a random string of hex digits and colons, any length from 0 to 64
        tok = "".join(r.choice("0123456789abcdefABCDEF:::::") for _ in range(r.randint(0, 64)))
    raw = bytearray(tok.encode())
    if r.random() < 0.15 and raw:  # a stray byte: replaced, inserted or dropped
        i = r.randrange(len(raw))
        u = r.random()
        if u < 0.4:
            raw[i] = r.choice(STRAY)
        elif u < 0.8:
            raw.insert(i, r.choice(STRAY))
        else:
            del raw[i]
    if r.random() < 0.05:  # cut or padded to any length from 0 to 64
        n = r.randint(0, WIDTH)
        raw = (raw + bytearray(b"1:" * WIDTH))[:n]
    return bytes(raw[:WIDTH])


def fuzz(n: int) -> list[bytes]:
    r = random.Random(SEED)
    return [fuzz_token(r) for _ in range(n)]


@pytest.fixture(scope="module")
def fuzzed() -> list[bytes]:
    return fuzz(240_000)


def test_the_fuzz_covers_what_it_says(fuzzed):
    """Every length from 0 to 64, upper case, leading zeros, stray bytes, and many tokens
    accepted and refused (the agreement below is not won by refusing everything)."""
    lens = {len(t) for t in fuzzed}
    assert lens == set(range(WIDTH + 1))
    assert sum(b"::" in t for t in fuzzed) > 50_000
    assert sum(any(65 <= c <= 70 for c in t) for t in fuzzed) > 20_000
    assert sum(any(c not in b"0123456789abcdefABCDEF:" for c in t) for t in fuzzed) > 20_000


@pytest.mark.parametrize("text_only", [False, True])
def test_the_kernel_reads_a_fuzzed_corpus_as_numpy_does(kernel, fuzzed, text_only):
    """240,000 tokens: all outputs equal, both ways the sketch and the tables read."""
    accepted, rfc = assert_agree(kernel, fuzzed, text_only)
    assert accepted > 80_000 and rfc > 40_000 and len(fuzzed) - accepted > 80_000


def test_the_sketch_reading_leaves_only_the_rfc5952_keys_zero(kernel, fuzzed):
    """``text_only``: the key of an RFC 5952 token that is not IPv4-mapped is 0 (its text stands
    for it); every other accepted token keeps its key."""
    w, tlen = as_windows(fuzzed)
    full = by_kernel(kernel, w, tlen, False)
    text = by_kernel(kernel, w, tlen, True)
    assert (full[2] == text[2]).all() and (full[3] == text[3]).all()
    mapped = (full[0] == 0) & (full[1] >> np.uint64(32) == 0xFFFF)
    zeroed = full[3] & ~mapped
    assert zeroed.sum() > 40_000
    assert not text[0][zeroed].any() and not text[1][zeroed].any()
    keep = full[2] & ~zeroed
    assert (text[0][keep] == full[0][keep]).all() and (text[1][keep] == full[1][keep]).all()


# --------------------------------------------------------------------- what the kernel refuses


def test_no_byte_past_a_token_changes_its_answer_and_no_input_changes(kernel):
    """The same tokens in windows whose bytes past each token differ (zeros, colons, hex digits,
    every byte value; the kernel reads a row's first 48 bytes at once): the same outputs; windows
    and lengths as they were."""
    toks = spellings()
    w, tlen = as_windows(toks)
    rng = np.random.default_rng(SEED)  # test data
    past = np.arange(WIDTH)[None, :] >= tlen[:, None]
    answers = []
    for fill in (0, ord(":"), ord("f"), None):
        w2 = w.copy()
        w2[past] = rng.integers(0, 256, int(past.sum())) if fill is None else fill
        before, lens = w2.copy(), tlen.copy()
        answers.append(by_kernel(kernel, w2, tlen, False))
        assert (w2 == before).all() and (tlen == lens).all()
    for a in answers[1:]:
        for x, y in zip(a, answers[0], strict=True):
            assert (x == y).all()


def test_an_empty_batch(kernel):
    hi, lo, ok, canon = by_kernel(kernel, np.zeros((0, WIDTH), dtype=np.uint8),
                                  np.zeros(0, dtype=np.intp), True)
    assert hi.size == lo.size == ok.size == canon.size == 0


def test_wrong_buffers_raise_and_nothing_is_written(kernel):
    """Buffers of another type, shape, byte order or layout, read-only outputs: TypeError;
    lengths that disagree or windows too narrow: ValueError. The outputs are untouched."""
    w, tlen = as_windows([b"2001:db8::1", b"::1", b"x"])
    n = tlen.size

    def outs():
        return [np.full(n, 7, dtype=np.uint64), np.full(n, 7, dtype=np.uint64),
                np.full(n, True), np.full(n, True)]

    frozen = np.zeros(n, dtype=np.uint64)
    frozen.flags.writeable = False
    swapped = tlen.astype(np.dtype(np.int64).newbyteorder())
    wrong_type = [
        (w.astype(np.int16), tlen, None), (w.reshape(-1), tlen, None),  # not 2-D uint8
        (np.asfortranarray(np.zeros((n, WIDTH), np.uint8))[:, :40], tlen, None),  # not contiguous
        (w, tlen.astype(np.int32), None), (w, tlen.astype(np.float64), None), (w, swapped, None),
        (w, np.arange(2 * n, dtype=np.intp)[::2], None),
        (w, tlen, 0), (w, tlen, 2), (w, tlen, 3),  # an output of another dtype
        (w, tlen, "frozen"), ("not a buffer", tlen, None),
    ]
    for ww, tl, bad in wrong_type:
        o = outs()
        if bad == "frozen":
            o[0] = frozen
        elif bad is not None:
            o[bad] = o[bad].astype(np.float64 if bad < 2 else np.int32)
        with pytest.raises(TypeError):
            kernel.hex_words(ww, tl, *o, False)
        if bad is None:
            assert all((x == 7).all() if x.dtype != bool else x.all() for x in o)
    for ww, tl, o in ((w, tlen[:2], outs()), (w, tlen, [x[:2] for x in outs()]),
                      (np.ascontiguousarray(w[:, :38]), tlen, outs())):
        keep = [x.copy() for x in o]
        with pytest.raises(ValueError):
            kernel.hex_words(ww, tl, *o, False)
        assert all((x == y).all() for x, y in zip(o, keep, strict=True))
    with pytest.raises(TypeError):
        kernel.hex_words(w, tlen, *outs())  # text_only missing


# ------------------------------------------------------------------------- where a token ends


@pytest.mark.parametrize("width", [64, 48, 8])
def test_the_kernel_finds_where_each_token_ends_as_numpy_does(kernel, width):
    """``first_blank``: the first byte at or below the space in each row (64 if none), as
    ``_ctz64(_mask64(w <= 32))``: rows of every byte value, with blanks rare, common or absent,
    at every position."""
    rng = np.random.default_rng(SEED + 1)  # test data
    rows = []
    for p_blank in (0.0, 0.005, 0.05, 0.5):
        w = rng.integers(33, 256, size=(20_000, width), dtype=np.uint8)
        blank = rng.random(w.shape) < p_blank
        w[blank] = rng.integers(0, 33, int(blank.sum()), dtype=np.uint8)
        rows.append(w)
    w = np.concatenate(rows + [np.zeros((1, width), np.uint8), np.full((1, width), 32, np.uint8)])
    for i in range(width):  # one blank at each position
        r = np.full((1, width), ord("f"), np.uint8)
        r[0, i] = 10
        w = np.concatenate([w, r])
    out = np.full(w.shape[0], -1, dtype=np.intp)
    kernel.first_blank(w, out)
    want = ipv6._ctz64(ipv6._mask64(w <= 32))
    assert out.tolist() == want.tolist()
    assert set(out.tolist()) == set(range(width)) | {64}


def test_first_blank_refuses_what_it_cannot_read(kernel):
    """Windows not 2-D uint8 or not contiguous, an output not int64, not contiguous or
    read-only: TypeError; rows over 64 bytes or an output of another length: ValueError."""
    w = np.zeros((3, 64), dtype=np.uint8)
    out = np.full(3, -1, dtype=np.intp)
    frozen = out.copy()
    frozen.flags.writeable = False
    for bad_w, bad_out in ((w.reshape(-1), out), (w.view(np.int16), out), (w[:, ::2], out),
                           (w, out.astype(np.int32)), (w, np.full(6, -1, np.intp)[::2]),
                           (w, frozen)):
        with pytest.raises(TypeError):
            kernel.first_blank(bad_w, bad_out)
    for bad_w, bad_out in ((np.zeros((3, 72), dtype=np.uint8), out), (w, out[:2])):
        with pytest.raises(ValueError):
            kernel.first_blank(bad_w, bad_out)
    assert (out == -1).all()


# ---------------------------------------------------------------------------------- the fallback


def test_without_the_kernel_panstream_reads_ipv6_with_numpy(monkeypatch):
    """The extension missing (its import fails) or switched off by ``PANSTREAM_NATIVE=0`` (for
    both kernels): none is loaded, and the first pass is ``_hex_words``, with the same clients."""
    monkeypatch.setitem(sys.modules, "panstream.inputs._v6", None)  # the import fails
    assert _moved.optional_extension("panstream.inputs._v6") is None
    monkeypatch.delitem(sys.modules, "panstream.inputs._v6")
    monkeypatch.setenv("PANSTREAM_NATIVE", "0")
    assert _moved.optional_extension("panstream.inputs._v6") is None
    assert _moved.optional_extension("panstream.estimators._packed") is None
    monkeypatch.delenv("PANSTREAM_NATIVE")

    data = b"".join(t + b"\n" for t in spellings())
    with_kernel = ipv6.address_lines(data, "plain", 4096)
    w, _ = as_windows(spellings())
    blanks = ipv6._first_blank(w)
    monkeypatch.setattr(ipv6, "_native", None)
    without = ipv6.address_lines(data, "plain", 4096)
    assert without[1].tolist() == with_kernel[1].tolist() and without[2:5] == with_kernel[2:5]
    assert [x.tolist() for x in without[5].arrays()] == [x.tolist() for x in with_kernel[5].arrays()]
    assert ipv6._first_blank(w).tolist() == blanks.tolist()


def test_arrays_the_kernel_does_not_take_go_to_numpy(kernel):
    """Lengths of another dtype (the kernel's TypeError): ``_first_pass`` answers with NumPy."""
    w, tlen = as_windows(spellings())
    want = ipv6._first_pass(w, tlen, False)
    got = ipv6._first_pass(w, tlen.astype(np.int32), False)
    ok = want[2]
    assert (got[2] == ok).all() and (got[3] == want[3]).all()
    assert (got[0][ok] == want[0][ok]).all() and (got[1][ok] == want[1][ok]).all()
