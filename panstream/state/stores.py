"""Shard state stores: where the consumers of a group keep one snapshot per input partition.

Two implementations of :class:`panstream.checkpoint.ShardStore`, both keeping only the *newest*
snapshot of each shard (privacy invariant 5):

* :class:`DirectoryStore` (default): one file per shard in a directory, ``<topic>@<partition>.shard``,
  replaced atomically (temporary file, fsync, rename, fsync of the directory). Group members on
  several hosts share it through a shared or persistent volume.
* :class:`TopicStore`: a compacted Kafka topic, so members on different hosts need no shared disk.

Both also hold the group's release ledger, an append-only log of reservations
(:mod:`panstream.release.ledger_log`; :func:`release_store`, :func:`ensure_ledger`).
  Snapshots larger than the broker's message size limit are split into chunks (see the class).
  It talks to Kafka through the tiny :class:`RecordLog` protocol; the Kafka implementation lives in
  :mod:`panstream.sources.kafka`, the only package that imports kafka.

A shard snapshot is exactly :meth:`DensityEstimator.snapshot`: the bit table and public parameters.
The store adds nothing: no offset, no count, no timestamp of arrivals.

Example:
    >>> import tempfile
    >>> from panstream.estimators.density import DensityEstimator
    >>> store = DirectoryStore(tempfile.mkdtemp())
    >>> est = DensityEstimator("range:1024", epsilon=1.0)
    >>> store.save("events/0", encode_shard(est))
    >>> store.keys()
    ['events/0']
    >>> back = decode_shard(store.load("events/0"), "range:1024", 1.0, "rr")
    >>> bool((back.bits() == est.bits()).all())
    True
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from panstream import estimators
from panstream.errors import ConfigurationError, FencedError, PanstreamError, StateError
from panstream.estimators.base import Estimator
from panstream.estimators.density import DensityEstimator
from panstream.release.frequency import MergedHistograms
from panstream.release.ledger import (
    DEFAULT_BUDGET,
    GroupLedger,
    LedgerEntry,
    PrivacyLedger,
    ShardLedger,
)
from panstream.release.ledger_log import Opening, Replay, Reservation, replay
from panstream.state import persist
from panstream.state.fence import Fence, claim_epoch, fenced_message
from panstream.state.files import (
    LedgerHistory,
    atomic_write,
    history_path,
    real_path,
    state_lock,
)
from panstream.state.keying import RECORD, Keying, group_keying, keying_of
from panstream.state.slices import SliceLayout, encode_slice, head_params, slice_of
from panstream.universe import Universe

if TYPE_CHECKING:  # pragma: no cover
    pass

#: Default largest chunk of a snapshot in one Kafka message: below the broker's default
#: ``message.max.bytes`` (1 MiB) with room for the record overhead.
DEFAULT_CHUNK_BYTES = 900_000

_SUFFIX = ".shard"

#: Suffix of a slice's claim file in a state directory (``.<name>.shard.panstream-fence``).
FENCE_SUFFIX = ".panstream-fence"

#: How long a slice's claim or save waits for another member's claim or save of the same slice.
FENCE_LOCK_WAIT = 30.0


# ---------------------------------------------------------------------- snapshot codec
def encode_shard(est: Estimator, keying: Keying | None = None) -> bytearray:
    """A shard's snapshot: the table and public parameters, and **no ledger** (``null``): a shard
    has no budget of its own, the group's ledger (:func:`release_store`) is the only one. With
    ``keying``, the public record that its member checked every message it applied against that
    placement (:mod:`panstream.state.keying`, issue 39).

    Returned as a ``bytearray`` that the checkpointer zeroes once it is durable, so no copy of an
    old shard table stays in freed memory next to the live one.
    """
    return persist.snapshot_buffer(est, as_shard=True,
                                   extra=None if keying is None else keying.param())


def decode_shard(data: bytes | bytearray, universe: Universe | str, epsilon: float,
                 calibration: str | None = None, *, kind: str = "density",
                 modulus: int | None = None) -> Estimator:
    """Restore a shard snapshot, checking it matches the parameters this consumer runs with (its
    estimator family ``kind``, universe, epsilon, and ``calibration`` or ``modulus``).

    The shard gets a :class:`~panstream.release.ledger.ShardLedger`, which refuses every release
    (also for a shard written by an older panstream with a budget of its own).

    Raises:
        StateError: the snapshot is corrupt, or its family or parameters differ from the
            configured ones (the message names the stored values to resume with).
    """
    est = persist.restore(data, expect=estimators.expect_of(kind, universe, epsilon,
                                                               calibration, modulus))
    est.ledger = ShardLedger()
    return est


# ---------------------------------------------------------------------- directory store
class DirectoryStore:
    """Shard snapshots as files ``<dir>/<topic>@<partition>.shard``, replaced atomically.

    Args:
        directory: created if missing.

    Raises:
        StateError: the directory cannot be created or written.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            msg = f"cannot create state directory {self.directory}: {exc.strerror}; check the path"
            raise StateError(msg) from None

    def _path(self, key: str) -> Path:
        """``<topic>@<partition>.shard``: '@' never occurs in a Kafka topic name."""
        topic, _, part = key.rpartition("/")
        if not topic or "@" in topic or os.sep in topic or not part.isdigit():
            msg = f"invalid shard key {key!r}: expected '<topic>/<partition>'"
            raise ConfigurationError(msg)
        return self.directory / f"{topic}@{part}{_SUFFIX}"

    def save(self, key: str, data: bytes | bytearray) -> None:
        """Replace the snapshot of ``key`` atomically; durable on return."""
        atomic_write(self._path(key), data)  # raises StateError; offsets are not committed then

    def load(self, key: str) -> bytearray | None:
        """The snapshot of ``key``, or ``None`` if there is none.

        Returned as a ``bytearray`` (wiped by :func:`panstream.checkpoint.restore_shard` once the
        table is rebuilt from it).
        """
        try:
            with open(self._path(key), "rb", buffering=0) as f:
                buf = bytearray(os.fstat(f.fileno()).st_size)
                got = f.readinto(buf) if buf else 0
                if got != len(buf):
                    buf[:] = bytes(len(buf))
                    msg = f"shard snapshot {self._path(key)} shrank while being read; retry"
                    raise StateError(msg)
                return buf
        except FileNotFoundError:
            return None
        except OSError as exc:
            msg = f"cannot read shard snapshot {self._path(key)}: {exc.strerror}"
            raise StateError(msg) from None

    def keys(self) -> list[str]:
        """Keys of all stored shards, sorted."""
        out = []
        for p in self.directory.glob(f"*{_SUFFIX}"):
            topic, _, part = p.name[: -len(_SUFFIX)].rpartition("@")
            if topic and part.isdigit():
                out.append(f"{topic}/{part}")
        return sorted(out, key=_key_order)

    # Fencing (panstream.state.fence): a slice's claim in a file beside its snapshot, every fenced
    # save checked against it under the slice's flock.
    def _fence_path(self, key: str) -> Path:
        """``.<topic>@<partition>.shard.panstream-fence``: the slice's claimed epoch (JSON)."""
        p = self._path(key)
        return p.with_name(f".{p.name}{FENCE_SUFFIX}")

    def fence(self, key: str) -> Fence | None:
        """The slice's claim (``None``: never claimed, e.g. a directory written before fencing).

        Raises:
            StateError: the claim file is unreadable or corrupt.
        """
        path = self._fence_path(key)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            msg = f"cannot read slice claim {path}: {exc.strerror}; check the permissions"
            raise StateError(msg) from None
        try:
            d = json.loads(raw)
            return Fence(int(d["epoch"]), int(d.get("base", 0)))
        except (ValueError, KeyError, TypeError):
            msg = (f"slice claim {path} is corrupt: stop the group's members, remove the file "
                   "(the next owner claims the slice again) and restart them")
            raise StateError(msg) from None

    def _slice_lock(self, key: str) -> AbstractContextManager[None]:
        return state_lock(self._path(key), f"the claim or save of {key}", wait=FENCE_LOCK_WAIT)

    def claim(self, key: str, generation: int, current: Callable[[], bool]) -> int:
        """Claim slice ``key`` for its new owner (:func:`panstream.state.fence.claim_epoch`), under
        the slice's ``flock``; the claim file is written durably (as a snapshot is) before this
        returns. Returns the owner's epoch.

        Raises:
            FencedError: a newer owner claimed the slice and this member is not current.
            StateError: the claim cannot be read or written.
        """
        with self._slice_lock(key):
            fence = claim_epoch(self.fence(key), generation, current, key)
            body = json.dumps({"epoch": fence.epoch, "base": fence.base}, sort_keys=True)
            atomic_write(self._fence_path(key), body.encode())
        return fence.epoch

    def save_fenced(self, key: str, data: bytes | bytearray, epoch: int) -> None:
        """:meth:`save`, only while the slice's claim is still ``epoch`` (checked and written
        under the slice's ``flock``, which every claim takes too: no claim can slip in between).

        Raises:
            FencedError: another member claimed the slice since (nothing is written).
            StateError: the snapshot cannot be written.
        """
        with self.claimed(key, epoch):
            self.save(key, data)

    @contextlib.contextmanager
    def claimed(self, key: str, epoch: int) -> Iterator[None]:
        """Run the block only while ``key``'s claim is still ``epoch``, holding ``key``'s
        ``flock`` throughout (every claim takes it too: none can slip in during the block).

        For writes of other keys that belong to the claimed partition: the window-slices of
        slice ``r`` under ``--window`` (``<group>-w<start>/<r>`` and its closed copy) are saved
        and removed inside ``claimed("<group>-wcells/<r>", epoch)``.

        Raises:
            FencedError: another member claimed ``key`` since (the block does not run).
        """
        with self._slice_lock(key):
            stored = self.fence(key)
            if stored is None or stored.epoch != epoch:
                raise FencedError(fenced_message(key, epoch, stored))
            yield

    def delete(self, key: str) -> None:
        """Remove the snapshot of ``key`` (none is fine); durable on return (the directory is
        fsynced). Used for a closed window's slices once it is released (``kafka --window``).

        Raises:
            StateError: the file exists but cannot be removed.
        """
        try:
            os.unlink(self._path(key))
        except FileNotFoundError:
            return
        except OSError as exc:
            msg = f"cannot remove {self._path(key)}: {exc.strerror}; check the permissions"
            raise StateError(msg) from None
        _sync_dir(self.directory)

    # Release ledger hooks (see :func:`release_store`): the append-only log :data:`LEDGER_FILE`.
    def ledger_where(self) -> str:
        """Where the release ledger lives, for messages."""
        return str(self.directory / LEDGER_FILE)

    def _legacy_ledger(self) -> PrivacyLedger | None:
        """The ledger file of an older panstream (:data:`LEGACY_LEDGER_FILE`), if still there."""
        path = self.directory / LEGACY_LEDGER_FILE
        raw = _read_or_none(path)
        return None if raw is None else parse_ledger(raw, str(path))

    def ledger_records(self) -> list[bytes | PrivacyLedger]:
        """The ledger log's records in order (an older panstream's ledger file first).

        The last line is ignored while it lacks its newline (an append in progress, or torn by a
        crash before it was durable: that release never proceeded).

        Raises:
            StateError: the log cannot be read.
        """
        out: list[bytes | PrivacyLedger] = []
        legacy = self._legacy_ledger()
        if legacy is not None:
            out.append(legacy)
        raw = _read_or_none(self.directory / LEDGER_FILE)
        if raw:
            lines = raw.split(b"\n")
            out.extend(line for line in lines[:-1] if line)  # lines[-1]: b"" or a torn tail
        return out

    def ledger_replay(self) -> Replay:
        """Replay the ledger log (:func:`panstream.release.ledger_log.replay`)."""
        return replay(self.ledger_records(), self.ledger_where())

    def append_ledger(self, record: bytes) -> None:
        """Append one record to the ledger log, durable (fsync) on return.

        The first append migrates an older panstream's ``release-ledger.json`` into the log (an
        opening carrying its entries) and then removes that file. A torn last line left by a crash
        is cut off first (it was never durable, so no release followed it).

        Raises:
            StateError: the log cannot be written.
        """
        path = self.directory / LEDGER_FILE
        legacy = self._legacy_ledger()
        body = (b"" if legacy is None else Opening(legacy).encode() + b"\n") + record + b"\n"
        try:  # through a symbolic link to the real file, as the lock (issue 21)
            fd = os.open(real_path(path), os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                         0o600)
        except OSError as exc:
            msg = (f"cannot open release ledger {path}: {exc.strerror}; check the path and "
                   "permissions")
            raise StateError(msg) from None
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                head = os.pread(fd, size, 0)
                os.ftruncate(fd, head.rfind(b"\n") + 1)
            view = memoryview(body)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError as exc:
            msg = f"cannot append to release ledger {path}: {exc.strerror}; nothing was released"
            raise StateError(msg) from None
        finally:
            os.close(fd)
        if legacy is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.directory / LEGACY_LEDGER_FILE)  # migrated: one ledger file
        _sync_dir(self.directory)

    def read_ledger(self) -> bytes | None:
        """The release ledger as replayed from its log (JSON of a
        :class:`~panstream.release.ledger.PrivacyLedger`), or ``None`` if there is none.

        Raises:
            StateError: it exists but cannot be read.
        """
        led = self.ledger_replay().ledger
        return None if led is None else json.dumps(led.to_dict(), sort_keys=True).encode()

    def write_ledger(self, data: bytes) -> None:
        """Append the ledger ``data`` as an opening that carries its entries: they count as spent
        (a union with the log; it can never lower the spent total)."""
        self.append_ledger(Opening(parse_ledger(data, self.ledger_where())).encode())

    def ledger_lock(self) -> AbstractContextManager[None]:
        """Exclusive use of the ledger for one release (``flock``; waits up to
        :data:`LEDGER_LOCK_WAIT` seconds for another release to finish)."""
        return state_lock(self.directory / LEDGER_FILE, "a release", wait=LEDGER_LOCK_WAIT)

    def ledger_history(self) -> LedgerHistory:
        """The history beside the ledger, which detects an older ledger put back and refuses a
        ledger of an epoch it has not seen (strict: a group's tables have one ledger)."""
        return LedgerHistory(self.directory / LEDGER_FILE, what="release ledger", strict=True,
                             history_file=history_path(self.directory / LEGACY_LEDGER_FILE),
                             recover="Put the newest release-ledger.log back (a group's tables "
                                     "cannot be rotated in place: stop the consumers and start "
                                     "a new state directory for a fresh epoch)")

    def create_ledger(self, data: bytes) -> None:
        """Open the ledger (consumers, through :func:`ensure_ledger`): an opening appended to the
        log; if consumers race, the first opening in the log is the ledger."""
        self.append_ledger(Opening(parse_ledger(data, self.ledger_where())).encode())

    # The group's definition (panstream.state.group_definition): one file, created once.
    def definition(self) -> bytes | None:
        """The group definition this directory holds (``None``: none written yet)."""
        return _read_or_none(self.directory / DEFINITION_FILE)

    def put_definition(self, data: bytes) -> bytes:
        """Write the group definition unless one exists; the one that holds afterwards.

        First writer wins, also between members starting at the same instant: the bytes are
        written and fsynced to a file of their own, then hard-linked to
        :data:`DEFINITION_FILE` (``link`` fails if the name exists, and a reader never sees
        half a file); the loser reads the winner's.

        Raises:
            StateError: the directory cannot be written.
        """
        final = self.directory / DEFINITION_FILE
        tmp = self.directory / f".{DEFINITION_FILE}.{secrets.token_hex(8)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            with contextlib.suppress(FileExistsError):
                os.link(tmp, final)
            _sync_dir(self.directory)
        except OSError as exc:
            msg = (f"cannot write the group definition {final}: {exc.strerror}; check the path "
                   "and permissions")
            raise StateError(msg) from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        held = self.definition()
        if held is None:  # pragma: no cover - removed between the link and the read
            msg = f"the group definition {final} vanished while it was written: retry"
            raise StateError(msg)
        return held

    def definition_where(self) -> str:
        """Where the definition lives, for messages."""
        return str(self.directory / DEFINITION_FILE)

    def __repr__(self) -> str:
        return f"DirectoryStore({str(self.directory)!r})"


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        msg = (f"cannot read release ledger {path}: {exc.strerror}; check the path and "
               "permissions")
        raise StateError(msg) from None


