"""Sketch-Flip-Merge, the pure parts: Presto's hashing, the grid, the estimator, merge and format.

Sketch-Flip-Merge (Hehir, Ting and Cormode, "Sketch-Flip-Merge: Mergeable Sketches for Private
Distinct Counting", ICML 2023, arXiv 2302.02056; shipped as Presto's ``SfmSketch`` and Velox's
``SfmSketch.h``) keeps a grid of ``B`` buckets x ``P`` levels of bits. This module reproduces
Presto's behaviour (read from its source, written anew here) so that panstream's sketches and
Presto's can be merged, counted and read by either side:

* **hashing** (:func:`hash64_ints`, :func:`hash64_bytes`): the 64-bit half of Murmur3 x64 128 with
  seed 0 that Presto's ``SfmSketch.add`` uses (airlift's ``Murmur3Hash128.hash64``): a ``bigint``
  is hashed as its 8 little-endian bytes, a ``varchar``/``varbinary`` as its bytes. Both paths are
  NumPy ``uint64`` arithmetic over whole batches (strings are grouped by length);
* **the grid** (:func:`bucket_level`, :class:`SketchGrid`): the bucket is the hash's top
  ``log2 B`` bits, the level its number of trailing zeros (a 1 placed just below the bucket bits
  caps it at ``64 - log2 B``), capped at ``P - 1``; the bit of (bucket, level) is
  ``level * B + bucket``;
* **the estimator** (:func:`cardinality`, :func:`mple`): Presto's maximum pseudo-likelihood estimate
  by Newton's method. The pseudo-likelihood's terms depend only on a bit's level and value, so the
  per-level counts of ones are sufficient: the estimate is computed from ``P`` numbers, which is
  what a release adds noise to. :func:`mple` also gives the standard error from the Fisher
  information of the pseudo-likelihood;
* **merge** (:func:`merge_flip_probability`, :func:`merge_probabilities`): Presto's randomized merge
  (Theorem 4.8 of the paper);
* **interop** (:func:`to_presto`, :func:`from_presto`): Presto's serialized ``SfmSketch`` (format
  tag 7), byte for byte.

Nothing here draws randomness or keeps state: :mod:`panstream.estimators.sketch.estimator` does.

>>> hex(hash64_ints(np.array([0], dtype=np.int64))[0])   # Murmur3Hash128.hash64(0L)
'0x28df63b7cc57c3cb'
>>> bucket_level(np.array([5 << 52], dtype=np.uint64), 12, 24)
(array([5]), array([23]))
"""

from __future__ import annotations

import ipaddress
import math
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from panstream.errors import ConfigurationError, StateError, UniverseError
from panstream.estimators.sketch.xxh64 import rotl64
from panstream.universe import IndexResult, Universe, _token_keys, refuse_bare_item
from panstream.universe.addresses import AddressKeys, address_key, canonical_text

__all__ = ["DEFAULT_BUCKETS", "DEFAULT_LEVELS", "FORMAT_TAG", "ITEM_KINDS", "PrestoSketch",
           "SketchGrid", "Fit", "bucket_level", "canonical_item", "cardinality", "cells_of_tokens",
           "distinct_canonical", "from_presto",
           "hash64_bytes", "hash64_ints", "hash_items", "merge_flip_probability",
           "merge_probabilities", "mple", "to_presto"]

#: Presto's defaults: 4096 buckets x 24 levels (98,304 bits, 12 KiB).
DEFAULT_BUCKETS = 4096
DEFAULT_LEVELS = 24
#: The first byte of Presto's serialized SfmSketch.
FORMAT_TAG = 7
#: How a grid reads items: ``ip`` (IPv4/IPv6 addresses, written one canonical way first) or ``id``
#: (any identifier: ``int`` as a Presto ``bigint``, text as UTF-8 ``varchar``, ``bytes`` as is).
ITEM_KINDS = ("ip", "id")
#: Presto's cap on Newton iterations.
MAX_ITERATIONS = 1000

_M64 = (1 << 64) - 1
_C1 = np.uint64(0x87C37B91114253D5)
_C2 = np.uint64(0x4CF5AD432745937F)
_F1 = np.uint64(0xFF51AFD7ED558CCD)
_F2 = np.uint64(0xC4CEB9FE1A85EC53)
_U = np.uint64


# ---------------------------------------------------------------------- Murmur3 x64 128
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
    arr = np.asarray(values)
    v = arr.astype(np.int64, copy=False).view(_U) if arr.dtype.kind == "i" \
        else arr.astype(_U, copy=False)
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
    n = len(items)
    out = np.empty(n, dtype=_U)
    if not n:
        return out
    lengths = np.fromiter((len(b) for b in items), dtype=np.int64, count=n)
    order = np.argsort(lengths, kind="stable")
    sorted_len = lengths[order]
    cuts = np.flatnonzero(np.diff(sorted_len)) + 1
    for grp in np.split(order, cuts):
        length = int(lengths[grp[0]])
        buf = bytearray(b"".join([items[i] for i in grp.tolist()]))
        rows = np.frombuffer(buf, dtype=np.uint8).reshape(grp.size, length)
        h1, h2 = _murmur_block_rows(rows, length)
        out[grp] = h1
        h1.fill(0)
        h2.fill(0)
        buf[:] = bytes(len(buf))
    lengths.fill(0)
    return out


