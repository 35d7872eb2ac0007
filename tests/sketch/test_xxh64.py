"""Our XXH64 (Presto SQL's ``XX_HASH_64``), pinned by the specification's vectors and Presto's.

* The xxHash reference suite's sanity vectors (Cyan4973/xxHash, ``xsum_sanity_check.c``): XXH64
  of the first N bytes of its generated buffer (byte i is the top byte of PRIME32 * PRIME64**i),
  with seed 0 and seed PRIME32; they cross every branch (empty, single bytes, a 4-byte word,
  8-byte lanes, 32-byte stripes).
* Well-known short strings ("", "a", "abc"; python-xxhash's README "xxhash").
* Presto's ``TestVarbinaryFunctions.testXxhash64``: ``xxhash64('')`` and ``xxhash64('hashme')``
  (big-endian bytes of the long), which is airlift's ``XxHash64.hash(slice)``, the function
  Presto's ``VARCHAR`` ``XX_HASH_64`` operator calls.
* The C library through the ``xxhash`` package (test extra), on random keys of every length 0..200.
"""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from panstream.sketch.xxh64 import xxh64, xxh64_bytes, xxh64_ints, xxh64_rows

PRIME32 = 2654435761
PRIME64 = 11400714785074694797


def _sanity_buffer(n: int) -> bytes:
    out = bytearray(n)
    gen = PRIME32
    for i in range(n):
        out[i] = gen >> 56
        gen = (gen * PRIME64) & ((1 << 64) - 1)
    return bytes(out)


@pytest.mark.parametrize(("length", "seed", "want"), [
    (0, 0, 0xEF46DB3751D8E999),
    (0, PRIME32, 0xAC75FDA2929B17EF),
    (1, 0, 0xE934A84ADB052768),
    (1, PRIME32, 0x5014607643A9B4C3),
    (4, 0, 0x9136A0DCA57457EE),
    (14, 0, 0x8282DCC4994E35C8),
    (14, PRIME32, 0xC3BD6BF63DEB6DF0),
    (222, 0, 0xB641AE8CB691C174),
    (222, PRIME32, 0x20CB8AB7AE10C14A),
])
def test_the_specifications_sanity_vectors(length: int, seed: int, want: int) -> None:
    assert xxh64(_sanity_buffer(222)[:length], seed) == want


@pytest.mark.parametrize(("text", "want"), [
    (b"", 0xEF46DB3751D8E999), (b"a", 0xD24EC4F1A98C6E5B), (b"abc", 0x44BC2CF5AD770999),
    (b"xxhash", 0x32DD38952C4BC720),
    (b"hashme", 0xF9D96E0E1165E892),  # Presto: xxhash64(CAST('hashme' AS VARBINARY))
])
def test_short_strings_and_prestos_sql_vectors(text: bytes, want: int) -> None:
    assert xxh64(text) == want
    assert int(xxh64_bytes([text])[0]) == want


def test_the_batched_path_equals_one_key_at_a_time() -> None:
    """Keys of every length 0..100 (every stripe/lane/word/byte tail), out of order, in one batch."""
    keys = [bytes((i * 13 + j * 7) % 256 for j in range(n)) for i, n in
            enumerate([*range(100, -1, -1), *range(0, 101, 3)])]
    assert [int(h) for h in xxh64_bytes(keys)] == [xxh64(k) for k in keys]
    same = np.frombuffer(_sanity_buffer(222)[:200], dtype=np.uint8).reshape(5, 40)
    assert [int(h) for h in xxh64_rows(same)] == [xxh64(bytes(r)) for r in same]


def test_a_bigint_is_the_hash_of_its_eight_little_endian_bytes() -> None:
    """airlift's XxHash64.hash(long), Presto's BIGINT XX_HASH_64: the long's 8 LE bytes."""
    vals = np.array([0, 1, -1, 5, 1 << 62, -(1 << 63), (1 << 63) - 1, 123_456_789], dtype=np.int64)
    assert [int(h) for h in xxh64_ints(vals)] == [xxh64(struct.pack("<q", int(v))) for v in vals]
    assert xxh64_ints(vals.view(np.uint64)).tolist() == xxh64_ints(vals).tolist()


def test_agrees_with_the_c_library() -> None:
    xxhash = pytest.importorskip("xxhash")
    keys = [os.urandom(n) for n in range(201) for _ in range(3)]
    for seed in (0, PRIME32, (1 << 64) - 1):
        assert [int(h) for h in xxh64_bytes(keys, seed)] == \
            [xxhash.xxh64_intdigest(k, seed) for k in keys]
    vals = np.frombuffer(os.urandom(8 * 1000), dtype=np.int64)
    assert [int(h) for h in xxh64_ints(vals)] == \
        [xxhash.xxh64_intdigest(struct.pack("<q", int(v))) for v in vals]
