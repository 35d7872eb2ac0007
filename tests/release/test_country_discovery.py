"""The rule over all country slots (issue 37): each row's ``p_empty`` is a valid p-value of "this
country has no client", and Benjamini-Hochberg over them at the release's ``fdr`` tells a country
from empty. Checked where the truth is known to be "nobody anywhere": a state no client reached.

An empty slot's counted bits are all first draws from D0 (``Binomial(cells, q)``) plus the release
noise, whose law the p-value sums exactly (:func:`panstream.release.discovery.empty_p_values`), so
``Pr[p_empty <= a] <= a``; with nobody anywhere, Benjamini-Hochberg tells any slot with
probability at most its rate.
"""

from __future__ import annotations

import math

import pytest

from panstream.errors import ConfigurationError
from panstream.estimators.hashed_country import CountryDensityEstimator
from panstream.sketch.country import CountrySketchEstimator

pytest.importorskip("iptocc")

#: Releases of an empty state per family, and the slots they hold.
RELEASES = 12
SLOTS = 253


def _empty_releases(family: str, mechanism: str) -> list:
    out = []
    for _ in range(RELEASES):
        est = (CountryDensityEstimator("hashed-ip-country:512", epsilon=1.0, budget=1.0)
               if family == "density" else
               CountrySketchEstimator(epsilon=1.0, buckets=64, levels=8, budget=1.0))
        out.append(est.release(1.0, mechanism))
    return out


@pytest.mark.parametrize(("family", "mechanism"), [("density", "laplace"), ("sketch", "laplace"),
                                                   ("density", "geometric")])
def test_an_empty_state_tells_no_country_at_its_stated_rate(family: str, mechanism: str) -> None:
    """12 releases of an empty state (3,036 empty slots).

    * The share of p-values at or below 0.05 stays within [0.025, 0.075] (a valid p-value has
      a share of at most 0.05; a near-continuous one about 0.05): by Chernoff's bound
      ``exp(-n KL)``, leaving it has probability < 3e-8 for a true share of 0.05 (< 3e-11
      below, < 3e-8 above), and only smaller above for a valid one.
    * Releases that tell any country from empty: at most 6 of 12 (each does so with probability
      at most 0.05: 7 or more has probability < 5e-7).

    False failure < 6e-7 per family and mechanism (three cases: the geometric mechanism clamps
    its counts at 0, which the p-value reads as 1)."""
    rels = _empty_releases(family, mechanism)
    p = [r.p_empty for rel in rels for r in rel.rows]
    assert len(p) == RELEASES * SLOTS and all(0.0 <= x <= 1.0 for x in p)
    share = sum(x <= 0.05 for x in p) / len(p)
    assert 0.025 <= share <= 0.075, share
    assert sum(rel.signals > 0 for rel in rels) <= 6
    assert all(rel.fdr == 0.05 and rel.rule == "benjamini-hochberg" for rel in rels)
    d = rels[0].to_dict()
    assert d["extras"]["fdr"] == 0.05 and d["extras"]["signals"] == rels[0].signals
    assert all(r.p_empty == row["p_empty"] and r.signal == row["signal"]
               for r, row in zip(rels[0].rows, d["extras"]["rows"], strict=True))


def test_the_rate_is_stated_and_checked() -> None:
    est = CountryDensityEstimator("hashed-ip-country:512", epsilon=1.0, budget=2.0)
    assert est.release(0.5, confidence=0.9).fdr == pytest.approx(0.1)
    assert est.release(0.5, fdr=1e-6).fdr == 1e-6
    for bad in (0.0, 1.0, math.nan, True):
        with pytest.raises(ConfigurationError, match="false-discovery rate"):
            est.release(0.25, fdr=bad)
    assert est.ledger.spent == 1.0  # a refused rate charges nothing