def _sync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        dfd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def _key_order(key: str) -> tuple[str, int]:
    topic, _, part = key.rpartition("/")
    return (topic, int(part) if part.isdigit() else -1)


# ---------------------------------------------------------------------- topic store
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


class TopicStore:
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
        return sorted(self._heads, key=_key_order)

    # Release ledger hooks (see :func:`release_store`): records under LEDGER_RECORD_PREFIX.
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

    def read_ledger(self) -> bytes | None:
        """The release ledger (JSON) as replayed from the topic's ledger records at the last read
        of the log (the one that loaded the shards, if any; a new one otherwise), or ``None`` if
        the topic holds none."""
        led = self.ledger_replay(fresh=False).ledger
        return None if led is None else json.dumps(led.to_dict(), sort_keys=True).encode()

    def write_ledger(self, data: bytes) -> None:
        """Append the ledger ``data`` as an opening that carries its entries (they count as spent:
        a union with the log, which can never lower the spent total)."""
        self.append_ledger(Opening(parse_ledger(data, self.ledger_where())).encode())

    def ledger_lock(self) -> AbstractContextManager[None]:
        """No lock: the log order decides between releases racing from several hosts."""
        return contextlib.nullcontext()

    def ledger_history(self) -> None:
        """None: the topic itself is the history (nothing in it is ever removed)."""
        return None

    def create_ledger(self, data: bytes) -> None:
        """Open the ledger (consumers, through :func:`ensure_ledger`): an opening appended to the
        topic; if consumers race, the first opening in the log is the ledger."""
        self.append_ledger(Opening(parse_ledger(data, self.ledger_where())).encode())

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


