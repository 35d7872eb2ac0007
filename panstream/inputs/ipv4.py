"""The vectorized core: line bounds, byte scans and strict IPv4 addresses, over whole chunks.

Every step here works on a chunk of complete lines held in a ``uint8`` array, with NumPy and no
Python per line; nothing here knows formats (:mod:`panstream.inputs.parser` and
:mod:`panstream.inputs.extractors` build on it). :func:`panstream.inputs.ipv6.token_keys`, the
same reading of a batch of tokens, is registered with :mod:`panstream.universe` for its large
batches (issue 36: the universe sits below the input side and imports none of it).

Strictness: an IPv4 address is accepted exactly when :class:`ipaddress.IPv4Address` accepts it:
four decimal octets 0..255 of one to three ASCII digits, no leading zeros, nothing else
(``inet_aton``'s ``1``, ``0x7f.1`` and octal ``010.1.1.1`` are rejected).

The fast path: newline positions come from a ``flatnonzero`` over the chunk's newline flags
viewed as 64-bit words (:func:`byte_positions`); the first 16 bytes of every line are gathered
into an ``n x 16`` matrix in one fancy index of 16-byte items; each row's byte classes (dot;
digit, dot or ``/``) are packed into 16-bit masks; a table indexed by the dot mask plus a
terminator bit gives the structure (exactly three dots, octets of one to three characters) and
where each octet ends; three nibbles per octet, shifted out of the row's packed nibbles, index
tables of octet values that reject leading zeros, values over 255 and ``/``. Rejected lines
(rare in real logs) get a second look in Python, only to tell blank padding, empty lines and IPv6
addresses apart from junk. The working arrays that hold addresses are overwritten with zeros
before returning.
"""

from __future__ import annotations

import ipaddress  # noqa: F401 - the doctests use it
from collections.abc import Callable


import numpy as np

from panstream.universe.addresses import address_key, is_ipv4_key

_MOVEMASK = np.uint64(0x0102040810204080)


class V6Keys:
    """The 128-bit keys of a chunk's IPv6 clients: arrays of ``uint64`` halves from the vectorized
    reader (:mod:`panstream.inputs.ipv6`), Python ints from the reference one line at a time.

    The vectorized reader may add each key's text where the log already wrote it as RFC 5952 text
    (what a sketch hashes, issue 38): ``(rows, n)``, an ``m x w`` ``uint8`` matrix (``w`` a
    multiple of 16) whose rows start with the texts (the bytes after a text are not part of it),
    and their lengths, 0 where the text is to be written from the key."""

    def __init__(self) -> None:
        self._parts: list[tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray] | None]] = []
        self._ints: list[int] = []

    def append(self, key: int) -> None:
        self._ints.append(key)

    def extend(self, hi: np.ndarray, lo: np.ndarray,
               text: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        """Add keys given as two ``uint64`` arrays (and maybe their text rows), which the
        collection then owns (and wipes)."""
        self._parts.append((hi, lo, text))

    def __len__(self) -> int:
        return len(self._ints) + sum(int(h.size) for h, _, _ in self._parts)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """All the keys as two ``uint64`` arrays (high and low halves); the parts are wiped."""
        hi, lo, text = self.take()
        if text is not None:
            for a in text:
                a.fill(0)
        return hi, lo

    def take(self) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
        """:meth:`arrays`, and the keys' text rows (``None`` when no part has any)."""
        if len(self._parts) == 1 and not self._ints:  # (the common case: one part, no copy)
            hi, lo, text = self._parts.pop()
            return hi, lo, text
        his = [h for h, _, _ in self._parts]
        los = [x for _, x, _ in self._parts]
        his.append(np.array([k >> 64 for k in self._ints], dtype=np.uint64))
        los.append(np.array([k & 0xFFFFFFFFFFFFFFFF for k in self._ints], dtype=np.uint64))
        hi, lo = np.concatenate(his), np.concatenate(los)
        text = None
        if any(t is not None for _, _, t in self._parts):
            width = max(t[0].shape[1] for _, _, t in self._parts if t is not None)
            rows = np.zeros((hi.size, width), dtype=np.uint8)
            n = np.zeros(hi.size, dtype=np.intp)
            at = 0
            for h, _, t in self._parts:
                if t is not None:
                    rows[at: at + h.size, : t[0].shape[1]] = t[0]
                    n[at: at + h.size] = t[1]
                at += h.size
            text = (rows, n)
        self.clear()
        return hi, lo, text

    def clear(self) -> None:
        for h, x, t in self._parts:
            h.fill(0)
            x.fill(0)
            if t is not None:
                t[0].fill(0)
                t[1].fill(0)
        self._parts.clear()
        self._ints.clear()


#: A second vectorized look at the lines the IPv4 parse rejected: ``(b, starts, ends, rows, clf,
#: max_line, addr, ok, v6)`` -> the rows it could not read either.
SecondLook = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool, int, np.ndarray,
                       np.ndarray, V6Keys], np.ndarray]


