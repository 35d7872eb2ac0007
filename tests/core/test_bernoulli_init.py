"""Exact D0 = Bernoulli(q) init for q != 1/2: the interval sampler of ``bernoulli_packed``.

Exactness is checked with integers only: for each q, the probability mass the sampler's own tables
and decision functions give each of the 256 patterns of a byte (level-1 lookup counts, level-2 cells,
and the pieces of the deepest level) adds up to exactly P(x) = q^|x| (1-q)^(8-|x|), computed
independently with ``fractions.Fraction``. The statistical checks only guard the wiring (bit order,
chunking, threads): each has a stated false-failure probability of at most 1e-6 (Bonferroni over
its tests), fixed sample sizes and no retries.
"""

from __future__ import annotations

import math
import os
from bisect import bisect_right
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from itertools import combinations

import numpy as np
import pytest
from scipy import stats

from panstream import randomness
from panstream.errors import ConfigurationError
from panstream.estimators.bittable import BitTable
from panstream.randomness import (
    DEEP_BITS,
    LEVEL1_BITS,
    LEVEL2_BITS,
    GroupScratch,
    IntervalTables,
    bernoulli_packed,
    dyadic_at_most,
    interval_tables,
    pattern_atoms,
    resolve_deep,
    resolve_level2,
    sample_groups,
    secure_bytes,
)

ONE = 1 << 32
ATOMS = 256  # every pattern probability is a multiple of 2**-256
SHIFT1 = ATOMS - LEVEL1_BITS  # atoms per level-1 value
SHIFT2 = ATOMS - LEVEL1_BITS - LEVEL2_BITS  # atoms per level-2 cell (= DEEP_BITS)


def rr_numerator(eps: float) -> int:
    """q = 1/(1 + e^eps) rounded down to the 2**-32 grid (the randomized-response calibration)."""
    return dyadic_at_most(Fraction(1) / (1 + Fraction(math.exp(eps))))


RR = {eps: rr_numerator(eps) for eps in (0.5, 1.0, 2.0)}
EXACT_QS = [
    *RR.values(),
    1,  # q = 2**-32: every pattern but 0 is far below the level-1 grid
    ONE - 1,  # q = 1 - 2**-32
    1 << 31,  # q = 1/2: no ties at all
    3,
    0x9C40_0000,
    0x1234_5679,
    ONE - 0x1234_5679,
]


def fraction_pattern_probability(numerator: int, x: int) -> Fraction:
    q = Fraction(numerator, ONE)
    a = x.bit_count()
    return q**a * (1 - q) ** (8 - a)


def level2_pattern(tab: IntervalTables, v: int) -> tuple[int, bool]:
    """Call the sampler's level-2 decision on the tie-region cell ``v`` (units of 2**-48)."""
    u = np.array([tab.split + (v >> LEVEL2_BITS)], dtype=np.uint16)
    w = np.array([v & (ONE - 1)], dtype=np.uint32)
    patterns, deep = resolve_level2(tab, u, w)
    return int(patterns[0]), bool(deep.size)


def deep_pattern(tab: IntervalTables, offset: int) -> int:
    """Call the sampler's deepest decision for ``U`` at ``offset`` atoms into the tie region."""
    absolute = (tab.split << SHIFT1) + offset
    prefix = np.frombuffer(absolute.to_bytes(32, "big"), dtype=np.uint8).copy()
    return resolve_deep(tab, prefix)


