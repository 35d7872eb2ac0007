"""The binary snapshot format (version 1): a leaked snapshot reveals only the bit table.

A snapshot holds the public parameters, the release-stage privacy ledger and the packed bit table,
framed by a magic number, a format version and a SHA-256 checksum. This module is pure: bytes in,
bytes out, no file system (atomic files live in :mod:`panstream.state.files`). The layout is documented
byte by byte in ``docs/snapshot-format.md``; in short (all integers little-endian)::

    off  len  field
      0    8  magic  89 50 41 4E 53 54 52 0A  ("\\x89PANSTR\\n")
      8    2  format version (u16) = 1
     10    2  flags (u16) = 0, every bit reserved
     12    1  p_bits (u8) = 32: p = p_numerator / 2**p_bits exactly
     13    1  C = length of the calibration name (u8)
     14    2  U = length of the universe spec (u16)
     16    8  cells |X| (u64)
     24    8  p_numerator (u64)
     32    8  requested epsilon (IEEE 754 binary64)
     40    4  L = length of the ledger JSON (u32)
     44    8  T = length of the packed table (u64) = ceil(cells / 8)
     52    C  calibration name, ASCII ("tight" or "paper")
      .    U  universe spec, ASCII (e.g. "ipv4:10.0.0.0/16")
      .    L  ledger: ``PrivacyLedger.to_dict()`` as canonical JSON (sorted keys, no spaces, ASCII)
      .    T  table: cell i is bit i % 8 (least significant first) of byte i // 8; padding bits 0
      .   32  SHA-256 of every byte before it

**Contents rule.** Outside the table, every byte is a function of the public parameters and the
ledger alone: no item, no count, no stream length, no time of writing, no seed or generator state
(there is none: every draw comes from the OS CSPRNG). Hence the snapshot's size and all its non-table
bytes are identical for any two streams, and a snapshot is exactly as private as the table:
``epsilon_state``-DP against one intrusion.

**Restore reseeds.** Nothing in a snapshot determines future draws. Restoring one snapshot twice and
feeding both copies the same items gives independently redrawn cells.

>>> import panstream as ps
>>> est = ps.DensityEstimator("range:64", epsilon=1.0)
>>> data = est.snapshot()
>>> len(data) == len(ps.DensityEstimator("range:64", epsilon=1.0).snapshot())
True
>>> back = ps.DensityEstimator.restore(data, expect={"universe": "range:64"})
>>> bool((back.bits() == est.bits()).all()), back.p == est.p
(True, True)
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from panstream.calibration import CALIBRATIONS, calibrate, realized_epsilon
from panstream.errors import ConfigurationError, PanstreamError, StateError
from panstream.randomness import P_BITS
from panstream.universe import Universe

if TYPE_CHECKING:  # pragma: no cover
    from panstream.estimators.density import DensityEstimator

    E = TypeVar("E", bound=DensityEstimator)

Buffer = bytes | bytearray | memoryview

#: First eight bytes of every snapshot. 0x89 catches 7-bit transfers, the final LF newline mangling.
MAGIC = b"\x89PANSTR\n"
#: The format version this module writes (and the newest it reads).
FORMAT_VERSION = 1
#: The fixed-size preamble: magic, version, flags, p_bits, C, U, cells, p_numerator, epsilon, L, T.
PREAMBLE = struct.Struct("<8sHHBBHQQdIQ")
#: Length of the trailing SHA-256 checksum.
DIGEST_SIZE = 32
#: Keys accepted in ``expect=`` mappings.
EXPECT_KEYS = ("universe", "epsilon", "calibration")

_FIX = "move the file aside and start a new state (a fresh table)"


# ---------------------------------------------------------------------- errors
class NotASnapshotError(StateError):
    """The data does not start with the snapshot magic: it is some other file."""


class SnapshotVersionError(StateError):
    """The snapshot was written by a newer panstream (future format version or unknown flags)."""


class CorruptSnapshotError(StateError):
    """The snapshot is truncated, has trailing bytes, fails its checksum, or has invalid fields."""


class SnapshotMismatchError(StateError):
    """The snapshot's parameters contradict the ones asked for on resume, or this version's
    calibration gives a different p than the one stored."""


# ---------------------------------------------------------------------- contents
@dataclass(frozen=True)
class StateParams:
    """The public parameters stored in a snapshot.

    Attributes:
        universe: canonical universe spec (``Universe.parse(universe).spec == universe``).
        cells: number of cells |X|.
        epsilon: the state epsilon that was asked for.
        calibration: ``"tight"`` or ``"paper"``.
        p_numerator: ``p * 2**p_bits``, the exact D1 probability used.
        p_bits: the denominator exponent (32).
    """

    universe: str
    cells: int
    epsilon: float
    calibration: str
    p_numerator: int
    p_bits: int = P_BITS

    @property
    def p(self) -> Fraction:
        """The exact D1 probability."""
        return Fraction(self.p_numerator, 1 << self.p_bits)

    @property
    def epsilon_state(self) -> float:
        """The realized state epsilon, recomputed from the stored exact p."""
        return realized_epsilon(self.p)


@dataclass(frozen=True)
class Snapshot:
    """A decoded, verified snapshot.

    Attributes:
        version: the format version it was written in.
        params: the public parameters.
        ledger: the ledger as a plain dict (``PrivacyLedger.from_dict`` input).
        table: the packed table, a zero-copy view into the decoded buffer.
    """

    version: int
    params: StateParams
    ledger: dict[str, Any]
    table: memoryview


@dataclass(frozen=True)
class Frame:
    """Lengths read from a preamble: where each section starts and how long the snapshot is."""

    version: int
    flags: int
    head_size: int
    table_size: int

    @property
    def total(self) -> int:
        """Total length of the snapshot in bytes."""
        return self.head_size + self.table_size + DIGEST_SIZE


def canonical_json(obj: Mapping[str, Any]) -> bytes:
    """``obj`` as canonical JSON: sorted keys, no whitespace, ASCII only, no NaN or infinity."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode("ascii")


