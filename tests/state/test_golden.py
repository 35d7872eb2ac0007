"""Golden snapshots: files written by every format version must load, unchanged, forever.

``tests/state/golden/v2-*.pst`` were produced by :func:`golden_states` below (run this file as a
script to write the ones missing; existing files are never rewritten). Each
test checks that today's panstream reads them to the exact known state and writes the same state
back byte for byte, so any change to the format is caught here. The ``v1-*.pst`` files were written
by panstream 0.1 (format version 1, never written any more): they must keep loading with the same
meaning, a fair-coin D0 (q = 1/2). ``v2-range13-rr.pst`` holds a randomized-response state (the
default since issue 11): its q numerator is not 2**31, and its realized epsilon is recomputed from
the two stored numerators on load.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import panstream as ps
from panstream import estimators
from panstream.estimators.bittable import BitTable
from panstream.release.ledger import ShardLedger
from panstream.state import format as fmt

GOLDEN = Path(__file__).parent / "golden"

_LEDGER = {"budget": 1.0, "entries": [{"epsilon": 0.25, "mechanism": "laplace",
                                       "time": 1700000000.5}]}

#: name -> (universe, epsilon, calibration, bits, ledger dict or None for a shard)
V1: dict[str, tuple[str, float, str, list[int], dict[str, Any] | None]] = {
    "v1-range13-tight.pst": ("range:13", 1.0, "tight", [1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1, 0, 1],
                             _LEDGER),
    "v1-ipv4-paper.pst": ("ipv4:192.0.2.0/28", 0.5, "paper", [i % 2 for i in range(16)],
                          {"budget": 2.0, "entries": []}),
}
V2: dict[str, tuple[str, float, str, list[int], dict[str, Any] | None]] = {
    "v2-range13-tight.pst": V1["v1-range13-tight.pst"],
    "v2-ipv4-paper.pst": V1["v1-ipv4-paper.pst"],
    "v2-shard-range13-tight.pst": ("range:13", 1.0, "tight", [0, 1] * 6 + [1], None),
    "v2-range13-rr.pst": ("range:13", 1.0, "rr", [0, 0, 1, 0, 1, 1, 0, 0, 0, 1, 0, 0, 1], _LEDGER),
}


def golden_states() -> dict[str, ps.DensityEstimator]:
    """The exact states stored in the version-2 golden files."""
    out = {}
    for name, (spec, eps, cal, bits, ledger) in V2.items():
        packed = np.packbits(np.array(bits, dtype=np.uint8), bitorder="little").tobytes()
        u = ps.Universe.parse(spec)
        led = ShardLedger() if ledger is None else ps.PrivacyLedger.from_dict(ledger)
        out[name] = ps.DensityEstimator(u, eps, cal, _table=BitTable.from_packed(u.size, packed),
                                        _ledger=led)
    return out


@pytest.mark.parametrize("name", sorted(V1) + sorted(V2))
def test_a_golden_file_restores_to_the_known_state(name: str) -> None:
    spec, eps, cal, bits, ledger = {**V1, **V2}[name]
    est = ps.DensityEstimator.load(GOLDEN / name, expect={"universe": spec, "epsilon": eps,
                                                          "calibration": cal})
    assert est.bits().tolist() == bits
    if ledger is None:
        assert est.ledger.shard  # a shard carries no budget of its own
    else:
        assert est.ledger.to_dict() == ledger
    want = ps.calibrate(eps, cal)
    assert (est.p_numerator, est.q_numerator) == (want.numerator, want.q_numerator)
    if cal in ("tight", "paper"):
        assert est.q == Fraction(1, 2)  # D0 is a fair coin, in v1 and in v2
    else:
        assert est.q == Fraction(1155094610, 1 << 32) and est.p == 1 - est.q  # rr at epsilon 1
    assert est.epsilon_state == ps.realized_epsilon(est.p, est.q) <= eps
    assert type(estimators.load(GOLDEN / name)) is ps.DensityEstimator


@pytest.mark.parametrize("name", sorted(V1))
def test_a_version_1_file_decodes_to_the_version_2_parameters(name: str) -> None:
    """Version 1 has binary fields; they mean exactly the v2 parameters with q = 1/2."""
    v1 = fmt.decode((GOLDEN / name).read_bytes())
    v2 = fmt.decode((GOLDEN / name.replace("v1-", "v2-")).read_bytes())
    assert (v1.version, v2.version) == (1, 2)
    assert v1.params == v2.params and v1.ledger == v2.ledger
    assert bytes(v1.payload) == bytes(v2.payload)


@pytest.mark.parametrize("name", sorted(V2))
def test_the_same_state_is_written_byte_for_byte_as_in_the_golden_file(name: str) -> None:
    data = (GOLDEN / name).read_bytes()
    snap = fmt.decode(data)
    assert snap.version == 2
    # Re-encode from the stored dicts: independent of how PrivacyLedger grows.
    assert fmt.encode(snap.params, snap.ledger, snap.payload) == data
    assert golden_states()[name].snapshot() == data


def test_an_rr_file_with_a_q_this_version_would_not_calibrate_is_refused() -> None:
    """The realized epsilon is recomputed from the stored numerators, never trusted: a file whose q
    was rounded down (a larger realized epsilon than the stored epsilon's) does not load."""
    snap = fmt.decode((GOLDEN / "v2-range13-rr.pst").read_bytes())
    for q_num in (snap.params["q_numerator"] - 1, 1 << 30):  # one step down; a coarse 1/4
        forged = {**snap.params, "q_numerator": q_num, "p_numerator": (1 << 32) - q_num}
        data = fmt.encode(forged, snap.ledger, snap.payload)
        with pytest.raises(fmt.SnapshotMismatchError, match="q = "):
            ps.DensityEstimator.restore(data)


@pytest.mark.parametrize("name", ["v1-range13-tight.pst", "v2-range13-tight.pst",
                                  "v2-freq-range13-mod16.pst", "v2-sketch-2x3-id.pst"])
def test_the_documented_hexdump_is_the_golden_file(name: str) -> None:
    """docs/snapshot-format.md walks through a density file of each version, a frequency file
    and a sketch file byte by byte (their golden tests: this file, ``test_golden_frequency.py``,
    ``test_golden_sketch.py``)."""
    doc = (Path(__file__).parents[2] / "docs" / "snapshot-format.md").read_text()
    data = (GOLDEN / name).read_bytes()
    dump = doc.split(f"<!-- hexdump {name} -->")[1].split("```")[1]
    hexbytes = "".join(line.split("|")[0][8:] for line in dump.strip().splitlines() if "|" in line)
    assert bytes.fromhex(hexbytes) == data


def reencoded(name: str, kind: str) -> tuple[bytes, Any]:
    """Golden file ``name`` of format version 2 and ``kind``, decoded and encoded again from its
    stored dicts, byte for byte (independent of how the estimator grows): its bytes and snapshot."""
    data = (GOLDEN / name).read_bytes()
    snap = fmt.decode(data)
    assert snap.version == 2 and snap.kind == kind
    assert fmt.encode(snap.params, snap.ledger, snap.payload) == data
    return data, snap


def assert_loads_only_as(name: str, family: type) -> None:
    """``estimators.load`` reads golden file ``name`` as ``family``; the density loader refuses
    it with one error."""
    assert type(estimators.load(GOLDEN / name)) is family
    with pytest.raises(ps.StateError, match="not a density one"):
        ps.DensityEstimator.load(GOLDEN / name)


def write_missing(files: dict[str, bytes]) -> None:
    """Write the golden files of ``files`` (name -> bytes) that do not exist yet; a golden file,
    once written, never changes (one that differs is said, not overwritten)."""
    GOLDEN.mkdir(exist_ok=True)
    for fname, data in files.items():
        path = GOLDEN / fname
        if path.exists():
            print("kept" if path.read_bytes() == data else "DIFFERS (not overwritten)", path)
            continue
        path.write_bytes(data)
        print("wrote", path)


if __name__ == "__main__":  # pragma: no cover - writes missing files only, never overwrites
    write_missing({fname: est.snapshot() for fname, est in golden_states().items()})