# ---------------------------------------------------------------------- releasing a group's state
#: File of a state directory holding the group's release ledger: an append-only log, one record
#: per line (:mod:`panstream.release.ledger_log`), appended under an ``flock`` and fsynced. Consumers
#: only open it (:func:`ensure_ledger`); releases append reservations; nothing rewrites it.
LEDGER_FILE = "release-ledger.log"

#: The group definition's file in a state directory (:mod:`panstream.state.group_definition`).
DEFINITION_FILE = "group-definition.json"

#: The ledger file of panstream <= 0.2 (one JSON ledger, replaced by each release): still read,
#: and migrated into :data:`LEDGER_FILE` by the first append (then removed). Its history file
#: ``.release-ledger.json.panstream-ledger`` stays the directory's ledger history.
LEGACY_LEDGER_FILE = "release-ledger.json"

#: How long a group release waits for another release of the same directory to finish.
LEDGER_LOCK_WAIT = 30.0

MERGES = ("auto", "partitioned", "sum")


@dataclass(frozen=True)
class GroupState:
    """The shards of a state store, merged into one releasable estimator.

    Attributes:
        estimator: the merged estimator (its ledger is the state directory's release ledger): a
            table of the shards' family, or (frequency sum merge) the shards' summed histograms.
        method: ``"partitioned"`` or ``"sum"`` (per-partition shards), or ``"slices"`` (a routed
            group's slices laid end to end, :func:`merge_slice_store`); shards: number of shards
            or slices; topics: the shards' topics (none for slices).
        partitions: the partition count used by the partition-aware merge (0 for ``sum``).
        keyed: whether the operator asserted that messages are keyed by the item (default
            partitioner), so an item's messages reach one partition per topic.
        sensitivity: how much one person can change the merged statistic: the family's unit (1
            for a count of ones, 2 for a counter histogram) for the partition-aware merge (one cell
            per cell); for the sum merge that times the number of shards an item can reach (its
            topics if keyed, every shard if not).
        state_tables: how many stored shard tables one person's arrivals can change (the same
            bound for the shards on disk), which multiplies the state epsilon.
        layout: ``"partitions"`` (one full table per input partition) or ``"slices"``.
    """

    estimator: Estimator | MergedHistograms
    method: str
    shards: int
    topics: tuple[str, ...]
    partitions: int
    keyed: bool = False
    sensitivity: int = 1
    state_tables: int = 1
    layout: str = "partitions"


