"""When is a printed estimate mostly noise? One rule for every family, printout, plot and report.

An estimate is *noise-dominated* when its interval is wider than the value itself:
``high - low > |estimate|``. Such a number says little beyond "small": every place that prints,
plots or reports an estimate flags it (``release``, series records, maps, the demo, ``report``),
and says what would make it usable (a larger epsilon, a smaller universe, a longer window).

>>> noise_dominated(193.0, 0.0, 408.0)
True
>>> noise_dominated(19_983.0, 19_502.0, 20_465.0)
False
"""

from __future__ import annotations

__all__ = ["noise_dominated"]


def noise_dominated(estimate: float, low: float, high: float) -> bool:
    """True when the interval ``[low, high]`` is wider than ``|estimate|`` (module docstring)."""
    return float(high) - float(low) > abs(float(estimate))
