"""Density maps: one noisy release of every bucket's count of ones, charged once to the ledger.

These tests walk through what a map promises: exact labels, intervals that cover the truth at their
stated level, a total consistent with the rows, one ledger entry per map, and clear refusals.
"""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest

import panstream as ps
from panstream.release.maps import MapRelease, bucket_halfwidth, debias, format_map


def test_ipv4_labels_are_the_bucket_prefixes() -> None:
    est = ps.DensityEstimator("ipv4:10.0.0.0/22", budget=10.0)
    m = est.release_map(0.5, by="/24")
    assert [r.label for r in m.rows] == ["10.0.0.0/24", "10.0.1.0/24", "10.0.2.0/24", "10.0.3.0/24"]
    assert [(r.first, r.cells) for r in m.rows] == [(0, 256), (256, 256), (512, 256), (768, 256)]
    assert est.release_map(0.5, by=22).rows[0].label == "10.0.0.0/22"  # the whole universe
    assert len(est.release_map(0.5, by=32).rows) == 1024  # one bucket per address


def test_ipv6_labels_use_the_compressed_form() -> None:
    est = ps.DensityEstimator(ps.Universe.ipv6("2001:db8::/48", 64))
    m = est.release_map(0.5, by="/56")
    assert len(m.rows) == 256 and m.bucket_cells == 256
    assert [r.label for r in m.rows[:2]] == ["2001:db8::/56", "2001:db8:0:100::/56"]
    assert m.rows[-1].label == "2001:db8:0:ff00::/56"


def test_range_buckets_are_inclusive_and_the_short_last_one_says_so() -> None:
    est = ps.DensityEstimator("range:2500")
    rows = est.release_map(0.5, by=1000).rows
    assert [r.label for r in rows] == ["0\u2013999", "1000\u20131999", "2000\u20132499"]
    assert [r.note for r in rows[:2]] == ["", ""]
    assert rows[2].cells == 500 and rows[2].note == "last bucket: 500 cells, not 1000"


def test_the_total_is_the_sum_of_the_noisy_buckets() -> None:
    est = ps.DensityEstimator("range:4096", epsilon=1.0)
    est.update(range(1000))
    m = est.release_map(0.5, by=512)
    assert m.total.noisy_ones == pytest.approx(sum(r.noisy_ones for r in m.rows), abs=1e-6)
    assert m.total.distinct == pytest.approx(sum(r.distinct for r in m.rows), rel=1e-9, abs=1e-6)
    assert m.total.density_low < m.total.density < m.total.density_high


def test_debias_inverts_the_expected_fraction_of_ones() -> None:
    from fractions import Fraction

    p, q = Fraction(3, 4), Fraction(1, 2)
    for f in (0.0, 0.25, 1.0):
        cells = 1024
        expected_ones = cells * (f * 0.75 + (1 - f) * 0.5)
        assert debias(expected_ones, cells, p, q) == pytest.approx(f)
    assert debias(0.3 * 100, 100, 0.7, 0.3) == pytest.approx(0.0)  # works for q != 1/2 too


def test_intervals_cover_known_bucket_densities_at_their_level() -> None:
    """Sixteen buckets with densities from empty to full, 60 independent tables and maps.

    Each row's 95 % interval should cover its true density. The interval moves the plug-in density
    to the wider end of its 1/64 grid cell, so coverage is at least about 0.95. Over 960 rows the
    count of covers is Binomial(960, >= 0.95): falling under 0.95 - 4.75 sd (sd = 0.00703) has
    probability < 1e-6, so the threshold 0.9166 fails honestly at most once in a million runs.
    """
    cells, n_buckets, trials = 1024, 16, 60
    densities = np.linspace(0.0, 1.0, n_buckets)
    items = np.concatenate([b * cells + np.arange(round(d * cells)) for b, d in enumerate(densities)])
    truth = np.array([round(d * cells) / cells for d in densities])
    covered = 0
    for _ in range(trials):
        est = ps.DensityEstimator(ps.Universe.range(cells * n_buckets), epsilon=1.0, budget=1e9)
        est.update_indices(items.astype(np.int64))
        m = est.release_map(1.0, by=cells, mechanism="laplace")
        covered += sum(r.density_low <= t <= r.density_high for r, t in zip(m.rows, truth, strict=True))
    n = trials * n_buckets
    sd = math.sqrt(0.95 * 0.05 / n)
    assert covered / n >= 0.95 - 4.75 * sd, covered / n


