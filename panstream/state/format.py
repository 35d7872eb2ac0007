"""The binary snapshot format: a leaked snapshot reveals only the estimator's table.

A snapshot holds an estimator's public parameters, its release-stage privacy ledger and its packed
state (the *payload*: a bit table, or a table of modular counters), framed by a magic number, a
format version and a SHA-256 checksum. This module is pure and generic: bytes in, bytes out, no file
system (atomic files live in :mod:`panstream.state.files`) and no estimator class (each estimator
family turns its parameters into the ``params`` mapping and back, :mod:`panstream.estimators`).

Version 2 (written today; all integers little-endian; ``docs/snapshot-format.md`` byte by byte)::

    off  len  field
      0    8  magic  89 50 41 4E 53 54 52 0A  ("\\x89PANSTR\\n")
      8    2  format version (u16) = 2
     10    2  flags (u16) = 0, every bit reserved
     12    4  P = length of the parameters JSON (u32)
     16    4  L = length of the ledger JSON (u32)
     20    8  T = length of the payload (u64)
     28    P  parameters: canonical JSON object ({"kind": "density", "universe": ..., ...})
      .    L  ledger: canonical JSON (a ledger object, or ``null`` for a shard of a consumer group,
              whose budget lives in the group's ledger)
      .    T  payload (the packed table of the estimator kind named in the parameters)
      .   32  SHA-256 of every byte before it

Version 1 (read forever, never written) is the density table of the first release: a 52-byte
preamble with the parameters as binary fields; it decodes to the same ``params`` mapping with
``q = 1/2`` (see :func:`parse_head`).

**Contents rule.** Outside the payload, every byte is a function of the public parameters and the
ledger alone: no item, no count, no stream length, no time of writing, no seed or generator state
(there is none: every draw comes from the OS CSPRNG). Hence the snapshot's size and all its
non-payload bytes are identical for any two streams, and a snapshot is exactly as private as its
table: ``epsilon_state``-DP against one intrusion.

>>> params = {"kind": "density", "universe": "range:3", "cells": 3, "epsilon": 1.0}
>>> data = encode(params, {"budget": 1.0, "entries": []}, b"\\x05")
>>> snap = decode(data)
>>> snap.version, snap.kind, snap.params["universe"], bytes(snap.payload)
(2, 'density', 'range:3', b'\\x05')
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from panstream.errors import (  # the snapshot errors live with the others (issue 36)
    SNAPSHOT_FIX,
    CorruptSnapshotError,
    NotASnapshotError,
    PanstreamError,
    SnapshotMismatchError,
    SnapshotVersionError,
)
from panstream.estimators.bittable import packed_size
from panstream.universe import Universe

Buffer = bytes | bytearray | memoryview

#: First eight bytes of every snapshot. 0x89 catches 7-bit transfers, the final LF newline mangling.
MAGIC = b"\x89PANSTR\n"
#: The format version this module writes (and the newest it reads).
FORMAT_VERSION = 2
#: Version 2 preamble: magic, version, flags, P, L, T.
PREAMBLE = struct.Struct("<8sHHIIQ")
#: Version 1 preamble: magic, version, flags, p_bits, C, U, cells, p_numerator, epsilon, L, T.
PREAMBLE_V1 = struct.Struct("<8sHHBBHQQdIQ")
#: Bytes a reader needs to frame any version (the longest preamble).
PREFIX_SIZE = max(PREAMBLE.size, PREAMBLE_V1.size)
#: Length of the trailing SHA-256 checksum.
DIGEST_SIZE = 32
#: Estimator kinds this version knows (the ``kind`` parameter).
KINDS = ("density", "frequency", "sketch")
#: Keys accepted in ``expect=`` mappings (checked against the stored parameters).
EXPECT_KEYS = ("kind", "universe", "epsilon", "calibration", "modulus", "buckets", "levels",
               "items")

_FIX = SNAPSHOT_FIX
_V1_P_BITS = 32
_V1_CALIBRATIONS = ("tight", "paper")


# ---------------------------------------------------------------------- contents
@dataclass(frozen=True)
class Snapshot:
    """A decoded, verified snapshot.

    Attributes:
        version: the format version it was written in.
        params: the public parameters (``kind``, ``universe``, ``cells`` and the kind's own keys);
            a version-1 file is translated to the same keys (see :func:`parse_head`).
        ledger: the ledger as a plain dict, or ``None`` for a group shard (no budget of its own).
        payload: the packed state, a zero-copy view into the decoded buffer.
    """

    version: int
    params: dict[str, Any]
    ledger: dict[str, Any] | None
    payload: memoryview

    @property
    def kind(self) -> str:
        """The estimator family: ``"density"`` or ``"frequency"``."""
        return str(self.params["kind"])


@dataclass(frozen=True)
class Frame:
    """Lengths read from a preamble: where each section starts and how long the snapshot is."""

    version: int
    flags: int
    head_size: int
    payload_size: int

    @property
    def total(self) -> int:
        """Total length of the snapshot in bytes."""
        return self.head_size + self.payload_size + DIGEST_SIZE


def canonical_json(obj: Any) -> bytes:
    """``obj`` as canonical JSON: sorted keys, no whitespace, ASCII only, no NaN or infinity."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode("ascii")


# ---------------------------------------------------------------------- encoding
def encode_head(params: Mapping[str, Any], ledger: Mapping[str, Any] | None,
                payload_size: int) -> bytes:
    """Every byte before the payload: preamble, parameters JSON, ledger JSON.

    Raises:
        ValueError: a section does not fit its length field.
    """
    par = canonical_json(dict(params))
    led = canonical_json(None if ledger is None else dict(ledger))
    if len(par) > 0xFFFFFFFF or len(led) > 0xFFFFFFFF:
        msg = "snapshot parameters or ledger longer than 4 GiB"
        raise ValueError(msg)
    return PREAMBLE.pack(MAGIC, FORMAT_VERSION, 0, len(par), len(led), payload_size) + par + led


def encode_parts(params: Mapping[str, Any], ledger: Mapping[str, Any] | None, payload: Buffer
                 ) -> tuple[bytes, memoryview, bytes]:
    """The snapshot as three pieces ``(head, payload, checksum)`` whose concatenation is the
    snapshot. Writing the pieces one after another (as :func:`panstream.state.files.atomic_write`
    does) avoids copying a large table into one buffer."""
    pay = memoryview(payload).cast("B")
    head = encode_head(params, ledger, len(pay))
    h = hashlib.sha256(head)
    h.update(pay)
    return head, pay, h.digest()


def encode(params: Mapping[str, Any], ledger: Mapping[str, Any] | None, payload: Buffer) -> bytes:
    """The snapshot as one ``bytes`` object. See :func:`encode_parts`."""
    return b"".join(encode_parts(params, ledger, payload))


# ---------------------------------------------------------------------- decoding
def read_frame(prefix: Buffer) -> Frame:
    """Check the magic and version in the first bytes of a snapshot and compute its layout.

    Args:
        prefix: at least the first :data:`PREFIX_SIZE` (52) bytes, or the whole data if shorter.

    Raises:
        NotASnapshotError: wrong magic.
        CorruptSnapshotError: shorter than the preamble of its version.
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
    version = struct.unpack_from("<H", mv, 8)[0] if len(mv) >= 10 else None
    pre = PREAMBLE_V1 if version == 1 else PREAMBLE
    if version is None or len(mv) < pre.size:
        msg = (f"snapshot is truncated: only {len(mv)} bytes, shorter than its {pre.size}-byte "
               f"preamble (interrupted copy or full disk?); {_FIX}")
        raise CorruptSnapshotError(msg)
    if version > FORMAT_VERSION:
        msg = (f"snapshot format version {version} is newer than this panstream reads (up to "
               f"{FORMAT_VERSION}): upgrade panstream to resume it (or the file is damaged)")
        raise SnapshotVersionError(msg)
    if version < 1:
        msg = f"snapshot format version {version} does not exist: the file is damaged; {_FIX}"
        raise CorruptSnapshotError(msg)
    if version == 1:
        (_, _, flags, _, clen, ulen, _, _, _, llen, tlen) = PREAMBLE_V1.unpack_from(mv)
        return Frame(1, flags, PREAMBLE_V1.size + clen + ulen + llen, tlen)
    (_, _, flags, plen, llen, tlen) = PREAMBLE.unpack_from(mv)
    return Frame(version, flags, PREAMBLE.size + plen + llen, tlen)


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


def parse_head(frame: Frame, head: Buffer) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Decode the parameters and ledger of a checksum-verified head (everything before the payload)
    and check the fields every kind shares: a known kind, a canonical universe spec whose size is
    ``cells``. Each estimator family checks its own keys when it is built.

    A version-1 head becomes ``{"kind": "density", "universe", "cells", "epsilon",
    "calibration", "p_bits": 32, "p_numerator", "q_numerator": 2**31}``: its D0 was a fair coin.

    Raises:
        SnapshotVersionError: unknown flags, or a kind this version does not know.
        CorruptSnapshotError: a field is invalid although the checksum matched.
    """
    mv = memoryview(head).cast("B")
    if frame.flags:
        msg = (f"snapshot uses features (flags 0x{frame.flags:04x}) this panstream does not know: "
               "upgrade panstream to resume it")
        raise SnapshotVersionError(msg)
    if frame.version == 1:
        params, ledger = _parse_head_v1(mv)
    else:
        (_, _, _, plen, llen, _) = PREAMBLE.unpack_from(mv)
        off = PREAMBLE.size
        params = _json(mv[off : off + plen], "parameters")
        ledger = _json(mv[off + plen : off + plen + llen], "ledger")
        if not isinstance(params, dict):
            raise _bad("the parameters are not a JSON object")
    if ledger is not None and not isinstance(ledger, dict):
        raise _bad("the ledger is neither a JSON object nor null")
    kind = params.get("kind")
    if kind not in KINDS:
        msg = (f"snapshot holds an estimator of kind {kind!r}, which this panstream does not know "
               f"(it knows {', '.join(KINDS)}): upgrade panstream to read it")
        raise SnapshotVersionError(msg)
    spec, cells = params.get("universe"), params.get("cells")
    if not isinstance(spec, str) or isinstance(cells, bool) or not isinstance(cells, int):
        raise _bad("the parameters lack a universe spec or a cell count")
    universe: Universe
    try:
        if kind == "sketch":  # a Sketch-Flip-Merge grid: its cells are hash buckets x levels
            from panstream.estimators.sketch.sfm import SketchGrid

            universe = SketchGrid.parse_spec(spec)
        else:
            universe = Universe.parse(spec)
    except PanstreamError as exc:
        raise _bad(f"invalid universe spec {spec!r}: {exc}") from None
    if universe.spec != spec or universe.size != cells:
        raise _bad(f"universe {spec!r} and {cells} cells do not agree")
    eps = params.get("epsilon")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not (math.isfinite(eps)
                                                                           and eps > 0):
        raise _bad(f"epsilon {eps!r} out of range")
    return params, ledger


def _parse_head_v1(mv: memoryview) -> tuple[dict[str, Any], Any]:
    (_, _, _, p_bits, clen, ulen, cells, num, eps, llen, tlen) = PREAMBLE_V1.unpack_from(mv)
    off = PREAMBLE_V1.size
    try:
        cal = bytes(mv[off : off + clen]).decode("ascii")
        spec = bytes(mv[off + clen : off + clen + ulen]).decode("ascii")
    except UnicodeDecodeError as exc:
        raise _bad(f"unreadable text field ({exc})") from None
    ledger = _json(mv[off + clen + ulen : off + clen + ulen + llen], "ledger")
    if ledger is None:
        raise _bad("a version-1 snapshot always holds a ledger")
    if p_bits != _V1_P_BITS:
        raise _bad(f"p has {p_bits} bits of precision, version 1 uses {_V1_P_BITS}")
    if cal not in _V1_CALIBRATIONS:
        raise _bad(f"unknown calibration {cal!r} (version 1 knows {', '.join(_V1_CALIBRATIONS)})")
    if tlen != packed_size(cells):
        raise _bad(f"a {tlen}-byte table cannot hold {cells} cells")
    params = {"kind": "density", "universe": spec, "cells": cells, "epsilon": eps,
              "calibration": cal, "p_bits": p_bits, "p_numerator": num,
              "q_numerator": 1 << (p_bits - 1)}
    return params, ledger


def _json(raw: memoryview, what: str) -> Any:
    try:
        return json.loads(bytes(raw).decode("ascii"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _bad(f"unreadable {what} ({exc})") from None


def decode(data: Buffer, *, expect: Mapping[str, Any] | None = None) -> Snapshot:
    """Verify and decode a snapshot. Nothing is returned unless every check passes.

    Args:
        data: the snapshot bytes.
        expect: optional parameters the caller resumes with (see :func:`check_expect`).

    Returns:
        The decoded :class:`Snapshot`; its ``payload`` is a view into ``data``.

    Raises:
        NotASnapshotError, SnapshotVersionError, CorruptSnapshotError, SnapshotMismatchError: see
            the classes; each message says what to do.
    """
    mv = memoryview(data).cast("B")
    frame = read_frame(mv[:PREFIX_SIZE])
    check_length(frame, len(mv))
    end = frame.head_size + frame.payload_size
    check_digest(mv[end:], hashlib.sha256(mv[:end]).digest())
    params, ledger = parse_head(frame, mv[: frame.head_size])
    check_expect(params, expect)
    return Snapshot(frame.version, params, ledger, mv[frame.head_size : end])


def check_expect(params: Mapping[str, Any], expect: Mapping[str, Any] | None) -> None:
    """Raise :class:`SnapshotMismatchError` if ``expect`` contradicts the stored parameters.

    Args:
        params: the stored parameters.
        expect: any subset of ``{"kind", "universe" (a Universe or spec), "epsilon",
            "calibration", "modulus"}``; keys whose value is ``None`` are not checked.

    Raises:
        ValueError: an unknown key.
        SnapshotMismatchError: a parameter differs; the message names the stored value to resume
            with.
    """
    if not expect:
        return
    unknown = set(expect) - set(EXPECT_KEYS)
    if unknown:
        msg = f"unknown expect= keys {sorted(unknown)}: use {', '.join(EXPECT_KEYS)}"
        raise ValueError(msg)
    new = "or move the state file aside to start a new state with the new parameters"
    kind = params["kind"]
    k = expect.get("kind")
    if k is not None and k != kind:
        msg = (f"the state holds a {kind} estimator, not a {k} one: resume it with --estimator "
               f"{kind}, {new}")
        raise SnapshotMismatchError(msg)
    u = expect.get("universe")
    if u is not None:
        spec = u.spec if isinstance(u, Universe) else Universe.parse(str(u)).spec
        if spec != params["universe"]:
            msg = (f"the state was written for universe {params['universe']} but {spec} was asked "
                   f"for: resume with --universe {params['universe']}, {new} (a table cannot be "
                   "resized)")
            raise SnapshotMismatchError(msg)
    e = expect.get("epsilon")
    if e is not None and float(e) != params["epsilon"]:
        msg = (f"the state was written with epsilon {params['epsilon']!r} but {float(e)!r} was "
               f"asked for: resume with --epsilon {params['epsilon']!r}, {new} (its cells were "
               "drawn with the old probabilities)")
        raise SnapshotMismatchError(msg)
    for key, flag in (("calibration", "--calibration"), ("modulus", "--modulus"),
                      ("buckets", "--buckets"), ("levels", "--levels"), ("items", "--items")):
        want = expect.get(key)
        if want is not None and key in params and want != params[key]:
            msg = (f"the state was written with {key} {params[key]!r} but {want!r} was asked "
                   f"for: resume with {flag} {params[key]}, {new}")
            raise SnapshotMismatchError(msg)


def bad_params(what: str) -> CorruptSnapshotError:
    """The error for a checksum-valid snapshot whose parameters make no sense (for the estimator
    families, which check their own keys)."""
    return _bad(what)


_bad = CorruptSnapshotError.of_params