def merge_store(store: DirectoryStore | TopicStore, merge: str = "auto",
                partitions: int | None = None, keyed: bool = False) -> GroupState:
    """Load every shard of ``store`` and merge them (see :mod:`panstream.state.merge`).

    Args:
        store: the shard store.
        merge: ``"partitioned"`` (messages keyed by the item's text: only shards whose members
            checked that, and recorded it, :mod:`panstream.state.keying`, issue 39), ``"sum"``
            (any keying that keeps each item in one partition), or ``"auto"``: partitioned for
            one topic over an ``ipv4``/``range`` universe, else sum.
        partitions: the topic's partition count (default: the shards' record; it must agree).
        keyed: the operator asserts that every message is keyed by its item with the default
            partitioner, so one item reaches one partition per topic. Without it the privacy
            accounting assumes the worst case: one person's item may be in every shard, changing
            every shard table (state epsilon times the shard count) and, for the sum merge, the
            summed count of ones by up to the shard count (noise scaled to it).

    Raises:
        StateError: no shards, or shards that do not belong together; for the partition-aware
            merge (``auto`` included), shards without the keying record or with different ones
            (nothing is spent: the release has not begun).
        ConfigurationError: ``partitioned`` asked for where it is impossible.
    """
    from panstream.state import merge as m

    if merge not in MERGES:
        msg = f"unknown merge {merge!r}: use one of {', '.join(MERGES)}"
        raise ConfigurationError(msg)
    keys = store.keys()
    if not keys:
        msg = f"no shard snapshots in {store!r}: point at the consumers' --state-dir/--state-topic"
        raise StateError(msg)
    shards: dict[tuple[str, int], Estimator] = {}
    sliced: dict[int, tuple[SliceLayout, Estimator]] = {}
    records: dict[str, Keying | None] = {}  # each shard's keying record (issue 39)
    for key in keys:
        data = store.load(key)
        if data is not None:
            topic, _, part = key.rpartition("/")
            try:
                params = head_params(data)
                where = slice_of(params)
                table = persist.restore(data)
                if where is None:
                    shards[(topic, int(part))] = table
                    records[key] = keying_of(params)
                else:
                    sliced[where[1]] = (where[0], table)
            finally:
                if isinstance(data, bytearray):
                    data[:] = bytes(len(data))
    if sliced:
        return merge_slice_store(sliced, shards, merge)
    topics = tuple(sorted({t for t, _ in shards}))
    first = next(iter(shards.values()))
    method = merge
    if merge == "auto":
        method = ("partitioned" if len(topics) == 1 and first.universe.kind in ("ipv4", "range")
                  else "sum")
    if method == "partitioned":
        try:
            if len(topics) != 1:
                msg = f"the partition-aware merge needs the shards of one topic, found {topics}"
                raise ConfigurationError(msg)
            # only shards whose members checked that each item sat in its owner partition
            verified = group_keying(records, partitions)
        except PanstreamError:
            for e in shards.values():
                e.wipe()
            raise
        k = verified.partitions
        owner = m.kafka_partitions_of_cells(first.universe, k, verified.partitioner)
        est: Estimator | MergedHistograms = m.merge_group_partitioned(
            {p: e for (_, p), e in shards.items()}, owner)
    else:
        k = 0
        est = m.merge_group_sum([shards[key] for key in sorted(shards)])
    for e in shards.values():
        e.wipe()
    est.ledger = ShardLedger()  # releasable only once the group's one ledger is attached
    reach = len(topics) if keyed else len(shards)  # shards one person's item can change
    # One person changes one table's statistic by the family's unit (a count of ones by 1, a
    # histogram by 2); the sum merge adds the tables one person can reach.
    sensitivity = first.unit_sensitivity * (1 if method == "partitioned" else reach)
    return GroupState(est, method, len(shards), topics, k, keyed, sensitivity, reach)


