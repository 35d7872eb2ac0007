"""Universes: map stream items to cell indices ``0..size-1`` of the bit table.

A universe is public: its specification is stored in snapshots and printed freely. It decides what one
*cell* is (an IPv4 address, an IPv6 /64 subnet, an integer, a hash bucket of an identifier), and the
privacy guarantee protects the presence of any one cell in the stream.

Five kinds, each with a textual spec used by the command line and by snapshots:

==========================  ===================================  =======================================
constructor                 spec                                 cell
==========================  ===================================  =======================================
``Universe.ipv4(cidr)``     ``ipv4:10.0.0.0/16``                 one IPv4 address inside the prefix
``Universe.ipv6(p, g)``     ``ipv6:2001:db8::/48@64``            one /g subnet inside the prefix
``Universe.range(n)``       ``range:1000000``                    an integer 0..n-1
``Universe.hashed(m)``      ``hashed:1048576``                   a BLAKE2b bucket of any identifier
``Universe.hashed_ip(m)``   ``hashed-ip:131072``                 a bucket of IPv4 and IPv6 *addresses*
==========================  ===================================  =======================================

``hashed-ip`` is the universe for internet-facing logs: any client of the whole address space, in a
table sized for the clients expected (``panstream plan -u hashed-ip:M -n N``) rather than for the
2**32 addresses of ``ipv4:0.0.0.0/0``. Unlike ``hashed``, it validates every item as an address
and writes it one canonical way before hashing (see :meth:`Universe.hashed_ip`), so junk is
*malformed*, not a client, and one client is one bucket however its address is spelled.

Items outside the universe or malformed are never mapped to some cell: :meth:`Universe.indices`
drops them and reports how many it dropped.

The package (``panstream/universe.py`` until issue 36) is this module and
:mod:`panstream.universe.addresses`, one spelling per address (what an address universe's cell
is; ``panstream.inputs.normalize`` until then, still an alias). Kinds defined by features above
(``hashed-ip-country``, :mod:`panstream.country`) register themselves (:func:`register_kind`), and
the input side registers its vectorized batch reader (:func:`register_token_reader`): the universe
imports nothing above the pure core.

>>> u = Universe.ipv4("10.0.0.0/30")
>>> u.size, u.spec
(4, 'ipv4:10.0.0.0/30')
>>> r = u.indices(["10.0.0.3", "10.0.0.0", "10.0.1.0", "not an ip"])
>>> r.indices.tolist(), r.outside, r.malformed
([3, 0], 1, 1)
"""

from __future__ import annotations

import hashlib
import ipaddress
import socket
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from panstream.errors import ArgumentTypeError, ConfigurationError, ItemError, UniverseError
from panstream.universe.addresses import V4_MAPPED, AddressKeys, address_key

UniverseKind = Literal["ipv4", "ipv6", "range", "hashed", "hashed-ip"]
_BUILT_IN = ("ipv4", "ipv6", "range", "hashed", "hashed-ip")

#: The kinds whose cells are hash buckets (linear counting, collisions, no maps).
HASHED_KINDS = ("hashed", "hashed-ip")

#: The key of an IPv4 address among IPv6 ones: its IPv4-mapped form ``::ffff:a.b.c.d``.
_V4_MAPPED = V4_MAPPED
#: Domain tag mixed into the high half of an address key before hashing (public, fixed).
_ADDR_TAG = 0x7061_6E73_7472_6561  # "panstrea"

#: Largest number of cells a universe may have: 2**32 (a bit table of 512 MiB).
MAX_CELLS = 1 << 32

_U64 = np.uint64
_MASK64 = (1 << 64) - 1


class Dropped:
    """The items a batch dropped, in the command line's three classes (``malformed``, ``outside``,
    ``empty``: a result dataclass declares them), and their sum."""

    malformed: int
    outside: int
    empty: int

    @property
    def rejected(self) -> int:
        """Items dropped for any reason."""
        return self.malformed + self.outside + self.empty


