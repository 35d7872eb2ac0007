"""Privacy budget ledger: sequential composition of output releases.

Pan-privacy charges two things (seed 001, "Pan-Privacy"): the state, which is ``epsilon_state``-DP
against an intrusion whatever is released, and the outputs, which compose sequentially (seed 004,
"Sequential composition"): ``t`` releases at ``epsilon_1 .. epsilon_t`` are together
``sum(epsilon_i)``-DP. A state and all its releases are therefore

    epsilon_total = epsilon_state + sum(epsilon_i)   pan-private,

and ``k * epsilon_total`` for any group of ``k`` people (seed 004, "Group privacy"; seed 001).

The ledger holds the *output* budget ``B`` and refuses a release that would take ``sum(epsilon_i)``
above it (:class:`~panstream.errors.BudgetExhaustedError`, before any noise is drawn).

Default budget: :data:`DEFAULT_BUDGET` = 1.0. With the default state epsilon of 1 it caps a state at
``epsilon_total = 2``, the "2 epsilon-differentially pan-private" of the seed article with equal shares
for the inside and the outside; one release at epsilon 1, or e.g. four at 0.25, spends it. Spend it
on few releases: each release's noise scale is ``1/epsilon_i``. Past the budget, rotate to a new epoch
(fresh table, fresh ledger) rather than raising the budget.

The ledger is data-independent: an entry records only (epsilon, mechanism, time, a random id), never
a released value, a count or the noise, so it may be stored in snapshots and printed freely.

**One table, one ledger.** Every path that releases from a table charges that table's ledger, and
:meth:`PrivacyLedger.charge` checks and records in one step under a lock. Two copies of one ledger
(a state file and the copy in a process that loaded it, or a group ledger read by two releases)
are recombined with :meth:`PrivacyLedger.absorb`, the union of their entries, never by keeping one
copy blindly: spent budget can only grow. A ledger carries a random ``epoch`` label (new with every
fresh table, e.g. after a rotation) and each entry a random ``id`` (both data-independent), so the
union is exact. A ledger whose file was rolled back (an older copy put back) is *blocked*: it
refuses every release (:meth:`PrivacyLedger.block`; :class:`panstream.state.files.LedgerHistory`
detects the rollback).

>>> led = PrivacyLedger(budget=1.0)
>>> _ = led.charge(0.25, "laplace")
>>> led.spent, led.remaining, led.epsilon_total(1.0), led.group_epsilon(3, 1.0)
(0.25, 0.75, 1.25, 3.75)
"""

from __future__ import annotations

import math
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from panstream.errors import BudgetExhaustedError, ConfigurationError, StateError

#: Default total output epsilon a state may spend on releases (see the module docstring).
DEFAULT_BUDGET = 1.0

#: Absolute slack when comparing a sum of float epsilons with the budget (10 x 0.1 fits in 1.0).
_SLACK = 1e-12


@dataclass(frozen=True)
class LedgerEntry:
    """One recorded release: its output epsilon, mechanism and UNIX time, and a random ``id`` that
    tells two releases apart when copies of a ledger are recombined. Nothing else.

    Entries written by panstream 0.1 have no id (``None``); they are told apart by their other
    fields.
    """

    epsilon: float
    mechanism: str
    time: float
    id: str | None = None

    def key(self) -> tuple[float, str, float, str | None]:
        """What identifies the entry in a union of ledger copies."""
        return (self.epsilon, self.mechanism, self.time, self.id)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"epsilon": self.epsilon, "mechanism": self.mechanism, "time": self.time}
        if self.id is not None:
            d["id"] = self.id
        return d


def new_label() -> str:
    """A random, data-independent label (16 hex digits from the OS CSPRNG) for epochs and entries."""
    return secrets.token_hex(8)


