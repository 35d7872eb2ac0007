"""A synthetic access log with a known truth, for ``panstream demo`` and the tests.

The log is generated with NumPy's PCG64 (fine here: it is *synthetic data*, not a privacy draw): a
number of distinct client addresses inside the universe's prefix, each sending a Zipf-skewed number of
requests, plus a share of traffic from outside the prefix. The truth (distinct clients inside the
universe) is known exactly, so the estimate can be checked against it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from panstream.universe import Universe


@dataclass(frozen=True)
class SyntheticLog:
    """Client addresses of a synthetic log (``uint32``, in arrival order) and its truth."""

    addresses: np.ndarray
    distinct_inside: int
    lines_inside: int
    lines_outside: int


def synthetic_ipv4_log(universe: Universe, distinct: int, lines: int, outside_share: float = 0.05,
                       zipf_a: float = 1.3, seed: int | None = None) -> SyntheticLog:
    """Generate ``lines`` client addresses: ``distinct`` clients inside an IPv4 universe, Zipf load.

    Every one of the ``distinct`` clients appears at least once; the remaining lines are drawn with
    Zipf(``zipf_a``) popularity. ``outside_share`` of the lines come from addresses outside the prefix.
    """
    if universe.kind != "ipv4":
        msg = "synthetic_ipv4_log needs an ipv4 universe"
        raise ValueError(msg)
    if not 0 < distinct <= universe.size or lines < distinct:
        msg = "need 0 < distinct <= universe size and lines >= distinct"
        raise ValueError(msg)
    rng = np.random.default_rng(seed)
    base = _ipv4_int(universe.item_of(0))
    clients = rng.choice(universe.size, size=distinct, replace=False).astype(np.int64) + base
    n_out = int(round(lines * outside_share))
    n_in = lines - n_out
    extra = n_in - distinct
    ranks = np.minimum(rng.zipf(zipf_a, size=extra), distinct) - 1
    inside = np.concatenate([clients, clients[ranks]])
    rng.shuffle(inside)
    outside = _outside_addresses(rng, universe, base, n_out)
    allv = np.concatenate([inside, outside])
    order = rng.permutation(allv.size)
    return SyntheticLog(allv[order].astype(np.uint32), distinct, n_in, n_out)


def _ipv4_int(s: str) -> int:
    a, b, c, d = (int(x) for x in s.split("."))
    return a << 24 | b << 16 | c << 8 | d


def _outside_addresses(rng: np.random.Generator, universe: Universe, base: int, n: int
                       ) -> np.ndarray:
    if universe.size == 1 << 32 or n == 0:
        return np.zeros(0, dtype=np.int64)
    cand = rng.integers(0, 1 << 32, size=2 * n + 16, dtype=np.int64)
    cand = cand[(cand < base) | (cand >= base + universe.size)]
    return cand[:n]


def format_plain(addresses: np.ndarray) -> bytes:
    """Dotted-quad lines, one address per line."""
    a = addresses.astype(np.uint32)
    parts = [(a >> s) & 0xFF for s in (24, 16, 8, 0)]
    quads = zip(*(p.tolist() for p in parts), strict=True)
    return "".join(f"{w}.{x}.{y}.{z}\n" for w, x, y, z in quads).encode()
