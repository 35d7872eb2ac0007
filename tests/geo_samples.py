"""Public IPv4 clients and their true count per country slot (for the by-country tests and bench).

Synthetic data only, so it lives in the test tree: NumPy's PCG64 draws the addresses (never used
for privacy). ``bench/bench_country.py`` imports it from here too (it puts ``tests/`` on its path).
"""

from __future__ import annotations

import ipaddress

import numpy as np

from panstream import geo


def public_ipv4(rng: np.random.Generator, n: int) -> list[str]:
    """``n`` distinct global unicast IPv4 addresses (below 224.0.0.0), drawn from ``rng``, sorted."""
    out: set[str] = set()
    while len(out) < n:
        a = ipaddress.IPv4Address(int(rng.integers(1 << 24, 224 << 24)))
        if a.is_global:
            out.add(str(a))
    return sorted(out)


def truth_by_country(addresses: list[str]) -> np.ndarray:
    """The true number of (distinct) ``addresses`` in each slot of :data:`panstream.geo.COUNTRIES`
    by the offline table (:func:`panstream.geo.slots`)."""
    return np.bincount(geo.slots(addresses), minlength=len(geo.COUNTRIES))