def _bytemask_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every 8-bit mask: its popcount, the index of each set bit (row padded with 0), and the
    index of its only set bit (-1 unless exactly one bit is set)."""
    pop = np.array([bin(i).count("1") for i in range(256)], dtype=np.intp)
    pos = np.zeros((256, 8), dtype=np.intp)
    for m in range(256):
        bs = [i for i in range(8) if m >> i & 1]
        pos[m, : len(bs)] = bs
    return pop, pos, np.where(pop == 1, pos[:, 0], -1)


_POP8, _BITPOS8, _ONEBIT8 = _bytemask_tables()


def byte_positions(b: np.ndarray, value: int) -> np.ndarray:
    """Positions of every byte equal to ``value`` in ``b``, in order.

    The equality flags are viewed as 64-bit words, only nonzero words are located, and a multiply
    moves each word's flags into one byte whose set bits a table names.

    >>> byte_positions(np.frombuffer(b"a,b,,c", dtype=np.uint8), ord(",")).tolist()
    [1, 3, 4]
    """
    n = b.size
    eq = np.zeros(n + (-n) % 8, dtype=bool)
    np.equal(b, value, out=eq[:n])
    words = eq.view(np.uint64)
    hit = np.flatnonzero(words != 0)
    m = words[hit]
    m *= _MOVEMASK
    m >>= np.uint64(56)
    mi = m.view(np.intp)
    one = _ONEBIT8[mi]
    if bool((one >= 0).all()):
        hit <<= 3
        hit += one
        return hit
    cnt = _POP8[mi]
    rep = np.repeat(np.arange(hit.size), cnt)
    rank = np.arange(rep.size) - (np.cumsum(cnt) - cnt)[rep]
    out = hit[rep]
    out <<= 3
    out += _BITPOS8[mi[rep], rank]
    return out


#: Only the first ``MAX_LINE + 1`` bytes of a line are read; longer ``plain`` lines are malformed,
#: longer ``clf``/``field:N`` lines keep their item when its field ends within that head.
MAX_LINE = 4096

_W = 16  # window width: an IPv4 address has at most 15 characters, plus one terminator
_WS = b" \t\r\v\f"
_U8_WS = np.zeros(256, dtype=bool)
_U8_WS[list(_WS)] = True


_DOT_NIBBLE = 0xE  # low nibble of "." (digits have 0..9)


def _build_structure_table() -> np.ndarray:
    """For every 17-bit mask of separator positions (three dots, then the terminator at the token
    length; bit 16 set means the token fills the whole window): 0 unless it has exactly four
    separators leaving 1..3 characters before and between them. Else bit 63 is set and byte k - 1
    (k = 1..3) holds the nibble shift ``4 (e_k - 3)`` that brings the three characters before the
    separator ``e_k`` ending octet k to the bottom of the row's packed nibbles."""
    m = np.arange(1 << 17, dtype=np.uint32)
    bits = ((m[:, None] >> np.arange(17, dtype=np.uint32)) & 1).astype(np.uint8)
    four = (bits.sum(axis=1) == 4) & (bits[:, 16] == 0)
    pos = np.zeros((m.size, 4), dtype=np.int64)
    rows = np.flatnonzero(four)
    pos[rows] = np.nonzero(bits[rows])[1].reshape(-1, 4)
    lens = np.diff(np.concatenate([np.full((m.size, 1), -1), pos], axis=1), axis=1) - 1
    ok = four & (lens >= 1).all(axis=1) & (lens <= 3).all(axis=1)
    code = np.uint64(1 << 63) * ok.astype(np.uint64)
    for k in (1, 2, 3):
        code |= np.where(ok, 4 * (pos[:, k] - 3), 0).astype(np.uint64) << np.uint64(8 * (k - 1))
    return np.where(ok, code, np.uint64(0))


