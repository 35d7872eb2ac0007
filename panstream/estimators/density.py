"""The pan-private density estimator (Dwork, Naor, Pitassi, Rothblum, Yekhanin; "Pan-Privacy" in
Dwork's CACM survey).

State: one bit per cell of a public universe X, nothing else. Each bit starts as a draw of
D0 = Bernoulli(1/2); every arrival of an item redraws its cell's bit from D1 = Bernoulli(p), p > 1/2.
If a fraction ``f`` of the cells appeared, the fraction of ones is ``theta`` with

    E[theta] = f * p + (1 - f) / 2   so   f_hat = (theta - 1/2) / (p - 1/2)   is unbiased.

Accuracy: under the binomial model Var[theta] = (f p (1-p) + (1-f)/4) / |X| <= 1/(4|X|), so the
standard deviation of the density estimate is about ``1 / (2 (p - 1/2) sqrt|X|)``: at epsilon = 1
(tight calibration, p - 1/2 = 0.316) and |X| = 2**16 that is 0.0062, i.e. +-1.2 % density at 95 %.
Quadrupling |X| halves it; the error of a distinct *count* (density * |X|) grows as sqrt|X|.

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

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from panstream.calibration import DEFAULT_CALIBRATION, calibrate
from panstream.errors import ArgumentTypeError, ConfigurationError, ItemError
from panstream.estimators.bittable import BitTable
from panstream.release.ledger import DEFAULT_BUDGET, PrivacyLedger
from panstream.universe import Universe, refuse_bare_item

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping
    from os import PathLike

    from panstream.release.density import Release
    from panstream.release.maps import MapRelease


@dataclass(frozen=True)
class UpdateResult:
    """What one :meth:`DensityEstimator.update` call did. Operational only: never stored.

    Attributes:
        accepted: items mapped to a cell and applied.
        malformed: items that could not be parsed.
        outside: well-formed items outside the universe.
        empty: empty or all-whitespace text items.

    The classes are those of :class:`~panstream.universe.IndexResult` and of the command line.
    """

    accepted: int
    malformed: int = 0
    outside: int = 0
    empty: int = 0

    @property
    def rejected(self) -> int:
        """Items dropped for any reason."""
        return self.malformed + self.outside + self.empty


@dataclass(frozen=True)
class Estimate:
    """A noiseless estimate from the table (diagnostics; do not publish).

    Attributes:
        theta: fraction of ones in the table.
        density: unbiased estimate of the fraction of cells that appeared, ``(theta-1/2)/(p-1/2)``.
        distinct: estimated number of distinct items. For ``hashed`` universes it is corrected for
            collisions by linear counting, ``-m ln(1 - density)``.
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def density_from_theta(theta: float, p: Fraction | float) -> float:
    """Debias a fraction of ones: ``(theta - 1/2) / (p - 1/2)``."""
    return (theta - 0.5) / (float(p) - 0.5)


def stderr_density(density: float, p: Fraction | float, size: int) -> float:
    """Binomial-model standard error of the density estimate, at plug-in density clamped to [0, 1]."""
    f = min(1.0, max(0.0, density))
    pf = float(p)
    var_theta = (f * pf * (1 - pf) + (1 - f) * 0.25) / size
    return math.sqrt(var_theta) / (pf - 0.5)


def distinct_from_density(density: float, size: int, hashed: bool) -> float:
    """Distinct-item count from a density: ``density * size``, or linear counting if ``hashed``.

    For hashed universes a density at or above ``1 - 1/size`` saturates: the estimate is capped at
    ``size * ln(size)`` (the table is too small for the stream; plan a larger one).
    """
    if not hashed:
        return density * size
    f = min(max(density, 0.0), 1.0 - 1.0 / size)
    return -size * math.log1p(-f)


def stderr_distinct(density: float, se_density: float, size: int, hashed: bool) -> float:
    """Standard error of :func:`distinct_from_density` (delta method for linear counting)."""
    if not hashed:
        return se_density * size
    f = min(max(density, 0.0), 1.0 - 1.0 / size)
    return se_density * size / (1.0 - f)


