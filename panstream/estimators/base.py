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
* generic, here: :meth:`update`, :meth:`update_indices`, :meth:`snapshot`/:meth:`restore`,
  :meth:`save`/:meth:`load`, :meth:`rotate`.

Modules below this one (release, state format and files) import no estimator; estimators import
them. :func:`panstream.estimators.restore` and :func:`panstream.estimators.load` pick the family a
snapshot names.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import numpy as np

from panstream.errors import ArgumentTypeError, ItemError, StateError
from panstream.release.ledger import PrivacyLedger, ShardLedger
from panstream.state import files
from panstream.state import format as fmt
from panstream.universe import Universe, refuse_bare_item

E = TypeVar("E", bound="Estimator")


@dataclass(frozen=True)
class UpdateResult:
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

    @property
    def rejected(self) -> int:
        """Items dropped for any reason."""
        return self.malformed + self.outside + self.empty


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

    # ------------------------------------------------------------------ snapshots
    def snapshot_parts(self, *, as_shard: bool = False, extra: Mapping[str, Any] | None = None
                       ) -> tuple[bytes, memoryview, bytes]:
        """The snapshot as ``(head, payload, checksum)`` (:func:`panstream.state.format.encode_parts`);
        the payload may be a view of the live table. Call :meth:`_wipe_payload_view` on it once
        written.

        Args:
            as_shard: store no ledger (``null``): the table is one shard of a consumer group, whose
                budget lives in the group's ledger. Also the case whenever :attr:`ledger` is a
                :class:`~panstream.release.ledger.ShardLedger`.
            extra: further public parameters stored beside the family's own (e.g. the ``slice``
                a table is of, :mod:`panstream.state.slices`); they may not replace any of them.
        """
        ledger = None if as_shard or self.ledger.shard else self.ledger.to_dict()
        params = self.params()
        if extra:
            clash = set(extra) & set(params)
            if clash:
                msg = f"extra snapshot parameters {sorted(clash)} would replace the family's own"
                raise ValueError(msg)
            params.update(extra)
        return fmt.encode_parts(params, ledger, self._payload_view())

    def snapshot_buffer(self, *, as_shard: bool = False, extra: Mapping[str, Any] | None = None
                        ) -> bytearray:
        """The snapshot as a ``bytearray`` the caller can wipe after writing it; no other copy of
        the table is left behind (a packed temporary is zeroed here). See :meth:`snapshot_parts`."""
        parts = self.snapshot_parts(as_shard=as_shard, extra=extra)
        try:
            return bytearray().join(parts)
        finally:
            self._wipe_payload_view(parts[1])

    def snapshot(self) -> bytes:
        """The state as snapshot bytes: public parameters, ledger and table only (format in
        ``docs/snapshot-format.md``). Immutable, so it cannot be wiped: prefer :meth:`save`."""
        buf = self.snapshot_buffer()
        try:
            return bytes(buf)
        finally:
            buf[:] = bytes(len(buf))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`snapshot` to ``path`` atomically with mode 0600 (see
        :func:`panstream.state.files.atomic_write`), without copying a packed table. A byte-per-cell
        table is packed into a temporary that is zeroed once written, so no copy of this
        checkpoint's table outlives the save in freed memory.

        The ledger on disk is never lowered: if ``path`` holds a state of the same epoch, the
        releases recorded there that this copy lacks are first added to :attr:`ledger` (the union
        of the copies). The save is refused if the ledger is older than the one last recorded for
        ``path`` (:class:`~panstream.state.files.LedgerHistory`), and recorded there afterwards.

        Raises:
            StateError: the file could not be written; RolledBackStateError: the ledger is older
                than the history of ``path``.
        """
        history = None
        self.check_ledger_binding()
        files.refuse_hard_link(path)
        if not self.ledger.shard:
            disk = files.ledger_on_disk(path)
            if disk is not None and disk.epoch == self.ledger.epoch:
                self.ledger.absorb(disk)
            history = files.LedgerHistory(path)
            history.check(self.ledger)
        parts = self.snapshot_parts()
        try:
            files.atomic_write(path, parts)
        finally:
            self._wipe_payload_view(parts[1])
        if history is not None:
            history.record(self.ledger)

    @classmethod
    def restore(cls: type[E], data: bytes | bytearray | memoryview, *,
                expect: Mapping[str, Any] | None = None, layout: str = "auto") -> E:
        """Rebuild an estimator from :meth:`snapshot` bytes; future draws are fresh (no seed exists).

        ``expect`` may name the ``universe``, ``epsilon``, ``calibration`` (or ``modulus``) the
        caller resumes with. Raises :class:`~panstream.errors.StateError` (a subclass from
        :mod:`panstream.state.format`) on corrupt, truncated, foreign or future-version data, on a
        snapshot of another estimator family, or on contradicting parameters.
        """
        snap = fmt.decode(data, expect=expect)
        payload = np.array(snap.payload, dtype=np.uint8)  # our own copy; ``data`` stays untouched
        return cls._build(snap, payload, layout)

    @classmethod
    def load(cls: type[E], path: str | os.PathLike[str], *,
             expect: Mapping[str, Any] | None = None, layout: str = "auto") -> E:
        """Read an estimator written by :meth:`save`; see :meth:`restore` for ``expect`` and errors.

        The payload is read straight into the array the estimator adopts, and verified first.
        """
        snap, payload = files.read_verified(path, expect=expect)
        return cls._build(snap, payload, layout, path)

    @classmethod
    def _build(cls: type[E], snap: fmt.Snapshot, payload: np.ndarray, layout: str,
               path: str | os.PathLike[str] | None = None) -> E:
        """The estimator of a verified snapshot; read from ``path``, its ledger is blocked if it is
        older than the ledger history of ``path`` (a rolled-back file)."""
        try:
            if snap.kind != cls.kind:
                msg = (f"the snapshot holds a {snap.kind} estimator, not a {cls.kind} one: load "
                       "it with panstream.estimators.load() (or the class of its kind)")
                raise StateError(msg)
            est = cls._from_snapshot(snap.params, ledger_of(snap.ledger), payload, layout)
        except BaseException:
            payload.fill(0)
            raise
        if path is not None:
            why = files.LedgerHistory(path).problem(est.ledger)
            if why is not None:
                est.ledger.block(why)
        return est

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
        self.__dict__.pop("_epoch_of_table", None)  # a fresh table: a fresh epoch binds to it
        self.ledger = ShardLedger() if old.shard else PrivacyLedger(old.budget)
        return old


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
        raise fmt.bad_params(f"the ledger cannot be read by this panstream ({exc})") from None


def wipe_buffer(buf: object) -> None:
    """Overwrite a caller's writable NumPy array or bytearray with zeros.

    A bytearray is zeroed in place through a NumPy view (one pass, no allocation): ``buf[:] =
    bytes(len(buf))`` first allocates the zeros (above 128 KiB a fresh mapping, page-faulted in
    while copied), about 20x slower on the megabyte buffers of the Kafka decoder."""
    if isinstance(buf, np.ndarray) and buf.flags.writeable:
        buf.fill(0)
    elif isinstance(buf, bytearray) and buf:
        np.frombuffer(buf, dtype=np.uint8).fill(0)
