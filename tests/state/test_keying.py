"""The per-partition layout's keying (issue 39), without a broker.

``release --merge partitioned`` (and ``auto``) takes each cell's bit from the partition the
producers' partitioner gives the cell's text. This file pins the two partitioners a merge can
reproduce to outside references (librdkafka's own test vectors, kafka-python's murmur2, zlib's
CRC-32), shows the record a checking member writes into its shards, and walks through what
happens to a store written before the check existed: it is refused before anything is spent, with
a line that says how to proceed, and ``--merge sum`` still releases it.
"""

from __future__ import annotations

import json
import shutil
import zlib
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import panstream as ps
from panstream.cli.main import cli
from panstream.errors import ConfigurationError, StateError
from panstream.state.keying import (
    Keying,
    group_keying,
    keying_of,
    partition_of_key,
    partitions_of_cells,
)
from panstream.state.slices import head_params
from panstream.state.stores import (
    DirectoryStore,
    decode_shard,
    encode_shard,
    ensure_ledger,
    merge_store,
)
from panstream.universe import Universe

GOLDEN = Path(__file__).parent / "golden"

#: librdkafka tests/0048-partitioner.c: keys and their hashes as librdkafka's partitioners use
#: them (murmur2 already masked with 0x7fffffff, as Java's Utils.toPositive does; crc32 as is).
LIBRDKAFKA_VECTORS = [
    (b"23456", 0x058D780F, 0xB1B451D7),
    (b"this is another string with more length to it perhaps", 0x4F7703DA, 0xB0150DF7),
    (b"hejsan", 0x5EC19395, 0xD077037E),
]


@pytest.mark.parametrize("partitions", [1, 7, 17, 64])
def test_both_partitioners_match_librdkafkas_own_test_vectors(partitions: int) -> None:
    for key, murmur, crc in LIBRDKAFKA_VECTORS:
        assert partition_of_key(key, partitions, "murmur2") == murmur % partitions
        assert partition_of_key(key, partitions, "crc32") == crc % partitions


@pytest.mark.parametrize("spec", ["ipv4:10.0.0.0/20", "ipv4:0.0.0.0/22",
                                  "ipv4:255.255.252.0/22", "range:20000"])
def test_owner_maps_match_kafka_python_and_zlib_on_every_cell(spec: str) -> None:
    """The vectorized owner map renders each cell's canonical text (the key a producer keyed by
    the item sends) and hashes it as kafka-python's DefaultPartitioner and librdkafka do."""
    from kafka.partitioner.default import murmur2

    u = Universe.parse(spec)
    keys = [u.item_of(c).encode() for c in range(u.size)]
    for k in (3, 8):
        java = [(murmur2(key) & 0x7FFFFFFF) % k for key in keys]
        rdkafka = [zlib.crc32(key) % k for key in keys]
        assert partitions_of_cells(u, k, "murmur2").tolist() == java
        assert partitions_of_cells(u, k, "crc32").tolist() == rdkafka
        some = np.array([0, u.size - 1, 5, 5])
        assert partitions_of_cells(u, k, "crc32", some).tolist() == [rdkafka[c] for c in some]


def test_only_cells_that_name_a_key_have_an_owner() -> None:
    with pytest.raises(ConfigurationError, match="sum merge"):
        partitions_of_cells(Universe.parse("hashed:1024"), 4)
    with pytest.raises(ConfigurationError, match="unknown partitioner"):
        partitions_of_cells(Universe.parse("range:8"), 4, "fnv1a")


# ---------------------------------------------------------------------- the shard's record
def test_a_checked_shard_carries_a_public_record_and_restores_as_before() -> None:
    est = ps.DensityEstimator("range:1024", epsilon=1.0)
    est.update_indices(np.arange(10))
    data = encode_shard(est, Keying("crc32", 8))
    assert keying_of(head_params(data)) == Keying("crc32", 8)
    back = decode_shard(bytes(data), "range:1024", 1.0, "rr")
    assert np.array_equal(back.bits(), est.bits())
    assert keying_of(head_params(encode_shard(est))) is None      # no record: not checked


def test_the_group_keying_is_one_record_shared_by_every_shard() -> None:
    r = Keying("murmur2", 4)
    assert group_keying({"t/0": r, "t/1": r}) == r
    assert group_keying({"t/0": r}, partitions=4) == r
    with pytest.raises(StateError, match=r"t/1 carry no such record.*--merge sum"):
        group_keying({"t/0": r, "t/1": None})
    with pytest.raises(StateError, match="different placements"):
        group_keying({"t/0": r, "t/1": Keying("murmur2", 6)})
    with pytest.raises(ConfigurationError, match="--partitions 6 contradicts"):
        group_keying({"t/0": r}, partitions=6)


# ---------------------------------------------------------------------- a store of today's main
def old_store(tmp_path: Path) -> Path:
    """A group's state directory as panstream before issue 39 left it: its golden shard file (the
    bytes main's code writes for a shard, no keying record) for partitions 0 and 1, and an opened
    ledger."""
    d = tmp_path / "old"
    ensure_ledger(DirectoryStore(d), 1.0)
    for part in (0, 1):
        shutil.copy(GOLDEN / "v2-shard-range13-tight.pst", d / f"events@{part}.shard")
    return d


def release(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli, ["release", *args])
    return res.exit_code, res.output


def test_a_store_written_before_the_check_is_refused_before_anything_is_spent(
        tmp_path: Path) -> None:
    d = old_store(tmp_path)
    before = (d / "release-ledger.log").read_bytes()
    for merge in ("partitioned", "auto"):
        code, out = release("--state-dir", str(d), "--merge", merge, "--epsilon", "0.5")
        lines = out.strip().splitlines()
        assert code != 0 and len(lines) == 1 and "Traceback" not in out, out
        assert "events/0, events/1 carry no such record" in lines[0]
        assert "--merge sum" in lines[0] and "routed layout" in lines[0]   # how to proceed
    assert (d / "release-ledger.log").read_bytes() == before              # nothing spent
    code, out = release("--state-dir", str(d), "--merge", "sum", "--epsilon", "0.5", "--json")
    assert code == 0, out
    assert json.loads(out.strip().splitlines()[-1])["budget_remaining"] == pytest.approx(0.5)


def test_inspect_says_which_shards_were_checked(tmp_path: Path) -> None:
    d = old_store(tmp_path)
    res = CliRunner().invoke(cli, ["inspect", "--state-dir", str(d)])
    assert res.exit_code == 0, res.output
    assert "NOT verified for 2 shard(s) (events/0, events/1" in res.output
    new = tmp_path / "new"
    store = DirectoryStore(new)
    ensure_ledger(store, 1.0)
    for part in (0, 1):
        store.save(f"events/{part}", encode_shard(ps.DensityEstimator("range:13"),
                                                  Keying("murmur2", 2)))
    res = CliRunner().invoke(cli, ["inspect", "--state-dir", str(new), "--json"])
    assert json.loads(res.output)["keying"] == {
        "verified": [{"partitioner": "murmur2", "partitions": 2}], "unverified": []}
    assert merge_store(store, "partitioned").partitions == 2
    res = CliRunner().invoke(cli, ["inspect", "-s", str(new / "events@0.shard")])
    assert "keying           verified" in res.output and "murmur2(item) % 2" in res.output
