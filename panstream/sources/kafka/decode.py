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
#: The same, for the routing stage's pieces of a poll (:meth:`Decoder.feed`).
CHUNK_BYTES = _LINES_CHUNK

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
        self._view = memoryview(self._joined)
        self._used = 0  # its bytes holding the chunk being filled
        self._kept = 0  # its bytes holding values of a parsed chunk (zero beyond)
        #: What :meth:`feed` decoded since the last :meth:`flush` (cells and counts only).
        self._out: list[np.ndarray] = []
        self._malformed = self._outside = 0
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

    # ------------------------------------------------------------- a poll in pieces
    def feed(self, values: list[bytes | None]) -> None:
        """Decode one piece of a poll: its cells are kept (never its values) until :meth:`flush`.

        A poll read in pieces of about one parser chunk (the routing stage's, issue 38) copies
        each piece's values into the parser's buffer while they are still in the cache:
        ``feed(a); feed(b); flush()`` gives the cells ``self(a + b)`` gives, in the same 2 MiB
        parser chunks for the ``lines`` format (a chunk may span two pieces), and the values of a
        piece may be dropped as soon as ``feed`` returns."""
        if self._parser is not None and self.value_format == "lines":
            self._feed_lines(values)
        else:  # one decode per piece (items; a format not yet resolved)
            d = self(values)
            self._out.append(d.indices)
            self._malformed += d.malformed
            self._outside += d.outside

    def flush(self) -> Decoded:
        """The cells of everything fed since the last flush; no line is left in the buffer."""
        try:
            if self._used:
                self._parse_buffer()
        finally:  # the last chunk's bytes (each chunk overwrote the one before)
            np.frombuffer(self._joined, np.uint8, self._kept).fill(0)
            self._kept = self._used = 0
        out, self._out = self._out, []
        idx = np.concatenate(out) if len(out) > 1 else (out[0] if out else np.empty(0, np.intp))
        for a in out:
            if a is not idx:
                a.fill(0)
        d = Decoded(idx, self._malformed, self._outside)
        self._malformed = self._outside = 0
        return d

    def _lines(self, values: list[bytes | None]) -> Decoded:
        self._feed_lines(values)
        return self.flush()

    def _feed_lines(self, values: list[bytes | None]) -> None:
        """Copy each value and its newline into :attr:`_joined`; parse whenever it holds a chunk
        (:data:`_LINES_CHUNK` or more)."""
        try:
            for v in values:
                if not v:
                    self._malformed += v is None  # a null value; an empty one is no line
                    continue
                n = len(v) + 1
                if self._used + n > len(self._joined):
                    if self._used:  # the chunk so far first: the buffer is not grown for it
                        self._parse_buffer()
                    if n > 4 * _LINES_CHUNK:  # one huge value: a buffer of its own, not kept
                        self._parse_huge(v)
                        continue
                    if n > len(self._joined):  # a new one (a view of the old may live on)
                        np.frombuffer(self._joined, np.uint8, self._kept).fill(0)
                        self._joined = bytearray(max(n, _LINES_CHUNK + (_LINES_CHUNK >> 2)))
                        self._view, self._kept = memoryview(self._joined), 0
                at = self._used
                self._view[at:at + n - 1] = v
                self._view[at + n - 1] = 10  # the newline after each value
                self._used = at + n
                if self._used >= _LINES_CHUNK:
                    self._parse_buffer()
        except BaseException:
            self.discard()  # nothing fed is left in the buffer
            raise

    def _parse_buffer(self) -> None:
        """Parse the chunk in :attr:`_joined`; the next chunk overwrites it (what it does not
        overwrite is zeroed here: :attr:`_kept` is the most the buffer holds)."""
        n, self._used = self._used, 0
        if self._kept > n:
            np.frombuffer(self._joined, np.uint8, self._kept - n, n).fill(0)
        self._kept = n
        self._take(self.parser.parse(self._view[:n]))

    def _parse_huge(self, value: bytes) -> None:
        buf = bytearray(value)  # mutable from the start, wiped below
        buf += b"\n"
        try:
            self._take(self.parser.parse(buf))
        finally:
            wipe_buffer(buf)

    def discard(self) -> None:
        """Forget what was fed since the last flush (on an error): buffer and cells zeroed."""
        np.frombuffer(self._joined, np.uint8, max(self._kept, self._used)).fill(0)
        self._kept = self._used = self._malformed = self._outside = 0
        for a in self._out:
            a.fill(0)
        self._out.clear()

    def _take(self, r: Any) -> None:
        self._out.append(r.indices)
        self._malformed += r.malformed
        self._outside += r.outside
