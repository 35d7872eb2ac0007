"""The N-th whitespace-separated field (``field:N``, 1-based like awk's ``$N``).

The field is located vectorized over the single spaces of the usual shapes; a line with tabs or
runs of blanks before its field is split in Python like awk
(:class:`panstream.inputs.extractors.WhitespaceField`; ``alb``, ``elb`` and ``vhost`` are named
fields of it). ``-f auto`` names it when most first lines, not syslog lines, hold an address in one
field (2 to 12). Its lines carry no time this panstream reads.
"""

from __future__ import annotations

from panstream.inputs.extractors import WhitespaceField
from panstream.inputs.formats.base import (
    Detection,
    Format,
    LogFormat,
    Sample,
    bad_format,
    is_address,
    register,
)


def _number(spec: str, arg: str) -> Format:
    try:
        n = int(arg)
    except ValueError:
        n = 0
    if n < 1:
        raise bad_format(spec, " (field:N counts from 1)")
    return Format("field", n)


def _detect(s: Sample) -> Detection | None:
    if s.multi and not s.syslog:
        for n in range(2, 13):
            if s.most_fields(lambda f, n=n: len(f) >= n and is_address(f[n - 1])):
                return s.found(f"field:{n}")
    return None


register(LogFormat(
    "field", "whitespace-separated fields", order=30, help="field:N", aliases={"awss3": "field:5"},
    arg="required", parse_arg=_number, extractor=lambda fmt, n: WhitespaceField(fmt.field, n),
    detect=_detect, rank=800, where="field {arg}",
    where_help="field:N (N-th blank-separated field)"))
