"""Extractors: where the client address of each line sits, for each log format.

An extractor gets one chunk of complete lines (a ``uint8`` array, the line starts and the line ends
without newline and trailing CR) and returns :class:`Spans`: per line, either the byte span of the
address token (found with vectorized NumPy over the whole chunk, no Python per line), or a token
taken in Python (the format's rare or irregular lines), or "no item" (blank, header and comment
lines) or "malformed". :class:`panstream.inputs.parser.LineParser` then validates the tokens (for ``ipv4``
universes with the vectorized address parser, ``:port`` included) and maps them to cells.

The kinds of extractor, each format's module (:mod:`panstream.inputs.formats`) naming the one it
uses and its argument:

:class:`WhitespaceField`
    The N-th whitespace-separated field (the port of ``client:port`` is dropped). Vectorized over
    the single spaces of the published shapes; a line with tabs or runs of blanks before its field
    is split in Python like awk.
:class:`Columns`
    A column by header name or 1-based number: CSV/TSV (the header is the first line; a later line
    that names the column again is a new header; quoted lines go through Python's :mod:`csv`),
    W3C's ``#Fields:`` and Zeek's ``#separator``/``#fields`` (every ``#`` line is read in order, so
    a new header applies from its line on).
:class:`JsonField`
    A string field of JSON lines by dotted path (``request.remote_ip``). A line whose last path key
    appears exactly once, as ``"key": "value"``, is read without a JSON parse (the key is taken to
    sit at the path: true of every published shape); any other line is parsed with :mod:`json`.
:class:`Regex`
    The (first) named group of a regular expression searched in each line (Python per line): a
    pattern of the operator's, or a format's built-in one.
:class:`ForwardedFor`
    nginx/Apache with the X-Forwarded-For header as the last quoted field: its first hop, or with
    trusted proxies the last hop (reading right to left, the direct peer first) outside them.

The vectorized scans they share (:func:`windows`, :func:`head_field`, :func:`nth_field`) are
:mod:`panstream.inputs.scan`'s, re-exported here.

State across chunks: header formats keep their header in the extractor (one per
:class:`~panstream.inputs.parser.LineParser`), never a line of data.
"""

from __future__ import annotations

import csv
import ipaddress
import json
import re
import socket
from dataclasses import dataclass, field

import numpy as np

from panstream.inputs.ipv4 import _ipv4_spans, byte_positions
from panstream.inputs.scan import (
    HEAD,
    head_field,
    highest,
    lowmask,
    nth_field,
    pack128,
    pop_lowest,
    windows,
)
from panstream.universe.addresses import normalize_address

#: Per-line states of :class:`Spans` (HEADER: a ``#`` line of W3C/Zeek or a CSV/TSV header: no
#: record, counted apart from blank lines, issue 37).
SPAN, EMPTY, BAD, PY, HEADER = 0, 1, 2, 3, 4

@dataclass
class Spans:
    """Where each line's token is. ``state[i]`` is :data:`SPAN` (token ``b[ts[i]:te[i]]``),
    :data:`PY` (token ``py[i]``, or malformed when ``py[i]`` is ``None``), :data:`EMPTY` (no item:
    a blank line), :data:`HEADER` (no item: a header or comment line) or :data:`BAD` (malformed,
    or blank: checked later)."""

    state: np.ndarray
    ts: np.ndarray
    te: np.ndarray
    py: dict[int, bytes | None] = field(default_factory=dict)

    @classmethod
    def new(cls, n: int) -> Spans:
        return cls(np.full(n, BAD, dtype=np.uint8), np.zeros(n, dtype=np.intp),
                   np.zeros(n, dtype=np.intp))

    def set_py(self, i: int, token: bytes | None) -> None:
        if token is None:
            self.state[i] = BAD
        else:
            self.state[i] = PY
            self.py[i] = token


def _line(b: np.ndarray, s: int, e: int, max_line: int) -> bytes:
    return bytes(b[s:min(e, s + max_line + 1)])


