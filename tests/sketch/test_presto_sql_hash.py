"""Sketches that Presto SQL can merge: the ``xxhash64-varchar`` and ``xxhash64-bigint`` hashes.

Presto's SQL aggregation ``noisy_approx_set_sfm(col, epsilon, buckets, precision)``
(``NoisyApproximateSetSfmAggregation``) hashes each value with its SQL type's ``XX_HASH_64``
operator and calls ``SfmSketch.addHash``; ``SfmSketch.add`` (Java) uses Murmur3 instead. The
reference below is our own reimplementation of that aggregation from Presto's published code and
its tests (``AbstractTestNoisySfmAggregation.createLongSketch`` adds ``xxHash64(i)`` of a long,
``createStringSketch`` adds ``VarcharOperators.xxHash64(utf8Slice(Long.toString(i)))``), hashing
with the C ``xxhash`` library, not with panstream's XXH64, and setting bits as ``addHash`` does
(bucket = top bits, level = trailing zeros with a 1 forced below the bucket bits, capped at
precision - 1), written independently of :mod:`panstream.sketch.sfm`. Its ``enablePrivacy`` flips every
bit with probability ``1/(e^eps + 1)``.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

import panstream as ps
from panstream.errors import ConfigurationError, StateError
from panstream.sketch import sfm
from panstream.sketch.estimator import merge

xxhash = pytest.importorskip("xxhash")


def _sql_hash(value: int | str, sql_type: str) -> int:
    """Presto's XX_HASH_64 operator: BIGINT -> XxHash64.hash(long), VARCHAR -> of its UTF-8."""
    if sql_type == "BIGINT":
        return int(xxhash.xxh64_intdigest(struct.pack("<q", int(value))))
    return int(xxhash.xxh64_intdigest(str(value).encode("utf-8")))


def _add_hash_bit(h: int, bits: int, levels: int) -> int:
    """SfmSketch.addHash: the bit level * buckets + bucket of hash h."""
    index = h >> (64 - bits)
    v = h | (1 << (64 - bits))
    zeros = (v & -v).bit_length() - 1
    return min(levels - 1, zeros) * (1 << bits) + index


def noisy_approx_set_sfm(values: list[int] | list[str], sql_type: str, epsilon: float,
                         buckets: int = 4096, precision: int = 24,
                         rng: np.random.Generator | None = None) -> sfm.PrestoSketch:
    """Presto SQL's aggregation over a column of ``sql_type``, then enablePrivacy(epsilon)."""
    assert precision % 8 == 0  # validateSketchParameters: "precision must be a multiple of 8"
    bits = buckets.bit_length() - 1
    grid = np.zeros(buckets * precision, dtype=np.uint8)
    for v in values:
        grid[_add_hash_bit(_sql_hash(v, sql_type), bits, precision)] = 1
    r = 1.0 / (math.exp(epsilon) + 1)
    if rng is not None:
        grid ^= (rng.random(grid.size) < r).astype(np.uint8)
    else:
        r = 0.0
    return sfm.PrestoSketch(bits, precision, r, np.packbits(grid, bitorder="little").tobytes())


def _cells(values: list[int] | list[str], sql_type: str, buckets: int = 4096,
           precision: int = 24) -> set[int]:
    bits = buckets.bit_length() - 1
    return {_add_hash_bit(_sql_hash(v, sql_type), bits, precision) for v in values}


def _addresses(n: int, start: int = 0) -> list[str]:
    return [f"{11 + (i >> 24)}.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}" for i in
            range(start, start + n)]


# ------------------------------------------------------------------ the hash, bit for bit
def test_an_address_lands_where_sql_puts_the_varchar_of_its_canonical_text() -> None:
    """``noisy_approx_set_sfm(CAST(ip AS varchar), ...)``: every spelling of an address takes the
    bit of its canonical text (dotted IPv4, RFC 5952 IPv6; ::ffff:a.b.c.d is its IPv4)."""
    grid = sfm.SketchGrid(4096, 24, "ip", "presto-sql")
    assert grid.spec == "sketch:4096x24:ip:xxhash64-varchar"
    canon = ["10.0.0.1", "2001:db8::1", "192.168.255.254", "2a00:1450:4001:82a::200e"]
    spelled = ["10.0.0.1", "2001:DB8:0:0:0:0:0:1", "::ffff:192.168.255.254",
               "2a00:1450:4001:082a:0000:0000:0000:200e"]
    want = [_add_hash_bit(_sql_hash(c, "VARCHAR"), 12, 24) for c in canon]
    assert grid.indices(spelled).indices.tolist() == want
    assert grid.indices(canon).indices.tolist() == want
    murmur = sfm.SketchGrid(4096, 24, "ip")
    assert murmur.indices(canon).indices.tolist() != want  # Presto's Java add() hashes otherwise


