"""State files: atomic, owner-only, and only ever one snapshot on disk."""

from __future__ import annotations

import math
import os
import stat
from pathlib import Path

import numpy as np
import pytest

import panstream as ps
from panstream.errors import StateError
from panstream.state import files as storage
from panstream.state import format as fmt


def test_save_writes_one_owner_only_file_and_load_reads_it_back(tmp_path: Path) -> None:
    est = ps.DensityEstimator("ipv4:10.0.0.0/22")
    est.update(["10.0.0.1", "10.0.3.255"])
    path = tmp_path / "s.pst"
    old = os.umask(0)  # even with a permissive umask
    try:
        est.save(path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.listdir(tmp_path) == ["s.pst"]
    assert path.read_bytes() == est.snapshot()
    back = ps.DensityEstimator.load(path, expect={"universe": "ipv4:10.0.0.0/22"})
    assert np.array_equal(back.bits(), est.bits())


def test_saving_again_replaces_the_snapshot_and_keeps_no_backup(tmp_path: Path) -> None:
    path = tmp_path / "s.pst"
    est = ps.DensityEstimator("range:4096")
    est.save(path)
    est.update_indices(np.arange(100))
    est.save(path)
    assert os.listdir(tmp_path) == ["s.pst"]
    assert path.read_bytes() == est.snapshot()


def test_a_failed_save_leaves_the_old_snapshot_and_no_temporary_file(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch
                                                                        ) -> None:
    """Simulate a full disk in the middle of writing the table."""
    path = tmp_path / "s.pst"
    est = ps.DensityEstimator("range:4096")
    est.save(path)
    before = path.read_bytes()
    real_write = os.write
    calls = {"n": 0}

    def failing_write(fd: int, data: object) -> int:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(28, "No space left on device")
        return real_write(fd, data)  # type: ignore[arg-type]

    monkeypatch.setattr(storage.os, "write", failing_write)
    est.update_indices(np.arange(4096))
    with pytest.raises(StateError, match="No space left.*previous state is unchanged"):
        est.save(path)
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["s.pst"]
    assert path.read_bytes() == before


def test_an_interrupted_save_leaves_no_temporary_file(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s.pst"

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(storage.os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ps.DensityEstimator("range:64").save(path)
    assert os.listdir(tmp_path) == []


def test_a_temporary_file_left_by_a_crash_is_removed_by_the_next_save(tmp_path: Path) -> None:
    """A crash (SIGKILL) between create and rename leaves a full older snapshot behind: a second
    snapshot on disk. The next save deletes it before writing."""
    path = tmp_path / "s.pst"
    stale = Path(storage.temp_path(path))
    stale.write_bytes(ps.DensityEstimator("range:64").snapshot())
    ps.DensityEstimator("range:64").save(path)
    assert os.listdir(tmp_path) == ["s.pst"]


def test_loading_checks_everything_before_building(tmp_path: Path) -> None:
    path = tmp_path / "s.pst"
    est = ps.DensityEstimator("range:4096")
    data = bytearray(est.snapshot())
    data[100] ^= 0x10
    path.write_bytes(bytes(data))
    with pytest.raises(fmt.CorruptSnapshotError, match="checksum"):
        ps.DensityEstimator.load(path)
    path.write_bytes(est.snapshot()[:-1])
    with pytest.raises(fmt.CorruptSnapshotError, match="truncated"):
        ps.DensityEstimator.load(path)
    path.write_bytes(b"")
    with pytest.raises(fmt.CorruptSnapshotError, match="empty"):
        ps.DensityEstimator.load(path)
    path.write_bytes(b"10.0.0.1\n" * 1000)
    with pytest.raises(fmt.NotASnapshotError):
        ps.DensityEstimator.load(path)
    path.write_bytes(est.snapshot())
    with pytest.raises(fmt.SnapshotMismatchError, match="--epsilon 1.0"):
        ps.DensityEstimator.load(path, expect={"epsilon": 2.0})


def test_missing_file_and_missing_directory_give_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(StateError, match="does not exist"):
        ps.DensityEstimator.load(tmp_path / "nope.pst")
    with pytest.raises(StateError, match="directory .* exists and is writable"):
        ps.DensityEstimator("range:8").save(tmp_path / "no" / "such" / "dir.pst")


def test_read_snapshot_and_atomic_write_serve_raw_bytes(tmp_path: Path) -> None:
    """The byte-level pair used by shard stores: atomic_write(path, est.snapshot()) / restore."""
    path = tmp_path / "shard-0.pst"
    est = ps.DensityEstimator("range:100")
    storage.atomic_write(path, est.snapshot())
    back = ps.DensityEstimator.restore(storage.read_snapshot(path))
    assert np.array_equal(back.bits(), est.bits())


@pytest.mark.parametrize("calibration", ["rr", "tight"])
def test_rotation_draws_a_fresh_table_and_ledger_and_returns_the_old_ledger(calibration: str) -> None:
    """After rotate() the table is a fresh D0 draw, independent of the old one; the budget stays.

    Independent draws agree on a cell with probability q^2 + (1-q)^2 where the old bit was D0 and
    pq + (1-p)(1-q) where it was D1 (1/2 either way for tight); the number of agreeing cells is a
    sum of independent Bernoullis, and a band of 5.5 standard deviations fails with probability
    < 4e-8 (normal tail; the Bernstein bound at this n is within a few percent of it).
    """
    est = ps.DensityEstimator("range:65536", calibration=calibration, budget=2.0)
    est.update_indices(np.arange(1000))
    est.ledger.charge(0.5, "laplace")
    before = est.bits()
    old = est.rotate()
    assert old.spent == 0.5 and est.ledger.spent == 0.0 and est.ledger.budget == 2.0
    agree = int((est.bits() == before).sum())
    p, q = float(est.p), float(est.q)
    a0, a1 = q * q + (1 - q) ** 2, p * q + (1 - p) * (1 - q)
    mean = 64536 * a0 + 1000 * a1
    sd = math.sqrt(64536 * a0 * (1 - a0) + 1000 * a1 * (1 - a1))
    assert abs(agree - mean) < 5.5 * sd