def table_size(cells: int) -> int:
    """Bytes of the packed table of ``cells`` cells: ``ceil(cells / 8)``."""
    return (cells + 7) // 8


# ---------------------------------------------------------------------- encoding
def encode_head(params: StateParams, ledger: Mapping[str, Any]) -> bytes:
    """Every byte before the table: preamble, calibration, universe spec, ledger JSON.

    Raises:
        ValueError: a field does not fit its length (a spec over 65535 bytes, say).
    """
    cal = params.calibration.encode("ascii")
    spec = params.universe.encode("ascii")
    led = canonical_json(ledger)
    if len(cal) > 0xFF or len(spec) > 0xFFFF or len(led) > 0xFFFFFFFF:
        msg = "snapshot field too long: calibration <= 255, universe spec <= 65535 bytes"
        raise ValueError(msg)
    pre = PREAMBLE.pack(MAGIC, FORMAT_VERSION, 0, params.p_bits, len(cal), len(spec), params.cells,
                        params.p_numerator, float(params.epsilon), len(led),
                        table_size(params.cells))
    return pre + cal + spec + led


def encode_parts(params: StateParams, ledger: Mapping[str, Any], table: Buffer
                 ) -> tuple[bytes, memoryview, bytes]:
    """The snapshot as three pieces ``(head, table, checksum)`` whose concatenation is the snapshot.

    Writing the pieces one after another (as :func:`panstream.storage.atomic_write` does) avoids
    copying a large table into one buffer.

    Raises:
        ValueError: the table has the wrong length for ``params.cells``.
    """
    tab = memoryview(table).cast("B")
    if len(tab) != table_size(params.cells):
        msg = f"table of {params.cells} cells needs {table_size(params.cells)} bytes, got {len(tab)}"
        raise ValueError(msg)
    head = encode_head(params, ledger)
    h = hashlib.sha256(head)
    h.update(tab)
    return head, tab, h.digest()


def encode(params: StateParams, ledger: Mapping[str, Any], table: Buffer) -> bytes:
    """The snapshot as one ``bytes`` object. See :func:`encode_parts`."""
    return b"".join(encode_parts(params, ledger, table))


