"""The contract every estimator family keeps: updates, a ledger, snapshots, rotation.

panstream has estimator families (:class:`~panstream.estimators.density.DensityEstimator`: a bit
per cell; :class:`~panstream.estimators.frequency.FrequencyEstimator`: a modular counter per cell).
They differ only in the per-cell state and its statistics. Everything around them — the snapshot
format and state files, checkpoints, Kafka shards, the group merge, the audit and the command line —
talks to this one small contract instead of to each family:

* **state**: :meth:`Estimator._apply` (cell indices → the state's randomized update; the only place
  a family touches its table on arrivals), :meth:`Estimator.params` (the public parameters, with
  the ``kind``), the packed payload (:meth:`Estimator._payload_view`) and
  :meth:`Estimator._from_snapshot` (rebuild and *check* a family's own parameters);
* **ledger**: ``est.ledger`` (a :class:`~panstream.release.ledger.PrivacyLedger`, or a
  :class:`~panstream.release.ledger.ShardLedger` for a shard of a group, whose budget lives in the
  group's ledger); every release charges it before drawing noise;
* generic, here: :meth:`update`, :meth:`update_indices`, :meth:`rotate`;
* the universe's own state (:meth:`Universe.state_params`, :meth:`Universe.pin_state`,
  :meth:`Universe.unpin_state`: a by-country universe's country table): a family appends it to
  its :meth:`params` and pins it in :meth:`_from_snapshot`, and :meth:`rotate` unpins it, so a
  variant over such a universe needs no override of the three.

Snapshots and state files are :mod:`panstream.state.persist`'s (issue 36: the core knows no codec
and no file system); :meth:`snapshot`/:meth:`restore` and :meth:`save`/:meth:`load` are thin
wrappers of its functions, kept for one release, through the hook it registers
(:func:`register_persistence`). A family registers itself (:func:`register_family`), and a
feature above registers its variants of a family (:func:`register_variant`: the country wing's
by-country tables), so nothing here names a module above the estimators but the release floor
(the ledger an estimator carries, and its family's release).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import numpy as np

from panstream.errors import (
    ArgumentTypeError,
    ConfigurationError,
    CorruptSnapshotError,
    ItemError,
    StateError,
)
from panstream.release.ledger import PrivacyLedger, ShardLedger
from panstream.universe import Dropped, Universe, refuse_bare_item

E = TypeVar("E", bound="Estimator")


@dataclass(frozen=True)
class UpdateResult(Dropped):
    """What one :meth:`Estimator.update` call did. Operational only: never stored.

    Attributes:
        accepted: items mapped to a cell and applied.
        malformed: items that could not be parsed.
        outside: well-formed items outside the universe.
        empty: empty or all-whitespace text items.

    The classes are those of :class:`~panstream.universe.IndexResult` and of the command line.
    """

    accepted: int
    malformed: int = 0
    outside: int = 0
    empty: int = 0


def as_universe(universe: Universe | str) -> Universe:
    """``universe`` itself, or the :class:`Universe` its spec string names.

    Raises:
        ArgumentTypeError: neither a Universe nor a string.
        UniverseError: an invalid spec.
    """
    if isinstance(universe, str):
        return Universe.parse(universe)
    if not isinstance(universe, Universe):
        msg = f"universe must be a Universe or a spec string, got {type(universe).__name__}"
        raise ArgumentTypeError(msg)
    return universe


class Estimator(ABC):
    """A pan-private estimator: a randomized per-cell table over a public universe, and a ledger.

    Subclasses set :attr:`kind` and implement the abstract methods; see the module docstring.

    Attributes:
        universe: the public universe of cells.
        epsilon: the state epsilon asked for.
        epsilon_state: the realized state epsilon (from the exact probabilities the code uses).
        ledger: the output budget and the releases charged to it.
    """

    #: The family's name in snapshots (the ``kind`` parameter).
    kind: ClassVar[str]
    #: How much one person can change the statistic a release adds noise to (the L1 sensitivity of
    #: one table's count of ones, or of its counter histogram); a group merge multiplies it by the
    #: number of tables one person can reach.
    unit_sensitivity: ClassVar[int]

    universe: Universe
    epsilon: float
    epsilon_state: float

    # ------------------------------------------------------------------ the ledger, bound to the table
    @property
    def ledger(self) -> PrivacyLedger:
        """The output budget and the releases charged to it.

        A table's ledger is bound to the table: the first ledger a table gets (when it is drawn,
        loaded, or, for a merged group table, when the group's ledger is attached) fixes its
        epoch, and a ledger of another epoch is refused, here and again at :meth:`save` and
        before a release (a new epoch label over the same table would be a second budget for the
        same table: issue 21). Only :meth:`rotate`, which draws a fresh table, starts a new epoch.

        Raises (on assignment):
            StateError: the ledger's epoch is not the one this table was drawn or loaded with.
        """
        return self._ledger

    @ledger.setter
    def ledger(self, new: PrivacyLedger) -> None:
        if not new.shard:
            bound = self.__dict__.get("_epoch_of_table", _UNBOUND)
            if bound is _UNBOUND:
                self._epoch_of_table = new.epoch
            elif new.epoch != bound:
                raise StateError(_rebind_message(new.epoch, bound))
        self._ledger = new

    def check_ledger_binding(self) -> None:
        """Refuse if the ledger's epoch label was changed after the table got it.

        Raises:
            StateError: the ledger's epoch is not the table's (see :attr:`ledger`).
        """
        bound = self.__dict__.get("_epoch_of_table", _UNBOUND)
        if not self._ledger.shard and bound is not _UNBOUND and self._ledger.epoch != bound:
            raise StateError(_rebind_message(self._ledger.epoch, bound))

    # ------------------------------------------------------------------ what a family provides
    @abstractmethod
    def _apply(self, idx: np.ndarray) -> None:
        """Apply arrivals at the valid ``intp`` cell indices ``idx`` (the caller wipes ``idx``)."""

    @abstractmethod
    def params(self) -> dict[str, Any]:
        """The public parameters stored in a snapshot: ``kind``, ``universe``, ``cells``,
        ``epsilon`` and the family's own exact probabilities. Data-independent."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """The family's public parameters for people (``panstream inspect``): exact probabilities
        as strings (``"3504952211/4294967296"``) and the family's settings. Data-independent."""

    @abstractmethod
    def _payload_view(self) -> memoryview:
        """The packed state, without copying it when the live table is already packed; a copy
        made here is zeroed by :meth:`_wipe_payload_view`."""

    @abstractmethod
    def _wipe_payload_view(self, view: memoryview) -> None:
        """Zero ``view`` if :meth:`_payload_view` made it as a copy (never the live table)."""

    @classmethod
    @abstractmethod
    def _from_snapshot(cls: type[E], params: Mapping[str, Any], ledger: PrivacyLedger,
                       payload: np.ndarray, layout: str) -> E:
        """Rebuild an estimator around a verified ``payload`` (a writable array it adopts),
        checking the family's own parameters (raising the errors of :mod:`panstream.state.format`).
        """

    @abstractmethod
    def _fresh_table(self) -> None:
        """Wipe the table and draw a fresh initial one (a new epoch)."""

    @abstractmethod
    def wipe(self) -> None:
        """Overwrite the table's memory with zeros (before it is dropped)."""

    @property
    @abstractmethod
    def size(self) -> int:
        """Number of cells |X|."""

    @abstractmethod
    def release(self, epsilon: float, mechanism: str = "laplace", **kwargs: Any) -> Any:
        """Publish a noisy release of the table's statistics, charged to :attr:`ledger` before
        any noise is drawn (refused when the budget does not cover ``epsilon``)."""

    # ------------------------------------------------------------------ updates
    def update(self, items: Iterable[Any] | np.ndarray) -> UpdateResult:
        """Apply a batch of arrivals, given as items (``str``, ``int``, ``bytes``) or an integer
        NumPy array mapped by :meth:`Universe.indices`.

        Items that are malformed, blank or outside the universe are skipped and counted in the
        result (the counts are not kept). Writable NumPy arrays and bytearrays passed in are
        overwritten with zeros after use, so raw items do not linger.

        Raises:
            ArgumentTypeError: ``items`` is a bare ``str``, ``bytes``, ``bytearray`` or
                ``memoryview``: pass a list (``update(["alice@example.com"])``). Nothing is applied.
        """
        refuse_bare_item(items, "update")
        res = self.universe.indices(items)
        try:
            self._apply(res.indices)
        finally:
            res.indices.fill(0)
            wipe_buffer(items)
        return UpdateResult(int(res.indices.size), res.malformed, res.outside, res.empty)

    def update_indices(self, idx: np.ndarray, *, wipe: bool = True) -> int:
        """Fast path: apply arrivals given as cell indices (a NumPy integer array).

        Args:
            idx: cell indices in ``0..size-1``.
            wipe: overwrite ``idx`` with zeros after use if it is writable (default).

        Returns:
            The number of indices applied.

        Raises:
            ArgumentTypeError: ``idx`` is not an integer array (a ``TypeError``).
            ItemError: an index lies outside ``0..size-1`` (nothing is applied then).
        """
        arr = np.asarray(idx)
        if arr.dtype.kind not in "iu":
            msg = (f"update_indices needs an integer array, got dtype {arr.dtype}; convert cell "
                   "numbers with np.asarray(idx, dtype=np.int64) or map items with update()")
            raise ArgumentTypeError(msg)
        arr = arr.reshape(-1)
        n = arr.size
        if n:
            lo, hi = int(arr.min()), int(arr.max())
            if lo < 0 or hi >= self.size:
                msg = (f"cell index out of range 0..{self.size - 1} (saw {lo}..{hi}); map items "
                       "with update() or Universe.indices() to have them counted and skipped")
                raise ItemError(msg)
        own = arr.astype(np.intp, copy=False)
        try:
            self._apply(own)
        finally:
            if own is not arr:
                own.fill(0)
            if wipe:
                wipe_buffer(idx)
        return int(n)

    def nbytes(self) -> int:
        """Memory the process holds for the table (its cells in their in-memory layout)."""
        table = getattr(self, "_table", None)
        return int(table.nbytes()) if table is not None else 0

    # ------------------------------------------------------------------ snapshots (wrappers)
    # The codec and the state files are panstream.state.persist's (issue 36: the core knows no file
    # system); these methods call it, for one release, through the hook it registers on import.
    def snapshot_parts(self, *, as_shard: bool = False, extra: Mapping[str, Any] | None = None
                       ) -> tuple[bytes, memoryview, bytes]:
        """Deprecated name of :func:`panstream.state.persist.snapshot_parts` (``est`` first)."""
        return _persistence().snapshot_parts(self, as_shard=as_shard, extra=extra)  # type: ignore[no-any-return]

    def snapshot_buffer(self, *, as_shard: bool = False, extra: Mapping[str, Any] | None = None
                        ) -> bytearray:
        """Deprecated name of :func:`panstream.state.persist.snapshot_buffer` (``est`` first)."""
        return _persistence().snapshot_buffer(self, as_shard=as_shard, extra=extra)  # type: ignore[no-any-return]

    def snapshot(self) -> bytes:
        """The state as snapshot bytes: :func:`panstream.state.persist.snapshot` (this method is
        its thin wrapper, kept for one release)."""
        return _persistence().snapshot(self)  # type: ignore[no-any-return]

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the state to ``path`` atomically, never lowering the ledger on disk:
        :func:`panstream.state.persist.save` (this method is its thin wrapper, kept for one
        release)."""
        _persistence().save(self, path)

    @classmethod
    def restore(cls: type[E], data: bytes | bytearray | memoryview, *,
                expect: Mapping[str, Any] | None = None, layout: str = "auto") -> E:
        """Rebuild an estimator of this family from snapshot bytes:
        :func:`panstream.state.persist.restore` with ``cls`` (this method is its thin wrapper,
        kept for one release)."""
        return _persistence().restore(data, cls=cls, expect=expect, layout=layout)  # type: ignore[no-any-return]

    @classmethod
    def load(cls: type[E], path: str | os.PathLike[str], *,
             expect: Mapping[str, Any] | None = None, layout: str = "auto") -> E:
        """Read a state file of this family: :func:`panstream.state.persist.load` with ``cls``
        (this method is its thin wrapper, kept for one release)."""
        return _persistence().load(path, cls=cls, expect=expect, layout=layout)  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ epochs
    def rotate(self) -> PrivacyLedger:
        """Start a new epoch: wipe the table, draw a fresh initial table and a fresh ledger (same
        budget; a shard keeps having none).

        Use it after an announced intrusion: later states are independent of the dumped one.
        Releases of the old epoch stay valid; the old ledger is returned as their record. See
        ``docs/threat-model.md``.
        """
        old = self.ledger
        self._fresh_table()
        self.universe.unpin_state()  # e.g. a by-country table may take the installed countries
        self.__dict__.pop("_epoch_of_table", None)  # a fresh table: a fresh epoch binds to it
        self.ledger = ShardLedger() if old.shard else PrivacyLedger(old.budget)
        return old


#: The estimator class of each snapshot ``kind``: a family registers itself where it is defined
#: (:func:`register_family`); :mod:`panstream.estimators` imports the three families.
FAMILIES: dict[str, type[Estimator]] = {}
#: A family's variant for one kind of universe or grid, registered by the feature that defines it
#: (the country wing's by-country tables): ``(family kind, tag) -> class``, where the tag is the
#: universe's kind (``hashed-ip-country``) or a sketch grid's items (``ip-country``).
VARIANTS: dict[tuple[str, str], type[Estimator]] = {}

F = TypeVar("F", bound=type[Estimator])


def register_family(cls: F) -> F:
    """Register ``cls`` as the family of its snapshot ``kind`` (a class decorator)."""
    FAMILIES[cls.kind] = cls
    return cls


def register_variant(kind: str, tag: str, cls: type[Estimator]) -> None:
    """Let family ``kind`` build ``cls`` for universes (or grids) tagged ``tag``."""
    VARIANTS[(kind, tag)] = cls


def variant(kind: str, tag: str) -> type[Estimator] | None:
    """The variant of family ``kind`` registered for ``tag``, if any."""
    return VARIANTS.get((kind, tag))


#: The state side of the contract (:mod:`panstream.state.persist`, which registers itself when it
#: is imported, as ``import panstream`` does): snapshots and state files.
_PERSISTENCE: list[Any] = []


def register_persistence(module: Any) -> None:
    """Set the module the snapshot and file methods of :class:`Estimator` call."""
    _PERSISTENCE[:] = [module]


def _persistence() -> Any:
    if not _PERSISTENCE:  # never after ``import panstream``, which imports panstream.state.persist
        msg = "snapshots and state files are panstream.state.persist's: import panstream first"
        raise ConfigurationError(msg)
    return _PERSISTENCE[0]


_UNBOUND = object()


def _rebind_message(epoch: str | None, bound: object) -> str:
    return (f"a ledger of epoch {epoch} cannot be attached to this table, which belongs to epoch "
            f"{bound}: a new epoch label over the same table would spend its budget a second "
            "time. Keep the table's ledger; for a fresh budget call rotate(), which draws a "
            "fresh table with a fresh ledger")


def ledger_of(d: Mapping[str, Any] | None) -> PrivacyLedger:
    """The ledger a snapshot stores: a :class:`PrivacyLedger`, or a :class:`ShardLedger` for
    ``None`` (a shard of a group, whose budget is the group's).

    Raises:
        CorruptSnapshotError: the ledger cannot be read by this version's ``PrivacyLedger``.
    """
    if d is None:
        return ShardLedger()
    try:
        return PrivacyLedger.from_dict(dict(d))
    except (StateError, KeyError, TypeError, ValueError) as exc:
        raise CorruptSnapshotError.of_params(f"the ledger cannot be read by this panstream ({exc})") from None


def wipe_buffer(buf: object) -> None:
    """Overwrite a caller's writable NumPy array or bytearray with zeros.

    A bytearray is zeroed in place through a NumPy view (one pass, no allocation): ``buf[:] =
    bytes(len(buf))`` first allocates the zeros (above 128 KiB a fresh mapping, page-faulted in
    while copied), about 20x slower on the megabyte buffers of the Kafka decoder."""
    if isinstance(buf, np.ndarray) and buf.flags.writeable:
        buf.fill(0)
    elif isinstance(buf, bytearray) and buf:
        np.frombuffer(buf, dtype=np.uint8).fill(0)