@dataclass(frozen=True)
class IndexResult(Dropped):
    """Cell indices of the accepted items and the counts of rejected ones.

    Attributes:
        indices: ``intp`` array of cell indices of accepted items, in input order (``hashed-ip``:
            a large batch may give its IPv4 ``bytes`` items first; a table does not care).
        malformed: items that could not be parsed at all (wrong type, bad syntax).
        outside: well-formed items that lie outside the universe.
        empty: empty or all-whitespace ``str``/``bytes`` items.

    The three classes are the command line's (``docs/cli.md``, "Every line is counted in exactly
    one bucket"): an IPv6 address in an ``ipv4`` universe (or IPv4 in ``ipv6``) is *outside*, a
    negative integer in a ``range`` universe is *outside*, blank text is *empty* in every universe.
    """

    indices: np.ndarray
    malformed: int = 0
    outside: int = 0
    empty: int = 0


#: Types that are iterable but are one item, not a batch of items.
_TEXT_TYPES = (str, bytes, bytearray, memoryview)


def refuse_bare_item(items: object, call: str) -> None:
    """Refuse a bare ``str``/``bytes``/``bytearray``/``memoryview`` where an iterable of items is
    expected: iterating it would silently apply its characters (or byte values) as items.

    Args:
        items: what the caller passed.
        call: the method name, used in the message (``update``, ``indices``).

    Raises:
        ArgumentTypeError: ``items`` is one of those types, or not iterable at all (``update(5)``).
    """
    if isinstance(items, _TEXT_TYPES):
        example = "alice@example.com" if isinstance(items, str) else "10.0.0.1"
        wrap = f'["{example}"]' if isinstance(items, str) else f'[b"{example}"]'
        msg = (f"{call}() takes an iterable of items, but got one {type(items).__name__}: it would "
               f"count each of its characters as an item. Pass a list, e.g. {call}({wrap}); "
               "nothing was applied")
        raise ArgumentTypeError(msg)
    if not isinstance(items, Iterable):
        msg = (f"{call}() takes an iterable of items, but got one {type(items).__name__}: pass a "
               f"list, e.g. {call}([{items!r}]); nothing was applied")
        raise ArgumentTypeError(msg)


class _Blank(Exception):
    """An empty or all-whitespace text item (counted as *empty*, not malformed)."""


def _text(item: Any) -> str:
    """The stripped text of a ``str`` or ASCII ``bytes``-like item; raises for blank or other types."""
    if isinstance(item, (bytes, bytearray, memoryview)):
        item = bytes(item).decode("ascii")
    if not isinstance(item, str):
        raise TypeError
    s = item.strip()
    if not s:
        raise _Blank
    return s


def _is_address(text: str, family: int) -> bool:
    try:
        socket.inet_pton(family, text)
    except OSError:
        return False
    return True


#: What reading one item may raise when it is malformed (an address that is none, bad text, ...).
_MALFORMED = (ValueError, TypeError, OSError, UnicodeError, OverflowError)


def _each_read(items: Iterable[Any], read: Callable[[Any], Any], dropped: list[int]) -> Iterator[Any]:
    """``read(item)`` of every item that reads; a blank item adds 1 to ``dropped[0]`` (empty),
    one that does not read (:data:`_MALFORMED`) to ``dropped[1]`` (malformed)."""
    for item in items:
        try:
            v = read(item)
        except _Blank:
            dropped[0] += 1
            continue
        except _MALFORMED:
            dropped[1] += 1
            continue
        yield v


