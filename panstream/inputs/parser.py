"""Strict, vectorized parsers of log lines held in byte buffers.

The command line reads logs in chunks of about 2 MiB that end on a line boundary
(:mod:`panstream.sources`) and hands each chunk to a :class:`LineParser`, which returns the cell indices
of the accepted items and the counts of the rejected lines. Nothing here keeps a line, an item or a
count beyond the call; the working arrays that hold addresses are overwritten with zeros before
returning.

Formats (``--format``): :mod:`panstream.inputs.formats`; ``-f auto``:
:mod:`panstream.inputs.detection`; where each format's client sits:
:mod:`panstream.inputs.extractors`; the vectorized IPv4 core: :mod:`panstream.inputs.ipv4`.

Address spellings (``a.b.c.d:port``, ``[v6]:port``, zone ids, ``::ffff:a.b.c.d`` in ``ipv4``
universes) are reduced to the address in every format (:mod:`panstream.inputs.normalize`); the
vectorized paths read them themselves (IPv6: :mod:`panstream.inputs.ipv6`, issue 38).

Strictness: an IPv4 address is accepted exactly when :class:`ipaddress.IPv4Address` accepts it: four
decimal octets 0..255 of one to three ASCII digits, no leading zeros, nothing else (``inet_aton``'s
``1``, ``0x7f.1`` and octal ``010.1.1.1`` are rejected). In an ``ipv4`` universe a well-formed IPv6
address is counted as *outside* (a dual-stack log), anything else unparsable as *malformed*. Empty
(or all-blank) lines are counted separately (*empty*, in every format). Of a line longer than
:data:`MAX_LINE` bytes only the head is read: in ``clf`` and ``field:N`` its item is taken if the
field ends (is followed by whitespace) within the first ``MAX_LINE + 1`` bytes, so a request with a
long URL or user agent keeps its client; in ``plain`` (the item is the whole line) it is malformed.

Fast path (``ipv4`` universes, ``plain`` and ``clf``; the other formats locate their token with
:mod:`panstream.inputs.extractors`, then validate it the same way): no Python work per line
(:mod:`panstream.inputs.ipv4`). Other universes (``ipv6``, ``range``, ``hashed``) split lines in
Python and map tokens with :meth:`Universe.indices`.

The names of the formats, detection and core modules are re-exported here (``from
panstream.inputs.parser import Format, detect, parse_ipv4`` keeps working).

>>> from panstream.universe import Universe
>>> p = LineParser(Universe.ipv4("10.0.0.0/8"), "plain")
>>> r = p.parse(b"10.0.0.1\\n10.0.0.01\\n\\n192.168.0.1\\n 10.0.0.2 \\r\\n")
>>> r.indices.tolist(), r.lines, r.malformed, r.empty, r.outside
([1, 2], 5, 1, 1, 1)
"""


from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from panstream.errors import ConfigurationError
from panstream.inputs import extractors as extract
from panstream.inputs.detection import (
    ADDRESS_COLUMNS,
    JSON_PATHS,
    Detection,
    detect,
    detect_format,
)
from panstream.inputs.formats import (
    ALIASES,
    ARG_FORMATS,
    FIELD_OF,
    FORMAT_HELP,
    FORMATS,
    NO_FORMAT,
    SPARSE_KINDS,
    Format,
    extractor_of,
    format_name,
    parse_format,
)
from panstream.inputs.ipv4 import (
    MAX_LINE,
    V6Keys,
    _drop_cr,
    _line_bounds,
    format_ipv4_lines,
    ipv4_from_windows,
    parse_ipv4,
    place_address,
)
from panstream.inputs.ipv6 import address_lines, address_spans
from panstream.universe import Universe
from panstream.universe.addresses import AddressKeys

__all__ = ["ADDRESS_COLUMNS", "ALIASES", "ARG_FORMATS", "FIELD_OF", "FORMATS", "FORMAT_HELP",
           "JSON_PATHS", "MAX_LINE", "NO_FORMAT", "SPARSE_KINDS", "Detection", "Format",
           "LineParser", "ParseResult", "detect", "detect_format", "format_ipv4_lines",
           "format_name", "ipv4_from_windows", "parse_format", "parse_ipv4", "tune_allocator"]


