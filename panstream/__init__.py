"""panstream: pan-private streaming density, distinct-count and frequency estimation.

Keep only a randomized table over a public universe (a bit per cell, or a modular counter per
cell), never the data; publish noisy releases against a privacy budget. See README.md for the
privacy model, and docs/architecture.md for the floors of the package (the pure core, inputs/,
estimators/, release/, country/, state/, windows/, sources/, then what reads the whole house and
cli/).

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
from panstream.estimators import DensityEstimator, Estimate, Estimator, UpdateResult
from panstream.estimators.frequency import FrequencyEstimate, FrequencyEstimator
from panstream.estimators.sketch.estimator import SketchEstimator
from panstream.planning import Split, SplitPlan, plan_split
from panstream.release.density import Release
from panstream.release.frequency import FrequencyRelease
from panstream.release.ledger import PrivacyLedger
from panstream.release.maps import MapRelease
from panstream.release.remap import remap
from panstream.release.telemetry import DEFAULT_TELEMETRY_EPSILON, CountWindow, TelemetryPolicy
from panstream.state.persist import load, release_file, restore
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
    "Estimator",
    "FrequencyEstimate",
    "FrequencyEstimator",
    "SketchEstimator",
    "FrequencyRelease",
    "IndexResult",
    "ItemError",
    "MapRelease",
    "PanstreamError",
    "PrivacyLedger",
    "Release",
    "SourceError",
    "Split",
    "SplitPlan",
    "StateError",
    "TelemetryPolicy",
    "Universe",
    "UniverseError",
    "UpdateResult",
    "__version__",
    "calibrate",
    "load",
    "plan_split",
    "realized_epsilon",
    "release_file",
    "remap",
    "restore",
]

# The features that plug into the layers below register their kinds on import (issue 36): the
# country wing (hashed-ip-country, sketch ip-country grids and tables) and the input side's batch
# reader. Every panstream import runs this file first, so no spec a user can type is missed.
from panstream import country as _country  # noqa: E402, F401 - registers its kinds
from panstream import _moved as _moved  # noqa: E402 - old module names, kept for one release
from panstream.inputs import ipv6 as _ipv6  # noqa: E402, F401 - registers the batch reader

_moved.install()
