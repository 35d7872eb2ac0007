"""User-side remap of a geometric release (Ghosh, Roughgarden and Sundararajan, "Universally
Utility-Maximizing Privacy Mechanisms").

The epsilon-geometric mechanism publishes ``i + Z`` for a true count ``i`` in ``{0..n}``, with
``Pr[Z = z]`` proportional to ``exp(-epsilon |z|)``, clamped to ``{0..n}``. Theorem 3.1 of Ghosh et al.:
for *every* user (a prior over the true count and a loss nondecreasing in ``|i - r|``) the
geometric mechanism followed by that user's Bayes-optimal remap is as good as the best
epsilon-DP oblivious mechanism designed for that user alone. The remap is post-processing, so it
costs no privacy and needs no cooperation from the publisher.

The remap: posterior ``Pr[i | r]`` proportional to ``prior(i) * exp(-epsilon |r - i|)`` (the same
likelihood holds for the clamped end points 0 and n, and for unclamped outputs outside ``{0..n}``,
which are clamped first), then the estimate ``argmin_j sum_i Pr[i | r] loss(i, j)``.

Losses: ``"absolute"`` ``|i - j|`` (the posterior median), ``"squared"`` ``(i - j)**2`` (the mean,
rounded to the better neighbouring integer), ``"binary"`` ``[i != j]`` (the posterior mode), or any
callable ``loss(true, estimate) -> float``.

For a panstream release: ``n = |X|`` and ``observed = noisy_ones`` of a ``geometric`` release, with
``epsilon`` its realized epsilon; the prior is over the true count of ones.

>>> remap(3, 1.0, 4, prior=[0.95, 0.02, 0.01, 0.01, 0.01], loss="binary")
0
>>> remap(3, 5.0, 4, prior=None, loss="absolute")
3
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from panstream.errors import ConfigurationError

Loss = str | Callable[[int, int], float]
LOSSES: tuple[str, ...] = ("absolute", "squared", "binary")


def _loss_matrix(n: int, loss: Loss) -> np.ndarray:
    """``L[i, j] = loss(true=i, estimate=j)`` for ``i, j`` in ``0..n``."""
    i = np.arange(n + 1)[:, None]
    j = np.arange(n + 1)[None, :]
    if loss == "absolute":
        return np.abs(i - j).astype(float)
    if loss == "squared":
        return ((i - j) ** 2).astype(float)
    if loss == "binary":
        return (i != j).astype(float)
    if callable(loss):
        return np.array([[float(loss(a, b)) for b in range(n + 1)] for a in range(n + 1)])
    msg = f"unknown loss {loss!r}: use one of {', '.join(LOSSES)} or a callable loss(true, estimate)"
    raise ConfigurationError(msg)


def _prior(prior: Sequence[float] | np.ndarray | None, n: int) -> np.ndarray:
    if prior is None:
        return np.full(n + 1, 1.0 / (n + 1))
    w = np.asarray(prior, dtype=float).reshape(-1)
    if w.size != n + 1:
        msg = f"prior must have n + 1 = {n + 1} weights (true counts 0..n), got {w.size}"
        raise ConfigurationError(msg)
    if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        msg = "prior weights must be finite, non-negative and not all zero"
        raise ConfigurationError(msg)
    return w / w.sum()


def _check(epsilon: float, n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        msg = f"n must be a non-negative integer, got {n!r}"
        raise ConfigurationError(msg)
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        msg = f"epsilon must be a positive finite number, got {epsilon!r}"
        raise ConfigurationError(msg)


def posterior(observed: int, epsilon: float, n: int,
              prior: Sequence[float] | np.ndarray | None = None) -> np.ndarray:
    """Posterior over the true count ``0..n`` after seeing the geometric release ``observed``.

    Args:
        observed: the released count (clamped to ``0..n`` first).
        epsilon: the realized epsilon of the geometric release.
        n: largest possible true count.
        prior: ``n + 1`` non-negative weights (normalized here); ``None`` for uniform.

    Returns:
        A float array of ``n + 1`` probabilities.

    Raises:
        ValueError: bad ``epsilon``, ``n`` or ``prior``.
    """
    _check(epsilon, n)
    w = _prior(prior, n)
    r = min(max(int(round(observed)), 0), n)
    i = np.arange(n + 1)
    with np.errstate(divide="ignore"):
        logpost = np.log(w) - epsilon * np.abs(r - i)
    logpost -= logpost.max()
    post = np.exp(logpost)
    return post / post.sum()


def remap(observed: int, epsilon: float, n: int,
          prior: Sequence[float] | np.ndarray | None = None, loss: Loss = "absolute") -> int:
    """The Bayes-optimal estimate of the true count given a geometric release (Ghosh et al.).

    Args:
        observed: the count released by the epsilon-geometric mechanism over ``{0..n}``.
        epsilon: its realized epsilon (``Release.epsilon``).
        n: largest possible true count (``|X|`` for a panstream release).
        prior: ``n + 1`` non-negative weights over the true count; ``None`` for uniform.
        loss: ``"absolute"``, ``"squared"``, ``"binary"`` or a callable ``loss(true, estimate)``,
            nondecreasing in ``|true - estimate|`` for Theorem 3.1 to apply.

    Returns:
        The estimate in ``0..n`` minimizing the posterior expected loss (the smallest on ties).
        Named losses take O(n); a callable loss is evaluated on all ``(n + 1)**2`` pairs.

    Raises:
        ValueError: bad arguments.

    Example:
        >>> remap(0, 1.0, 2, prior=[0.1, 0.1, 0.8], loss="binary")
        2
    """
    return _bayes(posterior(observed, epsilon, n, prior), loss)


def _bayes(post: np.ndarray, loss: Loss) -> int:
    """``argmin_j sum_i post[i] loss(i, j)``, smallest j on ties; O(n) for the named losses."""
    if loss == "absolute":  # a posterior median
        return int(np.searchsorted(np.cumsum(post), 0.5 - 1e-12))
    if loss == "binary":  # the posterior mode
        return int(np.argmax(post))
    if loss == "squared":  # the integer nearest the posterior mean
        mean = float(post @ np.arange(post.size))
        lo = min(math.floor(mean), post.size - 1)
        return lo if lo + 1 >= post.size or mean - lo <= lo + 1 - mean else lo + 1
    return int(np.argmin(post @ _loss_matrix(post.size - 1, loss)))


def remap_table(epsilon: float, n: int, prior: Sequence[float] | np.ndarray | None = None,
                loss: Loss = "absolute") -> np.ndarray:
    """``remap`` of every possible observation ``0..n`` as an integer array (the user's remap).

    Example:
        >>> remap_table(3.0, 3, loss="binary").tolist()
        [0, 1, 2, 3]
    """
    return np.array([remap(r, epsilon, n, prior, loss) for r in range(n + 1)], dtype=np.intp)
