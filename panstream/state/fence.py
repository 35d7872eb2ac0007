"""Fencing snapshots: a member that no longer owns a partition's state never has it restored.

**The loss it prevents** (issue 26). A member Z of a consumer group holds a partition's state (a
routed slice ``r`` of ``<group>-slices``, a per-partition shard of ``<group>``, a window-slice of
``<group>-slices`` under ``--window``) through offset ``Pz`` and stops for longer than its
session (a stop-the-world pause). The group hands the partition to N, which restores the state,
applies what follows the committed offset and checkpoints: its snapshot covers ``C' > Pz`` and it
commits ``C'``. Z wakes and writes its older snapshot over N's. If N now dies before its next
checkpoint (``kill -9``), or a release reads the store meanwhile, the arrivals in ``(Pz, C']``
are gone: a restore replays only from ``C'``. Z's commit fails (Kafka refuses a commit from an
old generation), but its snapshot does not.

**The fence.** Every partition's state has an *ownership epoch*. A member claims it when the
partition is assigned (before it reads the snapshot) and tags every save with the epoch it
claimed (:class:`~panstream.sources.kafka.group.GroupLoop` does this for all three layouts):

* the claim's epoch is ``base + generation``, where ``generation`` is the member's generation in
  its consumer group at the assignment (Kafka raises it at every rebalance, and hands a partition
  to one member per generation), and ``base`` is 0 until a group is recreated (below). A later
  owner's epoch is therefore always higher than an earlier owner's, *whatever the order in which
  their writes reach the store*: the ordering comes from the broker, not from who wrote first;
* a store keeps, or picks, only the snapshot of the key's highest epoch
  (:class:`~panstream.state.stores.DirectoryStore`: a save under another epoch than the claimed
  one is refused under the key's ``flock``, and :meth:`~panstream.state.stores.DirectoryStore.
  claimed` fences any other writes, e.g. the several window-slices of one slice;
  :class:`~panstream.state.stores.TopicStore`: every reader takes the newest snapshot of the
  highest epoch, so a zombie's later record is ignored).

**A claim that is not higher** than the stored epoch comes from a member whose generation is
older than the last owner's (a zombie that claims late), or from a group whose generations
restarted (Kafka forgets a group a week after its last member left, ``offsets.retention.minutes``,
and the next incarnation counts from 1 again). The claimant tells the two apart by asking the
broker (:func:`claim_epoch`'s ``current``: it commits the partition's committed offset again,
which Kafka accepts only from a member of the current generation): a current member *rebases*
(``base`` = the stored epoch, so its epoch is higher again); a zombie gets
:class:`~panstream.errors.FencedError` and stops.

**What an epoch reveals** (invariant 1). An epoch counts the rebalances of the group (plus the
epochs of earlier incarnations): when members joined, left or died. That is public operational
data (any client of the group reads the generation; the broker logs it); it counts no arrival, no
message and no offset. Storing the partition's offsets in snapshots, which also would fence, was
rejected because an offset is a per-partition stream length (docs/threat-model.md, "Replays of
the counter family").

Stores written before fencing restore unchanged: a snapshot without an epoch has epoch 0, below
any claim, and is read until the first fenced save replaces it.

Example:
    >>> claim_epoch(None, generation=3, current=lambda: True, key="g-cells/0")
    Fence(epoch=3, base=0)
    >>> claim_epoch(Fence(3), generation=5, current=lambda: True, key="g-cells/0")
    Fence(epoch=5, base=0)
    >>> claim_epoch(Fence(5), generation=1, current=lambda: True, key="g-cells/0")  # recreated
    Fence(epoch=6, base=5)
    >>> claim_epoch(Fence(5), generation=4, current=lambda: False, key="g-cells/0")
    Traceback (most recent call last):
    ...
    panstream.errors.FencedError: g-cells/0 was claimed at epoch 5 by a newer owner ...
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from panstream.errors import FencedError


@dataclass(frozen=True)
class Fence:
    """A key's ownership epoch and the base it counts generations from (both public)."""

    epoch: int
    base: int = 0


def claim_epoch(stored: Fence | None, generation: int, current: Callable[[], bool],
                key: str) -> Fence:
    """The fence of a new claim of ``key`` (see the module docstring).

    Args:
        stored: the key's fence in the store (``None``: never claimed; epoch 0 for a store
            written before fencing).
        generation: the claimant's generation in its consumer group at the assignment (values
            below 1, "not known", count as 1).
        current: asks the broker whether the claimant is still a member of the group's current
            generation (called only when the claim would not be higher than ``stored``).
        key: the store key of the partition's state (a shard, a slice), for the message.

    Raises:
        FencedError: the claim is not higher and the claimant is not current (a zombie).
    """
    g = max(1, int(generation))
    if stored is None:
        return Fence(g, 0)
    if stored.base + g > stored.epoch:
        return Fence(stored.base + g, stored.base)
    if not current():
        msg = (f"{key} was claimed at epoch {stored.epoch} by a newer owner than this "
               f"member (generation {g}): this member was evicted from its group (a long pause?); "
               "nothing of it is written or committed")
        raise FencedError(msg)
    return Fence(stored.epoch + g, stored.epoch)


def fenced_message(key: str, mine: int, stored: Fence | None) -> str:
    """The one line of a save refused by the fence."""
    now = "no claim" if stored is None else f"epoch {stored.epoch}"
    return (f"snapshot {key} not saved: the store shows {now} for it, this member claimed "
            f"epoch {mine}, so another member owns its partition now (this one was evicted, e.g. "
            "after a long pause); nothing of it is written or committed, and nothing is lost (the "
            "owner holds the state)")


@runtime_checkable
class FencedStore(Protocol):
    """A shard store that can fence the snapshots of a key (both panstream stores can)."""

    def claim(self, key: str, generation: int, current: Callable[[], bool]) -> int:
        """Claim ``key`` for a new owner (:func:`claim_epoch`); durable where the store keeps
        claims. Returns the epoch every later save of this owner carries."""

    def save_fenced(self, key: str, data: bytes | bytearray, epoch: int) -> None:
        """Save ``key``'s snapshot under ``epoch``; refused (:class:`FencedError`) by a store that
        sees a newer claim, ignored by readers of a store that cannot refuse it."""

    def load(self, key: str) -> bytes | bytearray | None:
        """The snapshot of the key's highest epoch."""

    def keys(self) -> list[str]:
        """All keys holding a snapshot."""


class FencedSaves:
    """A :class:`~panstream.state.checkpoint.ShardStore` view that saves every key under the epoch
    its owner claimed, so the generic :class:`~panstream.state.checkpoint.Checkpointer` fences
    without knowing it (:class:`~panstream.sources.kafka.group.GroupLoop` hands it this view).

    Args:
        store: the fenced store.
        epochs: ``{key: claimed epoch}``, kept up to date by the owner (claims, releases).
    """

    def __init__(self, store: FencedStore, epochs: dict[str, int]) -> None:
        self.store = store
        self.epochs = epochs

    def save(self, key: str, data: bytes | bytearray) -> None:
        epoch = self.epochs.get(key)
        if epoch is None:
            msg = f"snapshot {key} not saved: this member never claimed its partition"
            raise FencedError(msg)
        self.store.save_fenced(key, data, epoch)

    def load(self, key: str) -> bytes | bytearray | None:
        return self.store.load(key)

    def keys(self) -> list[str]:
        return self.store.keys()