def _hash_ipv4_text(addr: np.ndarray, hashing: str) -> np.ndarray:
    """The ``hashing`` hash (:mod:`panstream.estimators.sketch.hashing`) of the dotted-decimal text of every
    IPv4 address, vectorized: Murmur3 by :func:`hash64_ipv4_text`, XXH64 (``xxhash64-varchar``)
    by :func:`panstream.estimators.sketch.xxh64.xxh64_rows` over the text rows of each length (7 to 15)."""
    if hashing == "murmur3":
        return hash64_ipv4_text(addr)
    from panstream.estimators.sketch.xxh64 import xxh64_rows

    lo, hi, n = ipv4_text_words(addr)
    rows = np.empty((lo.size, 16), dtype=np.uint8)
    words = rows.view("<u8")
    words[:, 0] = lo
    words[:, 1] = hi
    out = np.empty(lo.size, dtype=_U)
    for length in np.unique(n).tolist():
        sel = np.flatnonzero(n == length)
        part = np.ascontiguousarray(rows[sel, :length])
        out[sel] = xxh64_rows(part)
        part.fill(0)
    for x in (lo, hi, n, rows):
        x.fill(0)
    return out


# ---------------------------------------------------------------------- items
def canonical_ip(text: str) -> str | None:
    """The one way an address is written before hashing, or ``None`` if ``text`` is no address.

    The token is read by the one normalization of every address universe
    (:func:`panstream.universe.addresses.address_key`: ports, brackets, zone ids, ``::ffff:a.b.c.d``) and
    written by :func:`panstream.universe.addresses.canonical_text`: dotted decimal for IPv4, RFC 5952
    lowercase compressed text for IPv6. This is what Presto's ``CAST(ipaddress AS varchar)``
    prints, so ``noisy_approx_set_sfm(CAST(ip AS varchar), ...)`` hashes the same bytes.

    >>> canonical_ip("2001:DB8:0:0::1"), canonical_ip("::ffff:10.0.0.1"), canonical_ip("x")
    ('2001:db8::1', '10.0.0.1', None)
    >>> canonical_ip("10.0.0.1:51234"), canonical_ip("[2001:db8::1]:443"), canonical_ip("fe80::1%eth0")
    ('10.0.0.1', '2001:db8::1', 'fe80::1')
    """
    key = address_key(text)
    return None if key is None else canonical_text(key).decode("ascii")


# ---------------------------------------------------------------------- IPv4 text, vectorized
def _half_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Text tables of the two 16-bit halves of an IPv4 address: for ``x`` in 0..65535, the text
    ``"a.b."`` of a high half (``a = x >> 8``, ``b = x & 255``, 4 to 8 bytes) and ``"c.d"`` of a
    low half (3 to 7 bytes), each packed little-endian into a ``uint64``; and the high half's text
    length in bits (``uint64``) and the low half's in bytes (``uint8``)."""
    digits = [str(o).encode("ascii") for o in range(256)]
    high = np.zeros(65536, dtype=_U)
    high_bits = np.zeros(65536, dtype=_U)
    low = np.zeros(65536, dtype=_U)
    low_len = np.zeros(65536, dtype=np.uint8)
    for x in range(65536):
        t = digits[x >> 8] + b"." + digits[x & 255]
        high[x] = int.from_bytes(t + b".", "little")
        high_bits[x] = 8 * len(t) + 8
        low[x] = int.from_bytes(t, "little")
        low_len[x] = len(t)
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
    # Murmur3 x64 128, seed 0, length < 16: tail words k1 = bytes 0-7, k2 = bytes 8-15 (zero
    # padding contributes nothing, so one formula covers every length).
    hi *= _C2
    h2 = rotl64(hi, 33)
    h2 *= _C1
    lo *= _C1
    h1 = rotl64(lo, 31)
    h1 *= _C2
    length = n.astype(_U)
    h1 ^= length
    h2 ^= length
    h1 += h2
    h2 += h1
    out = _fmix(h1)
    m2 = _fmix(h2)
    out += m2
    for x in (lo, hi, h1, h2, m2, length, n):
        x.fill(0)
    return out


class _Blank(Exception):
    pass


