"""Which 64-bit hash a sketch grid gives its items: Presto's Java ``add`` or Presto SQL's.

A Sketch-Flip-Merge sketch is only meaningful merged with sketches that hashed the same items the
same way: two sketches of one item hashed two ways set two bits, and their merge counts it twice.
Presto hashes two ways:

* ``murmur3`` (the default, and panstream's only hash before): ``SfmSketch.add(long)`` and
  ``SfmSketch.add(Slice)`` in Presto's Java, airlift's ``Murmur3Hash128.hash64`` (seed 0) of the
  value (a ``bigint`` as its 8 little-endian bytes, text as its UTF-8 bytes). Presto's
  documentation says the SQL functions hash this way too; they do not.
* ``xxhash64-varchar`` and ``xxhash64-bigint``: what Presto's SQL aggregation
  ``noisy_approx_set_sfm(col, epsilon, buckets, precision)`` does. It calls the column type's
  ``XX_HASH_64`` operator and passes the result to ``SfmSketch.addHash`` (the same bucket and
  level rule as ``add``). The value hashed depends on the SQL type of ``col``, so the hash name
  says which type an item becomes:

  - ``xxhash64-varchar``: every item is a ``VARCHAR``, XXH64 (seed 0) of its UTF-8 bytes
    (``VarcharOperators.xxHash64``). An address is the text of its canonical spelling
    (:func:`panstream.estimators.sketch.sfm.canonical_ip`: dotted IPv4, RFC 5952 IPv6, ``::ffff:a.b.c.d`` as IPv4),
    which is what ``CAST(ip AS varchar)`` prints for Presto's ``IPADDRESS``; an integer ID is its
    decimal text (``CAST(id AS varchar)``); text IDs are their UTF-8 bytes; ``bytes`` as they are.
  - ``xxhash64-bigint``: every item is a ``BIGINT``, XXH64 of its 8 little-endian bytes
    (``BigintOperators.xxHash64`` = airlift's ``XxHash64.hash(long)``; ``INTEGER``, ``SMALLINT``
    and ``TINYINT`` hash the same way, as a long). Integer IDs only (``:id`` grids): text must be
    a decimal integer (optional sign) in ``[-2**63, 2**64)``, taken modulo 2**64 like a Java long;
    anything else is malformed.

Presto SQL refuses a precision (levels) that is not a multiple of 8
(``SfmSketchAggregationUtils.validateSketchParameters``: "precision must be a multiple of 8"), so
an ``xxhash64-*`` grid must have one too: a sketch SQL could never build is no use to merge with.

The hash is part of the grid's spec (``sketch:4096x24:ip:xxhash64-varchar``; no suffix means
``murmur3``, so every older spec and state reads as before) and of a state's public parameters.

>>> resolve("presto-sql", "ip"), resolve(None, "id")
('xxhash64-varchar', 'murmur3')
>>> h, ok = hash_blobs([b"hashme", b"12"], "xxhash64-bigint")
>>> ok.tolist()
[False, True]
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

import numpy as np

from panstream.errors import ConfigurationError
from panstream.estimators.sketch.murmur3 import (
    hash64_bytes,
    hash64_ints,
    hash64_ipv4_text,
    hash64_text_words,
    ipv4_text_words,
)
from panstream.estimators.sketch.xxh64 import xxh64_bytes, xxh64_ints, xxh64_rows
from panstream.inputs.ipv6 import ipv6_text
from panstream.universe import IndexResult
from panstream.universe.addresses import address_key, canonical_text

__all__ = ["ALIASES", "DEFAULT_HASH", "HASHES", "SQL_TYPE", "STORED", "canonical_ip",
           "canonical_item", "cells_of_tokens", "check_grid", "distinct_canonical", "hash_blobs",
           "hash_canonical", "hash_items", "resolve", "stored_name"]

DEFAULT_HASH = "murmur3"
#: The hashes a grid may use.
HASHES = ("murmur3", "xxhash64-varchar", "xxhash64-bigint")
#: Names a user may type for them.
ALIASES = {"presto-sql": "xxhash64-varchar", "presto-sql-varchar": "xxhash64-varchar",
           "presto-sql-bigint": "xxhash64-bigint", "presto-java": "murmur3"}
#: The Presto SQL type an item becomes under each hash (``None``: Presto's Java ``add``).
SQL_TYPE = {"murmur3": None, "xxhash64-varchar": "VARCHAR", "xxhash64-bigint": "BIGINT"}
#: The ``hash`` value a snapshot stores for each (murmur3 keeps the name older states carry).
STORED = {"murmur3": "murmur3_x64_128.hash64", "xxhash64-varchar": "xxhash64-varchar",
          "xxhash64-bigint": "xxhash64-bigint"}
_M64 = (1 << 64) - 1
_U = np.uint64


def resolve(name: str | None, items: str) -> str:
    """The hash a grid of ``items`` (``ip``/``id``) uses for ``name`` (a hash, an alias or
    ``None`` for the default).

    Raises:
        ConfigurationError: an unknown name, or ``xxhash64-bigint`` for addresses.
    """
    if name is None:
        return DEFAULT_HASH
    key = ALIASES.get(name.strip().lower(), name.strip().lower())
    if key not in HASHES:
        msg = (f"unknown sketch hash {name!r}: pick one of {', '.join(HASHES)} (or presto-sql, the "
               "hash of Presto SQL's noisy_approx_set_sfm over a VARCHAR column)")
        raise ConfigurationError(msg)
    if key == "xxhash64-bigint" and items == "ip":
        msg = ("an address is hashed as the VARCHAR of its canonical text, not as a BIGINT: use "
               "xxhash64-varchar (presto-sql) with :ip grids, xxhash64-bigint with :id grids")
        raise ConfigurationError(msg)
    return key


def check_grid(hashing: str, levels: int) -> None:
    """Refuse a grid Presto SQL could not build with this hash (levels not a multiple of 8).

    Raises:
        ConfigurationError: an ``xxhash64-*`` hash with levels not a multiple of 8.
    """
    if hashing != DEFAULT_HASH and levels % 8:
        msg = (f"Presto SQL's noisy_approx_set_sfm needs a precision (levels) that is a multiple "
               f"of 8, got {levels}: use 8, 16 or 24 (the default) levels with {hashing}")
        raise ConfigurationError(msg)


def stored_name(hashing: str) -> str:
    """The ``hash`` parameter a snapshot of a grid with this hash stores."""
    return STORED[hashing]


def _parse_bigint(raw: bytes) -> int | None:
    """A decimal integer in ``[-2**63, 2**64)`` (ASCII, optional sign), or ``None``."""
    body = raw[1:] if raw[:1] in (b"-", b"+") else raw
    if not body or not body.isdigit() or len(body) > 20:
        return None
    v = int(raw)
    return v & _M64 if -(1 << 63) <= v < (1 << 64) else None


def hash_blobs(blobs: list[bytes], hashing: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Hashes of canonical text/bytes items under ``hashing``, and which were well formed
    (``None``: all of them; only ``xxhash64-bigint`` can refuse text, which must be an integer).

    The hashes of malformed items are 0 (their cells are to be dropped by the caller).
    """
    if hashing == "murmur3":
        return hash64_bytes(blobs), None
    if hashing == "xxhash64-varchar":
        return xxh64_bytes(blobs), None
    vals = [_parse_bigint(b) for b in blobs]
    ok = np.fromiter((v is not None for v in vals), dtype=bool, count=len(vals))
    arr = np.fromiter((0 if v is None else v for v in vals), dtype=_U, count=len(vals))
    vals.clear()
    h = xxh64_ints(arr)
    arr.fill(0)
    h[~ok] = 0
    return h, ok


