"""Snapshots: what they contain, what they never contain, and how restoring behaves.

Statistical assertions state their false-failure probability (at most 1e-6) and never retry.
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import numpy as np
import pytest

import panstream as ps
from panstream.errors import StateError
from panstream.state import format as fmt


def _est(spec: str = "range:4096", **kw: object) -> ps.DensityEstimator:
    return ps.DensityEstimator(spec, **kw)  # type: ignore[arg-type]


def _head_and_table(data: bytes) -> tuple[bytes, bytes]:
    frame = fmt.read_frame(data)
    return data[: frame.head_size], data[frame.head_size : frame.head_size + frame.payload_size]


# ---------------------------------------------------------------------- round trip
@pytest.mark.parametrize("layout", ["bytes", "packed"])
@pytest.mark.parametrize("spec", ["range:13", "ipv4:10.0.0.0/20", "hashed:1000", "ipv6:2001:db8::/56@64"])
def test_restore_gives_back_the_same_table_parameters_and_ledger(spec: str, layout: str) -> None:
    est = _est(spec, epsilon=0.7, calibration="paper", budget=2.0, layout=layout)
    est.update_indices(np.arange(0, est.size, 3))
    est.ledger.charge(0.5, "laplace")
    back = ps.DensityEstimator.restore(est.snapshot(), layout=layout)
    assert np.array_equal(back.bits(), est.bits())
    assert (back.universe.spec, back.epsilon, back.calibration) == (spec, 0.7, "paper")
    assert back.p == est.p and back.p_numerator == est.p_numerator
    assert back.epsilon_state == est.epsilon_state == ps.realized_epsilon(est.p)
    assert back.ledger.to_dict() == est.ledger.to_dict()
    assert back.layout == layout


def test_the_snapshot_of_a_restored_estimator_is_byte_identical() -> None:
    est = _est("range:1000")
    data = est.snapshot()
    assert ps.DensityEstimator.restore(data).snapshot() == data


def test_the_table_section_is_the_packed_table_little_endian_bit_order() -> None:
    est = _est("range:20")
    _, table = _head_and_table(est.snapshot())
    bits = np.unpackbits(np.frombuffer(table, dtype=np.uint8), bitorder="little")
    assert np.array_equal(bits[:20], est.bits())
    assert not bits[20:].any()  # padding bits are zero


# ---------------------------------------------------------------------- the contents rule
def test_size_and_every_non_table_byte_are_independent_of_the_stream() -> None:
    """Two very different streams, same parameters and ledger: only the table section differs.

    (Same ledger: a ledger's epoch label is random, drawn when the table is, and independent of
    the stream by construction; two fresh estimators differ in it, whatever they saw.)

    The trailing SHA-256 is a public function of the bytes before it, so it adds nothing either.
    """
    quiet = _est("range:4096")
    busy = ps.DensityEstimator("range:4096", _ledger=ps.PrivacyLedger.from_dict(quiet.ledger.to_dict()))
    busy.update(np.arange(4096))
    busy.update(list(range(100)) * 50)  # repeated arrivals: no counter anywhere
    a, b = quiet.snapshot(), busy.snapshot()
    assert len(a) == len(b)
    head_a, _ = _head_and_table(a)
    head_b, _ = _head_and_table(b)
    assert head_a == head_b


def test_the_head_holds_public_parameters_and_the_ledger_only() -> None:
    est = _est("ipv4:10.0.0.0/24", epsilon=1.0)
    est.ledger.charge(0.25, "laplace")
    head, table = _head_and_table(est.snapshot())
    rebuilt = fmt.encode_head(est.params(), est.ledger.to_dict(), len(table))
    assert head == rebuilt
    text = head[fmt.PREAMBLE.size :]
    # the default calibration, rr: q = 1155094610 / 2**32 >= 1/(1+e), p = 1 - q exactly
    assert text.startswith(b'{"calibration":"rr","cells":256,"epsilon":1.0,"kind":"density",'
                           b'"p_bits":32,"p_numerator":3139872686,"q_numerator":1155094610,'
                           b'"universe":"ipv4:10.0.0.0/24"}{"budget":1.0,"entries":[')


# ---------------------------------------------------------------------- restore reseeds
def test_restoring_twice_and_feeding_the_same_items_redraws_touched_cells_independently() -> None:
    """No seed exists, so two restores of one snapshot draw their redrawn cells independently.

    Untouched cells come from the snapshot and agree. On the n touched cells, independent draws
    from D1 = Bernoulli(p) agree with probability q = p^2 + (1-p)^2 each; identical (replayed)
    draws would agree on all n. The agreement count is Binomial(n, q); a band of 5.5 standard
    deviations fails with probability < 4e-8.
    """
    est = _est("range:65536", epsilon=1.0)
    data = est.snapshot()
    touched = np.arange(0, 65536, 2)
    one, two = ps.DensityEstimator.restore(data), ps.DensityEstimator.restore(data)
    one.update_indices(touched.copy())
    two.update_indices(touched.copy())
    b1, b2 = one.bits(), two.bits()
    untouched = np.ones(65536, bool)
    untouched[touched] = False
    assert np.array_equal(b1[untouched], b2[untouched])
    p = float(est.p)
    n, q = touched.size, p * p + (1 - p) ** 2
    agree = int((b1[touched] == b2[touched]).sum())
    assert abs(agree - n * q) < 5.5 * math.sqrt(n * q * (1 - q))
    # and each copy's touched cells follow D1 = Bernoulli(p)
    for b in (b1, b2):
        ones = int(b[touched].sum())
        assert abs(ones - n * p) < 5.5 * math.sqrt(n * p * (1 - p))


# ---------------------------------------------------------------------- bad input
@pytest.fixture(scope="module")
def small() -> bytes:
    est = ps.DensityEstimator("range:40")
    est.ledger.charge(0.5, "laplace")
    return est.snapshot()


def test_every_truncation_is_refused(small: bytes) -> None:
    for n in range(len(small)):
        with pytest.raises(fmt.CorruptSnapshotError, match="truncated|empty"):
            ps.DensityEstimator.restore(small[:n])


def test_trailing_bytes_are_refused(small: bytes) -> None:
    with pytest.raises(fmt.CorruptSnapshotError, match="trailing"):
        ps.DensityEstimator.restore(small + b"\0")


def test_every_single_bit_flip_is_refused(small: bytes) -> None:
    """Flip each bit of the snapshot in turn: all 100 % are caught, none loads."""
    for i in range(len(small) * 8):
        bad = bytearray(small)
        bad[i // 8] ^= 1 << (i % 8)
        with pytest.raises(StateError):
            ps.DensityEstimator.restore(bytes(bad))


def test_a_flipped_table_bit_is_reported_as_a_checksum_mismatch(small: bytes) -> None:
    bad = bytearray(small)
    bad[-fmt.DIGEST_SIZE - 1] ^= 0x01
    with pytest.raises(fmt.CorruptSnapshotError, match="checksum mismatch.*nothing was loaded"):
        ps.DensityEstimator.restore(bytes(bad))


def test_wrong_magic_says_it_is_not_a_snapshot(small: bytes) -> None:
    with pytest.raises(fmt.NotASnapshotError, match="not a panstream snapshot"):
        ps.DensityEstimator.restore(b"192.0.2.1 - - [10/Oct/2000:13:55:36] GET / HTTP/1.0\n" * 3)
    with pytest.raises(fmt.NotASnapshotError):
        ps.DensityEstimator.restore(b"P" + small[1:])


def test_a_future_version_asks_for_an_upgrade(small: bytes) -> None:
    bad = bytearray(small)
    struct.pack_into("<H", bad, 8, fmt.FORMAT_VERSION + 1)
    with pytest.raises(fmt.SnapshotVersionError, match="newer.*upgrade panstream"):
        ps.DensityEstimator.restore(bytes(bad))


def test_unknown_flags_ask_for_an_upgrade() -> None:
    """A checksum-valid snapshot with a reserved flag set: written by a newer panstream."""
    est = ps.DensityEstimator("range:40")
    head, table, _ = est.snapshot_parts()
    head = head[:10] + struct.pack("<H", 1) + head[12:]
    import hashlib

    data = head + bytes(table) + hashlib.sha256(head + bytes(table)).digest()
    with pytest.raises(fmt.SnapshotVersionError, match="flags 0x0001.*upgrade"):
        ps.DensityEstimator.restore(data)


@pytest.mark.parametrize(("expect", "match"), [
    ({"universe": "range:41"}, "written for universe range:40 but range:41.*--universe range:40"),
    ({"universe": ps.Universe.range(8)}, "written for universe range:40"),
    ({"epsilon": 0.5}, "written with epsilon 1.0 but 0.5.*--epsilon 1.0"),
    ({"calibration": "paper"}, "calibration 'rr' but 'paper'.*--calibration rr"),
])
def test_parameters_that_contradict_the_stored_ones_are_refused(small: bytes, expect: dict,
                                                                 match: str) -> None:
    with pytest.raises(fmt.SnapshotMismatchError, match=match):
        ps.DensityEstimator.restore(small, expect=expect)


def test_matching_expectations_load(small: bytes) -> None:
    est = ps.DensityEstimator.restore(small, expect={"universe": "range:40", "epsilon": 1,
                                                     "calibration": "rr"})
    assert est.size == 40
    assert ps.DensityEstimator.restore(small, expect={"epsilon": None}).size == 40
    with pytest.raises(ValueError, match="unknown expect= keys"):
        ps.DensityEstimator.restore(small, expect={"budget": 1.0})


def test_a_p_this_version_would_not_calibrate_is_refused() -> None:
    """A checksum-valid snapshot whose stored p differs from calibrate(epsilon): different version."""
    est = ps.DensityEstimator("range:40")
    forged = est.params()
    forged["p_numerator"] -= 1
    data = fmt.encode(forged, est.ledger.to_dict(), est._table.to_packed())
    with pytest.raises(fmt.SnapshotMismatchError, match="different panstream version or calibration"):
        ps.DensityEstimator.restore(data)


def test_the_realized_epsilon_is_recomputed_from_the_stored_p(small: bytes) -> None:
    snap = fmt.decode(small)
    assert "epsilon_state" not in snap.params  # nothing to trust: it is not stored
    p, q = (Fraction(snap.params[k], 2**32) for k in ("p_numerator", "q_numerator"))
    assert ps.DensityEstimator.restore(small).epsilon_state == ps.realized_epsilon(p, q)
