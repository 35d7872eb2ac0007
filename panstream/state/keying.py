"""Where a keyed Kafka producer puts an item, and the record a verified shard carries (issue 39).

Pure: NumPy only, no Kafka. The per-partition layout (``panstream kafka --layout partition``) keeps
one full table per source partition, and the partition-aware merge
(:func:`panstream.state.merge.merge_partitioned`) takes cell ``c``'s bit from the partition the
producers' partitioner gives the message key ``text(c)``: the canonical text of the cell (the
dotted IPv4 address, the decimal integer of a ``range`` universe). That is right only if every
message applied to partition ``p`` carried an item whose cell that partitioner puts in ``p``; the
member checks it on every message it applies (:func:`partitions_of_cells`) and its shards say so
in a public parameter (:data:`RECORD`, :class:`Keying`). The release refuses the partition-aware
merge of shards without it (:func:`group_keying`).

The two partitioners a merge can reproduce, for a message with a non-empty key:

* ``murmur2``: ``(murmur2(key) & 0x7fffffff) % K`` with Kafka's seed ``0x9747b28c``: the Java
  client's default partitioner, kafka-python's ``DefaultPartitioner``, and librdkafka's
  ``partitioner=murmur2`` / ``murmur2_random``.
* ``crc32``: ``crc32(key) % K`` (the zlib CRC-32: reflected polynomial ``0x04c11db7``, initial and
  final XOR ``0xffffffff``; unsigned): librdkafka's ``consistent`` and ``consistent_random``, the
  latter librdkafka's **default**, so confluent-kafka's and every librdkafka-based shipper's.

Anything else (``random``, ``fnv1a``, the null key's sticky or round-robin choice) does not place
an item where a merge could find it. Test vectors: librdkafka ``tests/0048-partitioner.c``.

>>> hex(int(murmur2_rows(np.frombuffer(b"hejsan", np.uint8).reshape(1, -1))[0]))
'0x5ec19395'
>>> hex(int(crc32_rows(np.frombuffer(b"hejsan", np.uint8).reshape(1, -1))[0]))
'0xd077037e'
>>> partitions_of_cells(Universe.parse("ipv4:10.0.0.0/30"), 7).tolist()
[5, 5, 3, 6]
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from panstream.errors import ConfigurationError, StateError
from panstream.universe import Universe

#: The partitioners whose placement of a keyed message a merge can reproduce (module docstring).
PARTITIONERS = ("murmur2", "crc32")

#: The public snapshot parameter of a shard whose member verified every message it applied.
RECORD = "keying"

#: Universe kinds whose cells determine the message key (the partition-aware merge's).
KEYED_KINDS = ("ipv4", "range")

_SEED = np.uint32(0x9747B28C)
_M = np.uint32(0x5BD1E995)
#: Cells rendered and hashed at a time (bounds the temporaries of a whole-universe owner map).
_CHUNK = 1 << 20


def _crc_table() -> np.ndarray:
    t = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        t = np.where(t & np.uint32(1), (t >> np.uint32(1)) ^ np.uint32(0xEDB88320),
                     t >> np.uint32(1))
    return t.astype(np.uint32)


_CRC = _crc_table()


def murmur2_rows(rows: np.ndarray) -> np.ndarray:
    """Kafka's murmur2 (Java client ``Utils.murmur2``) of every row of an ``(n, L)`` uint8 matrix."""
    n, length = rows.shape
    with np.errstate(over="ignore"):
        h = np.full(n, _SEED ^ np.uint32(length), dtype=np.uint32)
        nblocks = length // 4
        if nblocks:
            blocks = np.ascontiguousarray(rows[:, : nblocks * 4]).view("<u4")
            for i in range(nblocks):
                k = blocks[:, i] * _M
                k ^= k >> np.uint32(24)
                k *= _M
                h *= _M
                h ^= k
        tail = length & 3
        base = nblocks * 4
        if tail >= 3:
            h ^= rows[:, base + 2].astype(np.uint32) << np.uint32(16)
        if tail >= 2:
            h ^= rows[:, base + 1].astype(np.uint32) << np.uint32(8)
        if tail >= 1:
            h ^= rows[:, base].astype(np.uint32)
            h *= _M
        h ^= h >> np.uint32(13)
        h *= _M
        h ^= h >> np.uint32(15)
    return h