def hash_canonical(ints: list[int], blobs: list[bytes], hashing: str
                   ) -> tuple[np.ndarray, int]:
    """Hashes of canonical items (``ints``: integer IDs modulo 2**64; ``blobs``: canonical text
    or bytes) under ``hashing``, and how many were malformed for it. Order: ints, then blobs."""
    if hashing == "xxhash64-varchar":  # an integer is the VARCHAR of its decimal text
        blobs = [str(v - (1 << 64) if v >> 63 else v).encode("ascii") for v in ints] + blobs
        ints = []
    if hashing == "murmur3":
        hi = hash64_ints(np.array(ints, dtype=_U)) if ints else np.empty(0, dtype=_U)
    else:
        hi = xxh64_ints(np.array(ints, dtype=_U)) if ints else np.empty(0, dtype=_U)
    hb, ok = hash_blobs(blobs, hashing)
    if hashing == "xxhash64-varchar":
        blobs.clear()  # our own list (the decimal texts and the caller's items)
    malformed = 0
    if ok is not None:
        malformed = int(ok.size - np.count_nonzero(ok))
        hb = hb[ok]
    out = np.concatenate([hi, hb])
    hi.fill(0)
    hb.fill(0)
    return out, malformed


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


def _hash_ipv4_text(addr: np.ndarray, hashing: str) -> np.ndarray:
    """The ``hashing`` hash of the dotted-decimal text of every IPv4 address, vectorized: Murmur3
    by :func:`~panstream.estimators.sketch.murmur3.hash64_ipv4_text`, XXH64
    (``xxhash64-varchar``) by :func:`_hash_text_rows` over the text rows."""
    if hashing == "murmur3":
        return hash64_ipv4_text(addr)
    lo, hi, n = ipv4_text_words(addr)
    rows = np.empty((lo.size, 16), dtype=np.uint8)
    words = rows.view("<u8")
    words[:, 0] = lo
    words[:, 1] = hi
    out = _hash_text_rows(rows, n, hashing)
    for x in (lo, hi, n, rows):
        x.fill(0)
    return out


