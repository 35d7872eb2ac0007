"""A regular expression of your own (``'regex:PATTERN'``): the escape hatch for every other log.

The (first) named group, else group 1, of the pattern searched in each line is the client
(:class:`panstream.inputs.extractors.Regex`); a line it does not match is malformed, so the loud
check calls the pattern wrong only when it matches (almost) nothing. ``-f auto`` never picks it;
when no known format fits, it suggests one. Its lines carry no time this panstream reads.
"""

from __future__ import annotations

import re

from panstream.inputs.extractors import Regex
from panstream.inputs.formats.base import Format, LogFormat, bad_format, register


def _pattern(spec: str, arg: str) -> Format:
    try:
        pat = re.compile(arg)
    except re.error as exc:
        raise bad_format(spec, f" (the regular expression does not compile: {exc})") from None
    if pat.groups < 1:
        raise bad_format(spec, " (the regular expression needs a group around the address, "
                               "e.g. 'regex:from (?P<ip>\\S+) port')")
    return Format("regex", 0, arg)


register(LogFormat(
    "regex", "regular expression", order=90, help="'regex:PATTERN' (one named group)",
    arg="required", parse_arg=_pattern, extractor=lambda fmt, n: Regex(fmt.arg, n), sparse=True,
    where_help="'regex:... (?P<ip>\\S+) ...'", last_resort=True))
