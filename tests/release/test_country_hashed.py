"""``hashed-ip`` by country (``hashed-ip-country:M``): one block of hashed cells per country in one
density table, released by country for one output epsilon.

The truth per country is the offline table's (:func:`panstream.geo.slots`).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from geo_samples import check_the_negative_rule, public_ipv4, truth_by_country

from panstream import estimators, geo
from panstream.errors import ConfigurationError
from panstream.estimators.hashed_country import CountryDensityEstimator

pytest.importorskip("iptocc")


def test_every_countrys_interval_covers_its_truth_at_the_stated_rate_for_one_charge() -> None:
    """8 states of 20,000 public IPv4 clients (8,192 cells per country, state epsilon 1), each
    released once at epsilon 1: 2,024 intervals at 95 %. A true coverage of 0.93 or more misses
    more than 199 with probability below 9e-7; each release charges once; each total is within 6
    standard errors of 20,000 (false failure < 2e-8)."""
    rng = np.random.default_rng(29)
    misses = 0
    for _ in range(8):
        items = public_ipv4(rng, 20_000)
        truth = truth_by_country(items)
        est = estimators.new("density", "hashed-ip-country:8192", 1.0, budget=1.0)
        assert isinstance(est, CountryDensityEstimator)
        est.update(items + items[:3000])
        rel = est.release(1.0)
        assert len(est.ledger.entries) == 1 and est.ledger.remaining == 0.0
        misses += sum(not (r.low <= t <= r.high) for r, t in zip(rel.rows, truth.tolist(),
                                                                   strict=True))
        assert abs(rel.distinct - 20_000) < 6 * rel.stderr
    assert misses <= 199, misses


def test_an_empty_block_is_released_below_zero_about_half_the_time_its_total_unclamped() -> None:
    """The rule for negative estimates holds for the density family's answer too: each block's
    linear count is released unclamped below 0 (``-M ln(1 - density)`` of a negative density), so
    an empty country is below 0 about half the time, shown at 0 with the note
    (``check_the_negative_rule``); the total is the sum of the unclamped rows.

    6 states of the same 300 clients (1,024 cells per country, state and release epsilon 1), about
    200 empty slots each, N >= 1,000 independent trials; the chance was measured at 0.505 over
    8,040. For any chance in [0.48, 0.52] the share leaves [0.38, 0.62] with probability at most
    2 exp(-2 N 0.1^2) < 5e-9 (Hoeffding). Summing the rows clamped at 0 instead would put the
    total about 6 of its standard errors above the truth (measured 5.4-7.0 in 4 releases)."""
    rng = np.random.default_rng(5)
    items = public_ipv4(rng, 300)
    empty = np.flatnonzero(truth_by_country(items) == 0)
    below = trials = 0
    for _ in range(6):
        est = CountryDensityEstimator("hashed-ip-country:1024", epsilon=1.0, budget=1.0)
        est.update(items)
        rel = est.release(1.0)
        below += check_the_negative_rule(rel, empty)
        trials += empty.size
        assert rel.distinct == pytest.approx(math.fsum(r.estimate for r in rel.rows), abs=1e-6)
    assert trials >= 1000
    assert 0.38 <= below / trials <= 0.62, (below, trials)


def test_empty_countries_blocks_look_like_any_other() -> None:
    """A dump: an empty country's block is Binomial(M, q) ones (no block of zeros names an absent
    country), each within 6 standard deviations (false failure < 253 x 2e-9)."""
    rng = np.random.default_rng(5)
    items = public_ipv4(rng, 3000)
    est = CountryDensityEstimator("hashed-ip-country:4096", epsilon=1.0)
    est.update(items)
    ones = est.ones_by_country()
    truth = truth_by_country(items)
    q = float(est.q)
    sd = math.sqrt(4096 * q * (1 - q))
    assert all(abs(int(k) - 4096 * q) < 6 * sd for k, t in zip(ones.tolist(), truth.tolist(),
                                                                strict=True) if t == 0)


def test_the_table_version_is_kept_and_checked_and_maps_are_refused() -> None:
    est = CountryDensityEstimator("hashed-ip-country:1024", epsilon=1.0, budget=1.0)
    est.update(["8.8.8.8", "2001:4860:4860::8888", "junk"])
    back = estimators.restore(est.snapshot())
    assert isinstance(back, CountryDensityEstimator) and back.universe.geo == geo.database()
    back.universe.geo = "iptocc 0.0.1"
    with pytest.raises(ConfigurationError, match="iptocc 0.0.1"):
        back.update(["1.1.1.1"])
    with pytest.raises(ConfigurationError, match="by country"):
        back.release_map(1.0, "/24")
    assert len(back.release(1.0).rows) == len(geo.COUNTRIES)


def test_plan_describes_one_block_of_m_cells_per_country() -> None:
    """``plan -u hashed-ip-country:M`` plans what ingest builds: 253 blocks of M hashed cells
    (253 x M bits), errors per country. An empty country's planned sd is the one the release by
    country reports for a country estimated at 0 (the same formula, not a hashed table of 253 x M
    cells), and the largest country's, with all of -n in it, is that of ``hashed-ip:M`` at -n."""
    import json

    from click.testing import CliRunner

    from panstream.cli.main import cli
    from panstream.planning import country_plan

    run = CliRunner().invoke
    r = run(cli, ["plan", "-u", "hashed-ip-country:4096", "--epsilon", "1", "-n", "1000"])
    assert r.exit_code == 0, r.output
    assert "253 blocks of 4,096 hashed cells, one per country = 1,036,288 bits" in r.output
    assert "errors per country" in r.output and "1,036,288 cells" not in r.output
    j = json.loads(run(cli, ["plan", "-u", "hashed-ip-country:4096", "--epsilon", "1", "-n",
                             "1000", "--release-epsilon", "1", "--json"]).output)
    assert (j["per"], j["blocks"], j["bits"]) == ("country", len(geo.COUNTRIES), 253 * 4096)
    plain = json.loads(run(cli, ["plan", "-u", "hashed-ip:4096", "--epsilon", "1", "-n", "1000",
                                 "--release-epsilon", "1", "--json"]).output)
    for mine, theirs in zip(j["calibrations"], plain["calibrations"], strict=True):
        assert mine["largest_country"]["stderr"] == pytest.approx(theirs["stderr_distinct"])
    est = CountryDensityEstimator("hashed-ip-country:1024", epsilon=1.0, budget=1.0)
    rel = est.release(1.0)
    planned = country_plan(1024, 253, 1.0, None, 1.0)["calibrations"][0]["empty_country"]
    at_zero = [row.stderr for row in rel.rows if row.estimate <= 0.0]  # plug-in density 0
    assert at_zero and all(s == pytest.approx(planned["stderr"], rel=1e-9) for s in at_zero)
    bad = run(cli, ["plan", "-u", "hashed-ip-country:4096", "--total-epsilon", "2"])
    assert bad.exit_code == 2 and "plans with --epsilon, -n and --release-epsilon" in bad.output
