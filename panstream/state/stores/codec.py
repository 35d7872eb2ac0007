"""The shard snapshot codec: an estimator to the bytes a store keeps, and back.

A shard snapshot is exactly the estimator's snapshot (:mod:`panstream.state.persist`): the bit
table and public parameters, no ledger, and with ``keying`` the public record of the placement its
member checked. The store adds nothing: no offset, no count, no timestamp of arrivals.
"""

from __future__ import annotations

from panstream import estimators
from panstream.estimators.base import Estimator
from panstream.release.ledger import ShardLedger
from panstream.state import persist
from panstream.state.keying import Keying
from panstream.universe import Universe


def encode_shard(est: Estimator, keying: Keying | None = None) -> bytearray:
    """A shard's snapshot: the table and public parameters, and **no ledger** (``null``): a shard
    has no budget of its own, the group's ledger
    (:func:`~panstream.state.stores.release.release_store`) is the only one. With ``keying``, the
    public record that its member checked every message it applied against that
    placement (:mod:`panstream.state.keying`, issue 39).

    Returned as a ``bytearray`` that the checkpointer zeroes once it is durable, so no copy of an
    old shard table stays in freed memory next to the live one.
    """
    return persist.snapshot_buffer(est, as_shard=True,
                                   extra=None if keying is None else keying.param())


def decode_shard(data: bytes | bytearray, universe: Universe | str, epsilon: float,
                 calibration: str | None = None, *, kind: str = "density",
                 modulus: int | None = None) -> Estimator:
    """Restore a shard snapshot, checking it matches the parameters this consumer runs with (its
    estimator family ``kind``, universe, epsilon, and ``calibration`` or ``modulus``).

    The shard gets a :class:`~panstream.release.ledger.ShardLedger`, which refuses every release
    (also for a shard written by an older panstream with a budget of its own).

    Raises:
        StateError: the snapshot is corrupt, or its family or parameters differ from the
            configured ones (the message names the stored values to resume with).
    """
    est = persist.restore(data, expect=estimators.expect_of(kind, universe, epsilon,
                                                               calibration, modulus))
    est.ledger = ShardLedger()
    return est

