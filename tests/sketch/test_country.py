"""Distinct clients by country from one grid per country: coverage, one charge, the state's law.

The truth per country is the offline table's (:func:`panstream.geo.slots`): the question is how
many distinct addresses the registries assigned to each country, and the release answers it for
one output epsilon, charged once, whatever the number of countries.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from geo_samples import check_the_negative_rule, public_ipv4, truth_by_country

from panstream import geo
from panstream.errors import ConfigurationError
from panstream.sketch.country import CountryGrid, CountrySketchEstimator

pytest.importorskip("iptocc")


def test_every_countrys_interval_covers_its_truth_at_the_stated_rate_for_one_charge() -> None:
    """8 independent states of 20,000 public IPv4 clients (a 256 x 8 grid per country, state
    epsilon 1), each released once at epsilon 1: 8 x 253 = 2,024 intervals at 95 %. A true
    coverage of 0.93 or more misses more than 199 with probability below 9e-7 (binomial tail);
    the test allows 199 misses. Each release charges the ledger exactly once, and each total is
    within 6 of its standard errors (false failure < 2e-8)."""
    rng = np.random.default_rng(28)
    misses = 0
    for _ in range(8):
        items = public_ipv4(rng, 20_000)
        truth = truth_by_country(items)
        est = CountrySketchEstimator(epsilon=1.0, buckets=256, levels=8, budget=1.0)
        est.update(items + items[:5000])  # repeat visits change nothing
        rel = est.release(1.0)
        assert len(est.ledger.entries) == 1 and est.ledger.remaining == 0.0
        assert [r.country for r in rel.rows] == list(geo.COUNTRIES)
        misses += sum(not (r.low <= t <= r.high) for r, t in zip(rel.rows, truth.tolist(),
                                                                   strict=True))
        assert abs(rel.distinct - 20_000) < 6 * rel.stderr
    assert misses <= 199, misses


def test_an_empty_country_is_released_below_zero_about_half_the_time_and_shown_at_zero() -> None:
    """The rule for negative estimates (docs/release.md): the release carries the unbiased
    estimate, so a country nobody came from is released below 0 about half the time; only what
    a person reads is clamped at 0, and the printout says so (``check_the_negative_rule``: rows,
    JSON, CSV, printout).

    6 independent states of the same 300 public clients (256 x 8 grids, state and release epsilon
    1); about 200 slots are empty in each, N >= 1,000 trials in all (independent: every slot has
    its own bits and noise). The chance of a negative estimate was measured at 0.503 over 8,040
    trials; for any chance in [0.48, 0.52], Hoeffding's bound puts the observed share outside
    [0.38, 0.62] with probability at most 2 exp(-2 N 0.1^2) < 5e-9. A release clamped at 0 has a
    share of 0 and fails."""
    rng = np.random.default_rng(5)
    items = public_ipv4(rng, 300)
    empty = np.flatnonzero(truth_by_country(items) == 0)
    below = trials = 0
    for _ in range(6):
        est = CountrySketchEstimator(epsilon=1.0, buckets=256, levels=8, budget=1.0)
        est.update(items)
        below += check_the_negative_rule(est.release(1.0), empty)
        trials += empty.size
    assert trials >= 1000
    assert 0.38 <= below / trials <= 0.62, (below, trials)


def test_the_total_is_the_sum_of_the_unclamped_country_estimates() -> None:
    """The total over countries sums the released (unclamped) rows, as the noiseless
    ``estimate()`` sums ``estimate_by_country()``: a person is in one country, and an empty
    country's estimate is centred on 0, so summing values clamped at 0 would bias the total up.

    6 releases of 300 clients (as above): the total's error in its own standard errors,
    ``z = (total - 300) / stderr``, averages within +-2.5 of 0 (6 standard deviations of a mean of
    6 at sd 1: false failure < 2e-9; the intervals' measured coverage is 0.95-0.97, so sd <= 1),
    while the sum of the clamped rows sits above the truth by about 5.5 of them (at least 3 here:
    false failure < 1e-8 at the same sd)."""
    rng = np.random.default_rng(6)
    items = public_ipv4(rng, 300)
    z, z_clamped = [], []
    for _ in range(6):
        est = CountrySketchEstimator(epsilon=1.0, buckets=256, levels=8, budget=1.0)
        est.update(items)
        fits = est.estimate_by_country()
        assert any(f.n < 0 for f in fits)  # the noiseless estimates are unclamped too
        assert est.estimate().n == pytest.approx(math.fsum(f.n for f in fits), abs=1e-6)
        rel = est.release(1.0)
        assert rel.distinct == pytest.approx(math.fsum(r.estimate for r in rel.rows), abs=1e-6)
        assert rel.to_dict()["estimate"] == rel.distinct
        z.append((rel.distinct - 300) / rel.stderr)
        z_clamped.append((math.fsum(max(r.estimate, 0.0) for r in rel.rows) - 300) / rel.stderr)
    assert abs(float(np.mean(z))) < 2.5, z
    assert float(np.mean(z_clamped)) > 3, z_clamped


def test_the_state_has_the_sketch_law_in_every_countrys_grid() -> None:
    """A dump of the state: never-hit bits are 1 with probability q, hit bits with 1 - q, in every
    country's grid; an empty country's grid is a Binomial(B x P, q) count of ones like any other
    (so a dump shows no country as absent). Checked at 6 standard deviations per slot and overall
    (false failure < 253 x 2e-9 + 2 x 2e-9 < 1e-6)."""
    rng = np.random.default_rng(7)
    items = public_ipv4(rng, 5000)
    est = CountrySketchEstimator(epsilon=1.0, buckets=256, levels=8)
    est.update(items)
    grid: CountryGrid = est.universe
    hit = np.zeros(grid.size, dtype=bool)
    hit[grid.indices(items).indices] = True
    bits = np.unpackbits(np.frombuffer(est._payload_view(), dtype=np.uint8),  # noqa: SLF001
                         count=grid.size, bitorder="little").astype(bool)
    q = float(est.q)
    for mask, p in ((hit, 1 - q), (~hit, q)):
        n = int(mask.sum())
        assert abs(int(bits[mask].sum()) - n * p) < 6 * math.sqrt(n * p * (1 - p))
    per = grid.cells_per_country
    empty = np.flatnonzero(truth_by_country(items) == 0)
    assert empty.size > 50
    sd = math.sqrt(per * q * (1 - q))
    for s in empty.tolist():
        assert abs(int(bits[s * per:(s + 1) * per].sum()) - per * q) < 6 * sd


def test_a_grid_that_skips_the_d0_draw_would_name_the_absent_countries() -> None:
    """The attack on a broken variant (all bits 0 at the start, set only where hit): an empty
    country's grid is all zeros, so a dump lists every country nobody came from. The real state's
    empty grids hold about q x B x P ones (above): the same attack learns nothing."""
    rng = np.random.default_rng(8)
    items = public_ipv4(rng, 2000)
    grid = CountryGrid(256, 8)
    broken = np.zeros(grid.size, dtype=bool)
    broken[grid.indices(items).indices] = True
    per = grid.cells_per_country
    guessed_absent = {s for s in range(len(geo.COUNTRIES))
                      if not broken[s * per:(s + 1) * per].any()}
    assert guessed_absent == set(np.flatnonzero(truth_by_country(items) == 0).tolist())


def test_a_new_country_table_refuses_arrivals_but_not_releases() -> None:
    """A person is one cell only while the address-to-country table stays the same: a state built
    with another iptocc version refuses new arrivals in one line; its release still works."""
    est = CountrySketchEstimator(epsilon=1.0, buckets=256, levels=8, budget=1.0)
    est.update(["8.8.8.8"])
    assert est.params()["geo"] == geo.database()
    back = CountrySketchEstimator.restore(est.snapshot())
    assert isinstance(back, CountrySketchEstimator) and back.universe.geo == geo.database()
    back.universe.geo = "iptocc 0.0.1"
    with pytest.raises(ConfigurationError, match="iptocc 0.0.1"):
        back.update(["1.1.1.1"])
    assert len(back.release(1.0).rows) == len(geo.COUNTRIES)
    back.rotate()
    assert back.update(["1.1.1.1"]).accepted == 1


def test_an_address_counts_in_one_country_whatever_its_spelling() -> None:
    grid = CountryGrid(256, 8)
    r = grid.indices(["8.8.8.8", "::ffff:8.8.8.8", "2001:4860:4860::8888",
                      "2001:4860:4860:0:0:0:0:8888", "junk", ""])
    assert r.malformed == 1 and r.empty == 1
    assert r.indices[0] == r.indices[1] and r.indices[2] == r.indices[3]
    assert r.indices[0] // grid.cells_per_country == geo.COUNTRIES.index("US")