def _build_octet_tables() -> list[np.ndarray]:
    """Per octet k = 0..3, a table from 12-bit keys of three nibbles to the octet's value already
    shifted to its place in the address, with bit 40 set where the octet is invalid (a leading zero,
    a value over 255, or a character that is neither a digit nor the dot's nibble ``0xE``).

    The keys are self-delimiting: within a structurally valid row (dots exactly where the structure
    table put them, every other character a digit or ``/``), the dot's nibble ``0xE`` marks where the
    octet starts. Octets 1..3 are right-aligned (nibbles of positions e-3, e-2, e-1 in bits 0, 4, 8,
    e the separator after the octet); octet 0 is left-aligned (positions 0, 1, 2). ``/`` (nibble
    ``0xF``) passes the row's character check but is rejected here.
    """
    e = _DOT_NIBBLE
    key = np.arange(1 << 12)
    x, y, z = key & 15, (key >> 4) & 15, (key >> 8) & 15
    one, two = y == e, (y != e) & (x == e)
    three = (y != e) & (x != e)
    v = np.where(one, z, np.where(two, 10 * y + z, 100 * x + 10 * y + z))
    bad = (z > 9) | (~one & (y > 9)) | (three & (x > 9))
    bad |= (two & (y == 0)) | (three & ((x == 0) | (v > 255)))
    one0, two0 = y == e, (y != e) & (z == e)
    three0 = (y != e) & (z != e)
    v0 = np.where(one0, x, np.where(two0, 10 * x + y, 100 * x + 10 * y + z))
    bad0 = (x > 9) | (~one0 & (y > 9)) | (three0 & (z > 9))
    bad0 |= (~one0 & (x == 0)) | (three0 & (v0 > 255))
    out = []
    for k, (val, inv) in enumerate(((v0, bad0), (v, bad), (v, bad), (v, bad))):
        t = np.where(inv, 0, val).astype(np.uint64) << np.uint64(8 * (3 - k))
        t |= inv.astype(np.uint64) << np.uint64(40)
        out.append(t)
    return out


def _build_ctz_table() -> np.ndarray:
    """Index of the lowest set bit of every 16-bit value (16 for zero)."""
    m = np.arange(1 << 16, dtype=np.uint32)
    out = np.full(m.size, 16, dtype=np.intp)
    for k in range(15, -1, -1):
        out[(m >> k) & 1 == 1] = k
    return out


_STRUCT = _build_structure_table()
_OCTET = _build_octet_tables()
_CTZ = _build_ctz_table()
_NIBBLES = np.uint64(0x0F0F0F0F0F0F0F0F)
_VALID = np.uint64(1 << 63)
_KEY12 = np.uint64(0xFFF)
_BYTE = np.uint64(0xFF)
_BAD = np.uint64(1 << 32)


# ---------------------------------------------------------------------------------------- core


def _newlines(b: np.ndarray) -> np.ndarray:
    """Positions of every ``\\n`` in ``b``, in order (:func:`byte_positions`: cheaper than
    ``flatnonzero(b == 10)``)."""
    return byte_positions(b, 10)


