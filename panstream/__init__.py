"""panstream: pan-private streaming density, distinct-count and frequency estimation.

Keep only a randomized table over a public universe (a bit per cell, or a modular counter per
cell), never the data; publish noisy releases against a privacy budget. See README.md for the
privacy model.

>>> import panstream as ps
>>> est = ps.DensityEstimator(ps.Universe.ipv4("10.0.0.0/24"), epsilon=1.0)
>>> est.epsilon_state <= 1.0
True
"""

from __future__ import annotations

from panstream.calibration import calibrate, realized_epsilon
from panstream.errors import (
    ArgumentTypeError,
    BudgetExhaustedError,
    ConfigurationError,
    ItemError,
    PanstreamError,
    SourceError,
    StateError,
    UniverseError,
)
from panstream.estimators.density import DensityEstimator, Estimate, UpdateResult
from panstream.estimators.frequency import FrequencyEstimate, FrequencyEstimator
from panstream.release.ledger import PrivacyLedger

# Eager (NumPy only): a lazy export would be shadowed by the submodule panstream.release.remap as soon as
# anything imports from it, making ``panstream.release.remap`` a module instead of the function.
from panstream.release.remap import remap
from panstream.telemetry import DEFAULT_TELEMETRY_EPSILON, CountWindow, TelemetryPolicy
from panstream.universe import IndexResult, Universe

__version__ = "0.1.0"

__all__ = [
    "ArgumentTypeError",
    "BudgetExhaustedError",
    "ConfigurationError",
    "CountWindow",
    "DEFAULT_TELEMETRY_EPSILON",
    "DensityEstimator",
    "Estimate",
    "FrequencyEstimate",
    "FrequencyEstimator",
    "FrequencyRelease",
    "IndexResult",
    "ItemError",
    "MapRelease",
    "PanstreamError",
    "PrivacyLedger",
    "SourceError",
    "StateError",
    "TelemetryPolicy",
    "Universe",
    "UniverseError",
    "UpdateResult",
    "__version__",
    "calibrate",
    "realized_epsilon",
    "remap",
]


def __getattr__(name: str) -> object:
    # Later stages (release, remap, snapshot) are imported lazily so the core stays light.
    if name == "remap":
        from panstream.release.remap import remap

        return remap
    if name == "MapRelease":
        from panstream.release.maps import MapRelease

        return MapRelease
    if name == "FrequencyRelease":
        from panstream.release.frequency import FrequencyRelease

        return FrequencyRelease
    if name == "Release":
        from panstream.release.density import Release

        return Release
    raise AttributeError(f"module 'panstream' has no attribute {name!r}")
