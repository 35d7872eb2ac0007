"""The directory store: one file per shard, replaced atomically, beside the group's ledger log.

A snapshot of shard ``<topic>/<partition>`` is the file ``<dir>/<topic>@<partition>.shard``,
replaced atomically (temporary file, fsync, rename, fsync of the directory). Group members on
several hosts share it through a shared or persistent volume. Beside the snapshots: each fenced
slice's claim (``.<name>.shard.panstream-fence``), the release ledger's append-only log
(:data:`LEDGER_FILE`, its history ``.release-ledger.json.panstream-ledger``) and the group's
definition (:data:`DEFINITION_FILE`). The file names and contents are the ones of every panstream
since the ledger became a log; an older ``release-ledger.json`` is migrated by the first append.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

from panstream.errors import ConfigurationError, FencedError, StateError
from panstream.release.ledger import PrivacyLedger
from panstream.release.ledger_log import Opening, Replay, replay
from panstream.state.fence import Fence, claim_epoch, fenced_message
from panstream.state.files import (
    LedgerHistory,
    atomic_write,
    history_path,
    real_path,
    state_lock,
)
from panstream.state.stores.protocol import LedgerJson, key_order, parse_ledger

_SUFFIX = ".shard"

#: Suffix of a slice's claim file in a state directory (``.<name>.shard.panstream-fence``).
FENCE_SUFFIX = ".panstream-fence"

#: How long a slice's claim or save waits for another member's claim or save of the same slice.
FENCE_LOCK_WAIT = 30.0

#: File of a state directory holding the group's release ledger: an append-only log, one record
#: per line (:mod:`panstream.release.ledger_log`), appended under an ``flock`` and fsynced.
#: Consumers only open it (:func:`~panstream.state.stores.release.ensure_ledger`); releases append
#: reservations; nothing rewrites it.
LEDGER_FILE = "release-ledger.log"

#: The group definition's file in a state directory (:mod:`panstream.state.group_definition`).
DEFINITION_FILE = "group-definition.json"

#: The ledger file of panstream <= 0.2 (one JSON ledger, replaced by each release): still read,
#: and migrated into :data:`LEDGER_FILE` by the first append (then removed). Its history file
#: ``.release-ledger.json.panstream-ledger`` stays the directory's ledger history.
LEGACY_LEDGER_FILE = "release-ledger.json"

#: How long a group release waits for another release of the same directory to finish.
LEDGER_LOCK_WAIT = 30.0


class DirectoryStore(LedgerJson):
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
        return sorted(out, key=key_order)

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

    # Release ledger hooks (the group release, panstream.state.stores.release): the log LEDGER_FILE.
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

    def ledger_replay(self, fresh: bool = True) -> Replay:
        """Replay the ledger log (:func:`panstream.release.ledger_log.replay`); the file is read
        again whatever ``fresh`` says."""
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
