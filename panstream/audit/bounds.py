"""Turning hit counts into a certified epsilon lower bound: Clopper-Pearson, in the standard library.

For an event E tested on ``n`` runs of each of two neighbouring worlds, :func:`epsilon_lower_bound`
gives the smallest epsilon consistent, at confidence ``1 - alpha``, with the two hit counts: the
quantity a mechanism's true epsilon exceeds with probability at least ``1 - alpha``.

>>> round(clopper_pearson_upper(0, 100, 0.05), 4), round(clopper_pearson_lower(100, 100, 0.05), 4)
(0.0295, 0.9705)
"""

from __future__ import annotations

import math


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
