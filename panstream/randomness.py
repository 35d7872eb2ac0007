"""Backtracking-resistant randomness for every privacy-relevant draw.

All draws come from the operating system's CSPRNG through :func:`os.urandom` (``getrandom(2)`` on
Linux). The kernel generator is forward-secure: reading this process's memory, or the kernel state
later, does not reveal bytes that were already handed out. No seed, key or generator state exists in
panstream, so a leaked dump cannot be used to recompute the initial D0 table and so learn which cells
were redrawn (who arrived). NumPy's seeded bit generators never appear here: their state, once read, replays
every past draw.

Bernoulli draws are exact: probabilities are dyadic rationals ``numerator / 2**P_BITS`` and a draw
compares uniform random bytes against the binary expansion of that rational, most significant byte
first, looking at the next byte only on a tie. One byte decides 255 times in 256, so a draw costs
about 8.03 random bits, and the probability realized is exactly ``numerator / 2**P_BITS``.

A whole table of D0 bits with ``q != 1/2`` comes from :func:`bernoulli_packed`, which samples eight
cells (one output byte) at a time from 16 random bits through a lookup table, resolving the rare ties
(at most 255 in 65,536) with further bits: about 2.01 random bits per cell, still exact.

>>> p = dyadic_at_most(0.75)
>>> p == 3 << (P_BITS - 2)
True
>>> bits = bernoulli(100_000, p)
>>> bool(0.73 < bits.mean() < 0.77)
True
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import os
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from panstream.errors import ConfigurationError

#: Precision of every Bernoulli probability: p = numerator / 2**P_BITS exactly.
P_BITS = 32
_P_BYTES = P_BITS // 8
_ONE = 1 << P_BITS


_urandom_file: io.FileIO | None = None
_urandom_lock = threading.Lock()


def _device() -> io.FileIO | None:
    global _urandom_file
    if _urandom_file is not None:  # opened once, never closed: no lock needed to read it
        return _urandom_file
    with _urandom_lock:
        if _urandom_file is None and os.path.exists("/dev/urandom"):
            _urandom_file = io.FileIO("/dev/urandom", "rb")
        return _urandom_file


def fill_secure(buf: np.ndarray) -> np.ndarray:
    """Fill a contiguous ``uint8`` array in place with bytes from the OS CSPRNG and return it.

    Reads ``/dev/urandom`` straight into the array (the kernel CSPRNG behind ``os.urandom``), so no
    intermediate copy of the random bytes is left behind in freed memory. Falls back to
    :func:`os.urandom` where there is no such device.
    """
    view = buf.data.cast("B")
    dev = _device()
    done, n = 0, len(view)
    while done < n:
        if dev is not None:
            got = dev.readinto(view[done:])
            if not got:
                raise OSError("/dev/urandom returned no data")
        else:
            chunk = os.urandom(min(n - done, 1 << 20))
            got = len(chunk)
            view[done : done + got] = chunk
        done += got
    return buf


def secure_bytes(n: int) -> np.ndarray:
    """``n`` uniform bytes from the OS CSPRNG as a writable ``uint8`` array."""
    return fill_secure(np.empty(max(n, 0), dtype=np.uint8))


def secure_uniform_below(bound: int) -> int:
    """One uniform integer in ``0..bound-1`` from the OS CSPRNG (rejection sampling, no bias)."""
    if bound == 1:  # one value: nothing to draw (the exact samplers ask for it often)
        return 0
    if bound <= 0:
        msg = f"bound must be positive, got {bound}"
        raise ConfigurationError(msg)
    nbytes = (bound.bit_length() + 7) // 8 + 1
    limit = (1 << (8 * nbytes)) // bound * bound
    while True:
        r = int.from_bytes(os.urandom(nbytes), "little")
        if r < limit:
            return r % bound


def dyadic_at_most(p: float | Fraction) -> int:
    """The numerator of the largest dyadic ``k / 2**P_BITS`` that is ``<= p`` (0 <= p <= 1).

    Rounding down keeps the realized epsilon of ``p > 1/2`` at or below the one asked for.
    """
    f = Fraction(p)
    if not 0 <= f <= 1:
        msg = f"probability must lie in [0, 1], got {p!r}"
        raise ConfigurationError(msg)
    return math.floor(f * _ONE)


def probability(numerator: int) -> Fraction:
    """The exact probability ``numerator / 2**P_BITS`` a draw with this numerator realizes."""
    return Fraction(numerator, _ONE)


@functools.lru_cache(maxsize=64)
def _threshold_bytes(numerator: int) -> bytes:
    """``p``'s expansion, most significant byte first (a few numerators recur: remembered)."""
    if not 0 <= numerator <= _ONE:
        msg = f"numerator must lie in 0..2**{P_BITS}, got {numerator}"
        raise ConfigurationError(msg)
    return min(numerator, _ONE - 1).to_bytes(_P_BYTES, "big")