# ---------------------------------------------------------------------- decoding
def read_frame(prefix: Buffer) -> Frame:
    """Check the magic and version in the first bytes of a snapshot and compute its layout.

    Args:
        prefix: at least the first ``PREAMBLE.size`` (52) bytes, or the whole data if shorter.

    Raises:
        NotASnapshotError: wrong magic.
        CorruptSnapshotError: fewer than 52 bytes.
        SnapshotVersionError: a format version newer than :data:`FORMAT_VERSION`.
    """
    mv = memoryview(prefix).cast("B")
    start = bytes(mv[: len(MAGIC)])
    if not start:
        msg = f"snapshot is empty (0 bytes): it was never completely written; {_FIX}"
        raise CorruptSnapshotError(msg)
    if start != MAGIC[: len(start)]:
        msg = ("not a panstream snapshot (wrong magic bytes): check the --state path points at a "
               "file written by panstream, not a log or another program's file")
        raise NotASnapshotError(msg)
    if len(mv) < PREAMBLE.size:
        msg = (f"snapshot is truncated: only {len(mv)} bytes, shorter than the {PREAMBLE.size}-byte "
               f"preamble (interrupted copy or full disk?); {_FIX}")
        raise CorruptSnapshotError(msg)
    (_, version, flags, _, clen, ulen, _, _, _, llen, tlen) = PREAMBLE.unpack_from(mv)
    if version > FORMAT_VERSION:
        msg = (f"snapshot format version {version} is newer than this panstream reads (up to "
               f"{FORMAT_VERSION}): upgrade panstream to resume it (or the file is damaged)")
        raise SnapshotVersionError(msg)
    if version < 1:
        msg = f"snapshot format version {version} does not exist: the file is damaged; {_FIX}"
        raise CorruptSnapshotError(msg)
    return Frame(version, flags, PREAMBLE.size + clen + ulen + llen, tlen)


def check_length(frame: Frame, got: int) -> None:
    """Raise :class:`CorruptSnapshotError` unless ``got`` equals the frame's total length."""
    if got < frame.total:
        msg = (f"snapshot is truncated: {got} bytes, but its header announces {frame.total} "
               f"(interrupted copy or full disk?); {_FIX}")
        raise CorruptSnapshotError(msg)
    if got > frame.total:
        msg = (f"snapshot has {got - frame.total} unexpected trailing bytes after its "
               f"{frame.total}-byte content: the file is damaged or was appended to; {_FIX}")
        raise CorruptSnapshotError(msg)


def check_digest(expected: Buffer, computed: bytes) -> None:
    """Raise :class:`CorruptSnapshotError` if the stored and the computed SHA-256 differ."""
    if bytes(expected) != computed:
        msg = ("snapshot checksum mismatch: the file was modified or damaged after it was written "
               f"(bit flip, partial overwrite); nothing was loaded; {_FIX}")
        raise CorruptSnapshotError(msg)