def canonical_item(item: Any, items: str) -> int | bytes | None:
    """What is hashed for one item: an ``int`` (Presto ``bigint``) or ``bytes`` (``varchar``), or
    ``None`` when the item is malformed for the grid's item kind.

    Raises:
        _Blank: an empty or all-whitespace text item.
    """
    if isinstance(item, (bytes, bytearray, memoryview)):
        raw = bytes(item).strip()
        if not raw:
            raise _Blank
        if items == "id":
            return raw
        try:
            text = raw.decode("ascii")
        except UnicodeDecodeError:
            return None
    elif isinstance(item, str):
        text = item.strip()
        if not text:
            raise _Blank
        if items == "id":
            return text.encode("utf-8")
    elif isinstance(item, (int, np.integer)) and not isinstance(item, bool):
        v = int(item)
        if items == "id":
            return v if -(1 << 63) <= v < (1 << 64) else None
        if 0 <= v <= 0xFFFFFFFF:
            text = str(ipaddress.IPv4Address(v))
        else:
            return None
    else:
        return None
    key = address_key(text)
    return None if key is None else canonical_text(key)


def hash_items(items: Iterable[Any], kind: str, hashing: str = "murmur3"
               ) -> tuple[np.ndarray, int, int]:
    """Hashes of ``items`` (``uint64``, Presto's ``hashing``: :mod:`panstream.estimators.sketch.hashing`) and
    the numbers of malformed and empty items."""
    ints: list[int] = []
    blobs: list[bytes] = []
    malformed = empty = 0
    for item in items:
        try:
            c = canonical_item(item, kind)
        except _Blank:
            empty += 1
            continue
        if c is None:
            malformed += 1
        elif isinstance(c, int):
            ints.append(c & _M64)
        else:
            blobs.append(c)
    if hashing != "murmur3":
        from panstream.estimators.sketch.hashing import hash_canonical

        out, bad = hash_canonical(ints, blobs, hashing)
        ints.clear()
        blobs.clear()
        return out, malformed + bad, empty
    hi = hash64_ints(np.array(ints, dtype=_U)) if ints else np.empty(0, dtype=_U)
    hb = hash64_bytes(blobs)
    ints.clear()
    blobs.clear()
    out = np.concatenate([hi, hb])
    hi.fill(0)
    hb.fill(0)
    return out, malformed, empty


# ---------------------------------------------------------------------- the grid
def index_bits(buckets: int) -> int:
    """``log2(buckets)``, checking Presto's limits (a power of two, 2 to 2**16 here)."""
    if isinstance(buckets, bool) or not isinstance(buckets, int) or buckets < 2 \
            or buckets & (buckets - 1) or buckets > 1 << 16:
        msg = f"buckets must be a power of two from 2 to 65536 (Presto's default 4096), got {buckets!r}"
        raise ConfigurationError(msg)
    return buckets.bit_length() - 1


def check_levels(levels: int, bits: int) -> int:
    """``levels`` if it is a valid precision for ``bits`` index bits (Presto: ``1..64 - bits``)."""
    if isinstance(levels, bool) or not isinstance(levels, int) or not 1 <= levels <= 64 - bits:
        msg = f"levels must be an integer from 1 to {64 - bits} (Presto's default 24), got {levels!r}"
        raise ConfigurationError(msg)
    return levels


def bucket_level(h: np.ndarray, bits: int, levels: int) -> tuple[np.ndarray, np.ndarray]:
    """Presto's ``computeIndex`` and capped ``numberOfTrailingZeros`` of ``uint64`` hashes ``h``:
    the bucket is the top ``bits`` bits, the level the trailing zeros of ``h`` with a 1 forced at
    bit ``64 - bits`` (so at most ``64 - bits``), capped at ``levels - 1``."""
    h = np.asarray(h, dtype=_U)
    bucket = (h >> _U(64 - bits)).astype(np.intp)
    level = trailing_zeros(h, bits)
    np.minimum(level, levels - 1, out=level)
    return bucket, level


def trailing_zeros(h: np.ndarray, bits: int) -> np.ndarray:
    """Presto's ``numberOfTrailingZeros(hash, indexBitLength)``: the trailing zeros of ``h`` with a
    1 placed at bit ``64 - bits`` (so at most ``64 - bits``), as ``intp``.

    The lowest set bit ``2**k`` times a de Bruijn constant has ``k``'s own pattern in its top six
    bits, which a 64-entry table names (vectorized, exact for every ``k``).

    >>> trailing_zeros(np.array([1, 8, 0, 1 << 40], dtype=np.uint64), 12).tolist()
    [0, 3, 52, 40]
    """
    v = np.asarray(h, dtype=_U) | _U(1 << (64 - bits))
    low = np.negative(v)
    low &= v  # the lowest set bit, a power of two
    low *= _DEBRUIJN
    low >>= _U(58)
    out = np.take(_DEBRUIJN_TABLE, low.view(np.int64))
    v.fill(0)
    low.fill(0)
    return out


_DEBRUIJN = _U(0x022FDD63CC95386D)
_DEBRUIJN_TABLE = np.zeros(64, dtype=np.intp)
for _k in range(64):
    _DEBRUIJN_TABLE[((1 << _k) * 0x022FDD63CC95386D & _M64) >> 58] = _k
del _k


