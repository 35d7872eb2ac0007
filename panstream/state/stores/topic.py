"""The topic store: shard snapshots in a compacted Kafka topic, so members need no shared disk.

Snapshots larger than the broker's message size limit are split into chunks under a manifest
(see :class:`TopicStore` for the layout of keys, the fenced stems and the ledger's records). The
store talks to Kafka through the tiny :class:`RecordLog` protocol; the Kafka implementation lives
in :mod:`panstream.sources.kafka`, the only package that imports kafka. Keys, manifests and
records are the ones of every panstream since the fence; a topic written before it (stems without
an epoch) and its older ledger records (:data:`LEDGER_KEY`, :data:`INITIAL_LEDGER_KEY`) are read
as before.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import secrets
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from panstream.errors import ConfigurationError, FencedError, StateError
from panstream.release.ledger import PrivacyLedger
from panstream.release.ledger_log import Opening, Replay, replay
from panstream.state.fence import Fence, claim_epoch, fenced_message
from panstream.state.stores.protocol import LedgerJson, key_order, parse_ledger

#: Default largest chunk of a snapshot in one Kafka message: below the broker's default
#: ``message.max.bytes`` (1 MiB) with room for the record overhead.
DEFAULT_CHUNK_BYTES = 900_000


class RecordLog(Protocol):
    """An append-only keyed log, e.g. a compacted Kafka topic (one partition)."""

    def append(self, key: bytes, value: bytes | None) -> None:
        """Append a record; ``None`` is a tombstone (deletes ``key`` on compaction)."""

    def flush(self) -> None:
        """Return when every appended record is durable (``acks=all``)."""

    def read_all(self) -> Iterator[tuple[bytes, bytes | None]]:
        """Every record from the beginning of the log to its current end, in order."""


_MANIFEST = b"PSTM1"


@dataclass(frozen=True)
class _Manifest:
    version: str
    chunks: int
    length: int
    sha256: str
    base: int = 0  # a fenced snapshot's fence base (panstream.state.fence); the epoch is in the key

    def encode(self) -> bytes:
        body: dict[str, Any] = {"version": self.version, "chunks": self.chunks,
                                "length": self.length, "sha256": self.sha256}
        if self.base:
            body["base"] = self.base
        return _MANIFEST + json.dumps(body, sort_keys=True).encode()

    @classmethod
    def decode(cls, key: str, raw: bytes) -> _Manifest:
        if not raw.startswith(_MANIFEST):
            msg = f"state topic record {key!r} is not a panstream shard manifest"
            raise StateError(msg)
        try:
            d = json.loads(raw[len(_MANIFEST):])
            return cls(str(d["version"]), int(d["chunks"]), int(d["length"]), str(d["sha256"]),
                       int(d.get("base", 0)))
        except (ValueError, KeyError, TypeError):
            msg = f"state topic manifest {key!r} is corrupt: delete the state topic to start over"
            raise StateError(msg) from None


#: Record key of a state topic's charged release ledger in panstream <= 0.2 (one JSON ledger,
#: compacted to its newest value). Still read: the union of its records fixes the ledger's epoch
#: and counts as spent, and the first new release migrates it into the log. Never written now.
LEDGER_KEY = "#release-ledger"

#: Record key of the empty ledger that consumers of panstream <= 0.2 wrote; read as an opening.
INITIAL_LEDGER_KEY = "#release-ledger-initial"

#: Key prefix of the group definition's records (:mod:`panstream.state.group_definition`): each
#: under a key of its own, the first in log order holds.
DEFINITION_PREFIX = "#group/"

#: Key prefix of the group ledger's log records (:mod:`panstream.release.ledger_log`): each record
#: gets a key of its own (the prefix and 32 random hex digits), so compaction never drops one.
LEDGER_RECORD_PREFIX = "#ledger/"


class TopicStore(LedgerJson):
    """Shard snapshots in a compacted topic, chunked below the broker's message size limit.

    Layout (keys are UTF-8): a snapshot of shard ``K`` is written as chunk records
    ``K#<version>#<i>`` (``i = 0..n-1``), then a manifest record ``K`` naming the version, the
    chunk count, the length and a SHA-256 of the snapshot. The manifest is written only after every
    chunk is durable, so a reader never sees a manifest whose chunks are missing. After the new
    manifest is durable the previous version's chunks get tombstones, so compaction drops them.
    ``version`` is a random 64-bit label (not a counter: it says nothing about how often a shard
    was saved).

    Until the broker compacts the topic, older snapshots stay readable in its log: configure the
    state topic with ``cleanup.policy=compact`` and a short ``segment.ms`` and
    ``min.cleanable.dirty.ratio`` so they go soon (docs/kafka.md, threat model).

    **Fenced slices** (:mod:`panstream.state.fence`). A slice saved by its owner under epoch
    ``e`` is written under the *stem* ``K@e`` instead of ``K`` (chunks ``K@e#<version>#<i>``,
    manifest ``K@e``; '@' never occurs in a topic name); a snapshot without an epoch (the stem
    ``K``: per-partition shards, and stores written before fencing) has epoch 0. Every reader
    (restore, release, inspect) takes the newest manifest of the *highest* epoch of ``K``, so a
    zombie's snapshot of an older epoch is ignored wherever it lands in the log. Compaction keeps
    the newest record of each key: one manifest per epoch, and the highest epoch's is its owner's
    newest, which no zombie can supersede (its records have other keys). A fenced save
    tombstones only chunks of its own epoch, and its owner's first save also tombstones every
    older epoch's records it saw at the claim (a zombie's tombstones never reach a newer owner's
    chunks). The epoch in a key counts rebalances: public, as the module docstring of
    :mod:`panstream.state.fence` says.

    The group's release ledger is an append-only log of records in the same topic
    (:mod:`panstream.release.ledger_log`), each under a key of its own
    (:data:`LEDGER_RECORD_PREFIX` and 32 random hex digits) that never gets a tombstone, so
    compaction never removes one and every reader replays the same ledger.

    Args:
        log: the record log (see :class:`RecordLog`).
        chunk_bytes: the largest chunk in one record.
    """

    def __init__(self, log: RecordLog, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        if chunk_bytes < 1:
            msg = f"chunk_bytes must be positive, got {chunk_bytes}"
            raise ConfigurationError(msg)
        self.log = log
        self.chunk_bytes = chunk_bytes
        # Live chunk keys of each shard as last seen by load() or written by save(), so save()
        # can tombstone them without replaying the whole log each time.
        self._live: dict[str, set[str]] | None = None  # by stem ('K' or 'K@e')
        self._cache: tuple[dict[str, _Manifest], dict[str, bytes]] | None = None
        self._heads: dict[str, tuple[int, str, int]] = {}  # key -> (highest epoch, stem, base)
        self._stems: dict[str, set[str]] = {}  # key -> every stem seen with a manifest
        self._claims: dict[str, Fence] = {}  # this owner's claims
        self._stale: dict[str, list[str]] = {}  # key -> older epochs' records to tombstone once
        self._legacy: PrivacyLedger | None = None
        self._records: list[bytes | PrivacyLedger] = []
        self._definition: bytes | None = None
        self._ledger_stale = True  # whether _legacy and _records must be read (again) from the log

    def refresh(self) -> None:
        """Forget the last replay of the log: the next :meth:`load` reads it again.

        Loads reuse one replay until then, so restoring several shards after a rebalance reads the
        topic once; the consumer calls this before each batch of restores.
        """
        self._cache = None

    def _scan(self, shards: bool = True) -> tuple[dict[str, _Manifest], dict[str, bytes]]:
        """Replay the log: newest manifest per shard and every live chunk record, and the ledger
        records (only these with ``shards`` false: no chunk is kept, the shard cache is left)."""
        manifests: dict[str, _Manifest] = {}
        chunks: dict[str, bytes] = {}
        live: dict[str, set[str]] = {}
        charged: list[bytes] = []
        records: list[bytes | PrivacyLedger] = []
        definition: bytes | None = None
        for kb, value in self.log.read_all():
            key = kb.decode("utf-8", "replace")
            if key.startswith("#"):  # a ledger record (no shard or chunk key starts with '#')
                if value is None:
                    continue  # never written by panstream; the record it shadows still counts
                if key.startswith(DEFINITION_PREFIX):
                    if definition is None:  # the first in log order is the group's
                        definition = bytes(value)
                elif key == LEDGER_KEY:
                    charged.append(value)
                elif key == INITIAL_LEDGER_KEY:
                    with contextlib.suppress(StateError):
                        records.append(parse_ledger(value, key))
                elif key.startswith(LEDGER_RECORD_PREFIX):
                    records.append(value)
            elif not shards:
                continue
            elif "#" in key:
                if value is None:
                    chunks.pop(key, None)
                else:
                    chunks[key] = value
            elif value is None:
                manifests.pop(key, None)
            else:
                manifests[key] = _Manifest.decode(key, value)
        # An older panstream's charged ledger (one key, compacted to its newest value): the union
        # of every such record still in the log fixes the epoch and counts as spent.
        self._legacy = (parse_ledger(_unite(charged, f"record {LEDGER_KEY!r} of {self.log!r}"),
                                     LEDGER_KEY) if charged else None)
        self._records = records
        self._definition = definition
        self._ledger_stale = False
        if shards:
            for k in chunks:
                live.setdefault(k.split("#", 1)[0], set()).add(k)
            heads: dict[str, tuple[int, str, int]] = {}
            stems: dict[str, set[str]] = {}
            for stem, man in manifests.items():
                key, epoch = split_stem(stem)
                stems.setdefault(key, set()).add(stem)
                if key not in heads or epoch > heads[key][0]:
                    heads[key] = (epoch, stem, man.base)
            self._live, self._heads, self._stems = live, heads, stems
            self._cache = (manifests, chunks)
        return manifests, chunks

    def save(self, key: str, data: bytes | bytearray) -> None:
        """Write a new version of ``key``'s snapshot; durable on return. Old chunks get tombstones.

        Unfenced (per-partition shards, rotations): written under the highest epoch the last
        read of the log saw for ``key`` (0 if none), so a rotation of a stopped group's fenced
        slices replaces what a restore reads.
        """
        if self._live is None:
            self._scan()
        _, stem, base = self._heads.get(key, (0, key, 0))
        self._write(stem, data, base, [])

    def claim(self, key: str, generation: int, current: Callable[[], bool]) -> int:
        """Claim slice ``key`` for its new owner (:func:`panstream.state.fence.claim_epoch`)
        against the highest epoch in the log (read once per :meth:`refresh`). Nothing is written:
        the owner's saves carry the epoch, and readers order by it. Returns the epoch.

        Raises:
            FencedError: a newer owner claimed the slice and this member is not current.
        """
        manifests, _ = self._cache or self._scan()
        head = self._heads.get(key)
        stored = None if head is None else Fence(head[0], head[2])
        fence = claim_epoch(stored, generation, current, key)
        self._claims[key] = fence
        live = self._live or {}
        stale: list[str] = []
        for stem in sorted(self._stems.get(key, set()) | {s for s in live
                                                           if split_stem(s)[0] == key}):
            if split_stem(stem)[1] < fence.epoch:
                stale.extend(sorted(live.get(stem, set())))
                if stem in manifests:
                    stale.append(stem)
        self._stale[key] = stale
        return fence.epoch

    def save_fenced(self, key: str, data: bytes | bytearray, epoch: int) -> None:
        """Write ``key``'s snapshot under ``epoch`` (stem ``K@epoch``); durable on return. Its
        own epoch's older chunks get tombstones, and with the first save after the claim every
        older epoch's records seen at the claim (they are superseded once this one is durable).

        A topic cannot refuse a zombie's write: readers ignore it (lower epoch).

        Raises:
            FencedError: this store never claimed ``key`` under ``epoch``.
        """
        fence = self._claims.get(key)
        if fence is None or fence.epoch != epoch:
            raise FencedError(fenced_message(key, epoch, fence))
        if self._live is None:
            self._scan()
        self._write(f"{key}@{epoch}", data, fence.base, self._stale.pop(key, []))

    def _write(self, stem: str, data: bytes | bytearray, base: int, extra: list[str]) -> None:
        """Chunks, then the manifest ``stem`` (each durable), then tombstones of the stem's
        previous chunks and of ``extra``."""
        self._cache = None
        live = self._live if self._live is not None else {}
        version = secrets.token_hex(8)
        view = memoryview(data)
        n = max(1, -(-len(view) // self.chunk_bytes))
        for i in range(n):
            part = view[i * self.chunk_bytes:(i + 1) * self.chunk_bytes]
            self.log.append(f"{stem}#{version}#{i}".encode(), bytes(part))
        self.log.flush()
        man = _Manifest(version, n, len(view), hashlib.sha256(view).hexdigest(), base)
        self.log.append(stem.encode(), man.encode())
        self.log.flush()
        stale = sorted(live.get(stem, set())) + extra
        for k in stale:
            self.log.append(k.encode(), None)
        if stale:
            self.log.flush()
        live[stem] = {f"{stem}#{version}#{i}" for i in range(n)}
        key, epoch = split_stem(stem)
        for k in extra:  # an older epoch's chunk or manifest: gone once compacted
            gone = k.split("#", 1)[0]
            if gone != stem:
                live.pop(gone, None)
                self._stems.get(key, set()).discard(gone)
        if epoch >= self._heads.get(key, (0, key, 0))[0]:
            self._heads[key] = (epoch, stem, base)

    def load(self, key: str) -> bytearray | None:
        """The newest complete snapshot of ``key``'s highest epoch, or ``None`` (a ``bytearray``
        the caller wipes).

        The chunk records themselves are immutable ``bytes`` held by kafka-python and this store's
        cache until :meth:`refresh`: they cannot be wiped (see docs/threat-model.md).

        Raises:
            StateError: a chunk is missing or the snapshot does not match its checksum.
        """
        manifests, chunks = self._cache or self._scan()
        head = self._heads.get(key)
        if head is None:
            return None
        stem = head[1]
        man = manifests[stem]
        parts = []
        for i in range(man.chunks):
            part = chunks.get(f"{stem}#{man.version}#{i}")
            if part is None:
                msg = (f"state topic is missing chunk {i} of {man.chunks} of shard {key!r}: the "
                       "topic was truncated or compacted wrongly; delete it to start over")
                raise StateError(msg)
            parts.append(part)
        data = bytearray().join(parts)
        if len(data) != man.length or hashlib.sha256(data).hexdigest() != man.sha256:
            msg = f"shard {key!r} in the state topic fails its checksum: delete it to start over"
            raise StateError(msg)
        return data

    def keys(self) -> list[str]:
        """Keys of all stored shards, sorted."""
        self._scan()
        return sorted(self._heads, key=key_order)

    # Release ledger hooks (panstream.state.stores.release): records under LEDGER_RECORD_PREFIX.
    def ledger_where(self) -> str:
        """Where the release ledger lives, for messages."""
        return f"records {LEDGER_RECORD_PREFIX}* of {self.log!r}"

    def ledger_replay(self, fresh: bool = True) -> Replay:
        """Replay the ledger log (:func:`panstream.release.ledger_log.replay`): every ledger
        record of the topic in log order (reading the topic again unless ``fresh`` is false and a
        replay of it is at hand)."""
        if fresh or self._ledger_stale:
            self._scan(shards=False)  # the ledger records only: no chunk kept in memory
        return replay(self._records, self.ledger_where(), fixed=self._legacy)

    def append_ledger(self, record: bytes) -> None:
        """Append one ledger record under a key of its own (never compacted away: no other record
        has its key, and no tombstone is ever written for it); durable (``acks=all``) on return.

        The first append to a topic with an older panstream's charged ledger record first appends
        that ledger as an opening (migrated into the log: its entries stay spent even once
        compaction keeps only the newest record of the old key).
        """
        if self._ledger_stale:
            self._scan(shards=False)
        if self._legacy is not None and not any(isinstance(r, bytes) for r in self._records):
            self._put(Opening(self._legacy).encode())
        self._put(record)
        self.log.flush()
        self._ledger_stale = True  # read again (with everyone else's appends) before next use

    def _put(self, record: bytes) -> None:
        key = f"{LEDGER_RECORD_PREFIX}{secrets.token_hex(16)}"
        self.log.append(key.encode(), bytes(record))

    def ledger_lock(self) -> AbstractContextManager[None]:
        """No lock: the log order decides between releases racing from several hosts."""
        return contextlib.nullcontext()

    def ledger_history(self) -> None:
        """None: the topic itself is the history (nothing in it is ever removed)."""
        return None

    # The group's definition (panstream.state.group_definition): records under keys of their
    # own, the first in log order is the definition (compaction keeps every one: unique keys).
    def definition(self) -> bytes | None:
        """The group definition the topic holds: its first ``#group/`` record (``None``: none)."""
        self._scan(shards=False)
        return self._definition

    def put_definition(self, data: bytes) -> bytes:
        """Append the group definition unless the topic holds one; the one that holds
        afterwards: the first ``#group/`` record in log order, read back after the append is
        durable (members racing agree on it, as on the ledger's opening).

        Raises:
            StateError: the topic cannot be read or written.
        """
        held = self.definition()
        if held is not None:
            return held
        self.log.append(f"{DEFINITION_PREFIX}{secrets.token_hex(16)}".encode(), bytes(data))
        self.log.flush()
        held = self.definition()
        if held is None:  # pragma: no cover - an acknowledged record not read back
            msg = f"the group definition written to {self.log!r} was not read back: retry"
            raise StateError(msg)
        return held

    def definition_where(self) -> str:
        """Where the definition lives, for messages."""
        return f"records {DEFINITION_PREFIX}* of {self.log!r}"

    def __repr__(self) -> str:
        return f"TopicStore({self.log!r}, chunk_bytes={self.chunk_bytes})"


def split_stem(stem: str) -> tuple[str, int]:
    """A state topic record stem's shard key and epoch: ``'K@e'`` -> ``('K', e)``, ``'K'`` ->
    ``('K', 0)`` (a snapshot without an epoch).

    >>> split_stem("g-cells/3@12"), split_stem("events/0")
    (('g-cells/3', 12), ('events/0', 0))
    """
    key, at, epoch = stem.rpartition("@")
    if at and key and epoch.isdigit():
        return key, int(epoch)
    return stem, 0


def _unite(records: list[bytes], where: str) -> bytes:
    """The newest ledger record united with every older record of its epoch."""
    newest = parse_ledger(records[-1], where)
    for raw in records[:-1]:
        try:
            older = PrivacyLedger.from_dict(json.loads(raw))
        except (ValueError, KeyError, TypeError, AttributeError, StateError):
            continue
        if older.epoch == newest.epoch:
            newest.absorb(older)
    return json.dumps(newest.to_dict(), sort_keys=True).encode()