def test_integer_ids_as_prestos_own_tests_build_sketches() -> None:
    """createLongSketch (xxHash64 of a long) for a BIGINT column, createStringSketch
    (xxHash64 of Long.toString(i)) for a VARCHAR one: same bits as our two :id grids."""
    ids = np.arange(-500, 5000, dtype=np.int64)
    as_bigint = sfm.SketchGrid(4096, 24, "id", "xxhash64-bigint")
    assert set(as_bigint.indices(ids).indices.tolist()) == _cells(ids.tolist(), "BIGINT")
    # log tokens that are decimal integers are the same BIGINTs; other text is malformed
    r = as_bigint.indices([str(i) for i in range(100)] + ["abc", "1.5", "99999999999999999999"])
    assert set(r.indices.tolist()) == _cells(list(range(100)), "BIGINT") and r.malformed == 3
    as_varchar = sfm.SketchGrid(4096, 24, "id", "xxhash64-varchar")
    assert set(as_varchar.indices(ids).indices.tolist()) == _cells(ids.tolist(), "VARCHAR")
    assert set(as_varchar.indices([str(i) for i in ids.tolist()]).indices.tolist()) == \
        _cells(ids.tolist(), "VARCHAR")


def test_a_noiseless_sketch_is_bit_for_bit_the_sql_aggregation() -> None:
    """At epsilon 30 (flip probability q = 2**-32 after rounding) our state is the clear bitmap
    unless one of 98,304 bits flipped, probability < 2.3e-5; allow none."""
    items = _addresses(20_000)
    est = ps.SketchEstimator(epsilon=30.0, items="ip", hashing="presto-sql")
    est.update(items)
    ours = np.unpackbits(np.frombuffer(est.presto().bitmap, dtype=np.uint8), bitorder="little")
    ref = np.unpackbits(np.frombuffer(noisy_approx_set_sfm(items, "VARCHAR", 30.0).bitmap,
                                      dtype=np.uint8), bitorder="little")
    assert int(np.count_nonzero(ours != ref)) == 0


# ------------------------------------------------------------------ the done-when: one count
def test_our_sketch_merges_with_a_sql_built_one_counting_each_item_once() -> None:
    """Site A (ours, presto-sql hash, eps 2) saw 60,000 addresses; Presto SQL (eps 3) built a
    sketch of 60,000 with 50,000 in common: the merge estimates the union's 70,000 within 6 of
    its standard errors (false failure < 2e-9). The same merge with a murmur3 sketch (Presto's
    Java hash, as every panstream sketch before) counts the common 50,000 twice: about 120,000,
    25 standard errors above the union; the test asks for more than 6 (false failure < 1e-9)."""
    rng = np.random.default_rng(28)
    a_items, b_items = _addresses(60_000), _addresses(60_000, start=10_000)
    sql = noisy_approx_set_sfm(b_items, "VARCHAR", 3.0, rng=rng)
    ours = ps.SketchEstimator(epsilon=2.0, hashing="presto-sql")
    ours.update(a_items)
    m = merge(ours.presto(), sql)
    fit = sfm.mple(m.ones_by_level(), 4096, m.flip)
    assert abs(fit.n - 70_000) < 6 * fit.stderr

    java = ps.SketchEstimator(epsilon=2.0)  # murmur3: Presto's SfmSketch.add, not its SQL
    java.update(a_items)
    wrong = sfm.mple(merge(java.presto(), sql).ones_by_level(), 4096, m.flip)
    assert wrong.n - 70_000 > 6 * wrong.stderr


def test_a_bigint_sketch_merges_with_sql_over_a_bigint_column() -> None:
    rng = np.random.default_rng(29)
    sql = noisy_approx_set_sfm(list(range(30_000, 80_000)), "BIGINT", 3.0, rng=rng)
    ours = ps.SketchEstimator(epsilon=2.0, items="id", hashing="xxhash64-bigint")
    ours.update(np.arange(0, 50_000))
    fit = sfm.mple(merge(ours.presto(), sql).ones_by_level(), 4096,
                   sfm.merge_flip_probability(float(ours.q), sql.flip))
    assert abs(fit.n - 80_000) < 6 * fit.stderr


