"""Address normalization: the spellings real logs use for one client address, reduced to one.

Logs write a client address in several ways besides the plain address: with the client's port
(``10.0.0.1:51234`` in AWS ALB/ELB and Envoy logs), in brackets with a port (``[2001:db8::1]:443``),
with an IPv6 zone id (``fe80::1%eth0``), or as an IPv4-mapped IPv6 address (``::ffff:10.0.0.1``, what
a dual-stack server listening on ``[::]`` logs for an IPv4 client). :func:`normalize_address` strips
the port, the brackets and the zone id and, where asked, turns an IPv4-mapped address into its IPv4
address. A token that is none of these is returned unchanged (so junk stays junk and is counted as
malformed by the universe).

The vectorized IPv4 parser handles ``a.b.c.d:port`` itself (:func:`panstream.inputs.parser.LineParser`); this
module is the reference for it and the slow path for everything else.

>>> normalize_address(b"10.0.0.1:8080"), normalize_address(b"[2001:db8::1]:443")
(b'10.0.0.1', b'2001:db8::1')
>>> normalize_address(b"fe80::1%eth0"), normalize_address(b"::FFFF:10.0.0.1")
(b'fe80::1', b'10.0.0.1')
>>> normalize_address(b"::ffff:10.0.0.1", mapped_to_ipv4=False)
b'::ffff:10.0.0.1'
>>> normalize_address(b"alice:42"), normalize_address(b"1.2.3.4:99999")
(b'alice:42', b'1.2.3.4:99999')
"""

from __future__ import annotations

import ipaddress

_DOTTED = frozenset(b"0123456789.")


def _port_ok(port: bytes) -> bool:
    return 1 <= len(port) <= 5 and port.isdigit() and int(port) <= 65535


def normalize_address(token: bytes, mapped_to_ipv4: bool = True) -> bytes:
    """One canonical spelling of an address token (see the module docstring).

    Args:
        token: the token as the log wrote it (surrounding whitespace is ignored).
        mapped_to_ipv4: turn ``::ffff:a.b.c.d`` into ``a.b.c.d`` (for ``ipv4`` universes; an
            ``ipv6`` universe keeps the mapped address as IPv6).

    Returns:
        The address without port, brackets or zone id (and the IPv4 address of a mapped one), or
        ``token`` unchanged when it is not one of these spellings.
    """
    t = token.strip()
    if t[:1] == b"[":  # [v6] or [v6]:port
        j = t.find(b"]")
        if j < 2:
            return token
        rest = t[j + 1:]
        if b":" not in t[1:j] or (rest and not (rest[:1] == b":" and _port_ok(rest[1:]))):
            return token  # brackets hold IPv6 addresses only (RFC 3986)
        t = t[1:j]
    elif t.count(b":") == 1:  # a.b.c.d:port (never an IPv6 address: those have two colons)
        host, _, port = t.partition(b":")
        if host and _port_ok(port) and set(host) <= _DOTTED:
            return host
        return token
    z = t.find(b"%")
    if z > 0 and b":" in t[:z]:  # an IPv6 zone id (fe80::1%eth0)
        t = t[:z]
    if mapped_to_ipv4 and b"." in t and t[:2] in (b"::", b"0:") and b":" in t:
        try:
            m = ipaddress.IPv6Address(t.decode("ascii")).ipv4_mapped
        except (ValueError, UnicodeDecodeError):
            return t
        if m is not None:
            return str(m).encode()
    return t
