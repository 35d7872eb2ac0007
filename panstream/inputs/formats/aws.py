"""AWS load balancer access logs: Application Load Balancer (``alb``) and classic ELB (``elb``).

The client is ``client:port`` in a fixed whitespace-separated field (ALB: field 4, after the type,
the time and the balancer's name; classic ELB: field 3, after the time and the name), read by
:class:`panstream.inputs.extractors.WhitespaceField`. The time is the ISO 8601 field (ALB: field
2, classic ELB: field 1), UTC. GoAccess's ``AWSELB`` preset is refused with both choices: it fits
either shape and they differ in where the client is.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from panstream.inputs.extractors import WhitespaceField
from panstream.inputs.formats.base import (
    Detection,
    Format,
    LogFormat,
    Reader,
    Sample,
    TimeRule,
    is_address,
    register,
)
from panstream.inputs.timestamps import ISO_WIDTH, read_iso, spans_times

_ALB_TYPES = frozenset((b"http", b"https", b"h2", b"grpcs", b"ws", b"wss"))
_ISO = re.compile(rb"\d{4}-\d\d-\d\dT")


def _iso_field(k: int) -> Callable[[Format], Reader]:
    def reader(fmt: Format) -> Reader:
        field = WhitespaceField(k, 1 << 30)

        def read(b: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
            return spans_times(b, starts, field.locate(b, starts, ends), read_iso, ISO_WIDTH)

        return read

    return reader


def _detect_alb(s: Sample) -> Detection | None:
    if s.most_fields(lambda f: len(f) > 4 and f[0] in _ALB_TYPES and b":" in f[3]
                     and is_address(f[3])):
        return s.found("alb")
    return None


def _detect_elb(s: Sample) -> Detection | None:
    if s.most_fields(lambda f: len(f) > 3 and _ISO.match(f[0]) and b":" in f[2]
                     and is_address(f[2])):
        return s.found("elb")
    return None


_NOTE = "ALB/ELB: the ISO 8601 field"

register(
    LogFormat(
        "alb", "AWS ALB log", order=110, help="alb", aliases={"awsalb": "alb"},
        shown_aliases=("awsalb",),
        refused={"awselb": " (GoAccess's AWSELB: -f alb for lines that start with the type, "
                           "http/https/h2, client in field 4; -f elb for classic ELB lines "
                           "that start with the time, client in field 3)"},
        field=4, extractor=lambda fmt, n: WhitespaceField(fmt.field, n), detect=_detect_alb,
        rank=600, where="field 4 (client:port)", where_help="alb",
        time=TimeRule(reader=_iso_field(2), note=_NOTE)),
    LogFormat(
        "elb", "AWS classic ELB log", order=120, help="elb", field=3,
        extractor=lambda fmt, n: WhitespaceField(fmt.field, n), detect=_detect_elb, rank=610,
        where="field 3 (client:port)", where_help="elb",
        time=TimeRule(reader=_iso_field(1), note=_NOTE)),
)
