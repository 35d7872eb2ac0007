"""The pan-private frequency estimator: one modular counter per cell (Dwork, Naor, Pitassi,
Rothblum, Yekhanin, "Pan-Private Streaming Algorithms", ICS 2010).

How often, not only whether: what fraction of clients came exactly once, how many returned t times,
the mean number of requests per client cropped at t, the fraction of heavy clients.

State: one counter ``c_x`` in Z_k per cell of a public universe X (k = ``modulus``, a power of two
from 4 to 256, default 16), nothing else. Each counter starts as a draw of D: 0 with probability
alpha, otherwise uniform on Z_k, so D(0) = alpha + (1 - alpha)/k and D(j) = (1 - alpha)/k. Every
arrival of an item adds 1 to its cell's counter modulo k (deterministic: no draw).

Privacy of one intrusion: a cell seen n times holds D shifted by n mod k; every shift of D is within
a factor max D / min D = 1 + alpha k / (1 - alpha) of D, whatever n is, and alpha =
(e^eps - 1)/(e^eps - 1 + k) makes that factor e^eps (alpha is rounded down to a dyadic
``n / 2**32``, and :attr:`FrequencyEstimator.epsilon_state` is computed from the exact alpha). Other
cells' laws do not depend on the target. Two intrusions of one epoch reveal the target's count mod
k in between: rotate after an announced intrusion, keep one copy (``docs/threat-model.md``).

Estimates (:mod:`panstream.release.incidence`): with H(j) the number of counters equal to j and N_j
the number of cells whose count is j mod k, ``N_hat_j = (H(j) - (1 - alpha)|X|/k) / alpha`` is
unbiased. **Aliasing**: a cell seen n >= k times counts in N_{n mod k}; the statistics are exact
in expectation only while counts stay below k (``docs/frequency.md``: bias and the choice of k).

The estimate here is noiseless, for diagnostics and tests only. Publish through
:meth:`FrequencyEstimator.release`, which adds noise to the histogram and charges the ledger.

>>> import numpy as np, panstream as ps
>>> est = ps.FrequencyEstimator(ps.Universe.range(1 << 14), epsilon=2.0, modulus=8)
>>> _ = est.update_indices(np.arange(4000))                 # 4000 cells seen once ...
>>> _ = est.update_indices(np.repeat(np.arange(3000), 2))   # ... 3000 of them twice more
>>> e = est.estimate()
>>> abs(e.stats.once.value - 1000) < 6 * e.stats.once.stderr
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from panstream.calibration import DEFAULT_MODULUS, MODULI, calibrate_frequency
from panstream.errors import (
    ConfigurationError,
    CorruptSnapshotError,
    SnapshotMismatchError,
    StateError,
)
from panstream.estimators.base import Estimator, UpdateResult, as_universe, register_family
from panstream.estimators.counters import (
    CounterTable,
    choose_layout,
    payload_problem,
)
from panstream.randomness import P_BITS
from panstream.release import frequency as freq_release
from panstream.release.incidence import IncidenceModel
from panstream.release.ledger import DEFAULT_BUDGET, PrivacyLedger, ShardLedger
from panstream.release.stats import DEFAULT_CONFIDENCE
from panstream.universe import Universe

__all__ = ["FrequencyEstimate", "FrequencyEstimator", "UpdateResult", "merge_partitioned"]


@dataclass(frozen=True)
class FrequencyEstimate:
    """A noiseless estimate from the counters (diagnostics; do not publish).

    Attributes:
        histogram: H(0..k-1), the number of counters holding each value.
        incidence: ``N_hat_j`` for j = 0..k-1, unbiased estimates of the cells whose count is j
            mod k (j = 0 includes the cells never seen).
        stderr_incidence: their standard errors (plug-in).
        stats: the derived statistics with normal intervals at ``confidence``
            (:class:`~panstream.release.frequency.FrequencySummary`).
        modulus, alpha (exact), size: the table's public parameters.
    """

    histogram: tuple[int, ...]
    incidence: tuple[float, ...]
    stderr_incidence: tuple[float, ...]
    stats: freq_release.FrequencySummary
    modulus: int
    alpha: Fraction
    size: int
    confidence: float

    def model(self) -> IncidenceModel:
        """The :class:`~panstream.release.incidence.IncidenceModel` (no release noise) for any
        other statistic, e.g. ``est.estimate().model().at_least(5)``."""
        return IncidenceModel(tuple(float(h) for h in self.histogram), self.size, self.modulus,
                              self.alpha, None, self.confidence)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"histogram": list(self.histogram), "incidence": list(self.incidence),
                "stderr_incidence": list(self.stderr_incidence), "stats": self.stats.to_dict(),
                "modulus": self.modulus, "alpha": str(self.alpha), "size": self.size,
                "confidence": self.confidence}


@register_family
class FrequencyEstimator(Estimator):
    """A pan-private estimator of how often the cells of a universe appear in a stream.

    Args:
        universe: the public universe of cells (a :class:`Universe` or its spec string).
        epsilon: the state epsilon asked for (privacy of any single leaked table).
        modulus: k, the counters' modulus: a power of two from 4 to 256 (default 16). Counts of k
            or more alias (``docs/frequency.md``); the error of every estimate grows as ``sqrt(k)``.
        budget: total output epsilon that releases may spend (sequential composition).
        layout: ``"auto"``, ``"bytes"`` or ``"packed"`` (two counters per byte, k <= 16); see
            :mod:`panstream.estimators.counters`.

    Attributes:
        universe, epsilon, modulus: as given.
        alpha: the exact probability (a dyadic :class:`~fractions.Fraction`) that a counter starts
            at 0 rather than uniform.
        epsilon_state: the realized state epsilon ``ln(1 + alpha k / (1 - alpha))``.
        ledger: the output privacy budget and the releases recorded against it.

    Raises:
        ConfigurationError: invalid epsilon, modulus, budget, layout or universe spec.
    """

    kind: ClassVar[str] = "frequency"
    unit_sensitivity: ClassVar[int] = 2  # one person moves one counter: the histogram by 2 in L1

    def __init__(self, universe: Universe | str, epsilon: float = 1.0,
                 modulus: int = DEFAULT_MODULUS, budget: float = DEFAULT_BUDGET,
                 layout: str = "auto", *, _table: CounterTable | None = None,
                 _ledger: PrivacyLedger | None = None) -> None:
        self.universe = as_universe(universe)
        cal = calibrate_frequency(epsilon, modulus)
        self.epsilon = cal.epsilon
        self.modulus: int = cal.modulus
        self._numerator = cal.numerator
        self.alpha: Fraction = cal.alpha
        self.epsilon_state: float = cal.epsilon_state
        self.ledger = _ledger if _ledger is not None else PrivacyLedger(budget)
        if _table is not None and (_table.size != self.universe.size
                                   or _table.modulus != self.modulus):
            msg = "the counter table does not match the universe size or modulus"
            raise ConfigurationError(msg)
        self._table = _table if _table is not None else CounterTable.random(
            self.universe.size, self.modulus, self._numerator, layout)

    # ------------------------------------------------------------------ properties
    @property
    def size(self) -> int:
        """Number of cells |X|."""
        return self.universe.size

    @property
    def alpha_numerator(self) -> int:
        """``alpha * 2**32``: the exact integer threshold of the "start at 0" draw."""
        return self._numerator

    @property
    def layout(self) -> str:
        """The table layout in use: ``"bytes"`` or ``"packed"``."""
        return self._table.layout

    # ------------------------------------------------------------------ the state
    def _apply(self, idx: np.ndarray) -> None:
        """Every named cell's counter gains its multiplicity in the batch, modulo k."""
        self._table.add(idx)

    def params(self) -> dict[str, Any]:
        """The public parameters stored in snapshots (kind ``frequency``)."""
        return {"kind": self.kind, "universe": self.universe.spec, "cells": self.size,
                "epsilon": float(self.epsilon), "modulus": self.modulus, "p_bits": P_BITS,
                "alpha_numerator": self._numerator}

    def describe(self) -> dict[str, Any]:
        """Modulus and the exact alpha, for ``panstream inspect``."""
        return {"modulus": self.modulus, "alpha": str(self.alpha), "alpha_float": float(self.alpha),
                "layout": self.layout}

    def _payload_view(self) -> memoryview:
        return self._table.payload_view()

    def _wipe_payload_view(self, view: memoryview) -> None:
        self._table.wipe_payload_view(view)

    @classmethod
    def _from_snapshot(cls, params: Mapping[str, Any], ledger: PrivacyLedger,
                       payload: np.ndarray, layout: str) -> FrequencyEstimator:
        spec, cells, eps = params["universe"], params["cells"], params["epsilon"]
        k, bits, num = params.get("modulus"), params.get("p_bits"), params.get("alpha_numerator")
        if isinstance(k, bool) or k not in MODULI:
            raise CorruptSnapshotError.of_params(f"modulus {k!r} is not a power of two from 4 to 256")
        if bits != P_BITS or isinstance(num, bool) or not isinstance(num, int) \
                or not 0 < num < 1 << P_BITS:
            raise CorruptSnapshotError.of_params(f"alpha {num!r} is not a {P_BITS}-bit numerator in (0, 1)")
        problem = payload_problem(cells, k, payload)
        if problem:
            raise CorruptSnapshotError.of_params(problem)
        try:
            want = calibrate_frequency(eps, k)
        except ConfigurationError as exc:
            raise CorruptSnapshotError.of_params(f"the stored epsilon cannot be calibrated: {exc}") from None
        if want.numerator != num:
            msg = (f"snapshot stores alpha = {num}/2**{P_BITS} for epsilon {eps!r} and modulus "
                   f"{k}, but this panstream calibrates that to {want.numerator}/2**{P_BITS}: the "
                   "snapshot came from a different panstream version; resume it with the version "
                   "that wrote it, or start a new state")
            raise SnapshotMismatchError(msg)
        table = CounterTable._from_payload_array(cells, k, payload, choose_layout(cells, k, layout))
        return cls(spec, eps, k, ledger.budget, layout, _table=table, _ledger=ledger)

    def _fresh_table(self) -> None:
        self._table.wipe()
        self._table = CounterTable.random(self.size, self.modulus, self._numerator, self.layout)

    def wipe(self) -> None:
        """Overwrite the table's memory with zeros (before it is dropped)."""
        self._table.wipe()

    # ------------------------------------------------------------------ reading
    def counters(self) -> np.ndarray:
        """A ``uint8`` copy of the counters (0..k-1): exactly what an intruder reading memory sees."""
        return self._table.counters()

    def histogram(self) -> np.ndarray:
        """H(0..k-1): how many counters hold each value (``int64``; L1 sensitivity 2 per person)."""
        return self._table.histogram()

    def estimate(self, t: int | None = None, confidence: float = DEFAULT_CONFIDENCE
                 ) -> FrequencyEstimate:
        """The noiseless estimate: for diagnostics and tests, never for publication.

        Args:
            t: threshold of the cropped mean and the heavy fraction (``1..k-1``, default
                ``min(4, k - 1)``).
            confidence: level of the (normal, plug-in) intervals.
        """
        hist = self.histogram()
        try:
            model = IncidenceModel(tuple(float(h) for h in hist), self.size, self.modulus,
                                   self.alpha, None, float(confidence))
            stats = freq_release.summarize(model, t)
            return FrequencyEstimate(tuple(int(h) for h in hist),
                                     tuple(iv.value for iv in stats.incidence),
                                     tuple(iv.stderr for iv in stats.incidence), stats,
                                     self.modulus, self.alpha, self.size, float(confidence))
        finally:
            hist.fill(0)

    def release(self, epsilon: float, mechanism: str = "laplace",
                **kwargs: Any) -> freq_release.FrequencyRelease:
        """Publish the noisy histogram and its statistics, charged to the ledger. See
        :func:`panstream.release.frequency.release_frequency` (``confidence=``, ``t=``)."""
        return freq_release.release_frequency(self, epsilon, mechanism, **kwargs)

    def __repr__(self) -> str:
        return (f"FrequencyEstimator({self.universe.spec!r}, epsilon={self.epsilon:g}, "
                f"modulus={self.modulus}, alpha={self.alpha}, "
                f"epsilon_state={self.epsilon_state:.6g}, layout={self.layout!r})")