def crc32_rows(rows: np.ndarray) -> np.ndarray:
    """The CRC-32 (zlib's, librdkafka's ``rd_crc32``) of every row of an ``(n, L)`` uint8 matrix."""
    crc = np.full(rows.shape[0], 0xFFFFFFFF, dtype=np.uint32)
    for j in range(rows.shape[1]):
        crc = _CRC[(crc ^ rows[:, j]) & np.uint32(0xFF)] ^ (crc >> np.uint32(8))
    return crc ^ np.uint32(0xFFFFFFFF)


def _partitions_of_rows(rows: np.ndarray, partitions: int, partitioner: str) -> np.ndarray:
    if partitioner == "murmur2":
        h = murmur2_rows(rows) & np.uint32(0x7FFFFFFF)
    else:
        h = crc32_rows(rows)
    return (h.astype(np.int64) % partitions).astype(np.int64)


def check_partitioner(partitioner: str) -> None:
    """Raises ConfigurationError: not one of :data:`PARTITIONERS`."""
    if partitioner not in PARTITIONERS:
        msg = (f"unknown partitioner {partitioner!r}: a merge reproduces {' or '.join(PARTITIONERS)} "
               "(murmur2: Java, kafka-python, librdkafka murmur2_random; crc32: librdkafka's "
               "default consistent_random)")
        raise ConfigurationError(msg)


def partition_of_key(key: bytes, partitions: int, partitioner: str = "murmur2") -> int:
    """The partition ``partitioner`` gives a message with the non-empty ``key``.

    >>> partition_of_key(b"23456", 17), 0x058d780f % 17
    (9, 9)
    >>> partition_of_key(b"23456", 17, "crc32"), 0xb1b451d7 % 17
    (7, 7)
    """
    check_partitioner(partitioner)
    rows = np.frombuffer(key, dtype=np.uint8).reshape(1, -1)
    return int(_partitions_of_rows(rows, partitions, partitioner)[0])


