"""Counting by country, one wing: the country table, the hashed and the sketch tables, their release.

:mod:`panstream.country.table`
    The offline address-to-country table (``iptocc``), its fixed list of slots, and the
    ``hashed-ip-country:M`` universe (one block of hashed cells per country).
:mod:`panstream.country.hashed`
    The density family over ``hashed-ip-country:M``, released by country.
:mod:`panstream.country.sketch`
    One Sketch-Flip-Merge grid per country (``sketch:B x P:ip-country``).
:mod:`panstream.country.release`
    The release by country of either table: one charge, every slot published.

These modules used to sit in four rooms (``panstream.geo``, ``panstream.estimators.hashed_country``,
``panstream.sketch.country``, ``panstream.release.country``); those names still import, as
aliases, for one release (:mod:`panstream._moved`; issue 36).
"""

from panstream.country import hashed, release, sketch, table
from panstream.estimators.base import register_variant
from panstream.estimators.sketch.sfm import register_items
from panstream.universe import register_kind

# The wing's kinds, registered where the wing is defined: the universe, the sketch and the
# families below name none of them (issue 36). ``import panstream`` imports this package.
register_kind(table.HASHED_KIND, table.parse_hashed_country)
register_items(sketch.ITEMS, sketch.CountryGrid)
register_variant("density", table.HASHED_KIND, hashed.CountryDensityEstimator)
register_variant("sketch", sketch.ITEMS, sketch.CountrySketchEstimator)

__all__ = ["hashed", "release", "sketch", "table"]
