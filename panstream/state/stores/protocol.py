"""What every shard store is: the :class:`Store` protocol, and the logic both stores share.

A store keeps the newest snapshot of each shard or slice under a key (``<topic>/<partition>``),
the claims that fence a zombie's late writes (:mod:`panstream.state.fence`), the group's release
ledger as an append-only log (:mod:`panstream.release.ledger_log`) and the group's definition
(:mod:`panstream.state.group_definition`). :class:`~panstream.state.stores.directory.
DirectoryStore` and :class:`~panstream.state.stores.topic.TopicStore` implement it; the group's
merge, layout and release (:mod:`panstream.state.stores.group`,
:mod:`panstream.state.stores.release`) take any :class:`Store`. The checkpointer's
:class:`~panstream.state.checkpoint.ShardStore` is the part of it a checkpoint needs (``save``,
``load``, ``keys``), so any :class:`Store` is one.

What the two stores do alike is written once here: the ledger's JSON face over their log hooks
(:class:`LedgerJson`), the parse of a ledger (:func:`parse_ledger`) and the order of keys
(:func:`key_order`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol

from panstream.errors import StateError
from panstream.release.ledger import PrivacyLedger
from panstream.release.ledger_log import Opening, Replay
from panstream.state.files import LedgerHistory


class Store(Protocol):
    """A shard store: snapshots by key, their claims, the group's ledger log and definition.

    Snapshots are the bytes of :func:`~panstream.state.stores.codec.encode_shard` (or a routed
    slice's, :func:`panstream.state.slices.encode_slice`): the table and public parameters, no
    offset, count or time of arrivals. Only the newest snapshot of a key is kept (privacy
    invariant 5).

    Beyond the protocol each store has what only it can do: a directory's ``fence``,
    ``claimed`` and ``delete`` (a windowed group's slices, kept only in a directory), a topic's
    ``refresh`` (forget the last replay of the log).
    """

    def keys(self) -> list[str]:
        """Keys of all stored shards, sorted (:func:`key_order`)."""
        ...

    def load(self, key: str) -> bytearray | None:
        """The newest snapshot of ``key`` (a ``bytearray`` the caller wipes), or ``None``.

        Raises:
            StateError: the snapshot cannot be read, or is incomplete.
        """
        ...

    def save(self, key: str, data: bytes | bytearray) -> None:
        """Replace the snapshot of ``key``; durable on return (unfenced).

        Raises:
            StateError: it cannot be written (offsets are not committed then).
        """
        ...

    def claim(self, key: str, generation: int, current: Callable[[], bool]) -> int:
        """Claim slice ``key`` for its new owner (:func:`panstream.state.fence.claim_epoch`);
        returns the owner's epoch.

        Raises:
            FencedError: a newer owner claimed the slice and this member is not current.
        """
        ...

    def save_fenced(self, key: str, data: bytes | bytearray, epoch: int) -> None:
        """:meth:`save` as the owner of ``key``'s claim ``epoch``; durable on return.

        Raises:
            FencedError: the claim is not (or no longer) ``epoch``.
        """
        ...

    def ledger_where(self) -> str:
        """Where the release ledger lives, for messages."""
        ...

    def ledger_replay(self, fresh: bool = True) -> Replay:
        """Replay the ledger log (:func:`panstream.release.ledger_log.replay`), reading it again
        unless ``fresh`` is false and a replay is at hand."""
        ...

    def append_ledger(self, record: bytes) -> None:
        """Append one ledger record, durable on return.

        Raises:
            StateError: the log cannot be written.
        """
        ...

    def read_ledger(self) -> bytes | None:
        """The release ledger as replayed (JSON), or ``None`` if none was opened."""
        ...

    def write_ledger(self, data: bytes) -> None:
        """Append the ledger ``data`` (JSON) as an opening carrying its entries."""
        ...

    def create_ledger(self, data: bytes) -> None:
        """Open the ledger (JSON ``data``): the first opening in the log is the ledger."""
        ...

    def ledger_lock(self) -> AbstractContextManager[None]:
        """Exclusive use of the ledger for one release (or none where the log order decides)."""
        ...

    def ledger_history(self) -> LedgerHistory | None:
        """The history that refuses a ledger put back (``None`` where the log keeps it all)."""
        ...

    def definition(self) -> bytes | None:
        """The group definition the store holds (``None``: none written yet)."""
        ...

    def put_definition(self, data: bytes) -> bytes:
        """Write the group definition unless one exists; the one that holds afterwards."""
        ...

    def definition_where(self) -> str:
        """Where the definition lives, for messages."""
        ...


class LedgerJson:
    """The ledger's JSON face, written once over a store's log hooks (``append_ledger``,
    ``ledger_replay``, ``ledger_where``): mixed into both stores, nothing else."""

    def read_ledger(self: Store) -> bytes | None:
        """The release ledger as replayed from the store's log (JSON of a
        :class:`~panstream.release.ledger.PrivacyLedger`), or ``None`` if there is none. A topic
        store reuses the replay of its last read of the log (the one that loaded the shards, if
        any; a new one otherwise); a directory reads its file again.

        Raises:
            StateError: it exists but cannot be read.
        """
        led = self.ledger_replay(fresh=False).ledger
        return None if led is None else json.dumps(led.to_dict(), sort_keys=True).encode()

    def write_ledger(self: Store, data: bytes) -> None:
        """Append the ledger ``data`` as an opening that carries its entries: they count as spent
        (a union with the log; it can never lower the spent total)."""
        self.append_ledger(Opening(parse_ledger(data, self.ledger_where())).encode())

    def create_ledger(self: Store, data: bytes) -> None:
        """Open the ledger (consumers, through :func:`~panstream.state.stores.release.
        ensure_ledger`): an opening appended to the log; if consumers race, the first opening in
        the log is the ledger."""
        self.write_ledger(data)


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


def key_order(key: str) -> tuple[str, int]:
    """Sort key of a shard key ``<topic>/<partition>``: by topic, then partition as a number.

    >>> sorted(["t/10", "t/9", "s/0"], key=key_order)
    ['s/0', 't/9', 't/10']
    """
    topic, _, part = key.rpartition("/")
    return (topic, int(part) if part.isdigit() else -1)
