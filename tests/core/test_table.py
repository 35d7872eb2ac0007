"""The bit table's law: D0 = Bernoulli(q) at init (a fair coin for tight and paper, q = 1/(1+e^eps)
rounded up for rr), exactly one D1 = Bernoulli(p) draw per touched cell.

Each binomial or chi-square check below has a false-failure probability of at most 1e-6 (stated at
the check); sample sizes are fixed and nothing is retried. Both layouts are checked, and batches both
below and above the size at which drawing is pipelined in a helper thread. The packed layout's
updates are checked on both of its write paths (issue 38): the C kernel ("packed") and the NumPy
passes it falls back to ("packed-numpy", as with ``PANSTREAM_NATIVE=0`` or no compiled kernel).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import panstream as ps
from panstream.estimators import bittable
from panstream.estimators.bittable import BitTable

ALPHA = 1e-6
LAYOUTS = ["bytes", "packed"]
#: The layouts of an update, the packed one on each write path.
WRITES = ["bytes", "packed", "packed-numpy"]


def use_write(write: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Select the write path named by ``write`` and return its layout. "packed" needs the C kernel
    (built by ``pip install -e .`` or ``python3 setup.py build_ext --inplace``)."""
    if write == "packed-numpy":
        monkeypatch.setattr(bittable, "_native", None)
        return "packed"
    if write == "packed" and bittable._native is None:
        pytest.skip("the C kernel panstream.estimators._packed is not built (or PANSTREAM_NATIVE=0)")
    return write


def binomial_ok(k: int, n: int, p: float, alpha: float = ALPHA) -> bool:
    """Two-sided exact binomial test: False with probability <= alpha when k ~ Bin(n, p)."""
    return bool(stats.binomtest(k, n, p).pvalue > alpha)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_init_bits_are_fair_coins_and_independent(layout: str) -> None:
    """2**20 fresh cells: ones ~ Bin(n, 1/2) (alpha 5e-7) and the four patterns of adjacent
    pairs are uniform (chi-square, alpha 5e-7): together at most 1e-6."""
    n = 1 << 20
    bits = BitTable.random(n, layout).bits()
    assert bits.dtype == np.uint8 and set(np.unique(bits)) <= {0, 1}
    assert binomial_ok(int(bits.sum()), n, 0.5, alpha=5e-7)
    pairs = np.bincount(bits[0::2] * 2 + bits[1::2], minlength=4)
    assert stats.chisquare(pairs).pvalue > 5e-7


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("eps", [1.0, 3.0])
def test_init_bits_for_q_below_one_half_are_bernoulli_q_and_independent(layout: str,
                                                                         eps: float) -> None:
    """A fresh rr table (q = 0.269 at epsilon 1, 0.047 at 3) of 2**20 + 13 cells, so the last
    byte is partial and the sampler's chunks do not divide the table. Three checks, each at alpha
    3e-7 (together at most 1e-6):

    * ones ~ Bin(n, q) (exact binomial test);
    * the four patterns of adjacent pairs have probabilities q^2, q(1-q), (1-q)q, (1-q)^2
      (chi-square, 3 df): independence between neighbouring cells;
    * the count of ones at each bit position i % 8 is Bin(n_j, q): sum of the squared
      standardized counts ~ chi-square(8) (normal approximation at n_j = 131,073), which a
      packing that moved bits inside a byte, or drew some positions from another law, fails.
    """
    n = (1 << 20) + 13
    qn = ps.calibrate(eps, "rr").q_numerator
    q = qn / 2**32
    bits = BitTable.random(n, layout, q_numerator=qn).bits()
    assert bits.size == n and bits.dtype == np.uint8 and set(np.unique(bits)) <= {0, 1}
    assert binomial_ok(int(bits.sum()), n, q, alpha=3e-7)
    m = n - 1
    pairs = np.bincount(bits[0:m:2] * 2 + bits[1:m:2], minlength=4)
    law = np.array([(1 - q) ** 2, (1 - q) * q, q * (1 - q), q * q])
    assert stats.chisquare(pairs, law * pairs.sum()).pvalue > 3e-7
    pos = np.arange(n) % 8
    nj = np.bincount(pos, minlength=8)
    ones = np.bincount(pos, weights=bits, minlength=8)
    z2 = float((((ones - nj * q) ** 2) / (nj * q * (1 - q))).sum())
    assert stats.chi2.sf(z2, 8) > 3e-7