class DensityEstimator:
    """A pan-private estimator of the density and distinct count of a stream over a universe.

    Args:
        universe: the public universe of cells (a :class:`Universe` or its spec string).
        epsilon: the state epsilon asked for (privacy of any single leaked table).
        calibration: ``"tight"`` (default: p = 1 - e^-eps/2) or ``"paper"`` (p = 1/2 + eps/4); see
            :mod:`panstream.calibration`.
        budget: total output epsilon that releases may spend (sequential composition).
        layout: ``"auto"``, ``"bytes"`` or ``"packed"``; see :mod:`panstream.estimators.bittable`.

    Attributes:
        universe, epsilon, calibration: as given.
        p: the exact D1 probability used (a dyadic :class:`~fractions.Fraction`).
        epsilon_state: the realized state epsilon of ``p``.
        ledger: the output privacy budget and the releases recorded against it.

    Raises:
        ConfigurationError: invalid epsilon, calibration, budget or universe spec.
    """

    def __init__(self, universe: Universe | str, epsilon: float = 1.0,
                 calibration: str = DEFAULT_CALIBRATION, budget: float = DEFAULT_BUDGET,
                 layout: str = "auto", *, _table: BitTable | None = None,
                 _ledger: PrivacyLedger | None = None) -> None:
        if isinstance(universe, str):
            universe = Universe.parse(universe)
        if not isinstance(universe, Universe):
            msg = f"universe must be a Universe or a spec string, got {type(universe).__name__}"
            raise ArgumentTypeError(msg)
        self.universe = universe
        cal = calibrate(epsilon, calibration)
        self.epsilon = cal.epsilon
        self.calibration = cal.calibration
        self._numerator = cal.numerator
        self.p: Fraction = cal.p
        self.epsilon_state: float = cal.epsilon_state
        self.ledger = _ledger if _ledger is not None else PrivacyLedger(budget)
        try:
            self._table = _table if _table is not None else BitTable.random(universe.size, layout)
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None

    # ------------------------------------------------------------------ properties
    @property
    def size(self) -> int:
        """Number of cells |X|."""
        return self.universe.size

    @property
    def p_numerator(self) -> int:
        """``p * 2**32``: the exact integer threshold of the D1 sampler."""
        return self._numerator

    @property
    def layout(self) -> str:
        """The table layout in use: ``"bytes"`` or ``"packed"``."""
        return self._table.layout

    # ------------------------------------------------------------------ updates
    def update(self, items: Iterable[Any] | np.ndarray) -> UpdateResult:
        """Apply a batch of arrivals: every named cell gets a fresh draw from D1.

        Items that are malformed or outside the universe are skipped and counted in the result (the
        counts are not kept). Integer NumPy arrays are mapped vectorized; see
        :meth:`Universe.indices`. Writable NumPy arrays and bytearrays passed in are overwritten with
        zeros after use, so raw items do not linger.

        Raises:
            ArgumentTypeError: ``items`` is a bare ``str``, ``bytes``, ``bytearray`` or
                ``memoryview``: pass a list (``update(["alice@example.com"])``). Nothing is applied.

        >>> est = DensityEstimator("hashed:1024")
        >>> est.update(["alice@example.com"]).accepted
        1
        """
        refuse_bare_item(items, "update")
        res = self.universe.indices(items)
        try:
            self._table.redraw(res.indices, self._numerator)
        finally:
            res.indices.fill(0)
            _wipe(items)
        return UpdateResult(int(res.indices.size), res.malformed, res.outside, res.empty)

    def update_indices(self, idx: np.ndarray, *, wipe: bool = True) -> int:
        """Fast path: apply arrivals given as cell indices (a NumPy integer array).

        Args:
            idx: cell indices in ``0..size-1``.
            wipe: overwrite ``idx`` with zeros after use if it is writable (default).

        Returns:
            The number of indices applied.

        Raises:
            ArgumentTypeError: ``idx`` is not an integer array (a ``TypeError``).
            ItemError: an index lies outside ``0..size-1`` (nothing is applied then).
        """
        arr = np.asarray(idx)
        if arr.dtype.kind not in "iu":
            msg = (f"update_indices needs an integer array, got dtype {arr.dtype}; convert cell "
                   "numbers with np.asarray(idx, dtype=np.int64) or map items with update()")
            raise ArgumentTypeError(msg)
        arr = arr.reshape(-1)
        n = arr.size
        if n:
            lo, hi = int(arr.min()), int(arr.max())
            if lo < 0 or hi >= self.size:
                msg = (f"cell index out of range 0..{self.size - 1} (saw {lo}..{hi}); map items "
                       "with update() or Universe.indices() to have them counted and skipped")
                raise ItemError(msg)
        own = arr.astype(np.intp, copy=False)
        try:
            self._table.redraw(own, self._numerator)
        finally:
            if own is not arr:
                own.fill(0)
            if wipe:
                _wipe(idx)
        return int(n)

    # ------------------------------------------------------------------ reading
    def bits(self) -> np.ndarray:
        """A ``uint8`` 0/1 copy of the table: exactly what an intruder reading memory would see."""
        return self._table.bits()

    def count_ones(self) -> int:
        """Number of ones in the table (sensitivity 1 with respect to one person)."""
        return self._table.count_ones()

    def estimate(self) -> Estimate:
        """The noiseless estimate: for diagnostics and tests, never for publication."""
        ones = self.count_ones()
        n = self.size
        theta = ones / n
        dens = density_from_theta(theta, self.p)
        se = stderr_density(dens, self.p, n)
        hashed = self.universe.kind == "hashed"
        return Estimate(theta, dens, distinct_from_density(dens, n, hashed), se,
                        stderr_distinct(dens, se, n, hashed), ones, n)

    def release(self, epsilon: float, mechanism: str = "laplace", **kwargs: Any) -> Release:
        """Publish a noisy estimate, charged to the ledger. See :mod:`panstream.release.density`."""
        from panstream.release.density import release

        return release(self, epsilon, mechanism, **kwargs)

    def release_map(self, epsilon: float, by: int | str, mechanism: str = "laplace",
                    **kwargs: Any) -> MapRelease:
        """Publish a noisy density per bucket (``by``: ``"/24"`` or cells per bucket), charged once
        to the ledger for the whole map. See :mod:`panstream.release.maps`."""
        from panstream.release.maps import release_map

        return release_map(self, epsilon, by, mechanism, **kwargs)

    def __repr__(self) -> str:
        return (f"DensityEstimator({self.universe.spec!r}, epsilon={self.epsilon:g}, "
                f"calibration={self.calibration!r}, p={self.p}, "
                f"epsilon_state={self.epsilon_state:.6g}, layout={self.layout!r})")

    # ------------------------------------------------------------------ state (panstream.state.format)
    def snapshot(self) -> bytes:
        """The state as snapshot bytes: public parameters, ledger and table only (see
        :mod:`panstream.state.format`; format in ``docs/snapshot-format.md``)."""
        from panstream.state.format import snapshot_of

        return snapshot_of(self)

    @classmethod
    def restore(cls, data: bytes | bytearray | memoryview, *, expect: Mapping[str, Any] | None = None,
                layout: str = "auto") -> DensityEstimator:
        """Rebuild an estimator from :meth:`snapshot` bytes; future draws are fresh (no seed exists).

        ``expect`` may name the ``universe``, ``epsilon`` and ``calibration`` the caller resumes with.
        Raises :class:`~panstream.errors.StateError` (a subclass from :mod:`panstream.state.format`) on
        corrupt, truncated, foreign or future-version data, or on contradicting parameters.
        """
        from panstream.state.format import restore

        return restore(cls, data, expect=expect, layout=layout)

    def save(self, path: str | PathLike[str]) -> None:
        """Write :meth:`snapshot` to ``path`` atomically with mode 0600 (:mod:`panstream.state.files`)."""
        from panstream.state.files import save_estimator

        save_estimator(self, path)

    @classmethod
    def load(cls, path: str | PathLike[str], *, expect: Mapping[str, Any] | None = None,
             layout: str = "auto") -> DensityEstimator:
        """Read an estimator written by :meth:`save`; see :meth:`restore` for ``expect`` and errors."""
        from panstream.state.files import load_estimator

        return load_estimator(cls, path, expect=expect, layout=layout)

    def rotate(self) -> PrivacyLedger:
        """Start a new epoch: wipe the table, draw a fresh D0 table and a fresh ledger (same budget).

        Use it after an announced intrusion: later states are independent of the dumped one. Releases
        of the old epoch stay valid; the old ledger is returned as their record. See
        ``docs/threat-model.md``.
        """
        old, self.ledger = self.ledger, PrivacyLedger(self.ledger.budget)
        self._table.wipe()
        self._table = BitTable.random(self.size, self.layout)
        return old


def _wipe(buf: object) -> None:
    """Overwrite a caller's writable NumPy array or bytearray with zeros."""
    if isinstance(buf, np.ndarray) and buf.flags.writeable:
        buf.fill(0)
    elif isinstance(buf, bytearray):
        buf[:] = bytes(len(buf))