def merge_partitioned(shards: Mapping[int, FrequencyEstimator], owner: np.ndarray
                      ) -> FrequencyEstimator:
    """One table from a keyed group's shards: cell ``c`` takes its counter from shard ``owner[c]``.

    With messages keyed by the item, cell ``c``'s arrivals all went to partition ``owner[c]``
    (:func:`panstream.state.merge.kafka_partitions_of_cells`), so the other shards' counters of
    ``c`` are untouched draws of D and are dropped; a partition without a shard was never consumed,
    and its cells get fresh draws of D. The result has exactly the law of one table fed the whole
    stream, is as private as one shard, and has no budget of its own (a
    :class:`~panstream.release.ledger.ShardLedger`: attach the group's ledger to release it).
    Every counter copy made here is zeroed.

    Raises:
        StateError: no shards, shards of different parameters, or ``owner`` of the wrong length.
    """
    ests = [shards[p] for p in sorted(shards)]
    if not ests:
        msg = "no shard tables to merge: is the state directory/topic the right one?"
        raise StateError(msg)
    first = ests[0]
    for e in ests[1:]:
        if e.universe != first.universe or e.modulus != first.modulus or e.alpha != first.alpha:
            msg = (f"shard tables disagree (universe {e.universe.spec}, modulus {e.modulus}, "
                   f"alpha {e.alpha} vs {first.universe.spec}, {first.modulus}, {first.alpha}): "
                   "they were not made by one consumer group configuration")
            raise StateError(msg)
    size = first.size
    if owner.shape != (size,):
        msg = f"cell-owner map has {owner.size} entries for a universe of {size} cells"
        raise StateError(msg)
    fresh = CounterTable.random(size, first.modulus, first.alpha_numerator, "bytes")
    merged = fresh.counters()
    fresh.wipe()
    try:
        for part, est in shards.items():
            cells = np.flatnonzero(owner == part)
            c = est.counters()
            merged[cells] = c[cells]
            c.fill(0)
            cells.fill(0)
        table = CounterTable.from_counters(merged, first.modulus, first.layout)
    finally:
        merged.fill(0)
    return FrequencyEstimator(first.universe, first.epsilon, first.modulus, 0.0, first.layout,
                              _table=table, _ledger=ShardLedger())
