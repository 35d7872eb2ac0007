"""Slices of one table (no broker): range routing, the routed encoding, and the concatenation law.

A routed consumer group keeps one table as R slices of contiguous cells; these tests show the
pieces that make "the slices laid end to end *are* one table" true:

* routing puts every cell ``c`` in the one slice whose range holds it (``floor(c R / |X|)``), and
  the ranges tile X;
* the routed encoding round-trips every index with its multiplicity (the counter family counts
  arrivals, not distinct cells) and rejects records of another layout;
* ``merge_slices`` is the exact concatenation of the slices' tables, for bit and counter tables
  and for boundaries that are not byte-aligned, and gives never-consumed slices a fresh D0 draw;
* a store of slices releases as one table (sensitivity 1, state epsilon x1) and says so.

The one statistical check (a never-consumed slice of 2**16 fair coins) allows 6 standard
deviations: false failure below 2e-9.
"""

from __future__ import annotations

import numpy as np
import pytest

from panstream import estimators
from panstream.errors import ConfigurationError, StateError
from panstream.estimators.density import DensityEstimator
from panstream.estimators.frequency import FrequencyEstimator
from panstream.state.merge import merge_slices
from panstream.state.slices import SliceLayout, encode_slice, head_params, slice_of
from panstream.state.stores import (
    DirectoryStore,
    encode_shard,
    ensure_ledger,
    merge_store,
    release_store,
    store_layout,
)
from panstream.universe import Universe

rng = np.random.default_rng(5)  # test data only, never a privacy draw


@pytest.mark.parametrize(("spec", "count"), [("ipv4:10.0.0.0/16", 16), ("range:1000", 7),
                                             ("hashed:100003", 3), ("ipv6:2001:db8::/48@64", 5),
                                             ("ipv4:0.0.0.0/0", 16)])
def test_slices_tile_the_universe_and_routing_follows_the_ranges(spec: str, count: int) -> None:
    lay = SliceLayout(Universe.parse(spec), count)
    edges = lay.edges()
    assert edges[0] == 0 and edges[-1] == lay.universe.size and (np.diff(edges) > 0).all()
    sizes = [lay.size(r) for r in range(count)]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == lay.universe.size
    idx = rng.integers(0, lay.universe.size, 20_000, dtype=np.int64)
    idx[:3] = [0, lay.universe.size - 1, edges[1]]
    want = idx.copy()
    got: dict[int, np.ndarray] = {}
    for r, data in lay.route(idx):
        got[r] = np.sort(lay.decode(r, data) + lay.bounds(r)[0])
    assert not idx.any()  # the caller's indices are wiped
    for r in range(count):
        lo, hi = lay.bounds(r)
        mine = np.sort(want[(want >= lo) & (want < hi)])
        assert np.array_equal(got.get(r, np.empty(0, np.intp)), mine)  # multiplicities kept


def test_the_encoding_is_two_bytes_while_slices_fit_and_four_above() -> None:
    assert SliceLayout(Universe.parse("ipv4:10.0.0.0/16"), 1).width == 2
    assert SliceLayout(Universe.parse("ipv4:10.0.0.0/15"), 1).width == 4
    assert SliceLayout(Universe.parse("ipv4:10.0.0.0/15"), 2).width == 2
    assert SliceLayout(Universe.parse("ipv4:0.0.0.0/0"), 16).width == 4
    lay = SliceLayout(Universe.parse("ipv4:10.0.0.0/16"), 4)  # 16,384 cells a slice
    parts = lay.route(np.array([5, 16_390, 5, 5], dtype=np.intp))
    assert parts == [(0, bytearray(b"\x05\x00" * 3)),  # raw little-endian local offsets,
                     (1, bytearray(b"\x06\x00"))]      # multiplicities kept


