"""An estimator to snapshot bytes and state files, and back: the state side of the estimator contract.

The families (:mod:`panstream.estimators`) keep a table, its public parameters and a ledger; they
know no codec and no file system (issue 36: the pure core sits below ``state/``). This module turns
an estimator into a snapshot (:mod:`panstream.state.format`) and a state file
(:mod:`panstream.state.files`: atomic writes with mode 0600, the ledger history that refuses a
rolled-back file), and a snapshot back into whichever family it names.

``Estimator.snapshot``/``save``/``restore``/``load`` and ``panstream.estimators.load``/``restore``/
``release_file`` were these functions until issue 36; they still work, as thin wrappers of the
functions here (registered with :func:`panstream.estimators.base.register_persistence` when this
module is imported, which ``import panstream`` does), for one release.

>>> import os, tempfile
>>> from panstream.estimators import DensityEstimator
>>> path = os.path.join(tempfile.mkdtemp(), "s.pst")
>>> save(DensityEstimator("range:64"), path)
>>> type(load(path)).__name__, type(restore(snapshot(DensityEstimator("range:8")))).__name__
('DensityEstimator', 'DensityEstimator')
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any, TypeVar

import numpy as np

from panstream.errors import ConfigurationError, StateError
from panstream.estimators import check_release_options, family
from panstream.estimators.base import Estimator, ledger_of, register_persistence
from panstream.estimators.counters import payload_counter
from panstream.estimators.density import DensityEstimator
from panstream.estimators.frequency import FrequencyEstimator
from panstream.state import files
from panstream.state import format as fmt

__all__ = ["build", "load", "release_file", "restore", "save", "snapshot", "snapshot_buffer",
           "snapshot_counter", "snapshot_parts"]

E = TypeVar("E", bound=Estimator)


# ---------------------------------------------------------------------- estimator -> bytes, file
def snapshot_parts(est: Estimator, *, as_shard: bool = False,
                   extra: Mapping[str, Any] | None = None) -> tuple[bytes, memoryview, bytes]:
    """The snapshot of ``est`` as ``(head, payload, checksum)`` (:func:`panstream.state.format.encode_parts`);
    the payload may be a view of the live table. Call ``est._wipe_payload_view`` on it once written.

    Args:
        as_shard: store no ledger (``null``): the table is one shard of a consumer group, whose
            budget lives in the group's ledger. Also the case whenever ``est.ledger`` is a
            :class:`~panstream.release.ledger.ShardLedger`.
        extra: further public parameters stored beside the family's own (e.g. the ``slice`` a
            table is of, :mod:`panstream.state.slices`); they may not replace any of them.
    """
    ledger = None if as_shard or est.ledger.shard else est.ledger.to_dict()
    params = est.params()
    if extra:
        clash = set(extra) & set(params)
        if clash:
            msg = f"extra snapshot parameters {sorted(clash)} would replace the family's own"
            raise ValueError(msg)
        params.update(extra)
    return fmt.encode_parts(params, ledger, est._payload_view())


def snapshot_buffer(est: Estimator, *, as_shard: bool = False,
                    extra: Mapping[str, Any] | None = None) -> bytearray:
    """The snapshot as a ``bytearray`` the caller can wipe after writing it; no other copy of the
    table is left behind (a packed temporary is zeroed here). See :func:`snapshot_parts`."""
    parts = snapshot_parts(est, as_shard=as_shard, extra=extra)
    try:
        return bytearray().join(parts)
    finally:
        est._wipe_payload_view(parts[1])


def snapshot(est: Estimator) -> bytes:
    """The state as snapshot bytes: public parameters, ledger and table only (format in
    ``docs/snapshot-format.md``). Immutable, so it cannot be wiped: prefer :func:`save`."""
    buf = snapshot_buffer(est)
    try:
        return bytes(buf)
    finally:
        buf[:] = bytes(len(buf))


def save(est: Estimator, path: str | os.PathLike[str]) -> None:
    """Write the snapshot of ``est`` to ``path`` atomically with mode 0600 (see
    :func:`panstream.state.files.atomic_write`), without copying a packed table. A byte-per-cell
    table is packed into a temporary that is zeroed once written, so no copy of this checkpoint's
    table outlives the save in freed memory.

    The ledger on disk is never lowered: if ``path`` holds a state of the same epoch, the releases
    recorded there that this copy lacks are first added to ``est.ledger`` (the union of the
    copies). The save is refused if the ledger is older than the one last recorded for ``path``
    (:class:`~panstream.state.files.LedgerHistory`), and recorded there afterwards.

    Raises:
        StateError: the file could not be written; RolledBackStateError: the ledger is older than
            the history of ``path``.
    """
    history = None
    est.check_ledger_binding()
    files.refuse_hard_link(path)
    if not est.ledger.shard:
        disk = files.ledger_on_disk(path)
        if disk is not None and disk.epoch == est.ledger.epoch:
            est.ledger.absorb(disk)
        history = files.LedgerHistory(path)
        history.check(est.ledger)
    parts = snapshot_parts(est)
    try:
        files.atomic_write(path, parts)
    finally:
        est._wipe_payload_view(parts[1])
    if history is not None:
        history.record(est.ledger)


# ---------------------------------------------------------------------- bytes, file -> estimator
def restore(data: bytes | bytearray | memoryview, *, cls: type[Estimator] | None = None,
            expect: Mapping[str, Any] | None = None, layout: str = "auto") -> Estimator:
    """Rebuild an estimator from snapshot bytes; future draws are fresh (no seed exists).

    ``cls`` (a family class) refuses a snapshot of another family; ``None`` takes whichever
    family the snapshot names. ``expect`` may name the ``universe``, ``epsilon``, ``calibration``
    (or ``modulus``) the caller resumes with.

    Raises:
        StateError: (a subclass from :mod:`panstream.state.format`) corrupt, truncated, foreign or
            future-version data, a snapshot of another family than ``cls``, or contradicting
            parameters.
    """
    snap = fmt.decode(data, expect=expect)
    kind = family(snap.kind) if cls is None else cls
    return build(kind, snap, np.array(snap.payload, dtype=np.uint8), layout)  # our own copy


def load(path: str | os.PathLike[str], *, cls: type[Estimator] | None = None,
         expect: Mapping[str, Any] | None = None, layout: str = "auto") -> Estimator:
    """Read a state file written by :func:`save` (``cls`` and ``expect`` as for :func:`restore`).

    The payload is read straight into the array the estimator adopts, and verified first.

    >>> import os, tempfile, panstream as ps
    >>> path = os.path.join(tempfile.mkdtemp(), "s.pst")
    >>> save(ps.FrequencyEstimator("range:64"), path)
    >>> type(load(path)).__name__
    'FrequencyEstimator'
    """
    snap, payload = files.read_verified(path, expect=expect)
    try:
        kind = family(snap.kind) if cls is None else cls
    except BaseException:
        payload.fill(0)
        raise
    return build(kind, snap, payload, layout, path)


def build(cls: type[E], snap: fmt.Snapshot, payload: np.ndarray, layout: str,
          path: str | os.PathLike[str] | None = None) -> E:
    """The estimator of family ``cls`` of a verified snapshot (``payload``: a writable array it
    adopts, zeroed if refused); read from ``path``, its ledger is blocked if it is older than the
    ledger history of ``path`` (a rolled-back file).

    Raises:
        StateError: the snapshot holds another family, or its parameters are refused.
    """
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


def snapshot_counter(data: bytes | bytearray | memoryview, cell: int) -> int:
    """The counter of ``cell`` in verified frequency snapshot bytes (what an intruder reads from a
    dump; for audits), at the offset ``docs/snapshot-format.md`` gives.

    >>> est = FrequencyEstimator("range:8", modulus=4)
    >>> snapshot_counter(snapshot(est), 5) == int(est.counters()[5])
    True

    Raises:
        StateError: the data is not a valid frequency snapshot, or ``cell`` is out of range.
    """
    snap = fmt.decode(data)
    if snap.kind != FrequencyEstimator.kind:
        msg = f"the snapshot holds a {snap.kind} estimator, not a frequency one"
        raise StateError(msg)
    if not 0 <= cell < snap.params["cells"]:
        msg = f"cell {cell} is outside 0..{snap.params['cells'] - 1}"
        raise StateError(msg)
    return payload_counter(snap.payload, cell, int(snap.params["modulus"]))


# ---------------------------------------------------------------------- the one path to a file's ledger
def release_file(path: str | os.PathLike[str], epsilon: float, mechanism: str = "laplace", *,
                 by: int | str | None = None, **kwargs: Any) -> Any:
    """Release from the state file at ``path``: the one path to a state file's ledger.

    Under the state's exclusive lock (:func:`panstream.state.files.state_lock`: refused while an
    ingest or another release holds it), load the state, release (``by``: a density map), save it
    with the charged ledger, and only then return the release: the charge is durable before the
    number exists anywhere. A shard file of a consumer group refuses (it has no budget of its own:
    release its group); a rolled-back file refuses (its ledger is older than its history).

    Returns:
        The :class:`~panstream.release.density.Release` (or map / family release).

    Raises:
        StateError: locked, missing, corrupt, a shard or rolled back; BudgetExhaustedError: the
            budget does not cover ``epsilon``; ConfigurationError: bad arguments (``by`` on a
            family without maps).
    """
    with files.state_lock(path, "a release"):
        est = load(path)
        try:
            check_release_options(est.kind, kwargs, f"{path} holds a {est.kind} state")
            if by is None or (by == "country" and hasattr(est, "release_by_country")):
                rel = est.release(epsilon, mechanism, **kwargs)
            elif by == "country":
                msg = (f"--by country needs a state that keeps one grid per country (ingest "
                       f"--estimator sketch -u sketch:1024x24:ip-country); {path} holds "
                       f"{est.universe.spec}")
                raise ConfigurationError(msg)
            elif isinstance(est, DensityEstimator):
                rel = est.release_map(epsilon, by, mechanism, **kwargs)
            else:
                msg = f"density maps (--by) need a density state; {path} holds a {est.kind} state"
                raise ConfigurationError(msg)
            save(est, path)  # the charge is durable before anything is returned
        finally:
            est.wipe()
    return rel


register_persistence(sys.modules[__name__])
