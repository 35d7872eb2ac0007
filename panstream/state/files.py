"""Atomic, owner-only snapshot files: at any moment only the latest snapshot exists on disk.

:func:`atomic_write` is the one place where snapshot bytes reach the file system. Its steps, in order:

1. remove a temporary file a crashed earlier save may have left (it would be a *second* snapshot on
   disk, and two snapshots of one run reveal who arrived between them);
2. create ``.<name>.panstream-tmp`` in the target's directory, exclusively, with mode 0600;
3. write every piece, then ``fsync`` the file;
4. ``rename`` it over the target (atomic: readers see the old or the new snapshot, never a mix);
5. ``fsync`` the directory, so the rename itself is durable. Inside a :func:`one_directory_sync`
   block (a checkpoint writing one snapshot per slice into one directory) this step is done once
   per directory at the block's end, for every file the block wrote: durable when the block ends.

If anything fails before step 4 the temporary file is removed and the old snapshot is untouched; no
backup copy is ever made. One process at a time may write a given path.

Reading (:func:`read_snapshot`, :func:`read_verified`) checks the magic before reading the rest, so
pointing ``--state`` at a large log file fails at once, and verifies the checksum before anything is
built. Note that renaming over an old snapshot frees its disk blocks without erasing them: keep state
directories on an encrypted file system (see ``docs/threat-model.md``).

>>> import os, tempfile, panstream as ps
>>> d = tempfile.mkdtemp()
>>> est = ps.DensityEstimator("range:1024")
>>> est.save(os.path.join(d, "s.pst"))
>>> oct(os.stat(os.path.join(d, "s.pst")).st_mode & 0o777), os.listdir(d)
('0o600', ['s.pst'])
>>> ps.DensityEstimator.load(os.path.join(d, "s.pst")).size
1024
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import stat
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from panstream.errors import StateError
from panstream.release.ledger import PrivacyLedger, RolledBackStateError
from panstream.state import format as fmt

PathLike = str | os.PathLike[str]

#: Permissions of every snapshot file: read and write for the owner only.
FILE_MODE = 0o600
#: Suffix of the temporary file of an in-progress save (``.<name>.panstream-tmp``).
TEMP_SUFFIX = ".panstream-tmp"

_CHUNK = 1 << 26

#: Temporary files of the saves in progress in this process, for :func:`discard_temps`.
_WRITING: set[str] = set()

#: Per thread: the directories whose fsync (step 5) the open :func:`one_directory_sync` block
#: still owes (no attribute: no block open).
_OWED = threading.local()


def discard_temps() -> None:
    """Remove the temporary file of every save in progress in this process.

    For a handler about to end the process at once (``os._exit`` after a second Ctrl+C): the
    half-written temporary file is a second copy of the table (hundreds of MiB, and two snapshots
    of one run reveal who arrived between them), so it must not outlive the process. Only
    ``unlink`` calls: safe in a signal handler. A temporary file left anyway (``kill -9``) is
    removed by the next process that takes the state's lock (:func:`state_lock`).
    """
    for tmp in list(_WRITING):
        with contextlib.suppress(OSError):
            os.unlink(tmp)


#: Suffix of the (empty) lock file that marks a state as in use by one process.
LOCK_SUFFIX = ".panstream-lock"


def real_path(path: PathLike) -> str:
    """The file ``path`` names, with every symbolic link resolved (also a dangling one, which
    names the file a save creates).

    Locks, histories and temporary files are named after this real file, never after the path
    string given: two paths to one file (a symlink and its target, two symlinks) then share one
    lock and one history, and a save writes through a link to its target instead of replacing the
    link with a second snapshot (issue 21, section 3).
    """
    return os.path.realpath(os.fspath(path))


def lock_path(path: PathLike) -> str:
    """The lock file beside the real file of ``path``: ``.<name>.panstream-lock`` (empty; never
    holds data)."""
    return _beside(real_path(path), LOCK_SUFFIX)


def _beside(real: str, suffix: str) -> str:
    """``.<name><suffix>`` beside ``real`` (a path :func:`real_path` already resolved: a save
    resolves its path once, not once for each file named after it, issue 38)."""
    return os.path.join(os.path.dirname(real), f".{os.path.basename(real)}{suffix}")


@contextlib.contextmanager
def state_lock(path: PathLike, who: str, wait: float = 0.0) -> Iterator[None]:
    """Hold an exclusive lock on the state at ``path`` for the block, or fail (at once, or after
    ``wait`` seconds of retrying).

    A process that keeps a state in memory (``panstream ingest``) and one that changes the file
    (``release``, ``rotate``) must never overlap: the first would overwrite the second's ledger
    charge at its next checkpoint, silently refunding spent budget, or put a rotated-away table
    back. The lock is ``flock(2)`` on an empty sidecar file, removed again when the block ends; the
    kernel releases it if the process dies, so a crash never leaves a state locked (only, at worst,
    the empty file, which the next holder removes).

    Args:
        path: the state file (the lock is the real file's: every alias of it takes the same one).
        who: what is taking the lock, for the message of whoever is refused.
        wait: how long to keep retrying while another process holds the lock (short critical
            sections such as a group release wait; an ingest is refused at once).

    Raises:
        StateError: another process holds the lock.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not a POSIX system: no locking
        yield
        return
    real = real_path(path)
    lp = _beside(real, LOCK_SUFFIX)
    deadline = time.monotonic() + wait
    while True:
        try:
            fd = os.open(lp, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        except OSError as exc:
            raise StateError(f"cannot create lock file {lp}: {exc.strerror}; check that the "
                             "directory exists and is writable") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if time.monotonic() < deadline:
                time.sleep(0.01 + secrets.randbelow(20) / 1000)
                continue
            msg = (f"state {os.fspath(path)} is in use by another panstream process (a running "
                   f"ingest, release or rotate); {who} needs it alone: stop the other process "
                   "first, or let a running ingest release with --release-every")
            raise StateError(msg) from None
        try:
            same = os.stat(lp).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder before us removed that file as we opened it: take the new one
    # We hold the lock: a temporary file of this state (or of its ledger history) is a save that
    # died half-way (kill -9, power loss): a second, partial copy of the table. Remove it now.
    for stale in (_beside(real, TEMP_SUFFIX), temp_path(_beside(real, HISTORY_SUFFIX))):
        with contextlib.suppress(OSError):
            os.unlink(stale)
    try:
        refuse_hard_link(path)
        yield
    finally:
        # Remove the sidecar while still holding it (nothing but the state stays in the directory);
        # a waiter that opened the old file notices the inode changed and retries.
        with contextlib.suppress(OSError):
            os.unlink(lp)
        os.close(fd)


def refuse_hard_link(path: PathLike) -> None:
    """Refuse a state file that has several names (hard links).

    Two names of one file are two locks and two histories (they are named after the path, and a
    hard link is not a symbolic link that :func:`real_path` could resolve), so a release through
    one name would not see an ingest or a rollback through the other. The first save through
    either name then turns them into two copies (the rename gives that name a new file), the case
    no file-local design can see (``docs/threat-model.md``).

    Raises:
        StateError: ``path`` exists and has more than one name.
    """
    try:
        st = os.stat(path)  # (through symbolic links: the real file's)
    except OSError:
        return
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:  # (a directory always has several)
        msg = (f"state {os.fspath(path)} has {st.st_nlink} names (hard links): one table must "
               "have one file with one name, or its lock and ledger history are split; remove "
               "the other names (find them with 'find / -samefile PATH') and keep one")
        raise StateError(msg)


def temp_path(path: PathLike) -> str:
    """The temporary file a save of ``path`` writes before renaming it into place."""
    return _beside(real_path(path), TEMP_SUFFIX)


def atomic_write(path: PathLike, data: fmt.Buffer | Iterable[fmt.Buffer]) -> None:
    """Write ``data`` (bytes, or an iterable of byte pieces) to ``path`` atomically, mode 0600.

    See the module docstring for the steps. ``path``'s directory must exist.

    Raises:
        StateError: the file could not be written or made durable; the message says what to check.
            If it is raised, the previous content of ``path`` is unchanged (unless the failure was
            the final directory fsync, which the message then says).

    Example:
        >>> import os, tempfile
        >>> p = os.path.join(tempfile.mkdtemp(), "x")
        >>> atomic_write(p, [b"ab", b"cd"]); open(p, "rb").read()
        b'abcd'
    """
    final = real_path(path)  # through a symlink to its target: never a second snapshot beside it
    directory = os.path.dirname(final)
    tmp = _beside(final, TEMP_SUFFIX)
    pieces = [data] if isinstance(data, (bytes, bytearray, memoryview)) else list(data)
    # Registered before it exists: a second Ctrl+C whose handler runs between the open and the
    # registration would otherwise leave the file behind (seen once in CI on a loaded machine).
    _WRITING.add(tmp)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)  # left by a crashed save: never keep two snapshots on disk
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
                     | getattr(os, "O_NOFOLLOW", 0), FILE_MODE)
    except OSError as exc:
        _WRITING.discard(tmp)
        raise StateError(f"cannot create {tmp}: {exc.strerror}; check that the directory "
                         f"{directory} exists and is writable") from None
    except BaseException:
        _WRITING.discard(tmp)
        raise
    try:
        try:
            os.fchmod(fd, FILE_MODE)  # independent of the umask
            for piece in pieces:
                _write_all(fd, memoryview(piece).cast("B"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, final)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        _WRITING.discard(tmp)
        if isinstance(exc, OSError):
            raise StateError(f"cannot write state file {final}: {exc.strerror}; the previous "
                             "state is unchanged; free disk space or fix permissions and retry"
                             ) from None
        raise
    _WRITING.discard(tmp)
    owed = getattr(_OWED, "dirs", None)
    if owed is not None:  # step 5 at the end of the one_directory_sync block
        owed.add(directory)
        return
    _sync_directory(directory, f"state file {final} was replaced")


def _sync_directory(directory: str, what: str) -> None:
    """``fsync`` a directory (step 5); ``what`` starts the message of a failure."""
    try:
        dfd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as exc:
        raise StateError(f"{what} but its directory could not be synced ({exc.strerror}): after "
                         "a power loss the old state may reappear") from None


@contextlib.contextmanager
def one_directory_sync() -> Iterator[None]:
    """Within the block, :func:`atomic_write` on this thread leaves step 5 (the directory's
    ``fsync``) to the block's end, which syncs each directory written once: a checkpoint of 16
    slices in one directory syncs it once, not 16 times (issue 38: about 0.2 ms of CPU each).
    Every file the block wrote is durable when the block ends without an error, not before; so
    nothing that relies on them (an offset commit) may happen inside the block. A nested block
    adds to the outer one.

    Raises:
        StateError: a directory could not be synced (the files were replaced, but after a power
            loss the old ones may reappear).

    Example:
        >>> import os, tempfile
        >>> d = tempfile.mkdtemp()
        >>> with one_directory_sync():
        ...     for name in "ab":
        ...         atomic_write(os.path.join(d, name), b"x")
        >>> sorted(os.listdir(d))
        ['a', 'b']
    """
    if getattr(_OWED, "dirs", None) is not None:
        yield
        return
    _OWED.dirs = owed = set()
    try:
        yield
    except BaseException:
        del _OWED.dirs
        for directory in sorted(owed):  # as far as it goes: the block's own error is the one said
            with contextlib.suppress(StateError):
                _sync_directory(directory, "")
        raise
    del _OWED.dirs
    for directory in sorted(owed):
        _sync_directory(directory, f"state files in {directory} were replaced")


def _write_all(fd: int, mv: memoryview) -> None:
    off, n = 0, len(mv)
    while off < n:
        off += os.write(fd, mv[off : off + _CHUNK])


def _read_exact(f: Any, buf: memoryview, path: str) -> None:
    off = 0
    while off < len(buf):
        got = f.readinto(buf[off : off + _CHUNK])
        if not got:
            raise fmt.CorruptSnapshotError(f"state file {path} shrank while being read: another "
                                           "process is rewriting it; retry")
        off += got


def _open(path: PathLike) -> tuple[Any, str, int]:
    p = os.fspath(path)
    try:
        f = open(p, "rb", buffering=0)  # noqa: SIM115 - closed by the callers
    except FileNotFoundError:
        raise StateError(f"state file {p} does not exist: check the path ('panstream ingest "
                         "--state PATH' creates one on its first run)") from None
    except OSError as exc:
        raise StateError(f"cannot open state file {p}: {exc.strerror}") from None
    return f, p, os.fstat(f.fileno()).st_size


def _frame(f: Any, size: int) -> tuple[fmt.Frame, bytes]:
    pre = f.read(fmt.PREFIX_SIZE) or b""
    frame = fmt.read_frame(pre)
    fmt.check_length(frame, size)
    return frame, pre


def _head(f: Any, size: int, path: str) -> tuple[fmt.Frame, bytes]:
    """Frame the file and read every byte before the payload; the file is left at the payload."""
    frame, pre = _frame(f, size)
    if len(pre) > frame.head_size:  # a head shorter than the longest preamble (not written today)
        f.seek(frame.head_size)
        return frame, pre[: frame.head_size]
    rest = bytearray(frame.head_size - len(pre))
    _read_exact(f, memoryview(rest), path)
    return frame, pre + bytes(rest)


def read_snapshot(path: PathLike) -> bytes:
    """The bytes of the snapshot at ``path``, after checking its magic and length.

    Pass them to :meth:`DensityEstimator.restore` (which verifies the checksum). For large tables
    prefer :func:`read_verified`, which reads the payload straight into its final array.

    Raises:
        StateError: missing or unreadable file; NotASnapshotError, CorruptSnapshotError,
            SnapshotVersionError from :mod:`panstream.state.format`.
    """
    f, p, size = _open(path)
    with f:
        frame, pre = _frame(f, size)
        buf = bytearray(frame.total)
        buf[: len(pre)] = pre
        _read_exact(f, memoryview(buf)[len(pre) :], p)
    return bytes(buf)


def read_verified(path: PathLike, *, expect: Mapping[str, Any] | None = None
                  ) -> tuple[fmt.Snapshot, np.ndarray]:
    """Read and verify the snapshot at ``path``, its payload straight into a NumPy array.

    The checksum and every shared field are verified before anything is returned, so a bad file
    never loads partially; the payload array is the caller's to adopt (it is zeroed here if a check
    fails). The returned :class:`~panstream.state.format.Snapshot`'s ``payload`` is a view of that
    array.

    Raises:
        StateError: see :func:`read_snapshot` and :func:`panstream.state.format.decode`.
    """
    f, p, size = _open(path)
    with f:
        frame, head = _head(f, size, p)
        payload = np.empty(frame.payload_size, dtype=np.uint8)
        try:
            _read_exact(f, payload.data.cast("B"), p)
            digest = f.read(fmt.DIGEST_SIZE)
            h = hashlib.sha256(head)
            h.update(payload.data)
            fmt.check_digest(digest, h.digest())
            params, ledger = fmt.parse_head(frame, head)
            fmt.check_expect(params, expect)
        except BaseException:
            payload.fill(0)
            raise
    return fmt.Snapshot(frame.version, params, ledger, payload.data.cast("B")), payload


def read_head(path: PathLike) -> tuple[int, dict[str, Any], dict[str, Any] | None]:
    """The format version, parameters and ledger of the snapshot at ``path``, without its payload.

    Reads only the bytes before the payload (cheap for a 512 MiB table); the checksum is *not*
    verified, so use it for what may be shown or compared (the ledger before a save), never to
    rebuild an estimator.

    Raises:
        StateError: missing, unreadable, truncated or foreign file, or unreadable fields.
    """
    f, p, size = _open(path)
    with f:
        frame, head = _head(f, size, p)
    params, ledger = fmt.parse_head(frame, head)
    return frame.version, params, ledger


#: Suffix of the ledger history kept beside a state file (``.<name>.panstream-ledger``).
HISTORY_SUFFIX = ".panstream-ledger"


def history_path(path: PathLike) -> str:
    """The ledger history beside ``path``: ``.<name>.panstream-ledger``."""
    return _beside(real_path(path), HISTORY_SUFFIX)


class LedgerHistory:
    """The newest ledger seen for a state path, kept beside it, so that putting an older copy of
    the state back is detected instead of silently refunding spent budget.

    Copying an old state file over the current one (a restore from backup, a copied file) would
    bring back its ledger as it was, with fewer releases charged: releasing again would average
    the noise away. No design that lives only in the state file can stop someone with write access
    from doing that, so panstream makes it loud: every save of a state also records its ledger in
    a small history file beside it (``.<name>.panstream-ledger``: the ledger and the epochs rotated
    away; public, data-independent), and a state is refused for releases (its ledger is *blocked*)
    when

    * its ledger lacks releases the history recorded for the same epoch (an older copy), or
    * its epoch is one the history saw rotated away (a state from before a rotation).

    A state whose epoch the history has never seen (a new state, or a history lost) is accepted
    and recorded. The history file is created with the first release (before that nothing spent
    could be refunded), so a state that was never released from stays a single file. What remains
    undetected is stated in ``docs/threat-model.md``: putting back the history too, or copying a
    state to a new path.

    The history is written *after* the state, so a crash between the two leaves a state newer
    than its history, which is never mistaken for a rollback.
    """

    def __init__(self, state_path: PathLike, *, what: str = "state", recover: str | None = None,
                 strict: bool = False, history_file: PathLike | None = None) -> None:
        """Args:
            state_path: the file whose ledger is tracked (a state file, or a group's ledger).
            what: how messages name that file.
            recover: what to do about a rollback (default: put the newest state back, or rotate).
            strict: refuse every ledger of an epoch the history has not seen once it holds
                entries (a group's ledger: its tables are not redrawn with a new ledger, so a new
                epoch over them would be a second budget for the same tables).
            history_file: the history's own path (default: beside the real file of
                ``state_path``, see :func:`history_path`).
        """
        self.state_path = os.fspath(state_path)
        self.path = os.fspath(history_file) if history_file is not None else history_path(
            state_path)
        self.strict = strict
        self.what = what
        self.recover = recover or (f"Put the newest state back, or start a new epoch with "
                                   f"'panstream rotate -s {self.state_path}' (a fresh table and "
                                   "budget)")

    def read(self) -> dict[str, Any] | None:
        """The recorded history, or ``None`` if there is none (or it is unreadable: it is then
        rewritten by the next save)."""
        try:
            with open(self.path, "rb") as f:
                d = json.loads(f.read().decode("ascii"))
            if isinstance(d, dict) and isinstance(d.get("ledger"), dict):
                return d
        except (OSError, ValueError):
            pass
        return None

    def problem(self, ledger: PrivacyLedger) -> str | None:
        """Why ``ledger`` (read from the state) is older than the history, or ``None``."""
        if ledger.shard:
            return None
        h = self.read()
        if h is None:
            return None
        state = f"{self.what} {self.state_path}"
        fix = (f"the file was rolled back (an older copy put back, e.g. from a backup). Releasing "
               f"from it again would spend budget already spent. {self.recover}; only if this "
               f"was never released from here, delete {self.path}")
        if self.strict and ledger.epoch != h.get("epoch"):
            return (f"{state} has epoch {ledger.epoch}, but its history {self.path} records "
                    f"releases of epoch {h.get('epoch')} from these same tables: a new ledger "
                    "over them would spend a second budget. Put the group's ledger back; for a "
                    "fresh budget start a new state directory (fresh tables)")
        if ledger.epoch in h.get("retired", []):
            return (f"{state} belongs to epoch {ledger.epoch}, which was rotated away here "
                    f"(the newest epoch seen is {h.get('epoch')}): {fix}")
        if ledger.epoch == h.get("epoch"):
            try:
                seen = PrivacyLedger.from_dict(h["ledger"])
            except StateError:
                return None
            if seen.epoch == ledger.epoch:
                missing = ledger.lacks(seen)
                if missing:
                    return (f"the ledger of {state} lacks {missing} of the "
                            f"{len(seen.entries)} release(s) already recorded for it (it holds "
                            f"{len(ledger.entries)}): {fix}")
        return None

    def check(self, ledger: PrivacyLedger) -> None:
        """Raise if :meth:`problem` finds one.

        Raises:
            RolledBackStateError: the ledger is older than the history.
        """
        why = self.problem(ledger)
        if why is not None:
            raise RolledBackStateError(why)

    def record(self, ledger: PrivacyLedger) -> None:
        """Make ``ledger`` the newest one seen (atomically; only when the history changes)."""
        if ledger.shard:
            return
        h = self.read()
        if h is None and not ledger.entries:
            return  # nothing spent yet, so nothing a rollback could refund: no file needed
        retired = set(h.get("retired", [])) if h else set()
        if h is not None and h.get("epoch") != ledger.epoch:
            retired.add(h.get("epoch"))
        new = {"epoch": ledger.epoch, "ledger": ledger.to_dict(),
               "retired": sorted(retired, key=str)}
        if new != h:
            atomic_write(self.path, json.dumps(new, sort_keys=True, separators=(",", ":"),
                                               allow_nan=False).encode("ascii"))


def ledger_on_disk(path: PathLike) -> PrivacyLedger | None:
    """The ledger of the state file at ``path`` as it is on disk now, or ``None`` (no file, a
    shard, or not a readable snapshot). Reads only the head."""
    if not os.path.exists(path):
        return None
    try:
        _, _, ledger = read_head(path)
        return None if ledger is None else PrivacyLedger.from_dict(ledger)
    except StateError:
        return None