#: Grids a feature above the sketch defines, by their item kind (``ip-country``: one grid per
#: country, :mod:`panstream.country`): items -> ``make(buckets, levels, hashing)``. Registered
#: where the grid is defined (:func:`register_items`), so the sketch names nothing above it.
_GRIDS: dict[str, Callable[[int, int, str | None], SketchGrid]] = {}


def register_items(items: str, make: Callable[[int, int, str | None], SketchGrid]) -> None:
    """Let :meth:`SketchGrid.parse_spec` build ``sketch:BxP:<items>`` grids with ``make``.

    Raises:
        ValueError: ``items`` is a built-in item kind or already registered to another maker.
    """
    if items in ITEM_KINDS or _GRIDS.get(items, make) is not make:
        msg = f"sketch items {items!r} are already defined"
        raise ValueError(msg)
    _GRIDS[items] = make


class SketchGrid(Universe):
    """The cells of a Sketch-Flip-Merge grid, as a :class:`~panstream.universe.Universe`: any item
    maps to the bit ``level * buckets + bucket`` of its Presto hash. Spec
    ``sketch:4096x24:ip`` (buckets x levels : item kind); ``size`` is ``buckets * levels``.

    Used as a universe, the grid lets everything that maps items to cells (``update``, the log
    parser, the ingest loop) feed a sketch unchanged. Items are never outside a grid: every
    well-formed item has a cell.

    >>> g = SketchGrid(4096, 24, "ip")
    >>> g.spec, g.size, g.indices(["10.0.0.1", "::ffff:10.0.0.1", "junk"]).malformed
    ('sketch:4096x24:ip', 98304, 1)

    ``hashing`` is the 64-bit hash (:mod:`panstream.estimators.sketch.hashing`): ``murmur3`` (Presto's Java
    ``SfmSketch.add``, the default, no spec suffix) or Presto SQL's ``xxhash64-varchar`` /
    ``xxhash64-bigint`` (spec ``sketch:4096x24:ip:xxhash64-varchar``).
    """

    __slots__ = ("bits", "buckets", "hashing", "items", "levels")

    def __init__(self, buckets: int = DEFAULT_BUCKETS, levels: int = DEFAULT_LEVELS,
                 items: str = "ip", hashing: str | None = None) -> None:
        from panstream.estimators.sketch.hashing import DEFAULT_HASH, check_grid, resolve

        bits = index_bits(buckets)
        check_levels(levels, bits)
        if items not in ITEM_KINDS:
            msg = f"sketch items must be one of {', '.join(ITEM_KINDS)}, got {items!r}"
            raise ConfigurationError(msg)
        hashing = resolve(hashing, items)
        check_grid(hashing, levels)
        suffix = "" if hashing == DEFAULT_HASH else f":{hashing}"
        super().__init__("sketch", buckets * levels, f"sketch:{buckets}x{levels}:{items}{suffix}")  # type: ignore[arg-type]
        self.buckets, self.levels, self.items, self.bits = buckets, levels, items, bits
        self.hashing = hashing

    @classmethod
    def parse_spec(cls, spec: str) -> SketchGrid:
        """The grid of a ``sketch:BxP:items`` spec.

        Raises:
            UniverseError: not such a spec.
        """
        try:
            kind, dims, items, *hashing = spec.split(":")
            b, p = dims.split("x")
            if kind != "sketch" or len(hashing) > 1:
                raise ValueError
            make = _GRIDS.get(items)
            if make is not None:  # a grid a feature registered (ip-country: panstream.country)
                return make(int(b), int(p), hashing[0] if hashing else None)
            grid = cls(int(b), int(p), items, hashing[0] if hashing else None)
        except (ValueError, ConfigurationError) as exc:
            msg = (f"invalid sketch grid spec {spec!r} (expected e.g. sketch:4096x24:ip, or "
                   f"sketch:4096x24:ip:presto-sql): {exc}")
            raise UniverseError(msg) from None
        return grid

    @property
    def reads_addresses(self) -> bool:
        """An ``:ip`` grid reads client addresses in the one normalization of every address
        universe (:mod:`panstream.universe.addresses`); an ``:id`` grid reads any identifier."""
        return self.items == "ip"

    def address_cells(self, keys: AddressKeys) -> IndexResult:
        """Cells of canonical address items: each is hashed as its canonical text (Presto's
        ``varchar``) with the grid's hash, the IPv4 clients in one vectorized pass
        (:func:`hash64_ipv4_text`, or XXH64 of the same text words), the IPv6 ones from their
        text. The keys are wiped; nothing is outside a grid."""
        try:
            if self.items != "ip":
                msg = f"sketch grid {self.spec} reads identifiers, not addresses"
                raise ConfigurationError(msg)
            h4 = _hash_ipv4_text(keys.v4, self.hashing)
            if keys.v6_hi.size:
                from panstream.estimators.sketch.hashing import hash_blobs

                texts = [canonical_text(int(a) << 64 | int(b)) for a, b in
                         zip(keys.v6_hi.tolist(), keys.v6_lo.tolist(), strict=True)]
                h6, _ = hash_blobs(texts, self.hashing)
                texts.clear()
                h = np.concatenate([h4, h6])
                h4.fill(0)
                h6.fill(0)
            else:
                h = h4
            cells = self.cells_of_hashes(h)
            h.fill(0)
            return IndexResult(cells)
        finally:
            keys.wipe()

    def cells_of_hashes(self, h: np.ndarray) -> np.ndarray:
        """The cell ``level * buckets + bucket`` of each hash (``intp``)."""
        bucket, level = bucket_level(h, self.bits, self.levels)
        level *= self.buckets
        level += bucket
        bucket.fill(0)
        return level

    def indices(self, items: Iterable[Any] | np.ndarray) -> IndexResult:
        """Cells of ``items``: integer arrays are hashed as ``bigint`` (``id``) or IPv4 addresses
        (``ip``); other items by :func:`canonical_item`. The cells of a mixed batch of integers
        and text come in no particular order (a sketch is a set: order does not matter)."""
        refuse_bare_item(items, "indices")
        if self.items == "ip" and isinstance(items, list) and len(items) >= 64:
            keys = _token_keys(items)
            if keys is not None:  # a batch of log tokens: read like the lines of a log
                return self.token_cells(keys)
        if isinstance(items, np.ndarray) and items.dtype.kind in "iu" and self.items == "id" \
                and self.hashing != "xxhash64-varchar":
            h = hash64_ints(items) if self.hashing == "murmur3" else _xxh64_ints(items)
            malformed = empty = 0
        elif isinstance(items, list) and all(type(t) is bytes or type(t) is str for t in items):
            return self._indices_repeated(items)
        else:
            h, malformed, empty = hash_items(items.tolist() if isinstance(items, np.ndarray)
                                             else items, self.items, self.hashing)
        cells = self.cells_of_hashes(h)
        h.fill(0)
        return IndexResult(cells, malformed=malformed, empty=empty)

    def _indices_repeated(self, items: list[Any]) -> IndexResult:
        """Text items (a log's tokens): each distinct token is written canonically and hashed once,
        then every token takes its token's cell (logs repeat their clients many times)."""
        cell, good, canon = distinct_canonical(items, self.items)
        if self.hashing == "murmur3":
            h, ok = hash64_bytes(canon), None
        else:
            from panstream.estimators.sketch.hashing import hash_blobs

            h, ok = hash_blobs(canon, self.hashing)
        cells = self.cells_of_hashes(h)
        h.fill(0)
        if ok is not None:  # xxhash64-bigint: text that is no integer is malformed
            cells[~ok] = -1
        cell.update(zip(good, cells.tolist(), strict=True))
        cells.fill(0)
        good.clear()
        canon.clear()
        return cells_of_tokens(cell, items)

    def _indices_objects(self, items: Iterable[Any]) -> IndexResult:
        return self.indices(list(items))

    def item_of(self, index: int) -> str:
        msg = "a sketch cell is a hash bucket and level: it cannot name its items"
        raise ConfigurationError(msg)


