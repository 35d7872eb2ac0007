"""Golden snapshots: files written by format version 1 must load, unchanged, forever.

``tests/state/golden/v1-*.pst`` were produced by :func:`golden_states` below (run this file as a
script to write them again, only when a new format version is introduced: old files stay). Each
test checks that today's panstream reads them to the exact known state, and writes the same state
back byte for byte, so any change to the format is caught here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import panstream as ps
from panstream.estimators.bittable import BitTable
from panstream.state import format as fmt

GOLDEN = Path(__file__).parent / "golden"

#: name -> (universe, epsilon, calibration, bits, ledger dict)
CASES: dict[str, tuple[str, float, str, list[int], dict[str, Any]]] = {
    "v1-range13-tight.pst": (
        "range:13", 1.0, "tight", [1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1, 0, 1],
        {"budget": 1.0, "entries": [{"epsilon": 0.25, "mechanism": "laplace",
                                     "time": 1700000000.5}]}),
    "v1-ipv4-paper.pst": (
        "ipv4:192.0.2.0/28", 0.5, "paper", [i % 2 for i in range(16)],
        {"budget": 2.0, "entries": []}),
}


def golden_states() -> dict[str, ps.DensityEstimator]:
    """The exact states stored in the golden files."""
    out = {}
    for name, (spec, eps, cal, bits, ledger) in CASES.items():
        packed = np.packbits(np.array(bits, dtype=np.uint8), bitorder="little").tobytes()
        u = ps.Universe.parse(spec)
        out[name] = ps.DensityEstimator(u, eps, cal, _table=BitTable.from_packed(u.size, packed),
                                        _ledger=ps.PrivacyLedger.from_dict(ledger))
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_golden_file_restores_to_the_known_state(name: str) -> None:
    spec, eps, cal, bits, ledger = CASES[name]
    est = ps.DensityEstimator.load(GOLDEN / name, expect={"universe": spec, "epsilon": eps,
                                                          "calibration": cal})
    assert est.bits().tolist() == bits
    assert est.ledger.to_dict() == ledger
    assert est.p_numerator == ps.calibrate(eps, cal).numerator
    assert est.epsilon_state == ps.realized_epsilon(est.p)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_same_state_is_written_byte_for_byte_as_in_the_golden_file(name: str) -> None:
    data = (GOLDEN / name).read_bytes()
    snap = fmt.decode(data)
    assert snap.version == 1
    # Re-encode from the stored ledger dict: independent of how PrivacyLedger grows.
    assert fmt.encode(snap.params, snap.ledger, snap.table) == data
    assert golden_states()[name].snapshot() == data


def test_the_documented_hexdump_is_the_golden_file() -> None:
    """docs/snapshot-format.md walks through v1-range13-tight.pst byte by byte."""
    doc = (Path(__file__).parents[2] / "docs" / "snapshot-format.md").read_text()
    data = (GOLDEN / "v1-range13-tight.pst").read_bytes()
    dump = doc.split("<!-- hexdump v1-range13-tight.pst -->")[1].split("```")[1]
    hexbytes = "".join(line.split("|")[0][8:] for line in dump.strip().splitlines() if "|" in line)
    assert bytes.fromhex(hexbytes) == data


if __name__ == "__main__":  # pragma: no cover - regenerate (new format versions only)
    GOLDEN.mkdir(exist_ok=True)
    for fname, est in golden_states().items():
        (GOLDEN / fname).write_bytes(est.snapshot())
        print("wrote", GOLDEN / fname)