def _line_bounds(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (exclusive, before ``\\n``) of every line; a missing final newline is implied."""
    ends = _newlines(b)
    if b.size and (ends.size == 0 or ends[-1] != b.size - 1):
        ends = np.append(ends, b.size)
    starts = np.empty_like(ends)
    if ends.size:
        starts[0] = 0
        np.add(ends[:-1], 1, out=starts[1:])
    return starts, ends


def _v16(b: np.ndarray, count: int) -> np.ndarray:
    """Overlapping 16-byte items starting at every byte of ``b`` (a strided view, no copy): one
    fancy-index gather copies whole windows, about twice as fast as a 2-D ``sliding_window_view``."""
    return np.ndarray((count,), dtype="V16", buffer=b, strides=(1,))


def _windows(b: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The ``n x 16`` matrix of the 16 bytes from each start (zero-padded past the buffer's end)."""
    n = b.size
    if n < _W:
        pad = np.zeros(2 * _W, dtype=np.uint8)
        pad[:n] = b
        w = _v16(pad, _W + 1)[starts].view(np.uint8).reshape(-1, _W)
        pad.fill(0)
        return w
    lim = n - _W
    w = _v16(b, lim + 1)[np.minimum(starts, lim)].view(np.uint8).reshape(-1, _W)
    tail = np.flatnonzero(starts > lim)  # (starts need not be sorted)
    if tail.size:  # the last few lines start within 16 bytes of the end
        pad = np.zeros(2 * _W, dtype=np.uint8)
        pad[:_W] = b[lim:]
        w[tail] = _v16(pad, _W + 1)[starts[tail] - lim].view(np.uint8).reshape(-1, _W)
        pad.fill(0)
    return w


def _mask16(rows: np.ndarray) -> np.ndarray:
    """Pack each row of an ``n x 16`` boolean matrix into a ``uint16`` (column j = bit j)."""
    return np.packbits(rows.reshape(-1), bitorder="little").view("<u2")


def _nibbles(w: np.ndarray) -> np.ndarray:
    """The low nibbles of the 16 bytes of each row packed into one ``uint64`` (byte j -> bits 4j)."""
    x = w.view("<u8") & _NIBBLES
    y = x >> np.uint64(4)
    x |= y  # the low byte of every 16-bit lane now holds two nibbles
    y.fill(0)
    out = x.view("<u2").astype(np.uint8).view("<u8").reshape(-1)
    x.fill(0)
    return out


def ipv4_from_windows(w: np.ndarray, length: np.ndarray, clf: bool = False
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Strictly parse the token at the start of each row of ``w`` as a dotted quad.

    The token is the first ``length[i]`` bytes (``clf=False``), or (``clf=True``) the bytes before
    the first space, tab or CR within them. Steps (all vectorized, a few passes over the ``n x 16``
    matrix, then passes over ``n``-element arrays): byte classes (dot; dot, ``/`` or digit) packed
    into 16-bit masks; the dot mask plus a terminator bit at the token length indexes a table giving
    the structure (exactly three dots, octets of 1..3 characters) and where each octet ends; the
    row's 16 nibbles packed into a ``uint64``; per octet, three nibbles shifted out of it index a
    table of shifted octet values that rejects leading zeros, values over 255 and ``/``.

    Args:
        w: ``uint8`` matrix ``n x 16``, C-contiguous.
        length: line lengths (``int`` array, any value; a token over 15 bytes is never valid).
        clf: the token ends at the first space, tab or CR (else it is the whole line).

    Returns:
        ``(addresses, ok)``: ``uint32`` addresses (garbage where not ``ok``) and the boolean mask of
        rows that hold exactly an address :class:`ipaddress.IPv4Address` accepts.
    """
    n = w.shape[0]
    isdot = w == 46
    dm = _mask16(isdot)
    t = w - np.uint8(46)
    isok = np.less(t, 12, out=isdot)  # '.', '/' or a digit
    t.fill(0)
    gm = _mask16(isok)
    if clf:
        p = _CTZ[~gm]  # first byte that is not '.', '/' or a digit
        tok = np.minimum(p, length)
        ch = w.reshape(-1)[np.arange(0, _W * n, _W) + np.minimum(p, _W - 1)]
        term = (ch == 32) | (ch == 9) | (ch == 13) | (p >= length)
        ch.fill(0)
    else:
        tok = length
    bit = np.left_shift(np.uint32(1), np.minimum(tok, _W).astype(np.uint32))
    low = bit - np.uint32(1)
    ok = (gm | ~low.astype(np.uint16)) == 0xFFFF
    key = dm & low
    key |= bit
    code = _STRUCT[key.astype(np.intp)]
    ok &= code >= _VALID
    if clf:
        ok &= term
    nb = _nibbles(w)
    kk = nb & _KEY12
    acc = np.take(_OCTET[0], kk.view(np.intp))
    sh = np.empty_like(code)
    tmp = np.empty_like(code)
    for k in (1, 2, 3):
        np.right_shift(code, np.uint64(8 * (k - 1)), out=sh)
        sh &= _BYTE
        np.right_shift(nb, sh, out=kk)
        kk &= _KEY12
        np.take(_OCTET[k], kk.view(np.intp), out=tmp, mode="clip")
        acc |= tmp
    ok &= acc < _BAD
    addr = acc.astype(np.uint32)
    for a in (acc, tmp, kk, nb):
        a.fill(0)
    return addr, ok


def _drop_cr(b: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Line ends without one trailing CR (CRLF files); looks at the last byte of each line only."""
    if ends.size == 0:
        return ends
    cr = b[np.maximum(ends - 1, 0)] == 13
    cr &= ends > starts
    return ends - cr if bool(cr.any()) else ends


def parse_ipv4(data: bytes | bytearray | memoryview | np.ndarray, fmt: str = "plain",
               max_line: int = MAX_LINE) -> tuple[np.ndarray, int, int, int, int]:
    """Parse IPv4 addresses from a buffer of lines (vectorized; ``fmt`` is ``plain`` or ``clf``).

    Args:
        data: complete lines (a final newline is implied if missing).
        fmt: ``"plain"`` or ``"clf"``.
        max_line: longer ``plain`` lines are malformed; longer ``clf`` lines keep their address.

    Returns:
        ``(addresses, lines, empty, malformed, ipv6)``: accepted ``uint32`` addresses in input order,
        the number of lines, empty lines, malformed lines, and well-formed IPv6 addresses (which an
        IPv4 universe counts as outside).

    >>> a, lines, empty, bad, v6 = parse_ipv4(b"1.2.3.4\\n1.2.3\\n::1\\n")
    >>> [str(ipaddress.IPv4Address(int(x))) for x in a], lines, empty, bad, v6
    (['1.2.3.4'], 3, 0, 1, 1)
    """
    if fmt not in ("plain", "clf"):
        msg = f"parse_ipv4 handles plain and clf, not {fmt!r}"
        raise ValueError(msg)
    addr, ok, nlines, empty, bad, v6 = _address_lines(data, fmt, max_line)
    out = addr[ok] if not bool(ok.all()) else addr
    if out is not addr:
        addr.fill(0)
    n6 = len(v6)
    v6.clear()
    return out, nlines, empty, bad, n6


def _address_lines(data: bytes | bytearray | memoryview | np.ndarray, fmt: str, max_line: int,
                   second_look: SecondLook | None = None
                   ) -> tuple[np.ndarray, np.ndarray, int, int, int, V6Keys]:
    """The address of every line of a ``plain`` or ``clf`` buffer, in the one normalization of
    :mod:`panstream.universe.addresses`.

    The dotted quads (also as ``a.b.c.d:port`` in ``plain`` and ``::ffff:a.b.c.d``) are read
    vectorized; the rare other lines get a second look, each token by
    :func:`panstream.universe.addresses.address_key`. ``second_look`` (the vectorized IPv6 reader,
    :func:`panstream.inputs.ipv6.address_lines` passes it) reads what it can of those first.

    Returns:
        ``(addr, ok, lines, empty, malformed, v6)``: ``uint32`` IPv4 address per line (garbage
        where not ``ok``), the mask of lines whose client is IPv4, the counts of lines, empty and
        malformed lines, and the 128-bit keys of the IPv6 clients.
    """
    b = data if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)
    starts, ends = _line_bounds(b)
    nlines = int(starts.size)
    if nlines == 0:
        return np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=bool), 0, 0, 0, V6Keys()
    ends = _drop_cr(b, starts, ends)
    length = ends - starts
    w = _windows(b, starts)
    dotted = (w == 46).view("<u8")  # every IPv4 spelling has a dot within 16 bytes
    dotted = (dotted[:, 0] | dotted[:, 1]) != 0
    four = np.flatnonzero(dotted) if 8 * int(np.count_nonzero(dotted)) < 7 * nlines else None
    if four is None:
        addr, ok = ipv4_from_windows(w, length, fmt == "clf")
    else:  # many lines without a dot (an IPv6 log, issue 38): read only the others as IPv4
        addr = np.zeros(nlines, dtype=np.uint32)
        ok = np.zeros(nlines, dtype=bool)
        if four.size:
            w4 = w[four]
            a4, ok[four] = ipv4_from_windows(w4, length[four], fmt == "clf")
            addr[four] = a4
            for a in (w4, a4):
                a.fill(0)
    w.fill(0)
    if fmt == "plain":
        ok &= length <= max_line  # (clf: the address ends within the first 16 bytes, see below)
    if bool(ok.all()):
        return addr, ok, nlines, 0, 0, V6Keys()
    empty = length == 0
    # Ports (a.b.c.d:port) and dual-stack servers' ::ffff:a.b.c.d: read those vectorized too,
    # the token being the line (plain) or its first field (clf: up to a space, tab or CR).
    cand = np.flatnonzero(~ok & (length > 7) & dotted)
    if cand.size:
        ts, te = starts[cand], ends[cand]
        if fmt == "clf":
            # the first field ends within two windows (::ffff:a.b.c.d and a.b.c.d:port fit)
            w2 = np.concatenate([_windows(b, ts), _windows(b, np.minimum(ts + _W, b.size))],
                                axis=1)  # (a start at the end reads zeros, as past it)
            blank = (w2 == 32) | (w2 == 9) | (w2 == 13)
            w2.fill(0)
            te = np.minimum(np.where(blank.any(axis=1), ts + np.argmax(blank, axis=1), te), te)
            blank.fill(False)
        a2, ok2 = _ipv4_spans(b, ts, te)
        if fmt == "plain":
            ok2 &= length[cand] <= max_line
        addr[cand[ok2]] = a2[ok2]
        ok[cand[ok2]] = True
        a2.fill(0)
    # Rejected lines: the rare ones go through Python (blank lines, ports, IPv6, a clf head).
    rej = np.flatnonzero(~ok & ~empty & ((length <= max_line) | (fmt == "clf")))
    n_empty = int(empty.sum())
    malformed = int((~ok & ~empty & (length > max_line) & (fmt != "clf")).sum())
    v6 = V6Keys()
    if second_look is not None:
        rej = second_look(b, starts, ends, rej, fmt == "clf", max_line, addr, ok, v6)
    for i in rej.tolist():
        s, e = int(starts[i]), int(ends[i])
        over = e - s > max_line
        line = bytes(b[s:min(e, s + max_line + 1)])  # only the head of an over-long line
        if not over and not line.strip():
            n_empty += 1
            continue
        if fmt == "plain":
            fields = line.split()
            if len(fields) != 1:
                malformed += 1
                continue
            token = fields[0]
        else:
            parts = line.split(b" ", 1)
            if over and len(parts) < 2:
                malformed += 1
                continue  # the first field does not end within the first max_line bytes
            token = parts[0]
        malformed += not place_address(token, i, addr, ok, v6)
    return addr, ok, nlines, n_empty, malformed, v6


