"""Joint features: pairs of bits whose XOR tells the worlds apart when neither bit does alone.

A design can hide a leak from every per-bit test: a journal of the cells touched, stored XOR-ed
with a one-time pad that is kept beside it, makes every bit a fair coin in both worlds, while the
pair (journal bit, pad bit) of the target spells out whether it arrived. The learned distinguisher
therefore also tests the XOR of pairs of two-valued features (bits of a snapshot, elements of a 0/1
array; see :meth:`~panstream.audit.features._Layout.binary`):

* **all pairs** when there are at most :data:`MAX_PAIR_CANDIDATES` such features (a 64-cell
  snapshot has 64 table bits per dump; a table three times that size, 192);
* otherwise the pairs that involve one of the **target's bits** (every other feature paired with
  each of them), which a family describes with a :data:`TargetBits` function; without one, the
  target's cell modulo the universe size in every part of the dump (``_Layout.aligned``).

Pair counts come from one matrix product per world (``X^T X`` over the training runs), so testing
tens of thousands of pairs costs a fraction of a second. Pairs are formed only among features that
were not selected on their own: a pair with a leaking bit inherits its leak, and would only repeat
it in the score. Higher-order joints (three bits XOR-ed together) are not tested.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from panstream.audit.features import _BLOCK_BYTES, _Layout

#: A family's answer to "where are the bits of cell ``target`` in this dump?": given one dump (bytes
#: or the array the learner reads) and the target cell, the positions of that cell's bits: bit
#: offsets ``8 * byte + bit`` (least significant bit first) into bytes, or flat element indices of an
#: array. Used to choose pairs when a dump has too many bits to test every pair.
TargetBits = Callable[[Any, int], Sequence[int]]

#: Up to this many two-valued features, every pair is tested (about half a million pairs);
#: beyond, only pairs with one of the target's bits.
MAX_PAIR_CANDIDATES = 1024
#: Columns converted to floating point at once when counting pairs.
_COLUMN_SLICE = 4096


@dataclass(frozen=True)
class PairCounts:
    """Pairs of features and, per world, in how many training runs their XOR was 1.

    Attributes:
        left, right: feature indices of each pair (``left < right`` where both are candidates).
        ones_a, ones_b: training runs of world A and B in which ``left XOR right`` is 1.
    """

    left: np.ndarray
    right: np.ndarray
    ones_a: np.ndarray
    ones_b: np.ndarray


def candidates(layout: _Layout, first_run: Sequence[Any], exclude: np.ndarray, *,
               target: int | None, cells: int | None,
               target_bits: TargetBits | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """The features pairs are formed from, and (when they are too many for all pairs) which of them
    are the target's bits: ``(features, focus)``, ``focus`` a boolean mask or ``None`` for all pairs.

    ``exclude``: features already selected on their own. Without a target (``target`` or ``cells``
    ``None``) and beyond :data:`MAX_PAIR_CANDIDATES`, no pairs are tested.
    """
    feats, dumps, pos = layout.binary()
    keep = ~np.isin(feats, exclude)
    feats, dumps, pos = feats[keep], dumps[keep], pos[keep]
    if feats.size <= MAX_PAIR_CANDIDATES:
        return feats, None
    if target is None or cells is None:
        return feats[:0], None
    focus = np.zeros(feats.size, bool)
    for k in np.unique(dumps):
        here = dumps == k
        if target_bits is not None:
            focus[here] = np.isin(pos[here], np.asarray(target_bits(first_run[int(k)], target)))
        else:
            focus[here] = layout.aligned(int(k), pos[here], target, cells)
    return feats, focus


def count(layout: _Layout, runs_a: Sequence[Sequence[Any]], runs_b: Sequence[Sequence[Any]],
          feats: np.ndarray, focus: np.ndarray | None) -> PairCounts:
    """XOR counts of the pairs of ``feats`` (all pairs, or those with a ``focus`` feature) in the
    training runs of each world: ``ones(i) + ones(j) - 2 * both(i, j)``, from ``X^T X``."""
    m = feats.size
    if m < 2 or (focus is not None and not focus.any()):
        empty = np.arange(0)
        return PairCounts(empty, empty, empty, empty)
    rows = np.arange(m) if focus is None else np.flatnonzero(focus)
    ones = []
    for runs in (runs_a, runs_b):
        s = np.zeros(m)
        both = np.zeros((rows.size, m))
        # Small blocks: selecting tens of thousands of columns copies a block a few times over.
        for x in layout.blocks(runs, feats, budget=_BLOCK_BYTES // 8):
            # float32 products are exact: a block's counts stay far below 2^24. Columns go in
            # slices so a dump of 2^16 bits never needs a float copy of the whole block.
            left = x[:, rows].astype(np.float32).T
            for lo in range(0, m, _COLUMN_SLICE):
                xf = x[:, lo : lo + _COLUMN_SLICE].astype(np.float32)
                s[lo : lo + _COLUMN_SLICE] += xf.sum(axis=0)
                both[:, lo : lo + _COLUMN_SLICE] += left @ xf
        ones.append(s[rows][:, None] + s[None, :] - 2.0 * both)
    r, c = np.nonzero(np.ones((rows.size, m), bool))
    i, j = rows[r], c
    # a pair of two focus features appears twice: keep it once
    keep = i < j if focus is None else (i != j) & ~(focus[j] & (j < i))
    r, c, i, j = r[keep], c[keep], i[keep], j[keep]
    left, right = np.minimum(i, j), np.maximum(i, j)
    return PairCounts(feats[left], feats[right], np.rint(ones[0][r, c]).astype(np.int64),
                      np.rint(ones[1][r, c]).astype(np.int64))


def xor_values(layout: _Layout, runs: Sequence[Sequence[Any]], columns: np.ndarray,
               partners: np.ndarray) -> np.ndarray:
    """Values of selected features on ``runs``: feature ``columns[i]`` alone where
    ``partners[i] < 0``, else ``columns[i] XOR partners[i]``. A ``(runs, len(columns))`` matrix."""
    if columns.size == 0:
        return np.zeros((len(runs), 0), np.uint8)
    base = np.unique(np.concatenate([columns, partners[partners >= 0]]))
    at = np.searchsorted(base, columns)
    paired = np.flatnonzero(partners >= 0)
    other = np.searchsorted(base, partners[paired])
    out = []
    for x in layout.blocks(runs, base):
        v = x[:, at]
        v[:, paired] ^= x[:, other]
        out.append(v)
    return np.concatenate(out, axis=0) if out else np.zeros((0, columns.size), np.uint8)
