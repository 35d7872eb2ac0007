"""One item per line (``plain``): surrounding spaces, tabs and a trailing CR are tolerated.

The item is the whole line, read by the parser's own vectorized line reader; any universe (an
address, a hashed item, a number of a range). ``-f auto`` names it when most first lines are one
token, and for an input of blank lines only. Its lines carry no time.
"""

from __future__ import annotations

from panstream.inputs.formats.base import Detection, LogFormat, Sample, register


def _detect(s: Sample) -> Detection | None:
    # one token per line: any item (hashed and range universes too)
    return None if s.multi else s.found("plain")


register(LogFormat("plain", "one item per line", order=10, help="plain", detect=_detect,
                   rank=900, where="whole lines"))
