"""The privacy of a map, attacked: one ledger charge per map, refusal before any noise on
overspend, and the parallel-composition fact the single charge rests on (neighbouring streams change
one bucket's count of ones by at most 1)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import panstream as ps
import panstream.release.maps as maps


def test_one_ledger_entry_for_the_whole_map() -> None:
    est = ps.DensityEstimator("ipv4:10.0.0.0/16", budget=1.0)
    m = est.release_map(0.25, by="/24")  # 256 buckets, still one charge
    assert len(m.rows) == 256
    assert [(e.epsilon, e.mechanism) for e in est.ledger.entries] == [(0.25, "laplace map /24")]
    assert m.budget_remaining == 0.75 and m.epsilon_total == pytest.approx(m.epsilon_state + 0.25)
    est.release(0.25)  # the same ledger serves single releases and maps
    assert est.ledger.spent == 0.5 and len(est.ledger.entries) == 2


def test_overspend_is_refused_before_any_noise_is_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    est = ps.DensityEstimator("range:4096", budget=0.5)
    drawn = []
    monkeypatch.setattr(maps.NoiseLaw, "sample", lambda self: drawn.append(1) or 0)
    with pytest.raises(ps.BudgetExhaustedError, match="refused"):
        est.release_map(1.0, by=1024)
    assert drawn == [] and est.ledger.entries == []


def _neighbour_counts(extra: int, by: int) -> tuple[np.ndarray, np.ndarray]:
    """Counts per bucket of one table state fed S and S + {extra}, from the same starting table."""
    est = ps.DensityEstimator("range:4096", epsilon=1.0)
    est.update(range(0, 4096, 3))
    snap = est.snapshot()
    a, b = ps.DensityEstimator.restore(snap), ps.DensityEstimator.restore(snap)
    b.update([extra])
    return a._table.count_ones_by(by), b._table.count_ones_by(by)


def test_neighbouring_streams_differ_in_one_bucket_by_at_most_one() -> None:
    """The attack: look for a person whose arrival moves two buckets, or one by more than 1.
    It cannot succeed: one arrival redraws one cell."""
    for extra in (0, 1023, 1024, 4095):
        for _ in range(20):
            ca, cb = _neighbour_counts(extra, 1024)
            diff = np.abs(ca - cb)
            assert diff.sum() <= 1
            assert np.flatnonzero(diff).tolist() in ([], [extra // 1024])


def test_a_per_bucket_charge_would_be_caught_and_so_would_a_broken_counter() -> None:
    """Broken variants the tests above must catch: a counter that puts a cell into two buckets (an
    off-by-one at a boundary) makes one arrival move two buckets."""

    def overlapping_counts(bits: np.ndarray, by: int) -> np.ndarray:  # buckets share their edges
        return np.array([bits[i:i + by + 1].sum() for i in range(0, bits.size, by)])

    est = ps.DensityEstimator("range:4096")
    bits = est._table.bits().astype(np.int64)
    bits[1024] = 0
    flipped = bits.copy()
    flipped[1024] = 1  # one person's cell, on a bucket boundary
    diff = np.abs(overlapping_counts(bits, 1024) - overlapping_counts(flipped, 1024))
    assert diff.sum() == 2  # the broken counter breaks the L1-sensitivity-1 premise
    good = est._table.count_ones_by(1024)
    assert good.sum() == est.count_ones()  # the real counter partitions the cells exactly


def test_nothing_but_noisy_values_leaves_the_release() -> None:
    est = ps.DensityEstimator("range:2048", budget=10.0)
    est.update(range(100))
    exact = est._table.count_ones_by(1024)
    m = est.release_map(0.5, by=1024, mechanism="laplace")
    fields = set(m.to_dict()) | set(m.to_dict()["rows"][0])
    assert not {"ones", "count", "counts", "noise", "seed"} & fields
    # Laplace noise on a 2**-10 lattice: a released count equal to the exact count is rare.
    assert any(r.noisy_ones != c for r, c in zip(m.rows, exact, strict=True))


def _bucket0_outputs(mapper, extra_one: bool, trials: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Bucket 0's released count over ``trials`` maps of a fixed table: all zeros, or all zeros but
    cell 0 (one person's cell) when ``extra_one``. Each map comes from its own copy of the table
    with a fresh budget of exactly its epsilon (one ledger of thousands of entries would only time
    the ledger's sums)."""
    from panstream.estimators.bittable import BitTable

    packed = bytearray(2048 // 8)
    packed[0] = 1 if extra_one else 0

    def table() -> ps.DensityEstimator:
        est = ps.DensityEstimator("range:2048", epsilon=1.0, budget=1.0)
        est._table = BitTable.from_packed(2048, bytes(packed), est.layout)
        return est

    return np.array([mapper(table()) for _ in range(trials)])


def _empirical_epsilon_lower_bound(y0: np.ndarray, y1: np.ndarray) -> float:
    """The distinguishing attack 'is bucket 0's count >= 1?', as a lower confidence bound on the
    privacy loss. Each frequency is off by more than sqrt(ln(1e7) / 2n) with probability < 1e-7
    (Hoeffding), so the bound exceeds the true loss with probability < 2e-7."""
    n = y0.size
    margin = math.sqrt(math.log(1e7) / (2 * n))
    p1 = float(np.mean(y1 >= 1)) - margin
    p0 = float(np.mean(y0 >= 1)) + margin
    return math.log(max(p1, 1e-12) / p0)


def test_a_distinguisher_on_one_bucket_stays_within_epsilon_and_catches_an_exact_map(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Neighbouring tables differ in one cell. The best threshold test on the changed bucket's
    released count gets a loss of at most epsilon = 1 from the real map (true ratio exactly e for
    geometric noise at threshold 1), and far more from a broken map that noises only the total and
    publishes exact bucket counts."""
    monkeypatch.setattr(maps, "noise_quantile", lambda *args: 1.0)  # intervals play no part here
    trials = 4000

    def real(est: ps.DensityEstimator) -> float:
        return est.release_map(1.0, by=1024, mechanism="geometric").rows[0].noisy_ones

    def broken(est: ps.DensityEstimator) -> float:  # exact per-bucket counts leak
        return float(est._table.count_ones_by(1024)[0])

    lb = _empirical_epsilon_lower_bound(_bucket0_outputs(real, False, trials),
                                        _bucket0_outputs(real, True, trials))
    assert lb <= 1.0
    lb_broken = _empirical_epsilon_lower_bound(_bucket0_outputs(broken, False, trials),
                                               _bucket0_outputs(broken, True, trials))
    assert lb_broken > 1.0
