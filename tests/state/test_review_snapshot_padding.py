"""Review regression: a snapshot whose padding bits are set is refused, as the format requires.

docs/snapshot-format.md: "padding bits after the last cell are 0". A reader that silently cleared
them would accept bytes the format forbids; validation is exhaustive instead (checksum recomputed
here so only the padding rule can reject it).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import panstream as ps
from panstream.state.format import CorruptSnapshotError


def with_padding_set(data: bytes) -> bytes:
    body = bytearray(data[:-32])
    body[-1] |= 0xE0  # range:13 -> the last byte holds cells 8..12 and 3 padding bits
    return bytes(body) + hashlib.sha256(bytes(body)).digest()


def test_restore_refuses_set_padding_bits() -> None:
    bad = with_padding_set(ps.DensityEstimator("range:13").snapshot())
    with pytest.raises(CorruptSnapshotError, match="padding bits"):
        ps.DensityEstimator.restore(bad)


def test_load_refuses_set_padding_bits(tmp_path: Path) -> None:
    path = tmp_path / "s.pst"
    path.write_bytes(with_padding_set(ps.DensityEstimator("range:13", layout="packed").snapshot()))
    with pytest.raises(CorruptSnapshotError, match="padding bits"):
        ps.DensityEstimator.load(path)


def test_whole_bytes_have_no_padding() -> None:
    est = ps.DensityEstimator("range:16")
    assert (ps.DensityEstimator.restore(est.snapshot()).bits() == est.bits()).all()
