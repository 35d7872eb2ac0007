"""CSV and TSV with a header (``csv:COLUMN``, ``tsv:COLUMN``): flow exports (nfdump), cloud
storage logs, any table.

A column by header name or 1-based number. With a name, the first line is the header; a later
line that names the column again (files concatenated) is a new header. With a number, a first
line whose column N holds no digit is taken as the header. Lines with a double quote go through
Python's :mod:`csv`; the rest are split vectorized (:class:`panstream.inputs.extractors.Columns`).
``-f auto`` names the first of :data:`ADDRESS_COLUMNS` the header has, else the column whose
second-line cell is an address. Their lines carry no time this panstream reads.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from panstream.inputs.extractors import Columns
from panstream.inputs.formats.base import Detection, LogFormat, Sample, column_arg, is_address, register

#: CSV/TSV header names of an address column, in order of preference (case-insensitive).
ADDRESS_COLUMNS = ("src_addr", "srcaddr", "src_ip", "srcip", "source_ip", "source_address",
                   "sourceaddress", "sa", "client_ip", "clientip", "client_addr", "c-ip", "c_ip",
                   "remote_addr", "remote_ip", "ip_address", "ipaddress", "ip", "address", "addr")

_HEADER_NAME = re.compile(r"[\w .()/#:@-]{1,64}")


def _detector(kind: str, sep: bytes) -> Callable[[Sample], Detection | None]:
    def detect(s: Sample) -> Detection | None:
        first = s.first
        if not (sep in first and len(s.lines) > 1 and sep in s.lines[1]):
            return None
        header = [h.strip().strip('"') for h in first.decode("utf-8", "replace").split(
            sep.decode())]
        if not all(_HEADER_NAME.fullmatch(h) for h in header):
            return None  # not a header of names (e.g. a log line with "a, b" in it)
        low = [h.lower() for h in header]
        for cand in ADDRESS_COLUMNS:
            if cand in low:
                return s.found(f"{kind}:{header[low.index(cand)]}")
        cells = [c.strip().strip(b'"') for c in s.lines[1].split(sep)]
        for j, c in enumerate(cells):
            if is_address(c) and not any(is_address(x) for x in first.split(sep)):
                return s.found(f"{kind}:{j + 1}")
        return None

    return detect


def _fix(kind: str, arg: str) -> str:
    return (f"name the address column as the header does (not {arg!r}), -f {kind}:NAME, or "
            f"give its number, -f {kind}:N")


def _table(kind: str, sep: bytes, order: int, aliases: dict[str, str], where_help: str
           ) -> LogFormat:
    return LogFormat(
        kind, f"{kind.upper()} with a header", order=order, help=f"{kind}:COLUMN", arg="required",
        aliases=aliases, parse_arg=lambda spec, arg: column_arg(spec, kind, arg),
        extractor=lambda fmt, n: Columns(kind, fmt.arg, n), detect=_detector(kind, sep),
        rank=400 + order, fix=_fix, where_help=where_help)


register(_table("csv", b",", 50, {"cloudstorage": "csv:c_ip"}, "csv:COLUMN"),
         _table("tsv", b"\t", 60, {}, ""))