def bernoulli(n: int, numerator: int, out: np.ndarray | None = None) -> np.ndarray:
    """``n`` independent draws of Bernoulli(``numerator / 2**P_BITS``) as a ``bool`` array.

    Each draw is ``U < p`` for a uniform ``U`` read byte by byte from the OS CSPRNG: the first byte
    is compared with the first byte of ``p``'s expansion and only ties read a further byte. The
    random bytes are overwritten before returning.

    Args:
        n: number of draws.
        numerator: ``p * 2**P_BITS``, an integer in ``0..2**P_BITS``.
        out: optional ``bool`` array of length ``n`` to write into.
    """
    return bernoulli_from_bytes(secure_bytes(n), numerator, out)


def bernoulli_from_bytes(first: np.ndarray, numerator: int, out: np.ndarray | None = None) -> np.ndarray:
    """Finish ``first.size`` Bernoulli(``numerator / 2**P_BITS``) draws whose first bytes are given.

    ``first`` must be fresh uniform bytes from the OS CSPRNG (:func:`secure_bytes`) used for nothing
    else; it is the most significant byte of each draw's ``U``. Ties with ``p``'s first byte read
    further bytes here. ``first`` is overwritten with zeros before returning. This split lets a
    caller read the bytes in another thread (the read releases the GIL) and compare them here.

    Args:
        first: ``uint8`` array of uniform CSPRNG bytes, one per draw (wiped).
        numerator: ``p * 2**P_BITS``, an integer in ``0..2**P_BITS``.
        out: optional ``bool`` array of length ``first.size`` to write into.

    Returns:
        The draws as a ``bool`` array (``out`` if given).
    """
    n = first.size
    if numerator >= _ONE:  # p == 1 exactly
        first.fill(0)
        res = out if out is not None else np.empty(n, dtype=bool)
        res[:] = True
        return res
    thr = _threshold_bytes(numerator)
    res = np.less(first, thr[0], out=out if out is not None else np.empty(n, dtype=bool))
    ties = np.flatnonzero(first == thr[0])
    first.fill(0)
    for k in range(1, _P_BYTES):
        if ties.size == 0:
            break
        rk = secure_bytes(ties.size)
        res[ties] = rk < thr[k]
        nxt = ties[rk == thr[k]]
        ties.fill(0)
        ties = nxt
        rk.fill(0)
    ties.fill(0)
    # Ties on every byte mean U == p on all P_BITS bits, i.e. U >= p: the draw is 0, as set above.
    return res


def bernoulli_half_packed(nbytes: int) -> np.ndarray:
    """``8 * nbytes`` independent fair bits (D0), packed eight to a byte, as a ``uint8`` array."""
    return secure_bytes(nbytes)


# ---------------------------------------------------------------------------------------------------
# Exact Bernoulli(q) bits for a whole table, eight cells per byte: the interval sampler with lazy ties
# ---------------------------------------------------------------------------------------------------

