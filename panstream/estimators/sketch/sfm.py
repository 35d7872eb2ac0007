"""Sketch-Flip-Merge, the pure parts: the grid, the estimator, merge and Presto's format.

Sketch-Flip-Merge (Hehir, Ting and Cormode, "Sketch-Flip-Merge: Mergeable Sketches for Private
Distinct Counting", ICML 2023, arXiv 2302.02056; shipped as Presto's ``SfmSketch`` and Velox's
``SfmSketch.h``) keeps a grid of ``B`` buckets x ``P`` levels of bits. This module reproduces
Presto's behaviour (read from its source, written anew here) so that panstream's sketches and
Presto's can be merged, counted and read by either side:

* **hashing** is apart (issue 36): Presto's Murmur3 in :mod:`panstream.estimators.sketch.murmur3`,
  which hash a grid uses and the bytes an item becomes in
  :mod:`panstream.estimators.sketch.hashing` (their names still import from here);
* **the grid** (:func:`bucket_level`, :class:`SketchGrid`): the bucket is the hash's top
  ``log2 B`` bits, the level its number of trailing zeros (a 1 placed just below the bucket bits
  caps it at ``64 - log2 B``), capped at ``P - 1``; the bit of (bucket, level) is
  ``level * B + bucket``;
* **the estimator** (:func:`cardinality`, :func:`mple`): Presto's maximum pseudo-likelihood estimate
  by Newton's method. The pseudo-likelihood's terms depend only on a bit's level and value, so the
  per-level counts of ones are sufficient: the estimate is computed from ``P`` numbers, which is
  what a release adds noise to. :func:`mple` also gives the standard error from the Fisher
  information of the pseudo-likelihood;
* **merge** (:func:`merge_flip_probability`, :func:`merge_probabilities`): Presto's randomized merge
  (Theorem 4.8 of the paper);
* **interop** (:func:`to_presto`, :func:`from_presto`): Presto's serialized ``SfmSketch`` (format
  tag 7), byte for byte.

Nothing here draws randomness or keeps state: :mod:`panstream.estimators.sketch.estimator` does.

>>> hex(hash64_ints(np.array([0], dtype=np.int64))[0])   # Murmur3Hash128.hash64(0L)
'0x28df63b7cc57c3cb'
>>> bucket_level(np.array([5 << 52], dtype=np.uint64), 12, 24)
(array([5]), array([23]))
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from panstream.errors import ConfigurationError, StateError, UniverseError
# An item's bytes and hash are hashing's and murmur3's; the names below were this module's before
# issue 36 and still import from here.
from panstream.estimators.sketch.hashing import (
    DEFAULT_HASH,
    _hash_ipv4_text,
    _hash_ipv6_text,
    canonical_ip,
    canonical_item,
    cells_of_tokens,
    check_grid,
    distinct_canonical,
    hash_blobs,
    hash_items,
    resolve,
)
from panstream.estimators.sketch.murmur3 import (
    hash64_bytes,
    hash64_ints,
    hash64_ipv4_text,
    hash64_text_words,
    ipv4_text_words,
    murmur3_x64_128,
)
from panstream.estimators.sketch.xxh64 import xxh64_ints
from panstream.inputs.ipv6 import token_keys
from panstream.universe import IndexResult, Universe, refuse_bare_item
from panstream.universe.addresses import AddressKeys

__all__ = ["DEFAULT_BUCKETS", "DEFAULT_LEVELS", "FORMAT_TAG", "ITEM_KINDS", "PrestoSketch",
           "SketchGrid", "Fit", "bucket_level", "canonical_ip", "canonical_item", "cardinality",
           "cells_of_tokens", "distinct_canonical", "from_presto", "hash64_bytes", "hash64_ints",
           "hash64_ipv4_text", "hash64_text_words", "hash_items", "ipv4_text_words",
           "merge_flip_probability",
           "merge_probabilities", "mple", "murmur3_x64_128", "register_items", "to_presto"]

#: Presto's defaults: 4096 buckets x 24 levels (98,304 bits, 12 KiB).
DEFAULT_BUCKETS = 4096
DEFAULT_LEVELS = 24
#: The first byte of Presto's serialized SfmSketch.
FORMAT_TAG = 7
#: How a grid reads items: ``ip`` (IPv4/IPv6 addresses, written one canonical way first) or ``id``
#: (any identifier: ``int`` as a Presto ``bigint``, text as UTF-8 ``varchar``, ``bytes`` as is).
ITEM_KINDS = ("ip", "id")
#: Presto's cap on Newton iterations.
MAX_ITERATIONS = 1000

_M64 = (1 << 64) - 1
_U = np.uint64


# ---------------------------------------------------------------------- the grid
def index_bits(buckets: int) -> int:
    """``log2(buckets)``, checking Presto's limits (a power of two, 2 to 2**16 here)."""
    if isinstance(buckets, bool) or not isinstance(buckets, int) or buckets < 2 \
            or buckets & (buckets - 1) or buckets > 1 << 16:
        msg = f"buckets must be a power of two from 2 to 65536 (Presto's default 4096), got {buckets!r}"
        raise ConfigurationError(msg)
    return buckets.bit_length() - 1


