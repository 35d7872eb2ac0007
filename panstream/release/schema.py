"""One JSON shape for every released estimate: the same names for the same things in every family.

Every ``--json`` estimate (``release`` of a density table, a sketch or a frequency table, a map's
total, a series record) carries these top-level keys, described by ``docs/schema/
release.schema.json``:

* ``family``: ``"density"``, ``"sketch"`` or ``"frequency"``; ``universe``: the universe spec;
* ``statistic``: what ``estimate`` is (``"distinct"``, ``"present"``);
* ``estimate``, ``low``, ``high``: the unbiased estimate and its interval at ``confidence``
  (never clamped: a value below 0 is what the noise gave; printouts clamp, see
  :mod:`panstream.release.honesty`); ``stderr``: its standard deviation;
* ``noise_dominated``: the interval is wider than the value
  (:func:`panstream.release.honesty.noise_dominated`);
* ``epsilon``: ``{"state", "release", "total"}``, realized (``release`` is this output's epsilon,
  ``total`` the pan-private total after it);
* ``extras``: what only this family has (a density's ``density`` and ``noisy_ones``, a sketch's
  per-level counts, a frequency table's ``stats``, a map's ``rows``).

The names a family used before (``distinct``, ``distinct_low``, ``stderr_density``, ``stats``,
``epsilon_state``, ...) stay at the top level as aliases for one release (docs/release.md, "One
JSON shape"), except ``epsilon``, which was the output epsilon as a number and is now the object
(the number is ``epsilon.release``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from panstream.release.honesty import noise_dominated

__all__ = ["FAMILIES", "estimate_fields"]

#: The estimator families a ``family`` key names.
FAMILIES = ("density", "sketch", "frequency")


def _num(x: float) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def estimate_fields(*, family: str, universe: str, statistic: str, estimate: float, low: float,
                    high: float, stderr: float, confidence: float, epsilon_state: float,
                    epsilon_release: float, epsilon_total: float,
                    extras: Mapping[str, Any], aliases: Mapping[str, Any] | None = None
                    ) -> dict[str, Any]:
    """The common top-level keys of a released estimate, its ``extras``, and the old names
    (``aliases``, minus the ones the common shape redefines) beside them.

    >>> d = estimate_fields(family="sketch", universe="sketch:4096x24:ip", statistic="distinct",
    ...                     estimate=193.0, low=-22.0, high=408.0, stderr=110.0, confidence=0.95,
    ...                     epsilon_state=1.0, epsilon_release=0.5, epsilon_total=1.5, extras={})
    >>> d["noise_dominated"], d["epsilon"]["release"]
    (True, 0.5)
    """
    if family not in FAMILIES:
        msg = f"unknown family {family!r}"
        raise ValueError(msg)
    out: dict[str, Any] = {
        "family": family, "universe": universe, "statistic": statistic,
        "estimate": _num(estimate), "low": _num(low), "high": _num(high),
        "stderr": _num(stderr), "confidence": float(confidence),
        "noise_dominated": noise_dominated(estimate, low, high),
        "epsilon": {"state": float(epsilon_state), "release": float(epsilon_release),
                    "total": float(epsilon_total)},
        "extras": dict(extras),
    }
    for k, v in (aliases or {}).items():
        out.setdefault(k, v)
    return out