def _put_decimal(out: np.ndarray, cur: np.ndarray, v: np.ndarray) -> None:
    """Write the decimal digits of ``v[i]`` into ``out[i, cur[i]:]`` and advance ``cur``."""
    digits = np.ones(v.size, dtype=np.int64)
    p = np.uint64(10)
    while True:
        more = v >= p
        if not more.any():
            break
        digits += more
        p = p * np.uint64(10)
    rows = np.arange(v.size)
    for j in range(int(digits.max()) if v.size else 0):
        m = j < digits
        place = (np.uint64(10) ** (digits[m] - 1 - j).astype(np.uint64))
        out[rows[m], cur[m] + j] = ((v[m] // place) % np.uint64(10) + np.uint64(48)).astype(np.uint8)
    cur += digits


def _octet_table() -> tuple[np.ndarray, np.ndarray]:
    text = np.zeros((256, 3), dtype=np.uint8)
    for o in range(256):
        b = str(o).encode()
        text[o, :len(b)] = np.frombuffer(b, np.uint8)
    return text, np.array([len(str(o)) for o in range(256)], dtype=np.int64)


_OCTET_TEXT, _OCTET_LEN = _octet_table()


def _key_rows(universe: Universe, cells: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(positions, rows)`` per key length: the canonical text of ``cells[positions]`` as an
    ``(n, L)`` uint8 matrix (``universe.item_of``, rendered without a Python string per cell).
    The texts are items: every buffer is zeroed once the caller has hashed the rows."""
    n = cells.size
    cur = np.zeros(n, dtype=np.int64)
    if universe.kind == "ipv4":
        addr = cells.astype(np.uint64) + np.uint64(int(ipaddress.IPv4Address(universe.item_of(0))))
        width = 18  # 15 characters, and room for an octet's three columns written past the last
        out = np.zeros((n, width), dtype=np.uint8)
        flat = out.reshape(-1)
        start = np.arange(n, dtype=np.int64) * width
        for i, shift in enumerate((24, 16, 8, 0)):
            octet = ((addr >> np.uint64(shift)) & np.uint64(255)).astype(np.intp)
            for j in range(3):  # a short octet's extra columns are overwritten by what follows
                flat[start + cur + j] = _OCTET_TEXT[octet, j]
            cur += _OCTET_LEN[octet]
            octet.fill(0)
            if i < 3:
                flat[start + cur] = ord(".")
                cur += 1
        addr.fill(0)
    else:
        out = np.zeros((n, 20), dtype=np.uint8)
        values = cells.astype(np.uint64)
        _put_decimal(out, cur, values)
        values.fill(0)
    try:
        for length in np.unique(cur).tolist():
            pos = np.flatnonzero(cur == length)
            rows = np.ascontiguousarray(out[pos, :length])
            try:
                yield pos, rows
            finally:
                rows.fill(0)
    finally:
        out.fill(0)


def require_keyed_kind(universe: Universe) -> None:
    """Raises ConfigurationError: cells of ``universe`` do not determine the message key."""
    if universe.kind not in KEYED_KINDS:
        msg = (f"a partition-aware merge needs cells that determine the message key; {universe.kind} "
               "universes do not: use the sum merge")
        raise ConfigurationError(msg)


def partitions_of_cells(universe: Universe, partitions: int, partitioner: str = "murmur2",
                        cells: np.ndarray | None = None) -> np.ndarray:
    """The partition ``partitioner`` gives a message keyed by the canonical text of each of
    ``cells`` (default: every cell of ``universe``, the merge's owner map).

    Raises:
        ConfigurationError: ``partitions`` < 1, an unknown partitioner, or an ``ipv6``/``hashed``
            universe, whose cells do not determine the message key.
    """
    if partitions < 1:
        msg = f"partitions must be positive, got {partitions}"
        raise ConfigurationError(msg)
    check_partitioner(partitioner)
    require_keyed_kind(universe)
    idx = np.arange(universe.size, dtype=np.int64) if cells is None else np.asarray(cells)
    owner = np.empty(idx.size, dtype=np.int64)
    for start in range(0, idx.size, _CHUNK):
        part = idx[start:start + _CHUNK]
        for pos, rows in _key_rows(universe, part):
            owner[start + pos] = _partitions_of_rows(rows, partitions, partitioner)
    return owner


# ---------------------------------------------------------------------- the shard's record
@dataclass(frozen=True)
class Keying:
    """What a verifying member checked every applied message against: items placed by
    ``partitioner`` among the topic's ``partitions`` partitions (public: configuration and topic
    metadata, never data)."""

    partitioner: str
    partitions: int

    def param(self) -> dict[str, Any]:
        """The snapshot parameter :data:`RECORD` (``extra=`` of a snapshot)."""
        return {RECORD: {"partitioner": self.partitioner, "partitions": self.partitions}}

    def describe(self) -> str:
        return f"{self.partitioner} over {self.partitions} partitions"


def keying_of(params: Mapping[str, Any]) -> Keying | None:
    """The record of a snapshot's parameters (``None``: a shard its member did not verify, e.g.
    one written before issue 39).

    Raises:
        StateError: a record that makes no sense.
    """
    raw = params.get(RECORD)
    if raw is None:
        return None
    try:
        k = Keying(str(raw["partitioner"]), int(raw["partitions"]))
        check_partitioner(k.partitioner)
        if k.partitions < 1:
            raise ValueError
    except (KeyError, TypeError, ValueError, ConfigurationError):
        msg = f"snapshot's {RECORD} parameter {raw!r} does not name a partitioner and a count"
        raise StateError(msg) from None
    return k


#: What to do with per-partition shards no member verified (the refusals below end with it).
UNVERIFIED_WAY = (
    "release them with --merge sum (each partition's table counted on its own: right for any "
    "producer keying that keeps an item in one partition, too high if it does not), or re-read "
    "the topic with the routed layout (the default, any keying) into a new --state-dir")


def group_keying(records: Mapping[str, Keying | None], partitions: int | None = None) -> Keying:
    """The one keying every per-partition shard of a group records, for the partition-aware merge.

    Args:
        records: ``{shard key: its record}``.
        partitions: ``release --partitions``, if given (it must agree).

    Raises:
        StateError: a shard without the record (its member did not check that the topic is
            keyed by the item: an unkeyed topic would release low), or shards of different
            partitioners or partition counts. Each says which merge or layout fits.
    """
    missing = sorted(k for k, r in records.items() if r is None)
    if missing:
        shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        msg = (f"the partition-aware merge needs shards whose members verified that every message "
               f"was keyed by its item; {shown} carry no such record (written before panstream "
               f"checked the keying, issue 39), and an unkeyed topic would release low: "
               f"{UNVERIFIED_WAY}")
        raise StateError(msg)
    seen = {r for r in records.values() if r is not None}
    if len(seen) != 1:
        msg = (f"the shards were verified against different placements "
               f"({', '.join(sorted(r.describe() for r in seen))}): the topic changed its partition "
               f"count or its producers' partitioner, so an item may sit in two partitions: "
               f"{UNVERIFIED_WAY}")
        raise StateError(msg)
    keying = seen.pop()
    if partitions is not None and partitions != keying.partitions:
        msg = (f"--partitions {partitions} contradicts the shards' verified {keying.describe()}: "
               "leave --partitions out (the shards say it)")
        raise ConfigurationError(msg)
    return keying
