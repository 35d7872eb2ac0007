"""The modular counter table: counters start as exact draws of D and gain their multiplicity mod k.

D(0) = alpha + (1 - alpha)/k, D(j) = (1 - alpha)/k. Each chi-square check below has a
false-failure probability of at most 1e-6 (stated at the check); sample sizes are fixed and nothing
is retried. The arithmetic checks are exact comparisons with a plain reference implementation, for
every modulus, both layouts, odd and even sizes, and batches naming both cells of one byte.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from panstream.calibration import MODULI, calibrate_frequency
from panstream.estimators.counters import (
    AUTO_BYTES_MAX_CELLS,
    CounterTable,
    choose_layout,
    payload_counter,
    payload_problem,
    payload_size,
)

LAYOUTS = ["bytes", "packed"]


def law_d(k: int, alpha: Fraction) -> np.ndarray:
    beta = (1 - alpha) / k
    return np.array([float(alpha + beta)] + [float(beta)] * (k - 1))


def reference(c0: np.ndarray, idx: np.ndarray, k: int) -> np.ndarray:
    return ((c0.astype(np.int64) + np.bincount(idx, minlength=c0.size)) % k).astype(np.uint8)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("k", "eps"), [(4, 1.0), (16, 1.0), (16, 0.3), (64, 2.0)])
def test_fresh_counters_follow_d_exactly(layout: str, k: int, eps: float) -> None:
    """2**20 - 1 fresh counters (odd: a padding nibble when packed): the histogram fits D (chi-square,
    alpha 5e-7), and pairs of neighbours (which share a byte when packed) are independent
    (chi-square of the k x k table of pairs against the product of D, alpha 5e-7): 1e-6 together."""
    n = (1 << 20) - 1
    cal = calibrate_frequency(eps, k)
    t = CounterTable.random(n, k, cal.numerator, layout)
    c = t.counters()
    assert c.dtype == np.uint8 and c.size == n and int(c.max()) < k
    d = law_d(k, cal.alpha)
    hist = t.histogram()
    assert hist.tolist() == np.bincount(c, minlength=k).tolist()
    assert stats.chisquare(hist, n * d).pvalue > 5e-7
    if k <= 16:  # k x k pair cells stay well filled
        pairs = np.bincount(c[0 : n - 1 : 2].astype(np.int64) * k + c[1::2], minlength=k * k)
        expected = (n // 2) * np.outer(d, d).ravel()
        assert stats.chisquare(pairs, expected).pvalue > 5e-7


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("k", MODULI)
@pytest.mark.parametrize("n", [1, 2, 13, 1000])
def test_adding_a_batch_adds_each_multiplicity_mod_k(layout: str, k: int, n: int) -> None:
    """Duplicates, both cells of one byte in one batch, counts far above k: exact."""
    rng = np.random.default_rng([k, n])  # synthetic counters and batches only
    c0 = rng.integers(0, k, n).astype(np.uint8)
    t = CounterTable.from_counters(c0, k, layout)
    assert t.counters().tolist() == c0.tolist()
    idx = np.concatenate([rng.integers(0, n, 3000), np.repeat(np.arange(min(n, 4)), k + 1)])
    t.add(idx.astype(np.intp))
    want = reference(c0, idx, k)
    assert t.counters().tolist() == want.tolist()
    assert t.histogram().tolist() == np.bincount(want, minlength=k).tolist()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_large_batches_and_many_batches_agree_with_the_reference(layout: str) -> None:
    rng = np.random.default_rng(7)
    n, k = (1 << 16) + 1, 16
    c0 = rng.integers(0, k, n).astype(np.uint8)
    t = CounterTable.from_counters(c0, k, layout)
    total = np.zeros(0, dtype=np.int64)
    for size in (1 << 19, 1, 12345, 0):
        idx = rng.integers(0, n, size)
        total = np.concatenate([total, idx])
        t.add(idx.astype(np.intp))
    assert t.counters().tolist() == reference(c0, total, k).tolist()


def test_a_count_of_k_leaves_the_counter_where_it_was() -> None:
    """Aliasing, stated honestly: n arrivals and n + k arrivals give the same counter."""
    for layout in LAYOUTS:
        t = CounterTable.from_counters(np.array([5, 5, 5], dtype=np.uint8), 8, layout)
        t.add(np.array([0] * 8 + [1] * 9 + [2] * 16, dtype=np.intp))
        assert t.counters().tolist() == [5, 6, 5]


@pytest.mark.parametrize("k", MODULI)
@pytest.mark.parametrize("n", [1, 12, 13])
def test_payload_round_trips_in_both_layouts(k: int, n: int) -> None:
    rng = np.random.default_rng([k, n, 1])
    c = rng.integers(0, k, n).astype(np.uint8)
    views = []
    for layout in LAYOUTS:
        t = CounterTable.from_counters(c, k, layout)
        v = t.payload_view()
        p = np.frombuffer(v, dtype=np.uint8).copy()
        t.wipe_payload_view(v)
        views.append(p)
        assert p.size == payload_size(n, k)
        assert payload_problem(n, k, p) is None
        assert [payload_counter(p, i, k) for i in range(n)] == c.tolist()
        for lay2 in LAYOUTS:
            back = CounterTable._from_payload_array(n, k, p.copy(), lay2)
            assert back.counters().tolist() == c.tolist()
    assert views[0].tolist() == views[1].tolist()  # one payload format, whatever the layout


def test_payload_problems_are_named() -> None:
    assert "cannot hold" in str(payload_problem(13, 16, np.zeros(6, dtype=np.uint8)))
    assert "padding nibble" in str(payload_problem(13, 16, np.array([0] * 6 + [0x10], np.uint8)))
    assert "below their counter" in str(payload_problem(2, 4, np.array([0x01], np.uint8)))
    assert "below their counter" in str(payload_problem(3, 64, np.array([0, 4, 1], np.uint8)))
    assert payload_problem(3, 64, np.array([0, 4, 252], np.uint8)) is None


def test_the_field_layout_is_the_documented_one() -> None:
    """docs/snapshot-format.md: k <= 16, cell i in nibble i % 2 (low first), value c * 16 / k."""
    t = CounterTable.from_counters(np.array([1, 2, 3], dtype=np.uint8), 4, "packed")
    v = t.payload_view()
    assert bytes(v) == bytes([1 * 4 | (2 * 4) << 4, 3 * 4])
    t = CounterTable.from_counters(np.array([1, 63], dtype=np.uint8), 64, "bytes")
    assert bytes(t.payload_view()) == bytes([4, 252])


def test_packed_views_are_the_live_table_and_byte_copies_are_wiped() -> None:
    t = CounterTable.from_counters(np.arange(16, dtype=np.uint8), 16, "packed")
    v = t.payload_view()
    t.wipe_payload_view(v)
    assert bytes(v) != bytes(len(v))  # the live packed table is never zeroed by a save
    t = CounterTable.from_counters(np.arange(16, dtype=np.uint8), 16, "bytes")
    v = t.payload_view()
    t.wipe_payload_view(v)
    assert bytes(v) == bytes(len(v))  # the packed copy of a byte table is


def test_wipe_zeroes_the_table() -> None:
    t = CounterTable.random(1000, 16, calibrate_frequency(1.0, 16).numerator)
    t.wipe()
    assert not t.counters().any()


def test_layout_choice() -> None:
    assert choose_layout(AUTO_BYTES_MAX_CELLS, 16) == "bytes"
    assert choose_layout(AUTO_BYTES_MAX_CELLS + 1, 16) == "packed"
    assert choose_layout(AUTO_BYTES_MAX_CELLS + 1, 32) == "bytes"  # a byte per cell is packed
    assert choose_layout(10, 64, "packed") == "bytes"
    with pytest.raises(ValueError, match="layout"):
        choose_layout(10, 16, "sparse")
