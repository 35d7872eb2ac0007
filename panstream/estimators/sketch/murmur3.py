"""Presto's Murmur3: the 64-bit half of Murmur3 x64 128 (seed 0) that ``SfmSketch.add`` uses.

airlift's ``Murmur3Hash128.hash64`` (read from its source, written anew here): a ``bigint`` is hashed
as its 8 little-endian bytes (:func:`hash64_ints`), a ``varchar``/``varbinary`` as its bytes
(:func:`hash64_bytes`). Both paths are NumPy ``uint64`` arithmetic over whole batches (strings are
grouped by length); the dotted-decimal text of IPv4 addresses is built and hashed from the
integers without Python per address (:func:`ipv4_text_words`, :func:`hash64_ipv4_text`).

Only hashes: which hash a grid uses and how an item becomes bytes is
:mod:`panstream.estimators.sketch.hashing`; the grid and its fit are
:mod:`panstream.estimators.sketch.sfm` (issue 36 split them apart).

>>> hex(hash64_ints(np.array([0], dtype=np.int64))[0])   # Murmur3Hash128.hash64(0L)
'0x28df63b7cc57c3cb'
"""

from __future__ import annotations

import struct

import numpy as np

from panstream.estimators.sketch.xxh64 import as_u64, by_length, rotl64

__all__ = ["hash64_bytes", "hash64_ints", "hash64_ipv4_text", "hash64_text_words", "ipv4_text_words",
           "murmur3_x64_128"]

_M64 = (1 << 64) - 1
_C1 = np.uint64(0x87C37B91114253D5)
_C2 = np.uint64(0x4CF5AD432745937F)
_F1 = np.uint64(0xFF51AFD7ED558CCD)
_F2 = np.uint64(0xC4CEB9FE1A85EC53)
_U = np.uint64


def _rotl(x: np.ndarray, r: int, scratch: np.ndarray) -> None:
    """:func:`~panstream.estimators.sketch.xxh64.rotl64` in place (``scratch``: same shape)."""
    np.left_shift(x, _U(r), out=scratch)
    x >>= _U(64 - r)
    x |= scratch


def _half_round(lane: np.ndarray, h: np.ndarray, other: np.ndarray,
                consts: tuple[np.uint64, np.uint64, int, int, int], scratch: np.ndarray
                ) -> np.ndarray:
    """One half of Murmur3 x64 128's block round, in a new array: ``k = rotl(lane * ca, r1) * cb``,
    then ``(rotl(h ^ k, r2) + other) * 5 + add`` (``consts = (ca, cb, r1, r2, add)``)."""
    ca, cb, r1, r2, add = consts
    k = lane * ca
    _rotl(k, r1, scratch)
    k *= cb
    k ^= h
    _rotl(k, r2, scratch)
    k += other
    k *= _U(5)
    k += _U(add)
    return k


def _fmix(k: np.ndarray) -> np.ndarray:
    k = k ^ (k >> _U(33))
    k = k * _F1
    k = k ^ (k >> _U(33))
    k = k * _F2
    return k ^ (k >> _U(33))


def hash64_ints(values: np.ndarray) -> np.ndarray:
    """Presto's ``Murmur3Hash128.hash64(long)`` of every value: the first 64 bits of Murmur3 x64 128
    (seed 0) of the value's 8 little-endian bytes, as ``uint64``.

    ``values`` is any integer array; each value is taken modulo 2**64 (a Java ``long``).
    """
    v = as_u64(values)
    k1 = rotl64(v * _C1, 31) * _C2
    h1 = _U(8) + (_U(8) ^ k1)  # h1 = k1; h1 ^= len; h2 = len; h1 += h2
    h2 = h1 + _U(8)             # h2 += h1
    out = _fmix(h1)
    out += _fmix(h2)            # h1 += h2: the first half of the 128-bit result
    for a in (k1, h1, h2):
        a.fill(0)
    return out


