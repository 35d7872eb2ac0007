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