def distinct_canonical(seq: list[Any], items: str) -> tuple[dict[Any, int], list[Any], list[bytes]]:
    """Each distinct text token of ``seq`` written canonically (:func:`canonical_item`), once.

    Returns:
        ``(cell, good, canon)``: ``cell`` maps the tokens that take no cell to ``-1`` (malformed)
        or ``-2`` (blank); ``good`` are the other tokens, ``canon`` their canonical bytes, in the
        same order. The caller hashes ``canon``, adds ``good``'s cells to ``cell``, clears
        ``good`` and ``canon``, and ends with :func:`cells_of_tokens`.
    """
    distinct = dict.fromkeys(seq)
    cell: dict[Any, int] = {}
    good: list[Any] = []
    canon: list[bytes] = []
    for t in distinct:
        try:
            c = canonical_item(t, items)
        except _Blank:
            cell[t] = -2
            continue
        if c is None:
            cell[t] = -1
        else:  # text items canonicalize to bytes
            good.append(t)
            canon.append(c)  # type: ignore[arg-type]
    distinct.clear()
    return cell, good, canon


def cells_of_tokens(cell: dict[Any, int], seq: list[Any]) -> IndexResult:
    """Every token of ``seq`` takes its token's cell from ``cell`` (then cleared); malformed
    (``-1``) and blank (``-2``) tokens are counted and dropped."""
    allc = np.fromiter((cell[t] for t in seq), dtype=np.intp, count=len(seq))
    cell.clear()
    malformed = int(np.count_nonzero(allc == -1))
    empty = int(np.count_nonzero(allc == -2))
    out = allc[allc >= 0] if malformed or empty else allc
    if out is not allc:
        allc.fill(0)
    return IndexResult(out, malformed=malformed, empty=empty)


def _xxh64_ints(values: np.ndarray) -> np.ndarray:
    from panstream.estimators.sketch.xxh64 import xxh64_ints

    return xxh64_ints(values)


