"""A checkpoint syncs its directory once, and commits only after that sync (issue 38).

A group member's checkpoint writes one snapshot per slice into one directory, each with the five
steps of :func:`panstream.state.files.atomic_write`. Step 5, the directory's ``fsync``, makes the
renames durable; for 16 slices it was done 16 times a checkpoint, every second. Now the
checkpointer opens a :func:`~panstream.state.files.one_directory_sync` block around its saves:
each file is still written, synced and renamed on its own, the directory is synced once at the
end, and the offsets are committed only after that.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from panstream.errors import StateError
from panstream.estimators import DensityEstimator
from panstream.state import files
from panstream.state.checkpoint import Checkpointer, Shard
from panstream.state.stores import DirectoryStore


def _spy_fsync(monkeypatch: pytest.MonkeyPatch, log: list[str], fail_dirs: bool = False) -> None:
    real = os.fsync

    def fsync(fd: int) -> None:
        kind = "dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"
        log.append(kind)
        if kind == "dir" and fail_dirs:
            raise OSError(5, "Input/output error")
        real(fd)

    monkeypatch.setattr(files.os, "fsync", fsync)


def test_a_checkpoint_of_16_slices_syncs_16_files_and_the_directory_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = DirectoryStore(tmp_path)
    shards = [Shard(f"g-cells/{r}", r, DensityEstimator("range:64", epsilon=1.0), r + 1)
              for r in range(16)]
    log: list[str] = []
    commits: list[dict[object, int]] = []

    def commit(offsets: dict[object, int]) -> None:
        commits.append(dict(offsets))
        log.append("commit")

    _spy_fsync(monkeypatch, log)
    Checkpointer(store, commit).checkpoint(shards)
    assert log == ["file"] * 16 + ["dir", "commit"]  # the commit after the one directory sync
    assert commits == [{r: r + 1 for r in range(16)}]  # each shard's next offset
    assert sorted(store.keys()) == sorted(s.key for s in shards)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(files.TEMP_SUFFIX)]


def test_a_directory_that_cannot_be_synced_stops_the_checkpoint_before_its_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = DirectoryStore(tmp_path)
    shards = [Shard(f"g-cells/{r}", r, DensityEstimator("range:64", epsilon=1.0), 7)
              for r in range(3)]
    commits: list[object] = []
    _spy_fsync(monkeypatch, [], fail_dirs=True)
    with pytest.raises(StateError, match="could not be synced"):
        Checkpointer(store, commits.append).checkpoint(shards)
    assert commits == []  # nothing committed: a restart replays from the last commit


def test_outside_a_block_every_write_syncs_its_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[str] = []
    _spy_fsync(monkeypatch, log)
    for name in "ab":
        files.atomic_write(tmp_path / name, b"x")
    assert log == ["file", "dir", "file", "dir"]
    log.clear()
    with files.one_directory_sync():
        with files.one_directory_sync():  # a nested block adds to the outer one
            files.atomic_write(tmp_path / "a", b"y")
        files.atomic_write(tmp_path / "b", b"y")
        assert log == ["file", "file"]
    assert log == ["file", "file", "dir"]