def place_address(token: bytes, i: int, addr: np.ndarray, ok: np.ndarray, v6: V6Keys) -> bool:
    """Line ``i``'s client ``token`` through the one normalization: an IPv4 client into
    ``addr[i]``/``ok[i]``, any other address appended to ``v6``; False when it is no address."""
    key = address_key(token)
    if key is None:
        return False
    if is_ipv4_key(key):
        addr[i] = key & 0xFFFFFFFF
        ok[i] = True
    else:
        v6.append(key)
    return True


def format_ipv4_lines(addresses: np.ndarray) -> bytes:
    """Dotted-quad lines for ``uint32`` addresses, vectorized (for synthetic logs and benchmarks).

    >>> format_ipv4_lines(np.array([0x0A000001, 0xFFFFFFFF], dtype=np.uint32))
    b'10.0.0.1\\n255.255.255.255\\n'
    """
    a = np.asarray(addresses, dtype=np.uint32)
    octets = np.stack([(a >> s) & 0xFF for s in (24, 16, 8, 0)], axis=1).astype(np.uint16)
    chars = np.empty(octets.shape + (4,), dtype=np.uint8)
    chars[..., 0] = octets // 100 + 48
    chars[..., 1] = octets // 10 % 10 + 48
    chars[..., 2] = octets % 10 + 48
    chars[..., 3] = 46
    chars[:, 3, 3] = 10
    keep = np.ones(chars.shape, dtype=bool)
    keep[..., 0] = octets >= 100
    keep[..., 1] = octets >= 10
    out = chars[keep].tobytes()
    chars.fill(0)
    octets.fill(0)
    return out