def merge_slice_store(sliced: dict[int, tuple[SliceLayout, Estimator]],
                      shards: dict[tuple[str, int], Estimator], merge: str = "auto") -> GroupState:
    """The :class:`GroupState` of a routed group's store: its slices laid end to end
    (:func:`panstream.state.merge.merge_slices`), one table over the whole universe.

    Every cell lives in one slice and every arrival was applied to its cell's slice, whatever the
    producers' keying: the count of ones has the family's unit sensitivity and the stored tables
    are one table (``state_tables`` 1), with no ``keyed`` assertion needed. Slices no member has
    consumed yet get fresh initial draws.

    Raises:
        StateError: slices of different layouts, or slices mixed with per-partition shards.
        ConfigurationError: ``merge`` other than ``auto`` (the slices need no merge method).
    """
    from panstream.state import merge as m

    try:
        if shards:
            msg = (f"the store holds routed slices and {len(shards)} per-partition shard(s) "
                   f"({', '.join(f'{t}/{p}' for t, p in sorted(shards))}): one store per group "
                   "and layout; move one kind to its own --state-dir or --state-topic")
            raise StateError(msg)
        layouts = {lay for lay, _ in sliced.values()}
        if len(layouts) > 1:
            msg = (f"the store holds slices of {len(layouts)} different layouts "
                   f"({', '.join(sorted(f'{x.universe.spec} in {x.count}' for x in layouts))}): "
                   "a group restarted with another --universe or --slices on the same state")
            raise StateError(msg)
        if merge != "auto":
            msg = (f"--merge {merge} does not apply: this store holds routed slices, which are "
                   "one table laid end to end (leave --merge at auto)")
            raise ConfigurationError(msg)
        layout = layouts.pop()
        est = m.merge_slices({r: e for r, (_, e) in sliced.items()}, layout)
    finally:
        for _, e in sliced.values():
            e.wipe()
        for e in shards.values():
            e.wipe()
    est.ledger = ShardLedger()
    return GroupState(est, "slices", len(sliced), (), layout.count, True, est.unit_sensitivity, 1,
                      layout="slices")


