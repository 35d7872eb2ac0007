"""The log formats (``-f``): one module per format, or per family of formats, and their registry.

Each module beside this one declares, in one place, the formats it reads
(:class:`~panstream.inputs.formats.base.LogFormat`): their names (with GoAccess's
``--log-format`` names), how ``-f auto`` recognises them, where the client address is and how
their time is read. This package imports every module in its folder, so a new file is a new
format: nothing else names it (docs/logs.md, "Adding a format"; issue 36).

Its parts:

:mod:`~panstream.inputs.formats.base`
    :class:`~panstream.inputs.formats.base.LogFormat`, :class:`Format`, the registry, the
    detection rules' view of a sample.
The format modules, one per format or family (``clf``, ``vhost`` and ``xff`` in ``clf``; ``alb``
and ``elb`` in ``aws``; ...): each file's first docstring line is listed below when the package
is imported (``help(panstream.inputs.formats)``), so this list too is the folder's, never
written by hand.

``auto`` (:func:`panstream.inputs.detection.detect`) is recognised per input from its first
lines, and names its choice, or says that no known format fits (kind ``none``). The constants
below (:data:`FORMATS`, :data:`ALIASES`, :data:`FORMAT_HELP`, ...) are read off the registry.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING

from panstream.inputs.extractors import Nothing
from panstream.inputs.formats.base import (
    NO_FORMAT,
    Format,
    LogFormat,
    all_formats,
    bad_format,
    format_examples,
    format_help,
    lookup,
)

if TYPE_CHECKING:
    from panstream.inputs.extractors import Extractor

for _m in pkgutil.iter_modules(__path__):
    if _m.name != "base":
        _mod = importlib.import_module(f"{__name__}.{_m.name}")
        _first = " ".join((_mod.__doc__ or "").split("\n\n")[0].split())
        __doc__ = f"{__doc__}\n:mod:`~{_mod.__name__}`\n    {_first}\n"

#: Formats :func:`parse_format` accepts without an argument.
FORMATS = (*(f.name for f in all_formats() if f.arg != "required"), "auto")

#: Formats written ``KIND:ARG`` (``xff`` also takes one: the trusted proxies).
ARG_FORMATS = tuple(f.name for f in all_formats() if f.arg)

#: GoAccess's ``--log-format`` names (and a few common spellings) for the formats above, matched
#: ignoring case: ``-f COMBINED`` is ``-f clf``. The client is where GoAccess's ``%h`` sits.
ALIASES = {a: spec for f in all_formats() for a, spec in f.aliases.items()}

#: The field of the client address in the whitespace-separated formats.
FIELD_OF = {f.name: f.field for f in all_formats() if f.field}

#: What ``-f`` accepts, for messages and ``--help``.
FORMAT_HELP = format_help()

#: The pattern formats whose logs are mostly other lines (an auth.log, an error log, a syslog
#: stream): only a pattern that matches (almost) nothing is called wrong
#: (:data:`panstream.inputs.check.MIN_SHARE_PATTERN`).
SPARSE_KINDS = frozenset(f.name for f in all_formats() if f.sparse)

_REFUSED = {name: why for f in all_formats() for name, why in f.refused.items()}

__all__ = ["ALIASES", "ARG_FORMATS", "FIELD_OF", "FORMATS", "FORMAT_HELP", "NO_FORMAT",
           "SPARSE_KINDS", "Format", "LogFormat", "all_formats", "extractor_of", "format_examples",
           "format_name",
           "lookup", "parse_format"]


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
    if not colon and kind in _REFUSED:
        raise bad_format(spec, _REFUSED[kind])
    f = lookup(kind)
    if not colon and kind in ("auto", NO_FORMAT):
        return Format(kind)
    if not colon and f is not None and f.arg != "required":
        return Format(kind, f.field)
    if not colon or f is None or f.parse_arg is None:
        raise bad_format(spec)
    return f.parse_arg(spec, arg)


def format_name(spec: str) -> str:
    """A human name of a format spec, for notices and hints.

    >>> format_name("json:httpRequest.remoteIp")
    'GCP Cloud Logging JSON'
    """
    kind, _, arg = spec.partition(":")
    f = lookup(kind)
    if f is not None:
        return f.title_of(arg)
    return {NO_FORMAT: "no known format", "auto": "auto"}.get(kind, kind)


def extractor_of(fmt: Format, max_line: int) -> Extractor | None:
    """Where the client of each line of ``fmt`` is; ``None`` for the formats the parser reads
    with its own vectorized line reader (``plain``, ``clf``).

    Raises:
        ValueError: ``fmt`` names no format.
    """
    if fmt.kind == NO_FORMAT:
        return Nothing(max_line)
    f = lookup(fmt.kind)
    if f is None:
        msg = f"no extractor for {fmt.kind!r}"
        raise ValueError(msg)
    return f.extractor(fmt, max_line) if f.extractor is not None else None