@dataclass(frozen=True)
class ParseResult:
    """What one chunk contained. Operational counts only: never stored in a state.

    Attributes:
        indices: ``intp`` cell indices of the accepted items, in input order.
        lines: lines seen (including empty and rejected ones).
        empty: empty or all-blank lines.
        headers: header and comment lines of the header formats (W3C and Zeek ``#`` lines, a
            CSV/TSV header): no record, not malformed (issue 37: they were counted as empty).
        malformed: lines whose item could not be parsed (binary junk, bad syntax, an over-long
            ``plain`` line, a field that does not end within the first ``MAX_LINE + 1`` bytes).
        outside: well-formed items outside the universe.
    """

    indices: np.ndarray
    lines: int
    empty: int = 0
    malformed: int = 0
    outside: int = 0
    headers: int = 0

    @property
    def accepted(self) -> int:
        """Items mapped to a cell."""
        return int(self.indices.size)


def tune_allocator() -> None:
    """Ask glibc to keep freed large blocks in the heap (a process-wide setting; Linux only).

    Every chunk allocates a few multi-MiB temporaries. By default glibc returns each one to the
    kernel on free and the next chunk page-faults it back in, which costs about a third of the parse
    time. The command line calls this once; library users may too. A no-op where unsupported.
    """
    import contextlib
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 256 << 20)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 512 << 20)  # M_TRIM_THRESHOLD


# ---------------------------------------------------------------------------------------- parser


