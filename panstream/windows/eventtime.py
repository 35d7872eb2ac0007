"""Window arithmetic: durations, a window's start, the name of an instant.

A windowed ``ingest`` (:mod:`panstream.windows`) puts every line in the window of the time the
line itself carries (*event time*). Reading that time is the input side's
(:mod:`panstream.inputs.times`, each format's module in :mod:`panstream.inputs.formats`; issue 36:
a line's time is read in ``inputs/``, beside its address); the names this module used to define
for it (:class:`TimeReader`, :func:`times`, :data:`TIMED_FORMATS`, ...) are re-exported here for
one release.

* :func:`parse_duration` reads ``15m``, ``1h``, ``1d``, ``7d``, ``90s`` (or plain seconds);
  :func:`window_start` aligns to UTC (``floor(t / size) * size`` from the UNIX epoch, so ``1d``
  windows start at 00:00 UTC and ``1h`` windows on the hour); :func:`label` names a window.

>>> parse_duration("1d"), parse_duration("15m"), parse_duration("90")
(86400, 900, 90)
>>> label(window_start(1_795_514_400, 86400))
'2026-11-24T00:00:00Z'
"""

from __future__ import annotations

import re

from panstream.errors import ConfigurationError
from panstream.inputs.formats.jsonlines import JSON_TIME_KEYS
from panstream.inputs.times import *  # noqa: F403 - the names this module used to define
from panstream.inputs.timestamps import NAT, label, line_bounds, seconds

__all__ = ["JSON_TIME_KEYS", "LOCAL_FORMATS", "NAT", "TIMED_FORMATS", "YEARLESS_FORMATS",  # noqa: F405
           "TimeReader", "check_time", "has_time", "label", "line_bounds", "lines_and_times",
           "needs_zone", "parse_duration", "seconds", "times", "window_start"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$", re.IGNORECASE)


def parse_duration(text: str | float, what: str = "duration") -> int:
    """Whole seconds of ``15m``, ``1h``, ``1d``, ``2w``, ``90s`` or a plain number of seconds.

    Raises:
        ConfigurationError: not a duration, or not a positive whole number of seconds.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value, unit = float(text), ""
    else:
        m = _DURATION.match(str(text))
        if m is None:
            msg = (f"{what} {text!r} is not a duration: write e.g. 90s, 15m, 1h, 1d or 7d "
                   "(or a number of seconds)")
            raise ConfigurationError(msg)
        value, unit = float(m.group(1)), m.group(2).lower()
    secs = value * _UNITS.get(unit, 1)
    if secs != int(secs) or secs < 0:
        msg = f"{what} {text!r} must be a whole number of seconds >= 0"
        raise ConfigurationError(msg)
    return int(secs)


def window_start(t: int | float, size: int) -> int:
    """Start (UNIX seconds) of the ``size``-second window holding ``t``, aligned to the epoch (UTC).

    >>> window_start(3599, 3600), window_start(3600, 3600)
    (0, 3600)
    """
    return int(t // size) * size