def test_the_packed_init_of_q_sets_no_padding_bit() -> None:
    """Padding bits past the last cell stay 0 (the format requires it) for any q."""
    for size in (1, 13, (1 << 18) + 5):
        t = BitTable.random(size, "packed", q_numerator=1 << 32)  # q = 1: every cell is 1
        packed = t.to_packed()
        assert t.count_ones() == size and len(packed) == (size + 7) // 8
        assert packed[-1] >> (size % 8 or 8) == 0


@pytest.mark.parametrize("layout", LAYOUTS)
def test_padding_bits_are_zero_when_packed(layout: str) -> None:
    t = BitTable.random(13, layout)
    packed = t.to_packed()
    assert len(packed) == 2 and packed[1] >> 5 == 0
    assert BitTable.from_packed(13, packed, layout).bits().tolist() == t.bits().tolist()


@pytest.mark.parametrize("write", WRITES)
@pytest.mark.parametrize(("batch", "calibration"), [(1 << 12, "rr"), (1 << 19, "rr"),
                                                    (1 << 12, "tight"), (1 << 19, "tight")])
def test_touched_cells_hold_d1_untouched_keep_d0(write: str, batch: int, calibration: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Touch every other cell once: touched ones ~ Bin(., p), untouched ~ Bin(., q) (q = 0.269 for
    rr at epsilon 1, 1/2 for tight). Two tests at alpha 5e-7 each: at most 1e-6 together."""
    layout = use_write(write, monkeypatch)
    n = 1 << 20
    est = ps.DensityEstimator(ps.Universe.range(n), epsilon=1.0, calibration=calibration,
                              layout=layout)
    touched = np.arange(0, n, 2)
    for start in range(0, touched.size, batch):
        est.update_indices(touched[start:start + batch].copy())
    bits = est.bits()
    assert binomial_ok(int(bits[0::2].sum()), n // 2, float(est.p), alpha=5e-7)
    assert binomial_ok(int(bits[1::2].sum()), n // 2, float(est.q), alpha=5e-7)


@pytest.mark.parametrize("write", WRITES)
def test_duplicates_in_a_batch_leave_exactly_one_d1_draw(write: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Each of 2**16 cells named 7 times in one shuffled batch (plus neighbours sharing its byte):
    its bit is still Bernoulli(p). OR-ing the draws would give 1-(1-p)^7 ~ 0.99999, AND-ing p^7 ~ 0.24:
    both fail the binomial test (alpha 1e-6) by hundreds of standard deviations."""
    layout = use_write(write, monkeypatch)
    n = 1 << 16
    est = ps.DensityEstimator(ps.Universe.range(n), epsilon=1.0, layout=layout)
    idx = np.repeat(np.arange(n), 7)
    np.random.default_rng(1).shuffle(idx)  # synthetic order only
    est.update_indices(idx)
    assert binomial_ok(est.count_ones(), n, float(est.p))


@pytest.mark.parametrize("write", WRITES)
def test_many_batches_on_the_same_cells_still_one_d1_law(write: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ten separate batches touching the same 2**16 cells: the final bits are Bin(n, p) (alpha 1e-6)."""
    layout = use_write(write, monkeypatch)
    n = 1 << 16
    est = ps.DensityEstimator(ps.Universe.range(n), epsilon=0.5, calibration="paper", layout=layout)
    for _ in range(10):
        est.update_indices(np.arange(n))
    assert binomial_ok(est.count_ones(), n, float(est.p))


def test_layouts_agree_on_serialization_and_count() -> None:
    t = BitTable.random(1000, "bytes")
    packed = t.to_packed()
    u = BitTable.from_packed(1000, packed, "packed")
    assert u.count_ones() == t.count_ones() == int(t.bits().sum())
    np.testing.assert_array_equal(u.bits(), t.bits())
    assert u.to_packed() == packed


def test_auto_layout_packs_only_large_universes() -> None:
    from panstream.estimators.bittable import AUTO_BYTES_MAX_CELLS, choose_layout

    assert choose_layout(AUTO_BYTES_MAX_CELLS) == "bytes"
    assert choose_layout(AUTO_BYTES_MAX_CELLS + 1) == "packed"
    with pytest.raises(ValueError):
        choose_layout(10, "sparse")
