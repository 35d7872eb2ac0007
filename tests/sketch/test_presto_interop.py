"""Presto compatibility, pinned with vectors from Presto's own code and tests.

* The hash: airlift's ``Murmur3Hash128`` (which Presto's ``SfmSketch.add`` calls) is Murmur3 x64 128
  with seed 0; SMHasher's verification code for that function is 0x6384BA69, and airlift's
  ``hash64(long)`` is by construction the hash of the value's 8 little-endian bytes.
* The grid: ``TestSfmSketch.testComputeIndex`` and ``testNumberOfTrailingZeros``.
* The format: Velox's ``SfmSketchTest.javaSerializationCompatibility`` holds a sketch serialized by
  Presto's Java ``SfmSketch`` (4096 ... here 256 buckets x 16 levels, epsilon 4) whose Java
  ``cardinality()`` is 927,499: we read it, count it the same, and write it back byte for byte.
"""

from __future__ import annotations

import base64
import struct
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from panstream.errors import StateError
from panstream.estimators.sketch import murmur3
from panstream.sketch import sfm

JAVA_SKETCH = base64.b64decode(
    "BwgAAAAQAAAAw8JDHvpqkj//AQAA77//////////////v///////////3////7//"
    "////////////3/////////////////////////////////v//+/+ff/////////"
    "f///v//+//////////////////////7//////3////v//////3////v/f//////"
    "///3////v///////v/f///////////////////////////////f///////v/////"
    "////f///////7////+////9///////////////v//////////////////////////"
    "////////////f////////////3//////////////7////+////////////////////"
    "3///////////////////////9///33///v///3////f//f//9//+//////r/3///"
    "///9//Dfz/e/++vvfV3W//qtq33z//a7///+/m3/fz7/1///1v5hmo/ayTcv3l3Vv"
    "XmnMr+t/B72YloTNgmBy7+IKv+mIBmaBwSO4GwxBMCwWChIoYSVFTAAIIhLylIEj"
    "mJLamBAAooMYLQgikgBAUACEAQYJUAmxMGAhDAoBJGgRgAkBCCCAABAAkIIAAAAA"
    "EQAYEECAQYACgAACEAAQEBAACCAgAAAAQgAAAAAKgAoERABAMAAQbABAAgADEAAQ"
    "IABQ=="
)


def test_murmur3_x64_128_passes_smhasher_verification() -> None:
    """Hash keys 0..i-1 with seed 256 - i for i < 256, hash the 256 digests with seed 0: the
    first four bytes, little-endian, are SMHasher's published 0x6384BA69."""
    key = bytes(range(256))
    digests = b"".join(sfm.murmur3_x64_128(key[:i], 256 - i) for i in range(256))
    final = sfm.murmur3_x64_128(digests, 0)
    assert int.from_bytes(final[:4], "little") == 0x6384BA69


def test_hash64_of_a_long_is_the_hash_of_its_little_endian_bytes() -> None:
    vals = np.array([0, 1, -1, 5, 1 << 62, -(1 << 63), 123_456_789], dtype=np.int64)
    as_bytes = [struct.pack("<q", int(v)) for v in vals]
    assert sfm.hash64_ints(vals).tolist() == sfm.hash64_bytes(as_bytes).tolist()
    assert [int(h) for h in sfm.hash64_bytes(as_bytes)] == [
        int.from_bytes(sfm.murmur3_x64_128(b)[:8], "little") for b in as_bytes]


def test_the_batched_string_path_equals_one_key_at_a_time() -> None:
    """Keys of every length 0..40 (one and several 16-byte blocks, every tail), out of order."""
    keys = [bytes((i * 7 + j) % 256 for j in range(n)) for i, n in
            enumerate([5, 0, 16, 17, 40, 8, 9, 15, 31, 32, 33, 5, 16, 1, 24, 39])]
    got = sfm.hash64_bytes(keys)
    want = [int.from_bytes(sfm.murmur3_x64_128(k)[:8], "little") for k in keys]
    assert [int(h) for h in got] == want


@pytest.mark.parametrize("bits", [6, 12, 18])
def test_bucket_and_level_follow_presto(bits: int) -> None:
    """TestSfmSketch: computeIndex(5 << (64 - b)) == 5; numberOfTrailingZeros(1 << i) ==
    min(i, 64 - b); the level is that, capped at precision - 1."""
    bucket, _ = sfm.bucket_level(np.array([5 << (64 - bits)], dtype=np.uint64), bits, 24)
    assert bucket.tolist() == [5]
    hashes = np.array([1 << i for i in range(63)], dtype=np.uint64)
    assert sfm.trailing_zeros(hashes, bits).tolist() == [min(i, 64 - bits) for i in range(63)]
    _, capped = sfm.bucket_level(hashes, bits, 24)
    assert capped.tolist() == [min(i, 64 - bits, 23) for i in range(63)]


def test_the_vector_file_holds_the_same_bytes() -> None:
    """``java-sfm-256x16-eps4.bin`` (used by the CLI tests) is this vector."""
    assert (Path(__file__).parent / "java-sfm-256x16-eps4.bin").read_bytes() == JAVA_SKETCH


def test_a_java_serialized_sketch_reads_counts_and_writes_back_byte_for_byte() -> None:
    sk = sfm.from_presto(JAVA_SKETCH)
    assert (sk.buckets, sk.levels) == (256, 16)
    assert sk.flip == 1 / (np.exp(4.0) + 1)  # Java's 1/(e^4 + 1): a sketch made at epsilon 4
    assert sk.cardinality() == 927_499  # Presto's and Velox's cardinality() of these bytes
    assert sfm.to_presto(sk) == JAVA_SKETCH


