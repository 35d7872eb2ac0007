"""A group's release ledger as an append-only log that every reader replays to the same result.

Several processes, on several hosts, may release from one consumer group at once (issue 19). A
ledger that each of them reads, charges and writes back loses charges (the last write wins), and a
compacted topic that keeps only the newest ledger record can lower the spent total. So the group
ledger is a *log of records* that is only ever appended to:

* an **opening** (:class:`Opening`) names the ledger's epoch (a random label) and budget, and may
  carry entries already spent (a ledger of an older panstream, migrated into the log);
* a **reservation** (:class:`Reservation`) is one release: its epsilon, mechanism, UNIX time, the
  ledger epoch it charges and a random id. A release appends its reservation (durably) *before*
  drawing any noise, and proceeds only if the replay admits it.

Every reader replays the log in order (:func:`replay`): the first opening fixes the epoch and the
budget; each reservation of that epoch is **admitted iff the admitted sum plus it fits the
budget**, and is otherwise refused (it spends nothing). Because the decision depends only on the
records before it, all readers agree, whatever the interleaving of appends from different hosts;
appending can only admit later reservations, never un-admit an earlier one, so the spent total
never goes down. A reservation whose release then crashes stays admitted: spent (conservative).

The records hold only public, data-independent fields (the same as a :class:`LedgerEntry`).

>>> from panstream.release.ledger import PrivacyLedger
>>> opening = Opening(PrivacyLedger(1.0, epoch="e1"))
>>> a = Reservation("e1", "a", 0.75, "laplace", 0.0)
>>> b = Reservation("e1", "b", 0.5, "laplace", 0.0)    # does not fit after a: refused
>>> c = Reservation("e1", "c", 0.25, "laplace", 0.0)   # fits after a
>>> r = replay([opening.encode(), a.encode(), b.encode(), c.encode()])
>>> r.ledger.spent, sorted(r.admitted), sorted(r.refused)
(1.0, ['a', 'c'], ['b'])
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from panstream.errors import StateError
from panstream.release.ledger import _SLACK, LedgerEntry, PrivacyLedger

#: Prefix of every ledger log record (so a stray line or message is never mistaken for one).
MAGIC = b"PSLG1"


@dataclass(frozen=True)
class Reservation:
    """One release's claim on the budget of the ledger epoch ``epoch`` (data-independent)."""

    epoch: str | None
    id: str
    epsilon: float
    mechanism: str
    time: float

    def entry(self) -> LedgerEntry:
        """The ledger entry this reservation becomes once admitted."""
        return LedgerEntry(self.epsilon, self.mechanism, self.time, self.id)

    @classmethod
    def of(cls, epoch: str | None, entry: LedgerEntry) -> Reservation:
        """The reservation of ``entry`` against the ledger epoch ``epoch``."""
        if entry.id is None:
            msg = "a reservation needs an entry with a random id"
            raise StateError(msg)
        return cls(epoch, entry.id, entry.epsilon, entry.mechanism, entry.time)

    def encode(self) -> bytes:
        """The record's bytes (``MAGIC`` + compact JSON)."""
        body = {"kind": "reserve", "epoch": self.epoch, "id": self.id, "epsilon": self.epsilon,
                "mechanism": self.mechanism, "time": self.time}
        return MAGIC + json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Opening:
    """The record that opens a ledger (epoch and budget), carrying entries already spent."""

    ledger: PrivacyLedger

    def encode(self) -> bytes:
        """The record's bytes (``MAGIC`` + compact JSON)."""
        body = {"kind": "open", **self.ledger.to_dict()}
        if self.ledger.epoch is None:
            body["epoch"] = None
        return MAGIC + json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def decode(raw: bytes, where: str) -> Reservation | Opening:
    """A ledger log record from its bytes.

    Raises:
        StateError: the bytes are not a ledger log record.
    """
    try:
        if not raw.startswith(MAGIC):
            raise ValueError("no magic")
        d: dict[str, Any] = json.loads(raw[len(MAGIC):])
        if d.get("kind") == "reserve":
            eps = float(d["epsilon"])
            if not math.isfinite(eps) or eps < 0:
                raise ValueError("bad epsilon")
            epoch = d.get("epoch")
            return Reservation(None if epoch is None else str(epoch), str(d["id"]), eps,
                               str(d["mechanism"]), float(d["time"]))
        if d.get("kind") == "open":
            return Opening(PrivacyLedger.from_dict(d))
        raise ValueError("unknown kind")
    except (ValueError, KeyError, TypeError, AttributeError, StateError):
        msg = (f"release ledger ({where}) holds a record that is not a panstream ledger record: "
               "restore the ledger from a backup")
        raise StateError(msg) from None


@dataclass
class Replay:
    """The outcome of replaying a ledger log.

    Attributes:
        ledger: the ledger (epoch, budget, admitted entries in log order), or ``None`` if the log
            holds no opening yet.
        admitted: ids of the admitted reservations; refused: ids of the refused ones.
    """

    ledger: PrivacyLedger | None = None
    admitted: set[str] = field(default_factory=set)
    refused: set[str] = field(default_factory=set)


def replay(records: Iterable[bytes | PrivacyLedger], where: str = "the ledger log", *,
           fixed: PrivacyLedger | None = None) -> Replay:
    """Replay ledger log records in log order (see the module docstring).

    Args:
        records: record bytes, or :class:`PrivacyLedger` objects standing for openings (ledgers
            of an older panstream, read in their place in the log).
        where: how messages name the log.
        fixed: a ledger that fixes the epoch and budget before the first record (the charged
            ledger of an older panstream's state topic); its entries count as spent.

    Raises:
        StateError: a record is not a ledger record.
    """
    out = Replay()
    led: PrivacyLedger | None = None
    seen: set[tuple[float, str, float, str | None] | str] = set()

    def carry(src: PrivacyLedger) -> None:
        assert led is not None
        for e in src.entries:
            k: tuple[float, str, float, str | None] | str = e.id if e.id is not None else e.key()
            if k not in seen:
                seen.add(k)
                led.entries.append(e)

    if fixed is not None:
        led = PrivacyLedger(fixed.budget, [], fixed.epoch)
        carry(fixed)
    for rec in records:
        item = Opening(rec) if isinstance(rec, PrivacyLedger) else decode(rec, where)
        if isinstance(item, Opening):
            if led is None:
                led = PrivacyLedger(item.ledger.budget, [], item.ledger.epoch)
            if item.ledger.epoch == led.epoch:
                carry(item.ledger)  # spent before the log existed: counted, unconditionally
            continue
        if led is None or item.epoch != led.epoch or item.id in seen:
            continue  # no ledger yet, another epoch, or a duplicate: charges nothing here
        seen.add(item.id)
        if math.fsum([led.spent, item.epsilon]) <= led.budget + _SLACK:
            led.entries.append(item.entry())
            out.admitted.add(item.id)
        else:
            out.refused.add(item.id)
    out.ledger = led
    return out
