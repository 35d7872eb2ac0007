"""The release samplers draw exactly the law they claim.

Each statistical test uses a fixed number of samples and a threshold whose false-failure probability
is at most 1e-6; nothing retries. Binomial checks use exact quantiles (5e-7 per side). Chi-square
checks use the asymptotic quantile at a *nominal* 5e-7: with tail bins of only 20-40 expected
samples the real tail is heavier than the chi-square law. Convolving the exact Poisson laws of the
bin counts gives a real false failure of about 1.3 x nominal for these bins (1.3e-6 at a nominal
1e-6, hence the halving): 6.4e-7 to 6.8e-7 for the tests below.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import pytest
from scipy import stats

from panstream.release.noise import (
    LAPLACE_GRANULARITY_BITS,
    NoiseLaw,
    bernoulli_exp_neg,
    bernoulli_rational,
    discrete_laplace,
)

ALPHA = 1e-6


def chi_square_check(samples: list[int], law: NoiseLaw, edges: list[int]) -> None:
    """Bin lattice indices by ``edges`` (bin k = [edges[k], edges[k+1]) plus two tails) and test."""
    cdf = law.cdf
    probs = [cdf(edges[0] - 1)]
    probs += [cdf(hi - 1) - cdf(lo - 1) for lo, hi in zip(edges[:-1], edges[1:], strict=True)]
    probs.append(1 - cdf(edges[-1] - 1))
    counts = [0] * len(probs)
    for z in samples:
        if z < edges[0]:
            counts[0] += 1
        elif z >= edges[-1]:
            counts[-1] += 1
        else:
            lo, hi = 0, len(edges) - 1
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if z >= edges[mid]:
                    lo = mid
                else:
                    hi = mid
            counts[lo + 1] += 1
    n = len(samples)
    expected = [p * n for p in probs]
    assert min(expected) >= 20, "bins too thin for the chi-square approximation"
    assert math.isclose(sum(probs), 1.0, abs_tol=1e-12)
    chi2 = sum((c - e) ** 2 / e for c, e in zip(counts, expected, strict=True))
    threshold = stats.chi2.isf(ALPHA / 2, len(probs) - 1)  # real tail ~1.3x nominal: see above
    assert chi2 < threshold, (chi2, threshold, counts, expected)


def symmetric_edges(law: NoiseLaw, n: int, width: int, min_count: float = 20.0) -> list[int]:
    """Bin edges ``[-k w, ..., 0, ..., k w]`` (plus ``1`` so 0 sits in its own bin when w == 1),
    as far out as every bin and both tails keep an expected count of at least ``min_count``."""
    m = min_count / n
    k = 1
    while True:
        nxt = (k + 1) * width
        last_bin = law.cdf(nxt - 1) - law.cdf(k * width - 1)
        tail = 1 - law.cdf(nxt - 1)
        if last_bin < m or tail < m:
            break
        k += 1
    pos = [j * width for j in range(1, k + 1)]
    neg = [-e + 1 for e in reversed(pos)]  # mirror: bin [-e+1, -e+1+w) mirrors [e-w, e)
    return sorted(set(neg + [0, 1] + pos)) if width == 1 else neg + pos


@pytest.mark.parametrize("epsilon", [1.0, 0.3])
def test_geometric_law_matches_two_sided_geometric_pmf(epsilon: float) -> None:
    law = NoiseLaw.for_mechanism("geometric", epsilon)
    n = 60_000
    samples = [law.sample_steps() for _ in range(n)]
    chi_square_check(samples, law, symmetric_edges(law, n, 1))


def test_geometric_with_awkward_rational_epsilon() -> None:
    # 0.1 is 3602879701896397 / 2**55: exercises U + tV with a huge t and floor division by s.
    law = NoiseLaw.for_mechanism("geometric", 0.1)
    assert law.epsilon_exact == Fraction(0.1) and law.epsilon == 0.1
    samples = [law.sample_steps() for _ in range(40_000)]
    chi_square_check(samples, law, symmetric_edges(law, 40_000, 4))


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_laplace_law_matches_discretized_laplace(epsilon: float) -> None:
    law = NoiseLaw.for_mechanism("laplace", epsilon)
    assert law.granularity == Fraction(1, 1 << LAPLACE_GRANULARITY_BITS)
    samples = [law.sample_steps() for _ in range(60_000)]
    # Bins of a quarter of the scale 1/epsilon, in lattice steps, out to 5 scales.
    w = round((1 << LAPLACE_GRANULARITY_BITS) / epsilon / 4)
    chi_square_check(samples, law, symmetric_edges(law, 60_000, w))
    # Lattice check: every value is a multiple of the granularity, the noise in counts is g * Z.
    noise = law.sample()
    assert (noise / law.granularity).denominator == 1


def test_laplace_law_is_close_to_continuous_laplace() -> None:
    law = NoiseLaw.for_mechanism("laplace", 1.0)
    g = float(law.granularity)
    for x in [0.0, 0.5, 2.0, 7.0]:
        z = round(x / g)
        # Pr[noise <= x] vs continuous Laplace(1) CDF 1 - e^-x / 2, within one lattice step.
        assert abs(law.cdf(z) - (1 - math.exp(-x) / 2)) < 2 * g
    assert math.isclose(law.variance, 2.0, rel_tol=1e-6)


def test_noise_law_moments_match_pmf() -> None:
    for mech, eps in [("geometric", 0.7), ("geometric", 3.0)]:
        law = NoiseLaw.for_mechanism(mech, eps)
        zs = range(-400, 401)
        assert math.isclose(math.fsum(law.pmf(z) for z in zs), 1.0, rel_tol=1e-12)
        var = math.fsum(z * z * law.pmf(z) for z in zs)
        assert math.isclose(var, law.variance, rel_tol=1e-9)
        a = math.exp(-eps)
        assert math.isclose(law.pmf(1) / law.pmf(0), a) and math.isclose(law.pmf(-5) / law.pmf(-4), a)


@pytest.mark.parametrize("gamma", [Fraction(1, 3), Fraction(1), Fraction(5, 2)])
def test_bernoulli_exp_neg_is_exact(gamma: Fraction) -> None:
    n = 40_000
    hits = sum(bernoulli_exp_neg(gamma) for _ in range(n))
    p = math.exp(-float(gamma))
    lo, hi = stats.binom.ppf(ALPHA / 2, n, p), stats.binom.isf(ALPHA / 2, n, p)
    assert lo <= hits <= hi, (hits, lo, hi)


def test_degenerate_coins_and_argument_errors() -> None:
    assert bernoulli_exp_neg(0) is True
    assert bernoulli_rational(0, 3) is False and bernoulli_rational(3, 3) is True
    with pytest.raises(ValueError):
        bernoulli_exp_neg(Fraction(-1, 2))
    with pytest.raises(ValueError):
        discrete_laplace(0)
    with pytest.raises(ValueError):
        NoiseLaw.for_mechanism("gaussian", 1.0)
    for bad in [0.0, -1.0, math.inf, math.nan, 1e-12]:
        with pytest.raises(ValueError):
            NoiseLaw.for_mechanism("laplace", bad)


def test_samplers_use_only_the_os_csprng(monkeypatch: pytest.MonkeyPatch) -> None:
    """All randomness flows through panstream.randomness.secure_uniform_below (urandom-backed)."""
    import panstream.release.noise as noise

    calls = []
    real = noise.secure_uniform_below

    def spy(bound: int) -> int:
        calls.append(bound)
        return real(bound)

    monkeypatch.setattr(noise, "secure_uniform_below", spy)
    NoiseLaw.for_mechanism("laplace", 0.5).sample()
    NoiseLaw.for_mechanism("geometric", 0.5).sample()
    assert calls
    src = Path(noise.__file__).read_text()
    for banned in ["random.", "default_rng", "np.random", "expovariate", "log("]:
        assert banned not in src.replace("panstream.randomness", "")