# ------------------------------------------------------------------ recorded, refused, kept
def test_the_hash_is_a_public_parameter_and_survives_a_snapshot() -> None:
    est = ps.SketchEstimator(epsilon=1.0, items="id", hashing="xxhash64-bigint")
    est.update(np.arange(1000))
    assert est.params()["hash"] == "xxhash64-bigint"
    back = ps.SketchEstimator.restore(est.snapshot())
    assert back.hashing == "xxhash64-bigint" and back.universe.spec.endswith(":xxhash64-bigint")
    old = ps.SketchEstimator(epsilon=1.0)  # the default keeps the old spec and name
    assert old.universe.spec == "sketch:4096x24:ip"
    assert old.params()["hash"] == "murmur3_x64_128.hash64"


def test_grids_sql_could_not_build_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="multiple of 8"):
        sfm.SketchGrid(4096, 20, "ip", "presto-sql")
    with pytest.raises(ConfigurationError, match="VARCHAR"):
        sfm.SketchGrid(4096, 24, "ip", "xxhash64-bigint")
    with pytest.raises(ConfigurationError, match="unknown sketch hash"):
        sfm.SketchGrid(4096, 24, "ip", "md5")
    assert sfm.SketchGrid(4096, 20, "ip").levels == 20  # murmur3 keeps Presto Java's range


def test_a_snapshot_whose_hash_contradicts_its_grid_is_refused() -> None:
    """The hash is checked against the grid's spec when a state is read (a state file's checksum
    already refuses edits; this is the reader's own check, for states of another writer)."""
    est = ps.SketchEstimator(epsilon=1.0, hashing="presto-sql")
    payload = np.frombuffer(est.presto().bitmap, dtype=np.uint8).copy()
    for wrong in ("xxhash64-bigint", "murmur3_x64_128.hash64", None):
        params = {**est.params(), "hash": wrong}
        with pytest.raises(StateError, match="hash"):
            ps.SketchEstimator._from_snapshot(params, est.ledger, payload, "auto")
    params = {**est.params()}
    assert ps.SketchEstimator._from_snapshot(params, est.ledger, payload, "auto").hashing == \
        "xxhash64-varchar"


def test_a_consumer_groups_slices_keep_the_hash() -> None:
    """The routed Kafka layout: members hash with the grid's spec (``...:xxhash64-varchar``), the
    slices laid end to end are, at epsilon 30, the noiseless bitmap of Presto SQL's aggregation
    (q = 2**-32: a flip among the 1,024 bits has probability < 3e-7), and the merged sketch still
    names its hash (what its export records)."""
    from panstream import estimators
    from panstream.state.merge import merge_slices
    from panstream.state.slices import SliceLayout, slice_family

    grid = sfm.SketchGrid(128, 8, "ip", "presto-sql")
    lay = SliceLayout(grid, 4)
    items = _addresses(3000)
    kind, cal = slice_family("sketch", "tight")
    slices = {r: estimators.new(kind, lay.slice_universe(r), 30.0, calibration=cal)
              for r in range(lay.count)}
    for r, data in lay.route(grid.indices(items).indices):
        slices[r].update_indices(lay.decode(r, data))
    merged = merge_slices(slices, lay)
    assert isinstance(merged, ps.SketchEstimator) and merged.hashing == "xxhash64-varchar"
    ref = noisy_approx_set_sfm(items, "VARCHAR", 30.0, buckets=128, precision=8)
    assert merged.presto().bitmap == ref.bitmap


def test_the_aggregation_tests_noiseless_vector() -> None:
    """Velox's NoisyApproxSfmAggregationTest.distinctNonPrivacy (Presto's SQL functions):
    noisy_approx_distinct_sfm over the BIGINTs 1..10 at epsilon infinity is exactly 10. Our
    xxhash64-bigint cells of 1..10, as a non-private sketch, count 10 (and the reference agrees)."""
    grid = sfm.SketchGrid(4096, 24, "id", "xxhash64-bigint")
    bits = np.zeros(grid.size, dtype=np.uint8)
    bits[grid.indices(np.arange(1, 11)).indices] = 1
    ours = sfm.PrestoSketch(12, 24, 0.0, np.packbits(bits, bitorder="little").tobytes())
    assert ours.cardinality() == 10
    assert noisy_approx_set_sfm(list(range(1, 11)), "BIGINT", math.inf).bitmap == ours.bitmap
