"""Frequency snapshots: kind "frequency" in format version 2, the counter payload, and the checks a
reader makes before adopting one. Golden files: tests/state/test_golden_frequency.py."""

from __future__ import annotations

import numpy as np
import pytest

import panstream as ps
from panstream import estimators
from panstream.estimators.counters import payload_counter
from panstream.state import format as fmt


def _parts(data: bytes) -> tuple[bytes, bytes]:
    frame = fmt.read_frame(data)
    return data[: frame.head_size], data[frame.head_size : frame.head_size + frame.payload_size]


def _reencode(data: bytes, params: dict | None = None, payload: bytes | None = None) -> bytes:
    snap = fmt.decode(data)
    return fmt.encode(params if params is not None else snap.params, snap.ledger,
                      payload if payload is not None else bytes(snap.payload))


@pytest.mark.parametrize("layout", ["bytes", "packed"])
@pytest.mark.parametrize(("spec", "k"), [("range:13", 16), ("range:13", 4), ("ipv4:10.0.0.0/22", 8),
                                         ("hashed:1000", 64), ("range:7", 256)])
def test_restore_gives_back_the_same_counters_parameters_and_ledger(spec: str, k: int,
                                                                    layout: str) -> None:
    est = ps.FrequencyEstimator(spec, epsilon=0.7, modulus=k, budget=2.0, layout=layout)
    est.update_indices(np.arange(0, est.size, 3).repeat(5))
    est.release(0.5)
    data = est.snapshot()
    for back in (ps.FrequencyEstimator.restore(data, layout=layout), estimators.restore(data)):
        assert isinstance(back, ps.FrequencyEstimator)
        assert back.counters().tolist() == est.counters().tolist()
        assert (back.universe.spec, back.epsilon, back.modulus) == (spec, 0.7, k)
        assert back.alpha == est.alpha and back.epsilon_state == est.epsilon_state
        assert back.ledger.to_dict() == est.ledger.to_dict()
        assert back.snapshot() == data
    assert ps.FrequencyEstimator.restore(data, layout=layout).layout == (layout if k <= 16
                                                                          else "bytes")


def test_the_payload_holds_the_counters_as_documented() -> None:
    est = ps.FrequencyEstimator("range:21", modulus=16)
    head, payload = _parts(est.snapshot())
    assert len(payload) == 11
    assert [payload_counter(payload, i, 16) for i in range(21)] == est.counters().tolist()
    assert payload[-1] >> 4 == 0  # the padding nibble
    assert fmt.decode(est.snapshot()).params["kind"] == "frequency"


def test_size_and_every_non_payload_byte_are_independent_of_the_stream() -> None:
    quiet = ps.FrequencyEstimator("range:4096", modulus=16)
    # Same ledger: its epoch label is random (drawn with the table), not a function of the stream.
    busy = ps.FrequencyEstimator("range:4096", modulus=16,
                                 _ledger=ps.PrivacyLedger.from_dict(quiet.ledger.to_dict()))
    busy.update(np.arange(4096))
    busy.update(list(range(100)) * 50)
    a, b = quiet.snapshot(), busy.snapshot()
    assert len(a) == len(b) and _parts(a)[0] == _parts(b)[0]


def test_save_and_load_pick_the_family_and_refuse_the_other() -> None:
    import os
    import tempfile

    d = tempfile.mkdtemp()
    freq, dens = os.path.join(d, "f.pst"), os.path.join(d, "d.pst")
    ps.FrequencyEstimator("range:64", modulus=8).save(freq)
    ps.DensityEstimator("range:64").save(dens)
    assert type(estimators.load(freq)) is ps.FrequencyEstimator
    assert type(estimators.load(dens)) is ps.DensityEstimator
    with pytest.raises(ps.StateError, match="holds a frequency estimator, not a density one"):
        ps.DensityEstimator.load(freq)
    with pytest.raises(ps.StateError, match="holds a density estimator, not a frequency one"):
        ps.FrequencyEstimator.load(dens)
    assert os.stat(freq).st_mode & 0o777 == 0o600


def test_resume_parameters_are_checked() -> None:
    data = ps.FrequencyEstimator("range:64", epsilon=1.0, modulus=16).snapshot()
    ps.FrequencyEstimator.restore(data, expect={"universe": "range:64", "epsilon": 1.0,
                                                "modulus": 16, "kind": "frequency"})
    with pytest.raises(fmt.SnapshotMismatchError, match="resume with --modulus 16"):
        ps.FrequencyEstimator.restore(data, expect={"modulus": 8})
    with pytest.raises(fmt.SnapshotMismatchError, match="--estimator frequency"):
        estimators.restore(data, expect={"kind": "density"})


def test_a_shard_snapshot_stores_no_ledger_and_refuses_releases() -> None:
    est = ps.FrequencyEstimator("range:64")
    buf = est.snapshot_buffer(as_shard=True)
    snap = fmt.decode(bytes(buf))
    assert snap.ledger is None
    back = estimators.restore(bytes(buf))
    assert back.ledger.shard
    with pytest.raises(ps.StateError, match="shard"):
        back.release(0.1)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("change", "error", "match"), [
    ({"modulus": 12}, fmt.CorruptSnapshotError, "power of two"),
    ({"modulus": True}, fmt.CorruptSnapshotError, "power of two"),
    ({"alpha_numerator": 0}, fmt.CorruptSnapshotError, "numerator"),
    ({"alpha_numerator": 1 << 32}, fmt.CorruptSnapshotError, "numerator"),
    ({"p_bits": 16}, fmt.CorruptSnapshotError, "numerator"),
    ({"alpha_numerator": 12345}, fmt.SnapshotMismatchError, "different panstream version"),
    ({"epsilon": 1e-12}, fmt.CorruptSnapshotError, "cannot be calibrated"),
    ({"epsilon": 2.0}, fmt.SnapshotMismatchError, "calibrates that to"),
])
def test_contradicting_parameters_are_refused(change: dict, error: type, match: str) -> None:
    data = ps.FrequencyEstimator("range:13", modulus=16).snapshot()
    params = dict(fmt.decode(data).params, **change)
    with pytest.raises(error, match=match):
        estimators.restore(_reencode(data, params=params))


@pytest.mark.parametrize(("k", "payload", "match"), [
    (16, bytes(6), "cannot hold"),
    (16, bytes(6) + b"\x10", "padding nibble"),
    (4, b"\x01" + bytes(6), "below their counter"),
    (64, bytes(12) + b"\x02", "below their counter"),
])
def test_payloads_a_writer_cannot_produce_are_refused(k: int, payload: bytes, match: str) -> None:
    data = ps.FrequencyEstimator("range:13", modulus=k).snapshot()
    with pytest.raises(fmt.CorruptSnapshotError, match=match):
        estimators.restore(_reencode(data, payload=payload))


def test_an_auditor_reads_any_counter_from_the_dump() -> None:
    from panstream.state.persist import snapshot_counter

    est = ps.FrequencyEstimator("range:13", modulus=4)
    data = est.snapshot()
    assert [snapshot_counter(data, c) for c in range(13)] == est.counters().tolist()
    with pytest.raises(ps.StateError, match="outside"):
        snapshot_counter(data, 13)
    with pytest.raises(ps.StateError, match="not a frequency one"):
        snapshot_counter(ps.DensityEstimator("range:13").snapshot(), 0)
