"""The learned distinguisher: DP-Sniper's recipe with a naive-Bayes score, fixed on a training split.

:func:`_learn` turns the training runs of both worlds (laid out by
:class:`~panstream.audit.features._Layout`) into one event, ``score >= threshold``, chosen for the
bound it promises on the test split; :class:`LearnedEvent` is what reports show of it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from panstream.audit import joint
from panstream.audit.bounds import epsilon_lower_bound, epsilon_point
from panstream.audit.features import _Layout

#: Share of each world's runs the learned distinguisher learns from; the others certify the bound.
#: A leaking cell of a bit table stands out after a few hundred runs, while every run kept for the
#: test split tightens the certified bound: 30 % / 70 % (see docs/threat-model.md, power table).
DEFAULT_TRAIN_FRACTION = 0.3
#: At most this many features enter the learned score (the most significant ones).
MAX_LEARNED_FEATURES = 128
#: Feature selection keeps features whose homogeneity test between the worlds has a p-value below
#: ``SELECTION_LEVEL / number of features``, and pairs (:mod:`panstream.audit.joint`) below
#: ``SELECTION_LEVEL / number of pairs``: a null feature or pair slips in about twice in 10 million
#: audits (z above 6 for a few hundred features, above 7 for tens of thousands of pairs). A cell
#: that leaks enough to matter passes by far: a bit leaking epsilon 0.3 shows z = 10 after 3,000
#: training runs per world, one leaking 1 shows z = 27.
SELECTION_LEVEL = 1e-7
#: Additive smoothing of the per-feature, per-value frequencies (Krichevsky-Trofimov).
SMOOTHING = 0.5


@dataclass(frozen=True)
class LearnedEvent:
    """The event the learned distinguisher fixed on the training split, before any test run.

    The event is ``score >= threshold`` (its complement is tested too), where the score of a run is
    the sum, over the selected features, of the training log-likelihood ratio
    ``ln P[value | B] / P[value | A]`` of the value the run shows.

    Attributes:
        features: the selected features, most significant first (``"dump 1 table cell 32"``, or
            ``"dump 1 table cell 96 xor dump 1 table cell 160"`` for a pair).
        threshold: the score threshold.
        train_runs: runs per world it was learned from.
        test_runs: runs per world its hits were counted on (:attr:`Evidence.runs`).
        train_lower: the bound the event certifies on the training runs themselves: optimistic
            (the event was chosen to look good there), for diagnostics only.
        train_point: the plug-in epsilon of the event on the training runs (optimistic too).
        considered: features the runs were turned into (after dropping constant snapshot bytes).
        pairs: pairs of two-valued features whose XOR was tested too (:mod:`panstream.audit.joint`).
    """

    features: tuple[str, ...]
    threshold: float
    train_runs: int
    test_runs: int
    train_lower: float
    train_point: float
    considered: int
    pairs: int = 0

    def describe(self) -> str:
        """A one-line name for reports: ``learned: dump 1 table cell 32 (+ 1 more)``."""
        if not self.features:
            return "learned: no feature differs between the worlds in the training runs"
        more = f" + {len(self.features) - 3} more" if len(self.features) > 3 else ""
        return "learned: " + ", ".join(self.features[:3]) + more


def _normal_isf(tail: float) -> float:
    """The ``z`` with ``P[N(0,1) > z] = tail`` (bisection on erfc; ``0 < tail < 1``)."""
    lo, hi = -40.0, 40.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if 0.5 * math.erfc(mid / math.sqrt(2.0)) > tail:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class _Event:
    """``score >= threshold`` on the selected features; ``llr[i, v]``: ratio of feature ``i`` at ``v``.

    Feature ``i`` is column ``columns[i]`` of the layout, XOR-ed with column ``partners[i]`` where
    that is not negative (a joint feature, :mod:`panstream.audit.joint`).
    """

    columns: np.ndarray
    partners: np.ndarray
    llr: np.ndarray  # (len(columns), 256): values unseen in training score 0
    threshold: float

    def scores(self, x: np.ndarray) -> np.ndarray:
        """Scores of runs given their selected columns (``(runs, len(columns))`` ``uint8``).

        Prefix sums in column order, so a score is the same float however many columns follow.
        """
        if self.columns.size == 0:
            return np.zeros(len(x))
        return np.cumsum(self.llr[np.arange(self.columns.size), x], axis=1)[:, -1]

    def hits(self, layout: _Layout, runs: Sequence[Sequence[Any]]) -> int:
        """Runs among ``runs`` in which the event occurs."""
        x = joint.xor_values(layout, runs, self.columns, self.partners)
        return int((self.scores(x) >= self.threshold).sum())


def _wilson(f: np.ndarray, n: int, z: float) -> tuple[np.ndarray, np.ndarray]:
    den = 1.0 + z * z / n
    centre = (f + z * z / (2 * n)) / den
    half = z * np.sqrt(f * (1.0 - f) / n + z * z / (4.0 * n * n)) / den
    return np.clip(centre - half, 0.0, 1.0), np.clip(centre + half, 0.0, 1.0)


def _predicted_bound(fa: np.ndarray, fb: np.ndarray, n: int, alpha: float) -> np.ndarray:
    """What :func:`epsilon_lower_bound` would roughly certify for events with these frequencies,
    counted on ``n`` runs per world (Wilson intervals stand in for Clopper-Pearson: vectorized)."""
    z = _normal_isf(alpha / 4)
    a_lo, a_hi = _wilson(fa, n, z)
    b_lo, b_hi = _wilson(fb, n, z)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.maximum.reduce([np.log(b_lo / a_hi), np.log(a_lo / b_hi),
                               np.log((1 - b_hi) / (1 - a_lo)), np.log((1 - a_hi) / (1 - b_lo))])
    return np.maximum(np.nan_to_num(r, nan=0.0, posinf=0.0, neginf=0.0), 0.0)


def _best_threshold(sa: np.ndarray, sb: np.ndarray, n_test: int, alpha: float
                    ) -> tuple[float, tuple[float, float]]:
    """The threshold ``t`` whose event ``score >= t`` promises the largest bound on the test split,
    and that promise as ``(predicted bound, plug-in epsilon)``: when no event promises a positive
    bound, the plug-in estimate breaks the tie (the test split may still certify something)."""
    ts = np.unique(np.concatenate([sa, sb]))
    fa = (sa.size - np.searchsorted(np.sort(sa), ts, side="left")) / sa.size
    fb = (sb.size - np.searchsorted(np.sort(sb), ts, side="left")) / sb.size
    value = _predicted_bound(fa, fb, n_test, alpha)
    with np.errstate(divide="ignore", invalid="ignore"):
        point = np.maximum.reduce([np.log(fb / fa), np.log(fa / fb), np.log((1 - fb) / (1 - fa)),
                                   np.log((1 - fa) / (1 - fb))])
    point = np.nan_to_num(np.maximum(point, 0.0), nan=0.0, posinf=1e6)
    i = int(np.lexsort((point, value))[-1])
    return float(ts[i]), (float(value[i]), float(point[i]))


def _z_and_llr(ca: np.ndarray, cb: np.ndarray, na: int, nb: int) -> tuple[np.ndarray, np.ndarray]:
    """Per feature (row) and value (column) of the count tables ``ca`` and ``cb``: the normal score
    of a G-test of "same law in both worlds" (Wilson-Hilferty, to compare across degrees of freedom;
    ``-inf`` for a constant feature) and the smoothed log-likelihood ratios ``ln P[v | B] / P[v | A]``
    (0 for values never seen)."""
    seen = (ca + cb) > 0
    kinds = seen.sum(axis=1)
    pa = (ca + SMOOTHING) / (na + SMOOTHING * kinds)[:, None]
    pb = (cb + SMOOTHING) / (nb + SMOOTHING * kinds)[:, None]
    llr = np.where(seen, np.log(pb) - np.log(pa), 0.0)
    pooled = (ca + cb) / (na + nb)
    with np.errstate(divide="ignore", invalid="ignore"):
        g = 2.0 * (np.where(ca > 0, ca * np.log(ca / (na * pooled)), 0.0)
                   + np.where(cb > 0, cb * np.log(cb / (nb * pooled)), 0.0)).sum(axis=1)
    dof = np.maximum(kinds - 1, 1).astype(np.float64)
    z = ((np.maximum(g, 0.0) / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / np.sqrt(2 / (9 * dof))
    return np.where(kinds > 1, z, -np.inf), llr


def _learn(layout: _Layout, train_a: Sequence[Sequence[Any]], train_b: Sequence[Sequence[Any]],
           n_test: int, alpha: float, *, pairs: bool = True, target: int | None = None,
           cells: int | None = None, target_bits: joint.TargetBits | None = None
           ) -> tuple[_Event, LearnedEvent]:
    """Fix the event on the training runs: DP-Sniper's recipe with a naive-Bayes score.

    1. Per feature and value, smoothed frequencies in each world and their log ratio.
    2. Keep the features whose G-test of "same law in both worlds" is significant at
       ``SELECTION_LEVEL / features``, so thousands of null cells cannot drown one leaking cell.
    3. With ``pairs``, the same for the XOR of pairs of the other two-valued features
       (:mod:`panstream.audit.joint`; ``target``, ``cells`` and ``target_bits`` choose the pairs of
       a large dump), at ``SELECTION_LEVEL / pairs``.
    4. Of all those (the single most significant feature if none is), at most
       ``MAX_LEARNED_FEATURES``, most significant first: for the ``k`` first (k = 1, 2, 3, 4, 6,
       8, ...), score = sum of the ratios; choose the ``k`` and threshold whose event promises the
       largest bound on ``n_test`` runs.
    """
    na, nb, d, v = len(train_a), len(train_b), layout.n_features, layout.values
    counts = []
    for runs in (train_a, train_b):
        c = np.zeros((d, v), np.int64)
        for x in layout.blocks(runs):
            for level in range(v):
                c[:, level] += np.count_nonzero(x == level, axis=0)
        counts.append(c.astype(np.float64))
    z, llr = _z_and_llr(counts[0], counts[1], na, nb)
    order = np.argsort(-z, kind="stable")
    singles = order[z[order] > _normal_isf(SELECTION_LEVEL / max(d, 1))]
    # candidates: (z, feature, partner or -1, log-likelihood ratios by value)
    found = [(float(z[j]), int(j), -1, llr[j]) for j in singles]
    tested = 0
    if pairs:
        feats, focus = joint.candidates(layout, train_a[0], singles, target=target, cells=cells,
                                        target_bits=target_bits)
        pc = joint.count(layout, train_a, train_b, feats, focus)
        tested = pc.left.size
        if tested:
            ca = np.stack([na - pc.ones_a, pc.ones_a], axis=1).astype(np.float64)
            cb = np.stack([nb - pc.ones_b, pc.ones_b], axis=1).astype(np.float64)
            zp, llrp = _z_and_llr(ca, cb, na, nb)
            for p in np.flatnonzero(zp > _normal_isf(SELECTION_LEVEL / tested)):
                found.append((float(zp[p]), int(pc.left[p]), int(pc.right[p]), llrp[p]))
    found.sort(key=lambda f: -f[0])  # stable: singles before pairs of equal significance
    found = found[:MAX_LEARNED_FEATURES]
    if not found and d and np.isfinite(z[order[0]]):
        found = [(float(z[order[0]]), int(order[0]), -1, llr[order[0]])]
    columns = np.array([f[1] for f in found], np.int64)
    partners = np.array([f[2] for f in found], np.int64)
    table = np.zeros((len(found), 256))
    for i, f in enumerate(found):
        table[i, : f[3].size] = f[3]
    k, threshold = 0, 0.0
    if found:
        rows = np.arange(len(found))
        sums = [np.cumsum(table[rows, joint.xor_values(layout, runs, columns, partners)], axis=1)
                for runs in (train_a, train_b)]
        sizes = sorted({j for j in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)
                        if j <= len(found)} | {len(found)})
        promise = (-1.0, -1.0)
        for j in sizes:
            t, value = _best_threshold(sums[0][:, j - 1], sums[1][:, j - 1], n_test, alpha)
            if value > promise:  # a tie keeps the smaller number of features
                promise, k, threshold = value, j, t
    event = _Event(columns[:k], partners[:k], table[:k], threshold)
    ha, hb = event.hits(layout, train_a), event.hits(layout, train_b)
    n = min(na, nb)
    names = tuple(layout.name(int(c)) if r < 0 else f"{layout.name(int(c))} xor {layout.name(int(r))}"
                  for c, r in zip(event.columns, event.partners, strict=True))
    info = LearnedEvent(names, threshold, n, n_test, epsilon_lower_bound(ha, hb, n, alpha),
                        epsilon_point(ha, hb, n), d, tested)
    return event, info
