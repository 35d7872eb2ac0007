"""A Sketch-Flip-Merge grid cut into routed slices (no broker): the slices make one sketch.

A routed consumer group (``panstream kafka --estimator sketch``) routes every item's cell of the
grid to the slice that holds it and keeps each slice as a bit table with the sketch's randomized
response. These tests show why the slices laid end to end are *one sketch fed the whole stream*,
with exactly its law:

* slices are **whole buckets** at every level (the routing order is bucket-major), their bounds
  tile the grid, and the hash's top bits spread a log's clients evenly over them (in Presto's own
  level-major order, slice 0 would take more than half of all arrivals);
* at epsilon 30 (a flip probability of 2**-32) the merged slices are exactly the noiseless
  bitmap, which is exactly what one :class:`SketchEstimator` fed the same items holds, for uneven
  slice counts and with a slice no member ever consumed;
* at epsilon 1 every region of the merged grid (each slice's buckets, hit and never-hit bits)
  has the D1 / D0 frequencies of the sketch's exact q: a slice that skipped its D0 draw fails;
* a store of sketch slices says it holds a sketch, releases one (sensitivity 1, state epsilon
  x1, the group's ledger) and exports to Presto; per-partition sketch shards are refused;
* the attack: a client whose requests reach every partition leaves one bit in the group's
  snapshots, so reading them tells no more than the sketch's own epsilon allows.

False failures: the epsilon-30 checks see a stray draw with probability below
2 x 1,280 x 2**-32 < 1e-6 per test; the epsilon-1 checks allow 5.6 standard deviations in each of
at most 34 regions (two-sided normal tail 2.2e-8 each: below 1e-6 per test); the attack allows
6 standard deviations (2e-9).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from panstream import estimators
from panstream.errors import ConfigurationError, StateError
from panstream.estimators.base import Estimator
from panstream.estimators.density import DensityEstimator
from panstream.sketch import sfm
from panstream.sketch.estimator import SketchEstimator
from panstream.sketch.release import SketchRelease
from panstream.sketch.sfm import SketchGrid
from panstream.state import format as fmt
from panstream.state.merge import merge_slices
from panstream.state.slices import SliceLayout, encode_slice, head_params, slice_family, slice_of
from panstream.state.stores import (
    DirectoryStore,
    encode_shard,
    ensure_ledger,
    merge_store,
    release_store,
    store_layout,
)

Z = 5.6  # standard deviations allowed per region (module docstring)


def clients(n: int, seed: int = 1) -> list[str]:
    """n distinct public-looking clients, IPv4 and IPv6 (test data, not privacy draws)."""
    rng = np.random.default_rng(seed)
    v4 = rng.choice(1 << 32, n // 2, replace=False)
    out = [f"{a >> 24}.{(a >> 16) & 255}.{(a >> 8) & 255}.{a & 255}" for a in v4.tolist()]
    out += [f"2001:db8:{i >> 16:x}:{i & 0xffff:x}::1" for i in range(n - len(out))]
    return out


EPS = 30.0


def feed(layout: SliceLayout, items: list[str], eps: float = EPS, skip: frozenset[int] = frozenset()
         ) -> dict[int, Estimator]:
    """What a routed group does: cells of the items, routed, applied to the slices' tables."""
    return feed_cells(layout, layout.universe.indices(items).indices, eps, skip)


def feed_cells(layout: SliceLayout, cells: np.ndarray, eps: float = EPS,
               skip: frozenset[int] = frozenset()) -> dict[int, Estimator]:
    """:func:`feed` from the items' cells (an item's cell is a fixed hash: a trial loop hashes
    its stream once)."""
    kind, cal = slice_family("sketch", "tight")
    slices = {r: estimators.new(kind, layout.slice_universe(r), eps, calibration=cal)
              for r in range(layout.count) if r not in skip}
    for r, data in layout.route(cells):
        if r in slices:
            slices[r].update_indices(layout.decode(r, data))
    return slices


