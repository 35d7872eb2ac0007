"""Review regression: saving or restoring a state leaves no copy of the table in freed memory.

A copy of the table made at checkpoint t1 and left behind in the heap, plus the live table read at
t2, are two snapshots of one run: one memory read would then reveal who arrived in between
(invariant 5). Every temporary copy panstream makes for a snapshot is therefore a buffer it owns
and zeroes once written or restored; the live table is never touched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import panstream as ps
import panstream.state.files as storage
from panstream.state.checkpoint import Checkpointer, Shard, restore_shard
from panstream.state.stores import DirectoryStore, decode_shard, encode_shard


@pytest.mark.parametrize("layout", ["bytes", "packed"])
def test_save_zeroes_the_packed_copy_but_not_the_live_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str) -> None:
    est = ps.DensityEstimator("range:4096", layout=layout)
    est.update_indices(np.arange(100))
    before = est.bits()
    written: list[Any] = []
    real = storage.atomic_write

    def spy(path: Any, data: Any) -> None:
        written.extend(data)
        real(path, data)

    monkeypatch.setattr(storage, "atomic_write", spy)
    est.save(tmp_path / "s.pst")
    table_part = written[1]
    if layout == "bytes":
        assert not any(bytes(table_part))  # the packed temporary was wiped after the write
    assert (est.bits() == before).all()  # the live table is intact
    back = ps.DensityEstimator.load(tmp_path / "s.pst")
    assert (back.bits() == before).all()  # and the file holds the table


def test_shard_snapshot_is_a_buffer_the_checkpointer_wipes() -> None:
    est = ps.DensityEstimator("range:1024")
    kept: dict[str, Any] = {}

    class Store:
        def save(self, key: str, data: bytes | bytearray) -> None:
            kept[key] = data
            kept["copy"] = bytes(data)

        def load(self, key: str) -> None:
            return None

        def keys(self) -> list[str]:
            return []

    assert isinstance(encode_shard(est), bytearray)
    cp = Checkpointer(Store(), lambda offsets: None)
    shard = Shard("t/0", 0, est, next_offset=5)
    assert cp.durable([shard]) == {0: 5}
    assert not any(kept["t/0"])  # wiped once durable
    assert (ps.DensityEstimator.restore(kept["copy"]).bits() == est.bits()).all()


def test_restoring_a_shard_wipes_the_bytes_read_from_the_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    est = ps.DensityEstimator("range:1024")
    store = DirectoryStore(tmp_path)
    store.save("t/0", encode_shard(est))
    loaded: list[Any] = []
    real = DirectoryStore.load

    def spy(self: DirectoryStore, key: str) -> Any:
        data = real(self, key)
        loaded.append(data)
        return data

    monkeypatch.setattr(DirectoryStore, "load", spy)
    shard = restore_shard(store, "t/0", 0, lambda: ps.DensityEstimator("range:1024"),
                          lambda d: decode_shard(d, "range:1024", 1.0, "rr"))
    assert (shard.estimator.bits() == est.bits()).all()
    assert isinstance(loaded[0], bytearray) and not any(loaded[0])


def test_snapshot_bytes_api_is_unchanged() -> None:
    est = ps.DensityEstimator("range:100")
    data = est.snapshot()
    assert isinstance(data, bytes)
    assert (ps.DensityEstimator.restore(data).bits() == est.bits()).all()