def check_levels(levels: int, bits: int) -> int:
    """``levels`` if it is a valid precision for ``bits`` index bits (Presto: ``1..64 - bits``)."""
    if isinstance(levels, bool) or not isinstance(levels, int) or not 1 <= levels <= 64 - bits:
        msg = f"levels must be an integer from 1 to {64 - bits} (Presto's default 24), got {levels!r}"
        raise ConfigurationError(msg)
    return levels


def bucket_level(h: np.ndarray, bits: int, levels: int) -> tuple[np.ndarray, np.ndarray]:
    """Presto's ``computeIndex`` and capped ``numberOfTrailingZeros`` of ``uint64`` hashes ``h``:
    the bucket is the top ``bits`` bits, the level the trailing zeros of ``h`` with a 1 forced at
    bit ``64 - bits`` (so at most ``64 - bits``), capped at ``levels - 1``."""
    h = np.asarray(h, dtype=_U)
    bucket = (h >> _U(64 - bits)).astype(np.intp)
    level = trailing_zeros(h, bits)
    np.minimum(level, levels - 1, out=level)
    return bucket, level


def trailing_zeros(h: np.ndarray, bits: int) -> np.ndarray:
    """Presto's ``numberOfTrailingZeros(hash, indexBitLength)``: the trailing zeros of ``h`` with a
    1 placed at bit ``64 - bits`` (so at most ``64 - bits``), as ``intp``.

    The lowest set bit ``2**k`` times a de Bruijn constant has ``k``'s own pattern in its top six
    bits, which a 64-entry table names (vectorized, exact for every ``k``).

    >>> trailing_zeros(np.array([1, 8, 0, 1 << 40], dtype=np.uint64), 12).tolist()
    [0, 3, 52, 40]
    """
    v = np.asarray(h, dtype=_U) | _U(1 << (64 - bits))
    low = np.negative(v)
    low &= v  # the lowest set bit, a power of two
    low *= _DEBRUIJN
    low >>= _U(58)
    out = np.take(_DEBRUIJN_TABLE, low.view(np.int64))
    v.fill(0)
    low.fill(0)
    return out


_DEBRUIJN = _U(0x022FDD63CC95386D)
_DEBRUIJN_TABLE = np.zeros(64, dtype=np.intp)
for _k in range(64):
    _DEBRUIJN_TABLE[((1 << _k) * 0x022FDD63CC95386D & _M64) >> 58] = _k
del _k


#: Grids a feature above the sketch defines, by their item kind (``ip-country``: one grid per
#: country, :mod:`panstream.country`): items -> ``make(buckets, levels, hashing)``. Registered
#: where the grid is defined (:func:`register_items`), so the sketch names nothing above it.
_GRIDS: dict[str, Callable[[int, int, str | None], SketchGrid]] = {}


def register_items(items: str, make: Callable[[int, int, str | None], SketchGrid]) -> None:
    """Let :meth:`SketchGrid.parse_spec` build ``sketch:BxP:<items>`` grids with ``make``.

    Raises:
        ValueError: ``items`` is a built-in item kind or already registered to another maker.
    """
    if items in ITEM_KINDS or _GRIDS.get(items, make) is not make:
        msg = f"sketch items {items!r} are already defined"
        raise ValueError(msg)
    _GRIDS[items] = make


