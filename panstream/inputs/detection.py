"""``-f auto``: recognise a log's format from its first lines, or say that none fits.

:func:`detect` looks at the first 64 non-blank lines of an input and returns a
:class:`Detection`: the ``-f`` spelling, a human name and a note. It never guesses: when no known
format fits, ``known`` is false, the spec is ``none`` (every line malformed, so the loud-failure
check stops the run) and the note lists candidates. The detection is a function of those first
lines only; for a file, ``ingest`` announces it (docs/threat-model.md).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from panstream.inputs.extractors import PATTERNS, json_get
from panstream.inputs.formats import NO_FORMAT, format_name
from panstream.inputs.ipv4 import MAX_LINE
from panstream.universe.addresses import normalize_address

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
    #: The input is not text (:func:`looks_binary`): ``known`` is false and ``note`` says to
    #: decompress or convert it.
    binary: bool = False


#: Control bytes that text lines may hold (tab, newline, vertical tab, form feed, carriage
#: return, escape); any other byte under 0x20 is a sign of binary data.
_TEXT_CONTROLS = frozenset(b"\t\n\x0b\x0c\r\x1b")
_CONTROLS = bytes(sorted(set(range(32)) - _TEXT_CONTROLS))

#: What the notice and the loud-failure line suggest for binary input.
BINARY_HINT = ("if it is compressed or archived in a format panstream does not read itself (gzip, "
               "bzip2, xz and zstd it does), decompress it first (unzip -p FILE.zip | panstream "
               "ingest ..., 7z x -so FILE.7z | ...); a binary capture (pcap) or a database file "
               "holds no log lines: export them as text")


def looks_binary(sample: bytes | memoryview, limit: int = 1 << 16) -> bool:
    """Whether the first ``limit`` bytes of an input are binary data rather than text lines: a NUL
    byte, or more than 5 % control bytes that text does not hold (issue 37: such input was called
    "lines of no known format").

    >>> looks_binary(b"10.0.0.1 - - [x]\\n"), looks_binary(b"PK\\x03\\x04\\x14\\x00\\x00\\x00")
    (False, True)
    """
    head = bytes(sample[:limit])
    if not head:
        return False
    if b"\x00" in head:
        return True
    controls = len(head) - len(head.translate(None, _CONTROLS))
    return controls > 0.05 * len(head)


def _is_address(token: bytes) -> bool:
    try:
        ipaddress.ip_address(normalize_address(token).decode("ascii"))
    except (ValueError, UnicodeDecodeError):
        return False
    return True


def _json_path(obj: object) -> str | None:
    for path in JSON_PATHS:
        v = json_get(obj, path.split("."))
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
    # Candidates in words, never with counts: the notice is a function of the lines' format, and a
    # count would move with any one line (docs/threat-model.md, "The loud-failure decision").
    cands = [f"-f {k} (some of the first lines match)" for k, n in tried.items() if n]
    if any(_NETFILTER.search(ln) for ln in raw):
        cands.append("-f 'regex:SRC=(?P<ip>\\S+)' (netfilter LOG lines)")
    counts = [sum(1 for f in lines if len(f) >= n and _is_address(f[n - 1])) for n in range(1, 13)]
    best = max(range(12), key=lambda j: counts[j])
    if counts[best]:
        cands.append(f"-f field:{best + 1} (an address in some of the first lines)")
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

    if looks_binary(sample):
        zipped = bytes(sample[:4]) == b"PK\x03\x04"
        what = ("a zip archive, not text lines" if zipped
                else "binary data, not text lines (NUL or control bytes)")
        return Detection(NO_FORMAT, f"no log format fits ({what})", f"{what}: {BINARY_HINT}",
                         known=False, binary=True)
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
