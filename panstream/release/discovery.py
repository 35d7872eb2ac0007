"""Which of many released counts can be told from an empty one: one rule for maps and countries.

A release by bucket (a density map's prefixes, :mod:`panstream.release.maps`) or by country
(:mod:`panstream.release.country`) publishes hundreds of noisy counts at once. At a 95 % interval
each, about 5 % of the *empty* ones look like signal by chance: on a map of 253 country slots,
a dozen countries without a single client would rank among the "significant" ones. The rule that
controls this over the whole release is Benjamini-Hochberg's:

1. :func:`empty_p_values`: for every bucket, the exact one-sided p-value of "this bucket is
   empty", from its noisy count of ones and public parameters only. An empty bucket's bits are
   all still their first draw from D0, so its count of ones is ``Binomial(cells, q)`` exactly,
   plus the release noise of a known law.
2. :func:`discoveries`: Benjamini-Hochberg at a stated false-discovery rate over all buckets:
   on average at most that share of the buckets it marks are empty, and when every bucket is
   empty the chance that it marks any is at most that rate.

Both are post-processing of the released noisy counts: they cost no epsilon.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np

from panstream.release.noise import NoiseLaw

__all__ = ["TellsFromEmpty", "discoveries", "empty_p_values"]


class TellsFromEmpty:
    """What a release of many rows that carries the rule (a map's buckets, the countries) adds:
    each row's ``signal``, decided over all rows at the release's ``fdr``."""

    __slots__ = ()
    rows: tuple[Any, ...]

    @property
    def signals(self) -> int:
        """How many rows are told from empty at the release's false-discovery rate."""
        return sum(r.signal for r in self.rows)


def _log_binomial_pmf(cells: int, q: float, ks: np.ndarray) -> np.ndarray:
    lg = np.vectorize(math.lgamma, otypes=[float])
    return (math.lgamma(cells + 1) - lg(ks + 1.0) - lg(cells - ks + 1.0)
            + ks * math.log(q) + (cells - ks) * math.log1p(-q))


@lru_cache(maxsize=256)
def _running_sums(cells: int, qf: float, law: NoiseLaw
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float, float]:
    """The three running sums of :func:`empty_p_values` over ``k``, with ``k`` itself, the noise's
    epsilon per count and ``a``: functions of public parameters only, so worked out once for every
    release of the same shape (read-only arrays)."""
    mean, sd = cells * qf, math.sqrt(cells * qf * (1 - qf))
    lo = max(0, int(mean - 12 * sd - 40))
    hi = min(cells, int(mean + 12 * sd + 40) + 1)
    ks = np.arange(lo, hi + 1, dtype=np.float64)
    logpmf = _log_binomial_pmf(cells, qf, ks)
    g = float(law.granularity)
    e = float(law.epsilon_exact * law.granularity) / g  # per count
    a = math.exp(-e * g)
    up = np.logaddexp.accumulate(logpmf + e * (ks - ks[0]))  # log sum_{k <= k_j} pmf e^(e(k-k0))
    down = np.logaddexp.accumulate((logpmf - e * (ks - ks[-1]))[::-1])[::-1]  # k >= k_j, e^(-e(k-k_n))
    tail = np.cumsum(np.exp(logpmf)[::-1])[::-1]  # Pr[K >= k_j]
    for arr in (ks, up, down, tail):
        arr.flags.writeable = False
    return ks, up, down, tail, e, a


def empty_p_values(noisy_ones: np.ndarray | list[float], cells: int, q: Fraction | float,
                   law: NoiseLaw, mechanism: str = "laplace") -> np.ndarray:
    """The one-sided p-value of "the bucket is empty" for each noisy count of ones, exactly.

    In an empty bucket every bit is still its first draw from D0, so its count of ones is
    ``K ~ Binomial(cells, q)`` exactly, plus the release noise ``g Z`` of ``law`` (``Pr[Z >= m] =
    a**m / (1 + a)`` for ``m >= 1``, ``1 - a**(1 - m) / (1 + a)`` otherwise, ``a = e**-(e g)``);
    the p-value of an observed noisy count ``y`` is ``Pr[K + g Z >= y]`` (``geometric`` clamps at
    0: a count of 0 has p-value 1). Splitting the sum over ``k`` at ``y``,

        Pr[K + g Z >= y] = e**(-e y)/(1 + a) sum_{k < y} Pr[K = k] e**(e k) + Pr[K >= y]
                           - a e**(e y)/(1 + a) sum_{k >= y} Pr[K = k] e**(-e k),

    so three running sums over ``k`` (kept in logarithms) serve every bucket. It is computed from
    the noisy count and public parameters only (post-processing); the binomial is summed within
    12 standard deviations and 40 counts of its mean (the rest weighs below 1e-30).

    >>> law = NoiseLaw.for_mechanism("geometric", 1.0)
    >>> p = empty_p_values([64.0, 140.0], 256, Fraction(1, 4), law, "geometric")
    >>> bool(0.4 < p[0] < 0.6), bool(p[1] < 1e-12)
    (True, True)
    """
    y = np.asarray(noisy_ones, dtype=np.float64)
    ks, up, down, tail, e, a = _running_sums(cells, float(q), law)
    j = np.searchsorted(ks, y, side="left")  # ks[:j] < y <= ks[j:]
    below = np.where(j > 0, np.exp(up[np.maximum(j - 1, 0)] - e * (y - ks[0])), 0.0)
    inside = j < ks.size
    jj = np.minimum(j, ks.size - 1)
    above = np.where(inside, np.exp(np.minimum(down[jj] + e * (y - ks[-1]), 700.0)), 0.0)
    out = below / (1 + a) + np.where(inside, tail[jj], 0.0) - a * above / (1 + a)
    out = np.clip(out, 0.0, 1.0)
    if mechanism == "geometric":
        out[y <= 0] = 1.0
    return out


def discoveries(p_values: np.ndarray, rate: float) -> np.ndarray:
    """Benjamini-Hochberg at false-discovery rate ``rate``: a boolean mask of the rejected nulls.

    Sort the ``m`` p-values, find the largest rank ``k`` with ``p_(k) <= k rate / m`` and reject
    the ``k`` smallest. For independent p-values (disjoint buckets, independent noise) the
    expected share of false discoveries among the discoveries is at most ``rate`` (Benjamini and
    Hochberg 1995); when every null is true that is the chance of any discovery at all.

    >>> discoveries(np.array([0.001, 0.2, 0.04, 0.9]), 0.05).tolist()
    [True, False, False, False]
    """
    p = np.asarray(p_values, dtype=np.float64)
    m = p.size
    out = np.zeros(m, dtype=bool)
    if m == 0:
        return out
    order = np.argsort(p, kind="stable")
    ok = p[order] <= rate * np.arange(1, m + 1) / m
    if ok.any():
        k = int(np.nonzero(ok)[0][-1]) + 1
        out[order[:k]] = True
    return out
