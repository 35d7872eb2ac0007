"""A group's release: its one ledger, opened by the consumers and charged before any noise.

The ledger is an append-only log in the store (:mod:`panstream.release.ledger_log`): the members
open it (:func:`ensure_ledger`), a release appends its reservation durably and proceeds only if
the log's replay admits it (:func:`group_ledger`), so releases racing from several hosts never
overspend. :func:`release_store` merges the store (:func:`~panstream.state.stores.group.
merge_store`) and releases it; :func:`ledger_summary` is what ``panstream inspect`` says of it.
"""

from __future__ import annotations

import json
import os
from typing import Any

from panstream import estimators
from panstream.errors import ConfigurationError, StateError
from panstream.estimators.density import DensityEstimator
from panstream.release.frequency import MergedHistograms
from panstream.release.ledger import DEFAULT_BUDGET, GroupLedger, LedgerEntry, PrivacyLedger
from panstream.release.ledger_log import Opening, Reservation
from panstream.state.stores.directory import DirectoryStore
from panstream.state.stores.group import GroupState, merge_store
from panstream.state.stores.protocol import Store


def ledger_summary(store: Store) -> dict[str, Any]:
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


def ensure_ledger(store: Store, budget: float) -> bool:
    """Create the store's release ledger (empty, with ``budget``) if the store has no shards.

    Consumers call this when they start, so a release ledger exists from the first shard on. A
    store that already holds shards but no ledger is left alone: the ledger was lost, and
    :func:`release_store` refuses to start a new one silently (that would reset the budget).
    The ledger is *opened*: an opening record (epoch and budget) appended to the store's ledger
    log (a directory's :data:`~panstream.state.stores.directory.LEDGER_FILE`, the state topic's
    ledger records). Appending never overwrites anything, and the first opening in the log is
    the ledger, so a consumer that checked an empty store and appends its opening late (after
    other consumers and a release) changes nothing: an opening of another epoch is ignored by
    every replay.

    Returns:
        Whether a new ledger was written.

    Raises:
        StateError: the store cannot be read or written.
    """
    if store.keys() or store.read_ledger() is not None:
        return False
    store.create_ledger(json.dumps(PrivacyLedger(budget).to_dict(), sort_keys=True).encode())
    return True


def release_store(store: Store, epsilon: float, mechanism: str = "laplace",
                  merge: str = "auto", partitions: int | None = None, keyed: bool = False,
                  new_ledger: bool = False, *, by: int | str | None = None,
                  budget: float = DEFAULT_BUDGET, **options: Any) -> tuple[Any, GroupState]:
    """Merge a shard store and release it, recording the release in its ledger durably first.

    The release is the one of the shards' family (a density :class:`~panstream.release.density.
    Release` or map; a :class:`~panstream.release.frequency.FrequencyRelease`); ``options`` go to
    it (``confidence=``, and ``t=`` for frequency).

    The release is charged to the store's release ledger (a directory's
    :data:`~panstream.state.stores.directory.LEDGER_FILE`, a state topic's ledger records): its
    reservation is appended durably (``fsync`` / ``acks=all``)
    *before any noise is drawn*, and the release proceeds only if the log's replay admits it
    (:func:`group_ledger`), so processes releasing at once, from any hosts, never overspend.
    Its noise is scaled to the merge's sensitivity and its state
    epsilon counts every shard one person can change (see
    :func:`~panstream.state.stores.group.merge_store`, ``keyed``).

    With ``by`` the release is a density map of the merged table (:mod:`panstream.release.maps`),
    charged once to the same ledger; it needs the partitioned merge (the sum merge lays the shard
    tables end to end, so its cells no longer name addresses).

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
        >>> from panstream.state.keying import Keying
        >>> from panstream.state.stores.codec import encode_shard
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


def _release_locked(store: Store, epsilon: float, mechanism: str,
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


def group_ledger(store: Store, *, new_ledger: bool = False,
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



def release_state_dir(directory: str | os.PathLike[str], epsilon: float,
                      mechanism: str = "laplace", merge: str = "auto",
                      partitions: int | None = None, keyed: bool = False,
                      new_ledger: bool = False, *, by: int | str | None = None,
                      budget: float = DEFAULT_BUDGET, **options: Any) -> tuple[Any, GroupState]:
    """:func:`release_store` on the :class:`DirectoryStore` ``directory``."""
    return release_store(DirectoryStore(directory), epsilon, mechanism, merge, partitions, keyed,
                         new_ledger, by=by, budget=budget, **options)