#: Cells per group (one output byte) of :func:`bernoulli_packed`.
GROUP_CELLS = 8
#: Random bits read for every group (level 1: a lookup table of ``2**LEVEL1_BITS`` bytes).
LEVEL1_BITS = 16
#: Further random bits read for a group whose level-1 value is a tie (level 2).
LEVEL2_BITS = 32
#: Last bits read in the rare case that level 2 is a tie too: they complete ``U`` to the grid of
#: ``2**-(P_BITS * GROUP_CELLS)`` on which every pattern probability lies, so nothing is left to tie.
DEEP_BITS = P_BITS * GROUP_CELLS - LEVEL1_BITS - LEVEL2_BITS
_ATOM_BITS = P_BITS * GROUP_CELLS  # every pattern probability is a multiple of 2**-256
_L1 = 1 << LEVEL1_BITS
_HALF = 1 << (P_BITS - 1)
#: Output bytes per work item of :func:`bernoulli_packed`: 512 KiB of random bytes read at once and
#: 2 MiB of ``intp`` level-1 values per thread, which stay in cache between the read and the lookup.
PACKED_CHUNK = 1 << 18


def pattern_atoms(numerator: int) -> list[int]:
    """``P(x) * 2**256`` for every pattern ``x`` of eight cells, an exact integer each.

    Cell ``i`` of a group is bit ``i`` of ``x`` and is 1 with probability ``q = numerator / 2**32``, so
    ``P(x) = q**|x| * (1 - q)**(8 - |x|) = k**|x| * (2**32 - k)**(8 - |x|) / 2**256``. The 256 values
    sum to ``2**256`` exactly (binomial theorem).
    """
    _threshold_bytes(numerator)  # validates the range
    k, j = numerator, _ONE - numerator
    by_ones = [k**a * j ** (GROUP_CELLS - a) for a in range(GROUP_CELLS + 1)]
    return [by_ones[x.bit_count()] for x in range(1 << GROUP_CELLS)]


@dataclass(frozen=True, eq=False)
class IntervalTables:
    """The fixed partition of ``[0, 1)`` that :func:`bernoulli_packed` samples ``U`` against.

    Nothing here is secret: every field is a function of ``q`` alone.

    Attributes:
        numerator: ``q * 2**32``.
        counts: ``c(x) = floor(P(x) * 2**16)`` for each pattern ``x`` (level-1 values given to ``x``).
        lut: ``uint8[2**16]``: the pattern of each level-1 value ``u < split`` (runs of ``c(x)``
            values in pattern order); entries from ``split`` on are ``placeholder``.
        split: ``S = sum(c)``; level-1 values ``u >= S`` (``T = 2**16 - S <= 255`` of them) are ties.
        exact: ``E[j] = sum(r(x) for x < j) * 2**256`` for ``j = 0..256``, where
            ``r(x) = P(x) - c(x) / 2**16``: the residual intervals laid end to end in the tie
            region, in units of ``2**-256`` from its start (``E[256] = T * 2**240``).
        floor2, ceil2: ``int64[257]``: ``E`` on the level-2 grid (``2**-48``), rounded down and up.
        exact_rows: ``uint8[256, 32]``: ``S * 2**240 + E[j]`` for ``j < 256`` as big-endian 256-bit
            numbers, for the comparisons of the deepest level.
        placeholder: the value of ``lut`` in the tie region: the least likely pattern (eight ones
            for ``q < 1/2``, eight zeros otherwise), so few decided groups share it.
    """

    numerator: int
    counts: np.ndarray
    lut: np.ndarray
    split: int
    placeholder: int
    exact: tuple[int, ...]
    floor2: np.ndarray
    ceil2: np.ndarray
    exact_rows: np.ndarray

    @property
    def ties(self) -> int:
        """``T``: the number of level-1 values that do not decide on their own."""
        return _L1 - self.split

    def deep_cells(self) -> np.ndarray:
        """The level-2 values ``v`` (offsets in the tie region, units of ``2**-48``) that contain a
        boundary strictly inside them: only there does a draw read the last :data:`DEEP_BITS` bits."""
        inner = self.floor2 != self.ceil2
        return np.unique(self.floor2[inner])

    def expected_bits_per_cell(self) -> Fraction:
        """The exact expected number of random bits one cell costs (level 1 always, deeper levels
        with the probability of reaching them)."""
        p2 = Fraction(self.ties, _L1)
        p3 = Fraction(int(self.deep_cells().size), 1 << (LEVEL1_BITS + LEVEL2_BITS))
        return (LEVEL1_BITS + p2 * LEVEL2_BITS + p3 * DEEP_BITS) / GROUP_CELLS


