"""The samplers behind every privacy draw: exact probabilities from the OS CSPRNG.

Statistical checks use fixed sample sizes and a two-sided threshold whose false-failure probability
is stated per test (at most 1e-6 each); nothing is retried.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from panstream import randomness
from panstream.randomness import P_BITS, bernoulli, dyadic_at_most, probability

ALPHA = 1e-6


def test_probabilities_are_exact_dyadic_rationals() -> None:
    num = dyadic_at_most(0.8)
    assert probability(num) == Fraction(num, 1 << P_BITS)
    assert probability(num) <= Fraction(0.8) < probability(num + 1)
    assert dyadic_at_most(1) == 1 << P_BITS
    with pytest.raises(ValueError):
        dyadic_at_most(1.5)


def test_lazy_byte_comparison_realizes_exactly_p(monkeypatch: pytest.MonkeyPatch) -> None:
    """Feed the sampler every pair of leading bytes: the result is exactly ``U < p`` each time.

    p = 0x9C40_0000 / 2**32 has two significant bytes, so the first byte decides unless it equals
    0x9C, and then the second byte decides. Enumerating all 65,536 (byte0, byte1) pairs shows the
    fraction of ones is exactly p.
    """
    numerator = 0x9C40_0000
    first = np.repeat(np.arange(256, dtype=np.uint8), 256)
    second = np.tile(np.arange(256, dtype=np.uint8), 256)
    calls: list[int] = []

    def fake_secure_bytes(n: int) -> np.ndarray:
        calls.append(n)
        if len(calls) == 1:
            return first.copy()
        if len(calls) == 2:  # only the ties with 0x9C read a second byte, in order
            return second[first == 0x9C].copy()
        return np.zeros(n, dtype=np.uint8)  # later bytes of p are 0: ties there end in 0

    monkeypatch.setattr(randomness, "secure_bytes", fake_secure_bytes)
    draws = bernoulli(first.size, numerator)
    u = first.astype(np.int64) * 256 + second
    expected = u < (numerator >> 16)
    assert calls[:2] == [65536, 256]
    np.testing.assert_array_equal(draws, expected)
    assert Fraction(int(draws.sum()), 65536) == probability(numerator)


@pytest.mark.parametrize("p", [0.5, 0.75, 0.8160602794142788, 0.999])
def test_bernoulli_frequency_matches_p(p: float) -> None:
    """2**20 draws: the count of ones passes a two-sided binomial test at alpha = 1e-6."""
    num = dyadic_at_most(p)
    n = 1 << 20
    k = int(bernoulli(n, num).sum())
    assert stats.binomtest(k, n, float(probability(num))).pvalue > ALPHA


def test_secure_bytes_are_uniform() -> None:
    """2**22 bytes: chi-square over the 256 values at alpha = 1e-6."""
    counts = np.bincount(randomness.secure_bytes(1 << 22), minlength=256)
    assert stats.chisquare(counts).pvalue > ALPHA


def test_secure_uniform_below_covers_the_range_without_bias() -> None:
    """6,000 draws below 6: chi-square at a nominal 5e-7. With 1,000 expected per bin the real tail
    is 1.08x the asymptotic one (exact Poisson convolution): false failure 5.4e-7 (at a nominal
    1e-6 it was 1.1e-6). The 2**22-byte test above has 16,384 per bin: real = nominal = 1e-6."""
    counts = np.bincount([randomness.secure_uniform_below(6) for _ in range(6000)], minlength=6)
    assert stats.chisquare(counts).pvalue > ALPHA / 2
