"""The Hilbert curve, vectorized: where the ``d``-th cell of a ``2**k x 2**k`` square lies.

Address-space maps lay prefixes along a Hilbert curve (the xkcd/CAIDA convention): consecutive
prefixes stay adjacent, and every aligned block of 4**j prefixes is a square, so a /16 of a /8 map
is a compact square and not a stripe.

>>> d2xy(1, np.arange(4)).tolist()
[[0, 0], [0, 1], [1, 1], [1, 0]]
"""

from __future__ import annotations

import numpy as np


def d2xy(order: int, d: np.ndarray) -> np.ndarray:
    """Coordinates ``(x, y)`` of the positions ``d`` (``0 <= d < 4**order``) on the Hilbert curve
    of a ``2**order`` square, as an ``(n, 2)`` int64 array. Consecutive positions are neighbours.

    Raises:
        ValueError: ``order`` negative or ``d`` outside the curve.
    """
    if order < 0:
        msg = f"Hilbert order must be >= 0, got {order}"
        raise ValueError(msg)
    t = np.asarray(d, dtype=np.int64).copy()
    if t.size and (t.min() < 0 or t.max() >= 4**order):
        msg = f"Hilbert positions must lie in 0..{4**order - 1}"
        raise ValueError(msg)
    x = np.zeros_like(t)
    y = np.zeros_like(t)
    s = 1
    while s < (1 << order):
        rx = 1 & (t // 2)
        ry = 1 & (t ^ rx)
        # rotate the quadrant
        flip = ry == 0
        swap_x = flip & (rx == 1)
        x = np.where(swap_x, s - 1 - x, x)
        y = np.where(swap_x, s - 1 - y, y)
        x, y = np.where(flip, y, x), np.where(flip, x, y)
        x += s * rx
        y += s * ry
        t //= 4
        s *= 2
    return np.stack([x, y], axis=1)
