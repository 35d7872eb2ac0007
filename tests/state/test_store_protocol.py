"""Two stores, one protocol: whatever takes a ``Store`` works on a directory and on a topic alike.

``panstream.state.stores`` keeps a group's tables in a directory (:class:`DirectoryStore`) or in
a compacted topic (:class:`TopicStore`). The group's merge, release and ``inspect`` are written
against the protocol :class:`~panstream.state.stores.Store`, not against either class. These
tests show that each store has every method of the protocol with the protocol's parameters, and
walk one store-blind function through a snapshot, the ledger and the definition on both; the
split of the old ``state/stores.py`` into a package (issue 36) kept every old import working.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np
import pytest
from fakes import MemoryLog

import panstream as ps
from panstream.state import stores
from panstream.state.stores import DirectoryStore, Store, TopicStore, decode_shard, encode_shard
from panstream.state.stores.protocol import key_order

U = "range:1024"


def protocol_methods() -> list[str]:
    return sorted(n for n, v in vars(Store).items() if inspect.isfunction(v) and not
                  n.startswith("_"))


@pytest.mark.parametrize("cls", [DirectoryStore, TopicStore])
def test_each_store_has_every_method_of_the_protocol_with_its_parameters(cls: type) -> None:
    names = protocol_methods()
    assert len(names) >= 12  # the dozen methods the two stores used to share by name only
    for name in names:
        want = list(inspect.signature(getattr(Store, name)).parameters)
        got = list(inspect.signature(getattr(cls, name)).parameters)
        assert got == want, f"{cls.__name__}.{name}{got} differs from Store.{name}{want}"


def make(kind: str, tmp_path: Path) -> Store:
    return DirectoryStore(tmp_path / "state") if kind == "directory" else TopicStore(MemoryLog())


def round_trip(store: Store) -> tuple[list[str], bytes, float, bytes]:
    """A store-blind client: a snapshot in and out, the ledger opened and read, a definition."""
    est = ps.DensityEstimator(U, epsilon=1.0)
    est.update_indices(np.arange(0, 1024, 7))
    buf = encode_shard(est)
    store.save("events/10", buf)
    store.save("events/9", bytes(buf))
    back = decode_shard(store.load("events/10"), U, 1.0, "rr")
    assert np.array_equal(back.bits(), est.bits())
    store.create_ledger(json.dumps(ps.PrivacyLedger(2.0).to_dict()).encode())
    raw = store.read_ledger()
    assert raw is not None
    held = store.put_definition(b'{"group":"g"}')
    assert store.put_definition(b'{"group":"other"}') == held  # the first writer's holds
    return store.keys(), bytes(buf), json.loads(raw)["budget"], held


@pytest.mark.parametrize("kind", ["directory", "topic"])
def test_one_store_blind_client_reads_back_what_it_wrote(kind: str, tmp_path: Path) -> None:
    keys, _, budget, held = round_trip(make(kind, tmp_path))
    assert keys == ["events/9", "events/10"]  # by topic, then partition as a number
    assert budget == 2.0
    assert held == b'{"group":"g"}'


def test_keys_sort_by_topic_then_partition_number() -> None:
    assert sorted(["b/1", "a/10", "a/2"], key=key_order) == ["a/2", "a/10", "b/1"]


def test_every_name_of_the_old_module_still_imports_from_the_package() -> None:
    old = ["DEFAULT_CHUNK_BYTES", "DEFINITION_FILE", "DEFINITION_PREFIX", "FENCE_LOCK_WAIT",
           "FENCE_SUFFIX", "INITIAL_LEDGER_KEY", "LEDGER_FILE", "LEDGER_KEY", "LEDGER_LOCK_WAIT",
           "LEDGER_RECORD_PREFIX", "LEGACY_LEDGER_FILE", "MERGES", "DirectoryStore", "GroupState",
           "RecordLog", "TopicStore", "decode_shard", "encode_shard", "encode_slice",
           "ensure_ledger", "group_ledger", "ledger_summary", "merge_slice_store", "merge_store",
           "parse_ledger", "release_state_dir", "release_store", "rotate_slice_store",
           "split_stem", "store_layout"]
    assert [n for n in old if not hasattr(stores, n)] == []
