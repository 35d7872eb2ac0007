"""Deliberately broken sketches, for the audit to catch. BROKEN ON PURPOSE.

They live in the test tree only (``tests/sketch/test_sketch_audit.py`` checks that the audit catches
them, ``bench/bench_sketch_audit.py`` measures the bounds at the default trial count) and are never a
code path of panstream. Both have an infinite true epsilon: one world never shows the target's bit
in one of its values.

* :class:`NoD0Sketch`: every bit starts at 0 (Presto's clear sketch, before the flip). The target's
  bit is 0 in every run without it, 1 with probability ``1 - q`` with it.
* :class:`NoRedrawSketch`: a hit sets its bit to 1 instead of redrawing it from D1 =
  Bernoulli(1 - q). The target's bit is 1 in every run with it, 0 with probability ``1 - q``
  without it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import panstream as ps
from panstream import audit as A
from panstream.estimators.bittable import BitTable
from panstream.randomness import P_BITS
from panstream.release.ledger import PrivacyLedger
from panstream.sketch.sfm import SketchGrid


class NoD0Sketch(ps.SketchEstimator):
    """BROKEN ON PURPOSE: every bit starts at 0 (no D0 draw), also after a rotation."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fresh_table()

    def _fresh_table(self) -> None:
        self._table.wipe()
        self._table = BitTable.random(self.size, self.layout, 0)


class NoRedrawSketch(ps.SketchEstimator):
    """BROKEN ON PURPOSE: a hit sets its bit to 1 (D1 = Bernoulli(1) instead of Bernoulli(1 - q))."""

    def _apply(self, idx: np.ndarray) -> None:
        self._table.redraw(idx, 1 << P_BITS)


def factory(cls: type[ps.SketchEstimator]) -> A.SketchFactory:
    """A :data:`panstream.audit.SketchFactory` building ``cls`` (ledger epoch fixed to ``"audit"``,
    as :func:`panstream.audit.real_sketch` does)."""

    def make(grid: SketchGrid, epsilon: float) -> ps.SketchEstimator:
        return cls(epsilon, grid.buckets, grid.levels, grid.items,
                   _ledger=PrivacyLedger(epoch="audit"))

    return make
