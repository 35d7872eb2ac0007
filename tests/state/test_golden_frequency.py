"""Golden frequency snapshots: files of kind "frequency" (format version 2) must load, unchanged,
forever.

``tests/state/golden/v2-freq-*.pst`` were produced by :func:`golden_states` below (run this file as a
script to write any that are missing; it never overwrites a file). Each test checks that today's
panstream reads them to the exact known state and writes the same state back byte for byte. The
density golden files are tested in ``test_golden.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import panstream as ps
from panstream.estimators.counters import CounterTable
from panstream.release.ledger import ShardLedger
from tests.state.test_golden import assert_loads_only_as, reencoded

GOLDEN = Path(__file__).parent / "golden"

_LEDGER = {"budget": 1.0, "entries": [{"epsilon": 0.25, "mechanism": "laplace",
                                       "time": 1700000000.5}]}

#: name -> (universe, epsilon, modulus, counters, ledger dict or None for a shard)
FREQ: dict[str, tuple[str, float, int, list[int], dict[str, Any] | None]] = {
    # k = 16, odd size: two counters per byte, a padding nibble (documented byte by byte)
    "v2-freq-range13-mod16.pst": ("range:13", 1.0, 16, list(range(13)), _LEDGER),
    # k = 64: one byte per counter, the counter in the top 6 bits
    "v2-freq-range5-mod64.pst": ("range:5", 2.0, 64, [0, 1, 63, 32, 7],
                                 {"budget": 2.0, "entries": []}),
    # k = 4: nibble fields c * 4, a shard of a consumer group (no ledger)
    "v2-freq-shard-range13-mod4.pst": ("range:13", 0.5, 4, [i % 4 for i in range(13)], None),
}


def golden_states() -> dict[str, ps.FrequencyEstimator]:
    """The exact states stored in the frequency golden files."""
    out = {}
    for name, (spec, eps, k, counters, ledger) in FREQ.items():
        table = CounterTable.from_counters(np.array(counters, dtype=np.uint8), k)
        led = ShardLedger() if ledger is None else ps.PrivacyLedger.from_dict(ledger)
        out[name] = ps.FrequencyEstimator(spec, eps, k, _table=table, _ledger=led)
    return out


@pytest.mark.parametrize("name", sorted(FREQ))
def test_a_golden_frequency_file_restores_to_the_known_state(name: str) -> None:
    spec, eps, k, counters, ledger = FREQ[name]
    est = ps.FrequencyEstimator.load(GOLDEN / name, expect={"universe": spec, "epsilon": eps,
                                                            "modulus": k, "kind": "frequency"})
    assert est.counters().tolist() == counters
    if ledger is None:
        assert est.ledger.shard
    else:
        assert est.ledger.to_dict() == ledger
    cal = ps.calibration.calibrate_frequency(eps, k)
    assert est.alpha_numerator == cal.numerator and est.epsilon_state == cal.epsilon_state
    assert_loads_only_as(name, ps.FrequencyEstimator)


@pytest.mark.parametrize("name", sorted(FREQ))
def test_the_same_frequency_state_is_written_byte_for_byte(name: str) -> None:
    data, snap = reencoded(name, "frequency")
    assert golden_states()[name].snapshot_buffer(as_shard=snap.ledger is None) == data


if __name__ == "__main__":  # pragma: no cover - writes missing files only, never overwrites
    from tests.state.test_golden import write_missing

    write_missing({fname: bytes(est.snapshot_buffer(as_shard=est.ledger.shard))
                   for fname, est in golden_states().items()})