def buckets_of(layout: SliceLayout, r: int) -> np.ndarray:
    """Which bits of the grid (Presto's order) slice ``r`` holds: its buckets at every level."""
    grid = layout.universe
    assert isinstance(grid, SketchGrid)
    lo, hi = layout.bounds(r)
    bucket = np.arange(grid.size) % grid.buckets
    return (bucket >= lo // grid.levels) & (bucket < hi // grid.levels)


def noiseless(grid: SketchGrid, items: list[str]) -> np.ndarray:
    clear = np.zeros(grid.size, dtype=np.uint8)
    clear[grid.indices(items).indices] = 1
    return clear


# ---------------------------------------------------------------------- geometry
def test_default_grid_slices_are_whole_buckets_at_every_level() -> None:
    lay = SliceLayout(SketchGrid(), 16)
    assert lay.unit == 24 and [lay.bounds(r) for r in (0, 15)] == [(0, 6144), (92160, 98304)]
    assert lay.width == 2 and "256 buckets x 24 levels" in lay.describe()
    for count in (1, 3, 7, 16, 4096):
        lay = SliceLayout(SketchGrid(), count)
        edges = lay.edges()
        assert edges[0] == 0 and edges[-1] == lay.universe.size
        assert (edges % 24 == 0).all() and (np.diff(edges) > 0).all()
    with pytest.raises(ConfigurationError, match="whole buckets"):
        SliceLayout(SketchGrid(), 4097)


def test_a_cell_goes_to_the_slice_of_its_bucket() -> None:
    grid = SketchGrid(64, 8, "id")
    lay = SliceLayout(grid, 5)
    level, bucket = np.meshgrid(np.arange(8), np.arange(64), indexing="ij")
    cells = (level * 64 + bucket).reshape(-1)
    buckets = bucket.reshape(-1)
    for r, data in lay.route(cells.copy()):
        lo, hi = lay.bounds(r)
        local = lay.decode(r, data)
        b_lo, b_hi = lo // 8, hi // 8
        mine = np.flatnonzero((buckets >= b_lo) & (buckets < b_hi))
        assert local.size == mine.size == (b_hi - b_lo) * 8  # every level of its buckets
        assert sorted((local + lo).tolist()) == sorted(lay.routing_order(cells[mine]).tolist())
    # routing order is a permutation, and grid_order undoes it
    ramp = np.arange(grid.size)
    assert (np.sort(lay.routing_order(ramp)) == ramp).all()
    bm = np.empty(grid.size, dtype=np.int64)
    bm[lay.routing_order(ramp)] = ramp  # value in routing order = Presto cell
    assert (lay.grid_order(bm) == ramp).all()


def test_bucket_ranges_spread_a_logs_clients_evenly_over_the_slices() -> None:
    grid = SketchGrid()
    cells = grid.indices(clients(60_000)).indices
    bucket_major = np.bincount(SliceLayout(grid, 16).slice_of_cells(
        SliceLayout(grid, 16).routing_order(cells)), minlength=16) / cells.size
    presto_order = np.bincount(cells * 16 // grid.size, minlength=16) / cells.size
    assert bucket_major.max() < 1.1 / 16  # deterministic: the hashes of fixed items
    assert presto_order[0] > 0.5  # level 0 (half of all hashes) would be slice 0's alone


# ---------------------------------------------------------------------- the law
@pytest.mark.parametrize("count", [1, 3, 16])
def test_at_epsilon_30_the_slices_are_the_noiseless_bitmap_of_one_sketch(count: int) -> None:
    grid = SketchGrid(128, 10, "ip")
    lay = SliceLayout(grid, count)
    items = clients(3000)
    merged = merge_slices(feed(lay, items), lay)
    assert isinstance(merged, SketchEstimator) and merged.universe == grid
    one = SketchEstimator(EPS, 128, 10, "ip")
    one.update(items)
    clear = noiseless(grid, items)
    assert (merged.bits() == clear).all() and (one.bits() == clear).all()
    assert merged.q == one.q and merged.epsilon_state == one.epsilon_state
    assert (merged.ones_by_level() == one.ones_by_level()).all()
    assert merged.estimate().n == pytest.approx(one.estimate().n)
    assert sfm.to_presto(merged.presto()) == sfm.to_presto(one.presto())


def test_a_slice_never_consumed_is_a_fresh_d0_draw() -> None:
    grid = SketchGrid(128, 10, "ip")
    lay = SliceLayout(grid, 4)
    items = clients(3000)
    merged = merge_slices(feed(lay, items, skip=frozenset({2})), lay)
    assert isinstance(merged, SketchEstimator)
    want = noiseless(grid, items)
    want[buckets_of(lay, 2)] = 0  # never applied: D0 draws at q = 2**-32
    assert (merged.bits() == want).all()


def test_at_epsilon_1_every_slice_has_the_sketchs_d0_and_d1_frequencies() -> None:
    grid = SketchGrid()
    lay = SliceLayout(grid, 16)
    items = clients(40_000, seed=2)
    merged = merge_slices(feed(lay, items, 1.0), lay)
    assert isinstance(merged, SketchEstimator)
    q = float(merged.q)
    assert merged.q == SketchEstimator(1.0).q == Fraction(DensityEstimator(
        "range:8", 1.0, "rr").q)
    bits, hit = merged.bits(), noiseless(grid, items).astype(bool)
    for r in range(16):
        region = buckets_of(lay, r)
        for mask, prob in ((region & hit, 1 - q), (region & ~hit, q)):
            n, k = int(mask.sum()), int(bits[mask].sum())
            assert n > 500
            assert abs(k - n * prob) < Z * math.sqrt(n * prob * (1 - prob)), (r, n, k, prob)


def test_a_slice_that_skips_its_d0_draw_is_caught() -> None:
    """The attack on the law: a slice table starting at all zeros (no D0 draw) is one region of
    the check above failing by far more than the allowed deviation."""
    grid = SketchGrid()
    lay = SliceLayout(grid, 16)
    slices = {r: DensityEstimator(lay.slice_universe(r), 1.0, "rr") for r in range(16)}
    slices[5]._table.wipe()  # the broken slice: zeros where the D0 draws should be
    merged = merge_slices(slices, lay)
    assert isinstance(merged, SketchEstimator)
    q = float(merged.q)
    region = buckets_of(lay, 5)
    n, k = int(region.sum()), int(merged.bits()[region].sum())
    assert abs(k - n * q) > Z * math.sqrt(n * q * (1 - q))


# ---------------------------------------------------------------------- snapshots and stores
def test_a_sketch_slice_snapshot_names_its_grid_and_refuses_another_calibration() -> None:
    lay = SliceLayout(SketchGrid(256, 12, "id"), 4)
    est = DensityEstimator(lay.slice_universe(1), 2.0, "rr")
    params = head_params(encode_slice(est, lay, 1))
    assert slice_of(params) == (lay, 1)
    wrong = DensityEstimator(lay.slice_universe(1), 2.0, "tight")
    with pytest.raises(fmt.CorruptSnapshotError, match="does not describe"):
        slice_of(head_params(encode_slice(wrong, lay, 1)))
    with pytest.raises(StateError, match="randomized response"):
        merge_slices({1: wrong}, lay)


def sketch_store(tmp_path: Path, items: list[str], count: int = 4, eps: float = 4.0
                 ) -> DirectoryStore:
    tmp_path.mkdir(exist_ok=True)
    store = DirectoryStore(tmp_path)
    ensure_ledger(store, 1.0)
    lay = SliceLayout(SketchGrid(), count)
    slices = feed(lay, items, eps)
    for r, est in slices.items():
        store.save(f"g-cells/{r}", encode_slice(est, lay, r))
    return store


def test_a_store_of_sketch_slices_releases_one_sketch(tmp_path: Path) -> None:
    items = clients(20_000, seed=3)
    store = sketch_store(tmp_path, items)
    layout = store_layout(store)
    assert layout["estimator"] == ["sketch"] and layout["layout"] == "slices"
    assert layout["universe"] == "sketch:4096x24:ip" and layout["slices"] == 4
    group = merge_store(store)
    assert isinstance(group.estimator, SketchEstimator)
    assert (group.method, group.sensitivity, group.state_tables) == ("slices", 1, 1)
    rel, group = release_store(store, 0.5)
    assert isinstance(rel, SketchRelease)
    assert rel.epsilon_total == pytest.approx(group.estimator.epsilon_state + 0.5)
    assert rel.budget_remaining == pytest.approx(0.5)
    # a 99.9999 % interval of the noisy count covers the truth (false failure 1e-6)
    rel2, _ = release_store(store, 0.5, confidence=1 - 1e-6)
    assert rel2.low <= 20_000 <= rel2.high
    with pytest.raises(Exception, match="budget"):
        release_store(store, 0.5)


def test_per_partition_sketch_shards_are_refused_with_the_way_out(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    ensure_ledger(store, 1.0)
    for p in range(2):
        store.save(f"events/{p}", encode_shard(SketchEstimator(1.0, 64, 8, "id")))
    with pytest.raises(StateError, match="--layout slices"):
        merge_store(store)
    with pytest.raises(ConfigurationError, match="--layout slices"):
        SketchEstimator(1.0).release(0.1, sensitivity=2, state_tables=2)


def test_a_groups_sketch_is_exported_to_presto_then_every_slice_starts_afresh(
        tmp_path: Path) -> None:
    """``panstream rotate --state-dir DIR --export-presto FILE``: the slices laid end to end are
    written as one Presto sketch (the noiseless bitmap at epsilon 30), then replaced with fresh
    D0 slices, so no later state can be compared with the published one; a guard that does not
    match rotates and exports nothing; the group's ledger is kept."""
    items = clients(5000, seed=4)
    store = sketch_store(tmp_path / "state", items, count=4, eps=EPS)
    out = tmp_path / "day.sfm"
    cmd = [sys.executable, "-m", "panstream", "rotate", "--state-dir", str(tmp_path / "state")]
    bad = subprocess.run([*cmd, "-u", "sketch:1024x24:ip", "--export-presto", str(out)],
                         capture_output=True, timeout=60)
    assert bad.returncode == 1 and b"nothing was rotated" in bad.stderr and not out.exists()
    done = subprocess.run([*cmd, "--export-presto", str(out), "--json"], capture_output=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout)["slices"] == 4
    sk = sfm.from_presto(out.read_bytes())
    assert (sk.buckets, sk.levels) == (4096, 24)
    clear = np.unpackbits(np.frombuffer(sk.bitmap, dtype=np.uint8), bitorder="little")
    assert (clear == noiseless(SketchGrid(), items)).all()
    after = merge_store(store).estimator
    assert isinstance(after, SketchEstimator) and after.count_ones() == 0  # fresh D0 at 2**-32
    rel, _ = release_store(store, 0.25)  # the same ledger, still open
    assert rel.budget_remaining == pytest.approx(0.75)


def test_an_unkeyed_client_in_every_partition_leaves_one_bit_in_a_routed_sketch() -> None:
    """The attack of tests/state/test_slices_privacy.py on the sketch: client ``x``'s requests
    reach all 8 partitions (unkeyed); the adversary reads every slice snapshot of the group (one
    intrusion, through the real encode/restore/merge) and says "x arrived" iff x's bit is 1.
    Routed by bucket range, x's 8 arrivals all redraw the one bit of its one slice, so the
    advantage is exactly ``(1 - q) - q = tanh(epsilon_state / 2)`` = 0.462 at epsilon 1, the
    sketch's own guarantee; 1,000 trials a world, the bound +- 6 sd (sd <= 0.022) fails falsely
    with probability below 2e-9 on either side."""
    grid = SketchGrid(16, 4, "ip")
    lay = SliceLayout(grid, 4)
    x = "203.0.113.7"
    x_cell = int(grid.indices([x]).indices[0])
    others = [c for c in clients(200, seed=5) if int(grid.indices([c]).indices[0]) != x_cell][:6]
    ones = {False: 0, True: 0}
    trials = 1000
    for arrived in (False, True):
        stream = others + ([x] * 8 if arrived else [])
        cells = grid.indices(stream).indices  # the same every trial: hashed once
        for _ in range(trials):
            slices = feed_cells(lay, cells.copy(), 1.0)
            snaps = {r: encode_slice(e, lay, r) for r, e in slices.items()}
            seen = {r: estimators.restore(b) for r, b in snaps.items()}  # what the intruder reads
            merged = merge_slices(seen, lay)
            assert isinstance(merged, SketchEstimator)
            ones[arrived] += int(merged.bits()[x_cell])
    advantage = (ones[True] - ones[False]) / trials
    q = SketchEstimator(1.0).q
    bound = float(1 - 2 * q)
    assert bound == pytest.approx(math.tanh(SketchEstimator(1.0).epsilon_state / 2))
    assert abs(advantage - bound) < 6 * math.sqrt(2 * 0.25 / trials), advantage
