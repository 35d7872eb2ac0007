"""XXH64 (xxHash, 64-bit) in NumPy, over whole batches: the hash of Presto SQL's ``XX_HASH_64``.

Presto's SQL aggregation ``noisy_approx_set_sfm(col, ...)`` does not hash with the Murmur3 of
``SfmSketch.add``: it calls the column type's ``XX_HASH_64`` operator and hands the result to
``SfmSketch.addHash``. For a ``VARCHAR`` (and ``VARBINARY``, ``CHAR``) that operator is airlift's
``XxHash64.hash(slice)``, XXH64 with seed 0 of the value's bytes (UTF-8 for text); for a ``BIGINT``
(and ``INTEGER``, ``SMALLINT``, ``TINYINT``, whose values Presto holds as a ``long``) it is
``XxHash64.hash(long)``, which is XXH64 with seed 0 of the long's 8 little-endian bytes.

This module is XXH64 as the xxHash specification (``doc/xxhash_spec.md`` in Cyan4973/xxHash)
defines it, written anew: :func:`xxh64_bytes` hashes a list of byte strings by grouping them by
length and hashing each group as one ``(n, length)`` array (the cost per key is NumPy arithmetic,
not Python), :func:`xxh64_ints` hashes 64-bit integers as their 8 little-endian bytes.
Intermediate arrays derived from the keys are zeroed before they are freed, as in
:mod:`panstream.estimators.sketch.sfm`. Pinned by the specification's sanity vectors and Presto's own
``xxhash64`` SQL test vectors (``tests/sketch/test_xxh64.py``).

>>> hex(xxh64(b""))            # the specification's empty input, seed 0
'0xef46db3751d8e999'
>>> hex(xxh64(b"hashme"))      # Presto's TestVarbinaryFunctions: xxhash64('hashme')
'0xf9d96e0e1165e892'
>>> int(xxh64_ints(np.array([1], dtype=np.int64))[0]) == xxh64((1).to_bytes(8, "little"))
True
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["as_u64", "by_length", "rotl64", "xxh64", "xxh64_bytes", "xxh64_ints", "xxh64_rows"]

_U = np.uint64
_M64 = (1 << 64) - 1
P1 = _U(0x9E3779B185EBCA87)
P2 = _U(0xC2B2AE3D27D4EB4F)
P3 = _U(0x165667B19E3779F9)
P4 = _U(0x85EBCA77C2B2AE63)
P5 = _U(0x27D4EB2F165667C5)


def rotl64(x: np.ndarray, r: int) -> np.ndarray:
    """Rotate every ``uint64`` of ``x`` left by ``r`` bits (0 < r < 64), as XXH64 and Murmur3 do."""
    return (x << _U(r)) | (x >> _U(64 - r))


def _round(acc: np.ndarray, lane: np.ndarray) -> np.ndarray:
    """The specification's ``round``: ``rotl(acc + lane * P2, 31) * P1``."""
    return rotl64(acc + lane * P2, 31) * P1


def _avalanche(acc: np.ndarray) -> np.ndarray:
    acc = acc ^ (acc >> _U(33))
    acc = acc * P2
    acc = acc ^ (acc >> _U(29))
    acc = acc * P3
    return acc ^ (acc >> _U(32))


def _seed(n: int, seed: int) -> np.ndarray:
    return np.full(n, seed & _M64, dtype=_U)


