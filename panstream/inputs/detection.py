"""``-f auto``: recognise a log's format from its first lines, or say that none fits.

:func:`detect` looks at the first 64 non-blank lines of an input and returns a
:class:`Detection`: the ``-f`` spelling, a human name and a note. It never guesses: when no known
format fits, ``known`` is false, the spec is ``none`` (every line malformed, so the loud-failure
check stops the run) and the note lists candidates. The detection is a function of those first
lines only; for a file, ``ingest`` announces it (docs/threat-model.md).
"""

from __future__ import annotations

import re

from panstream.inputs.formats import NO_FORMAT, all_formats
from panstream.inputs.formats.base import CLF_TIME, Detection, Sample, is_address
from panstream.inputs.formats.columns import ADDRESS_COLUMNS
from panstream.inputs.formats.jsonlines import JSON_PATHS
from panstream.inputs.ipv4 import MAX_LINE

__all__ = ["ADDRESS_COLUMNS", "BINARY_HINT", "JSON_PATHS", "Detection", "detect", "detect_format",
           "looks_binary"]


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


#: netfilter's LOG target (kern.log): ``SRC=ADDR DST=ADDR``.
_NETFILTER = re.compile(rb"\bSRC=(\S+) DST=\S+")


def _unknown(lines: list[list[bytes]], raw: list[bytes], what: str,
             tried: list[str]) -> Detection:
    """The detection when no known format fits: what the lines look like and the candidates (the
    formats that matched some line, the fields that hold an address in some lines, a regular
    expression)."""
    # Candidates in words, never with counts: the notice is a function of the lines' format, and a
    # count would move with any one line (docs/threat-model.md, "The loud-failure decision").
    cands = [f"-f {k} (some of the first lines match)" for k in tried]
    if any(_NETFILTER.search(ln) for ln in raw):
        cands.append("-f 'regex:SRC=(?P<ip>\\S+)' (netfilter LOG lines)")
    counts = [sum(1 for f in lines if len(f) >= n and is_address(f[n - 1])) for n in range(1, 13)]
    best = max(range(12), key=lambda j: counts[j])
    if counts[best]:
        cands.append(f"-f field:{best + 1} (an address in some of the first lines)")
    cands.append("-f 'regex:... (?P<ip>\\S+) ...'")
    note = f"{what}; candidates: {', '.join(cands)} (docs/logs.md)"
    return Detection(NO_FORMAT, f"no known format fits ({what})", note, known=False)


def detect(sample: bytes | memoryview, max_lines: int = 64) -> Detection:
    """Recognise the format of an input from its first non-blank lines, or say that none fits.

    The formats are asked in the order of their :attr:`~panstream.inputs.formats.base.LogFormat.rank`
    (each module of :mod:`panstream.inputs.formats` says how it recognises its lines): headers
    first (W3C's ``#Fields:``, Zeek's ``#separator``/``#fields``), JSON lines, CSV/TSV whose
    header names an address column, the syslog-wrapped and pattern formats by the share of lines
    they match, the fixed-field formats, the Apache/nginx logs with the client first, an address
    in a fixed field (``field:N``), and one item per line (``plain``). Anything else is *not
    guessed*: the result has ``known=False``, spec ``"none"`` (every line malformed, so the
    loud-failure check stops the run) and a note that lists the candidates.

    >>> detect(b'10.0.0.1 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 2326\\n').spec
    'clf'
    >>> detect(b'{"httpRequest": {"remoteIp": "10.0.0.1"}, "severity": "INFO"}\\n').spec
    'json:httpRequest.remoteIp'
    >>> detect(b'Jun 14 15:16:01 combo su(pam_unix)[1]: session opened for user news\\n').known
    False
    """
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
    view = Sample(lines)
    for f in sorted((f for f in all_formats() if f.detect is not None), key=lambda f: f.rank):
        assert f.detect is not None
        found = f.detect(view)
        if found is not None:
            return found
    tried = [f.name for f in all_formats() if f.candidate is not None and f.candidate(view)]
    what = ("syslog lines of no known program" if view.syslog else
            "Apache/nginx-style lines without a client address first"
            if view.most(CLF_TIME.search) else "lines of no known format")
    return _unknown(view.split, lines, what, tried)


def detect_format(sample: bytes | memoryview, max_lines: int = 64) -> str:
    """The ``-f`` spelling of :func:`detect`'s choice.

    >>> detect_format(b"10.0.0.1\\n10.0.0.2\\n")
    'plain'
    """
    return detect(sample, max_lines).spec