def _hash_text_rows(rows: np.ndarray, n: np.ndarray, hashing: str, padded: bool = True
                    ) -> np.ndarray:
    """The ``hashing`` hash of each row's first ``n[i]`` bytes (``rows``: ``uint8``, a width a
    multiple of 16, zero-padded unless not ``padded``): Murmur3 in one pass
    (:func:`~panstream.estimators.sketch.murmur3.hash64_text_words`), XXH64 by
    :func:`~panstream.estimators.sketch.xxh64.xxh64_rows` over the rows of each length."""
    if hashing == "murmur3":
        return hash64_text_words(rows.view("<u8"), n, padded)
    out = np.empty(rows.shape[0], dtype=_U)
    for length in np.unique(n).tolist():
        sel = np.flatnonzero(n == length)
        part = np.ascontiguousarray(rows[sel, :length])
        out[sel] = xxh64_rows(part)
        part.fill(0)
    return out


def _hash_ipv6_text(hi: np.ndarray, lo: np.ndarray, hashing: str,
                    text: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """The ``hashing`` hash of the RFC 5952 text of every IPv6 key (``uint64`` halves; no IPv4
    client among them), vectorized: the text from :func:`panstream.inputs.ipv6.ipv6_text`
    (bit-exact with :func:`panstream.universe.addresses.canonical_text`), then
    :func:`_hash_text_rows` (issue 38: was ``inet_ntop`` and a hash per key in Python).

    ``text`` (:class:`panstream.universe.addresses.AddressKeys`' ``v6_text``): the rows whose
    text the log already wrote as RFC 5952 (the reader checked it is exactly what
    :func:`~panstream.inputs.ipv6.ipv6_text` writes for the key, ``tests/parse/test_ipv6_fast.py``);
    only the others (length 0) are written from their keys. It is wiped by its owner."""
    if text is None:
        rows, n = ipv6_text(hi, lo)
    else:
        rows, n = text
        need = np.flatnonzero(n == 0)
        if need.size:
            h2, l2 = hi[need], lo[need]
            r2, n2 = ipv6_text(h2, l2)
            rows[need, : r2.shape[1]] = r2
            n[need] = n2
            for a in (h2, l2, r2):
                a.fill(0)
    out = _hash_text_rows(rows, n, hashing, padded=text is None)
    if text is None:
        rows.fill(0)
        n.fill(0)
    return out


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
