"""Golden sketch snapshots: files of kind "sketch" (format version 2) must load, unchanged, forever.

``tests/state/golden/v2-sketch-*.pst`` were produced by :func:`golden_states` below (run this file as
a script to write any that are missing; it never overwrites a file). Each test checks that today's
panstream reads them to the exact known grid and writes the same state back byte for byte, and that
the grid exports to the Presto bytes pinned here.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import panstream as ps
from panstream.estimators.bittable import BitTable
from panstream.sketch import sfm
from panstream.state import format as fmt
from tests.state.test_golden import assert_loads_only_as, reencoded

GOLDEN = Path(__file__).parent / "golden"

_LEDGER = {"budget": 1.0, "entries": [{"epsilon": 0.25, "mechanism": "laplace",
                                       "time": 1700000000.5}]}

#: name -> (epsilon, buckets, levels, items, bits (level * B + bucket), ledger dict)
SKETCH: dict[str, tuple[float, int, int, str, list[int], dict[str, Any]]] = {
    # 16 buckets x 4 levels: 64 bits, 8 bytes; level 3 empty (Presto drops its zero bytes)
    "v2-sketch-16x4-ip.pst": (1.0, 16, 4, "ip", [1, 0, 0, 1] * 4 + [0, 1] * 8 + [1] * 16
                              + [0] * 16, _LEDGER),
    # 2 buckets x 3 levels of IDs: 6 bits, one byte with two padding bits
    "v2-sketch-2x3-id.pst": (2.0, 2, 3, "id", [1, 1, 0, 1, 0, 1], {"budget": 2.0, "entries": []}),
}


def golden_states() -> dict[str, ps.SketchEstimator]:
    """The exact states stored in the sketch golden files."""
    out = {}
    for name, (eps, b, p, items, bits, ledger) in SKETCH.items():
        packed = np.packbits(np.array(bits, dtype=np.uint8), bitorder="little").tobytes()
        table = BitTable.from_packed(b * p, packed)
        out[name] = ps.SketchEstimator(eps, b, p, items, _table=table,
                                       _ledger=ps.PrivacyLedger.from_dict(ledger))
    return out


@pytest.mark.parametrize("name", sorted(SKETCH))
def test_a_golden_sketch_file_restores_to_the_known_grid(name: str) -> None:
    eps, b, p, items, bits, ledger = SKETCH[name]
    est = ps.SketchEstimator.load(GOLDEN / name, expect={"epsilon": eps, "kind": "sketch",
                                                         "buckets": b, "levels": p, "items": items})
    assert est.bits().tolist() == bits
    assert est.ledger.to_dict() == ledger
    cal = ps.calibrate(eps)
    assert (est.p_numerator, est.q_numerator) == (cal.numerator, cal.q_numerator)
    assert est.epsilon_state == cal.epsilon_state <= eps
    assert est.ones_by_level().tolist() == np.array(bits).reshape(p, b).sum(axis=1).tolist()
    assert_loads_only_as(name, ps.SketchEstimator)


@pytest.mark.parametrize("name", sorted(SKETCH))
def test_the_same_sketch_state_is_written_byte_for_byte(name: str) -> None:
    data, snap = reencoded(name, "sketch")
    assert golden_states()[name].snapshot() == data


def test_the_golden_grid_exports_to_these_presto_bytes() -> None:
    """Tag 7, 4 index bits, precision 4, q as a double, 6 bitmap bytes (two trailing zero bytes of
    level 3 dropped, as Java's BitSet.toByteArray drops them), the bitmap little-endian."""
    est = golden_states()["v2-sketch-16x4-ip.pst"]
    data = sfm.to_presto(est.presto())
    assert data == struct.pack("<biidi", 7, 4, 4, 1155094610 / 2**32, 6) + bytes.fromhex(
        "9999" "aaaa" "ffff")
    back = sfm.from_presto(data)
    assert back.bitmap == bytes(est.presto().bitmap) and sfm.to_presto(back) == data


def test_a_forged_sketch_file_with_another_q_is_refused() -> None:
    """The realized epsilon is recomputed from the stored numerators, never trusted."""
    snap = fmt.decode((GOLDEN / "v2-sketch-16x4-ip.pst").read_bytes())
    q = snap.params["q_numerator"] - 1
    forged = {**snap.params, "q_numerator": q, "p_numerator": (1 << 32) - q}
    with pytest.raises(fmt.SnapshotMismatchError, match="calibrates"):
        ps.SketchEstimator.restore(fmt.encode(forged, snap.ledger, snap.payload))
    other = {**snap.params, "levels": 5}
    with pytest.raises(fmt.CorruptSnapshotError, match="does not match"):
        ps.SketchEstimator.restore(fmt.encode(other, snap.ledger, snap.payload))


if __name__ == "__main__":  # pragma: no cover - writes missing files only, never overwrites
    from tests.state.test_golden import write_missing

    write_missing({fname: est.snapshot() for fname, est in golden_states().items()})
