"""Decode a batch of message values into cell indices (``item`` or ``lines`` format)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from panstream.errors import ConfigurationError
from panstream.estimators.base import wipe_buffer
from panstream.inputs.parser import Detection, Format, LineParser, detect, parse_format
from panstream.sources.files import CHUNK_SIZE
from panstream.universe import Universe

VALUE_FORMATS = ("item", "lines")

#: The lines format parses about this many bytes at a time: what ``ingest`` reads and parses at
#: a time (:data:`panstream.sources.files.CHUNK_SIZE`, 2 MiB). The parser pays about 0.2 ms a
#: call whatever its size, so smaller chunks cost more a line (1 MiB: +10-15 ns a line on the
#: group bench's CLF lines, issue 38), and one big buffer per poll leaves the cache.
_LINES_CHUNK = CHUNK_SIZE

@dataclass
class Decoded:
    """Cell indices of a batch and its operational counts (never stored)."""

    indices: np.ndarray
    malformed: int = 0
    outside: int = 0


class Decoder:
    """Turn a batch of message values into cell indices (``item`` or ``lines`` format).

    ``item``: each message value is one item (text of an address, an integer, an identifier); a
    value that cannot be parsed (or a null or blank value) is one malformed message. For IPv4 universes the
    batch is joined with newlines and parsed by the vectorized :class:`~panstream.inputs.parser.LineParser`.

    ``lines``: each value holds newline-separated items (as log shippers batch them); every
    malformed line is counted. Empty lines are ignored.

    ``fmt`` is the line format of ``panstream ingest -f`` (:func:`panstream.inputs.parser.parse_format`):
    ``plain`` (the item is the whole line or value), ``clf`` (whole access-log lines), ``field:N``,
    ``json:PATH``, ``csv:COLUMN``, ``w3c:FIELD``, ``zeek:FIELD``, ``alb``, ``elb``, ``sshd``, ... or
    ``auto``: decided **once**, from the first non-empty values decoded (at most 64 lines,
    :func:`~panstream.inputs.parser.detect`, as ``ingest`` does per input), then kept for the life of the
    decoder (a topic is one format); :attr:`detection` says what was chosen. In the ``item``
    format each value is one such line.

    Header formats (``csv``/``tsv`` by column name, ``w3c``, ``zeek``): the parser is stateful and
    keeps the header from one batch to the next, so the header must come before the data lines it
    names, in the first values this decoder reads (a fresh group reading the topic from its
    start). A decoder that starts after the header (a restarted member whose committed offsets
    are past it, or a member whose partitions never carry it) finds no header: its lines are
    malformed, and the routing stage's first-sample check fails loudly. Name the column by number
    (``csv:N``, ``w3c:N``, ``zeek:N``): that needs no header.

    The joined buffer is overwritten with zeros after parsing.
    """

    def __init__(self, universe: Universe, value_format: str = "item",
                 fmt: str | Format = "plain") -> None:
        if value_format not in VALUE_FORMATS:
            msg = f"unknown value format {value_format!r}: use {' or '.join(VALUE_FORMATS)}"
            raise ConfigurationError(msg)
        self.universe = universe
        self.value_format = value_format
        self.format = fmt if isinstance(fmt, Format) else parse_format(fmt)
        self._parser: LineParser | None = None
        #: The buffer the ``lines`` format joins a chunk of values into, reused from chunk to
        #: chunk (a fresh one per chunk was page-faulted in each time): each chunk overwrites the
        #: one before, and the batch's last is zeroed before the batch's cells are returned.
        self._joined = bytearray()
        self._used = 0  # its bytes holding values (zero beyond)
        #: What ``auto`` chose (``None`` until decided, or if a format was given).
        self.detection: Detection | None = None
        if self.format.kind != "auto":
            self._parser = LineParser(universe, self.format)

    @property
    def parser(self) -> LineParser:
        assert self._parser is not None, "resolve the format first"
        return self._parser

    def _resolve(self, values: list[bytes | None]) -> None:
        """``auto``: pick the format from the first values (at most 64 lines are looked at);
        :func:`~panstream.inputs.parser.detect` gives the full ``-f`` spelling (``json:PATH``,
        ``csv:COLUMN``, ...), parsed as ``-f`` would be."""
        head = bytearray()
        for v in values:
            if v:
                head += v if v.endswith(b"\n") else v + b"\n"
                if len(head) >= 1 << 16:
                    break
        if not head:
            return
        try:
            det = detect(memoryview(head))
        finally:
            wipe_buffer(head)
        self.detection = det
        self.format = parse_format(det.spec)  # "none" too (no known format): parses nothing
        self._parser = LineParser(self.universe, self.format)

    def __call__(self, values: list[bytes | None]) -> Decoded:
        if self._parser is None:
            self._resolve(values)
            if self._parser is None:  # nothing but null or empty values so far
                return Decoded(np.empty(0, np.intp), sum(v is None or not v.strip() for v in values))
        if self.value_format == "item":
            return self._items(values)
        return self._lines(values)

    def _items(self, values: list[bytes | None]) -> Decoded:
        plain = self.format.kind == "plain"
        if (self.universe.kind == "ipv4" or not plain) and None not in values:
            # bytearray.join builds the mutable buffer directly (no immutable copy of the items
            # left behind); the trailing b"" gives the final newline without a reallocation.
            buf = bytearray(b"\n").join([*values, b""])  # type: ignore[list-item]
            try:
                if buf.count(b"\n") == len(values):  # no value holds a newline of its own
                    r = self.parser.parse(buf)
                    return Decoded(r.indices, r.malformed + r.empty + r.headers, r.outside)
            finally:
                wipe_buffer(buf)
        if not plain:  # a value with newlines (or a null) is malformed: one value, one line
            ok: list[bytes | None] = [v for v in values
                                      if v is not None and b"\n" not in v.rstrip(b"\r\n")]
            if len(ok) < len(values):
                d = self._items(ok) if ok else Decoded(np.empty(0, np.intp))
                return Decoded(d.indices, d.malformed + len(values) - len(ok), d.outside)
            buf = bytearray(b"\n").join([v.rstrip(b"\r\n") for v in ok if v is not None] + [b""])
            try:
                r = self.parser.parse(buf)
                return Decoded(r.indices, r.malformed + r.empty + r.headers, r.outside)
            finally:
                wipe_buffer(buf)
        res = self.universe.indices(values)
        return Decoded(res.indices, res.malformed + res.empty, res.outside)

    def _lines(self, values: list[bytes | None]) -> Decoded:
        nulls = sum(v is None for v in values)
        parts = [v for v in values if v] if nulls else values
        out: list[np.ndarray] = []
        malformed, outside = nulls, 0
        start = size = 0
        try:
            for i, v in enumerate(parts):
                size += len(v) + 1  # type: ignore[arg-type]
                if size >= _LINES_CHUNK or i == len(parts) - 1:
                    r = self._parse_joined(parts[start:i + 1])  # type: ignore[arg-type]
                    out.append(r.indices)
                    malformed += r.malformed
                    outside += r.outside
                    start, size = i + 1, 0
        finally:  # the last chunk's bytes (each chunk overwrote the one before)
            np.frombuffer(self._joined, np.uint8, self._used).fill(0)
            self._used = 0
        idx = np.concatenate(out) if len(out) > 1 else (out[0] if out else np.empty(0, np.intp))
        for a in out:
            if a is not idx:
                a.fill(0)
        return Decoded(idx, malformed, outside)

    def _parse_joined(self, parts: list[bytes]) -> Any:
        """Parse ``parts`` joined by newlines, in :attr:`_joined` (the caller zeroes it)."""
        n = sum(map(len, parts)) + len(parts)
        if n > 4 * _LINES_CHUNK:  # one huge value: a buffer of its own, not kept
            buf = bytearray(b"\n").join([*parts, b""])  # mutable from the start, wiped below
            try:
                return self.parser.parse(buf)
            finally:
                wipe_buffer(buf)
        if len(self._joined) < n:  # a new one (a view of the old may live on in NumPy)
            np.frombuffer(self._joined, np.uint8, self._used).fill(0)
            self._joined, self._used = bytearray(max(n, _LINES_CHUNK + (_LINES_CHUNK >> 2))), 0
        mv = memoryview(self._joined)
        if self._used > n:  # what this chunk does not overwrite of the one before
            np.frombuffer(mv, np.uint8, self._used - n, n).fill(0)
        self._used = n
        at = 0
        for p in parts:
            end = at + len(p)
            mv[at:end] = p
            mv[end] = 10  # the newline after each value
            at = end + 1
        return self.parser.parse(mv[:n])

