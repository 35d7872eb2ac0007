"""Public IPv4 clients and their true count per country slot (for the by-country tests and bench),
and the check every by-country release passes (:func:`check_the_negative_rule`).

Synthetic data only, so it lives in the test tree: NumPy's PCG64 draws the addresses (never used
for privacy). ``bench/bench_country.py`` imports it from here too (it puts ``tests/`` on its path).
"""

from __future__ import annotations

import csv
import io
import ipaddress
import re
from dataclasses import asdict
from typing import Any

import numpy as np

from panstream import geo
from panstream.release.country import format_country_release

#: The first octets of IANA's special-purpose IPv4 blocks below 224.0.0.0 (0/8, 10/8, 100.64/10,
#: 127/8, 169.254/16, 172.16/12, 192.x, 198.18/15 and 198.51.100/24, 203.0.113/24): an address
#: outside them is global, and only those inside are asked of :mod:`ipaddress` (which is slow).
_SPECIAL_FIRST_OCTETS = frozenset({0, 10, 100, 127, 169, 172, 192, 198, 203})


def public_ipv4(rng: np.random.Generator, n: int) -> list[str]:
    """``n`` distinct global unicast IPv4 addresses (below 224.0.0.0), drawn from ``rng``, sorted."""
    out: set[str] = set()
    while len(out) < n:
        x = int(rng.integers(1 << 24, 224 << 24))
        if (x >> 24) not in _SPECIAL_FIRST_OCTETS or ipaddress.IPv4Address(x).is_global:
            out.add(f"{x >> 24}.{(x >> 16) & 255}.{(x >> 8) & 255}.{x & 255}")
    return sorted(out)


def truth_by_country(addresses: list[str]) -> np.ndarray:
    """The true number of (distinct) ``addresses`` in each slot of :data:`panstream.geo.COUNTRIES`
    by the offline table (:func:`panstream.geo.slots`)."""
    return np.bincount(geo.slots(addresses), minlength=len(geo.COUNTRIES))


def check_the_negative_rule(rel: Any, empty: np.ndarray) -> int:
    """Check one by-country release against the rule for negative estimates (docs/release.md,
    "Negative estimates: one rule for every family") and return how many of the ``empty`` slots
    (true count 0) were released below 0.

    Released (the API's rows, ``to_dict()`` for ``--json``, ``csv_text()`` for ``--csv``): the
    unbiased values as computed, never clamped; a row's value is ``estimate`` (issue 37; it was
    ``distinct``). Shown (the printout, which lists the countries told from empty by the rule
    over all slots and says how many it hides): each value at ``max(0, value)``, no negative
    number anywhere, and the line that says so exactly when a value shown was below 0.
    """
    rows = {r.country: r for r in rel.rows}
    d = rel.to_dict()
    assert d["extras"]["rows"] == d["rows"] == [asdict(r) for r in rel.rows]
    assert (d["estimate"], d["low"], d["high"]) == (rel.distinct, rel.low, rel.high)
    for line in list(csv.DictReader(io.StringIO(rel.csv_text()))):
        r = rows[line["country"]]
        assert abs(float(line["estimate"]) - r.estimate) <= 0.051  # written to 0.1
        assert abs(float(line["low"]) - r.low) <= 0.051
    text = format_country_release(rel, top=len(rel.rows))
    shown_rows = {m[1]: m.groups()[1:] for m in re.finditer(
        r"^    ([A-Z]{2})\s+([\d,]+)\s+\[([\d,]+), ([\d,]+)\]", text, re.M)}
    told = [r for r in rel.rows if r.signal]
    assert set(shown_rows) == {r.country for r in told}
    assert f"{len(rel.rows) - len(told)} slots not told from an empty one are not listed" in text
    for code, (v, lo, hi) in shown_rows.items():
        r = rows[code]
        assert (v, lo, hi) == tuple(f"{max(x, 0.0):,.0f}" for x in (r.estimate, r.low, r.high))
    assert re.findall(r"(?<![\w.])-\d", text) == []
    below = any(x < 0 for r in (rel, *told) for x in (r.distinct, r.low, r.high))
    assert ("shown clamped at 0" in text) == below
    return sum(rows[geo.COUNTRIES[s]].distinct < 0 for s in empty.tolist())