@functools.lru_cache(maxsize=16)
def interval_tables(numerator: int) -> IntervalTables:
    """The :class:`IntervalTables` of ``q = numerator / 2**32`` (cached: they depend on ``q`` only)."""
    atoms = pattern_atoms(numerator)
    shift1 = _ATOM_BITS - LEVEL1_BITS
    counts = [a >> shift1 for a in atoms]
    split = sum(counts)
    placeholder = 0xFF if numerator < _HALF else 0
    lut = np.full(_L1, placeholder, dtype=np.uint8)
    lut[:split] = np.repeat(np.arange(1 << GROUP_CELLS, dtype=np.uint8), counts)
    exact = [0]
    for a, c in zip(atoms, counts, strict=True):
        exact.append(exact[-1] + a - (c << shift1))
    assert exact[-1] == (_L1 - split) << shift1
    shift2 = _ATOM_BITS - LEVEL1_BITS - LEVEL2_BITS
    floor2 = np.array([e >> shift2 for e in exact], dtype=np.int64)
    ceil2 = np.array([-((-e) >> shift2) for e in exact], dtype=np.int64)
    base = split << shift1
    # No tie region at all (q = 1/2): no rows, the deepest level is never reached.
    rows = b"".join((base + e).to_bytes(_ATOM_BITS // 8, "big") for e in exact[:-1]) if split < _L1 else b""
    exact_rows = np.frombuffer(rows, dtype=np.uint8).reshape(-1, _ATOM_BITS // 8).copy()
    for arr in (lut, floor2, ceil2, exact_rows):
        arr.flags.writeable = False
    cnt = np.array(counts, dtype=np.int64)
    cnt.flags.writeable = False
    return IntervalTables(numerator, cnt, lut, split, placeholder, tuple(exact), floor2, ceil2, exact_rows)


def resolve_level2(tab: IntervalTables, u: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Patterns of tied groups from their level-1 values ``u >= S`` and 32 further random bits ``w``.

    ``v = (u - S) * 2**32 + w`` names the cell ``[v, v + 1)`` (units of ``2**-48`` from the start of
    the tie region) that holds ``U``. If no boundary ``E[j] / 2**208`` lies strictly inside it, the
    whole cell belongs to the pattern ``x`` with ``E[x] <= v * 2**208`` and ``(v + 1) * 2**208 <=
    E[x + 1]``: ``x`` is the number of ``j`` with ``ceil(E[j] / 2**208) <= v``, minus one. A boundary
    strictly inside the cell (``floor <= v < ceil`` for some ``j``) makes the draw *deep*.

    Returns:
        ``(patterns, deep)``: a ``uint8`` pattern per group (meaningless where deep) and the indices
        (into ``u``) of the deep groups. The caller wipes both.
    """
    v = u.astype(np.int64)
    v -= tab.split
    v <<= LEVEL2_BITS
    low = w.astype(np.int64)
    v |= low
    low.fill(0)
    above_c = np.searchsorted(tab.ceil2, v, side="right")
    above_f = np.searchsorted(tab.floor2, v, side="right")
    v.fill(0)
    inner = above_f != above_c
    deep = np.flatnonzero(inner)
    inner.fill(False)
    above_f.fill(0)
    above_c -= 1
    patterns = above_c.astype(np.uint8)
    above_c.fill(0)
    return patterns, deep


def resolve_deep(tab: IntervalTables, prefix: np.ndarray) -> int:
    """The pattern whose interval holds ``U``, given all 256 leading bits of ``U`` as 32 big-endian
    bytes (``prefix``). Every boundary of the partition is a multiple of ``2**-256``, so the interval
    ``[U_256, U_256 + 2**-256)`` lies within one pattern's interval: the last ``j`` with
    ``S * 2**-16 + E[j] * 2**-256 <= U_256`` (for ``U`` in the tie region; lexicographic comparison of
    the 32-byte rows). ``prefix`` is not modified; the caller wipes it.
    """
    rows = tab.exact_rows
    differs = rows != prefix
    first = np.argmax(differs, axis=1)
    some = differs[np.arange(rows.shape[0]), first]
    mine = prefix[first]
    below = rows[np.arange(rows.shape[0]), first] < mine
    at_most = ~some | below  # row == prefix, or row < prefix at the first differing byte
    pattern = int(np.count_nonzero(at_most)) - 1
    for arr in (differs, first, some, mine, below, at_most):
        arr.fill(0)
    return pattern


class GroupScratch:
    """One thread's reusable buffers for :func:`sample_groups` (``n`` groups at most).

    ``index`` holds the level-1 values as ``intp``: converting them explicitly into a buffer owned
    here, and wiped, keeps NumPy from casting the 16-bit random values to ``intp`` in buffers of its
    own (as ``lut[u]`` and ``np.take`` do with 16-bit indices), which it frees without overwriting.
    ``flag`` marks tie candidates.
    """

    __slots__ = ("flag", "index")

    def __init__(self, n: int) -> None:
        self.index = np.zeros(n, dtype=np.intp)
        self.flag = np.zeros(n, dtype=bool)

    def wipe(self) -> None:
        self.index.fill(0)
        self.flag.fill(False)


def sample_groups(tab: IntervalTables, raw: np.ndarray, out: np.ndarray,
                  read: Callable[[int], np.ndarray] | None = None,
                  scratch: GroupScratch | None = None, keep_buffers: bool = False) -> None:
    """Turn ``2 * out.size`` fresh uniform bytes ``raw`` into ``out.size`` exact groups (bytes).

    Level 1: group ``i``'s first 16 bits of ``U`` are bytes ``2i`` (low) and ``2i + 1`` (high) of
    ``raw`` read as a little-endian integer ``u`` (any fixed bijection of two uniform bytes onto
    ``0..2**16-1`` is uniform); ``lut[u]`` is written straight into ``out``. For ``u >= S`` the table
    holds a placeholder, the least likely pattern (``tab.placeholder``), so ties are found among the
    few groups that show it (under 1% of them) instead of by a second pass over ``u``. Ties read 4
    more bytes each (:func:`resolve_level2`, ``U``'s next 32 bits as a little-endian integer), deep
    ties 26 more (:func:`resolve_deep`, ``U``'s last 208 bits as a big-endian integer), through
    ``read`` (default :func:`secure_bytes`; it must return fresh uniform bytes).

    ``raw``, ``scratch`` and every temporary holding draws or values derived from them are
    overwritten with zeros before returning. With ``keep_buffers`` the caller, which refills ``raw``
    and reuses ``scratch`` chunk after chunk, wipes those two itself once its last chunk is done
    (:func:`bernoulli_packed` does: one wipe per thread instead of one per chunk, issue 38); every
    temporary made here is still wiped before returning.
    """
    rd = secure_bytes if read is None else read
    n = out.size
    if raw.size != 2 * n:
        msg = f"need {2 * n} random bytes for {n} groups, got {raw.size}"
        raise ValueError(msg)
    scr = scratch if scratch is not None else GroupScratch(n)
    if scr.index.size < n:
        msg = f"scratch for {scr.index.size} groups is too small for {n}"
        raise ValueError(msg)
    u = raw.view("<u2")
    index, flag = scr.index[:n], scr.flag[:n]
    temps: list[np.ndarray] = []  # every other temporary derived from the draws, wiped at the end
    try:
        index[...] = u
        np.take(tab.lut, index, out=out, mode="wrap")  # all values are in range: no wrapping
        if tab.split == _L1:
            return
        np.equal(out, tab.placeholder, out=flag)
        cand = np.flatnonzero(flag)
        temps.append(cand)
        uc = u[cand]
        temps.append(uc)
        is_tie = uc >= tab.split
        temps.append(is_tie)
        ties = cand[is_tie]
        temps.append(ties)
        if ties.size == 0:
            return
        ut = u[ties]
        temps.append(ut)
        w4 = rd(4 * ties.size)
        temps.append(w4)
        w = w4.view("<u4")
        patterns, deep = resolve_level2(tab, ut, w)
        temps += [patterns, deep]
        out[ties] = patterns
        for d in deep.tolist():
            out[ties[d]] = _deep_pattern(tab, ut[d : d + 1], w[d : d + 1], rd)
    finally:
        if not keep_buffers:
            raw.fill(0)
            index.fill(0)
            flag.fill(False)
        for arr in temps:
            arr.fill(0)


def _deep_pattern(tab: IntervalTables, u1: np.ndarray, w1: np.ndarray,
                  rd: Callable[[int], np.ndarray]) -> int:
    """Finish one deep group: ``U``'s 256 leading bits are ``u`` (16), ``w`` (32) and 208 fresh ones."""
    prefix = np.empty(_ATOM_BITS // 8, dtype=np.uint8)
    hi = u1.astype(">u2")
    mid = w1.astype(">u4")
    rest = rd(DEEP_BITS // 8)
    try:
        prefix[:2] = hi.view(np.uint8)
        prefix[2:6] = mid.view(np.uint8)
        prefix[6:] = rest
        return resolve_deep(tab, prefix)
    finally:
        for arr in (prefix, hi, mid, rest):
            arr.fill(0)


def _share_chunks(n: int, chunk: int, make_worker: Callable[[], Callable[[slice | None], None]],
                  executor: Executor | None) -> None:
    """Run ``worker(slice)`` over ``0..n`` in chunks, in this thread and (if given) one task of
    ``executor``, each taking the next unclaimed chunk. ``make_worker()`` builds one thread's worker
    (with its own scratch buffers); ``worker(None)`` is called once at the end to wipe them.

    A single chunk (a small table: every estimator of an audit run) is done in this thread without
    the lock and the helper task, whose set-up cost more than the chunk itself.
    """
    if n <= chunk:
        work = make_worker()
        try:
            if n:
                work(slice(0, n))
        finally:
            work(None)
        return
    lock = threading.Lock()
    starts = iter(range(0, n, chunk))
    failed = threading.Event()

    def run() -> None:
        work = make_worker()
        try:
            while not failed.is_set():
                with lock:
                    s = next(starts, None)
                if s is None:
                    return
                work(slice(s, min(n, s + chunk)))
        except BaseException:
            failed.set()
            raise
        finally:
            work(None)

    fut: Future[None] | None = None
    if executor is not None and n > chunk:
        fut = executor.submit(run)
    ok = False
    try:
        run()
        ok = True
    finally:
        # The helper may still be writing its last chunk: wait for it (or cancel it if it never
        # started) before the caller can see or drop the output.
        if fut is not None and not fut.cancel():
            if ok:
                fut.result()  # re-raises the helper's failure
            else:
                with contextlib.suppress(Exception):  # this thread's failure is propagating
                    fut.result()


def bernoulli_packed(nbytes: int, numerator: int, out: np.ndarray | None = None,
                     executor: Executor | None = None) -> np.ndarray:
    """``8 * nbytes`` independent exact Bernoulli(``numerator / 2**32``) bits, packed eight to a byte
    (cell ``i`` is bit ``i % 8``, least significant first, of byte ``i // 8``), as a ``uint8`` array.

    ``numerator == 2**31`` reads the bytes straight from the CSPRNG (fair bits); 0 and ``2**32`` need
    no randomness. Any other ``q`` uses the *interval sampler with lazy ties* on groups of eight cells:

    Each byte ``x`` (a pattern of eight cells) has probability ``P(x) = q**|x| (1-q)**(8-|x|)``, a
    multiple of ``2**-256`` (:func:`pattern_atoms`). Lay ``[0, 1)`` out as a fixed partition into one
    set of measure ``P(x)`` per pattern (:class:`IntervalTables`): the values ``u`` of a 16-bit grid are
    dealt out in runs, ``c(x) = floor(P(x) * 2**16)`` to pattern ``x`` (level 1, the lookup table);
    the remaining ``T = 2**16 - sum(c) <= 255`` grid cells, the *tie region* at the top, hold the
    residuals ``r(x) = P(x) - c(x) / 2**16 < 2**-16`` laid end to end. Pattern ``x`` owns
    ``c(x) / 2**16 + r(x) = P(x)`` of ``[0, 1)``. A group draws ``U`` uniform on ``[0, 1)`` lazily,
    most significant bits first, and outputs the pattern whose set holds ``U``:

    1. 16 bits: ``u = floor(U * 2**16)``. If ``u < S = sum(c)`` the pattern is ``lut[u]``: the whole
       cell ``[u, u + 1) / 2**16`` belongs to it. This decides with probability ``S / 2**16 >=
       1 - 255/65536``.
    2. Otherwise 32 more bits locate ``U`` in a cell of width ``2**-48`` of the tie region; if no
       residual boundary falls strictly inside it, that cell lies in one pattern's residual
       (:func:`resolve_level2`, a ``searchsorted`` on the boundaries rounded to this grid).
    3. Otherwise (probability at most ``256 * 2**-48`` per group) 208 more bits give ``U`` to
       ``2**-256``, the grid every boundary lies on, and an exact comparison decides
       (:func:`resolve_deep`).

    Each step returns the pattern whose set contains the dyadic cell holding ``U``, so
    ``Pr[pattern = x] = measure(set of x) = P(x)`` exactly: the eight cells of a group are
    independent Bernoulli(q) bits with no rounding anywhere (integer arithmetic only). Groups read
    disjoint random bits, so they are independent too. Cost: 16 bits per group, plus ``32 * T /
    2**16`` on average for ties: about 2.008 random bits per cell
    (:meth:`IntervalTables.expected_bits_per_cell`), against 8.03 for per-cell byte comparison.

    The work runs in chunks of :data:`PACKED_CHUNK` bytes of output; with ``executor``, one task of it
    takes chunks too, concurrently with the calling thread (reading ``/dev/urandom`` and NumPy's
    gather release the GIL). Every buffer that held random bytes or draws, other than the output, is
    overwritten with zeros before it is dropped.

    Args:
        nbytes: output bytes (``8 * nbytes`` cells).
        numerator: ``q * 2**32``, an integer in ``0..2**32``.
        out: optional ``uint8`` array of ``nbytes`` to write into (e.g. the final table).
        executor: optional executor lending one worker thread.

    Returns:
        The packed draws (``out`` if given).
    """
    _threshold_bytes(numerator)
    res = out if out is not None else np.empty(nbytes, dtype=np.uint8)
    if res.size != nbytes or res.dtype != np.uint8:
        msg = f"out must be a uint8 array of {nbytes} bytes"
        raise ValueError(msg)
    if numerator == 0 or numerator == _ONE:
        res.fill(0xFF if numerator else 0)
        return res
    if numerator == _HALF:

        def make_fill() -> Callable[[slice | None], None]:
            def fill(sl: slice | None) -> None:
                if sl is not None:
                    fill_secure(res[sl])  # fair bits are uniform bytes: straight into the output

            return fill

        return _share_chunks_into(res, 4 * PACKED_CHUNK, make_fill, executor)
    tab = interval_tables(numerator)

    def make_sampler() -> Callable[[slice | None], None]:
        raw = np.empty(2 * min(nbytes, PACKED_CHUNK), dtype=np.uint8)
        scratch = GroupScratch(min(nbytes, PACKED_CHUNK))

        def sample(sl: slice | None) -> None:
            if sl is None:
                raw.fill(0)
                scratch.wipe()
                return
            r = raw[: 2 * (sl.stop - sl.start)]
            fill_secure(r)
            # raw and scratch are refilled by the next chunk and wiped by sample(None) at the end
            sample_groups(tab, r, res[sl], scratch=scratch, keep_buffers=True)

        return sample

    return _share_chunks_into(res, PACKED_CHUNK, make_sampler, executor)


def _share_chunks_into(res: np.ndarray, chunk: int, make_worker: Callable[[], Callable[[slice | None], None]],
                       executor: Executor | None) -> np.ndarray:
    """:func:`_share_chunks` over ``res``; on failure ``res`` is wiped (no partial table of draws is
    left behind) and the error propagates."""
    try:
        _share_chunks(res.size, chunk, make_worker, executor)
    except BaseException:
        res.fill(0)
        raise
    return res