def _finite_non_negative(x: object, what: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
        msg = f"{what} must be a finite non-negative number, got {x!r}"
        raise ConfigurationError(msg)
    return float(x)


@dataclass
class PrivacyLedger:
    """Total output budget and the releases charged against it (data-independent).

    Attributes:
        budget: total output epsilon that releases may spend.
        entries: the releases recorded so far, oldest first.

    Raises:
        ConfigurationError: the budget is negative, infinite or not a number.
    """

    budget: float = DEFAULT_BUDGET
    entries: list[LedgerEntry] = field(default_factory=list)
    #: Random label of the table's epoch (``None`` for a ledger of panstream 0.1).
    epoch: str | None = field(default_factory=new_label)
    # Serializes charge(): its check and its append are one step, so threads releasing from one
    # table at once can never both fit into the budget that only one of them fits into.
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False,
                                  compare=False)
    #: Why every release is refused (a rolled-back state), or ``None``.
    blocked: str | None = field(default=None, init=False, compare=False)

    #: Whether this table's budget lives elsewhere (a shard of a consumer group; see ShardLedger).
    shard = False

    def __post_init__(self) -> None:
        self.budget = _finite_non_negative(self.budget, "budget")

    @property
    def spent(self) -> float:
        """Output epsilon spent so far (sum over releases)."""
        return math.fsum(e.epsilon for e in self.entries)

    @property
    def remaining(self) -> float:
        """Output epsilon still available."""
        return max(0.0, self.budget - self.spent)

    @property
    def releases(self) -> int:
        """Number of releases recorded."""
        return len(self.entries)

    def check(self, epsilon: float) -> None:
        """Raise if a release at ``epsilon`` would exceed the budget; record nothing.

        Raises:
            ConfigurationError: ``epsilon`` is not a positive finite number.
            BudgetExhaustedError: the release does not fit; the message says what is left.
        """
        eps = _finite_non_negative(epsilon, "release epsilon")
        if eps == 0:
            raise ConfigurationError("release epsilon must be positive, got 0")
        if self.blocked is not None:
            raise RolledBackStateError(self.blocked)
        left = self.remaining
        if eps > left + _SLACK:
            done = f"{self.releases} release(s)"
            if left <= _SLACK:
                msg = (f"release of epsilon {eps:.10g} refused: the output budget of "
                       f"{self.budget:.10g} is spent ({done}); no further release is possible "
                       "from this epoch: rotate to a new epoch (panstream rotate, or rotate() in "
                       "Python) for a fresh table and budget")
            else:
                msg = (f"release of epsilon {eps:.10g} refused: the output budget of "
                       f"{self.budget:.10g} has {left:.10g} left after {done}; release with "
                       f"epsilon <= {left:.10g}, or rotate to a new epoch (fresh table and budget)")
            raise BudgetExhaustedError(msg)

    def charge(self, epsilon: float, mechanism: str) -> LedgerEntry:
        """Record a release, or refuse it if it would exceed the budget.

        Args:
            epsilon: the realized output epsilon of the release.
            mechanism: its mechanism name.

        Returns:
            The entry recorded.

        Raises:
            BudgetExhaustedError: the release does not fit (nothing is recorded).
            ConfigurationError: ``epsilon`` is not positive and finite.
        """
        with self._lock:  # check and record as one step (threads may release at once)
            self.check(epsilon)
            entry = LedgerEntry(float(epsilon), str(mechanism), time.time(), new_label())
            self.entries.append(entry)
        return entry

    def absorb(self, other: PrivacyLedger) -> int:
        """Add the entries of ``other`` (another copy of this ledger) that this copy lacks.

        The union is how copies are recombined: spent budget never goes down. Only copies of the
        same epoch are combined; the budget stays this ledger's.

        Returns:
            The number of entries added.

        Raises:
            StateError: ``other`` belongs to another epoch (another table).
        """
        if other.epoch != self.epoch:
            msg = (f"cannot combine ledgers of different epochs ({other.epoch} and {self.epoch}): "
                   "they belong to different tables")
            raise StateError(msg)
        with self._lock:
            have = {e.key() for e in self.entries}
            new = [e for e in other.entries if e.key() not in have]
            self.entries.extend(new)
            self.entries.sort(key=lambda e: e.time)
        return len(new)

    def lacks(self, other: PrivacyLedger) -> int:
        """How many entries of ``other`` (a copy of the same epoch) this copy does not hold."""
        have = {e.key() for e in self.entries}
        return sum(e.key() not in have for e in other.entries)

    def block(self, reason: str) -> None:
        """Refuse every later release with ``reason`` (a :class:`RolledBackStateError`): the state
        this ledger was read from is older than a ledger already seen for it."""
        self.blocked = reason

    def epsilon_total(self, epsilon_state: float) -> float:
        """Pan-private epsilon of a state with this ledger: ``epsilon_state + spent``."""
        return float(epsilon_state) + self.spent

    def group_epsilon(self, k: int, epsilon_state: float) -> float:
        """Guarantee for a group of ``k`` people: ``k * (epsilon_state + spent)``.

        Raises:
            ValueError: ``k`` is not a positive integer.
        """
        return group_privacy(k, self.epsilon_total(epsilon_state))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable, data-independent dict (budget, entries and epoch)."""
        d: dict[str, Any] = {"budget": self.budget, "entries": [e.to_dict() for e in self.entries]}
        if self.epoch is not None:
            d["epoch"] = self.epoch
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PrivacyLedger:
        """Inverse of :meth:`to_dict`.

        Raises:
            StateError: the dict is not a ledger (missing or malformed fields).
        """
        try:
            entries = []
            for e in d.get("entries", []):
                eps = _finite_non_negative(e["epsilon"], "ledger entry epsilon")
                ident = e.get("id")
                entries.append(LedgerEntry(eps, str(e["mechanism"]), float(e["time"]),
                                           None if ident is None else str(ident)))
            epoch = d.get("epoch")
            return cls(_finite_non_negative(d["budget"], "ledger budget"), entries,
                       None if epoch is None else str(epoch))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            msg = (f"the privacy ledger in the state is malformed ({exc!s}); the state cannot be "
                   "trusted: start a new epoch")
            raise StateError(msg) from None


class ShardLedger(PrivacyLedger):
    """The ledger of a table that has no budget of its own: one shard of a consumer group.

    A group's shards are released together, merged, against the group's one ledger (a file of the
    state directory, a record of the state topic: :mod:`panstream.state.stores`). A shard snapshot
    therefore stores no ledger at all, and a shard restored on its own refuses every release, so
    the budget can never be spent behind the group ledger's back.

    >>> ShardLedger().charge(0.1, "laplace")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    panstream.release.ledger.ShardReleaseError: this table is one shard of a Kafka consumer group...
    """

    shard = True

    def __init__(self) -> None:
        super().__init__(0.0, [], None)

    def check(self, epsilon: float) -> None:
        """Always refuse: see the class docstring.

        Raises:
            ShardReleaseError: always.
        """
        msg = ("this table is one shard of a Kafka consumer group and has no budget of its own: "
               "release the whole group with 'panstream release --state-dir DIR' (or "
               "--state-topic TOPIC), which merges the shards and charges the group's one ledger")
        raise ShardReleaseError(msg)

    def to_dict(self) -> dict[str, Any]:
        """Refused: a shard snapshot stores no ledger (``null`` in the format)."""
        msg = "a shard has no ledger of its own to store"
        raise StateError(msg)


class GroupLedger(PrivacyLedger):
    """A consumer group's ledger, whose charges are reservations in a shared append-only log.

    :meth:`charge` checks the budget as this copy knows it, then hands the entry to ``reserve``,
    which appends it to the group's ledger log (durably) and replays the log
    (:mod:`panstream.release.ledger_log`): the release proceeds only if the replay admits the
    reservation, i.e. if in log order the reservations before it and it fit the budget. Every
    process replays the same log to the same answer, so releases racing from several processes or
    hosts never overspend; this copy's entries become the replay's.

    Args:
        ledger: the group's ledger as replayed before the release.
        reserve: appends a reservation for the entry and returns ``(admitted, replayed ledger)``.
    """

    def __init__(self, ledger: PrivacyLedger,
                 reserve: Callable[[LedgerEntry], tuple[bool, PrivacyLedger]]) -> None:
        super().__init__(ledger.budget, list(ledger.entries), ledger.epoch)
        self._reserve = reserve

    def charge(self, epsilon: float, mechanism: str) -> LedgerEntry:
        """Reserve ``epsilon`` in the group's log; return the entry once the replay admits it.

        Raises:
            BudgetExhaustedError: the budget, as this copy or the log's replay knows it, does not
                cover ``epsilon`` (a refused reservation stays in the log and spends nothing).
            ConfigurationError: ``epsilon`` is not positive and finite.
        """
        with self._lock:
            self.check(epsilon)  # refused at once if already known not to fit: nothing appended
            entry = LedgerEntry(float(epsilon), str(mechanism), time.time(), new_label())
            admitted, now = self._reserve(entry)
            self.entries = list(now.entries)
            if not admitted:
                left = max(0.0, self.budget - math.fsum(e.epsilon for e in now.entries))
                msg = (f"release of epsilon {float(epsilon):.10g} refused: releases from other "
                       f"processes reserved the group's budget of {self.budget:.10g} first "
                       f"({left:.10g} left); release with less, or start a new epoch")
                raise BudgetExhaustedError(msg)
        return entry


class ShardReleaseError(StateError):
    """A release was asked of one shard of a consumer group instead of the whole group."""


class RolledBackStateError(StateError):
    """The state's ledger is older than one already seen for it (an old copy was put back)."""


def group_privacy(k: int, epsilon: float) -> float:
    """Group privacy (seed 004): an epsilon-DP mechanism is ``k * epsilon``-DP for groups of ``k``.

    Raises:
        ValueError: ``k`` is not a positive integer.

    Example:
        >>> group_privacy(4, 0.5)
        2.0
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        msg = f"group size k must be a positive integer, got {k!r}"
        raise ConfigurationError(msg)
    return k * float(epsilon)