def parse_head(frame: Frame, head: Buffer) -> tuple[StateParams, dict[str, Any]]:
    """Decode and validate the fields of a checksum-verified head (everything before the table).

    Raises:
        SnapshotVersionError: unknown flags are set.
        CorruptSnapshotError: a field is invalid although the checksum matched.
        SnapshotMismatchError: this panstream calibrates the stored epsilon to a different p.
    """
    mv = memoryview(head).cast("B")
    (_, _, flags, p_bits, clen, ulen, cells, num, eps, llen, tlen) = PREAMBLE.unpack_from(mv)
    if flags:
        msg = (f"snapshot uses features (flags 0x{flags:04x}) this panstream does not know: upgrade "
               "panstream to resume it")
        raise SnapshotVersionError(msg)
    off = PREAMBLE.size
    try:
        cal = bytes(mv[off : off + clen]).decode("ascii")
        spec = bytes(mv[off + clen : off + clen + ulen]).decode("ascii")
        ledger = json.loads(bytes(mv[off + clen + ulen : off + clen + ulen + llen]).decode("ascii"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _bad(f"unreadable text field ({exc})") from None
    if not isinstance(ledger, dict):
        raise _bad("the ledger is not a JSON object")
    if p_bits != P_BITS:
        raise _bad(f"p has {p_bits} bits of precision, this panstream uses {P_BITS}")
    if cal not in CALIBRATIONS:
        raise _bad(f"unknown calibration {cal!r} (known: {', '.join(CALIBRATIONS)})")
    try:
        universe = Universe.parse(spec)
    except PanstreamError as exc:
        raise _bad(f"invalid universe spec {spec!r}: {exc}") from None
    if universe.spec != spec or universe.size != cells or tlen != table_size(cells):
        raise _bad(f"universe {spec!r}, {cells} cells and a {tlen}-byte table do not agree")
    if not (math.isfinite(eps) and eps > 0) or not 0 < num < 1 << P_BITS:
        raise _bad(f"epsilon {eps!r} or p numerator {num} out of range")
    params = StateParams(spec, cells, eps, cal, num, p_bits)
    try:
        want = calibrate(eps, cal).numerator
    except ConfigurationError as exc:
        raise _bad(f"the stored epsilon cannot be calibrated: {exc}") from None
    if want != num:
        msg = (f"snapshot stores p = {num}/2**{P_BITS} for epsilon {eps!r} ({cal}), but this "
               f"panstream calibrates that to {want}/2**{P_BITS}: the snapshot came from a different "
               "panstream version or calibration; resume it with the version that wrote it, or "
               "start a new state")
        raise SnapshotMismatchError(msg)
    return params, ledger


def decode(data: Buffer, *, expect: Mapping[str, Any] | None = None) -> Snapshot:
    """Verify and decode a snapshot. Nothing is returned unless every check passes.

    Args:
        data: the snapshot bytes.
        expect: optional parameters the caller resumes with (keys ``universe``, ``epsilon``,
            ``calibration``; ``None`` values are ignored); see :func:`check_expect`.

    Returns:
        The decoded :class:`Snapshot`; its ``table`` is a view into ``data``.

    Raises:
        NotASnapshotError, SnapshotVersionError, CorruptSnapshotError, SnapshotMismatchError: see
            the classes; each message says what to do.
    """
    mv = memoryview(data).cast("B")
    frame = read_frame(mv[: PREAMBLE.size])
    check_length(frame, len(mv))
    end = frame.head_size + frame.table_size
    check_digest(mv[end:], hashlib.sha256(mv[:end]).digest())
    params, ledger = parse_head(frame, mv[: frame.head_size])
    check_expect(params, expect)
    return Snapshot(frame.version, params, ledger, mv[frame.head_size : end])


def check_expect(params: StateParams, expect: Mapping[str, Any] | None) -> None:
    """Raise :class:`SnapshotMismatchError` if ``expect`` contradicts the stored parameters.

    Args:
        params: the stored parameters.
        expect: ``{"universe": Universe | spec, "epsilon": float, "calibration": str}``, any subset;
            keys whose value is ``None`` are not checked.

    Raises:
        ValueError: an unknown key.
        SnapshotMismatchError: a parameter differs; the message names the stored value to resume with.
    """
    if not expect:
        return
    unknown = set(expect) - set(EXPECT_KEYS)
    if unknown:
        msg = f"unknown expect= keys {sorted(unknown)}: use {', '.join(EXPECT_KEYS)}"
        raise ValueError(msg)
    new = "or move the state file aside to start a new state with the new parameters"
    u = expect.get("universe")
    if u is not None:
        spec = u.spec if isinstance(u, Universe) else Universe.parse(str(u)).spec
        if spec != params.universe:
            msg = (f"the state was written for universe {params.universe} but {spec} was asked for: "
                   f"resume with --universe {params.universe}, {new} (a table cannot be resized)")
            raise SnapshotMismatchError(msg)
    e = expect.get("epsilon")
    if e is not None and float(e) != params.epsilon:
        msg = (f"the state was written with epsilon {params.epsilon!r} but {float(e)!r} was asked "
               f"for: resume with --epsilon {params.epsilon!r}, {new} (its cells were drawn with "
               "the old p)")
        raise SnapshotMismatchError(msg)
    c = expect.get("calibration")
    if c is not None and c != params.calibration:
        msg = (f"the state was written with calibration {params.calibration!r} but {c!r} was asked "
               f"for: resume with --calibration {params.calibration}, {new}")
        raise SnapshotMismatchError(msg)


def _bad(what: str) -> CorruptSnapshotError:
    return CorruptSnapshotError(f"snapshot is invalid although its checksum matches: {what}; "
                                f"it was not written by a compatible panstream; {_FIX}")


# ---------------------------------------------------------------------- estimator bridge
def params_of(est: DensityEstimator) -> StateParams:
    """The public parameters of an estimator, as stored in its snapshots."""
    return StateParams(est.universe.spec, est.size, float(est.epsilon), est.calibration,
                       est.p_numerator, P_BITS)


def table_view(est: DensityEstimator) -> memoryview:
    """The estimator's table in packed form, without copying it when it is already packed.

    For a byte-per-cell table the view is of a fresh packed *copy* (a NumPy array, so it can be
    wiped): pass it to :func:`wipe_table_copy` once written. A copy of an old table left in freed
    memory would let one later memory read see two tables of one run (who arrived in between).
    """
    table = est._table
    if table.layout == "packed":
        return table._t.data.cast("B")  # zero-copy: a 2**32-cell table is 512 MiB
    return np.packbits(table._t, bitorder="little").data.cast("B")


def wipe_table_copy(est: DensityEstimator, view: memoryview) -> None:
    """Zero ``view`` if it is a packed copy made by :func:`table_view` (never the live table)."""
    if est._table.layout != "packed" and not view.readonly:
        np.frombuffer(view, dtype=np.uint8).fill(0)


def snapshot_parts(est: DensityEstimator) -> tuple[bytes, memoryview, bytes]:
    """:func:`encode_parts` of an estimator (the table part may be a view of its live table).

    Call :func:`wipe_table_copy` on the middle part once it has been written.
    """
    return encode_parts(params_of(est), est.ledger.to_dict(), table_view(est))


def snapshot_buffer(est: DensityEstimator) -> bytearray:
    """The snapshot of an estimator as a ``bytearray`` the caller can wipe after writing it.

    No other copy of the table is left behind: the packed temporary is zeroed here.
    """
    parts = snapshot_parts(est)
    try:
        return bytearray().join(parts)
    finally:
        wipe_table_copy(est, parts[1])


def snapshot_of(est: DensityEstimator) -> bytes:
    """The snapshot of an estimator as bytes (immutable: prefer :func:`snapshot_buffer`)."""
    buf = snapshot_buffer(est)
    try:
        return bytes(buf)
    finally:
        buf[:] = bytes(len(buf))


def build(cls: type[E], params: StateParams, ledger: Mapping[str, Any], table: np.ndarray,
          layout: str = "auto") -> E:
    """An estimator of class ``cls`` around a verified table (a writable ``uint8`` array it adopts).

    Raises:
        CorruptSnapshotError: the ledger cannot be rebuilt by this version's ``PrivacyLedger``,
            or padding bits after the last cell are set.
    """
    from panstream.estimators.bittable import BitTable, choose_layout
    from panstream.release.ledger import PrivacyLedger

    try:
        led = PrivacyLedger.from_dict(dict(ledger))
    except (PanstreamError, KeyError, TypeError, ValueError) as exc:
        raise _bad(f"the ledger cannot be read by this panstream ({exc})") from None
    tail = params.cells % 8
    if tail and table.size and int(table[-1]) >> tail:
        raise _bad("padding bits after the last cell are set (the format requires 0)")
    # Adopt the array instead of BitTable.from_packed(), which would copy up to 512 MiB once more.
    tab = BitTable._from_packed_array(params.cells, table, choose_layout(params.cells, layout))
    est = cls(params.universe, params.epsilon, params.calibration, led.budget, layout,
              _table=tab, _ledger=led)
    if est.p_numerator != params.p_numerator:  # pragma: no cover - parse_head checked this
        raise SnapshotMismatchError("calibration changed while restoring; start a new state")
    return est


def restore(cls: type[E], data: Buffer, *, expect: Mapping[str, Any] | None = None,
            layout: str = "auto") -> E:
    """Rebuild an estimator of class ``cls`` from snapshot bytes. See :func:`decode`."""
    snap = decode(data, expect=expect)
    table = np.array(snap.table, dtype=np.uint8)  # our own writable copy; ``data`` stays untouched
    return build(cls, snap.params, snap.ledger, table, layout)