class Extractor:
    """Base class: ``locate`` fills :class:`Spans` for one chunk."""

    #: The extractor's tokens may carry ``:port`` (the vectorized validator then checks for one).
    ports = True

    def __init__(self, max_line: int) -> None:
        self.max_line = max_line

    def locate(self, b: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Spans:
        raise NotImplementedError

    def _over_ok(self, starts: np.ndarray, ends: np.ndarray, te: np.ndarray) -> np.ndarray:
        """Over-long lines keep their token only if it ends within the line's head."""
        return (ends - starts <= self.max_line) | (te <= starts + self.max_line)


class WhitespaceField(Extractor):
    """The k-th whitespace-separated field (awk's ``$k``)."""

    def __init__(self, k: int, max_line: int) -> None:
        super().__init__(max_line)
        self.k = k

    def _py(self, line: bytes, over: bool) -> bytes | None:
        fields = line.split(None, self.k)
        complete = len(fields) > self.k or (len(fields) == self.k and not over)
        if over and len(fields) == self.k and line[-1:].isspace():
            complete = True  # the head ends with the whitespace after field k
        return fields[self.k - 1] if complete else None

    def locate(self, b: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Spans:
        n = starts.size
        sp = Spans.new(n)
        ts, te, ok, unsure = head_field(b, starts, ends, 32, self.k, awk=True)
        ok &= self._over_ok(starts, ends, te)
        rows = np.flatnonzero(ok)
        sp.state[rows] = SPAN
        sp.ts[rows], sp.te[rows] = ts[rows], te[rows]
        sp.state[ends == starts] = EMPTY
        for i in np.flatnonzero(~ok & (ends > starts)).tolist():  # rare: awk's rules, in Python
            s, e = int(starts[i]), int(ends[i])
            line = _line(b, s, e, self.max_line)
            if not line.strip():
                sp.state[i] = EMPTY
                continue
            sp.set_py(i, self._py(line, e - s > self.max_line))
        return sp


class Columns(Extractor):
    """csv, tsv, w3c and zeek: a column by header name or number, the header kept across chunks."""

    def __init__(self, kind: str, column: str, max_line: int) -> None:
        super().__init__(max_line)
        self.kind = kind
        self.name = None if column.isdigit() else column
        self.col: int | None = int(column) if column.isdigit() else None
        self.sep: int | None = {"csv": 44, "tsv": 9, "zeek": 9}.get(kind)
        self.header: bytes | None = None
        self.seen_first = False  # csv/tsv: the input's first non-blank line was looked at

    # ------------------------------------------------------------------ headers
    def _split_header(self, line: bytes) -> list[str]:
        text = line.decode("utf-8", "replace").lstrip("\ufeff")
        if self.kind in ("csv", "tsv"):
            row = next(csv.reader([text], delimiter="," if self.kind == "csv" else "\t"), [])
            return [c.strip() for c in row]
        return text.split()

    def _index_of(self, names: list[str]) -> int | None:
        if self.name is None:
            return self.col
        if self.name in names:
            return names.index(self.name) + 1
        low = [x.lower() for x in names]
        return low.index(self.name.lower()) + 1 if self.name.lower() in low else None

    def _meta(self, line: bytes) -> None:
        """A ``#`` line of a W3C or Zeek log."""
        if self.kind == "w3c":
            if line[:8].lower() == b"#fields:":
                self.col = self._index_of(self._split_header(line[8:]))
                self.sep = None  # tab or space: decided on the next data line
            return
        if line.startswith(b"#separator"):
            arg = line[len(b"#separator"):].strip()
            try:
                sep = arg.decode("ascii").encode().decode("unicode_escape").encode("latin-1")
            except (UnicodeError, ValueError):
                sep = b""
            self.sep = sep[0] if len(sep) == 1 else 9
        elif line.startswith(b"#fields"):
            names = line.split(bytes([self.sep or 9]))[1:]
            self.col = self._index_of([x.decode("utf-8", "replace").strip() for x in names])

    def _is_header(self, line: bytes) -> bool:
        """csv/tsv: is this line a header (the input's first, or a repeated one)?"""
        if self.header is not None and line == self.header:
            return True
        if self.name is not None:
            return self.name.lower() in [x.lower() for x in self._split_header(line)]
        return False

    def _first_line(self, line: bytes) -> bool:
        """csv/tsv: the input's first non-blank line. True if it is the header."""
        self.seen_first = True
        names = self._split_header(line)
        if self.name is not None:
            self.header = line
            self.col = self._index_of(names)
            return True
        assert self.col is not None
        cell = names[self.col - 1] if self.col <= len(names) else ""
        if not any(ch.isdigit() for ch in cell):
            self.header = line
            return True
        return False

    # ------------------------------------------------------------------ data
    def locate(self, b: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Spans:
        n = starts.size
        out = Spans.new(n)
        if n == 0:
            return out
        meta = self._meta_rows(b, starts, ends)
        seg_start = 0
        for i in [*meta, n]:
            if i > seg_start:
                self._segment(b, starts, ends, seg_start, i, out)
            if i < n:
                out.state[i] = HEADER
                s, e = int(starts[i]), int(ends[i])
                line = _line(b, s, e, self.max_line)
                if self.kind in ("w3c", "zeek"):
                    self._meta(line)
                elif not self.seen_first:
                    if not self._first_line(line):
                        out.state[i] = BAD  # a data line: parsed with its segment below
                        self._segment(b, starts, ends, i, i + 1, out)
                elif self.name is not None:
                    self._new_header(line)  # the column named again: a new header
            seg_start = i + 1
        return out

    def _name_bytes(self) -> bytes | None:
        """The column's name as the current header spells it (its case), for the header search."""
        if self.name is None:
            return None
        if self.header is not None and self.col is not None:
            cells = self._split_header(self.header)
            if self.col <= len(cells):
                return cells[self.col - 1].encode()
        return self.name.encode()

    def _new_header(self, line: bytes) -> None:
        self.header = line
        self.col = self._index_of(self._split_header(line))

    def _meta_rows(self, b: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> list[int]:
        """Lines handled in Python, in order: ``#`` lines (w3c, zeek); csv/tsv header lines."""
        n = starts.size
        if self.kind in ("w3c", "zeek"):
            first = np.zeros(n, dtype=np.uint8)
            nz = ends > starts
            first[nz] = b[starts[nz]]
            return np.flatnonzero(first == 35).tolist()
        rows: list[int] = []
        if not self.seen_first:
            for i in np.flatnonzero(ends > starts).tolist():  # the first non-blank line
                if bytes(b[starts[i]:ends[i]]).strip():
                    rows.append(i)
                    break
        needles = [x for x in (self._name_bytes(), self.header) if x]
        if needles:
            data = memoryview(b.data)  # no copy
            hits: set[int] = set()
            for needle in needles:
                pat = re.compile(re.escape(needle))  # a literal: searched at memchr speed
                pos = [m.start() for m in pat.finditer(data)]
                if pos:
                    hits.update(np.searchsorted(ends, np.array(pos), side="left").tolist())
            for i in sorted(hits):
                if i in rows or i >= n:
                    continue
                line = _line(b, int(starts[i]), int(ends[i]), self.max_line)
                if self._is_header(line):
                    rows.append(i)
        return sorted(rows)

    def _segment(self, b: np.ndarray, starts: np.ndarray, ends: np.ndarray, lo: int, hi: int,
                 out: Spans) -> None:
        """Data lines ``lo..hi-1`` under the current header."""
        if self.col is None:
            return  # no header naming the column yet: malformed
        s, e = starts[lo:hi], ends[lo:hi]
        seg = b[int(s[0]):int(e[-1])]
        if self.sep is None:  # w3c: CloudFront separates with tabs, IIS with spaces
            self.sep = 9 if bool((seg == 9).any()) else 32
        base = int(s[0])
        csvlike = self.kind in ("csv", "tsv")
        ts, te, ok, unsure = head_field(b, s, e, self.sep, self.col, quotes=csvlike)
        quoted = np.zeros(hi - lo, dtype=bool)
        if bool(unsure.any()):  # a field past the head
            if csvlike:
                quoted = unsure  # read by the csv module, which knows every quoting rule
            else:
                u = np.flatnonzero(unsure)
                sp = byte_positions(seg, self.sep) + base
                ts2, te2, ok2 = nth_field(b, s[u], e[u], sp, self.col)
                ts[u], te[u], ok[u] = ts2, te2, ok2
        ok &= self._over_ok(s, e, te)
        rows = np.flatnonzero(ok)
        out.state[lo + rows] = SPAN
        out.ts[lo + rows], out.te[lo + rows] = ts[rows], te[rows]
        for j in np.flatnonzero(quoted).tolist():
            line = _line(b, int(s[j]), int(e[j]), self.max_line)
            row = self._split_header(line)
            out.set_py(lo + j, row[self.col - 1].encode() if self.col <= len(row) else None)


#: Bytes from rare to common in log text: where a key is searched from.
_RARITY = (b"ABCDEFGHIJKLMNOPQRSTUVWXYZ_-@$#%&*!?;+=<>|~^`\\qjzxkvbwyfgpmuh9876543210"
           b"cldrsnoiate./,:\"{} ")


def _anchor(key: bytes) -> int:
    """Index of the byte of ``key`` (its quotes aside) most rarely seen in logs."""
    inner = range(1, len(key) - 1) if len(key) > 2 else range(len(key))
    def rank(i: int) -> int:
        r = _RARITY.find(key[i:i + 1])
        return r if r >= 0 else -1  # bytes not listed (non-ASCII) are rarer still
    return min(inner, key=rank)


def json_get(obj: object, path: list[str]) -> object:
    """The value at a dotted path: a key that holds dots itself (Zeek's ``"id.orig_h"``) wins
    over nesting; a number indexes a list. ``None`` when the path is not there.

    >>> json_get({"id.orig_h": "10.0.0.1"}, ["id", "orig_h"]), json_get({"a": [{"b": 1}]}, ["a", "0", "b"])
    ('10.0.0.1', 1)
    """
    for i in range(len(path)):
        if isinstance(obj, dict):
            rest = ".".join(path[i:])
            if i + 1 < len(path) and rest in obj:
                return obj[rest]
            if path[i] not in obj:
                return None
            obj = obj[path[i]]
        elif isinstance(obj, list) and path[i].isdigit() and int(path[i]) < len(obj):
            obj = obj[int(path[i])]
        else:
            return None
    return obj


class JsonField(Extractor):
    """A string field of JSON lines by dotted path."""

    def __init__(self, path: str, max_line: int) -> None:
        super().__init__(max_line)
        self.path = path.split(".")
        self._key = json.dumps(self.path[-1]).encode()  # "leaf", with JSON's escapes
        self._anchor = _anchor(self._key)
        flat = json.dumps(path).encode() if len(self.path) > 1 else None
        self._flat = (flat, _anchor(flat)) if flat is not None else None

    def _values(self, b: np.ndarray) -> np.ndarray:
        """Where the string value after each ``"leaf":`` starts, vectorized: candidates are the
        positions of the key's rarest byte in the chunk (:func:`_anchor` breaks ties), the key is
        compared in a window gathered around each, and the ``:`` and opening quote after it (with
        up to one blank on each side) are checked. Other keys are left to the JSON parse."""
        got = self._find(b, self._key, self._anchor)
        if got.size == 0 and self._flat is not None:  # Zeek JSON: "id.orig_h" is one key
            got = self._find(b, *self._flat)
        return got

    def _find(self, b: np.ndarray, key: bytes, anchor: int) -> np.ndarray:
        # The key's byte least frequent in this chunk's first 4 KiB (ties: the rarer in logs).
        freq = np.bincount(b[:4096], minlength=256)
        j = min(range(1, len(key) - 1), key=lambda i: (int(freq[key[i]]), i != anchor))
        cand = byte_positions(b, key[j]) - j
        cand = cand[(cand >= 0) & (cand + len(key) <= b.size)]
        if cand.size == 0:
            return cand
        w = windows(b, cand, len(key) + 4)
        match = (w[:, : len(key)] == np.frombuffer(key, dtype=np.uint8)).all(axis=1)
        t = w[match, len(key):]
        at = cand[match] + len(key)
        c1 = t[:, 0] == 58
        plus = np.where(c1 & (t[:, 1] == 34), 2,
                        np.where(c1 & (t[:, 1] == 32) & (t[:, 2] == 34), 3,
                                 np.where((t[:, 0] == 32) & (t[:, 1] == 58) & (t[:, 2] == 32)
                                          & (t[:, 3] == 34), 4, 0)))
        w.fill(0)
        return (at + plus)[plus > 0]

    def _py(self, line: bytes) -> bytes | None:
        try:
            obj = json.loads(line)
        except ValueError:
            return None
        obj = json_get(obj, self.path)
        if not isinstance(obj, str):
            return None
        return obj.encode("utf-8", "replace")

    def locate(self, b: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Spans:
        n = starts.size
        out = Spans.new(n)
        pos = self._values(b)
        single = np.zeros(n, dtype=bool)
        if pos.size:
            line_of = np.searchsorted(ends, pos, side="left")
            inside = line_of < n
            pos, line_of = pos[inside], line_of[inside]
            cnt = np.bincount(line_of, minlength=n)
            vstart = np.zeros(n, dtype=np.intp)
            vstart[line_of] = pos
            single = cnt == 1
            rows = np.flatnonzero(single)
            w = windows(b, vstart[rows], 64)  # an address and its port fit in 64 bytes
            quote = w == 34
            found = quote.any(axis=1)
            close = np.where(found, vstart[rows] + np.argmax(quote, axis=1), ends[rows] + 1)
            w.fill(0)
            good = (close < ends[rows]) & self._over_ok(starts[rows], ends[rows], close)
            rows = rows[good]
            out.state[rows] = SPAN
            out.ts[rows], out.te[rows] = vstart[rows], close[good]
            single[:] = False
            single[rows] = True
        for i in np.flatnonzero(~single).tolist():
            s, e = int(starts[i]), int(ends[i])
            if e - s > self.max_line:
                continue  # a JSON line cut to its head cannot be parsed: malformed
            line = bytes(b[s:e])
            if not line.strip():
                out.state[i] = EMPTY
                continue
            out.set_py(i, self._py(line))
        return out


class PerLine(Extractor):
    """Formats read in Python, one line at a time: regex, sshd, xff."""

    def token(self, line: bytes) -> bytes | None:
        raise NotImplementedError

    def locate(self, b: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Spans:
        out = Spans.new(starts.size)
        lines = b.tobytes().split(b"\n")  # one split in C; the chunk's lines, gone with the call
        cut = self.max_line + 1
        state, py = out.state, out.py
        try:
            for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
                line = lines[i]
                if e - s != len(line):
                    line = line[:e - s]  # the trailing CR
                if len(line) > cut:
                    line = line[:cut]
                if not line.strip():
                    state[i] = EMPTY
                    continue
                t = self.token(line)
                if t is not None:
                    state[i] = PY
                    py[i] = t
        finally:
            lines.clear()
            self.done()
        return out

    def done(self) -> None:
        """Forget anything kept for the chunk (a cache of hops)."""


class Regex(PerLine):
    """The first named group (else group 1) of a pattern searched in each line."""

    def __init__(self, pattern: str, max_line: int) -> None:
        super().__init__(max_line)
        self.pattern = re.compile(pattern.encode("utf-8"))
        names = sorted(self.pattern.groupindex.items(), key=lambda kv: kv[1])
        self.group: int | str = names[0][0] if names else 1

    def token(self, line: bytes) -> bytes | None:
        m = self.pattern.search(line)
        return None if m is None or m.group(self.group) is None else m.group(self.group)


class Nothing(Extractor):
    """``-f auto`` when no known format fits: every non-blank line is malformed (the loud-failure
    check then says so, with its one-bit message)."""

    def locate(self, b: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Spans:
        out = Spans.new(starts.size)
        out.state[ends == starts] = EMPTY
        return out


def _networks(spec: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [ipaddress.ip_network(c.strip(), strict=False) for c in spec.split(",") if c.strip()]


class ForwardedFor(PerLine):
    """The client behind proxies: the X-Forwarded-For header is the line's last quoted field and
    the direct peer its first field (nginx ``log_format main`` and the like)."""

    def __init__(self, trusted: str, max_line: int) -> None:
        super().__init__(max_line)
        nets = _networks(trusted)
        #: (family, network as int, mask as int) of every trusted proxy network
        self.trusted = [(socket.AF_INET if n.version == 4 else socket.AF_INET6,
                         int(n.network_address), int(n.netmask)) for n in nets]
        self._cache: dict[bytes, bool] = {}  # hop -> trusted, for one chunk only

    def done(self) -> None:
        self._cache.clear()

    def _trusted(self, hop: bytes) -> bool:
        got = self._cache.get(hop)
        if got is None:
            got = self._cache[hop] = self._check(hop)
        return got

    def _check(self, hop: bytes) -> bool:
        try:
            text = normalize_address(hop).decode("ascii")
        except UnicodeDecodeError:
            return False
        for fam in (socket.AF_INET, socket.AF_INET6):
            try:
                a = int.from_bytes(socket.inet_pton(fam, text), "big")
            except (OSError, ValueError):
                continue
            return any(f == fam and a & mask == net for f, net, mask in self.trusted)
        return False

    #: Hops read vectorized; a header with more goes through :meth:`token`.
    HOPS = 4

    def locate(self, b: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Spans:
        """Vectorized for the usual lines (the header is the last quoted field and ends the line,
        at most :data:`HOPS` comma-separated IPv4 hops within the line's last 128 bytes, every
        hop an address when proxies are trusted); any other line is read by :meth:`token`, the
        reference."""
        n = starts.size
        out = Spans.new(n)
        fast, ts, te = self._vector(b, starts, ends)
        rows = np.flatnonzero(fast)
        out.state[rows] = SPAN
        out.ts[rows], out.te[rows] = ts[rows], te[rows]
        try:
            for i in np.flatnonzero(~fast).tolist():
                s, e = int(starts[i]), int(ends[i])
                line = bytes(b[s:min(e, s + self.max_line + 1)])
                if not line.strip():
                    out.state[i] = EMPTY
                    continue
                out.set_py(i, self.token(line))
        finally:
            self.done()
        return out

    def _vector(self, b: np.ndarray, starts: np.ndarray, ends: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = starts.size
        length = ends - starts
        fast = length >= 4
        fast &= b[np.maximum(ends - 1, 0)] == 34  # the line ends with a quote
        fast &= length <= self.max_line
        ws = np.maximum(ends - HEAD, starts)
        w = windows(b, ws, HEAD)
        span = ends - ws  # bytes of the line in the window (the last one is the final quote)
        mlo, mhi = lowmask(span - 1)
        qlo, qhi = pack128(w == 34)
        qlo &= mlo
        qhi &= mhi
        opening = highest(qlo, qhi)  # the quote that opens the last quoted field
        fast &= opening >= 0
        vs = ws + opening + 1
        ve = ends - 1
        fast &= b[np.maximum(vs - 2, 0)] == 32  # the opening quote starts a field
        fast &= ve > vs
        fast &= (b[np.minimum(vs, b.size - 1)] != 32) & (b[np.maximum(ve - 1, 0)] != 32)
        # Hop boundaries: the commas inside the value.
        clo, chi = pack128(w == 44)
        vlo, vhi = lowmask(ve - ws)
        olo, ohi = lowmask(vs - ws)
        clo &= vlo & ~olo
        chi &= vhi & ~ohi
        hs = np.zeros((n, self.HOPS), dtype=np.intp)
        he = np.zeros((n, self.HOPS), dtype=np.intp)
        present = np.zeros((n, self.HOPS), dtype=bool)
        cur = vs.copy()
        done = np.zeros(n, dtype=bool)
        for j in range(self.HOPS):
            pos, has = pop_lowest(clo, chi)
            end = np.where(has, ws + pos, ve)
            present[:, j] = ~done
            hs[:, j] = cur + (b[np.minimum(cur, b.size - 1)] == 32)
            he[:, j] = end
            done |= ~has
            cur = end + 1
        fast &= done  # more hops than HOPS: the slow way
        dash = (ve - vs == 1) & (b[np.minimum(vs, b.size - 1)] == 45)  # "-": no header
        present[dash] = False
        w.fill(0)
        # The direct peer: the first field.
        pts, pte, pok, _ = head_field(b, starts, ends, 32, 1)
        fast &= pok
        first = present[:, 0]
        if not self.trusted:
            ts = np.where(first, hs[:, 0], pts)
            te = np.where(first, he[:, 0], pte)
            return fast, ts, te
        es = np.concatenate([hs, pts[:, None]], axis=1)  # hops, then the peer
        ee = np.concatenate([he, pte[:, None]], axis=1)
        there = np.concatenate([present, np.ones((n, 1), dtype=bool)], axis=1)
        cand = np.flatnonzero((fast[:, None] & there).reshape(-1))
        addr, ok = _ipv4_spans(b, es.reshape(-1)[cand], ee.reshape(-1)[cand])
        trusted = np.zeros(addr.size, dtype=bool)
        for fam, net, mask in self.trusted:
            if fam == socket.AF_INET:
                trusted |= (addr & np.uint32(mask)) == np.uint32(net)
        good = np.ones(es.size, dtype=bool)
        good[cand] = ok
        untrusted = np.zeros(es.size, dtype=bool)
        untrusted[cand] = ok & ~trusted
        addr.fill(0)
        fast &= good.reshape(n, -1).all(axis=1)  # an IPv6 or junk hop: the slow way
        u = untrusted.reshape(n, -1) & there
        # The last untrusted entry (the peer is last), else the first hop (else the peer).
        k = u.shape[1] - 1 - np.argmax(u[:, ::-1], axis=1)
        k = np.where(u.any(axis=1), k, np.where(first, 0, self.HOPS))
        rows = np.arange(n)
        return fast, es[rows, k], ee[rows, k]

    def token(self, line: bytes) -> bytes | None:
        peer = line.split(None, 1)[0]
        j = line.rfind(b'"')
        i = line.rfind(b'"', 0, j) if j > 0 else -1
        value = line[i + 1:j].strip() if i >= 0 else b""
        hops = [h.strip() for h in value.split(b",")] if value not in (b"", b"-") else []
        if not self.trusted:
            return hops[0] if hops else peer
        chain = [*hops, peer]
        for hop in reversed(chain):
            if not self._trusted(hop):
                return hop
        return chain[0]