_MAPPED = np.frombuffer(b"::ffff:", dtype=np.uint8)


def _skip_mapped_prefix(b: np.ndarray, ts: np.ndarray, te: np.ndarray) -> np.ndarray:
    """Token starts moved past an IPv4-mapped prefix ``::ffff:`` (any case), vectorized: a
    dual-stack server logs every IPv4 client that way."""
    w = _windows(b, ts)
    hit = ((w[:, :7] | np.uint8(0x20)) == _MAPPED).all(axis=1) & (te - ts > 7)
    w.fill(0)
    return ts + 7 * hit if bool(hit.any()) else ts


def _ipv4_spans(b: np.ndarray, ts: np.ndarray, te: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Strictly parse the tokens ``b[ts:te]`` as IPv4 addresses, each either optionally followed
    by ``:port`` (1 to 5 digits, at most 65535) or written ``::ffff:a.b.c.d`` (without a port, as
    :func:`panstream.universe.addresses.address_key` reads them), vectorized: the first ``:`` of each
    token's 16-byte window ends the address, which :func:`ipv4_from_windows` checks; the port's
    digits are checked from a second window. Rows not ``ok`` get a second look in Python (other
    spellings, IPv6)."""
    if ts.size == 0:
        return np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=bool)
    moved = _skip_mapped_prefix(b, ts, te)
    mapped = moved != ts
    ts = moved
    length = te - ts
    w = _windows(b, ts)
    colon = _CTZ[_mask16(w == 58)]
    has_port = colon < length
    alen = np.where(has_port, colon, length)
    addr, ok = ipv4_from_windows(w, alen)
    w.fill(0)
    ok &= ~(mapped & has_port)  # ::ffff:a.b.c.d:port is no spelling (brackets hold a port's v6)
    rows = np.flatnonzero(ok & has_port)
    if rows.size:
        ok[rows] = port_ok(b, ts[rows] + colon[rows] + 1, te[rows])
    return addr, ok


def port_ok(b: np.ndarray, ps: np.ndarray, pe: np.ndarray) -> np.ndarray:
    """Whether each ``b[ps:pe]`` is a port: one to five ASCII digits, at most 65535 (vectorized).

    >>> port_ok(np.frombuffer(b"80 65536 0 8o", dtype=np.uint8), np.array([0, 3, 9, 11]),
    ...         np.array([2, 8, 10, 13])).tolist()
    [True, False, True, False]
    """
    plen = pe - ps
    pw = _windows(b, ps)[:, :5].astype(np.int64) - 48
    good = (plen >= 1) & (plen <= 5)
    val = np.zeros(ps.size, dtype=np.int64)
    for j in range(5):
        d = pw[:, j]
        use = j < plen
        good &= ~use | ((d >= 0) & (d <= 9))
        val = np.where(use, val * 10 + d, val)
    good &= val <= 65535
    pw.fill(0)
    return good