def masses_from_sampler(tab: IntervalTables) -> list[int]:
    """The mass, in atoms of 2**-256, that the sampler's decisions give each pattern.

    Level 1: the lookup table's run lengths. Level 2 and the deepest level are piecewise constant
    (they are monotone searches): every breakpoint is one of the boundaries, so calling the decision
    at both ends of each piece and weighting by the piece's length covers every cell exactly.
    """
    mass = [0] * 256
    lut_counts = np.bincount(tab.lut[: tab.split], minlength=256)
    for x in range(256):
        mass[x] += int(lut_counts[x]) << SHIFT1
    end2 = tab.ties << LEVEL2_BITS  # level-2 cells v in [0, end2)
    if end2 == 0:
        return mass
    cuts = {0, end2}
    for f, c in zip(tab.floor2.tolist(), tab.ceil2.tolist(), strict=True):
        cuts.update(p for p in (f, f + 1, c) if 0 <= p <= end2)
    edges = sorted(cuts)
    for lo, hi in zip(edges, edges[1:], strict=False):
        x_lo, deep_lo = level2_pattern(tab, lo)
        x_hi, deep_hi = level2_pattern(tab, hi - 1)
        assert deep_lo == deep_hi
        if not deep_lo:
            assert x_lo == x_hi
            mass[x_lo] += (hi - lo) << SHIFT2
            continue
        assert hi == lo + 1  # a deep piece is one cell containing a boundary
        cell_lo, cell_hi = lo << SHIFT2, hi << SHIFT2
        inner = sorted({e for e in tab.exact if cell_lo < e < cell_hi} | {cell_lo, cell_hi})
        for a, b in zip(inner, inner[1:], strict=False):
            x_a, x_b = deep_pattern(tab, a), deep_pattern(tab, b - 1)
            assert x_a == x_b
            mass[x_a] += b - a
    return mass


@pytest.mark.parametrize("numerator", EXACT_QS)
def test_pattern_atoms_are_the_exact_probabilities(numerator: int) -> None:
    atoms = pattern_atoms(numerator)
    assert sum(atoms) == 1 << ATOMS
    for x in range(256):
        assert Fraction(atoms[x], 1 << ATOMS) == fraction_pattern_probability(numerator, x)


@pytest.mark.parametrize("numerator", EXACT_QS)
def test_sampler_assigns_each_pattern_exactly_its_probability(numerator: int) -> None:
    """Level-1 counts + level-2 cells + deepest pieces = P(x) for all 256 patterns, exactly."""
    tab = interval_tables(numerator)
    assert 0 <= tab.ties <= 255
    mass = masses_from_sampler(tab)
    for x in range(256):
        assert Fraction(mass[x], 1 << ATOMS) == fraction_pattern_probability(numerator, x), x
    assert sum(mass) == 1 << ATOMS


@pytest.mark.parametrize("numerator", EXACT_QS)
def test_tie_placeholder_is_the_least_likely_pattern(numerator: int) -> None:
    """Ties are found among the groups whose lookup shows the placeholder: it fills the whole tie
    region and is the rarest pattern, so few decided groups are candidates too."""
    tab = interval_tables(numerator)
    assert (tab.lut[tab.split :] == tab.placeholder).all()
    atoms = pattern_atoms(numerator)
    assert atoms[tab.placeholder] == min(atoms)


def test_rr_tables_tie_rarely_and_cost_about_two_bits_per_cell() -> None:
    for numerator in RR.values():
        tab = interval_tables(numerator)
        assert tab.ties / 65536 < 255 / 65536
        assert 2 <= tab.expected_bits_per_cell() < 2.01
        assert tab.deep_cells().size <= 256


def reference_pattern(numerator: int, u_atoms: int) -> int:
    """The pattern owning ``U = u_atoms / 2**256``, from the partition's definition (not the
    sampler's tables): level-1 runs of floor(P(x) 2**16) in pattern order, then the residuals."""
    atoms = pattern_atoms(numerator)
    starts, owners, pos = [], [], 0
    for x, a in enumerate(atoms):
        c = (a >> SHIFT1) << SHIFT1
        starts.append(pos)
        owners.append(x)
        pos += c
    for x, a in enumerate(atoms):
        starts.append(pos)
        owners.append(x)
        pos += a - ((a >> SHIFT1) << SHIFT1)
    assert pos == 1 << ATOMS
    return owners[bisect_right(starts, u_atoms) - 1]