class SketchGrid(Universe):
    """The cells of a Sketch-Flip-Merge grid, as a :class:`~panstream.universe.Universe`: any item
    maps to the bit ``level * buckets + bucket`` of its Presto hash. Spec
    ``sketch:4096x24:ip`` (buckets x levels : item kind); ``size`` is ``buckets * levels``.

    Used as a universe, the grid lets everything that maps items to cells (``update``, the log
    parser, the ingest loop) feed a sketch unchanged. Items are never outside a grid: every
    well-formed item has a cell.

    >>> g = SketchGrid(4096, 24, "ip")
    >>> g.spec, g.size, g.indices(["10.0.0.1", "::ffff:10.0.0.1", "junk"]).malformed
    ('sketch:4096x24:ip', 98304, 1)

    ``hashing`` is the 64-bit hash (:mod:`panstream.estimators.sketch.hashing`): ``murmur3`` (Presto's Java
    ``SfmSketch.add``, the default, no spec suffix) or Presto SQL's ``xxhash64-varchar`` /
    ``xxhash64-bigint`` (spec ``sketch:4096x24:ip:xxhash64-varchar``).
    """

    __slots__ = ("bits", "buckets", "hashing", "items", "levels")

    def __init__(self, buckets: int = DEFAULT_BUCKETS, levels: int = DEFAULT_LEVELS,
                 items: str = "ip", hashing: str | None = None) -> None:
        bits = index_bits(buckets)
        check_levels(levels, bits)
        if items not in ITEM_KINDS:
            msg = f"sketch items must be one of {', '.join(ITEM_KINDS)}, got {items!r}"
            raise ConfigurationError(msg)
        hashing = resolve(hashing, items)
        check_grid(hashing, levels)
        suffix = "" if hashing == DEFAULT_HASH else f":{hashing}"
        super().__init__("sketch", buckets * levels, f"sketch:{buckets}x{levels}:{items}{suffix}")  # type: ignore[arg-type]
        self.buckets, self.levels, self.items, self.bits = buckets, levels, items, bits
        self.hashing = hashing

    @classmethod
    def parse_spec(cls, spec: str) -> SketchGrid:
        """The grid of a ``sketch:BxP:items`` spec.

        Raises:
            UniverseError: not such a spec.
        """
        try:
            kind, dims, items, *hashing = spec.split(":")
            b, p = dims.split("x")
            if kind != "sketch" or len(hashing) > 1:
                raise ValueError
            make = _GRIDS.get(items)
            if make is not None:  # a grid a feature registered (ip-country: panstream.country)
                return make(int(b), int(p), hashing[0] if hashing else None)
            grid = cls(int(b), int(p), items, hashing[0] if hashing else None)
        except (ValueError, ConfigurationError) as exc:
            msg = (f"invalid sketch grid spec {spec!r} (expected e.g. sketch:4096x24:ip, or "
                   f"sketch:4096x24:ip:presto-sql): {exc}")
            raise UniverseError(msg) from None
        return grid

    @property
    def reads_addresses(self) -> bool:
        """An ``:ip`` grid reads client addresses in the one normalization of every address
        universe (:mod:`panstream.universe.addresses`); an ``:id`` grid reads any identifier."""
        return self.items == "ip"

    @property
    def hashes_address_text(self) -> bool:
        """The grid hashes an IPv6 client's RFC 5952 text, not its key: the readers may hand
        over, for a token the log already wrote as that text, the text alone (key 0; issue 38,
        :func:`panstream.inputs.ipv6.address_lines`' ``text_only``)."""
        return self.items == "ip"

    def address_cells(self, keys: AddressKeys) -> IndexResult:
        """Cells of canonical address items: each is hashed as its canonical text (Presto's
        ``varchar``) with the grid's hash, the IPv4 clients in one vectorized pass
        (:func:`hash64_ipv4_text`, or XXH64 of the same text words), the IPv6 ones from their
        text. The keys are wiped; nothing is outside a grid."""
        try:
            if self.items != "ip":
                msg = f"sketch grid {self.spec} reads identifiers, not addresses"
                raise ConfigurationError(msg)
            h4 = _hash_ipv4_text(keys.v4, self.hashing)
            if keys.v6_hi.size:
                h6 = _hash_ipv6_text(keys.v6_hi, keys.v6_lo, self.hashing, keys.v6_text)
                h = np.concatenate([h4, h6])
                h4.fill(0)
                h6.fill(0)
            else:
                h = h4
            cells = self.cells_of_hashes(h)
            h.fill(0)
            return IndexResult(cells)
        finally:
            keys.wipe()

    def cells_of_hashes(self, h: np.ndarray) -> np.ndarray:
        """The cell ``level * buckets + bucket`` of each hash (``intp``)."""
        bucket, level = bucket_level(h, self.bits, self.levels)
        level *= self.buckets
        level += bucket
        bucket.fill(0)
        return level

    def indices(self, items: Iterable[Any] | np.ndarray) -> IndexResult:
        """Cells of ``items``: integer arrays are hashed as ``bigint`` (``id``) or IPv4 addresses
        (``ip``); other items by :func:`canonical_item`. The cells of a mixed batch of integers
        and text come in no particular order (a sketch is a set: order does not matter)."""
        refuse_bare_item(items, "indices")
        if self.items == "ip" and isinstance(items, list) and len(items) >= 64:
            keys = token_keys(items)
            if keys is not None:  # a batch of log tokens: read like the lines of a log
                return self.token_cells(keys)
        if isinstance(items, np.ndarray) and items.dtype.kind in "iu" and self.items == "id" \
                and self.hashing != "xxhash64-varchar":
            h = hash64_ints(items) if self.hashing == "murmur3" else xxh64_ints(items)
            malformed = empty = 0
        elif isinstance(items, list) and all(type(t) is bytes or type(t) is str for t in items):
            return self._indices_repeated(items)
        else:
            h, malformed, empty = hash_items(items.tolist() if isinstance(items, np.ndarray)
                                             else items, self.items, self.hashing)
        cells = self.cells_of_hashes(h)
        h.fill(0)
        return IndexResult(cells, malformed=malformed, empty=empty)

    def _indices_repeated(self, items: list[Any]) -> IndexResult:
        """Text items (a log's tokens): each distinct token is written canonically and hashed once,
        then every token takes its token's cell (logs repeat their clients many times)."""
        cell, good, canon = distinct_canonical(items, self.items)
        if self.hashing == "murmur3":
            h, ok = hash64_bytes(canon), None
        else:
            h, ok = hash_blobs(canon, self.hashing)
        cells = self.cells_of_hashes(h)
        h.fill(0)
        if ok is not None:  # xxhash64-bigint: text that is no integer is malformed
            cells[~ok] = -1
        cell.update(zip(good, cells.tolist(), strict=True))
        cells.fill(0)
        good.clear()
        canon.clear()
        return cells_of_tokens(cell, items)

    def _indices_objects(self, items: Iterable[Any]) -> IndexResult:
        return self.indices(list(items))

    def item_of(self, index: int) -> str:
        msg = "a sketch cell is a hash bucket and level: it cannot name its items"
        raise ConfigurationError(msg)


