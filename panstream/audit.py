"""Subpoena simulation: measure, from leaked states alone, how much they reveal about one person.

Differential privacy promises that for two *neighbouring* streams (world A without a target item,
world B with it, all other traffic identical) and every event E an intruder can test on a dump,

    P[E | B] <= e^epsilon * P[E | A]   and the same with A and B, or E and not-E, swapped.

This module runs a mechanism many times in each world, takes the dumps an intruder would get (a
snapshot file, a memory read between batches), applies distinguishers (events E) and turns the hit
counts into an empirical epsilon **lower bound**: Clopper-Pearson intervals for P[E | A] and
P[E | B] hold simultaneously with probability at least ``1 - alpha`` (Bonferroni over the
distinguishers), and the smallest ratio they allow is an epsilon the mechanism certainly exceeds.
If that bound is above the claimed epsilon, the claim is false (with confidence ``1 - alpha``).

For panstream's table the best distinguisher is the target's own cell: in A it holds a D0 =
Bernoulli(q) draw, in B a D1 = Bernoulli(p) draw, and the larger of ``P[bit=1 | B] / P[bit=1 | A] =
p/q`` and ``P[bit=0 | A] / P[bit=0 | B] = (1-q)/(1-p)`` is ``e^epsilon_state`` exactly (for the
default randomized-response calibration both are). The bound therefore approaches, but with
probability ``1 - alpha`` stays below, ``epsilon_state``.

A broken design need not leak through that cell, though (a biased D0 elsewhere, a second cell
redrawn per arrival, bytes beside the table). Without hand-written distinguishers :func:`audit`
therefore *learns* its event, in the spirit of DP-Sniper (Bichsel, Steffen, Bogunovic, Vechev 2021):
on a training split of the runs it turns each run's dumps into features (every bit of a snapshot,
every element of an array, and what changed between consecutive dumps), selects the features whose
law differs between the worlds, scores a run by the sum of their log-likelihood ratios and fixes the
threshold that promises the largest bound. Only then are the test runs made; the event's hits among
them alone are certified. The event is a function of data independent of the test runs, so the
Clopper-Pearson bound is exactly as valid as for a fixed event. Pointed at broken designs the
harness reports bounds above the claim: see ``tests/state/test_audit.py`` and
``tests/state/test_audit_learned.py``, and the power table in ``docs/threat-model.md``.

Everything here is deterministic except the mechanism's own draws: the neighbouring streams are
fixed, public, and need no random generator.

>>> w = neighbouring_worlds(8, target=3, occurrences=2, background=1, batches=2)
>>> [b.tolist() for b in w.a], [b.tolist() for b in w.b]
([[0, 1, 2, 4], [5, 6, 7]], [[3, 0, 1, 2, 4], [3, 5, 6, 7]])
>>> round(clopper_pearson_upper(0, 100, 0.05), 4), round(clopper_pearson_lower(100, 100, 0.05), 4)
(0.0295, 0.9705)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

import panstream as ps
from panstream import estimators
from panstream.calibration import DEFAULT_CALIBRATION, DEFAULT_MODULUS
from panstream.errors import ConfigurationError
from panstream.release.ledger import PrivacyLedger
from panstream.state.format import DIGEST_SIZE, decode, read_frame
from panstream.universe import Universe

#: A mechanism under audit: given the batches of one world and the batch indices after which the
#: intruder dumps the state, run once from a fresh state and return the dumps.
Runner = Callable[[Sequence[np.ndarray], Sequence[int]], list[Any]]
#: An event an intruder tests on the dumps of one run.
Distinguisher = Callable[[Sequence[Any]], bool]

#: Largest universe ``panstream audit`` accepts: the guarantee is per cell, so small is enough.
MAX_AUDIT_CELLS = 1 << 16


# ---------------------------------------------------------------------- Clopper-Pearson
def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 100_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def beta_cdf(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function ``I_x(a, b)``: the CDF of Beta(a, b) at ``x``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def beta_ppf(q: float, a: float, b: float) -> float:
    """The ``q``-quantile of Beta(a, b), by bisection on :func:`beta_cdf` (to about 1e-16)."""
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if beta_cdf(mid, a, b) < q:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def clopper_pearson_lower(k: int, n: int, alpha: float) -> float:
    """One-sided Clopper-Pearson lower bound on a binomial proportion: ``P[bound > p] <= alpha``."""
    return 0.0 if k <= 0 else beta_ppf(alpha, k, n - k + 1)


def clopper_pearson_upper(k: int, n: int, alpha: float) -> float:
    """One-sided Clopper-Pearson upper bound on a binomial proportion: ``P[bound < p] <= alpha``."""
    return 1.0 if k >= n else beta_ppf(1.0 - alpha, k + 1, n - k)


def _log_ratio(num: float, den: float) -> float:
    if num <= 0.0:
        return -math.inf
    return math.inf if den <= 0.0 else math.log(num / den)


def epsilon_lower_bound(hits_a: int, hits_b: int, trials: int, alpha: float) -> float:
    """Smallest epsilon consistent (at confidence ``1 - alpha``) with the hit counts of one event.

    Two-sided Clopper-Pearson intervals at ``alpha/4`` per tail for ``P[E | A]`` and ``P[E | B]``
    hold together with probability ``>= 1 - alpha``; the bound is the largest of the four
    log-ratios (E and not-E, in both directions) those intervals still allow, or 0.
    """
    t = alpha / 4
    a_lo, a_hi = clopper_pearson_lower(hits_a, trials, t), clopper_pearson_upper(hits_a, trials, t)
    b_lo, b_hi = clopper_pearson_lower(hits_b, trials, t), clopper_pearson_upper(hits_b, trials, t)
    return max(0.0, _log_ratio(b_lo, a_hi), _log_ratio(a_lo, b_hi),
               _log_ratio(1 - b_hi, 1 - a_lo), _log_ratio(1 - a_hi, 1 - b_lo))


def epsilon_point(hits_a: int, hits_b: int, trials: int) -> float:
    """The plug-in estimate of the same four log-ratios (may be infinite; no confidence)."""
    a, b = hits_a / trials, hits_b / trials
    return max(0.0, _log_ratio(b, a), _log_ratio(a, b), _log_ratio(1 - b, 1 - a),
               _log_ratio(1 - a, 1 - b))


# ---------------------------------------------------------------------- neighbouring worlds
@dataclass(frozen=True)
class Worlds:
    """Two neighbouring streams, identical except for the target's arrivals.

    Attributes:
        size: number of cells.
        target: the target's cell.
        occurrences: how often the target arrives in world B (never in A).
        a, b: the batches of world A and world B.
        dumps: batch indices after which the intruder dumps the state.
    """

    size: int
    target: int
    occurrences: int
    a: tuple[np.ndarray, ...]
    b: tuple[np.ndarray, ...]
    dumps: tuple[int, ...]


def neighbouring_worlds(size: int, *, target: int | None = None, occurrences: int = 1,
                        background: int = 2, batches: int = 4, first_batch: int = 0,
                        dumps: Sequence[int] | None = None) -> Worlds:
    """Build worlds A and B over cells ``0..size-1``.

    Other traffic: every cell except the target arrives ``background`` times, in rounds, split into
    ``batches`` batches. World B adds the target ``occurrences`` times, spread evenly over batches
    ``first_batch..batches-1`` and interleaved with the other traffic.

    Args:
        size: cells in the universe (at least 2).
        target: the target cell (default ``size // 2``).
        occurrences: arrivals of the target in world B (at least 1).
        background: arrivals of each other cell (0 for none).
        batches: number of batches (state is only observable between batches).
        first_batch: first batch that may contain the target (for dumps straddling its arrival).
        dumps: batch indices after which to dump (default: after the last batch only).

    Returns:
        The two worlds.

    Raises:
        ValueError: inconsistent arguments.
    """
    target = size // 2 if target is None else target
    dumps = (batches - 1,) if dumps is None else tuple(dumps)
    if size < 2 or not 0 <= target < size or occurrences < 1 or background < 0 or batches < 1:
        msg = "need size >= 2, 0 <= target < size, occurrences >= 1, background >= 0, batches >= 1"
        raise ConfigurationError(msg)
    if not 0 <= first_batch < batches or not dumps or any(not 0 <= d < batches for d in dumps):
        msg = f"first_batch and dumps must be batch indices in 0..{batches - 1}"
        raise ConfigurationError(msg)
    others = np.delete(np.arange(size, dtype=np.int64), target)
    world_a = [np.ascontiguousarray(x) for x in np.array_split(np.tile(others, background), batches)]
    world_b = list(world_a)
    window = batches - first_batch
    for j in range(window):
        k = occurrences // window + (1 if j < occurrences % window else 0)
        if k:
            batch = world_a[first_batch + j]
            at = np.linspace(0, batch.size, k, endpoint=False).astype(np.intp)
            world_b[first_batch + j] = np.insert(batch, at, target)
    return Worlds(size, target, occurrences, tuple(world_a), tuple(world_b), dumps)


# ---------------------------------------------------------------------- the learned distinguisher
#: Share of each world's runs the learned distinguisher learns from; the others certify the bound.
#: A leaking cell of a bit table stands out after a few hundred runs, while every run kept for the
#: test split tightens the certified bound: 30 % / 70 % (see docs/threat-model.md, power table).
DEFAULT_TRAIN_FRACTION = 0.3
#: At most this many features enter the learned score (the most significant ones).
MAX_LEARNED_FEATURES = 128
#: Feature selection keeps features whose homogeneity test between the worlds has a p-value below
#: ``SELECTION_LEVEL / number of features``: a null feature slips in about once in 10 million audits
#: (z above 6 for a few hundred features). A cell that leaks enough to matter passes by far: a bit
#: leaking epsilon 0.3 shows z = 10 after 3,000 training runs per world, one leaking 1 shows z = 27.
SELECTION_LEVEL = 1e-7
#: Additive smoothing of the per-feature, per-value frequencies (Krichevsky-Trofimov).
SMOOTHING = 0.5
#: Bytes of feature matrix materialized at once (training counts, test scoring).
_BLOCK_BYTES = 1 << 25


@dataclass(frozen=True)
class LearnedEvent:
    """The event the learned distinguisher fixed on the training split, before any test run.

    The event is ``score >= threshold`` (its complement is tested too), where the score of a run is
    the sum, over the selected features, of the training log-likelihood ratio
    ``ln P[value | B] / P[value | A]`` of the value the run shows.

    Attributes:
        features: the selected features, most significant first (``"dump 1 table cell 32"``).
        threshold: the score threshold.
        train_runs: runs per world it was learned from.
        test_runs: runs per world its hits were counted on (:attr:`Evidence.runs`).
        train_lower: the bound the event certifies on the training runs themselves: optimistic
            (the event was chosen to look good there), for diagnostics only.
        train_point: the plug-in epsilon of the event on the training runs (optimistic too).
        considered: features the runs were turned into (after dropping constant snapshot bytes).
    """

    features: tuple[str, ...]
    threshold: float
    train_runs: int
    test_runs: int
    train_lower: float
    train_point: float
    considered: int

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


class _Codes:
    """Turns the ``k``-th dump of every run into a row of small integers, fixed on the training runs.

    Bytes (snapshots) are padded or cut to the longest training dump; arrays are quantized: bools and
    integers in 0..255 stay as they are, anything else is mapped to the index of the largest
    training value (or, past 256 distinct values, training quantile) at or below it.
    """

    def __init__(self, k: int, train: Sequence[Any]) -> None:
        self.k = k
        self.is_bytes = all(isinstance(d, (bytes, bytearray, memoryview)) for d in train)
        self.edges: np.ndarray | None = None
        self.frame: tuple[int, int] | None = None
        self.bits_per_cell = 1
        self.shape: tuple[int, ...] = ()
        if self.is_bytes:
            lengths = np.array([len(d) for d in train])
            self.length = int(lengths.max(initial=0))
            self.length_varies = bool((lengths != lengths[0]).any())
            try:
                first = bytes(train[0])
                f = read_frame(first)
                self.frame = (f.head_size, f.payload_size)
                # A payload bit is a cell of a bit table; counters take several bits per cell.
                cells = int(decode(first).params["cells"])
                self.bits_per_cell = max(1, 8 * f.payload_size // max(1, cells))
            except ps.PanstreamError:
                self.frame = None
            return
        if not all(isinstance(d, np.ndarray) for d in train):
            kinds = sorted({type(d).__name__ for d in train})
            msg = (f"the learned distinguisher reads dumps that are NumPy arrays or bytes; dump {k + 1} "
                   f"is {', '.join(kinds)}: pass encode= (one dump -> array or bytes) or "
                   "distinguishers=")
            raise ConfigurationError(msg)
        self.shape = train[0].shape
        if any(d.shape != self.shape for d in train):
            msg = f"dump {k + 1} has different shapes in different runs: the learned distinguisher needs one"
            raise ConfigurationError(msg)
        x = np.stack(train)
        if x.dtype.kind not in "biuf":
            msg = f"dump {k + 1} has dtype {x.dtype}: the learned distinguisher reads numbers"
            raise ConfigurationError(msg)
        small = x.dtype.kind in "iu" and (x.size == 0 or (x.min() >= 0 and x.max() <= 255))
        if x.dtype.kind == "b" or small:
            return
        edges = np.unique(x)
        if edges.size > 256:
            edges = np.unique(np.quantile(x, np.linspace(0.0, 1.0, 256)))
        self.edges = edges

    def matrix(self, dumps: Sequence[Any]) -> np.ndarray:
        """The dumps as a ``(runs, width)`` ``uint8`` matrix (bytes, or codes of array elements)."""
        n = len(dumps)
        if self.is_bytes:
            raw = [bytes(d) for d in dumps]
            if all(len(d) == self.length for d in raw):
                return np.frombuffer(b"".join(raw), np.uint8).reshape(n, self.length)
            out = np.zeros((n, self.length), np.uint8)
            for i, d in enumerate(raw):
                cut = d[: self.length]
                out[i, : len(cut)] = np.frombuffer(cut, np.uint8)
            return out
        x = np.stack([np.asarray(d) for d in dumps]).reshape(n, -1)
        if self.edges is None:
            return np.clip(x, 0, 255).astype(np.uint8)
        idx = np.searchsorted(self.edges, x, side="right") - 1
        return np.clip(idx, 0, 255).astype(np.uint8)

    def lengths(self, dumps: Sequence[Any]) -> np.ndarray:
        """The byte length of each dump as 32 little-endian bits (``(runs, 32)`` ``uint8``)."""
        lens = np.array([len(d) for d in dumps], dtype="<u4").reshape(-1, 1).view(np.uint8)
        return np.unpackbits(lens, axis=1, bitorder="little")

    def byte_name(self, offset: int, bit: int) -> str:
        if self.frame is not None:
            head, table = self.frame
            if head <= offset < head + table:
                position = (offset - head) * 8 + bit
                if self.bits_per_cell == 1:
                    return f"table cell {position}"
                return (f"table cell {position // self.bits_per_cell} bit "
                        f"{position % self.bits_per_cell}")
            if offset >= head + table:
                return f"checksum byte {offset - head - table} bit {bit}"
            return f"head byte {offset} bit {bit}"
        return f"byte {offset} bit {bit}"

    def element_name(self, i: int) -> str:
        if len(self.shape) == 1:
            return f"cell {i}"
        return "[" + ", ".join(str(int(c)) for c in np.unravel_index(i, self.shape)) + "]"


@dataclass(frozen=True)
class _Part:
    """A contiguous block of features: ``kind`` is ``bits`` (bytes k, unpacked), ``length``
    (length of dump k), ``codes`` (array k), ``xor`` (bytes k vs k+1) or ``ne`` (array k vs k+1)."""

    kind: str
    k: int
    cols: np.ndarray  # byte offsets (bits, xor) or element indices (codes, ne); unused for length
    width: int
    values: int = 2  # feature values 0..values-1 seen in training (codes); 2 for the others


class _Layout:
    """How the dumps of one run become one feature vector; fixed on the training runs only.

    Features, per dump: every bit of the bytes that vary among the training dumps (and the length, if
    it varies), or every element of an array; per pair of consecutive dumps of one kind: the same
    bits XORed, or whether each element changed. A change between two dumps of one epoch is what
    reveals an arrival in between, and no per-dump feature shows it.
    """

    def __init__(self, train: Sequence[Sequence[Any]]) -> None:
        m = len(train[0])
        if m == 0 or any(len(r) != m for r in train):
            msg = "the learned distinguisher needs the same number (>= 1) of dumps in every run"
            raise ConfigurationError(msg)
        self.codes = [_Codes(k, [r[k] for r in train]) for k in range(m)]
        mats = [c.matrix([r[c.k] for r in train]) for c in self.codes]
        parts: list[_Part] = []
        varying: list[np.ndarray] = []
        for c, x in zip(self.codes, mats, strict=True):
            if c.is_bytes:
                cols = np.flatnonzero((x != x[:1]).any(axis=0))
                varying.append(cols)
                parts.append(_Part("bits", c.k, cols, 8 * cols.size))
                if c.length_varies:
                    parts.append(_Part("length", c.k, np.arange(0), 32))
            else:
                varying.append(np.arange(0))
                parts.append(_Part("codes", c.k, np.arange(x.shape[1]), x.shape[1],
                                   max(2, int(x.max(initial=0)) + 1)))
        for k in range(m - 1):
            a, b = self.codes[k], self.codes[k + 1]
            if a.is_bytes and b.is_bytes and a.length == b.length:
                cols = np.union1d(varying[k], varying[k + 1])
                parts.append(_Part("xor", k, cols, 8 * cols.size))
            elif not a.is_bytes and not b.is_bytes and a.shape == b.shape:
                parts.append(_Part("ne", k, np.arange(mats[k].shape[1]), mats[k].shape[1]))
        self.parts = parts
        self.starts = np.cumsum([0] + [p.width for p in parts])
        self.n_features = int(self.starts[-1])
        self.values = max([p.values for p in parts], default=2)

    def block(self, runs: Sequence[Sequence[Any]], columns: np.ndarray | None = None) -> np.ndarray:
        """Features of ``runs`` as a ``(len(runs), n)`` ``uint8`` matrix (``columns`` only, if given)."""
        mats: dict[int, np.ndarray] = {}

        def mat(k: int) -> np.ndarray:
            if k not in mats:
                mats[k] = self.codes[k].matrix([r[k] for r in runs])
            return mats[k]

        out, emitted = [], []
        for p, start in zip(self.parts, self.starts[:-1], strict=True):
            if columns is None:
                want = None
            else:
                inside = np.flatnonzero((columns >= start) & (columns < start + p.width))
                if inside.size == 0:
                    continue
                want = columns[inside] - start
                emitted.append(inside)
            if p.kind in ("bits", "xor"):
                # unpack only the bytes that hold a wanted bit
                need = np.arange(p.cols.size) if want is None else np.unique(want // 8)
                byts = mat(p.k)[:, p.cols[need]]
                if p.kind == "xor":
                    byts = byts ^ mat(p.k + 1)[:, p.cols[need]]
                x = np.unpackbits(byts, axis=1, bitorder="little")
                if want is not None:
                    want = np.searchsorted(need, want // 8) * 8 + want % 8
            elif p.kind == "length":
                x = self.codes[p.k].lengths([r[p.k] for r in runs])
            elif p.kind == "codes":
                x = mat(p.k)
            else:
                x = (mat(p.k) != mat(p.k + 1)).view(np.uint8)
            out.append(x if want is None else x[:, want])
        width = self.n_features if columns is None else columns.size
        full = np.zeros((len(runs), width), np.uint8)
        if out and columns is None:
            full = np.concatenate(out, axis=1)
        elif out:
            full[:, np.concatenate(emitted)] = np.concatenate(out, axis=1)
        return full

    def blocks(self, runs: Sequence[Sequence[Any]], columns: np.ndarray | None = None
               ) -> Iterator[np.ndarray]:
        """:meth:`block` over ``runs`` in slices of bounded memory."""
        width = self.n_features if columns is None else columns.size
        step = max(1, _BLOCK_BYTES // max(1, width))
        for i in range(0, len(runs), step):
            yield self.block(runs[i : i + step], columns)

    def name(self, j: int) -> str:
        """A readable name of feature ``j``."""
        i = int(np.searchsorted(self.starts, j, side="right")) - 1
        p, off = self.parts[i], j - int(self.starts[i])
        c = self.codes[p.k]
        if p.kind == "bits":
            return f"dump {p.k + 1} {c.byte_name(int(p.cols[off // 8]), off % 8)}"
        if p.kind == "length":
            return f"dump {p.k + 1} length bit {off}"
        if p.kind == "codes":
            return f"dump {p.k + 1} {c.element_name(off)}"
        what = c.byte_name(int(p.cols[off // 8]), off % 8) if p.kind == "xor" else c.element_name(off)
        return f"{what} changed between dumps {p.k + 1} and {p.k + 2}"


@dataclass(frozen=True)
class _Event:
    """``score >= threshold`` on the selected columns; ``llr[i, v]``: ratio of column ``i`` at ``v``."""

    columns: np.ndarray
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
        return sum(int((self.scores(x) >= self.threshold).sum())
                   for x in layout.blocks(runs, self.columns))


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


def _learn(layout: _Layout, train_a: Sequence[Sequence[Any]], train_b: Sequence[Sequence[Any]],
           n_test: int, alpha: float) -> tuple[_Event, LearnedEvent]:
    """Fix the event on the training runs: DP-Sniper's recipe with a naive-Bayes score.

    1. Per feature and value, smoothed frequencies in each world and their log ratio.
    2. Keep the features whose G-test of "same law in both worlds" is significant at
       ``SELECTION_LEVEL / features`` (the single most significant one if none is), at most
       ``MAX_LEARNED_FEATURES``, so thousands of null cells cannot drown one leaking cell.
    3. For the ``k`` most significant of them (k = 1, 2, 3, 4, 6, 8, ...), score = sum of the ratios;
       choose the ``k`` and threshold whose event promises the largest bound on ``n_test`` runs.
    """
    na, nb, d, v = len(train_a), len(train_b), layout.n_features, layout.values
    counts = []
    for runs in (train_a, train_b):
        c = np.zeros((d, v), np.int64)
        for x in layout.blocks(runs):
            for level in range(v):
                c[:, level] += np.count_nonzero(x == level, axis=0)
        counts.append(c.astype(np.float64))
    ca, cb = counts
    seen = (ca + cb) > 0
    kinds = seen.sum(axis=1)
    pa = (ca + SMOOTHING) / (na + SMOOTHING * kinds)[:, None]
    pb = (cb + SMOOTHING) / (nb + SMOOTHING * kinds)[:, None]
    llr = np.where(seen, np.log(pb) - np.log(pa), 0.0)
    # G-test of homogeneity, turned into a normal score (Wilson-Hilferty) to compare across dofs
    pooled = (ca + cb) / (na + nb)
    with np.errstate(divide="ignore", invalid="ignore"):
        g = 2.0 * (np.where(ca > 0, ca * np.log(ca / (na * pooled)), 0.0)
                   + np.where(cb > 0, cb * np.log(cb / (nb * pooled)), 0.0)).sum(axis=1)
    dof = np.maximum(kinds - 1, 1).astype(np.float64)
    z = ((np.maximum(g, 0.0) / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / np.sqrt(2 / (9 * dof))
    z = np.where(kinds > 1, z, -np.inf)
    order = np.argsort(-z, kind="stable")
    cut = _normal_isf(SELECTION_LEVEL / max(d, 1))
    chosen = order[z[order] > cut][:MAX_LEARNED_FEATURES]
    if chosen.size == 0 and d and np.isfinite(z[order[0]]):
        chosen = order[:1]
    table = np.zeros((chosen.size, 256))
    table[:, :v] = llr[chosen]
    k, threshold = 0, 0.0
    if chosen.size:
        rows = np.arange(chosen.size)
        sums = [np.cumsum(table[rows, np.concatenate(list(layout.blocks(runs, chosen)))], axis=1)
                for runs in (train_a, train_b)]
        sizes = sorted({j for j in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)
                        if j <= chosen.size} | {chosen.size})
        promise = (-1.0, -1.0)
        for j in sizes:
            t, value = _best_threshold(sums[0][:, j - 1], sums[1][:, j - 1], n_test, alpha)
            if value > promise:  # a tie keeps the smaller number of features
                promise, k, threshold = value, j, t
    event = _Event(chosen[:k], table[:k], threshold)
    ha, hb = event.hits(layout, train_a), event.hits(layout, train_b)
    n = min(na, nb)
    info = LearnedEvent(tuple(layout.name(int(j)) for j in event.columns), threshold, n, n_test,
                        epsilon_lower_bound(ha, hb, n, alpha), epsilon_point(ha, hb, n), d)
    return event, info


# ---------------------------------------------------------------------- the harness
@dataclass(frozen=True)
class Evidence:
    """What one distinguisher achieved.

    Attributes:
        name: the event tested.
        hits_a, hits_b: runs of world A and world B in which the event occurred.
        lower: the epsilon lower bound it certifies (Bonferroni-corrected confidence).
        point: the plug-in estimate (no confidence).
        runs: runs per world the hits are counted on: all ``trials`` for a fixed event, the test
            split for the learned one.
    """

    name: str
    hits_a: int
    hits_b: int
    lower: float
    point: float
    runs: int = 0


@dataclass(frozen=True)
class AuditResult:
    """The outcome of one subpoena simulation.

    Attributes:
        scenario: a short description.
        claimed: the epsilon the mechanism claims against this kind of intrusion.
        empirical: the best certified lower bound over the distinguishers.
        confidence: ``1 - alpha``: probability that ``empirical`` is below the true epsilon.
        trials: runs per world.
        evidence: per distinguisher.
        covered: whether the claim is meant to cover this scenario (two dumps of one epoch are not).
        best: the name of the evidence with the largest bound.
        learned: what the learned distinguisher chose on its training split (``None`` if unused).
    """

    scenario: str
    claimed: float
    empirical: float
    confidence: float
    trials: int
    evidence: tuple[Evidence, ...]
    covered: bool = True
    best: str = field(default="")
    learned: LearnedEvent | None = None

    @property
    def exceeded(self) -> bool:
        """The certified lower bound is above the claim: the claim is false for this scenario."""
        return self.empirical > self.claimed

    @property
    def violation(self) -> bool:
        """A claim the design makes is refuted (``exceeded`` on a covered scenario)."""
        return self.covered and self.exceeded

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable dict (infinite bounds as the string ``"inf"``)."""
        d = asdict(self)
        d.update(exceeded=self.exceeded, violation=self.violation, empirical=_json_num(self.empirical))
        for e in d["evidence"]:
            e.update(lower=_json_num(e["lower"]), point=_json_num(e["point"]))
        if d["learned"] is not None:
            d["learned"].update(threshold=_json_num(d["learned"]["threshold"]),
                                train_lower=_json_num(d["learned"]["train_lower"]),
                                train_point=_json_num(d["learned"]["train_point"]))
        return d


def _json_num(x: float) -> float | str:
    return x if math.isfinite(x) else "inf"


def audit(run: Runner, worlds: Worlds, distinguishers: Mapping[str, Distinguisher] | None = None, *,
          trials: int, claimed: float, alpha: float = 1e-6, scenario: str = "",
          covered: bool = True, learn: bool | None = None,
          train_fraction: float = DEFAULT_TRAIN_FRACTION,
          encode: Callable[[Any], Any] | None = None) -> AuditResult:
    """Run ``run`` ``trials`` times per world and certify an epsilon lower bound.

    Without ``distinguishers`` the audit *learns* its event (DP-Sniper style): the first
    ``train_fraction`` of each world's runs are turned into feature vectors (every bit of a snapshot,
    every element of an array, and what changed between consecutive dumps), the features that tell
    the worlds apart are selected and weighted by their log-likelihood ratios, and the threshold on
    the summed score that promises the largest bound is chosen. Only then are the remaining runs
    made, and the event's hits among them alone give the Clopper-Pearson bound. The event is a fixed
    function of data independent of the test runs, so the bound is exactly as valid as for a
    hand-written event: whichever cell or byte leaks, nobody has to name it.

    Args:
        run: the mechanism (see :data:`Runner`); each call must start from a fresh state, so runs are
            independent and identically distributed.
        worlds: the neighbouring streams.
        distinguishers: named fixed events on the dumps of one run, counted on all runs.
        trials: runs per world.
        claimed: the epsilon the mechanism claims.
        alpha: total error probability of the bound. Split evenly over the events; with both learned
            and fixed events, half goes to the learned one and half is split over the fixed ones.
        scenario: a description for reports.
        covered: whether ``claimed`` is meant to hold in this scenario.
        learn: use the learned distinguisher (default: exactly when ``distinguishers`` is empty).
        train_fraction: share of each world's runs the learned distinguisher learns from.
        encode: for the learned distinguisher, turns one dump into a NumPy array or ``bytes`` (for
            dumps of another type, say a set); dumps must be arrays of one shape, or bytes, otherwise.

    Returns:
        An :class:`AuditResult`; ``empirical`` is below the true epsilon with probability
        ``>= 1 - alpha``.

    Raises:
        ConfigurationError: no event to test, fewer than one trial (or fewer than 2 with learning),
            ``alpha`` or ``train_fraction`` outside (0, 1), or dumps the learned distinguisher cannot
            read.

    Example:
        >>> w = neighbouring_worlds(16, background=0)
        >>> def leaky(batches, dumps):  # keeps the exact set of cells seen, as a bit table
        ...     bits = np.zeros(16, np.uint8)
        ...     bits[np.concatenate(batches)] = 1
        ...     return [bits]
        >>> r = audit(leaky, w, trials=200, claimed=1.0)
        >>> r.best, r.exceeded
        ('learned: dump 1 cell 8', True)
    """
    fixed = dict(distinguishers) if distinguishers else {}
    learning = not fixed if learn is None else learn
    if not (fixed or learning) or trials < 1 or not 0 < alpha < 1 or not 0 < train_fraction < 1:
        msg = ("audit needs at least one distinguisher (or learn=True), trials >= 1, 0 < alpha < 1 "
               "and 0 < train_fraction < 1")
        raise ConfigurationError(msg)
    n_train = min(max(round(trials * train_fraction), 1), trials - 1) if learning else 0
    if learning and trials < 2:
        raise ConfigurationError("the learned distinguisher needs trials >= 2 (training and test runs)")
    alpha_learned = (alpha / 2 if fixed else alpha) if learning else 0.0
    alpha_fixed = (alpha - alpha_learned) / len(fixed) if fixed else 0.0
    names = list(fixed)
    hits = {w: dict.fromkeys(names, 0) for w in ("a", "b")}
    batches = {"a": worlds.a, "b": worlds.b}

    def once(w: str) -> list[Any]:
        dumps = run(batches[w], worlds.dumps)
        for name in names:
            hits[w][name] += bool(fixed[name](dumps))
        if not learning:
            return []
        return [_keep(encode(d) if encode is not None else d) for d in dumps]

    learned: LearnedEvent | None = None
    test_hits = {"a": 0, "b": 0}
    if learning:
        # Training runs first; the event is fixed before a single test run exists.
        train = {w: [once(w) for _ in range(n_train)] for w in ("a", "b")}
        layout = _Layout(train["a"] + train["b"])
        event, learned = _learn(layout, train["a"], train["b"], trials - n_train, alpha_learned)
        del train
        chunk = max(64, min(4096, _BLOCK_BYTES // max(1, layout.n_features)))
        for w in ("a", "b"):
            todo = trials - n_train
            while todo:
                runs = [once(w) for _ in range(min(chunk, todo))]
                todo -= len(runs)
                test_hits[w] += event.hits(layout, runs)
    else:
        for w in ("a", "b"):
            for _ in range(trials):
                once(w)
    evidence = [Evidence(n, hits["a"][n], hits["b"][n],
                         epsilon_lower_bound(hits["a"][n], hits["b"][n], trials, alpha_fixed),
                         epsilon_point(hits["a"][n], hits["b"][n], trials), trials) for n in names]
    if learned is not None:
        n_test = learned.test_runs
        evidence.append(Evidence(learned.describe(), test_hits["a"], test_hits["b"],
                                 epsilon_lower_bound(test_hits["a"], test_hits["b"], n_test,
                                                     alpha_learned),
                                 epsilon_point(test_hits["a"], test_hits["b"], n_test), n_test))
    best = max(evidence, key=lambda e: e.lower)
    return AuditResult(scenario, claimed, best.lower, 1 - alpha, trials, tuple(evidence), covered,
                       best.name, learned)


def _keep(dump: Any) -> Any:
    """A private copy of a dump the learned distinguisher stores (runners may reuse buffers)."""
    if isinstance(dump, (bytearray, memoryview)):
        return bytes(dump)
    if isinstance(dump, np.ndarray):
        return dump.copy()
    return dump


# ---------------------------------------------------------------------- panstream's estimator
def estimator_runner(universe: Universe | str, epsilon: float = 1.0,
                     calibration: str = DEFAULT_CALIBRATION, *,
                     rotate_after: Sequence[int] = (), estimator: str = "density",
                     modulus: int = DEFAULT_MODULUS) -> Runner:
    """The real estimator as a :data:`Runner`: fresh state per run, dumps are ``snapshot()`` bytes.

    Args:
        universe, epsilon, calibration: as for :class:`~panstream.DensityEstimator`.
        rotate_after: batch indices after which the operator rotates the epoch (after the dump
            taken at that index, i.e. an announced intrusion).
        estimator, modulus: the family (``"density"`` or ``"frequency"``, whose counters count
            modulo ``modulus``).
    """
    u = Universe.parse(universe) if isinstance(universe, str) else universe

    def run(batches: Sequence[np.ndarray], dumps: Sequence[int]) -> list[Any]:
        # The ledger's epoch is a random label, independent of the stream by construction; it is
        # fixed here so that the test "non-table bytes differ from world A" compares exactly.
        est = estimators.new(estimator, u, epsilon, calibration=calibration, modulus=modulus,
                             ledger=PrivacyLedger(epoch="audit"))
        out: list[Any] = []
        for i, batch in enumerate(batches):
            est.update(batch.copy())  # update() wipes the array it is handed
            if i in dumps:
                out.append(est.snapshot())
            if i in rotate_after:
                est.rotate()
                est.ledger.epoch = "audit"  # the new epoch's random label, fixed as above
        return out

    return run


def cell_bit(dump: bytes, cell: int) -> int:
    """The bit of ``cell`` in a snapshot, read at the offset ``docs/snapshot-format.md`` gives."""
    frame = read_frame(dump)
    return (dump[frame.head_size + cell // 8] >> (cell % 8)) & 1


def non_table_bytes(dump: bytes) -> bytes:
    """Every byte of a snapshot except the table and its checksum (which is a function of them)."""
    frame = read_frame(dump)
    return dump[: frame.head_size] + dump[frame.head_size + frame.payload_size + DIGEST_SIZE :]


def snapshot_distinguishers(target: int, dumps: int, reference: Sequence[bytes]
                            ) -> dict[str, Distinguisher]:
    """The intruder's tests on snapshot dumps.

    * ``target bit of dump k is 1``: the optimal test against one dump.
    * ``target bit changed between dumps k and k+1``: the optimal test against two dumps.
    * ``non-table bytes differ from world A``: catches anything stored besides the table
      (``reference`` is the dumps of one world-A run).
    """
    def bit_is_one(k: int) -> Distinguisher:
        return lambda d: cell_bit(d[k], target) == 1

    def bit_changed(k: int) -> Distinguisher:
        return lambda d: cell_bit(d[k], target) != cell_bit(d[k + 1], target)

    tests = {f"target bit of dump {k + 1} is 1": bit_is_one(k) for k in range(dumps)}
    for k in range(dumps - 1):
        tests[f"target bit changed between dumps {k + 1} and {k + 2}"] = bit_changed(k)
    tests["non-table bytes differ from world A"] = other_bytes_differ(reference)
    return tests


def other_bytes_differ(reference: Sequence[bytes]) -> Distinguisher:
    """The event "some byte outside the table differs from the world-A run ``reference``": it
    catches anything a snapshot stores beside its table."""
    refs = [non_table_bytes(r) for r in reference]
    return lambda d: any(non_table_bytes(x) != r for x, r in zip(d, refs, strict=True))


def counter_distinguishers(target: int, dumps: int, reference: Sequence[bytes], modulus: int
                           ) -> dict[str, Distinguisher]:
    """The intruder's tests on frequency snapshots (counters modulo ``modulus``).

    * ``target counter of dump k is j`` for every value j: together they hold the optimal test
      against one dump (the counter's law is D shifted by the target's count);
    * ``target counter moved by s between dumps k and k+1``: what two dumps of one epoch give away
      (the count in between, modulo k);
    * ``non-table bytes differ from world A``, as for :func:`snapshot_distinguishers`.
    """
    from panstream.estimators.frequency import snapshot_counter

    def value_is(k: int, j: int) -> Distinguisher:
        return lambda d: snapshot_counter(d[k], target) == j

    def moved_by(k: int, step: int) -> Distinguisher:
        return lambda d: (snapshot_counter(d[k + 1], target)
                          - snapshot_counter(d[k], target)) % modulus == step

    tests = {f"target counter of dump {k + 1} is {j}": value_is(k, j)
             for k in range(dumps) for j in range(modulus)}
    for k in range(dumps - 1):
        for step in range(modulus):
            tests[f"target counter moved by {step} between dumps {k + 1} and {k + 2}"] = \
                moved_by(k, step)
    tests["non-table bytes differ from world A"] = other_bytes_differ(reference)
    return tests


@dataclass(frozen=True)
class Scenario:
    """One intrusion pattern of the standard audit.

    Attributes:
        name: description.
        occurrences: arrivals of the target in world B.
        dumps: batch indices after which the state is dumped.
        first_batch: first batch the target may arrive in.
        rotate_after: batch indices after which the epoch is rotated.
        covered: whether the single-intrusion guarantee is meant to hold.
    """

    name: str
    occurrences: int
    dumps: tuple[int, ...] = (3,)
    first_batch: int = 0
    rotate_after: tuple[int, ...] = ()
    covered: bool = True


def standard_scenarios(many: int = 16) -> tuple[Scenario, ...]:
    """The scenarios ``panstream audit`` runs (4 batches each).

    1. one dump, target arrives once; 2. one dump, target arrives ``many`` times, interleaved;
    3. two dumps straddling the target's arrival, rotation after the first (covered: the second
       epoch is independent of the dumped one); 4. the same without rotation: *not* covered, shown
       to document what two intrusions of one epoch reveal.
    """
    return (
        Scenario("one dump, target arrives once", 1),
        Scenario(f"one dump, target arrives {many} times", many),
        Scenario("two dumps around the target's arrivals, rotation after the first", many,
                 dumps=(0, 3), first_batch=1, rotate_after=(0,)),
        Scenario("two dumps around the target's arrivals, same epoch (not covered)", many,
                 dumps=(0, 3), first_batch=1, covered=False),
    )


#: What ``audit_estimator`` (and ``panstream audit --distinguisher``) tests the dumps with.
DISTINGUISHERS = ("learned", "classic", "both")


def audit_estimator(universe: Universe | str = "range:64", epsilon: float = 1.0,
                    calibration: str = DEFAULT_CALIBRATION, *, trials: int = 10_000,
                    alpha: float = 1e-6, scenarios: Sequence[Scenario] | None = None,
                    background: int = 2, distinguisher: str = "learned",
                    train_fraction: float = DEFAULT_TRAIN_FRACTION, estimator: str = "density",
                    modulus: int = DEFAULT_MODULUS) -> list[AuditResult]:
    """Subpoena-simulate panstream's estimator; the claim audited is its realized ``epsilon_state``.

    Args:
        universe: a small public universe (the guarantee is per cell; at most 2**16 cells here).
        epsilon, calibration: estimator parameters.
        estimator, modulus: the family audited (``"frequency"``: counters modulo ``modulus``;
            its classic tests are :func:`counter_distinguishers`).
        trials: runs per world per scenario.
        alpha: error probability of each scenario's bound.
        scenarios: default :func:`standard_scenarios`.
        background: arrivals of each non-target cell.
        distinguisher: ``"learned"`` (default: learned on a training split of the runs, see
            :func:`audit`), ``"classic"`` (the fixed tests of :func:`snapshot_distinguishers` on all
            runs) or ``"both"`` (alpha split in half between them).
        train_fraction: share of the runs the learned distinguisher learns from.

    Returns:
        One :class:`AuditResult` per scenario.

    Raises:
        ConfigurationError: universe too large, or invalid estimator or audit parameters.

    Example:
        >>> r = audit_estimator("range:16", trials=300, scenarios=standard_scenarios()[:1])[0]
        >>> r.empirical < r.claimed
        True
    """
    u = Universe.parse(universe) if isinstance(universe, str) else universe
    if u.size > MAX_AUDIT_CELLS:
        msg = (f"audit runs the estimator many times; {u.spec} has {u.size} cells, at most "
               f"{MAX_AUDIT_CELLS} are allowed: use a small universe such as range:64 (the "
               "guarantee is per cell, so the table size does not change it)")
        raise ConfigurationError(msg)
    if u.size < 2:
        raise ConfigurationError("audit needs a universe of at least 2 cells")
    if distinguisher not in DISTINGUISHERS:
        msg = f"distinguisher must be one of {', '.join(DISTINGUISHERS)}, got {distinguisher!r}"
        raise ConfigurationError(msg)
    claimed = estimators.state_epsilon(estimator, epsilon, calibration=calibration,
                                       modulus=modulus)
    results = []
    for sc in scenarios if scenarios is not None else standard_scenarios():
        worlds = neighbouring_worlds(u.size, occurrences=sc.occurrences, background=background,
                                     batches=4, first_batch=sc.first_batch, dumps=sc.dumps)
        run = estimator_runner(u, epsilon, calibration, rotate_after=sc.rotate_after,
                               estimator=estimator, modulus=modulus)
        tests = None
        if distinguisher != "learned":
            reference = run(worlds.a, worlds.dumps)
            tests = (counter_distinguishers(worlds.target, len(sc.dumps), reference, modulus)
                     if estimator == "frequency" else
                     snapshot_distinguishers(worlds.target, len(sc.dumps), reference))
        results.append(audit(run, worlds, tests, trials=trials, claimed=claimed, alpha=alpha,
                             scenario=sc.name, covered=sc.covered,
                             learn=distinguisher != "classic", train_fraction=train_fraction))
    return results
