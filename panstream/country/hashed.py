"""``hashed-ip`` by country: a density table with one block of hashed cells per country.

The universe (:class:`panstream.geo.HashedCountryUniverse`, spec ``hashed-ip-country:M``) gives
every country slot ``M`` cells and an address the cell ``slot * M + hash(address) mod M``. The
table is the density family's, unchanged: every bit a D0 draw at the start and a D1 draw at every
arrival of its cell, one person one cell, so a leaked state is ``epsilon_state``-DP per person.
This class only adds what a by-country table needs: a release by country
(:func:`panstream.release.country.release_hashed_by_country`) as its one release: a plain linear
count over all blocks would be wrong (the cells of one block are not the table's). The country
table's version in the state's public parameters (a person is one cell only while it stays the
same) is the universe's (:class:`panstream.country.table.CountryCells`), recorded, pinned and
unpinned through the hooks every family calls.

>>> est = CountryDensityEstimator("hashed-ip-country:4096", epsilon=2.0, budget=1.0)
>>> _ = est.update(["8.8.8.8", "1.1.1.1"])
>>> r = est.release(1.0)
>>> len(r.rows), est.ledger.remaining
(253, 0.0)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from panstream.country import table as geo
from panstream.errors import ConfigurationError
from panstream.estimators.density import DensityEstimator

__all__ = ["CountryDensityEstimator"]


class CountryDensityEstimator(DensityEstimator):
    """A density table over ``hashed-ip-country:M``, released by country (module docstring)."""

    universe: geo.HashedCountryUniverse

    def __init__(self, universe: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(universe, *args, **kwargs)
        if not isinstance(self.universe, geo.HashedCountryUniverse):
            msg = f"a by-country table needs a {geo.HASHED_KIND}:M universe, got {self.universe.spec}"
            raise ConfigurationError(msg)

    @property
    def countries(self) -> tuple[str, ...]:
        return geo.COUNTRIES

    def ones_by_country(self) -> np.ndarray:
        """The count of ones of every country's block (``int64``, one per slot)."""
        return self._table.count_ones_by(self.universe.block)

    def release(self, epsilon: float, mechanism: str = "laplace", **kwargs: Any) -> Any:
        """Distinct clients per country and their total, charged once
        (:func:`panstream.release.country.release_hashed_by_country`)."""
        from panstream.country.release import release_hashed_by_country

        return release_hashed_by_country(self, epsilon, mechanism, **kwargs)

    release_by_country = release

    def release_map(self, epsilon: float, by: int | str, mechanism: str = "laplace",
                    **kwargs: Any) -> Any:
        msg = "a by-country table releases by country (--by country), not density maps"
        raise ConfigurationError(msg)