# ---------------------------------------------------------------------- estimation
def _level_terms(n: float, buckets: int, levels: int, r: float
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per level: the first and second derivatives in ``n`` of the log pseudo-likelihood term of an
    on bit and of an off bit, and the on-probability ``pi``. ``r`` is the flip probability."""
    lv = np.arange(levels, dtype=np.float64)
    p = np.exp2(-(lv + 1)) / buckets       # Presto's observationProbability (also at the top level)
    lg = np.log1p(-p)
    # A Newton step far below 0 (an empty or noise-only table) overflows here as Java's doubles do;
    # the caller turns the infinite or NaN step into Presto's 0, so NumPy's warnings (printed on a
    # user's terminal) are silenced, not the result.
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        x = np.exp(n * lg)                  # (1 - p)^n: the chance no item hit the bit
        on = 1.0 - r
        c2 = on - r
        d_on = on - c2 * x                  # Pr[bit = 1]
        d_off = r + c2 * x                  # Pr[bit = 0]
        a1 = lg * (1 - on / d_on)
        b1 = lg * (1 - (1 - on) / d_off)
        a2 = -on * c2 * lg * lg * x / (d_on * d_on)
        b2 = (1 - on) * c2 * lg * lg * x / (d_off * d_off)
    return a1, b1, a2, b2, d_on


def cardinality(ones: np.ndarray | list[float], buckets: int, r: float) -> int:
    """Presto's ``SfmSketch.cardinality()`` from the per-level counts of ones: Newton's method on the
    log pseudo-likelihood from ``n = 1`` until a step is at most 0.1 (at most 1000 steps), rounded
    half up, at least 0.

    Args:
        ones: number of on bits at each level (length ``P``).
        buckets: ``B``.
        r: the sketch's flip probability (Presto's ``randomizedResponseProbability``; 0 when not
            private).
    """
    n = _newton(np.asarray(ones, dtype=np.float64), buckets, r)
    return 0 if math.isnan(n) else max(0, math.floor(n + 0.5))


def _newton(k: np.ndarray, buckets: int, r: float) -> float:
    levels = k.size
    off = buckets - k
    guess, change, it = 1.0, math.inf, 0
    while abs(change) > 0.1 and it < MAX_ITERATIONS:
        a1, b1, a2, b2, _ = _level_terms(guess, buckets, levels, r)
        d1 = float(np.dot(k, a1) + np.dot(off, b1))
        d2 = float(np.dot(k, a2) + np.dot(off, b2))
        if d2 == 0 or not math.isfinite(d1 / d2):
            return math.nan  # Java: an infinite step, then NaN, which Math.round makes 0
        change = -d1 / d2
        guess += change
        it += 1
    return guess


@dataclass(frozen=True)
class Fit:
    """The maximum pseudo-likelihood estimate from per-level counts and its uncertainty.

    Attributes:
        n: the estimate (Newton's limit, unrounded).
        cardinality: Presto's rounded ``cardinality()``.
        stderr: its standard error from the bits' randomness (:func:`expected_stderr` at ``n``).
        gradient: ``d n / d K_l`` for each level's count of ones ``K_l`` (the delta method's
            weights for noise added to the counts).
    """

    n: float
    cardinality: int
    stderr: float
    gradient: tuple[float, ...]


def mple(ones: np.ndarray | list[float] | tuple[float, ...], buckets: int, r: float) -> Fit:
    """The estimate of :func:`cardinality`, unrounded, with its standard error and the gradient of
    the estimate with respect to the counts (for release noise). Counts are clipped to
    ``[0, buckets]`` first (noisy counts may leave it; clipping is post-processing)."""
    k = np.clip(np.asarray(ones, dtype=np.float64), 0, buckets)
    n = _newton(k, buckets, r)
    if math.isnan(n):
        n = 0.0
    a1, b1, a2, b2, _ = _level_terms(max(n, 1.0), buckets, k.size, r)
    d2 = float(np.dot(k, a2) + np.dot(buckets - k, b2))
    grad = tuple(float(g) for g in (-(a1 - b1) / d2)) if d2 else tuple(0.0 for _ in range(k.size))
    return Fit(n, max(0, math.floor(n + 0.5)), expected_stderr(n, buckets, k.size, r), grad)


def expected_stderr(n: float, buckets: int, levels: int, r: float) -> float:
    """The standard error of the estimate at a true count of ``n`` distinct items.

    A sandwich (delta-method) variance ``Var(S) / E[S']**2`` of the pseudo-likelihood's score
    ``S = sum_l K_l a_l + (B - K_l) b_l``, with the *exact* covariance of the per-level counts for a
    fixed set of ``n`` distinct items under a random hash: a bit at level ``l`` is missed by all
    items with probability ``x_l = (1 - p_l)**n`` (``p_l = 2**-(l+1) / B``), two bits with
    ``(1 - p_l - p_m)**n``; the occupied bits are then flipped independently (variance
    ``B r (1 - r)`` per level, scaled by ``(1 - 2r)**2`` for the occupancy). Treating the bits as
    independent instead (the Fisher information of the pseudo-likelihood) overstates the error at
    small ``n``, where occupancies of one level are negatively correlated.
    """
    at = max(float(n), 1.0)
    lv = np.arange(levels, dtype=np.float64)
    p = np.exp2(-(lv + 1)) / buckets
    lg = np.log1p(-p)
    x = np.exp(at * lg)
    a1, b1, a2, b2, pi = _level_terms(at, buckets, levels, r)
    g = a1 - b1
    # Cov(O_l, O_m) of the numbers of occupied bits: B**2 [(1-p_l-p_m)^n - x_l x_m] off the
    # diagonal, B x(1-x) + B(B-1)[(1-2p)^n - x^2] on it, each difference computed without
    # cancellation as x_l x_m expm1(n ln(1 - p_l p_m / ((1-p_l)(1-p_m)))).
    u = p / (1 - p)
    cross = np.outer(x, x) * np.expm1(at * np.log1p(-np.outer(u, u)))
    cov = buckets * buckets * cross
    diag = buckets * x * (1 - x) + buckets * (buckets - 1) * np.diag(cross)
    np.fill_diagonal(cov, diag)
    cov *= (1 - 2 * r) ** 2
    cov[np.diag_indices(levels)] += buckets * r * (1 - r)
    var_score = float(g @ cov @ g)
    hess = float(np.dot(buckets * pi, a2) + np.dot(buckets * (1 - pi), b2))
    if hess == 0 or var_score <= 0:
        return math.inf
    return math.sqrt(var_score) / abs(hess)


def planned_error(n: float, epsilon: float, release_epsilon: float | None = None,
                  buckets: int = DEFAULT_BUCKETS, levels: int = DEFAULT_LEVELS) -> dict[str, float]:
    """The standard errors a sketch will have at ``n`` distinct items, before ingesting: the state
    part (:func:`expected_stderr`) and, for a release at ``release_epsilon``, the release part
    (Laplace noise of variance ``2 / release_epsilon**2`` on every level's count, through the
    estimate's gradient at the expected counts).

    >>> e = planned_error(50_000, 1.0, 1.0)
    >>> round(e["state"] / 50_000, 3), e["release"] < 0.1 * e["state"]
    (0.027, True)
    """
    from panstream.calibration import calibrate

    r = float(calibrate(epsilon, "rr").q)
    state = expected_stderr(n, buckets, levels, r)
    rel = 0.0
    if release_epsilon:
        *_, pi = _level_terms(max(n, 1.0), buckets, levels, r)
        fit = mple(buckets * pi, buckets, r)
        rel = math.sqrt(2 / release_epsilon**2 * math.fsum(g * g for g in fit.gradient))
    return {"state": state, "release": rel, "total": math.hypot(state, rel),
            "bytes": buckets * levels / 8, "flip_probability": r}


# ---------------------------------------------------------------------- merge
def merge_flip_probability(p1: Fraction | float, p2: Fraction | float) -> Fraction | float:
    """Presto's ``mergeRandomizedResponseProbabilities``: ``(p1 + p2 - 3 p1 p2) / (1 - 2 p1 p2)``,
    exact when given :class:`~fractions.Fraction` s.

    >>> merge_flip_probability(Fraction(1, 4), Fraction(0))
    Fraction(1, 4)
    """
    return (p1 + p2 - 3 * p1 * p2) / (1 - 2 * p1 * p2)


def merge_probabilities(p1: Fraction, p2: Fraction) -> dict[tuple[int, int], Fraction]:
    """The probability that the randomized merge sets a merged bit to 1, for each pair of input bits
    ``(b1, b2)``, exactly: with ``p = merge_flip_probability(p1, p2)`` and ``c = (1 - 2p) /
    ((1 - 2p1)(1 - 2p2))``, ``Pr[1] = 1 - p - c (1 - p1 - b1)(1 - p2 - b2)`` (Theorem 4.8).

    Since ``E[1 - p_i - b_i] = (1 - 2 p_i)(1 - t_i)`` for a true bit ``t_i``, a merged bit is 1 with
    probability ``1 - p - (1 - 2p)(1 - t1)(1 - t2)``: ``1 - p`` if either stream hit it and ``p``
    otherwise, the law of the union's sketch privatized with flip probability ``p``. All four values
    lie in [0, 1] (two zeros merge to a 0 with certainty), so nothing is clamped.

    The Presto versions we read compute ``p + c (1 - 2p - c (1 - p1 - b1)(1 - p2 - b2))`` instead,
    which equals the above only when ``c = 1`` (a non-private input): for two private inputs it
    sets a hit bit to 1 with probability ``p + c (1 - 2p) > 1 - p``, too many ones, which Presto's
    newer ``testMergedPrivateCardinalitiesAreUnbiased`` rules out. We implement the unbiased form.

    >>> pr = merge_probabilities(Fraction(1, 4), Fraction(1, 4))
    >>> pr[(0, 0)], pr[(1, 1)]
    (Fraction(0, 1), Fraction(4, 7))
    """
    p = Fraction(merge_flip_probability(Fraction(p1), Fraction(p2)))
    c = (1 - 2 * p) / ((1 - 2 * Fraction(p1)) * (1 - 2 * Fraction(p2)))
    out = {}
    for b1 in (0, 1):
        for b2 in (0, 1):
            v = 1 - p - c * (1 - p1 - b1) * (1 - p2 - b2)
            assert 0 <= v <= 1, (p1, p2, b1, b2)
            out[(b1, b2)] = v
    return out


def merged_epsilon(e1: float, e2: float) -> float:
    """The epsilon of a merged sketch's flip probability: ``-ln(e^-e1 + e^-e2 - e^-(e1+e2))``."""
    return -math.log(math.exp(-e1) + math.exp(-e2) - math.exp(-(e1 + e2)))


# ---------------------------------------------------------------------- Presto's format
_HEAD = struct.Struct("<biidi")


@dataclass(frozen=True)
class PrestoSketch:
    """A sketch as Presto serializes it (a published, already-private object: no ledger).

    Attributes:
        bits: index bit length ``log2 B``.
        levels: Presto's ``precision`` ``P``.
        flip: the flip probability (``randomizedResponseProbability``; 0 for a non-private sketch).
        bitmap: the grid as packed bytes, bit ``level * B + bucket`` at byte ``i // 8``, bit
            ``i % 8`` (the full ``B * P / 8`` bytes).
    """

    bits: int
    levels: int
    flip: float
    bitmap: bytes

    @property
    def buckets(self) -> int:
        return 1 << self.bits

    def ones_by_level(self) -> np.ndarray:
        """The per-level counts of ones (``int64``, length ``P``)."""
        grid = np.unpackbits(np.frombuffer(self.bitmap, dtype=np.uint8), bitorder="little")
        return grid.reshape(self.levels, self.buckets).sum(axis=1, dtype=np.int64)

    def cardinality(self) -> int:
        """Presto's ``cardinality()`` of this sketch."""
        return cardinality(self.ones_by_level(), self.buckets, self.flip)

    @property
    def epsilon(self) -> float:
        """The epsilon of the flip probability, ``ln((1 - r) / r)`` (infinite when not private)."""
        return math.inf if self.flip <= 0 else math.log((1 - self.flip) / self.flip)


def to_presto(sk: PrestoSketch) -> bytes:
    """Presto's serialization: tag 7 (byte), index bit length (int32), precision (int32), flip
    probability (float64), bitmap byte length (int32), bitmap, all little-endian; the bitmap is Java's
    ``BitSet.toByteArray()``, so trailing zero bytes are dropped."""
    body = sk.bitmap.rstrip(b"\0")
    return _HEAD.pack(FORMAT_TAG, sk.bits, sk.levels, sk.flip, len(body)) + body


def from_presto(data: bytes | bytearray | memoryview) -> PrestoSketch:
    """Read Presto's serialized SfmSketch (checked like Presto's ``deserialize``).

    Raises:
        StateError: wrong tag, out-of-range fields, a bitmap longer than the grid, or trailing or
            missing bytes; the message says which.
    """
    mv = bytes(data)
    if len(mv) < _HEAD.size:
        msg = f"not a Presto SfmSketch: {len(mv)} bytes, shorter than its {_HEAD.size}-byte header"
        raise StateError(msg)
    tag, bits, levels, flip, nbytes = _HEAD.unpack_from(mv)
    if tag != FORMAT_TAG:
        msg = f"not a Presto SfmSketch: format tag {tag}, expected {FORMAT_TAG}"
        raise StateError(msg)
    if not 1 <= bits <= 32 or not levels >= 1 or bits + levels > 64:
        msg = f"invalid Presto SfmSketch: index bit length {bits}, precision {levels}"
        raise StateError(msg)
    if bits > 24 or (1 << bits) * levels > 1 << 30:
        msg = f"Presto SfmSketch of 2**{bits} x {levels} bits is larger than panstream reads"
        raise StateError(msg)
    if not (math.isfinite(flip) and 0 <= flip <= 0.5):
        msg = f"invalid Presto SfmSketch: flip probability {flip!r} outside [0, 0.5]"
        raise StateError(msg)
    total = ((1 << bits) * levels + 7) // 8
    if nbytes < 0 or nbytes > total or len(mv) != _HEAD.size + nbytes:
        msg = (f"invalid Presto SfmSketch: bitmap of {nbytes} bytes in {len(mv) - _HEAD.size} "
               f"bytes of data, for a grid of {total} bytes")
        raise StateError(msg)
    body = mv[_HEAD.size :]
    if (1 << bits) * levels % 8 and nbytes == total and body[-1] >> ((1 << bits) * levels % 8):
        msg = "invalid Presto SfmSketch: bits set beyond the grid"
        raise StateError(msg)
    return PrestoSketch(bits, levels, flip, body + bytes(total - nbytes))
