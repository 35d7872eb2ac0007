"""The sketch family (Sketch-Flip-Merge, ``--estimator sketch``), one of the estimator families.

:mod:`panstream.estimators.sketch.murmur3`
    Presto's Murmur3 ``hash64`` (and the IPv4 text hashed from the integers).
:mod:`panstream.estimators.sketch.xxh64`
    XXH64, Presto SQL's hash.
:mod:`panstream.estimators.sketch.hashing`
    Which hash a grid gives its items, and the bytes an item becomes.
:mod:`panstream.estimators.sketch.sfm`
    The pure core: the grid (:class:`~panstream.estimators.sketch.sfm.SketchGrid`), the estimate
    and its error model, merge probabilities and Presto's serialized format.
:mod:`panstream.estimators.sketch.estimator`
    The pan-private state (:class:`~panstream.estimators.sketch.estimator.SketchEstimator`), its
    export and the randomized merge.
:mod:`panstream.estimators.sketch.release`
    The release: noise on the per-level counts, charged to the ledger.

One grid per country is the country wing's (:mod:`panstream.country.sketch`). The package sat at
``panstream.sketch`` until issue 36, and before that in three places (``panstream.sfm``,
``panstream.estimators.sketch``, ``panstream.release.sketch``); the old module names still import,
as aliases, for one release (:mod:`panstream._moved`). ``panstream.estimators.sketch`` is now this
package; it exports :class:`SketchEstimator` as the old module did.
"""

from panstream.estimators.sketch.estimator import SketchEstimator

__all__ = ["SketchEstimator"]