def rotate_slice_store(store: DirectoryStore | TopicStore,
                       export: Callable[[Estimator], None] | None = None) -> GroupState:
    """End the epoch of a routed group's table: optionally ``export`` the merged table (e.g. the
    sketch in Presto's format, written durably; an exception from it rotates nothing), then
    overwrite every stored slice with a fresh
    initial draw (D0 bits or D counters), under the store's ledger lock.

    After an export the published table *is* the state: a later copy of the same slices would let
    anyone compare the two and see which bits were redrawn in between (who arrived). Fresh slices
    make every later state independent of the exported one. The group's ledger is kept as it is
    (its spent budget still counts: conservative); the members must be stopped first, or the next
    checkpoint of a running member would put its old slices back.

    Returns:
        The ending epoch's :class:`GroupState` (its estimator already wiped).

    Raises:
        StateError: the store holds no routed slices (per-partition shards are not rotated here),
            or a snapshot could not be read or written (if the export was written but the slices
            were not all replaced, run the rotation again without the export).
    """
    with store.ledger_lock():
        group = merge_store(store)
        try:
            if group.layout != "slices":
                msg = (f"{store!r} holds per-partition shards, not a routed group's slices: "
                       "rotate them by stopping the group and starting a new --state-dir")
                raise StateError(msg)
            if export is not None:
                assert isinstance(group.estimator, Estimator)
                export(group.estimator)  # durable before any slice is replaced
        finally:
            if isinstance(group.estimator, Estimator):
                group.estimator.wipe()
        for key, params in _heads(store):
            where = slice_of(params)
            if where is None:
                continue
            lay, r = where
            fresh = estimators.new(str(params["kind"]), lay.slice_universe(r),
                                   float(params["epsilon"]),
                                   calibration=str(params.get("calibration", "rr")),
                                   modulus=int(params.get("modulus", 16)), ledger=ShardLedger(),
                                   layout=lay.table_layout)
            buf = encode_slice(fresh, lay, r)
            try:
                store.save(key, buf)
            finally:
                buf[:] = bytes(len(buf))
                fresh.wipe()
    return group