class LineParser:
    """Turn chunks of log lines into cell indices of a universe.

    Args:
        universe: the universe the indices refer to.
        fmt: a format (a ``-f`` string or :class:`Format`; see :func:`parse_format`); resolve
            ``auto`` first with :func:`detect_format`.
        max_line: of longer lines (bytes, without the newline) only the head is read (see the
            module docstring).

    A parser keeps the header of the header formats (csv, tsv, w3c, zeek) from one chunk to the
    next: use one parser per input stream.

    Raises:
        ConfigurationError: unknown format, or ``auto`` not resolved.

    Example:
        >>> p = LineParser(Universe.parse("ipv4:192.168.0.0/16"), "clf")
        >>> p.parse(b'192.168.1.2 - - [01/Jan/2024:00:00:00 +0000] "GET /" 200 1\\n').indices.tolist()
        [258]
        >>> p = LineParser(Universe.parse("ipv4:10.0.0.0/8"), "json:request.remote_ip")
        >>> p.parse(b'{"request": {"remote_ip": "10.0.0.7", "remote_port": "5123"}}\\n').indices.tolist()
        [7]
    """

    def __init__(self, universe: Universe, fmt: str | Format = "plain", max_line: int = MAX_LINE
                 ) -> None:
        self.universe = universe
        self.format = fmt if isinstance(fmt, Format) else parse_format(fmt)
        if self.format.kind == "auto":
            msg = "resolve the 'auto' format with detect_format() before building a LineParser"
            raise ConfigurationError(msg)
        self.max_line = int(max_line)
        # Address universes (ipv4, ipv6, hashed-ip, a sketch's :ip grid): the vectorized path
        # reads the dotted quads, the one normalization (panstream.inputs.normalize) every other
        # token.
        self._fast = universe.reads_addresses
        self._text_only = bool(getattr(universe, "hashes_address_text", False))
        # The formats without an extractor (plain, clf) are read by the line readers below.
        self._extractor = extractor_of(self.format, self.max_line)

    def parse(self, data: bytes | bytearray | memoryview) -> ParseResult:
        """Parse a buffer of complete lines; see the module docstring for what is accepted."""
        if self._extractor is not None:
            return self._parse_spans(data)
        if self._fast:
            addr, ok, lines, empty, malformed, v6 = address_lines(data, self.format.kind,
                                                                  self.max_line, self._text_only)
            return self._to_cells(addr, ok, v6, lines, empty, malformed)
        tokens, lines, empty, malformed = self._tokens(data)
        res = self.universe.indices(tokens)
        tokens.clear()
        return ParseResult(res.indices, lines, empty + res.empty, malformed + res.malformed,
                           res.outside)

    def _parse_spans(self, data: bytes | bytearray | memoryview) -> ParseResult:
        assert self._extractor is not None
        b = data if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)
        starts, ends = _line_bounds(b)
        n = int(starts.size)
        if n == 0:
            return ParseResult(np.zeros(0, dtype=np.intp), 0)
        ends = _drop_cr(b, starts, ends)
        sp = self._extractor.locate(b, starts, ends)
        empty = int((sp.state == extract.EMPTY).sum())
        headers = int((sp.state == extract.HEADER).sum())
        bad_rows = np.flatnonzero(sp.state == extract.BAD)
        malformed = 0
        for i in bad_rows.tolist():  # rare: blank lines the extractor left, and junk
            s, e = int(starts[i]), int(ends[i])
            if e - s <= self.max_line and not bytes(b[s:e]).strip():
                empty += 1
            else:
                malformed += 1
        if not self._fast:
            tokens = []
            span = sp.state == extract.SPAN
            for i in np.flatnonzero(span | (sp.state == extract.PY)).tolist():
                tokens.append(bytes(b[sp.ts[i]:sp.te[i]]) if span[i] else sp.py[i])
            sp.py.clear()
            res = self.universe.indices(tokens)
            tokens.clear()
            return ParseResult(res.indices, n, empty + res.empty, malformed + res.malformed,
                               res.outside, headers)
        rows = np.flatnonzero(sp.state == extract.SPAN)
        ts, te = sp.ts[rows], sp.te[rows]
        v6 = V6Keys()
        addr, ok, done = address_spans(b, ts, te, v6, self._text_only)
        lineaddr = np.zeros(n, dtype=np.uint32)
        acc = np.zeros(n, dtype=bool)
        lineaddr[rows] = addr
        acc[rows] = ok
        addr.fill(0)
        second = [(int(i), bytes(b[int(s):int(e)])) for i, s, e in
                  zip(rows[~done].tolist(), ts[~done].tolist(), te[~done].tolist(), strict=True)]
        py = [(i, t) for i, t in sp.py.items() if t is not None]
        sp.py.clear()
        if py:  # tokens taken in Python: validated vectorized too, one per line of a buffer
            buf = bytearray(b"\n".join(t.replace(b"\n", b"\x00") for _, t in py) + b"\n")
            arr = np.frombuffer(buf, dtype=np.uint8)
            s2, e2 = _line_bounds(arr)
            a2, ok2, done2 = address_spans(arr, s2, e2, v6, self._text_only)
            idx = np.array([i for i, _ in py], dtype=np.intp)
            lineaddr[idx[ok2]] = a2[ok2]
            acc[idx[ok2]] = True
            second += [py[j] for j in np.flatnonzero(~done2).tolist()]
            a2.fill(0)
            del arr
            buf[:] = bytes(len(buf))
            py.clear()
        for i, token in second:  # the one normalization: ports, brackets, zone ids, IPv6
            if not token.strip():
                empty += 1
                continue
            malformed += not place_address(token, i, lineaddr, acc, v6)
        second.clear()
        return self._to_cells(lineaddr, acc, v6, n, empty, malformed, headers)

    def _to_cells(self, addr: np.ndarray, ok: np.ndarray, v6: V6Keys, lines: int, empty: int,
                  malformed: int, headers: int = 0) -> ParseResult:
        """Cells of the canonical items (the IPv4 clients of the lines where ``ok``, the IPv6
        keys ``v6``) in the universe: :meth:`Universe.address_cells`. Wipes the addresses."""
        v4 = addr if bool(ok.all()) else addr[ok]
        if v4 is not addr:
            addr.fill(0)
        hi, lo, text = v6.take()
        keys = AddressKeys(v4, hi, lo, v6_text=text)
        res = self.universe.address_cells(keys)  # wipes the keys
        return ParseResult(res.indices, lines, empty, malformed, res.outside, headers)

    def _tokens(self, data: bytes | bytearray | memoryview) -> tuple[list[bytes], int, int, int]:
        raw = bytes(data)
        lines = raw.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        tokens: list[bytes] = []
        empty = malformed = 0
        kind, field = self.format.kind, self.format.field
        for line in lines:
            over = len(line) > self.max_line
            if over:
                if kind == "plain":
                    malformed += 1  # the item is the whole line, and it does not fit
                    continue
                line = line[: self.max_line + 1]  # only the head; the field must end within it
            elif not line.strip():
                empty += 1
                continue
            if kind == "clf":
                if not over:
                    line = line.rstrip(b"\r")
                parts = line.split(b" ", 1)
                if over and len(parts) < 2:
                    malformed += 1
                else:
                    tokens.append(parts[0])
                continue
            if kind == "plain":
                fields = line.split()
                if len(fields) == 1:
                    tokens.append(fields[0])
                else:
                    malformed += 1
                continue
            fields = line.split(None, field)
            complete = len(fields) > field or (len(fields) == field and not over)
            if over and len(fields) == field and line[-1:].isspace():
                complete = True  # the head ends with the whitespace after field N
            if complete:
                tokens.append(fields[field - 1])
            else:
                malformed += 1
        n = len(lines)
        lines.clear()
        return tokens, n, empty, malformed
