"""The attack that the routed layout defeats: one person's item in every partition of an unkeyed topic.

Two neighbouring streams differ by one client ``x`` whose requests reach all 8 partitions of a topic
(no key, round robin). The adversary reads every state file the group keeps (one intrusion) and
decides whether ``x`` arrived, by a majority vote over every copy of ``x``'s cell in the files.

* Per-partition layout: 8 shard files each hold a redrawn bit of ``x``'s cell, and the vote over 8
  independent copies distinguishes the streams with advantage about 0.79 at epsilon 1: the files are
  only 8 x epsilon_state private (what ``release`` reports without ``--keyed``).
* Routed layout: every arrival of ``x`` went to the one slice holding its cell, so the files hold
  exactly one bit of it, and no test does better than ``p - q = tanh(epsilon_state / 2)`` = 0.462.

Each world runs 1,000 times through the real code (routing, slice tables, slice snapshots, restore).
The routed advantage is a difference of two proportions (sd <= sqrt(2 x 0.25 / 1000) = 0.022): the
bound tanh(1/2) + 6 sd = 0.596 fails falsely with probability below 2e-9; the per-partition
advantage is expected near 0.79, 8 sd above that bound (the attack has the power to see the leak).
"""

from __future__ import annotations

import math

import numpy as np

from panstream import estimators
from panstream.estimators.density import DensityEstimator
from panstream.state.slices import SliceLayout, encode_slice
from panstream.state.stores import encode_shard
from panstream.universe import Universe

U = Universe.parse("range:16")
X = 9  # the person's cell
PARTITIONS, TRIALS, EPS = 8, 1000, 1.0
rng = np.random.default_rng(3)  # test data (the other clients), never a privacy draw


def other_clients() -> list[np.ndarray]:
    """The rest of the stream: a few other cells per partition (x never among them)."""
    cells = np.array([c for c in range(U.size) if c != X])
    return [rng.choice(cells, 3) for _ in range(PARTITIONS)]


def routed_copies(present: bool) -> list[int]:
    """Every bit of x's cell in the slice files of a routed group."""
    lay = SliceLayout(U, 4)
    slices = {r: estimators.new("density", lay.slice_universe(r), EPS) for r in range(4)}
    for batch in other_clients():
        cells = np.append(batch, X) if present else batch  # x in every partition's batch
        for r, data in lay.route(cells):
            slices[r].update_indices(lay.decode(r, data))
    out = []
    for r, est in slices.items():
        lo, hi = lay.bounds(r)
        if lo <= X < hi:  # the files of the other slices hold other cells only
            back = estimators.restore(encode_slice(est, lay, r))
            out.append(int(back.bits()[X - lo]))  # type: ignore[attr-defined]
    return out


def shard_copies(present: bool) -> list[int]:
    """Every bit of x's cell in the shard files of the per-partition layout."""
    out = []
    for batch in other_clients():
        est = DensityEstimator(U, EPS)
        est.update_indices(np.append(batch, X) if present else batch)
        out.append(int(estimators.restore(encode_shard(est)).bits()[X]))  # type: ignore[attr-defined]
    return out


def advantage(copies: object) -> float:
    """P(vote says present | present) - P(vote says present | absent): majority of the copies."""
    def says_present(present: bool) -> float:
        hits = 0
        for _ in range(TRIALS):
            bits = copies(present)  # type: ignore[operator]
            hits += 2 * sum(bits) >= len(bits) + (len(bits) % 2 == 0)
        return hits / TRIALS
    return says_present(True) - says_present(False)


def test_an_unkeyed_item_leaves_one_bit_in_a_routed_group_and_eight_in_shards() -> None:
    assert len(routed_copies(True)) == 1 and len(shard_copies(True)) == PARTITIONS
    bound = math.tanh(EPS / 2) + 6 * math.sqrt(2 * 0.25 / TRIALS)
    routed = advantage(routed_copies)
    assert routed <= bound, routed
    shards = advantage(shard_copies)
    assert shards > bound, shards  # the same attack sees the per-partition layout's leak
