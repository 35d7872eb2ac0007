"""The sketch family (Sketch-Flip-Merge, ``--estimator sketch``) in one place.

:mod:`panstream.estimators.sketch.sfm`
    The pure core: Presto's Murmur3 ``hash64`` (and the IPv4 text hashed from the integers), the
    grid (:class:`~panstream.estimators.sketch.sfm.SketchGrid`), the estimator, merge probabilities and
    Presto's serialized format.
:mod:`panstream.estimators.sketch.hashing`, :mod:`panstream.estimators.sketch.xxh64`
    Which 64-bit hash a grid gives its items (Presto's Java ``add`` or Presto SQL's XXH64).
:mod:`panstream.estimators.sketch.estimator`
    The pan-private state (:class:`~panstream.estimators.sketch.estimator.SketchEstimator`), its export and
    the randomized merge.
:mod:`panstream.estimators.sketch.release`
    The release: noise on the per-level counts, charged to the ledger.
:mod:`panstream.country.sketch`
    One grid per country.

The core, state and release used to sit apart (``panstream.sfm``, ``panstream.estimators.sketch``,
``panstream.release.sketch``); those names still import, as aliases, for one release
(:mod:`panstream._moved`).
"""