def _heads(store: DirectoryStore | TopicStore) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(key, public parameters)`` of every snapshot in ``store`` (each snapshot read, its head
    parsed, the bytes zeroed: no table outlives the call)."""
    keys = store.keys()  # a store's list of keys, not a dict's view
    for key in keys:
        data = store.load(key)
        if data is None:
            continue
        try:
            params = head_params(data)
        finally:
            if isinstance(data, bytearray):
                data[:] = bytes(len(data))
        yield key, params


def store_layout(store: DirectoryStore | TopicStore) -> dict[str, Any]:
    """What a store holds, from the snapshots' public parameters only (``panstream inspect``):
    ``{"layout": "slices" | "partitions" | "empty", ...}`` with the universe, the slice count and
    the slices present, or the per-partition shards' topics and count and ``keying`` (the keying
    records their members wrote, and the shards without one: issue 39), and ``parameters``: the
    family's public parameters as a snapshot head carries them (epsilon, calibration or modulus,
    the exact probabilities' numerators).

    Raises:
        StateError: a snapshot cannot be read.
    """
    present: list[int] = []
    layouts: set[SliceLayout] = set()
    parts: list[str] = []
    kinds: set[str] = set()
    family: dict[str, Any] = {}
    records: dict[str, Keying | None] = {}
    for key, params in _heads(store):
        if not family:  # the family's public parameters (the same in every snapshot of a group)
            family = {k: v for k, v in params.items()
                      if k not in ("cells", "slice", "universe", RECORD)}
        where = slice_of(params)
        # a sketch's slices are rr bit tables; the group they make is the sketch
        kinds.add("sketch" if where is not None and where[0].is_sketch else str(params["kind"]))
        if where is None:
            parts.append(key)
            records[key] = keying_of(params)
        else:
            layouts.add(where[0])
            present.append(where[1])
    out: dict[str, Any] = {"estimator": sorted(kinds), "parameters": family}
    if layouts and parts:
        out.update(layout="mixed", slices_present=sorted(present), shards=parts)
    elif layouts:
        lay = next(iter(layouts)) if len(layouts) == 1 else None
        out.update(layout="slices", universe=lay.universe.spec if lay else None,
                   slices=lay.count if lay else None, slices_present=sorted(present))
    elif parts:
        out.update(layout="partitions", shards=parts,
                   topics=sorted({k.rpartition("/")[0] for k in parts}), keying=_keyings(records))
    else:
        out.update(layout="empty")
    return out


def _keyings(records: dict[str, Keying | None]) -> dict[str, Any]:
    """What ``inspect`` says of per-partition shards' keying records (issue 39): the records
    found (partitioner and partition count) and the shards without one."""
    found = sorted({(r.partitioner, r.partitions) for r in records.values() if r is not None})
    return {"verified": [{"partitioner": p, "partitions": k} for p, k in found],
            "unverified": sorted(k for k, r in records.items() if r is None)}


def ledger_summary(store: DirectoryStore | TopicStore) -> dict[str, Any]:
    """The group's release ledger as a replay of its log gives it (``panstream inspect``): where
    it lives, the budget, the spent total (admitted reservations), what is left, and how many
    reservations were admitted and refused; ``{"ledger": None, ...}`` if no ledger was opened.
    Public figures only (the ledger is data-independent); nothing is appended.

    Raises:
        StateError: a record of the log is not a ledger record.
    """
    rep = store.ledger_replay()
    out: dict[str, Any] = {"ledger_where": store.ledger_where()}
    led = rep.ledger
    if led is None:
        return {**out, "ledger": None}
    return {**out, "ledger": "log", "budget": led.budget, "budget_spent": led.spent,
            "budget_remaining": led.remaining, "releases": len(led.entries),
            "reservations_refused": len(rep.refused)}


def ensure_ledger(store: DirectoryStore | TopicStore, budget: float) -> bool:
    """Create the store's release ledger (empty, with ``budget``) if the store has no shards.

    Consumers call this when they start, so a release ledger exists from the first shard on. A
    store that already holds shards but no ledger is left alone: the ledger was lost, and
    :func:`release_store` refuses to start a new one silently (that would reset the budget).
    The ledger is *opened*: an opening record (epoch and budget) appended to the store's ledger
    log (a directory's :data:`LEDGER_FILE`, the state topic's ledger records). Appending never
    overwrites anything, and the first opening in the log is the ledger, so a consumer that checked
    an empty store and appends its opening late (after other consumers and a release) changes
    nothing: an opening of another epoch is ignored by every replay.

    Returns:
        Whether a new ledger was written.

    Raises:
        StateError: the store cannot be read or written.
    """
    if store.keys() or store.read_ledger() is not None:
        return False
    store.create_ledger(json.dumps(PrivacyLedger(budget).to_dict(), sort_keys=True).encode())
    return True


def release_store(store: DirectoryStore | TopicStore, epsilon: float, mechanism: str = "laplace",
                  merge: str = "auto", partitions: int | None = None, keyed: bool = False,
                  new_ledger: bool = False, *, by: int | str | None = None,
                  budget: float = DEFAULT_BUDGET, **options: Any) -> tuple[Any, GroupState]:
    """Merge a shard store and release it, recording the release in its ledger durably first.

    The release is the one of the shards' family (a density :class:`~panstream.release.density.
    Release` or map; a :class:`~panstream.release.frequency.FrequencyRelease`); ``options`` go to
    it (``confidence=``, and ``t=`` for frequency).

    The release is charged to the store's release ledger (a directory's :data:`LEDGER_FILE`, a
    state topic's ledger records): its reservation is appended durably (``fsync`` / ``acks=all``)
    *before any noise is drawn*, and the release proceeds only if the log's replay admits it
    (:func:`group_ledger`), so processes releasing at once, from any hosts, never overspend.
    Its noise is scaled to the merge's sensitivity and its state
    epsilon counts every shard one person can change (see :func:`merge_store`, ``keyed``).

    With ``by`` the release is a density map of the merged table (:mod:`panstream.release.maps`), charged
    once to the same ledger; it needs the partitioned merge (the sum merge lays the shard tables end
    to end, so its cells no longer name addresses).

    A store with shards but no ledger is refused unless ``new_ledger`` is set (the new ledger gets
    ``budget``; shards carry no budget of their own): the consumers create the ledger with the
    first shard
    (:func:`ensure_ledger`), so a missing one was deleted or lost, and starting over would
    silently reset the budget already spent on these tables.

    Raises:
        StateError, ConfigurationError: see :func:`merge_store`; or the ledger is missing,
            unreadable or corrupt.
        BudgetExhaustedError: the release would exceed the ledger's budget (nothing drawn or
            written).

    Example:
        >>> import tempfile
        >>> store = DirectoryStore(tempfile.mkdtemp())
        >>> ensure_ledger(store, 1.0)
        True
        >>> checked = Keying("murmur2", 1)  # the record of a member that checked the keying
        >>> store.save("events/0", encode_shard(DensityEstimator("range:1024"), checked))
        >>> rel, group = release_store(store, 0.25, keyed=True)
        >>> (group.method, rel.budget_remaining)
        ('partitioned', 0.75)
    """
    with store.ledger_lock():
        return _release_locked(store, epsilon, mechanism, merge, partitions, keyed, new_ledger,
                               by, budget, options)


def _release_locked(store: DirectoryStore | TopicStore, epsilon: float, mechanism: str,
                    merge: str, partitions: int | None, keyed: bool, new_ledger: bool,
                    by: int | str | None, budget: float, options: dict[str, Any]
                    ) -> tuple[Any, GroupState]:
    group = merge_store(store, merge, partitions, keyed)
    if by is not None and group.method not in ("partitioned", "slices"):
        msg = (f"a map of a group needs the partitioned merge (this one is {group.method}: the "
               "shard tables are laid end to end, so a cell no longer names an address); use "
               "--merge partitioned with one topic over an ipv4 or range universe")
        raise ConfigurationError(msg)
    kind = "frequency" if isinstance(group.estimator, MergedHistograms) else group.estimator.kind
    estimators.check_release_options(kind, options, f"the group keeps {kind} shards")
    group.estimator.ledger = group_ledger(store, new_ledger=new_ledger, budget=budget)
    rel: Any
    if by is None:
        rel = group.estimator.release(epsilon, mechanism, sensitivity=group.sensitivity,
                                      state_tables=group.state_tables, **options)
    elif isinstance(group.estimator, DensityEstimator):
        rel = group.estimator.release_map(epsilon, by, mechanism, sensitivity=group.sensitivity,
                                          state_tables=group.state_tables)
    else:
        msg = "density maps (--by) need a density group; this one keeps frequency counters"
        raise ConfigurationError(msg)
    return rel, group


def group_ledger(store: DirectoryStore | TopicStore, *, new_ledger: bool = False,
                 budget: float = DEFAULT_BUDGET) -> GroupLedger:
    """The group's ledger, replayed from the store's ledger log, whose charges are reservations
    appended to that log (:class:`~panstream.release.ledger.GroupLedger`).

    A charge appends the reservation durably and replays the log; the release proceeds only if
    the replay admits it (:mod:`panstream.release.ledger_log`). A directory also checks and
    records the ledger's history (an older log put back, or a ledger of an epoch the history has
    not seen, is refused).

    Raises:
        StateError: no ledger (unless ``new_ledger``, which the history refuses where releases
            were recorded), an unreadable or corrupt one, or a rolled-back one.
    """
    where = store.ledger_where()
    history = store.ledger_history()
    rep = store.ledger_replay()
    if rep.ledger is None:
        if not new_ledger:
            msg = (f"release ledger ({where}) is missing although the store holds shards: the "
                   "releases already charged to these tables would be forgotten and the budget "
                   "reset. Restore the ledger; only if no release was ever made from these "
                   "shards, pass --new-ledger")
            raise StateError(msg)
        if history is not None and history.read() is not None:
            msg = (f"--new-ledger refused: the ledger history {history.path} records releases "
                   f"already made from these tables, so a new ledger would spend their budget a "
                   f"second time. Put the group's ledger ({where}) back; for a fresh budget "
                   "start a new state directory (fresh tables)")
            raise StateError(msg)
        store.append_ledger(Opening(PrivacyLedger(budget)).encode())
        rep = store.ledger_replay()
        assert rep.ledger is not None
    opened = rep.ledger
    if history is not None:
        history.check(opened)  # an older log put back, or an epoch never seen here: refused

    def reserve(entry: LedgerEntry) -> tuple[bool, PrivacyLedger]:
        store.append_ledger(Reservation.of(opened.epoch, entry).encode())
        now = store.ledger_replay()
        assert now.ledger is not None
        if history is not None:
            history.record(now.ledger)
        return entry.id in now.admitted, now.ledger

    return GroupLedger(opened, reserve)


def parse_ledger(raw: bytes, where: str) -> PrivacyLedger:
    """A group's release ledger from its JSON bytes.

    Raises:
        StateError: the bytes are not a ledger.
    """
    try:
        return PrivacyLedger.from_dict(json.loads(raw))
    except (ValueError, KeyError, TypeError, AttributeError):
        msg = f"release ledger ({where}) is corrupt: restore it from a backup"
        raise StateError(msg) from None


def release_state_dir(directory: str | os.PathLike[str], epsilon: float,
                      mechanism: str = "laplace", merge: str = "auto",
                      partitions: int | None = None, keyed: bool = False,
                      new_ledger: bool = False, *, by: int | str | None = None,
                      budget: float = DEFAULT_BUDGET, **options: Any) -> tuple[Any, GroupState]:
    """:func:`release_store` on the :class:`DirectoryStore` ``directory``."""
    return release_store(DirectoryStore(directory), epsilon, mechanism, merge, partitions, keyed,
                         new_ledger, by=by, budget=budget, **options)
