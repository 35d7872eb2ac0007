"""Address normalization: every spelling real logs use for one client address, reduced to one item.

Logs write a client address in several ways besides the plain address: with the client's port
(``10.0.0.1:51234`` in AWS ALB/ELB, Envoy and HAProxy logs), in brackets with a port
(``[2001:db8::1]:443``), with an IPv6 zone id (``fe80::1%eth0``), or as an IPv4-mapped IPv6 address
(``::ffff:10.0.0.1``, what a dual-stack server listening on ``[::]`` logs for an IPv4 client).

**One normalization for every universe.** :func:`address_key` is the reference: it reads one
token and returns its *canonical item*, the 128-bit address with an IPv4 client written as its
IPv4-mapped form ``::ffff:a.b.c.d``, or ``None`` when the token is no address. Every address
universe reads that key and nothing else: ``ipv4:`` and ``ipv6:`` tables (an IPv4 client, mapped
or not, is *outside* an ``ipv6`` universe; an IPv6 client outside an ``ipv4`` one), ``hashed-ip:M``
(which hashes the key) and the sketch's ``:ip`` grids (which hash the key's canonical text,
:func:`canonical_text`: dotted decimal for IPv4, RFC 5952 for IPv6, as Presto's
``CAST(ipaddress AS varchar)`` prints it). So one client is one cell however the log spells it,
in every format and every universe.

Accepted spellings (surrounding whitespace ignored):

* ``a.b.c.d``: four decimal octets as :class:`ipaddress.IPv4Address` accepts them (no leading
  zeros, no ``inet_aton`` forms);
* ``a.b.c.d:port``, the port 0..65535 in one to five digits;
* any IPv6 text :func:`socket.inet_pton` accepts (any case, ``::`` anywhere, an embedded dotted
  quad), optionally with a non-empty ``%zone`` (dropped);
* ``[v6]`` and ``[v6]:port`` (brackets hold IPv6 only, RFC 3986; ``[v6%zone]:port`` too);
* an IPv4-mapped IPv6 address in any of the IPv6 forms (``::ffff:a.b.c.d``, ``::FFFF:C633:6407``,
  ``[::ffff:a.b.c.d]:443``) *is* the IPv4 client.

Anything else (``-``, host names, ``1.2.3.4:99999``, ``[10.0.0.1]``, ``fe80::1%``) is malformed.
The vectorized parsers read the common forms themselves, exactly as this reference does: IPv4
(``a.b.c.d``, ``a.b.c.d:port``, ``::ffff:a.b.c.d``) in :mod:`panstream.inputs.ipv4`, and since
issue 38 every IPv6 spelling above in :mod:`panstream.inputs.ipv6` (tested over one table of
spellings, ``tests/core/test_address_spellings.py``, and a fuzzed corpus of them,
``tests/parse/test_ipv6_fast.py``); they hand every other token to it.

>>> hex(address_key(b"10.0.0.1:8080")), address_key(b"[::ffff:10.0.0.1]:443") == address_key(b"10.0.0.1")
('0xffff0a000001', True)
>>> canonical_text(address_key(b"[2001:DB8::1]:443")), canonical_text(address_key(b"fe80::1%eth0"))
(b'2001:db8::1', b'fe80::1')
>>> normalize_address(b"10.0.0.1:8080"), normalize_address(b"[2001:db8::1]:443")
(b'10.0.0.1', b'2001:db8::1')
>>> normalize_address(b"::ffff:10.0.0.1", mapped_to_ipv4=False)
b'::ffff:10.0.0.1'
>>> normalize_address(b"alice:42"), normalize_address(b"1.2.3.4:99999")
(b'alice:42', b'1.2.3.4:99999')
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["V4_MAPPED", "AddressKeys", "address_key", "address_keys", "canonical_text",
           "is_ipv4_key", "normalize_address"]

#: The key of an IPv4 address ``a.b.c.d``: ``V4_MAPPED | a.b.c.d`` (``::ffff:a.b.c.d``).
V4_MAPPED = 0xFFFF << 32
_V4_HIGH = 0xFFFF  # key >> 32 of every IPv4 key
_U64 = np.uint64
_MASK64 = (1 << 64) - 1
_AF4, _AF6 = socket.AF_INET, socket.AF_INET6


def _port_ok(port: str) -> bool:
    return 1 <= len(port) <= 5 and port.isdigit() and port.isascii() and int(port) <= 65535


def _v4(text: str) -> int | None:
    try:
        return V4_MAPPED | int.from_bytes(socket.inet_pton(_AF4, text), "big")
    except (OSError, ValueError):
        return None


def _v6(text: str) -> int | None:
    addr, pct, zone = text.partition("%")
    if pct and not zone:
        return None
    try:
        return int.from_bytes(socket.inet_pton(_AF6, addr), "big")
    except (OSError, ValueError):
        return None


def address_key(token: bytes | bytearray | memoryview | str) -> int | None:
    """The canonical item of one address token: the 128-bit address (IPv4 as ``::ffff:a.b.c.d``),
    or ``None`` if the token is no address in any accepted spelling (see the module docstring).

    A blank token is ``None`` too: callers that count blank items apart check for them first.

    >>> address_key(b"1.2.3.4:80") == address_key("::FFFF:1.2.3.4") == 0xFFFF01020304
    True
    >>> address_key(b"[::1]"), address_key(b"[10.0.0.1]"), address_key(b"10.0.0.1:65536")
    (1, None, None)
    """
    if isinstance(token, (bytes, bytearray, memoryview)):
        try:
            text = bytes(token).strip().decode("ascii")
        except UnicodeDecodeError:
            return None
    else:
        text = token.strip()
    colons = text.count(":")
    if colons == 0:
        return _v4(text)
    if text[:1] == "[":  # [v6] or [v6]:port
        j = text.find("]")
        rest = text[j + 1:]
        if j < 0 or ":" not in text[1:j] or (rest and not (rest[:1] == ":" and _port_ok(rest[1:]))):
            return None
        return _v6(text[1:j])
    if colons == 1:  # a.b.c.d:port (an IPv6 address has at least two colons)
        host, _, port = text.partition(":")
        return _v4(host) if _port_ok(port) else None
    return _v6(text)


def is_ipv4_key(key: int) -> bool:
    """Whether a canonical key is an IPv4 client (``::ffff:a.b.c.d``)."""
    return key >> 32 == _V4_HIGH


def canonical_text(key: int) -> bytes:
    """The one way the client of ``key`` is written: dotted decimal for IPv4, RFC 5952 text for
    IPv6 (lowercase, longest zero run compressed, as Python's :mod:`ipaddress` and Presto's
    ``CAST(ipaddress AS varchar)`` print it).

    >>> canonical_text(0xFFFF0A000001), canonical_text(0x20010DB8 << 96 | 1), canonical_text(1)
    (b'10.0.0.1', b'2001:db8::1', b'::1')
    """
    if key >> 32 == _V4_HIGH:
        return socket.inet_ntop(_AF4, (key & 0xFFFFFFFF).to_bytes(4, "big")).encode("ascii")
    if key >> 32 == 0:  # glibc writes ::a.b.c.d here; RFC 5952 (and Guava) write hex
        return str(ipaddress.IPv6Address(key)).encode("ascii")
    return socket.inet_ntop(_AF6, key.to_bytes(16, "big")).encode("ascii")


def normalize_address(token: bytes, mapped_to_ipv4: bool = True) -> bytes:
    """The canonical spelling of an address token (:func:`canonical_text` of its
    :func:`address_key`), or ``token`` unchanged when it is no address.

    Args:
        token: the token as the log wrote it (surrounding whitespace is ignored).
        mapped_to_ipv4: write an IPv4 client as ``a.b.c.d`` (the default, what every universe
            reads); ``False`` writes it as the IPv6 text ``::ffff:a.b.c.d``.
    """
    key = address_key(token)
    if key is None:
        return token
    if not mapped_to_ipv4 and key >> 32 == _V4_HIGH:
        return socket.inet_ntop(_AF6, key.to_bytes(16, "big")).encode("ascii")  # ::ffff:a.b.c.d
    return canonical_text(key)


@dataclass
class AddressKeys:
    """The canonical items of a batch of tokens, split by family.

    Attributes:
        v4: ``uint32`` IPv4 clients.
        v6_hi, v6_lo: the two ``uint64`` halves of the IPv6 clients' 128-bit addresses.
        malformed: tokens that are no address.
        empty: blank tokens.
        v6_text: ``None``, or the IPv6 clients' RFC 5952 text where the log already wrote it so
            (``(rows, n)``: ``uint8`` rows that start with the texts, and their lengths, 0 where
            not given): what a sketch hashes, taken from the log instead of written again
            (issue 38).
    """

    v4: np.ndarray
    v6_hi: np.ndarray
    v6_lo: np.ndarray
    malformed: int = 0
    empty: int = 0
    v6_text: tuple[np.ndarray, np.ndarray] | None = None

    def wipe(self) -> None:
        """Overwrite the addresses (and their text) with zeros (they are items)."""
        for a in (self.v4, self.v6_hi, self.v6_lo, *(self.v6_text or ())):
            a.fill(0)


def address_keys(tokens: Iterable[Any]) -> AddressKeys:
    """:func:`address_key` of every text token (``bytes`` or ``str``), split by family; other item
    types are malformed. The Python reference path: the vectorized parsers call it only for the
    tokens they do not read themselves."""
    v4: list[int] = []
    his: list[int] = []
    los: list[int] = []
    malformed = empty = 0
    for t in tokens:
        if not isinstance(t, (bytes, bytearray, memoryview, str)):
            malformed += 1
            continue
        key = address_key(t)
        if key is None:
            if not (t.strip() if isinstance(t, (bytes, str)) else bytes(t).strip()):
                empty += 1
            else:
                malformed += 1
        elif key >> 32 == _V4_HIGH:
            v4.append(key & 0xFFFFFFFF)
        else:
            his.append(key >> 64)
            los.append(key & _MASK64)
    out = AddressKeys(np.array(v4, dtype=np.uint32), np.array(his, dtype=_U64),
                      np.array(los, dtype=_U64), malformed, empty)
    for lst in (v4, his, los):
        lst.clear()
    return out
