"""Strict, vectorized parsers of log lines held in byte buffers.

The command line reads logs in chunks of about 2 MiB that end on a line boundary
(:mod:`panstream.sources`) and hands each chunk to a :class:`LineParser`, which returns the cell indices
of the accepted items and the counts of the rejected lines. Nothing here keeps a line, an item or a
count beyond the call; the working arrays that hold addresses are overwritten with zeros before
returning.

Formats (``--format``):

``plain``
    One item per line; surrounding spaces, tabs and a trailing CR are tolerated.
``clf``
    Apache/nginx common or combined log: the item is the first field, up to the first space.
``field:N``, ``alb``, ``elb``, ``vhost``
    The N-th whitespace-separated field (1-based, like awk's ``$N``; ALB = 4, ELB = 3, Apache
    ``vhost_combined`` = 2).
``json:PATH``, ``csv:COLUMN``, ``tsv:COLUMN``, ``w3c:FIELD``, ``zeek:FIELD``, ``regex:PATTERN``,
``sshd``, ``xff[:CIDR,...]``
    The extractors of :mod:`panstream.inputs.extractors` (docs/logs.md has a recipe for each).
``auto``
    Recognised per input from its first lines (:func:`detect`), which names its choice.

Address spellings (``a.b.c.d:port``, ``[v6]:port``, zone ids, ``::ffff:a.b.c.d`` in ``ipv4``
universes) are reduced to the address in every format (:mod:`panstream.inputs.normalize`); the
vectorized paths read ``:port`` and ``::ffff:`` themselves.

Strictness: an IPv4 address is accepted exactly when :class:`ipaddress.IPv4Address` accepts it: four
decimal octets 0..255 of one to three ASCII digits, no leading zeros, nothing else (``inet_aton``'s
``1``, ``0x7f.1`` and octal ``010.1.1.1`` are rejected). In an ``ipv4`` universe a well-formed IPv6
address is counted as *outside* (a dual-stack log), anything else unparsable as *malformed*. Empty
(or all-blank) lines are counted separately (*empty*, in every format). Of a line longer than
:data:`MAX_LINE` bytes only the head is read: in ``clf`` and ``field:N`` its item is taken if the
field ends (is followed by whitespace) within the first ``MAX_LINE + 1`` bytes, so a request with a
long URL or user agent keeps its client; in ``plain`` (the item is the whole line) it is malformed.

Fast path (``ipv4`` universes, ``plain`` and ``clf``; the other formats locate their token with
:mod:`panstream.inputs.extractors`, then validate it the same way): no Python work per line. Newline positions
come from a ``flatnonzero`` over the chunk's newline flags viewed as 64-bit words; the first 16 bytes
of every line are gathered into an ``n x 16`` matrix in one fancy index of 16-byte items; each row's
byte classes (dot; digit, dot or ``/``) are packed into 16-bit masks; a table indexed by the dot mask
plus a terminator bit gives the structure (exactly three dots, octets of one to three characters)
and where each octet ends; three nibbles per octet, shifted out of the row's packed nibbles, index
tables of octet values that reject leading zeros, values over 255 and ``/``. Rejected lines (rare
in real logs) get a second look in Python, only to tell blank padding, empty lines and IPv6
addresses apart from junk. Other universes (``ipv6``, ``range``,
``hashed``) and ``field:N`` split lines in Python and map tokens with :meth:`Universe.indices`.

>>> from panstream.universe import Universe
>>> p = LineParser(Universe.ipv4("10.0.0.0/8"), "plain")
>>> r = p.parse(b"10.0.0.1\\n10.0.0.01\\n\\n192.168.0.1\\n 10.0.0.2 \\r\\n")
>>> r.indices.tolist(), r.lines, r.malformed, r.empty, r.outside
([1, 2], 5, 1, 1, 1)
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass

import numpy as np

from panstream.errors import ConfigurationError
from panstream.inputs import extractors as extract
from panstream.inputs.normalize import normalize_address
from panstream.universe import Universe

#: Only the first ``MAX_LINE + 1`` bytes of a line are read; longer ``plain`` lines are malformed,
#: longer ``clf``/``field:N`` lines keep their item when its field ends within that head.
MAX_LINE = 4096

#: Formats :func:`parse_format` accepts without an argument.
FORMATS = ("plain", "clf", "auto", "alb", "elb", "vhost", "sshd", "xff", "pam", "haproxy", "squid",
           "apache-error", "nginx-error")

#: GoAccess's ``--log-format`` names (and a few common spellings) for the formats above, matched
#: ignoring case: ``-f COMBINED`` is ``-f clf``. The client is where GoAccess's ``%h`` sits.
ALIASES = {
    "combined": "clf", "common": "clf", "ncsa": "clf", "traefikclf": "clf", "nginx": "clf",
    "apache": "clf", "vcombined": "vhost", "vcommon": "vhost", "w3c": "w3c:c-ip",
    "cloudfront": "w3c:c-ip", "iis": "w3c:c-ip", "awsalb": "alb", "caddy": "json:request.client_ip",
    "cloudstorage": "csv:c_ip", "awss3": "field:5", "zeek": "zeek:id.orig_h",
    "auth": "sshd", "openssh": "sshd", "syslog-sshd": "sshd", "squid-native": "squid",
    "apache_error": "apache-error", "error_log": "apache-error", "nginx_error": "nginx-error",
}

#: The kind ``-f auto`` resolves to when no known format fits: every line is malformed, and the
#: loud-failure check says so (not offered in ``--help``).
NO_FORMAT = "none"

#: Formats written ``KIND:ARG`` (``xff`` also takes one: the trusted proxies).
ARG_FORMATS = ("field", "json", "csv", "tsv", "w3c", "zeek", "regex", "xff")

#: The field of the client address in the whitespace-separated formats.
FIELD_OF = {"alb": 4, "elb": 3, "vhost": 2}

#: What ``-f`` accepts, for messages and ``--help``.
FORMAT_HELP = ("plain, clf (combined, common), field:N, json:PATH, csv:COLUMN, tsv:COLUMN, "
               "w3c:FIELD, zeek:FIELD, 'regex:PATTERN' (one named group), xff[:TRUSTED_CIDR,...], "
               "alb, elb, vhost (vcombined), sshd, pam, haproxy, squid, apache-error, nginx-error, "
               "the GoAccess names (cloudfront, caddy, awsalb, traefikclf, ...) or auto")

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


@dataclass(frozen=True)
class ParseResult:
    """What one chunk contained. Operational counts only: never stored in a state.

    Attributes:
        indices: ``intp`` cell indices of the accepted items, in input order.
        lines: lines seen (including empty and rejected ones).
        empty: empty or all-blank lines.
        malformed: lines whose item could not be parsed (binary junk, bad syntax, an over-long
            ``plain`` line, a field that does not end within the first ``MAX_LINE + 1`` bytes).
        outside: well-formed items outside the universe.
    """

    indices: np.ndarray
    lines: int
    empty: int = 0
    malformed: int = 0
    outside: int = 0

    @property
    def accepted(self) -> int:
        """Items mapped to a cell."""
        return int(self.indices.size)


@dataclass(frozen=True)
class Format:
    """A parsed ``--format`` value.

    Attributes:
        kind: ``plain``, ``clf``, ``auto``, ``field``, ``json``, ``csv``, ``tsv``, ``w3c``, ``zeek``,
            ``regex``, ``xff``, ``alb``, ``elb``, ``vhost`` or ``sshd``.
        field: the 1-based field number of ``field`` (and of ``alb``, ``elb``, ``vhost``).
        arg: the argument of the other kinds: a JSON path, a column name or number, a pattern, the
            trusted proxies of ``xff`` (comma-separated CIDRs).
    """

    kind: str
    field: int = 0
    arg: str = ""

    @property
    def spec(self) -> str:
        """The ``-f`` spelling (``parse_format(f.spec) == f``)."""
        if self.kind == "field":
            return f"field:{self.field}"
        return f"{self.kind}:{self.arg}" if self.arg else self.kind


def _bad_format(spec: str, why: str = "") -> ConfigurationError:
    return ConfigurationError(f"unknown log format {spec!r}{why}: use {FORMAT_HELP} "
                              "(docs/logs.md has a recipe per log format)")


def parse_format(spec: str) -> Format:
    """Parse a ``--format`` value (see :data:`FORMAT_HELP` and docs/logs.md).

    Raises:
        ConfigurationError: an unknown kind, or an argument it cannot use (a field number under 1, a
            regular expression that does not compile or has no group, a trusted proxy that is no
            CIDR).

    >>> parse_format("field:3")
    Format(kind='field', field=3, arg='')
    >>> parse_format("json:request.remote_ip").spec
    'json:request.remote_ip'
    >>> parse_format("alb")
    Format(kind='alb', field=4, arg='')
    >>> parse_format("COMBINED").spec, parse_format("VCOMBINED").spec, parse_format("cloudfront").spec
    ('clf', 'vhost', 'w3c:c-ip')
    """
    s = spec.strip()
    kind, colon, arg = s.partition(":")
    kind = kind.lower()
    if not colon and kind in ALIASES:
        return parse_format(ALIASES[kind])
    if not colon and kind == "awselb":
        raise _bad_format(spec, " (GoAccess's AWSELB: -f alb for lines that start with the type, "
                                "http/https/h2, client in field 4; -f elb for classic ELB lines "
                                "that start with the time, client in field 3)")
    if not colon and (kind in FORMATS or kind == NO_FORMAT):
        return Format(kind, FIELD_OF.get(kind, 0))
    if not colon or kind not in ARG_FORMATS:
        raise _bad_format(spec)
    if kind == "field":
        try:
            n = int(arg)
        except ValueError:
            n = 0
        if n < 1:
            raise _bad_format(spec, " (field:N counts from 1)")
        return Format("field", n)
    if kind == "regex":
        try:
            pat = re.compile(arg)
        except re.error as exc:
            raise _bad_format(spec, f" (the regular expression does not compile: {exc})") from None
        if pat.groups < 1:
            raise _bad_format(spec, " (the regular expression needs a group around the address, "
                                    "e.g. 'regex:from (?P<ip>\\S+) port')")
        return Format("regex", 0, arg)
    arg = arg.strip()
    if kind == "xff":
        for c in arg.split(","):
            try:
                ipaddress.ip_network(c.strip(), strict=False)
            except ValueError:
                raise _bad_format(spec, f" ({c.strip()!r} is no trusted-proxy CIDR, e.g. "
                                        "10.0.0.0/8)") from None
        return Format("xff", 0, ",".join(c.strip() for c in arg.split(",")))
    if not arg or (kind == "json" and "" in arg.split(".")):
        raise _bad_format(spec, f" ({kind} needs a {'path' if kind == 'json' else 'column'})")
    if arg.isdigit() and int(arg) < 1:
        raise _bad_format(spec, " (columns count from 1)")
    return Format(kind, 0, arg)


#: JSON paths that hold the client address in the published shapes, in order of preference:
#: Caddy (``client_ip`` is the client behind trusted proxies, Caddy >= 2.7), GCP Cloud Logging's
#: ``HttpRequest``, Envoy's default JSON access log, Zeek's JSON logs, then common flat names.
JSON_PATHS = ("request.client_ip", "request.remote_ip", "httpRequest.remoteIp",
              "downstream_remote_address", "id.orig_h", "remote_addr", "remote_ip", "client_ip",
              "clientIp", "src_ip", "ip")

#: CSV/TSV header names of an address column, in order of preference (case-insensitive).
ADDRESS_COLUMNS = ("src_addr", "srcaddr", "src_ip", "srcip", "source_ip", "source_address",
                   "sourceaddress", "sa", "client_ip", "clientip", "client_addr", "c-ip", "c_ip",
                   "remote_addr", "remote_ip", "ip_address", "ipaddress", "ip", "address", "addr")

_HEADER_NAME = re.compile(r"[\w .()/#:@-]{1,64}")

_ALB_TYPES = frozenset((b"http", b"https", b"h2", b"grpcs", b"ws", b"wss"))


@dataclass(frozen=True)
class Detection:
    """What :func:`detect` found: the format (``spec``, the ``-f`` spelling), a human name, and a
    note for the operator (e.g. that a combined log also carries an X-Forwarded-For field)."""

    spec: str
    name: str
    note: str = ""
    #: False when no known format fits: ``spec`` is then ``"none"`` (every line malformed) and
    #: ``note`` says what the lines look like and lists candidate ``-f`` values.
    known: bool = True


def format_name(spec: str) -> str:
    """A human name of a format spec, for notices and hints.

    >>> format_name("json:httpRequest.remoteIp")
    'GCP Cloud Logging JSON'
    """
    kind, _, arg = spec.partition(":")
    if kind == "json":
        if arg.startswith("request."):
            return "Caddy JSON"
        return {"httpRequest.remoteIp": "GCP Cloud Logging JSON",
                "downstream_remote_address": "Envoy JSON"}.get(arg, "JSON lines")
    return {"plain": "one item per line", "clf": "Apache/nginx common or combined log",
            "field": "whitespace-separated fields", "csv": "CSV with a header",
            "tsv": "TSV with a header", "w3c": "W3C extended log (CloudFront, IIS)",
            "zeek": "Zeek log", "regex": "regular expression", "xff": "X-Forwarded-For",
            "alb": "AWS ALB log", "elb": "AWS classic ELB log", "vhost": "Apache vhost_combined",
            "sshd": "sshd auth log", "pam": "PAM auth log (rhost=)",
            "haproxy": "HAProxy log", "squid": "Squid native access log",
            "apache-error": "Apache error log", "nginx-error": "nginx error log",
            NO_FORMAT: "no known format", "auto": "auto"}.get(kind, kind)


def _is_address(token: bytes) -> bool:
    from panstream.inputs.normalize import normalize_address

    try:
        ipaddress.ip_address(normalize_address(token).decode("ascii"))
    except (ValueError, UnicodeDecodeError):
        return False
    return True


def _json_path(obj: object) -> str | None:
    for path in JSON_PATHS:
        v = extract.json_get(obj, path.split("."))
        if isinstance(v, str) and _is_address(v.encode()):
            return path
    # Any string field (two levels deep at most) that holds an address.
    stack: list[tuple[str, object]] = [("", obj)]
    while stack:
        prefix, o = stack.pop(0)
        if not isinstance(o, dict):
            continue
        for k, v in o.items():
            p = f"{prefix}{k}"
            if isinstance(v, str) and _is_address(v.encode()):
                return p
            if isinstance(v, dict) and prefix.count(".") < 1:
                stack.append((p + ".", v))
    return None


#: A syslog line's head: RFC 3164 (``Jun 14 15:16:01 host tag[pid]: ``) or an ISO time (RFC 5424,
#: rsyslog's high-precision template, journald's ``short-iso``), then host and tag.
_SYSLOG = re.compile(rb"^(?:<\d{1,3}>\d?\s*)?(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|"
                     rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S*) \S+ [^\s:]+:")
#: Apache's error log line head: ``[Sun Dec 04 04:47:44 2005] [notice]`` (2.2) or
#: ``[Wed Oct 11 14:32:52.123456 2000] [core:error]`` (2.4).
_APACHE_ERROR = re.compile(rb"^\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)? "
                           rb"\d{4}\] \[[\w:]+\] ")
#: nginx's error log line head: ``2024/01/02 03:04:05 [error] 1234#0: ``.
_NGINX_ERROR = re.compile(rb"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d \[[a-z]+\] \d+#\d+: ")
#: The request time of Apache/nginx common and combined logs: ``[10/Oct/2000:13:55:36 -0700] "``.
_CLF_TIME = re.compile(rb" \[\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d [+-]\d{4}\] \"")
#: netfilter's LOG target (kern.log): ``SRC=ADDR DST=ADDR``.
_NETFILTER = re.compile(rb"\bSRC=(\S+) DST=\S+")


def _unknown(lines: list[list[bytes]], raw: list[bytes], what: str,
             tried: dict[str, int]) -> Detection:
    """The detection when no known format fits: what the lines look like and the candidates (the
    built-in patterns that matched some line, the fields that hold an address in some lines, a
    regular expression)."""
    cands = [f"-f {k} ({n} of the first {len(raw)} lines match)" for k, n in tried.items() if n]
    if any(_NETFILTER.search(ln) for ln in raw):
        cands.append("-f 'regex:SRC=(?P<ip>\\S+)' (netfilter LOG lines)")
    counts = [sum(1 for f in lines if len(f) >= n and _is_address(f[n - 1])) for n in range(1, 13)]
    best = max(range(12), key=lambda j: counts[j])
    if counts[best]:
        cands.append(f"-f field:{best + 1} (an address in {counts[best]} of {len(raw)} lines)")
    cands.append("-f 'regex:... (?P<ip>\\S+) ...'")
    note = f"{what}; candidates: {', '.join(cands)} (docs/logs.md)"
    return Detection(NO_FORMAT, f"no known format fits ({what})", note, known=False)


def detect(sample: bytes | memoryview, max_lines: int = 64) -> Detection:
    """Recognise the format of an input from its first non-blank lines, or say that none fits.

    In order: W3C (``#Fields:``), Zeek (``#separator``/``#fields``), JSON lines (a known or any
    address field), CSV/TSV whose header names an address column (:data:`ADDRESS_COLUMNS`); the
    built-in patterns (:data:`panstream.inputs.extractors.PATTERNS`): sshd logins, HAProxy, Squid, PAM's
    ``rhost=``, by the share of lines they match; the Apache and nginx error logs by the shape of
    their lines; AWS ALB and classic ELB, Apache ``vhost_combined``, Apache/nginx logs with the
    client first (``clf``, also recognised by its request time when some first fields are address
    lists), whitespace-separated lines with an address in a fixed field (``field:N``), and one item
    per line (``plain``). Anything else is *not guessed*: the result has ``known=False``, spec
    ``"none"`` (every line malformed, so the loud-failure check stops the run) and a note that
    lists the candidates.

    >>> detect(b'10.0.0.1 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 2326\\n').spec
    'clf'
    >>> detect(b'{"httpRequest": {"remoteIp": "10.0.0.1"}, "severity": "INFO"}\\n').spec
    'json:httpRequest.remoteIp'
    >>> detect(b'Jun 14 15:16:01 combo su(pam_unix)[1]: session opened for user news\\n').known
    False
    """
    import json

    from panstream.inputs.extractors import PATTERNS

    lines: list[bytes] = []
    for raw in bytes(sample[: 64 * MAX_LINE]).split(b"\n"):
        line = raw.strip()
        if not lines:
            line = line.removeprefix(b"\xef\xbb\xbf")
        if line:
            lines.append(line)
        if len(lines) >= max_lines:
            break
    if not lines:
        return Detection("plain", format_name("plain"))
    first = lines[0]

    def share(pred: object) -> int:
        assert callable(pred)
        return sum(1 for ln in lines if pred(ln))

    def most(pred: object) -> bool:
        return 2 * share(pred) > len(lines)

    def det(spec: str, note: str = "") -> Detection:
        return Detection(spec, format_name(spec), note)

    w3c = next((ln for ln in lines if ln[:8].lower() == b"#fields:"), None)
    if w3c is not None:
        names = w3c[8:].decode("utf-8", "replace").split()
        name = "c-ip" if "c-ip" in names else next((n for n in names if n.endswith("-ip")), "c-ip")
        return det(f"w3c:{name}")
    zeek = next((ln for ln in lines if ln.startswith(b"#fields")), None)
    if zeek is not None or first.startswith(b"#separator"):
        names = (zeek or b"").decode("utf-8", "replace").split()[1:]
        name = "id.orig_h" if "id.orig_h" in names or not names else next(
            (n for n in names if n.endswith("_h")), "id.orig_h")
        return det(f"zeek:{name}")
    if first.startswith(b"{"):
        for ln in lines[:8]:
            try:
                path = _json_path(json.loads(ln))
            except ValueError:
                continue
            if path:
                return det(f"json:{path}")
        return Detection(NO_FORMAT, "JSON lines without a known address field",
                         "JSON lines without a known address field; candidates: -f json:PATH "
                         "(e.g. json:request.remote_ip, json:httpRequest.remoteIp) (docs/logs.md)",
                         known=False)
    for sep, kind in ((b",", "csv"), (b"\t", "tsv")):
        if sep in first and len(lines) > 1 and sep in lines[1]:
            header = [h.strip().strip('"') for h in first.decode("utf-8", "replace").split(
                sep.decode())]
            if not all(_HEADER_NAME.fullmatch(h) for h in header):
                continue  # not a header of names (e.g. a log line with "a, b" in it)
            low = [h.lower() for h in header]
            for cand in ADDRESS_COLUMNS:
                if cand in low:
                    return det(f"{kind}:{header[low.index(cand)]}")
            cells = [c.strip().strip(b'"') for c in lines[1].split(sep)]
            for j, c in enumerate(cells):
                if _is_address(c) and not any(_is_address(x) for x in first.split(sep)):
                    return det(f"{kind}:{j + 1}")
    # The built-in patterns. sshd: one login line is enough (an auth.log is mostly other lines);
    # HAProxy and Squid: most lines are requests; PAM: any rhost= (after sshd, whose auth.log
    # carries pam_unix lines too).
    pats = {k: re.compile(v.encode()) for k, v in PATTERNS.items()}
    hits = {k: share(p.search) for k, p in pats.items()}
    if hits["sshd"] or most(lambda ln: b" sshd[" in ln or b" sshd-session[" in ln):
        return det("sshd")
    for kind in ("haproxy", "squid"):
        if 2 * hits[kind] > len(lines):
            return det(kind)
    if hits["pam"]:
        return det("pam")
    if most(_APACHE_ERROR.match):
        return det("apache-error")
    if most(_NGINX_ERROR.match):
        return det("nginx-error")
    split = [ln.split() for ln in lines]

    def most_f(pred: object) -> bool:
        assert callable(pred)
        return 2 * sum(1 for f in split if pred(f)) > len(split)

    if most_f(lambda f: len(f) > 4 and f[0] in _ALB_TYPES and b":" in f[3] and _is_address(f[3])):
        return det("alb")
    iso = re.compile(rb"\d{4}-\d\d-\d\dT")
    if most_f(lambda f: len(f) > 3 and iso.match(f[0]) and b":" in f[2] and _is_address(f[2])):
        return det("elb")
    if most_f(lambda f: len(f) > 2 and not _is_address(f[0]) and b":" in f[0]
              and _is_address(f[1])):
        return det("vhost")
    multi = most_f(lambda f: len(f) > 1)
    clf_time = most(_CLF_TIME.search)
    if multi and (most_f(lambda f: _is_address(f[0]))
                  or (clf_time and any(_is_address(f[0]) for f in split))):
        note = ""
        xff = re.compile(rb'"([^"]*)"\s*$')

        def has_xff(ln: bytes) -> bool:
            m = xff.search(ln)
            return m is not None and _is_address(m.group(1).split(b",")[0])

        if most(has_xff):
            note = ("its last quoted field holds addresses (X-Forwarded-For?): behind a proxy, "
                    "count the clients with -f xff (and --trusted-proxy CIDR)")
        elif not most_f(lambda f: _is_address(f[0])):
            note = ("some lines start with no single address (an address list, a name): they are "
                    "counted as malformed")
        return det("clf", note)
    syslog = most(_SYSLOG.match)
    if multi and not syslog:
        for n in range(2, 13):
            if most_f(lambda f, n=n: len(f) >= n and _is_address(f[n - 1])):
                return det(f"field:{n}")
    if not multi:
        return det("plain")  # one token per line: any item (hashed and range universes too)
    tried = {k: hits[k] for k in ("haproxy", "squid")}
    what = ("syslog lines of no known program" if syslog else
            "Apache/nginx-style lines without a client address first" if clf_time else
            "lines of no known format")
    return _unknown(split, lines, what, tried)


def detect_format(sample: bytes | memoryview, max_lines: int = 64) -> str:
    """The ``-f`` spelling of :func:`detect`'s choice.

    >>> detect_format(b"10.0.0.1\\n10.0.0.2\\n")
    'plain'
    """
    return detect(sample, max_lines).spec


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


# ---------------------------------------------------------------------------------------- core


def _newlines(b: np.ndarray) -> np.ndarray:
    """Positions of every ``\\n`` in ``b``, in order (:func:`panstream.inputs.extractors.byte_positions`:
    cheaper than ``flatnonzero(b == 10)``)."""
    return extract.byte_positions(b, 10)


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
    b = data if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)
    starts, ends = _line_bounds(b)
    nlines = int(starts.size)
    if nlines == 0:
        return np.zeros(0, dtype=np.uint32), 0, 0, 0, 0
    ends = _drop_cr(b, starts, ends)
    length = ends - starts
    w = _windows(b, starts)
    addr, ok = ipv4_from_windows(w, length, fmt == "clf")
    w.fill(0)
    if fmt == "plain":
        ok &= length <= max_line  # (clf: the address ends within the first 16 bytes, see below)
    empty = length == 0
    if bool(ok.all()):
        return addr, nlines, 0, 0, 0
    # Dual-stack servers log IPv4 clients as ::ffff:a.b.c.d: read those vectorized too.
    cand = np.flatnonzero(~ok & (length > 7))
    if cand.size:
        moved = _skip_mapped_prefix(b, starts[cand], ends[cand])
        m = moved != starts[cand]
        if bool(m.any()):
            rows, ms = cand[m], moved[m]
            w2 = _windows(b, ms)
            a2, ok2 = ipv4_from_windows(w2, ends[rows] - ms, fmt == "clf")
            w2.fill(0)
            if fmt == "plain":
                ok2 &= length[rows] <= max_line
            addr[rows[ok2]] = a2[ok2]
            ok[rows[ok2]] = True
            a2.fill(0)
    # Rejected lines: the rare ones go through Python (blank lines, IPv6, a clf head).
    rej = np.flatnonzero(~ok & ~empty & ((length <= max_line) | (fmt == "clf")))
    n_empty = int(empty.sum())
    extra: list[tuple[int, int]] = []
    v6 = 0
    if rej.size:
        keep_ok = ok.copy()
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
                    continue
                token = fields[0]
            else:
                parts = line.split(b" ", 1)
                if over and len(parts) < 2:
                    continue  # the first field does not end within the first max_line bytes
                token = parts[0]
            got = _strict_ipv4(token)
            if got is None and (b":" in token or b"[" in token):
                token = normalize_address(token)  # a.b.c.d:port, ::ffff:a.b.c.d, [v6]:port
                got = _strict_ipv4(token)
            if got is not None:
                extra.append((i, got))
                keep_ok[i] = True
            elif b":" in token and _is_ipv6(token):
                v6 += 1
        if extra:
            for i, a in extra:
                addr[i] = a
        ok = keep_ok
    out = addr[ok]
    addr.fill(0)
    malformed = nlines - int(out.size) - n_empty - v6
    return out, nlines, n_empty, malformed, v6


def _strict_ipv4(token: bytes) -> int | None:
    """The address of a dotted quad exactly as :class:`ipaddress.IPv4Address` accepts it (glibc's
    ``inet_pton`` rejects the same spellings: leading zeros, fewer octets, ``0x``), else None."""
    try:
        return int.from_bytes(socket.inet_pton(socket.AF_INET, token.decode("ascii")), "big")
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def _is_ipv6(token: bytes) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6, token.decode("ascii"))
    except (OSError, ValueError, UnicodeDecodeError):
        return False
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
    """Strictly parse the tokens ``b[ts:te]`` as IPv4 addresses, each optionally followed by
    ``:port`` (1 to 5 digits, at most 65535), vectorized: the first ``:`` of each token's 16-byte
    window ends the address, which :func:`ipv4_from_windows` checks; the port's digits are checked
    from a second window. Rows not ``ok`` get a second look in Python (other spellings, IPv6)."""
    if ts.size == 0:
        return np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=bool)
    ts = _skip_mapped_prefix(b, ts, te)
    length = te - ts
    w = _windows(b, ts)
    colon = _CTZ[_mask16(w == 58)]
    has_port = colon < length
    alen = np.where(has_port, colon, length)
    addr, ok = ipv4_from_windows(w, alen)
    w.fill(0)
    rows = np.flatnonzero(ok & has_port)
    if rows.size:
        ps = ts[rows] + colon[rows] + 1
        plen = te[rows] - ps
        pw = _windows(b, ps)[:, :5].astype(np.int64) - 48
        good = (plen >= 1) & (plen <= 5)
        val = np.zeros(rows.size, dtype=np.int64)
        for j in range(5):
            d = pw[:, j]
            use = j < plen
            good &= ~use | ((d >= 0) & (d <= 9))
            val = np.where(use, val * 10 + d, val)
        good &= val <= 65535
        pw.fill(0)
        ok[rows[~good]] = False
    return addr, ok


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
        self._fast = universe.kind == "ipv4"
        if self._fast:
            self._base = int(ipaddress.IPv4Address(universe.item_of(0)))
        self._extractor = None
        if self.format.kind not in ("plain", "clf"):
            self._extractor = extract.build(self.format.kind, self.format.arg,
                                            self.format.field, self.max_line)

    def parse(self, data: bytes | bytearray | memoryview) -> ParseResult:
        """Parse a buffer of complete lines; see the module docstring for what is accepted."""
        if self._extractor is not None:
            return self._parse_spans(data)
        if self._fast:
            addr, lines, empty, malformed, v6 = parse_ipv4(data, self.format.kind, self.max_line)
            return self._to_cells(addr, lines, empty, malformed, v6)
        tokens, lines, empty, malformed = self._tokens(data)
        res = self.universe.indices(self._normalized(tokens))
        tokens.clear()
        return ParseResult(res.indices, lines, empty + res.empty, malformed + res.malformed,
                           res.outside)

    def _normalized(self, tokens: list[bytes]) -> list[bytes]:
        """Address universes: one spelling per address (:func:`normalize_address`): ``hashed-ip``
        too (its ALB, ELB, Envoy and HAProxy clients carry ``:port``)."""
        kind = self.universe.kind
        if kind not in ("ipv4", "ipv6", "hashed-ip"):
            return tokens
        mapped = kind != "ipv6"
        return [normalize_address(t, mapped) if (b":" in t or b"[" in t) else t for t in tokens]

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
            res = self.universe.indices(self._normalized(tokens))  # type: ignore[arg-type]
            tokens.clear()
            return ParseResult(res.indices, n, empty + res.empty, malformed + res.malformed,
                               res.outside)
        rows = np.flatnonzero(sp.state == extract.SPAN)
        ts, te = sp.ts[rows], sp.te[rows]
        addr, ok = _ipv4_spans(b, ts, te)
        lineaddr = np.zeros(n, dtype=np.uint32)
        acc = np.zeros(n, dtype=bool)
        lineaddr[rows] = addr
        acc[rows] = ok
        addr.fill(0)
        v6 = 0
        second = [(int(i), bytes(b[int(s):int(e)])) for i, s, e in
                  zip(rows[~ok].tolist(), ts[~ok].tolist(), te[~ok].tolist(), strict=True)]
        py = [(i, t) for i, t in sp.py.items() if t is not None]
        sp.py.clear()
        if py:  # tokens taken in Python: validated vectorized too, one per line of a buffer
            buf = bytearray(b"\n".join(t.replace(b"\n", b"\x00") for _, t in py) + b"\n")
            arr = np.frombuffer(buf, dtype=np.uint8)
            s2, e2 = _line_bounds(arr)
            a2, ok2 = _ipv4_spans(arr, s2, e2)
            idx = np.array([i for i, _ in py], dtype=np.intp)
            lineaddr[idx[ok2]] = a2[ok2]
            acc[idx[ok2]] = True
            second += [py[j] for j in np.flatnonzero(~ok2).tolist()]
            a2.fill(0)
            del arr
            buf[:] = bytes(len(buf))
            py.clear()
        for i, token in second:
            t = token.strip()
            if not t:
                empty += 1
                continue
            got = _strict_ipv4(t)
            if got is None:
                t = normalize_address(t)
                got = _strict_ipv4(t)
            if got is not None:
                lineaddr[i] = got
                acc[i] = True
            elif b":" in t and _is_ipv6(t):
                v6 += 1
            else:
                malformed += 1
        second.clear()
        out = lineaddr[acc]
        lineaddr.fill(0)
        return self._to_cells(out, n, empty, malformed, v6)

    def _to_cells(self, addr: np.ndarray, lines: int, empty: int, malformed: int, outside: int
                  ) -> ParseResult:
        size = self.universe.size
        if self._base:
            addr -= np.uint32(self._base)  # wraps: addresses below the prefix become large
        if size >= 1 << 32:
            idx = addr.astype(np.intp)
        else:
            inside = addr < size
            idx = addr[inside].astype(np.intp)
            outside += int(addr.size - idx.size)
            inside.fill(False)
        addr.fill(0)
        return ParseResult(idx, lines, empty, malformed, outside)

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