def xxh64_rows(rows: np.ndarray, seed: int = 0) -> np.ndarray:
    """XXH64 of each row of ``rows``, an ``(n, length)`` ``uint8`` array of n keys of one length.

    Returns:
        ``uint64`` hashes, one per row.
    """
    rows = np.asarray(rows, dtype=np.uint8)
    n, length = rows.shape
    s = _seed(n, seed)
    stripes = length // 32
    if stripes:
        v1 = s + P1 + P2
        v2 = s + P2
        v3 = s.copy()
        v4 = s - P1
        for k in range(stripes):
            lanes = np.array(rows[:, 32 * k : 32 * k + 32], order="C").view("<u8")
            v1 = _round(v1, lanes[:, 0])
            v2 = _round(v2, lanes[:, 1])
            v3 = _round(v3, lanes[:, 2])
            v4 = _round(v4, lanes[:, 3])
            lanes.fill(0)
        acc = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18)
        zero = np.zeros(n, dtype=_U)
        for v in (v1, v2, v3, v4):
            acc = (acc ^ _round(zero, v)) * P1 + P4
            v.fill(0)
    else:
        acc = s + P5
    acc = acc + _U(length)
    pos = 32 * stripes
    if length - pos >= 8:
        words = np.array(rows[:, pos : pos + 8 * ((length - pos) // 8)], order="C").view("<u8")
        zero = np.zeros(n, dtype=_U)
        for j in range(words.shape[1]):
            acc = rotl64(acc ^ _round(zero, words[:, j]), 27) * P1 + P4
        words.fill(0)
        pos += 8 * words.shape[1]
    if length - pos >= 4:
        word = np.array(rows[:, pos : pos + 4], order="C").view("<u4")[:, 0].astype(_U)
        acc = rotl64(acc ^ (word * P1), 23) * P2 + P3
        word.fill(0)
        pos += 4
    while pos < length:
        byte = rows[:, pos].astype(_U)
        acc = rotl64(acc ^ (byte * P5), 11) * P1
        byte.fill(0)
        pos += 1
    out = _avalanche(acc)
    acc.fill(0)
    return out


def xxh64_bytes(items: list[bytes], seed: int = 0) -> np.ndarray:
    """XXH64 (seed ``seed``) of every byte string, as ``uint64``, in order.

    Keys are grouped by length and each group is hashed as one array (a log's addresses have a
    handful of lengths), so the cost per key is NumPy arithmetic.
    """
    return by_length(items, lambda rows: xxh64_rows(rows, seed))


def by_length(items: list[bytes], hash_rows: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """``hash_rows`` of every byte string, as ``uint64``, in order: the strings are grouped by
    length and each group is hashed as one ``(n, length)`` array of bytes (a log's addresses have
    a handful of lengths, so the cost per key is NumPy arithmetic, not Python). The joined bytes,
    each group's hashes (``hash_rows`` returns an array of its own) and the lengths are zeroed
    after use. Both hashes batch strings this way (:func:`xxh64_bytes` and Murmur3's
    :func:`~panstream.estimators.sketch.murmur3.hash64_bytes`)."""
    n = len(items)
    out = np.empty(n, dtype=_U)
    if not n:
        return out
    lengths = np.fromiter((len(b) for b in items), dtype=np.int64, count=n)
    order = np.argsort(lengths, kind="stable")
    cuts = np.flatnonzero(np.diff(lengths[order])) + 1
    for grp in np.split(order, cuts):
        length = int(lengths[grp[0]])
        buf = bytearray(b"".join([items[i] for i in grp.tolist()]))
        rows = np.frombuffer(buf, dtype=np.uint8).reshape(grp.size, length)
        h = hash_rows(rows)
        out[grp] = h
        h.fill(0)
        buf[:] = bytes(len(buf))
    lengths.fill(0)
    return out


def as_u64(values: np.ndarray) -> np.ndarray:
    """Integer ``values`` as ``uint64``, each taken modulo 2**64 (a Java ``long``'s bits)."""
    arr = np.asarray(values)
    return arr.astype(np.int64, copy=False).view(_U) if arr.dtype.kind == "i" \
        else arr.astype(_U, copy=False)


def xxh64_ints(values: np.ndarray, seed: int = 0) -> np.ndarray:
    """XXH64 (seed ``seed``) of each value's 8 little-endian bytes, as ``uint64``: airlift's
    ``XxHash64.hash(long)``, Presto's ``XX_HASH_64`` of a ``BIGINT``.

    ``values`` is any integer array; each value is taken modulo 2**64 (a Java ``long``).
    """
    v = as_u64(values)
    acc = _seed(v.size, seed) + P5 + _U(8)
    k = _round(np.zeros(v.size, dtype=_U), v.reshape(-1))
    acc = rotl64(acc ^ k, 27) * P1 + P4
    k.fill(0)
    out = _avalanche(acc)
    acc.fill(0)
    return out.reshape(v.shape)


def xxh64(data: bytes, seed: int = 0) -> int:
    """XXH64 of one byte string, as a Python int (for tests and vectors)."""
    rows = np.frombuffer(bytes(data), dtype=np.uint8).reshape(1, len(data))
    return int(xxh64_rows(rows, seed)[0])