def _cells(n: Any, least: int, kind: str) -> int:
    """The number of cells ``n`` of a ``kind`` universe: an integer from ``least`` to 2**32.

    Raises:
        UniverseError: anything else.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not least <= int(n) <= MAX_CELLS:
        msg = f"{kind} universe size must be an integer from {least} to 2**32, got {n!r}"
        raise UniverseError(msg)
    return int(n)


def _network(cidr: Any, family: int, no_length: str, example: str
             ) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """The prefix ``cidr`` of an ``ipv4`` (``family`` ``AF_INET``) or ``ipv6`` universe.

    Raises:
        UniverseError: an address without ``/length`` (``no_length`` says what to write, ``{a}``
            the address), or no prefix (``example`` shows one).
    """
    name = "IPv4" if family == socket.AF_INET else "IPv6"
    if isinstance(cidr, str) and "/" not in cidr and _is_address(cidr.strip(), family):
        msg = f"{name} universe {cidr!r} has no prefix length: " + no_length.format(a=cidr.strip())
        raise UniverseError(msg)
    try:
        if family == socket.AF_INET:
            return ipaddress.IPv4Network(cidr, strict=True)
        return ipaddress.IPv6Network(cidr, strict=True)
    except (ValueError, TypeError) as exc:
        msg = f"invalid {name} universe {cidr!r}: {exc}; expected a prefix such as {example}"
        raise UniverseError(msg) from None


def _address_key(item: Any) -> int:
    """The canonical 128-bit key of an IPv4 or IPv6 address (IPv4 as ``::ffff:a.b.c.d``).

    Raises:
        ValueError, TypeError, OSError, UnicodeError: not an address; _Blank: blank text.
    """
    if isinstance(item, ipaddress.IPv4Address):
        return _V4_MAPPED | int(item)
    if isinstance(item, ipaddress.IPv6Address):
        item = int(item)
    elif isinstance(item, bool) or not isinstance(item, (int, np.integer)):
        key = address_key(_text(item))  # the one normalization of every address universe
        if key is None:
            raise ValueError
        return key
    if isinstance(item, bool):
        raise TypeError
    v = int(item)
    if not 0 <= v < (1 << 128):
        raise ValueError
    return _V4_MAPPED | v if v <= 0xFFFFFFFF else v


#: Universe kinds a feature above this package defines (``hashed-ip-country``: the country wing,
#: :mod:`panstream.country`): kind -> the parser of its spec. The feature registers its kind where
#: it defines it (:func:`register_kind`), so the universe names nothing above it; ``import
#: panstream`` imports every feature first, so every kind a user can type parses whenever any
#: panstream module is imported (tests/test_layers.py checks it from a fresh interpreter).
_KINDS: dict[str, Callable[[str], Universe]] = {}
#: The vectorized reader of a batch of ``bytes`` tokens (:func:`panstream.inputs.ipv4.token_keys`,
#: registered there): the canonical keys :func:`~panstream.universe.addresses.address_key` gives
#: item by item, in one pass.
_TOKEN_READER: list[Callable[[list[Any]], AddressKeys | None]] = []


def register_kind(kind: str, parse: Callable[[str], Universe]) -> None:
    """Let :meth:`Universe.parse` build the ``kind:...`` specs of a universe defined elsewhere.

    Raises:
        ValueError: ``kind`` is a built-in kind or already registered to another parser.
    """
    if kind in _BUILT_IN or _KINDS.get(kind, parse) is not parse:
        msg = f"universe kind {kind!r} is already defined"
        raise ValueError(msg)
    _KINDS[kind] = parse


def register_token_reader(read: Callable[[list[Any]], AddressKeys | None]) -> None:
    """Set the vectorized reader of ``bytes`` tokens that :meth:`Universe.indices` uses on large
    batches (it returns ``None`` for a batch it does not take: every item then goes the per-item
    way)."""
    _TOKEN_READER[:] = [read]


def _token_keys(items: list[Any]) -> AddressKeys | None:
    """The canonical items of a batch of ``bytes`` tokens (a log's client fields), read by the
    registered vectorized reader, or ``None`` (every item then goes the per-item way)."""
    return _TOKEN_READER[0](items) if _TOKEN_READER else None


def _hash_bytes(data: bytes, m: int) -> int:
    """Map bytes to a bucket in ``0..m-1``: BLAKE2b-64, then Lemire's multiply-shift reduction."""
    h = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
    return (h * m) >> 64


def _mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer: a fixed, public bijection of 64-bit integers (vectorized)."""
    z = x.astype(_U64, copy=True)
    with np.errstate(over="ignore"):
        z += _U64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> _U64(27))) * _U64(0x94D049BB133111EB)
        z ^= z >> _U64(31)
    return z


def _reduce64(h: np.ndarray, m: int) -> np.ndarray:
    """Vectorized ``(h * m) >> 64`` for uint64 ``h`` and ``m <= 2**32``: split ``h`` in 32-bit halves."""
    hi = h >> _U64(32)
    lo = h & _U64(0xFFFFFFFF)
    mm = _U64(m)
    # (hi*2^32 + lo) * m >> 64 == (hi*m + ((lo*m) >> 32)) >> 32 ; no term overflows for m <= 2^32.
    return ((hi * mm + ((lo * mm) >> _U64(32))) >> _U64(32)).astype(np.intp)


class Universe:
    """The public set X of cells a bit table ranges over. Build one with a classmethod or :meth:`parse`."""

    __slots__ = ("_base", "_granularity", "_prefix", "kind", "size", "spec")

    kind: UniverseKind
    size: int
    spec: str

    def __init__(self, kind: UniverseKind, size: int, spec: str, base: int = 0, prefix: int = 0,
                 granularity: int = 0) -> None:
        # Private: use the classmethods. They validate everything before getting here.
        self.kind = kind
        self.size = size
        self.spec = spec
        self._base = base
        self._prefix = prefix
        self._granularity = granularity

    # ------------------------------------------------------------------ constructors
    @classmethod
    def ipv4(cls, cidr: str) -> Universe:
        """All addresses of an IPv4 prefix, ``/0`` (2**32 cells) to ``/32`` (one cell).

        Raises:
            UniverseError: the prefix is malformed, has host bits set, or has no ``/length`` (an
                address alone would silently mean a one-cell universe: write ``/32`` for that).
        """
        net = _network(cidr, socket.AF_INET, "give one, e.g. {a}/16; for a single address (1 cell) "
                       "write {a}/32", "10.0.0.0/16")
        return cls("ipv4", net.num_addresses, f"ipv4:{net.with_prefixlen}",
                   base=int(net.network_address), prefix=net.prefixlen)

    @classmethod
    def ipv6(cls, cidr: str, granularity: int = 64) -> Universe:
        """The ``/granularity`` subnets of an IPv6 prefix; at most 2**32 cells.

        ``Universe.ipv6("2001:db8::/48", 64)`` has 2**16 cells, one per /64 (one per customer LAN).

        Raises:
            UniverseError: malformed prefix or no ``/length``, granularity shorter than the prefix or
                over 128, or more than 2**32 cells.
        """
        net = _network(cidr, socket.AF_INET6, "give one, e.g. {a}/48 (cells are /64 subnets unless "
                       "you add @G)", "2001:db8::/48")
        if not isinstance(granularity, int) or not net.prefixlen <= granularity <= 128:
            msg = (f"IPv6 granularity /{granularity} must lie between the prefix length "
                   f"/{net.prefixlen} and /128")
            raise UniverseError(msg)
        bits = granularity - net.prefixlen
        if bits > 32:
            msg = (f"ipv6 universe {net.with_prefixlen} at /{granularity} has 2**{bits} cells; at most "
                   f"2**32 are supported: use a longer prefix or a coarser granularity "
                   f"(e.g. @{net.prefixlen + 32})")
            raise UniverseError(msg)
        return cls("ipv6", 1 << bits, f"ipv6:{net.with_prefixlen}@{granularity}",
                   base=int(net.network_address) >> (128 - granularity), prefix=net.prefixlen,
                   granularity=granularity)

    @classmethod
    def range(cls, n: int) -> Universe:
        """The integers ``0..n-1`` (1 <= n <= 2**32)."""
        n = _cells(n, 1, "range")
        return cls("range", n, f"range:{n}")

    @classmethod
    def hashed(cls, m: int) -> Universe:
        """Arbitrary identifiers (str, bytes, int) hashed into ``m`` buckets (2 <= m <= 2**32).

        Strings are hashed as their UTF-8 bytes (without surrounding whitespace; blank ones are
        *empty*) with BLAKE2b-64; integers by the SplitMix64 mixer of
        their 64-bit value. The hash is fixed and public (no key): the bit table is private with
        respect to buckets, so it needs no secret. Collisions make the raw density undercount
        distinct identifiers; the estimator corrects for that with linear counting.
        """
        m = _cells(m, 2, "hashed")
        return cls("hashed", m, f"hashed:{m}")

    @classmethod
    def hashed_ip(cls, m: int) -> Universe:
        """IPv4 and IPv6 client addresses hashed into ``m`` buckets (2 <= m <= 2**32).

        Every item must be an address; it is validated and written one canonical way first:

        * IPv4: four decimal octets as Python's ``ipaddress`` accepts them (no leading zeros, no
          ``inet_aton`` spellings), or an ``int`` 0..2**32-1 (as ``ipaddress.ip_address`` reads
          it), or an ``IPv4Address``;
        * IPv6: any valid spelling (upper or lower case, ``::`` anywhere, an embedded dotted quad),
          a ``%zone`` suffix dropped, brackets and a ``:port``, or an ``int`` 2**32..2**128-1, or
          an ``IPv6Address``;
        * ``a.b.c.d:port`` (ALB, ELB, Envoy, HAProxy) is the IPv4 address;
        * an IPv4-mapped IPv6 address ``::ffff:a.b.c.d`` *is* the IPv4 address ``a.b.c.d`` (a
          dual-stack server logs its IPv4 clients that way): both are one bucket.

        The canonical form is the 128-bit address (IPv4 as ``::ffff:a.b.c.d``); its two 64-bit
        halves are hashed with the public SplitMix64 mixer, ``mix(mix(hi ^ tag) ^ lo)``, and
        reduced to ``m`` buckets by multiply-shift. No two IPv4 addresses share a hash before the
        reduction (the mix is a bijection of ``lo``). Text is read by the one normalization of
        every address universe (:func:`panstream.universe.addresses.address_key`), so ``1.2.3.4:80``,
        ``[2001:db8::1]:443`` and ``fe80::1%eth0`` are their addresses; anything else (``-``,
        ``unknown``, a host name, ``1.2.3.4:99999``) is *malformed*; nothing is *outside*.

        >>> u = Universe.hashed_ip(1 << 17)
        >>> a, b = u.index_of("192.0.2.1"), u.index_of("::FFFF:192.0.2.1")
        >>> a == b == u.index_of(3221225985), u.spec
        (True, 'hashed-ip:131072')
        >>> r = u.indices(["2001:db8::1", "[2001:DB8:0::1]:443", "-", "unknown", "10.0.0.010"])
        >>> r.indices.size, r.malformed, bool(r.indices[0] == r.indices[1])
        (2, 3, True)
        """
        m = _cells(m, 2, "hashed-ip")
        return cls("hashed-ip", m, f"hashed-ip:{m}")

    @property
    def reads_addresses(self) -> bool:
        """Whether items are client addresses read in the one normalization of
        :mod:`panstream.universe.addresses` (``ipv4``, ``ipv6``, ``hashed-ip``; a sketch's ``:ip`` grid)."""
        return self.kind in ("ipv4", "ipv6", "hashed-ip")

    def address_cells(self, keys: AddressKeys) -> IndexResult:
        """Cells of canonical address items (:func:`panstream.universe.addresses.address_keys`, or the
        vectorized parsers' IPv4 clients), with the items outside the universe counted; the keys
        are wiped. An IPv4 client (``::ffff:a.b.c.d`` included) is outside an ``ipv6`` universe,
        an IPv6 client outside an ``ipv4`` one.

        >>> from panstream.universe.addresses import address_keys
        >>> u = Universe.ipv4("10.0.0.0/8")
        >>> r = u.address_cells(address_keys([b"10.0.0.1:443", b"[::ffff:10.0.0.2]:80", b"::1", b"x"]))
        >>> r.indices.tolist(), r.outside
        ([1, 2], 1)
        """
        v4, hi, lo = keys.v4, keys.v6_hi, keys.v6_lo
        try:
            if self.kind == "ipv4":
                idx = v4 - np.uint32(self._base)  # wraps: addresses below the prefix become large
                if self.size >= MAX_CELLS:
                    out = idx.astype(np.intp)
                else:
                    inside = idx < self.size
                    out = idx[inside].astype(np.intp)
                    inside.fill(False)
                idx.fill(0)
                return IndexResult(out, outside=int(v4.size - out.size + hi.size))
            if self.kind == "ipv6":
                out = self._ipv6_cells(hi, lo)
                return IndexResult(out, outside=int(v4.size + hi.size - out.size))
            if self.kind == "hashed-ip":
                khi = np.zeros(v4.size + hi.size, dtype=_U64)
                khi[v4.size:] = hi
                klo = np.empty(v4.size + lo.size, dtype=_U64)
                klo[: v4.size] = v4
                klo[: v4.size] |= _U64(_V4_MAPPED)
                klo[v4.size:] = lo
                return IndexResult(self._hash_keys(khi, klo))  # wipes khi, klo
        finally:
            keys.wipe()
        msg = f"universe {self.spec} does not read addresses"
        raise ConfigurationError(msg)

    def _ipv6_cells(self, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
        """Cells of 128-bit keys (``uint64`` halves) in this ``ipv6`` universe, vectorized: the
        keys whose first ``prefix`` bits are the network's, each to the ``granularity``-bit
        prefix below it (issue 38: was one Python int per key)."""
        shift = 128 - self._granularity
        net = self._base << shift
        one, full = _U64(1), (1 << 64) - 1
        p_hi, p_lo = min(self._prefix, 64), max(self._prefix - 64, 0)
        m_hi = _U64((full << (64 - p_hi)) & full)
        m_lo = _U64((full << (64 - p_lo)) & full)
        inside = (hi & m_hi) == _U64((net >> 64) & m_hi)
        inside &= (lo & m_lo) == _U64(net & full & m_lo)
        h, x = hi[inside], lo[inside]
        if shift >= 64:
            c = h >> _U64(shift - 64)
        elif shift == 0:
            c = x.copy()
        else:
            c = (h << _U64(64 - shift)) | (x >> _U64(shift))
        c &= _U64(self.size) - one
        out = c.astype(np.intp)
        for a in (h, x, c):
            a.fill(0)
        inside.fill(False)
        return out

    def token_cells(self, keys: AddressKeys) -> IndexResult:
        """:meth:`address_cells` of ``keys``, with their malformed and blank tokens counted."""
        malformed, empty = keys.malformed, keys.empty
        r = self.address_cells(keys)
        return IndexResult(r.indices, malformed=malformed, outside=r.outside, empty=empty)

    @property
    def is_hashed(self) -> bool:
        """Whether cells are hash buckets (``hashed`` or ``hashed-ip``): distinct counts use linear
        counting and carry a collision error; a cell names no item."""
        return self.kind in HASHED_KINDS

    @classmethod
    def parse(cls, spec: str) -> Universe:
        """Build a universe from its spec: ``ipv4:CIDR``, ``ipv6:CIDR@G``, ``range:N``, ``hashed:M``
        or ``hashed-ip:M``.

        >>> Universe.parse("ipv6:2001:db8::/48@64").size
        65536
        """
        if not isinstance(spec, str) or ":" not in spec:
            msg = (f"invalid universe spec {spec!r}: expected one of ipv4:10.0.0.0/16, "
                   "ipv6:2001:db8::/48@64, range:1000000, hashed:1048576, hashed-ip:131072")
            raise UniverseError(msg)
        kind, _, arg = spec.strip().partition(":")
        kind = kind.lower()
        if kind == "ipv4":
            return cls.ipv4(arg)
        if kind == "ipv6":
            prefix, at, g = arg.partition("@")
            try:
                gran = int(g) if at else 64
            except ValueError:
                msg = f"invalid IPv6 granularity {g!r} in {spec!r}: expected e.g. @64"
                raise UniverseError(msg) from None
            return cls.ipv6(prefix, gran)
        if kind in _KINDS:  # a kind a feature registered (hashed-ip-country: panstream.country)
            return _KINDS[kind](spec)
        if kind in ("range", "hashed", "hashed-ip"):
            try:
                n = int(arg.replace("_", ""), 0) if not arg.startswith("2**") else 2 ** int(arg[3:])
            except ValueError:
                msg = f"invalid size {arg!r} in universe spec {spec!r}: expected an integer"
                raise UniverseError(msg) from None
            return (cls.range(n) if kind == "range" else cls.hashed(n) if kind == "hashed"
                    else cls.hashed_ip(n))
        msg = (f"unknown universe kind {kind!r} in {spec!r}: use ipv4, ipv6, range, hashed or "
               "hashed-ip")
        raise UniverseError(msg)

    # ------------------------------------------------------------------ mapping
    def indices(self, items: Iterable[Any] | np.ndarray) -> IndexResult:
        """Map items to cell indices, dropping (and counting) malformed and outside items.

        Integer NumPy arrays take a vectorized path: for ``ipv4`` and ``hashed-ip`` they hold
        addresses as integers, for ``range`` the integers themselves, for ``hashed`` values to hash.
        Anything else is mapped item by item: ``str`` or ASCII ``bytes`` text for addresses,
        ``int`` for integers and addresses, any ``str``/``bytes``/``int`` for ``hashed``.

        Raises:
            ArgumentTypeError: ``items`` is a bare ``str``, ``bytes``, ``bytearray`` or
                ``memoryview`` (one item, not an iterable of items): pass a list.
        """
        refuse_bare_item(items, "indices")
        if self.reads_addresses and isinstance(items, list) and len(items) >= 64:
            keys = _token_keys(items)
            if keys is not None:  # a batch of log tokens: read like the lines of a log
                return self.token_cells(keys)
        if self.kind == "hashed-ip":
            return self._indices_addresses(items)
        if isinstance(items, np.ndarray) and items.dtype.kind in "iu":
            return self._indices_int_array(items)
        return self._indices_objects(items)

    def index_of(self, item: Any) -> int:
        """The cell of one item.

        Raises:
            ItemError: the item is malformed or outside the universe.
        """
        result = self.indices([item])
        if result.indices.size:
            return int(result.indices[0])
        why = ("is malformed" if result.malformed else "is empty" if result.empty
               else "lies outside")
        msg = f"item {why} for universe {self.spec}"
        raise ItemError(msg)

    def item_of(self, index: int) -> str:
        """A representative item of a cell (the address or subnet, or the integer). Not for hashed."""
        if not 0 <= index < self.size:
            msg = f"cell index {index} outside 0..{self.size - 1}"
            raise ItemError(msg)
        if self.kind == "ipv4":
            return str(ipaddress.IPv4Address(self._base + index))
        if self.kind == "ipv6":
            addr = (self._base + index) << (128 - self._granularity)
            return f"{ipaddress.IPv6Address(addr)}/{self._granularity}"
        if self.kind == "range":
            return str(index)
        msg = f"a hashed universe ({self.spec}) cannot name the items of a bucket"
        raise ConfigurationError(msg)

    def _indices_int_array(self, arr: np.ndarray) -> IndexResult:
        n = arr.size
        if self.kind == "hashed":
            return IndexResult(_reduce64(_mix64(arr.astype(np.int64, copy=False).view(_U64)),
                                         self.size))
        if self.kind == "ipv6":
            return self._indices_objects(arr.tolist())
        if arr.dtype.kind == "u" and arr.dtype.itemsize == 8:
            if n and int(arr.max()) >= (1 << 62):
                arr = np.where(arr >= (1 << 62), _U64(1 << 62), arr)
            arr = arr.astype(np.int64)
        idx = arr.astype(np.intp, copy=True)
        if self._base:
            idx -= self._base
        if n and int(idx.min()) >= 0 and int(idx.max()) < self.size:
            return IndexResult(idx)  # every item inside (two reductions instead of a mask)
        ok = (idx >= 0) & (idx < self.size)
        if bool(ok.all()):
            return IndexResult(idx)
        kept = idx[ok]
        bad = int(n - kept.size)
        idx.fill(0)
        if self.kind == "ipv4":
            # Integers that are no IPv4 address at all are malformed; addresses elsewhere are outside.
            a = arr[~ok]
            malformed = int(((a < 0) | (a > 0xFFFFFFFF)).sum())
            return IndexResult(kept, malformed=malformed, outside=bad - malformed)
        return IndexResult(kept, outside=bad)

    def _indices_addresses(self, items: Iterable[Any] | np.ndarray) -> IndexResult:
        """``hashed-ip``: canonical 128-bit keys of the valid addresses, hashed in one pass."""
        if isinstance(items, np.ndarray) and items.dtype.kind in "iu":
            # Integers are addresses as ipaddress.ip_address reads them: IPv4 below 2**32.
            ok = items >= 0
            lo = items[ok].astype(_U64)
            lo[lo <= _U64(0xFFFFFFFF)] |= _U64(_V4_MAPPED)
            hi = np.zeros(lo.size, dtype=_U64)
            bad = int(items.size - lo.size)
            ok.fill(False)
            return IndexResult(self._hash_keys(hi, lo), malformed=bad)
        his: list[int] = []
        los: list[int] = []
        dropped = [0, 0]
        for k in _each_read(items, _address_key, dropped):
            his.append(k >> 64)
            los.append(k & _MASK64)
        hi = np.fromiter(his, dtype=_U64, count=len(his))
        lo = np.fromiter(los, dtype=_U64, count=len(los))
        his.clear()
        los.clear()
        return IndexResult(self._hash_keys(hi, lo), malformed=dropped[1], empty=dropped[0])

    def _hash_keys(self, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
        """Buckets of 128-bit keys given as uint64 halves: ``reduce(mix(mix(hi ^ tag) ^ lo))``;
        the key arrays are wiped."""
        h = _mix64(_mix64(hi ^ _U64(_ADDR_TAG)) ^ lo)
        hi.fill(0)
        lo.fill(0)
        out = _reduce64(h, self.size)
        h.fill(0)
        return out

    def _indices_objects(self, items: Iterable[Any]) -> IndexResult:
        out: list[int] = []
        outside = 0
        dropped = [0, 0]
        size = self.size
        for v in _each_read(items, self._converter(), dropped):
            if v is None or not 0 <= v < size:
                outside += 1
            else:
                out.append(v)
        idx = np.fromiter(out, dtype=np.intp, count=len(out))
        out.clear()
        return IndexResult(idx, malformed=dropped[1], outside=outside, empty=dropped[0])

    def _converter(self) -> Any:
        kind, base = self.kind, self._base
        if kind == "ipv4":
            def ipv4(item: Any) -> int | None:
                if isinstance(item, (int, np.integer)) and not isinstance(item, bool):
                    if not 0 <= int(item) <= 0xFFFFFFFF:
                        raise ValueError
                    return int(item) - base
                key = address_key(_text(item))  # a.b.c.d:port, ::ffff:a.b.c.d, [v6]:port, ...
                if key is None:
                    raise ValueError
                if key >> 32 != _V4_MAPPED >> 32:
                    return None  # an IPv6 client (dual-stack log): outside
                return (key & 0xFFFFFFFF) - base
            return ipv4
        if kind == "ipv6":
            shift = 128 - self._granularity

            def ipv6(item: Any) -> int | None:
                if isinstance(item, (int, np.integer)) and not isinstance(item, bool):
                    if not 0 <= int(item) < (1 << 128):
                        raise ValueError
                    a = int(item)
                else:
                    key = address_key(_text(item))  # [v6]:port, zone ids, a.b.c.d:port, ...
                    if key is None:
                        raise ValueError
                    if key >> 32 == _V4_MAPPED >> 32:
                        return None  # an IPv4 client (also written ::ffff:a.b.c.d): outside
                    a = key
                return (a >> shift) - base
            return ipv6
        if kind == "range":
            def rng(item: Any) -> int | None:
                if isinstance(item, bool):
                    raise TypeError
                if isinstance(item, (int, np.integer)):
                    return int(item)
                s = _text(item)
                if not s.removeprefix("-").isdigit() or not s.isascii():
                    raise ValueError
                return int(s)  # a negative integer is well formed: outside
            return rng
        m = self.size

        def hashed(item: Any) -> int:
            if isinstance(item, str):
                s = item.strip()
                if not s:
                    raise _Blank
                return _hash_bytes(s.encode("utf-8"), m)
            if isinstance(item, (bytes, bytearray, memoryview)):
                b = bytes(item).strip()
                if not b:
                    raise _Blank
                return _hash_bytes(b, m)
            if isinstance(item, (int, np.integer)) and not isinstance(item, bool):
                v = int(item)
                if not -(1 << 63) <= v < (1 << 64):
                    raise OverflowError
                h = _mix64(np.array([v & _MASK64], dtype=_U64))
                return int(_reduce64(h, m)[0])
            raise TypeError
        return hashed

    # ------------------------------------------------------------------ what a state pins
    def state_params(self) -> dict[str, Any]:
        """Public parameters beyond the spec that a state over this universe records (none here;
        a by-country universe records the country table its cells were computed with, which a
        family appends to its :meth:`~panstream.estimators.base.Estimator.params`)."""
        return {}

    def pin_state(self, params: Mapping[str, Any]) -> None:
        """Check, and take back, what :meth:`state_params` recorded in a snapshot's ``params``
        (a family calls it before it adopts the snapshot's table). Nothing to take here.

        Raises:
            StateError: the snapshot's parameters cannot be read by this panstream.
        """

    def unpin_state(self) -> None:
        """Forget what a state pinned: :meth:`~panstream.estimators.base.Estimator.rotate` draws
        a fresh table, which pins afresh. Nothing to forget here."""

    # ------------------------------------------------------------------ dunder
    def __eq__(self, other: object) -> bool:
        return isinstance(other, Universe) and other.spec == self.spec

    def __hash__(self) -> int:
        return hash(self.spec)

    def __repr__(self) -> str:
        return f"Universe.parse({self.spec!r})  # {self.size} cells"