def test_the_stated_halfwidth_matches_the_planner() -> None:
    est = ps.DensityEstimator("ipv4:10.0.0.0/16", epsilon=1.0)
    m = est.release_map(1.0, by="/24")
    assert m.halfwidth == pytest.approx(bucket_halfwidth(256, 1.0, est.p, est.q), rel=1e-9)
    # Smaller buckets are noisier: a /28 (16 cells) is about 4x as wide as a /24 (256 cells).
    assert bucket_halfwidth(16, 1.0, est.p, est.q) > 3 * bucket_halfwidth(256, 1.0, est.p, est.q)


def test_export_as_dict_json_csv_and_text() -> None:
    est = ps.DensityEstimator("ipv4:192.168.0.0/23")
    m = est.release_map(0.5, "/24", "geometric")
    assert isinstance(m, ps.MapRelease) and isinstance(m, MapRelease)
    d = json.loads(json.dumps(m.to_dict()))
    assert d["by"] == "/24" and d["epsilon"]["release"] == 0.5 and len(d["rows"]) == 2
    assert d["rows"][1]["label"] == "192.168.1.0/24"
    buf = io.StringIO()
    m.to_csv(buf)
    lines = buf.getvalue().splitlines()
    assert lines[0].startswith("label,first,cells,noisy_ones,density,")
    assert lines[2].startswith("192.168.1.0/24,256,256,")
    with pytest.raises(AttributeError):
        m.rows[0].density = 1.0  # type: ignore[misc]  # rows are frozen
    text = format_map(m)
    assert text.splitlines()[0] == ("panstream map: geometric mechanism, epsilon 0.5 over "
                                    "ipv4:192.168.0.0/23 by /24 (2 buckets of 256 cells)")
    assert "for the whole map" in text


def test_geometric_counts_are_integers_within_the_bucket() -> None:
    est = ps.DensityEstimator("range:300")
    for r in est.release_map(0.01, by=100, mechanism="geometric").rows:
        assert r.noisy_ones == int(r.noisy_ones) and 0 <= r.noisy_ones <= r.cells


@pytest.mark.parametrize(("universe", "by", "needle"), [
    ("hashed:4096", 8, "hash buckets"),
    ("ipv4:10.0.0.0/16", "/8", "between the universe's own prefix /16 and its cell size /32"),
    ("ipv4:10.0.0.0/16", "/33", "between"),
    ("ipv4:10.0.0.0/16", "24x", "prefix length such as /24"),
    ("range:100", 0, "from 1 to 100"),
    ("range:100", "/24", "number of cells per bucket"),
])
def test_refusals_say_what_to_do_and_charge_nothing(universe: str, by: object, needle: str) -> None:
    est = ps.DensityEstimator(universe)
    with pytest.raises(ps.ConfigurationError, match=None) as info:
        est.release_map(0.5, by=by)  # type: ignore[arg-type]
    assert needle in str(info.value)
    assert est.ledger.entries == []


@pytest.mark.parametrize("layout", ["packed", "bytes"])
def test_count_ones_by_partitions_the_table_exactly(layout: str) -> None:
    """Every cell in exactly one bucket, both code paths (whole 64-bit words, and any boundary)."""
    from panstream.estimators.bittable import BitTable

    for size in (1, 9, 4099, 1 << 14):
        table = BitTable.random(size, layout)
        bits = table.bits().astype(np.int64)
        for by in {1, 3, 8, 13, 64, 256, size}:
            expected = np.add.reduceat(bits, np.arange(0, size, by))
            assert table.count_ones_by(by).tolist() == expected.tolist(), (size, by)