class ScriptedBytes:
    """A stand-in for the CSPRNG that hands out scripted bytes in order (tests only)."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def __call__(self, n: int) -> np.ndarray:
        chunk = self.data[self.pos : self.pos + n]
        assert len(chunk) == n, "sampler read more bytes than scripted"
        self.pos += n
        return np.frombuffer(chunk, dtype=np.uint8).copy()


@pytest.mark.parametrize("numerator", [RR[1.0], 1, ONE - 1])
def test_every_level1_value_through_the_real_path(numerator: int) -> None:
    """All 65,536 level-1 values through ``sample_groups``: the decided ones give exactly c(x) per
    pattern, each tie reads 4 bytes (and 26 more if deep) and lands where the definition says."""
    tab = interval_tables(numerator)
    u = np.arange(65536, dtype="<u2")
    raw = u.view(np.uint8).copy()
    tie_us = list(range(tab.split, 65536))
    level2, deep = bytearray(), bytearray()  # all ties' 4 bytes are read first, then deep ones
    expected_ties = []
    for t in tie_us:
        w = int.from_bytes(os.urandom(4), "little")
        level2 += w.to_bytes(4, "little")
        v = ((t - tab.split) << 32) | w
        if np.any((tab.floor2 == v) & (tab.floor2 != tab.ceil2)):
            rest = os.urandom(DEEP_BITS // 8)
            deep += rest
            u_atoms = (t << SHIFT1) | (w << SHIFT2) | int.from_bytes(rest, "big")
        else:
            u_atoms = (t << SHIFT1) | (w << SHIFT2)
        expected_ties.append(reference_pattern(numerator, u_atoms))
    script = level2 + deep
    out = np.empty(65536, dtype=np.uint8)
    read = ScriptedBytes(bytes(script))
    scratch = GroupScratch(1 << 17)
    sample_groups(tab, raw, out, read, scratch)
    assert read.pos == len(script)
    assert not raw.any(), "random bytes must be wiped"
    assert not scratch.index.any() and not scratch.flag.any(), "level-1 values must be wiped"
    np.testing.assert_array_equal(np.bincount(out[: tab.split], minlength=256), tab.counts)
    for t, x in zip(tie_us, expected_ties, strict=True):
        assert out[t] == x
    for t in range(0, tab.split, 97):
        assert out[t] == reference_pattern(numerator, t << SHIFT1)


@pytest.mark.parametrize("numerator", [RR[0.5], RR[2.0], 1])
def test_deep_ties_on_and_next_to_every_boundary(numerator: int) -> None:
    """U placed exactly on, and one atom below, each residual boundary inside a deep level-2 cell:
    the real path (``sample_groups`` reading scripted bytes) returns the owner by definition."""
    tab = interval_tables(numerator)
    cases = []
    for e in tab.exact[1:-1]:
        if e % (1 << SHIFT2) == 0:
            continue  # on the level-2 grid: not deep
        for off in (e - 1, e):
            cases.append((tab.split << SHIFT1) + off)
    assert cases
    raw = bytearray()
    script = bytearray()
    for u_atoms in cases:
        top = u_atoms >> SHIFT1
        raw += top.to_bytes(2, "little")
        script += ((u_atoms >> SHIFT2) & (ONE - 1)).to_bytes(4, "little")
    for u_atoms in cases:  # the deep bytes are read after all level-2 bytes, in group order
        script += (u_atoms & ((1 << SHIFT2) - 1)).to_bytes(DEEP_BITS // 8, "big")
    out = np.empty(len(cases), dtype=np.uint8)
    sample_groups(tab, np.frombuffer(bytes(raw), dtype=np.uint8).copy(), out, ScriptedBytes(bytes(script)))
    assert out.tolist() == [reference_pattern(numerator, c) for c in cases]


# ------------------------------------------------------------------------------------ statistics
N_BYTES = 1 << 22  # 2**25 cells per q


def pairwise_and_marginals_ok(packed: np.ndarray, q: float, alpha: float) -> None:
    """Per bit position, ones ~ Bin(N, q); per pair of positions in a byte, both-ones ~ Bin(N, q^2).
    36 exact binomial tests at alpha/36 each: false failure at most alpha in total."""
    n = packed.size
    bits = [((packed >> j) & 1).astype(bool) for j in range(8)]
    each = alpha / 36
    for j in range(8):
        k = int(np.count_nonzero(bits[j]))
        assert stats.binomtest(k, n, q).pvalue > each, f"bit {j}: {k} ones in {n}"
    for i, j in combinations(range(8), 2):
        k = int(np.count_nonzero(bits[i] & bits[j]))
        assert stats.binomtest(k, n, q * q).pvalue > each, f"bits {i},{j}: {k} both"


@pytest.mark.parametrize("eps", sorted(RR))
def test_bits_have_frequency_q_and_are_pairwise_independent(eps: float) -> None:
    """2**22 bytes from ``bernoulli_packed`` with the helper thread: alpha = 1e-6 per q."""
    numerator = RR[eps]
    with ThreadPoolExecutor(1) as pool:
        packed = bernoulli_packed(N_BYTES, numerator, executor=pool)
    pairwise_and_marginals_ok(packed, numerator / ONE, 1e-6)


def test_all_256_patterns_chi_square() -> None:
    """q(eps = 0.5), 2**22 bytes: the 256 byte values against P(x) (smallest expected count 1,700),
    chi-square at alpha = 1e-6."""
    numerator = RR[0.5]
    counts = np.bincount(bernoulli_packed(N_BYTES, numerator), minlength=256)
    expected = np.array([float(fraction_pattern_probability(numerator, x)) for x in range(256)]) * N_BYTES
    assert expected.min() > 1000
    assert stats.chisquare(counts, expected).pvalue > 1e-6


def test_extreme_q_are_nearly_constant() -> None:
    """q = 2**-32 over 2**23 cells: ones ~ Bin(2**23, 2**-32), mean 0.002; P(>= 3 ones) < 2e-9.
    The same for zeros at q = 1 - 2**-32. Together below 1e-8."""
    lo = bernoulli_packed(1 << 20, 1)
    assert int(np.bitwise_count(lo).sum()) <= 2
    hi = bernoulli_packed(1 << 20, ONE - 1)
    assert 8 * hi.size - int(np.bitwise_count(hi).sum()) <= 2


def test_degenerate_and_fair_q() -> None:
    """q = 0 and 1 need no randomness; q = 1/2 is plain CSPRNG bytes (ones ~ Bin, alpha 1e-6)."""
    assert not bernoulli_packed(1000, 0).any()
    assert (bernoulli_packed(1000, ONE) == 0xFF).all()
    fair = bernoulli_packed(1 << 20, 1 << 31)
    assert stats.binomtest(int(np.bitwise_count(fair).sum()), 8 << 20, 0.5).pvalue > 1e-6
    assert bernoulli_packed(0, RR[1.0]).size == 0
    with pytest.raises(ConfigurationError):
        bernoulli_packed(10, ONE + 1)
    with pytest.raises(ConfigurationError):
        bernoulli_packed(10, -1)
    with pytest.raises(ValueError):
        bernoulli_packed(10, RR[1.0], out=np.empty(9, dtype=np.uint8))


def test_writes_into_out_and_wipes_every_random_buffer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every array the CSPRNG filled (level-1 chunks, tie bytes, deep bytes) is zero afterwards,
    except the output itself; several chunks and the helper thread are used. The output's ones pass
    a binomial test at alpha 1e-6."""
    filled: list[np.ndarray] = []
    real = randomness.fill_secure

    def recording_fill(buf: np.ndarray) -> np.ndarray:
        filled.append(buf)
        return real(buf)

    monkeypatch.setattr(randomness, "fill_secure", recording_fill)
    nbytes = 3 * randomness.PACKED_CHUNK + 12345
    out = np.full(nbytes, 0xAA, dtype=np.uint8)
    with ThreadPoolExecutor(1) as pool:
        res = bernoulli_packed(nbytes, RR[1.0], out=out, executor=pool)
    assert res is out
    assert len(filled) >= 4 + 4  # at least 4 level-1 chunks and their tie bytes
    for buf in filled:
        assert not np.shares_memory(buf, out)
        assert not buf.any()
    ones = int(np.bitwise_count(out).sum())
    assert stats.binomtest(ones, 8 * nbytes, RR[1.0] / ONE).pvalue > 1e-6


