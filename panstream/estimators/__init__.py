"""Estimator families: the per-cell randomized state panstream keeps, behind one contract.

* :class:`DensityEstimator` — one bit per cell (how many distinct, and where).
* :class:`FrequencyEstimator` — one modular counter per cell (how often: seen once, returning,
  cropped means).
* :class:`SketchEstimator` — a Sketch-Flip-Merge grid of bits over hashed items (how many distinct,
  of any items, in kilobytes; Presto-compatible).

All keep the contract of :class:`~panstream.estimators.base.Estimator` (updates, ledger, snapshots,
rotation), which the state files, checkpoints, Kafka shards, merges, audit and command line use.
Snapshots and state files are :mod:`panstream.state.persist`'s; :func:`restore`, :func:`load` and
:func:`release_file` here are its thin wrappers, kept for one release (issue 36).

The package's modules:

:mod:`panstream.estimators.base`
    The contract, and the registries of families (:func:`~panstream.estimators.base.register_family`)
    and of a feature's variants of a family (the country wing's by-country tables).
:mod:`panstream.estimators.bittable`, :mod:`panstream.estimators.counters`
    The randomized tables: bits, and modular counters.
:mod:`panstream.estimators.density`, :mod:`panstream.estimators.frequency`
    The density and frequency families.
:mod:`panstream.estimators.sketch`
    The sketch family (a package: Presto's hashes, the grid and its fit, the state, the release).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from panstream.calibration import DEFAULT_CALIBRATION, DEFAULT_MODULUS, calibrate, calibrate_frequency
from panstream.errors import ConfigurationError, SnapshotVersionError
from panstream.estimators.base import FAMILIES, Estimator, UpdateResult, _persistence, variant
from panstream.estimators.density import DensityEstimator, Estimate
from panstream.estimators.frequency import FrequencyEstimate, FrequencyEstimator
from panstream.estimators.sketch.estimator import SketchEstimator
from panstream.estimators.sketch.sfm import SketchGrid
from panstream.release.ledger import DEFAULT_BUDGET, PrivacyLedger
from panstream.universe import Universe


__all__ = ["FAMILIES", "DensityEstimator", "Estimate", "Estimator", "FrequencyEstimate",
           "FrequencyEstimator", "SketchEstimator", "UpdateResult", "check_release_options",
           "expect_of", "family", "load", "new", "release_file", "restore", "state_epsilon"]


def family(kind: str) -> type[Estimator]:
    """The estimator class of a snapshot ``kind``.

    Raises:
        SnapshotVersionError: a kind this panstream does not implement.
    """
    try:
        return FAMILIES[kind]
    except KeyError:
        msg = (f"this panstream does not implement estimators of kind {kind!r} (it has "
               f"{', '.join(FAMILIES)}): upgrade panstream to read the state")
        raise SnapshotVersionError(msg) from None


def new(kind: str, universe: Universe | str, epsilon: float, *,
        calibration: str = DEFAULT_CALIBRATION, modulus: int = DEFAULT_MODULUS,
        budget: float = DEFAULT_BUDGET, ledger: PrivacyLedger | None = None,
        layout: str = "auto") -> Estimator:
    """A fresh estimator of family ``kind`` (``"density"`` uses ``calibration``, ``"frequency"``
    uses ``modulus``; the other family's setting is ignored). A ``"sketch"`` takes its grid as the
    universe (a :class:`~panstream.estimators.sketch.sfm.SketchGrid` or a spec such as ``sketch:4096x24:ip``).

    >>> type(new("frequency", "range:64", 1.0, modulus=8)).__name__
    'FrequencyEstimator'
    """
    family(kind)
    if kind == FrequencyEstimator.kind:
        return FrequencyEstimator(universe, epsilon, modulus, budget, layout, _ledger=ledger)
    if kind == SketchEstimator.kind:
        grid = universe if isinstance(universe, SketchGrid) else SketchGrid.parse_spec(str(universe))
        cls = variant(kind, grid.items) or SketchEstimator  # ip-country: panstream.country
        return cls(epsilon, grid.buckets, grid.levels, grid.items, budget, layout,
                   hashing=grid.hashing, _ledger=ledger)
    spec = str(getattr(universe, "spec", universe))
    cls = variant(kind, spec.partition(":")[0]) or DensityEstimator  # hashed-ip-country: by country
    return cls(universe, epsilon, calibration, budget, layout, _ledger=ledger)  # type: ignore[call-arg]


def state_epsilon(kind: str, epsilon: float, *, calibration: str = DEFAULT_CALIBRATION,
                  modulus: int = DEFAULT_MODULUS) -> float:
    """The realized state epsilon a family's table would have, from its exact probabilities.

    >>> state_epsilon("density", 1.0) <= 1.0 and state_epsilon("frequency", 1.0) <= 1.0
    True
    """
    family(kind)
    if kind == FrequencyEstimator.kind:
        return calibrate_frequency(epsilon, modulus).epsilon_state
    if kind == SketchEstimator.kind:
        return calibrate(epsilon, "rr").epsilon_state
    return calibrate(epsilon, calibration).epsilon_state


def expect_of(kind: str | None = None, universe: Universe | str | None = None,
              epsilon: float | None = None, calibration: str | None = None,
              modulus: int | None = None) -> dict[str, Any]:
    """The ``expect=`` mapping that checks a stored state against the parameters a caller resumes
    with (``None`` means "not given": not checked); ``calibration`` concerns only density states
    and ``modulus`` only frequency states."""
    d: dict[str, Any] = {"kind": kind, "universe": universe, "epsilon": epsilon}
    if kind not in (FrequencyEstimator.kind, SketchEstimator.kind):
        d["calibration"] = calibration
    if kind not in (DensityEstimator.kind, SketchEstimator.kind):
        d["modulus"] = modulus
    return {k: v for k, v in d.items() if v is not None}


def restore(data: bytes | bytearray | memoryview, *, expect: Mapping[str, Any] | None = None,
            layout: str = "auto") -> Estimator:
    """Rebuild an estimator of whichever family the snapshot bytes name: a thin wrapper, kept for
    one release, of :func:`panstream.state.persist.restore` (issue 36: state I/O is state's)."""
    return _persistence().restore(data, expect=expect, layout=layout)  # type: ignore[no-any-return]


def load(path: str | os.PathLike[str], *, expect: Mapping[str, Any] | None = None,
         layout: str = "auto") -> Estimator:
    """Read a state file of whichever family it holds: a thin wrapper, kept for one release, of
    :func:`panstream.state.persist.load`."""
    return _persistence().load(path, expect=expect, layout=layout)  # type: ignore[no-any-return]


def release_file(path: str | os.PathLike[str], epsilon: float, mechanism: str = "laplace", *,
                 by: int | str | None = None, **kwargs: Any) -> Any:
    """Release from the state file at ``path``, under its lock, the charge durable first: a thin
    wrapper, kept for one release, of :func:`panstream.state.persist.release_file`."""
    return _persistence().release_file(path, epsilon, mechanism, by=by, **kwargs)


def check_release_options(kind: str, options: Mapping[str, Any], where: str) -> None:
    """Refuse release options of the other family before anything is charged (``t``, the
    cropping threshold, is the frequency family's).

    Raises:
        ConfigurationError: ``t`` given for a density release.
    """
    if options.get("t") is not None and kind != FrequencyEstimator.kind:
        msg = (f"--crop (t) sets the threshold of a frequency release's cropped mean; {where}: "
               "nothing was released")
        raise ConfigurationError(msg)