# ---------------------------------------------------------------------- estimation
def _level_terms(n: float, buckets: int, levels: int, r: float
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per level: the first and second derivatives in ``n`` of the log pseudo-likelihood term of an
    on bit and of an off bit, and the on-probability ``pi``. ``r`` is the flip probability."""
    lv = np.arange(levels, dtype=np.float64)
    p = np.exp2(-(lv + 1)) / buckets       # Presto's observationProbability (also at the top level)
    lg = np.log1p(-p)
    x = np.exp(n * lg)                      # (1 - p)^n: the chance no item hit the bit
    on = 1.0 - r
    c2 = on - r
    d_on = on - c2 * x                      # Pr[bit = 1]
    d_off = r + c2 * x                      # Pr[bit = 0]
    a1 = lg * (1 - on / d_on)
    b1 = lg * (1 - (1 - on) / d_off)
    a2 = -on * c2 * lg * lg * x / (d_on * d_on)
    b2 = (1 - on) * c2 * lg * lg * x / (d_off * d_off)
    return a1, b1, a2, b2, d_on


def cardinality(ones: np.ndarray | list[float], buckets: int, r: float) -> int:
    """Presto's ``SfmSketch.cardinality()`` from the per-level counts of ones: Newton's method on the
    log pseudo-likelihood from ``n = 1`` until a step is at most 0.1 (at most 1000 steps), rounded
    half up, at least 0.

    Args:
        ones: number of on bits at each level (length ``P``).
        buckets: ``B``.
        r: the sketch's flip probability (Presto's ``randomizedResponseProbability``; 0 when not
            private).
    """
    n = _newton(np.asarray(ones, dtype=np.float64), buckets, r)
    return 0 if math.isnan(n) else max(0, math.floor(n + 0.5))


def _newton(k: np.ndarray, buckets: int, r: float) -> float:
    levels = k.size
    off = buckets - k
    guess, change, it = 1.0, math.inf, 0
    while abs(change) > 0.1 and it < MAX_ITERATIONS:
        a1, b1, a2, b2, _ = _level_terms(guess, buckets, levels, r)
        d1 = float(np.dot(k, a1) + np.dot(off, b1))
        d2 = float(np.dot(k, a2) + np.dot(off, b2))
        if d2 == 0 or not math.isfinite(d1 / d2):
            return math.nan  # Java: an infinite step, then NaN, which Math.round makes 0
        change = -d1 / d2
        guess += change
        it += 1
    return guess


@dataclass(frozen=True)
class Fit:
    """The maximum pseudo-likelihood estimate from per-level counts and its uncertainty.

    Attributes:
        n: the estimate (Newton's limit, unrounded).
        cardinality: Presto's rounded ``cardinality()``.
        stderr: its standard error from the bits' randomness (:func:`expected_stderr` at ``n``).
        gradient: ``d n / d K_l`` for each level's count of ones ``K_l`` (the delta method's
            weights for noise added to the counts).
    """

    n: float
    cardinality: int
    stderr: float
    gradient: tuple[float, ...]


def mple(ones: np.ndarray | list[float] | tuple[float, ...], buckets: int, r: float) -> Fit:
    """The estimate of :func:`cardinality`, unrounded, with its standard error and the gradient of
    the estimate with respect to the counts (for release noise). Counts are clipped to
    ``[0, buckets]`` first (noisy counts may leave it; clipping is post-processing)."""
    k = np.clip(np.asarray(ones, dtype=np.float64), 0, buckets)
    n = _newton(k, buckets, r)
    if math.isnan(n):
        n = 0.0
    a1, b1, a2, b2, _ = _level_terms(max(n, 1.0), buckets, k.size, r)
    d2 = float(np.dot(k, a2) + np.dot(buckets - k, b2))
    grad = tuple(float(g) for g in (-(a1 - b1) / d2)) if d2 else tuple(0.0 for _ in range(k.size))
    return Fit(n, max(0, math.floor(n + 0.5)), expected_stderr(n, buckets, k.size, r), grad)


def expected_stderr(n: float, buckets: int, levels: int, r: float) -> float:
    """The standard error of the estimate at a true count of ``n`` distinct items.

    A sandwich (delta-method) variance ``Var(S) / E[S']**2`` of the pseudo-likelihood's score
    ``S = sum_l K_l a_l + (B - K_l) b_l``, with the *exact* covariance of the per-level counts for a
    fixed set of ``n`` distinct items under a random hash: a bit at level ``l`` is missed by all
    items with probability ``x_l = (1 - p_l)**n`` (``p_l = 2**-(l+1) / B``), two bits with
    ``(1 - p_l - p_m)**n``; the occupied bits are then flipped independently (variance
    ``B r (1 - r)`` per level, scaled by ``(1 - 2r)**2`` for the occupancy). Treating the bits as
    independent instead (the Fisher information of the pseudo-likelihood) overstates the error at
    small ``n``, where occupancies of one level are negatively correlated.
    """
    at = max(float(n), 1.0)
    lv = np.arange(levels, dtype=np.float64)
    p = np.exp2(-(lv + 1)) / buckets
    lg = np.log1p(-p)
    x = np.exp(at * lg)
    a1, b1, a2, b2, pi = _level_terms(at, buckets, levels, r)
    g = a1 - b1
    # Cov(O_l, O_m) of the numbers of occupied bits: B**2 [(1-p_l-p_m)^n - x_l x_m] off the
    # diagonal, B x(1-x) + B(B-1)[(1-2p)^n - x^2] on it, each difference computed without
    # cancellation as x_l x_m expm1(n ln(1 - p_l p_m / ((1-p_l)(1-p_m)))).
    u = p / (1 - p)
    cross = np.outer(x, x) * np.expm1(at * np.log1p(-np.outer(u, u)))
    cov = buckets * buckets * cross
    diag = buckets * x * (1 - x) + buckets * (buckets - 1) * np.diag(cross)
    np.fill_diagonal(cov, diag)
    cov *= (1 - 2 * r) ** 2
    cov[np.diag_indices(levels)] += buckets * r * (1 - r)
    var_score = float(g @ cov @ g)
    hess = float(np.dot(buckets * pi, a2) + np.dot(buckets * (1 - pi), b2))
    if hess == 0 or var_score <= 0:
        return math.inf
    return math.sqrt(var_score) / abs(hess)


def planned_error(n: float, epsilon: float, release_epsilon: float | None = None,
                  buckets: int = DEFAULT_BUCKETS, levels: int = DEFAULT_LEVELS) -> dict[str, float]:
    """The standard errors a sketch will have at ``n`` distinct items, before ingesting: the state
    part (:func:`expected_stderr`) and, for a release at ``release_epsilon``, the release part
    (Laplace noise of variance ``2 / release_epsilon**2`` on every level's count, through the
    estimate's gradient at the expected counts).

    >>> e = planned_error(50_000, 1.0, 1.0)
    >>> round(e["state"] / 50_000, 3), e["release"] < 0.1 * e["state"]
    (0.027, True)
    """
    from panstream.calibration import calibrate

    r = float(calibrate(epsilon, "rr").q)
    state = expected_stderr(n, buckets, levels, r)
    rel = 0.0
    if release_epsilon:
        *_, pi = _level_terms(max(n, 1.0), buckets, levels, r)
        fit = mple(buckets * pi, buckets, r)
        rel = math.sqrt(2 / release_epsilon**2 * math.fsum(g * g for g in fit.gradient))
    return {"state": state, "release": rel, "total": math.hypot(state, rel),
            "bytes": buckets * levels / 8, "flip_probability": r}


# ---------------------------------------------------------------------- merge
def merge_flip_probability(p1: Fraction | float, p2: Fraction | float) -> Fraction | float:
    """Presto's ``mergeRandomizedResponseProbabilities``: ``(p1 + p2 - 3 p1 p2) / (1 - 2 p1 p2)``,
    exact when given :class:`~fractions.Fraction` s.

    >>> merge_flip_probability(Fraction(1, 4), Fraction(0))
    Fraction(1, 4)
    """
    return (p1 + p2 - 3 * p1 * p2) / (1 - 2 * p1 * p2)


def merge_probabilities(p1: Fraction, p2: Fraction) -> dict[tuple[int, int], Fraction]:
    """The probability that the randomized merge sets a merged bit to 1, for each pair of input bits
    ``(b1, b2)``, exactly: with ``p = merge_flip_probability(p1, p2)`` and ``c = (1 - 2p) /
    ((1 - 2p1)(1 - 2p2))``, ``Pr[1] = 1 - p - c (1 - p1 - b1)(1 - p2 - b2)`` (Theorem 4.8).

    Since ``E[1 - p_i - b_i] = (1 - 2 p_i)(1 - t_i)`` for a true bit ``t_i``, a merged bit is 1 with
    probability ``1 - p - (1 - 2p)(1 - t1)(1 - t2)``: ``1 - p`` if either stream hit it and ``p``
    otherwise, the law of the union's sketch privatized with flip probability ``p``. All four values
    lie in [0, 1] (two zeros merge to a 0 with certainty), so nothing is clamped.

    The Presto versions we read compute ``p + c (1 - 2p - c (1 - p1 - b1)(1 - p2 - b2))`` instead,
    which equals the above only when ``c = 1`` (a non-private input): for two private inputs it
    sets a hit bit to 1 with probability ``p + c (1 - 2p) > 1 - p``, too many ones, which Presto's
    newer ``testMergedPrivateCardinalitiesAreUnbiased`` rules out. We implement the unbiased form.

    >>> pr = merge_probabilities(Fraction(1, 4), Fraction(1, 4))
    >>> pr[(0, 0)], pr[(1, 1)]
    (Fraction(0, 1), Fraction(4, 7))
    """
    p = Fraction(merge_flip_probability(Fraction(p1), Fraction(p2)))
    c = (1 - 2 * p) / ((1 - 2 * Fraction(p1)) * (1 - 2 * Fraction(p2)))
    out = {}
    for b1 in (0, 1):
        for b2 in (0, 1):
            v = 1 - p - c * (1 - p1 - b1) * (1 - p2 - b2)
            assert 0 <= v <= 1, (p1, p2, b1, b2)
            out[(b1, b2)] = v
    return out


def merged_epsilon(e1: float, e2: float) -> float:
    """The epsilon of a merged sketch's flip probability: ``-ln(e^-e1 + e^-e2 - e^-(e1+e2))``."""
    return -math.log(math.exp(-e1) + math.exp(-e2) - math.exp(-(e1 + e2)))


# ---------------------------------------------------------------------- Presto's format
_HEAD = struct.Struct("<biidi")


@dataclass(frozen=True)
class PrestoSketch:
    """A sketch as Presto serializes it (a published, already-private object: no ledger).

    Attributes:
        bits: index bit length ``log2 B``.
        levels: Presto's ``precision`` ``P``.
        flip: the flip probability (``randomizedResponseProbability``; 0 for a non-private sketch).
        bitmap: the grid as packed bytes, bit ``level * B + bucket`` at byte ``i // 8``, bit
            ``i % 8`` (the full ``B * P / 8`` bytes).
    """

    bits: int
    levels: int
    flip: float
    bitmap: bytes

    @property
    def buckets(self) -> int:
        return 1 << self.bits

    def ones_by_level(self) -> np.ndarray:
        """The per-level counts of ones (``int64``, length ``P``)."""
        grid = np.unpackbits(np.frombuffer(self.bitmap, dtype=np.uint8), bitorder="little")
        return grid.reshape(self.levels, self.buckets).sum(axis=1, dtype=np.int64)

    def cardinality(self) -> int:
        """Presto's ``cardinality()`` of this sketch."""
        return cardinality(self.ones_by_level(), self.buckets, self.flip)

    @property
    def epsilon(self) -> float:
        """The epsilon of the flip probability, ``ln((1 - r) / r)`` (infinite when not private)."""
        return math.inf if self.flip <= 0 else math.log((1 - self.flip) / self.flip)


def to_presto(sk: PrestoSketch) -> bytes:
    """Presto's serialization: tag 7 (byte), index bit length (int32), precision (int32), flip
    probability (float64), bitmap byte length (int32), bitmap, all little-endian; the bitmap is Java's
    ``BitSet.toByteArray()``, so trailing zero bytes are dropped."""
    body = sk.bitmap.rstrip(b"\0")
    return _HEAD.pack(FORMAT_TAG, sk.bits, sk.levels, sk.flip, len(body)) + body


def from_presto(data: bytes | bytearray | memoryview) -> PrestoSketch:
    """Read Presto's serialized SfmSketch (checked like Presto's ``deserialize``).

    Raises:
        StateError: wrong tag, out-of-range fields, a bitmap longer than the grid, or trailing or
            missing bytes; the message says which.
    """
    mv = bytes(data)
    if len(mv) < _HEAD.size:
        msg = f"not a Presto SfmSketch: {len(mv)} bytes, shorter than its {_HEAD.size}-byte header"
        raise StateError(msg)
    tag, bits, levels, flip, nbytes = _HEAD.unpack_from(mv)
    if tag != FORMAT_TAG:
        msg = f"not a Presto SfmSketch: format tag {tag}, expected {FORMAT_TAG}"
        raise StateError(msg)
    if not 1 <= bits <= 32 or not levels >= 1 or bits + levels > 64:
        msg = f"invalid Presto SfmSketch: index bit length {bits}, precision {levels}"
        raise StateError(msg)
    if bits > 24 or (1 << bits) * levels > 1 << 30:
        msg = f"Presto SfmSketch of 2**{bits} x {levels} bits is larger than panstream reads"
        raise StateError(msg)
    if not (math.isfinite(flip) and 0 <= flip <= 0.5):
        msg = f"invalid Presto SfmSketch: flip probability {flip!r} outside [0, 0.5]"
        raise StateError(msg)
    total = ((1 << bits) * levels + 7) // 8
    if nbytes < 0 or nbytes > total or len(mv) != _HEAD.size + nbytes:
        msg = (f"invalid Presto SfmSketch: bitmap of {nbytes} bytes in {len(mv) - _HEAD.size} "
               f"bytes of data, for a grid of {total} bytes")
        raise StateError(msg)
    body = mv[_HEAD.size :]
    if (1 << bits) * levels % 8 and nbytes == total and body[-1] >> ((1 << bits) * levels % 8):
        msg = "invalid Presto SfmSketch: bits set beyond the grid"
        raise StateError(msg)
    return PrestoSketch(bits, levels, flip, body + bytes(total - nbytes))
