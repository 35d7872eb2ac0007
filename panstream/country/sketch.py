"""Distinct clients by country, pan-privately: one Sketch-Flip-Merge grid per country, one table.

**The state.** ``-u sketch:1024x24:ip-country`` keeps a grid of ``B`` buckets x ``P`` levels for
every country slot of :data:`panstream.geo.COUNTRIES` (253 slots: the ISO 3166-1 codes, the
registries' EU/AP/XK, and ZZ for none), laid end to end: an address's cell is
``slot * B * P + level * B + bucket``, its country from the offline table (:mod:`panstream.geo`,
a public function of the address) and its bucket and level from its hash, as in one sketch. It
is one bit table with the sketch's randomized response: every bit a D0 = Bernoulli(q) draw at
the start, every arrival a fresh D1 = Bernoulli(1 - q) draw of its one bit. So, as for one
sketch (docs/sketch.md), the state's law at any moment is the product over bits of
Bernoulli(1 - q if hit, q if not): one person (one address) decides whether one bit is hit, and a
leaked state is ``epsilon_state``-DP per person, exactly as the family's law says. It is also,
country by country, Presto's privatized sketch of that country's clients.

**The release.** One person is one address in one country: with or without them only one bit
can differ, so the vector of all per-country per-level counts of ones (253 x P numbers) changes in
one entry by at most 1 (L1 sensitivity 1). :func:`panstream.release.country.release_by_country`
charges the ledger once, adds independent noise of scale ``1/epsilon`` to every count, and
estimates each country from its own noisy counts (parallel composition: one epsilon for the whole
table). Every slot is released, so which countries appear reveals nothing.

**Resuming.** A person is one cell only while the address-to-country table does not change: a
state records the table's version (``geo``) and refuses new arrivals under another version (its
releases still work). The grid keeps that pin (:class:`panstream.country.table.CountryCells`),
through the hooks every family calls (its parameters, its snapshot, its rotation), so this class
overrides only what one grid per country changes: the grid, the estimate, the release and what
a single sketch can do that this one cannot (``ones_by_level``, ``presto``).

Memory: 253 x B x P bits: 759 KiB at 1024 x 24, 3 MiB at 4096 x 24.

>>> est = CountrySketchEstimator(epsilon=4.0, buckets=256, levels=8)
>>> est.universe.spec, est.size == 253 * 256 * 8
('sketch:256x8:ip-country', True)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from panstream.country import table as geo
from panstream.errors import ConfigurationError
from panstream.estimators.bittable import BitTable
from panstream.estimators.sketch import sfm
from panstream.estimators.sketch.estimator import SketchEstimator
from panstream.release.ledger import DEFAULT_BUDGET, PrivacyLedger
from panstream.universe import Universe

__all__ = ["ITEMS", "CountryGrid", "CountrySketchEstimator"]

#: The item kind of a by-country grid (addresses, keyed by their country).
ITEMS = "ip-country"


class CountryGrid(geo.CountryCells, sfm.SketchGrid):
    """One sketch grid per country slot, laid end to end (spec ``sketch:BxP:ip-country``).

    ``size`` is ``len(COUNTRIES) * B * P``; ``cells_per_country`` is ``B * P``. ``geo`` is the
    address-to-country table the cells were computed with (``None`` until known: set from a
    state's parameters, or from the installed table at the first arrival).
    """

    __slots__ = ("cells_per_country", "geo")
    _PIN = ("state", "rotate to start a new state (releases of this one still work)")

    def __init__(self, buckets: int = 1024, levels: int = sfm.DEFAULT_LEVELS,
                 hashing: str | None = None) -> None:
        super().__init__(buckets, levels, "ip", hashing)
        suffix = "" if self.hashing == "murmur3" else f":{self.hashing}"
        per = buckets * levels
        Universe.__init__(self, "sketch", len(geo.COUNTRIES) * per,  # type: ignore[arg-type]
                          f"sketch:{buckets}x{levels}:{ITEMS}{suffix}")
        self.items = ITEMS
        self.cells_per_country = per
        self.geo: str | None = None

    @property
    def per_country(self) -> int:
        """Cells per country slot (``B * P``)."""
        return self.cells_per_country

    def _cells(self, canon: list[bytes]) -> np.ndarray:
        """The cell within a country's grid of each canonical address."""
        from panstream.estimators.sketch.hashing import hash_blobs

        h, _ = hash_blobs(canon, self.hashing)  # addresses are VARCHAR or murmur3 text: all ok
        cells = self.cells_of_hashes(h)
        h.fill(0)
        return cells


class CountrySketchEstimator(SketchEstimator):
    """A pan-private count of distinct client addresses per country (module docstring).

    Args:
        epsilon, buckets, levels, budget, layout, hashing: as for
            :class:`~panstream.sketch.estimator.SketchEstimator`; ``buckets`` is per country
            (default 1024: 3 KiB per country, 759 KiB in all at 24 levels).
        items: must be ``"ip-country"``.
    """

    universe: CountryGrid

    def __init__(self, epsilon: float = 1.0, buckets: int = 1024,
                 levels: int = sfm.DEFAULT_LEVELS, items: str = ITEMS,
                 budget: float = DEFAULT_BUDGET, layout: str = "auto", *,
                 hashing: str | None = None, _table: BitTable | None = None,
                 _ledger: PrivacyLedger | None = None) -> None:
        if items != ITEMS:
            msg = f"a by-country sketch counts addresses ({ITEMS!r} items), got {items!r}"
            raise ConfigurationError(msg)
        super().__init__(epsilon, buckets, levels, ITEMS, budget, layout, hashing=hashing,
                         _table=_table, _ledger=_ledger)

    @staticmethod
    def _grid(buckets: int, levels: int, items: str, hashing: str | None) -> sfm.SketchGrid:
        return CountryGrid(buckets, levels, hashing)

    @property
    def countries(self) -> tuple[str, ...]:
        """The slots, in order (:data:`panstream.geo.COUNTRIES`)."""
        return geo.COUNTRIES

    def ones_by_country_level(self) -> np.ndarray:
        """Per country slot and level, the count of ones (``int64``, shape ``(slots, P)``)."""
        return self._table.count_ones_by(self.buckets).reshape(len(geo.COUNTRIES), self.levels)

    def ones_by_level(self) -> np.ndarray:  # pragma: no cover - guarded
        msg = "a by-country sketch has one grid per country: use ones_by_country_level()"
        raise ConfigurationError(msg)

    def estimate(self) -> sfm.Fit:
        """The noiseless total over countries (diagnostics and tests): ``n`` is the sum of the
        countries' estimates, ``stderr`` their root sum of squares."""
        fits = self.estimate_by_country()
        n = float(sum(f.n for f in fits))
        se = float(np.sqrt(sum(f.stderr**2 for f in fits)))
        return sfm.Fit(n, max(0, int(n + 0.5)), se, ())

    def estimate_by_country(self) -> list[sfm.Fit]:
        """The noiseless estimate of every slot (diagnostics and tests, never for publication)."""
        ones = self.ones_by_country_level()
        try:
            return [sfm.mple(row, self.buckets, float(self.q)) for row in ones]
        finally:
            ones.fill(0)

    def release(self, epsilon: float, mechanism: str = "laplace", *, sensitivity: int = 1,
                state_tables: int = 1, **kwargs: Any) -> Any:
        """Publish distinct clients per country (and their total) for one ``epsilon``, charged
        once: :func:`panstream.release.country.release_by_country` (``confidence=``)."""
        if (sensitivity, state_tables) != (1, 1):
            msg = "a by-country sketch is one table with sensitivity 1: run it as one state"
            raise ConfigurationError(msg)
        from panstream.country.release import release_by_country

        return release_by_country(self, epsilon, mechanism, **kwargs)

    release_by_country = release

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update({"countries": len(geo.COUNTRIES), "geo": self.universe.geo,
                    "grid_bytes": self.size // 8})
        return out

    def presto(self) -> sfm.PrestoSketch:
        msg = ("a by-country state holds one sketch per country, not one Presto sketch: release "
               "it with --by country")
        raise ConfigurationError(msg)
