"""The pan-private density estimator (Dwork, Naor, Pitassi, Rothblum, Yekhanin; "Pan-Privacy" in
Dwork's CACM survey).

State: one bit per cell of a public universe X, nothing else. Each bit starts as a draw of
D0 = Bernoulli(q); every arrival of an item redraws its cell's bit from D1 = Bernoulli(p), p > q.
If a fraction ``f`` of the cells appeared, the fraction of ones is ``theta`` with

    E[theta] = f * p + (1 - f) * q   so   f_hat = (theta - q) / (p - q)   is unbiased

(formulas in :mod:`panstream.release.stats`). Accuracy: under the binomial model
Var[theta] = (f p (1-p) + (1-f) q (1-q)) / |X|. The default randomized-response calibration has
p = 1 - q, so p(1-p) = q(1-q) and the standard deviation of the density estimate is
``sqrt(pq) / ((p - q) sqrt|X|) = 1 / (2 sinh(epsilon/2) sqrt|X|)`` whatever the density: at
epsilon = 1 (p - q = tanh(1/2) = 0.462) and |X| = 2**16 that is 0.0037, i.e. +-0.73 % density at
95 % ("tight", q = 1/2: 0.0062 at density 0). Quadrupling |X| halves it; the error of a distinct
*count* (density * |X|) grows as sqrt|X|.

The estimate here is noiseless and for diagnostics and tests only: publishing it would leak more than
the state's epsilon. Publish through :meth:`DensityEstimator.release`, which adds output noise.

>>> import panstream as ps
>>> est = ps.DensityEstimator(ps.Universe.range(1 << 14), epsilon=1.0)
>>> r = est.update(range(8192))
>>> r.accepted
8192
>>> abs(est.estimate().density - 0.5) < 6 * est.estimate().stderr_density
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from panstream.calibration import CALIBRATIONS, DEFAULT_CALIBRATION, calibrate
from panstream.errors import ConfigurationError, CorruptSnapshotError, SnapshotMismatchError
from panstream.estimators.base import Estimator, UpdateResult, as_universe, register_family, variant
from panstream.estimators.bittable import BitTable, RedrawnBits, choose_layout, packed_size
from panstream.randomness import P_BITS
from panstream.release import density as release_density
from panstream.release import maps
from panstream.release.ledger import DEFAULT_BUDGET, PrivacyLedger
from panstream.release.stats import (
    Figures,
    debias,
    distinct_from_density,
    stderr_distinct,
    stderr_state,
)
from panstream.universe import Universe

__all__ = ["DensityEstimator", "Estimate", "UpdateResult"]


@dataclass(frozen=True)
class Estimate(Figures):
    """A noiseless estimate from the table (diagnostics; do not publish).

    Attributes:
        theta: fraction of ones in the table.
        density: unbiased estimate of the fraction of cells that appeared, ``(theta-q)/(p-q)``.
        distinct: estimated number of distinct items. For ``hashed`` universes it is corrected for
            collisions by linear counting, ``-m ln(1 - density)``, unclamped below density 0
            (:func:`~panstream.release.stats.linear_count`), so sums of shard estimates stay
            unbiased.
        stderr_density: binomial-model standard error of ``density``.
        stderr_distinct: standard error of ``distinct`` (delta method for hashed universes).
        ones: number of ones; size: number of cells.
    """

    theta: float
    density: float
    distinct: float
    stderr_density: float
    stderr_distinct: float
    ones: int
    size: int


@register_family
class DensityEstimator(RedrawnBits, Estimator):
    """A pan-private estimator of the density and distinct count of a stream over a universe.

    Args:
        universe: the public universe of cells (a :class:`Universe` or its spec string).
        epsilon: the state epsilon asked for (privacy of any single leaked table).
        calibration: ``"rr"`` (default, randomized response: q = 1/(1+e^eps), p = 1 - q),
            ``"tight"`` (q = 1/2, p = 1 - e^-eps/2) or ``"paper"`` (q = 1/2, p = 1/2 + eps/4); see
            :mod:`panstream.calibration`.
        budget: total output epsilon that releases may spend (sequential composition).
        layout: ``"auto"``, ``"bytes"`` or ``"packed"``; see :mod:`panstream.estimators.bittable`.

    Attributes:
        universe, epsilon, calibration: as given.
        p: the exact D1 probability used (a dyadic :class:`~fractions.Fraction`).
        q: the exact D0 probability used (1/2 for "tight" and "paper").
        epsilon_state: the realized state epsilon of ``p`` and ``q``.
        ledger: the output privacy budget and the releases recorded against it.

    Raises:
        ConfigurationError: invalid epsilon, calibration, budget or universe spec.
    """

    kind: ClassVar[str] = "density"
    unit_sensitivity: ClassVar[int] = 1  # one person changes the count of ones by at most 1

    def __init__(self, universe: Universe | str, epsilon: float = 1.0,
                 calibration: str = DEFAULT_CALIBRATION, budget: float = DEFAULT_BUDGET,
                 layout: str = "auto", *, _table: BitTable | None = None,
                 _ledger: PrivacyLedger | None = None) -> None:
        self.universe = as_universe(universe)
        self.calibration = self._calibrate(epsilon, calibration).calibration
        self.ledger = _ledger if _ledger is not None else PrivacyLedger(budget)
        try:
            self._table = _table if _table is not None else BitTable.random(
                self.universe.size, layout, self._q_numerator)
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None

    # ------------------------------------------------------------------ properties
    # ------------------------------------------------------------------ the state
    def params(self) -> dict[str, Any]:
        """The public parameters stored in snapshots (kind ``density``)."""
        return {"kind": self.kind, "universe": self.universe.spec, "cells": self.size,
                "epsilon": float(self.epsilon), "calibration": self.calibration,
                "p_bits": P_BITS, "p_numerator": self._numerator,
                "q_numerator": self._q_numerator, **self.universe.state_params()}

    def describe(self) -> dict[str, Any]:
        """Calibration and the exact p and q, for ``panstream inspect``."""
        return {"calibration": self.calibration, "p": str(self.p), "p_float": float(self.p),
                "q": str(self.q), "q_float": float(self.q)}

    @classmethod
    def _from_snapshot(cls, params: Mapping[str, Any], ledger: PrivacyLedger,
                       payload: np.ndarray, layout: str) -> DensityEstimator:
        spec, cells, eps = params["universe"], params["cells"], params["epsilon"]
        cal = params.get("calibration")
        nums = (params.get("p_bits"), params.get("p_numerator"), params.get("q_numerator"))
        if cal not in CALIBRATIONS:
            raise CorruptSnapshotError.of_params(f"unknown calibration {cal!r} (known: {', '.join(CALIBRATIONS)})")
        if nums[0] != P_BITS or not all(isinstance(n, int) and not isinstance(n, bool)
                                        and 0 < n < 1 << P_BITS for n in nums[1:]):
            raise CorruptSnapshotError.of_params(f"probabilities {nums} are not {P_BITS}-bit numerators in (0, 1)")
        if payload.size != packed_size(cells):
            raise CorruptSnapshotError.of_params(f"a {payload.size}-byte table cannot hold {cells} cells")
        tail = cells % 8
        if tail and payload.size and int(payload[-1]) >> tail:
            raise CorruptSnapshotError.of_params("padding bits after the last cell are set (the format requires 0)")
        try:
            want = calibrate(eps, cal)
        except ConfigurationError as exc:
            raise CorruptSnapshotError.of_params(f"the stored epsilon cannot be calibrated: {exc}") from None
        if (want.numerator, want.q_numerator) != nums[1:]:
            msg = (f"snapshot stores p = {nums[1]}/2**{P_BITS}, q = {nums[2]}/2**{P_BITS} for "
                   f"epsilon {eps!r} ({cal}), but this panstream calibrates that to "
                   f"p = {want.numerator}/2**{P_BITS}, q = {want.q_numerator}/2**{P_BITS}: the "
                   "snapshot came from a different panstream version or calibration; resume it "
                   "with the version that wrote it, or start a new state")
            raise SnapshotMismatchError(msg)
        # Adopt the array instead of BitTable.from_packed(), which would copy up to 512 MiB again.
        # The realized epsilon is recomputed from the numerators (checked equal just above); a
        # snapshot stores none.
        by = variant(cls.kind, str(spec).partition(":")[0])  # hashed-ip-country: panstream.country
        if by is not None and cls is DensityEstimator:
            return by._from_snapshot(params, ledger, payload, layout)
        universe = as_universe(spec)
        universe.pin_state(params)  # before the table is adopted (a by-country table's countries)
        table = BitTable._from_packed_array(cells, payload, choose_layout(cells, layout))
        return cls(universe, eps, cal, ledger.budget, layout, _table=table, _ledger=ledger)

    # ------------------------------------------------------------------ reading
    def count_ones_by(self, bucket_cells: int) -> np.ndarray:
        """Number of ones in each run of ``bucket_cells`` consecutive cells (for maps)."""
        return self._table.count_ones_by(bucket_cells)

    def estimate(self) -> Estimate:
        """The noiseless estimate: for diagnostics and tests, never for publication."""
        ones = self.count_ones()
        n = self.size
        dens = debias(ones, n, self.p, self.q)
        se = stderr_state(dens, n, self.p, self.q)
        hashed = self.universe.is_hashed
        return Estimate(ones / n, dens, distinct_from_density(dens, n, hashed), se,
                        stderr_distinct(dens, se, n, hashed), ones, n)

    def release(self, epsilon: float, mechanism: str = "laplace",
                **kwargs: Any) -> release_density.Release:
        """Publish a noisy estimate, charged to the ledger. See :mod:`panstream.release.density`."""
        return release_density.release(self, epsilon, mechanism, **kwargs)

    def release_map(self, epsilon: float, by: int | str, mechanism: str = "laplace",
                    **kwargs: Any) -> maps.MapRelease:
        """Publish a noisy density per bucket (``by``: ``"/24"`` or cells per bucket), charged once
        to the ledger for the whole map. See :mod:`panstream.release.maps`."""
        return maps.release_map(self, epsilon, by, mechanism, **kwargs)

    def __repr__(self) -> str:
        return (f"DensityEstimator({self.universe.spec!r}, epsilon={self.epsilon:g}, "
                f"calibration={self.calibration!r}, p={self.p}, q={self.q}, "
                f"epsilon_state={self.epsilon_state:.6g}, layout={self.layout!r})")