@pytest.mark.parametrize(("spec", "count", "n"), [("ipv4:10.0.0.0/16", 16, 20_000),
                                                  ("range:1003", 7, 900),
                                                  ("range:100000", 7, 900),
                                                  ("ipv4:0.0.0.0/0", 16, 2_000),
                                                  ("sketch:4096x24:ip", 16, 20_000)])
def test_a_bit_table_group_routes_each_cell_of_a_poll_once(spec: str, count: int, n: int) -> None:
    """Issue 38: a bit-table arrival redraws its cell from D1 however often it is named, so a
    poll's repeats need not travel. ``distinct=True`` sends each cell of the batch once, in the
    same encoding (any member decodes it), to the same slice; the batch and the universe-sized
    mask it is marked in are wiped. A universe far larger than the batch (all of IPv4 here) keeps
    the sort and the multiplicities: the mask would cost more than the repeats save."""
    from panstream.state.slices import DISTINCT_MASK_RATIO, whole_universe

    lay = SliceLayout(whole_universe(spec), count)
    idx = rng.integers(0, lay.universe.size, n, dtype=np.int64)
    idx[n // 2:] = idx[: n - n // 2]  # every cell at least twice
    want = lay.routing_order(idx)
    got = {r: lay.decode(r, data) + lay.bounds(r)[0] for r, data in lay.route(idx, True)}
    assert not idx.any()  # the caller's indices are wiped
    big = lay.universe.size > DISTINCT_MASK_RATIO * n
    for r in range(count):
        lo, hi = lay.bounds(r)
        mine = want[(want >= lo) & (want < hi)]
        have = got.get(r, np.empty(0, np.intp))
        if big:
            assert np.array_equal(np.sort(have), np.sort(mine))  # multiplicities kept
        else:
            assert np.array_equal(have, np.unique(mine))  # once each, sorted


def test_a_poll_routed_once_per_cell_leaves_the_table_of_the_whole_stream() -> None:
    """At epsilon 30 a table reads exactly the cells seen: routing a stream with heavy repeats
    once per cell per batch gives the same merged table as routing every arrival."""
    lay = SliceLayout(Universe.parse("ipv4:10.0.0.0/16"), 16)
    stream = rng.integers(0, 3_000, 60_000)
    parts = {r: estimators.new("density", lay.slice_universe(r), 30.0, layout=lay.table_layout)
             for r in range(lay.count)}
    for batch in np.array_split(stream, 7):
        for r, data in lay.route(batch.copy(), distinct=True):
            assert len(data) // lay.width <= 3_000  # the repeats stayed home
            parts[r].update_indices(lay.decode(r, data))
    seen = np.zeros(lay.universe.size, np.uint8)
    seen[stream] = 1
    assert int((merge_slices(parts, lay).bits() != seen).sum()) <= 2  # 2**-32 a cell: < 1e-9


def test_records_of_another_layout_are_refused() -> None:
    lay = SliceLayout(Universe.parse("range:1000"), 4)  # 250 cells a slice, 2 bytes an index
    with pytest.raises(StateError, match="multiple of 2"):
        lay.decode(0, b"\x01\x00\x02")
    with pytest.raises(StateError, match="beyond its 250 cells"):
        lay.decode(0, np.array([250], dtype="<u2").tobytes())
    with pytest.raises(StateError, match="out of range"):
        lay.route(np.array([1000]))
    with pytest.raises(ConfigurationError, match="--slices 11"):
        SliceLayout(Universe.parse("range:10"), 11)


def _routed(lay: SliceLayout, kind: str, stream: np.ndarray, epsilon: float,
            skip: tuple[int, ...] = ()) -> dict[int, estimators.Estimator]:
    """The slices a routed group keeps after ``stream`` (slices in ``skip`` never consumed)."""
    parts = {r: estimators.new(kind, lay.slice_universe(r), epsilon, modulus=16,
                               layout=lay.table_layout)
             for r in range(lay.count) if r not in skip}
    for r, data in lay.route(stream.copy()):
        if r in parts:
            parts[r].update_indices(lay.decode(r, data))
    return parts


@pytest.mark.parametrize("spec", ["range:1003", "ipv4:10.0.0.0/20"])
def test_merged_slices_are_the_exact_concatenation_of_their_tables(spec: str) -> None:
    """Whatever the tables hold, cell lo_r + i of the merged table is cell i of slice r (here with
    boundaries inside bytes: 1003 cells in 7 slices)."""
    lay = SliceLayout(Universe.parse(spec), 7)
    dens = _routed(lay, "density", rng.integers(0, lay.universe.size, 900), 1.0)
    freq = _routed(lay, "frequency", rng.integers(0, lay.universe.size, 900), 1.0)
    full = merge_slices(dens, lay)
    counters = merge_slices(freq, lay)
    assert isinstance(full, DensityEstimator) and isinstance(counters, FrequencyEstimator)
    assert full.universe == lay.universe and counters.universe == lay.universe
    assert np.array_equal(full.bits(), np.concatenate([dens[r].bits() for r in range(7)]))
    assert np.array_equal(counters.counters(),
                          np.concatenate([freq[r].counters() for r in range(7)]))  # type: ignore[attr-defined]


def test_a_routed_stream_gives_exactly_the_one_table_of_the_whole_stream() -> None:
    """At epsilon 30 (p = 1 - 2**-32, q = 2**-32) a table reads exactly the cells seen: the merged
    slices read the stream's cells, and the merged counters its multiplicities mod 16."""
    lay = SliceLayout(Universe.parse("ipv4:10.0.0.0/16"), 16)
    stream = rng.integers(0, lay.universe.size, 30_000)
    full = merge_slices(_routed(lay, "density", stream, 30.0), lay)
    seen = np.zeros(lay.universe.size, np.uint8)
    seen[stream] = 1
    assert int((full.bits() != seen).sum()) <= 2  # 2**-32 per cell: <= 2 flips fails < 1e-9
    counts = np.bincount(stream, minlength=lay.universe.size) % 16
    freq = merge_slices(_routed(lay, "frequency", stream, 30.0), lay)
    diff = freq.counters().astype(int) - counts  # type: ignore[attr-defined]
    assert int((diff % 16 != 0).sum()) <= 2  # D starts at 0 but with probability ~2**-32


def test_a_slice_never_consumed_gets_fresh_initial_draws() -> None:
    lay = SliceLayout(Universe.parse("range:262144"), 4)
    parts = {r: DensityEstimator(lay.slice_universe(r), 1.0, "tight") for r in (0, 1, 3)}
    full = merge_slices(parts, lay)
    lo, hi = lay.bounds(2)
    ones = int(full.bits()[lo:hi].sum())
    n = hi - lo
    assert abs(ones - n / 2) <= 6 * (n / 4) ** 0.5


def test_slice_snapshots_name_their_layout_and_mismatches_are_refused() -> None:
    lay = SliceLayout(Universe.parse("ipv4:10.0.0.0/24"), 3)
    est = DensityEstimator(lay.slice_universe(1))
    data = encode_slice(est, lay, 1)
    assert slice_of(head_params(data)) == (lay, 1)
    assert estimators.restore(data).size == lay.size(1)
    assert slice_of(head_params(encode_shard(est))) is None  # a per-partition shard
    with pytest.raises(StateError):
        encode_slice(est, lay, 0)  # slice 0 has 86 cells, this table 85
    other = SliceLayout(Universe.parse("ipv4:10.0.0.0/24"), 4)
    with pytest.raises(StateError):
        merge_slices({0: est}, other)


def test_a_store_of_slices_releases_as_one_table(tmp_path) -> None:  # noqa: ANN001
    lay = SliceLayout(Universe.parse("ipv4:10.0.0.0/16"), 4)
    store = DirectoryStore(tmp_path / "s")
    ensure_ledger(store, 1.0)
    for r, est in _routed(lay, "density", rng.integers(0, 65536, 5000), 1.0, skip=(2,)).items():
        store.save(f"g-cells/{r}", encode_slice(est, lay, r))
    got = store_layout(store)
    assert got.pop("parameters")["epsilon"] == 1.0  # the family's public parameters
    assert got == {"estimator": ["density"], "layout": "slices", "universe": lay.universe.spec,
                   "slices": 4, "slices_present": [0, 1, 3]}
    rel, group = release_store(store, 0.5, by="/24")  # maps work: the cells name addresses
    assert (group.method, group.layout, group.state_tables, group.sensitivity) == \
        ("slices", "slices", 1, 1)
    assert rel.to_dict()["universe"] == lay.universe.spec
    with pytest.raises(ConfigurationError, match="--merge sum does not apply"):
        merge_store(store, "sum")
    store.save("events/0", encode_shard(DensityEstimator(lay.universe)))
    assert store_layout(store)["layout"] == "mixed"
    with pytest.raises(StateError, match="one store per group and layout"):
        merge_store(store)


def test_inspect_says_which_layout_a_store_holds(tmp_path) -> None:  # noqa: ANN001
    from click.testing import CliRunner

    from panstream.cli.main import cli

    lay = SliceLayout(Universe.parse("ipv4:10.0.0.0/16"), 4)
    store = DirectoryStore(tmp_path / "s")
    store.save("g-cells/1", encode_slice(DensityEstimator(lay.slice_universe(1)), lay, 1))
    res = CliRunner().invoke(cli, ["inspect", "--state-dir", str(tmp_path / "s")])
    assert res.exit_code == 0 and "routed slices" in res.output and "in 4 slices (1 saved" in res.output
    assert "family           density (calibration rr, epsilon 1.0): epsilon_state = " in res.output
    assert "output budget    no release ledger yet" in res.output
    led = DirectoryStore(tmp_path / "l")
    assert ensure_ledger(led, 2.0)  # a consumer opens the ledger before its first snapshot
    led.save("g-cells/1", encode_slice(DensityEstimator(lay.slice_universe(1)), lay, 1))
    release_store(led, 0.5)
    res = CliRunner().invoke(cli, ["inspect", "--state-dir", str(tmp_path / "l")])
    assert "output budget    2: spent 0.5 in 1 release(s), 1.5 left (replayed from the ledger log" \
        in res.output, res.output
    res = CliRunner().invoke(cli, ["inspect", "-s", str(tmp_path / "s" / "g-cells@1.shard")])
    assert res.exit_code == 0, res.output
    assert "slice 1 of 4 of ipv4:10.0.0.0/16 (cells 16,384 to 32,767)" in res.output
    old = DirectoryStore(tmp_path / "old")
    old.save("events/0", encode_shard(DensityEstimator(lay.universe)))
    res = CliRunner().invoke(cli, ["inspect", "--state-dir", str(tmp_path / "old"), "--json"])
    assert res.exit_code == 0 and '"layout": "partitions"' in res.output
    res = CliRunner().invoke(cli, ["inspect"])
    assert res.exit_code == 2 and "exactly one of" in res.output


def test_three_members_of_a_2_32_universe_hold_a_third_of_the_table_each() -> None:
    """16 slices of ipv4:0.0.0.0/0 are packed tables of 32 MiB: the range assignor gives 3
    members 6, 5 and 5 slices, at most 192 MiB each against the 512 MiB table."""
    lay = SliceLayout(Universe.parse("ipv4:0.0.0.0/0"), 16)
    assert lay.table_layout == "packed" and lay.table_bytes(0) == 32 << 20
    assert sum(lay.table_bytes(r) for r in range(6)) <= (512 << 20) * 0.375
    est = estimators.new("density", lay.slice_universe(0), 1.0, layout=lay.table_layout)
    assert est._table.nbytes() == 32 << 20  # type: ignore[attr-defined]
    est.wipe()