def _murmur_block_rows(rows: np.ndarray, length: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Murmur3 x64 128 of ``rows`` (an ``(n, length)`` uint8 array: n keys of one length)."""
    n = rows.shape[0]
    h1 = np.full(n, seed & _M64, dtype=_U)
    h2 = h1.copy()
    nblocks = length // 16
    for b in range(nblocks):
        blk = np.array(rows[:, 16 * b : 16 * b + 16], order="C").view("<u8")
        k1 = rotl64(blk[:, 0] * _C1, 31) * _C2
        h1 ^= k1
        h1 = rotl64(h1, 27) + h2
        h1 = h1 * _U(5) + _U(0x52DCE729)
        k2 = rotl64(blk[:, 1] * _C2, 33) * _C1
        h2 ^= k2
        h2 = rotl64(h2, 31) + h1
        h2 = h2 * _U(5) + _U(0x38495AB5)
        for a in (blk, k1, k2):  # item-derived: zeroed before they are freed
            a.fill(0)
    tail = length & 15
    if tail:
        pad = np.zeros((n, 16), dtype=np.uint8)
        pad[:, :tail] = rows[:, 16 * nblocks :]
        words = pad.view("<u8")
        if tail > 8:
            k2 = rotl64(words[:, 1] * _C2, 33) * _C1
            h2 ^= k2
            k2.fill(0)
        k1 = rotl64(words[:, 0] * _C1, 31) * _C2
        h1 ^= k1
        k1.fill(0)
        pad.fill(0)
    h1 ^= _U(length)
    h2 ^= _U(length)
    h1 += h2
    h2 += h1
    m1, m2 = _fmix(h1), _fmix(h2)
    h1.fill(0)
    h2.fill(0)
    m1 += m2
    m2 += m1
    return m1, m2


def murmur3_x64_128(data: bytes, seed: int = 0) -> bytes:
    """The 16-byte Murmur3 x64 128 digest of ``data`` (seed ``seed``), as airlift's
    ``Murmur3Hash128.hash`` returns it (h1 then h2, little-endian). For tests and vectors.

    >>> murmur3_x64_128(b"").hex()
    '00000000000000000000000000000000'
    """
    rows = np.frombuffer(bytes(data), dtype=np.uint8).reshape(1, len(data))
    h1, h2 = _murmur_block_rows(rows, len(data), seed)
    return struct.pack("<QQ", int(h1[0]), int(h2[0]))


def hash64_bytes(items: list[bytes]) -> np.ndarray:
    """Presto's ``Murmur3Hash128.hash64(Slice)`` of every byte string, as ``uint64``, in order.

    Batched: keys are grouped by length and each group is hashed as one ``(n, length)`` array, so
    the cost per key is NumPy arithmetic, not Python (a log's addresses have a handful of lengths).
    """
    return by_length(items, _hash64_rows)


def _hash64_rows(rows: np.ndarray) -> np.ndarray:
    """The first 64 bits of Murmur3 x64 128 of every row of bytes (the second half is wiped)."""
    h1, h2 = _murmur_block_rows(rows, rows.shape[1])
    h2.fill(0)
    return h1


# ---------------------------------------------------------------------- IPv4 text, vectorized
def _half_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Text tables of the two 16-bit halves of an IPv4 address: for ``x`` in 0..65535, the text
    ``"a.b."`` of a high half (``a = x >> 8``, ``b = x & 255``, 4 to 8 bytes) and ``"c.d"`` of a
    low half (3 to 7 bytes), each packed little-endian into a ``uint64``; and the high half's text
    length in bits (``uint64``) and the low half's in bytes (``uint8``)."""
    # Built with NumPy over all 65,536 halves at once (a Python loop over them cost about 0.4 s of
    # every panstream start): each octet's text packed little-endian, then shifted into place.
    octet = np.array([int.from_bytes(str(o).encode("ascii"), "little") for o in range(256)],
                     dtype=_U)
    size = np.array([len(str(o)) for o in range(256)], dtype=_U)
    x = np.arange(65536)
    a, b = x >> 8, x & 255
    la, lb = size[a], size[b]
    low = octet[a] | (_U(0x2E) << (_U(8) * la)) | (octet[b] << (_U(8) * (la + _U(1))))
    n = la + _U(1) + lb  # the text "a.b": 3 to 7 bytes
    high = low | (_U(0x2E) << (_U(8) * n))
    high_bits = _U(8) * n + _U(8)
    low_len = n.astype(np.uint8)
    return high, high_bits, low, low_len


_HIGH_TEXT, _HIGH_BITS, _LOW_TEXT, _LOW_LEN = _half_tables()


def ipv4_text_words(addr: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The dotted-decimal text of every IPv4 address (``uint32``), vectorized, as its first and
    second 8 bytes (``uint64`` little-endian words, zero-padded) and its length in bytes (7 to
    15). The text of each 16-bit half comes from a 65,536-entry table (``"a.b."`` at most 8
    bytes, ``"c.d"`` at most 7), and the low half's is shifted in after the high half's, so no
    Python runs per address.

    >>> lo, hi, n = ipv4_text_words(np.array([0x0A000001, 0xC0A80A64], dtype=np.uint32))
    >>> [(lo[i].tobytes() + hi[i].tobytes())[: n[i]] for i in range(2)]
    [b'10.0.0.1', b'192.168.10.100']
    """
    a = np.asarray(addr, dtype=np.uint32)
    top = (a >> np.uint32(16)).astype(np.intp)
    bot = (a & np.uint32(0xFFFF)).astype(np.intp)
    lo = np.take(_HIGH_TEXT, top)
    at = np.take(_HIGH_BITS, top)        # 32 to 64 bits
    w = np.take(_LOW_TEXT, bot)
    n = np.take(_LOW_LEN, bot).astype(np.intp)
    # text = lo | w << at, 128 bits as two words; NumPy gives 0 for a shift by 64 or more.
    t = np.left_shift(w, at)
    lo |= t
    np.subtract(_U(64), at, out=at)
    hi = np.right_shift(w, at, out=t)
    np.subtract(_U(64), at, out=at)
    n += (at >> _U(3)).astype(np.intp)
    for x in (top, bot, w, at):
        x.fill(0)
    return lo, hi, n


def hash64_ipv4_text(addr: np.ndarray) -> np.ndarray:
    """Presto's ``hash64`` of the dotted-decimal text of every IPv4 address (``uint32``): what
    :func:`hash64_bytes` gives for ``b"a.b.c.d"``, computed from the integers in one vectorized
    pass (the text is at most 15 bytes, so Murmur3 has no full block, only the tail).

    >>> a = np.array([0, 0x0A000001, 0xFFFFFFFF], dtype=np.uint32)
    >>> bool((hash64_ipv4_text(a) == hash64_bytes([b"0.0.0.0", b"10.0.0.1", b"255.255.255.255"])).all())
    True
    """
    lo, hi, n = ipv4_text_words(addr)
    words = np.empty((lo.size, 2), dtype=_U)
    words[:, 0] = lo
    words[:, 1] = hi
    out = hash64_text_words(words, n)
    for x in (lo, hi, n, words):
        x.fill(0)
    return out


def hash64_text_words(words: np.ndarray, n: np.ndarray, padded: bool = True) -> np.ndarray:
    """Presto's ``hash64`` (Murmur3 x64 128, seed 0, first 64 bits) of each row's first ``n[i]``
    bytes, vectorized over rows of different lengths: ``words`` holds each row's text as
    little-endian ``uint64`` words (an ``m x w`` array, zero after the text, ``w`` even and
    ``n < 8 w``). The full 16-byte blocks are mixed in where a row has them; the tail is read at
    each row's own block (zero padding contributes nothing, so one formula covers every length).
    ``padded=False``: the bytes after a row's text need not be zeros (they are masked off the
    tail block; no later block is read).

    >>> rows = np.zeros((2, 48), dtype=np.uint8)
    >>> texts = [b"2001:db8::1", b"2a01:4f8:ffff:ffff:ffff:ffff:ffff:ffff"]
    >>> rows[0, :11], rows[1, :38] = list(texts[0]), list(texts[1])
    >>> bool((hash64_text_words(rows.view("<u8"), np.array([11, 38])) == hash64_bytes(texts)).all())
    True
    """
    m, width = words.shape
    h1 = np.zeros(m, dtype=_U)
    h2 = np.zeros(m, dtype=_U)
    t = np.empty(m, dtype=_U)  # (scratch of the rotations: in place, no temporaries)
    blocks = np.asarray(n, dtype=np.intp) >> 4
    for b in range(width // 2 - 1):
        active = blocks > b
        if not bool(active.any()):
            break
        k1 = _half_round(words[:, 2 * b], h1, h2, (_C1, _C2, 31, 27, 0x52DCE729), t)  # new h1
        k2 = _half_round(words[:, 2 * b + 1], h2, k1, (_C2, _C1, 33, 31, 0x38495AB5), t)  # new h2
        if bool(active.all()):
            h1, k1 = k1, h1
            h2, k2 = k2, h2
        else:
            np.copyto(h1, k1, where=active)
            np.copyto(h2, k2, where=active)
        for a in (k1, k2):
            a.fill(0)
    if width == 2:
        t1, t2 = words[:, 0].copy(), words[:, 1].copy()
    else:
        at = np.arange(m, dtype=np.intp) * width + 2 * blocks
        flat = words.reshape(-1)
        t1, t2 = flat[at], flat[at + 1]
    if not padded:  # keep the tail's bytes only: 0 to 15 of them
        bits = (np.asarray(n, dtype=np.intp) & 15).astype(_U) << _U(3)
        b1 = np.minimum(bits, _U(64))
        bits -= b1
        t1 &= (_U(1) << b1) - _U(1)  # (NumPy: a shift by 64 is 0, and 0 - 1 all ones)
        t2 &= (_U(1) << bits) - _U(1)
    t2 *= _C2
    _rotl(t2, 33, t)
    t2 *= _C1
    h2 ^= t2
    t1 *= _C1
    _rotl(t1, 31, t)
    t1 *= _C2
    h1 ^= t1
    length = np.asarray(n).astype(_U)
    h1 ^= length
    h2 ^= length
    h1 += h2
    h2 += h1
    out = _fmix(h1)
    m2 = _fmix(h2)
    out += m2
    for x in (t1, t2, t, h1, h2, m2, length):
        x.fill(0)
    return out