def test_reused_buffers_are_wiped_once_each_thread_is_done(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 38: each thread refills its random bytes and level-1 scratch chunk after chunk and wipes
    them once, when its last chunk is done (``keep_buffers``). Keeping them between chunks changes
    no draw: the same bytes give the same groups as with a wipe after every chunk. Afterwards every
    thread's scratch (the level-1 values) is zero."""
    tab = interval_tables(RR[1.0])
    raw = secure_bytes(2 * 4096)
    kept, wiped = np.empty(4096, dtype=np.uint8), np.empty(4096, dtype=np.uint8)
    scratch = GroupScratch(4096)
    twin = raw.copy()
    sample_groups(tab, raw, kept, scratch=scratch, keep_buffers=True, read=ScriptedBytes(b"\0" * 4096))
    assert raw.any() and scratch.index.any(), "with keep_buffers the caller wipes raw and scratch"
    sample_groups(tab, twin, wiped, scratch=GroupScratch(4096), read=ScriptedBytes(b"\0" * 4096))
    np.testing.assert_array_equal(kept, wiped)
    for arr in (raw, scratch.index, kept, wiped):
        arr.fill(0)

    made: list[GroupScratch] = []
    real = randomness.GroupScratch

    def recording_scratch(n: int) -> GroupScratch:
        made.append(real(n))
        return made[-1]

    monkeypatch.setattr(randomness, "GroupScratch", recording_scratch)
    with ThreadPoolExecutor(1) as pool:
        bernoulli_packed(3 * randomness.PACKED_CHUNK + 7, RR[1.0], executor=pool).fill(0)
    assert made, "the sampler used its scratch"
    for scr in made:
        assert not scr.index.any() and not scr.flag.any(), "level-1 values must be wiped"


def test_a_failing_read_propagates_and_wipes_the_output(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    real = randomness.fill_secure

    def flaky(buf: np.ndarray) -> np.ndarray:
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError("simulated /dev/urandom failure")
        return real(buf)

    monkeypatch.setattr(randomness, "fill_secure", flaky)
    out = np.full(8 * randomness.PACKED_CHUNK, 0xAA, dtype=np.uint8)
    with ThreadPoolExecutor(1) as pool, pytest.raises(OSError, match="simulated"):
        bernoulli_packed(out.size, RR[1.0], out=out, executor=pool)
    assert not out.any(), "a failed init leaves no partial draws behind"


# ------------------------------------------------------------------------------------ the table
@pytest.mark.parametrize("layout", ["bytes", "packed"])
def test_table_init_with_q(layout: str) -> None:
    """BitTable.random with q(eps = 1): padding stays zero, ones ~ Bin(n, q) at alpha 1e-6."""
    n = (1 << 21) + 5
    t = BitTable.random(n, layout, q_numerator=RR[1.0])
    packed = t.to_packed()
    assert packed[-1] >> 5 == 0
    assert stats.binomtest(t.count_ones(), n, RR[1.0] / ONE).pvalue > 1e-6
    assert BitTable.from_packed(n, packed, layout).bits().tolist() == t.bits().tolist()


def test_table_default_is_still_the_fair_byte_path(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> np.ndarray:
        raise AssertionError("q = 1/2 must read plain CSPRNG bytes")

    import panstream.estimators.bittable as table_mod

    monkeypatch.setattr(table_mod, "bernoulli_packed", refuse)
    t = BitTable.random(1 << 12)
    assert t.size == 1 << 12