def test_presto_bitmaps_drop_trailing_zero_bytes_as_java_bitset_does() -> None:
    grid = bytearray(4096 * 24 // 8)
    grid[10] = 0b1000_0001  # bits 80 and 87: bucket 80 and 87 at level 0
    sk = sfm.PrestoSketch(12, 24, 0.25, bytes(grid))
    data = sfm.to_presto(sk)
    assert data[:21] == struct.pack("<biidi", 7, 12, 24, 0.25, 11)
    assert data[21:] == bytes(10) + b"\x81"
    assert sfm.from_presto(data) == sk


@pytest.mark.parametrize(("mutate", "match"), [
    (lambda d: b"\x06" + d[1:], "format tag 6"),
    (lambda d: d[:-1], "bitmap of"),
    (lambda d: d + b"\0", "bitmap of"),
    (lambda d: d[:9] + struct.pack("<d", 0.75) + d[17:], "flip probability"),
    (lambda d: d[:5] + struct.pack("<i", 70) + d[9:], "precision 70"),
    (lambda d: d[:10], "shorter"),
])
def test_damaged_presto_bytes_are_refused_with_a_reason(mutate, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(StateError, match=match):
        sfm.from_presto(mutate(JAVA_SKETCH))


def test_noiseless_cardinality_of_a_clear_sketch_is_close() -> None:
    """Presto's non-private sketches (flip probability 0): our Newton agrees with its behaviour
    (exactly 0 for an empty sketch, close to n for a clear sketch of n integers)."""
    grid = sfm.SketchGrid(4096, 24, "id")
    assert sfm.cardinality(np.zeros(24), 4096, 0.0) == 0
    cells = grid.indices(np.arange(100_000)).indices
    bits = np.zeros(grid.size, dtype=np.uint8)
    bits[cells] = 1
    ones = bits.reshape(24, 4096).sum(axis=1)
    assert abs(sfm.cardinality(ones, 4096, 0.0) - 100_000) < 5_000  # TestSfmSketch: within 5%


def test_merged_flip_probability_is_theorem_4_8() -> None:
    """TestSfmSketch.testMergedProbabilities, and our exact merge probabilities make a merged bit
    1 with probability 1 - r where either input was hit, r elsewhere (averaged over the flips)."""
    e1, e2 = 1.2, 3.4
    r1, r2 = 1 / (np.exp(e1) + 1), 1 / (np.exp(e2) + 1)
    star = sfm.merged_epsilon(e1, e2)
    assert abs(sfm.merge_flip_probability(r1, r2) - 1 / (np.exp(star) + 1)) < 1e-12
    assert sfm.merge_flip_probability(0.0, 0.1) == 0.1
    a, b = Fraction(1155094610, 1 << 32), Fraction(1, 8)
    probs = sfm.merge_probabilities(a, b)
    r = sfm.merge_flip_probability(a, b)
    for t1 in (0, 1):
        for t2 in (0, 1):
            pr1 = {1: 1 - a, 0: a} if t1 else {1: a, 0: 1 - a}
            pr2 = {1: 1 - b, 0: b} if t2 else {1: b, 0: 1 - b}
            one = sum(pr1[b1] * pr2[b2] * probs[(b1, b2)] for b1 in (0, 1) for b2 in (0, 1))
            assert one == (1 - r if t1 or t2 else r)


def test_addresses_are_written_one_canonical_way_before_hashing() -> None:
    grid = sfm.SketchGrid(4096, 24, "ip")
    same = ["10.0.0.1", " 10.0.0.1\n", "::ffff:10.0.0.1", b"10.0.0.1", 167772161]
    six = ["2001:db8::1", "2001:DB8:0:0:0:0:0:1", "2001:0db8::0001"]
    assert len(set(grid.indices(same).indices.tolist())) == 1
    assert len(set(grid.indices(six).indices.tolist())) == 1
    r = grid.indices(["nope", "", "10.0.0.256", "1.2.3.4"])
    assert (r.malformed, r.empty, r.indices.size) == (2, 1, 1)
    want = sfm.hash64_bytes([b"2001:db8::1"])  # the bytes Presto hashes for CAST(ip AS varchar)
    assert grid.indices(six[:1]).indices.tolist() == grid.cells_of_hashes(want).tolist()


def test_text_rows_with_the_rest_of_the_line_after_them_hash_as_the_text_alone() -> None:
    """Issue 38: the sketch hashes an IPv6 token straight from the log's 64-byte window when it
    is already RFC 5952 text, so the bytes after the text are the rest of the line; Murmur3 with
    ``padded=False`` leaves them out (every length 0..47, every tail, garbage after it)."""
    rng = np.random.default_rng(38)
    texts = [bytes(rng.integers(33, 127, size=k).astype(np.uint8)) for k in list(range(48)) * 4]
    rows = rng.integers(0, 256, size=(len(texts), 64)).astype(np.uint8)
    for i, t in enumerate(texts):
        rows[i, : len(t)] = list(t)
    n = np.array([len(t) for t in texts])
    got = murmur3.hash64_text_words(rows.view("<u8"), n, padded=False)
    assert got.tolist() == sfm.hash64_bytes(texts).tolist()
