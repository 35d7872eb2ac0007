"""Estimator families: the per-cell randomized state panstream keeps, behind one contract.

* :class:`DensityEstimator` — one bit per cell (how many distinct, and where).
* :class:`FrequencyEstimator` — one modular counter per cell (how often: seen once, returning,
  cropped means).
* :class:`SketchEstimator` — a Sketch-Flip-Merge grid of bits over hashed items (how many distinct,
  of any items, in kilobytes; Presto-compatible).

All keep the contract of :class:`~panstream.estimators.base.Estimator` (updates, ledger, snapshots,
rotation), which the state files, checkpoints, Kafka shards, merges, audit and command line use.
:func:`restore` and :func:`load` rebuild whichever family a snapshot names.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from panstream.calibration import (
    DEFAULT_CALIBRATION,
    DEFAULT_MODULUS,
    calibrate,
    calibrate_frequency,
)
from panstream.errors import ConfigurationError
from panstream.estimators.base import Estimator, UpdateResult
from panstream.estimators.density import DensityEstimator, Estimate
from panstream.estimators.frequency import FrequencyEstimate, FrequencyEstimator
from panstream.estimators.sketch.estimator import SketchEstimator
from panstream.estimators.sketch.sfm import SketchGrid
from panstream.release.ledger import DEFAULT_BUDGET, PrivacyLedger
from panstream.state import files
from panstream.state import format as fmt
from panstream.universe import Universe

#: The estimator class of each snapshot ``kind``.
FAMILIES: dict[str, type[Estimator]] = {DensityEstimator.kind: DensityEstimator,
                                        FrequencyEstimator.kind: FrequencyEstimator,
                                        SketchEstimator.kind: SketchEstimator}

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
        raise fmt.SnapshotVersionError(msg) from None


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
        cls = SketchEstimator
        if grid.items == "ip-country":  # one grid per country (panstream.country.sketch)
            from panstream.country.sketch import CountrySketchEstimator as cls  # noqa: N813
        return cls(epsilon, grid.buckets, grid.levels, grid.items, budget, layout,
                   hashing=grid.hashing, _ledger=ledger)
    if str(getattr(universe, "spec", universe)).startswith("hashed-ip-country:"):  # by country
        from panstream.country.hashed import CountryDensityEstimator

        return CountryDensityEstimator(universe, epsilon, calibration, budget, layout,
                                       _ledger=ledger)
    return DensityEstimator(universe, epsilon, calibration, budget, layout, _ledger=ledger)


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
    """Rebuild an estimator of whichever family the snapshot bytes name. See
    :meth:`Estimator.restore`."""
    snap = fmt.decode(data, expect=expect)
    cls = family(snap.kind)
    return cls._build(snap, np.array(snap.payload, dtype=np.uint8), layout)


def load(path: str | os.PathLike[str], *, expect: Mapping[str, Any] | None = None,
         layout: str = "auto") -> Estimator:
    """Read a state file of whichever family it holds. See :meth:`Estimator.load`.

    >>> import os, tempfile, panstream as ps
    >>> path = os.path.join(tempfile.mkdtemp(), "s.pst")
    >>> ps.DensityEstimator("range:64").save(path)
    >>> type(load(path)).__name__
    'DensityEstimator'
    >>> ps.FrequencyEstimator("range:64").save(path)
    >>> type(load(path)).__name__
    'FrequencyEstimator'
    """
    snap, payload = files.read_verified(path, expect=expect)
    try:
        cls = family(snap.kind)
    except BaseException:
        payload.fill(0)
        raise
    return cls._build(snap, payload, layout, path)


def release_file(path: str | os.PathLike[str], epsilon: float, mechanism: str = "laplace", *,
                 by: int | str | None = None, **kwargs: Any) -> Any:
    """Release from the state file at ``path``: the one path to a state file's ledger.

    Under the state's exclusive lock (:func:`panstream.state.files.state_lock`: refused while an
    ingest or another release holds it), load the state, release (``by``: a density map), save it
    with the charged ledger, and only then return the release: the charge is durable before the
    number exists anywhere. A shard file of a consumer group refuses (it has no budget of its own:
    release its group); a rolled-back file refuses (its ledger is older than its history).

    Returns:
        The :class:`~panstream.release.density.Release` (or map / family release).

    Raises:
        StateError: locked, missing, corrupt, a shard or rolled back; BudgetExhaustedError: the
            budget does not cover ``epsilon``; ConfigurationError: bad arguments (``by`` on a
            family without maps).
    """
    with files.state_lock(path, "a release"):
        est = load(path)
        try:
            check_release_options(est.kind, kwargs, f"{path} holds a {est.kind} state")
            if by is None or (by == "country" and hasattr(est, "release_by_country")):
                rel = est.release(epsilon, mechanism, **kwargs)
            elif by == "country":
                msg = (f"--by country needs a state that keeps one grid per country (ingest "
                       f"--estimator sketch -u sketch:1024x24:ip-country); {path} holds "
                       f"{est.universe.spec}")
                raise ConfigurationError(msg)
            elif isinstance(est, DensityEstimator):
                rel = est.release_map(epsilon, by, mechanism, **kwargs)
            else:
                msg = f"density maps (--by) need a density state; {path} holds a {est.kind} state"
                raise ConfigurationError(msg)
            est.save(path)  # the charge is durable before anything is returned
        finally:
            est.wipe()
    return rel


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
