"""Releases: what may be published, charged to the one ledger before any noise is drawn.

:mod:`panstream.release.noise`
    Exact samplers of the release noise (discrete Laplace and geometric) and their laws.
:mod:`panstream.release.ledger`, :mod:`panstream.release.ledger_log`
    The output budget and the releases charged to it; a group's ledger as an append-only log.
:mod:`panstream.release.stats`
    The statistics a release publishes (debiasing, intervals, the noisy count).
:mod:`panstream.release.density`, :mod:`panstream.release.frequency`, :mod:`panstream.release.incidence`
    The density and frequency families' releases (the sketch's is :mod:`panstream.estimators.sketch.release`,
    by-country ones :mod:`panstream.country.release`).
:mod:`panstream.release.maps`, :mod:`panstream.release.plot`, :mod:`panstream.release.hilbert`
    Density maps, their pictures and the Hilbert curve they are laid on.
:mod:`panstream.release.discovery`
    Which of many released counts can be told from an empty one (maps and countries).
:mod:`panstream.release.remap`
    A user-side remap of a geometric release.
:mod:`panstream.release.schema`, :mod:`panstream.release.honesty`
    One JSON shape for every estimate; one rule for noise-dominated and clamped figures.
:mod:`panstream.release.telemetry`
    Noisy counts of arrivals per window (it is published, so it sits here: issue 36;
    ``panstream.telemetry`` still imports, as an alias, for one release).

The families (:mod:`panstream.estimators`) call their release module and carry their ledger: the
one arrow up the floor plan (docs/architecture.md).
"""
