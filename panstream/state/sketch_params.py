"""The public parameters of an exported sketch, beside its Presto bytes: which hash built it.

Presto's serialized ``SfmSketch`` (tag 7, grid, flip probability, bitmap) has no field for the
hash its items went through, and Presto reads exactly those bytes, so the hash cannot travel in
the file. An export therefore writes a small JSON file beside it, ``<file>.params.json``, with
the grid, the item kind and the hash (:mod:`panstream.estimators.sketch.hashing`), and
``panstream merge-sketches`` reads it to refuse sketches that hashed their items differently (their
merge would count every common item twice). The JSON file holds public parameters only.

The JSON file is written first and the sketch second (each atomically): a sketch file that exists
always has its parameters beside it. A sketch file without one (an older export, or a sketch
Presto wrote) has an unrecorded hash.
"""

from __future__ import annotations

import json
import os
from typing import Any

from panstream.errors import StateError

__all__ = ["SUFFIX", "params_path", "read_hash", "write_export", "write_params"]

#: The name of the parameters file beside ``X.sfm`` is ``X.sfm`` + this.
SUFFIX = ".params.json"
FORMAT = "panstream-sfm-params"


def params_path(path: str | os.PathLike[str]) -> str:
    """The parameters file beside the sketch file ``path``."""
    return os.fspath(path) + SUFFIX


def export_params(est: Any) -> dict[str, Any]:
    """The public parameters of ``est``'s export (a :class:`~panstream.estimators.sketch.estimator.SketchEstimator`)."""
    from panstream.estimators.sketch.hashing import SQL_TYPE

    return {"format": FORMAT, "version": 1, "buckets": est.buckets, "levels": est.levels,
            "items": est.items, "hash": est.hashing, "sql_type": SQL_TYPE[est.hashing],
            "universe": est.universe.spec}


def write_params(path: str | os.PathLike[str], params: dict[str, Any]) -> None:
    """Write ``params`` beside the sketch file ``path`` (atomically, durably)."""
    from panstream.state.files import atomic_write

    atomic_write(params_path(path), (json.dumps(params, sort_keys=True) + "\n").encode())


def write_export(path: str | os.PathLike[str], est: Any) -> None:
    """Export ``est``'s table in Presto's format to ``path``, its parameters first.

    Raises:
        StateError: a file could not be written (the sketch file is then not written, or left as
            it was).
    """
    from panstream.estimators.sketch import sfm
    from panstream.state.files import atomic_write

    data = sfm.to_presto(est.presto())  # refused before anything is written (a by-country state)
    write_params(path, export_params(est))
    atomic_write(path, data)


def read_hash(path: str | os.PathLike[str]) -> str | None:
    """The hash recorded beside the sketch file ``path``, or ``None`` if nothing is recorded.

    Raises:
        StateError: a parameters file that cannot be read or names no known hash.
    """
    from panstream.estimators.sketch.hashing import HASHES

    side = params_path(path)
    if not os.path.exists(side):
        return None
    try:
        with open(side, encoding="utf-8") as f:
            params = json.load(f)
        hashing = params["hash"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        msg = f"{side}: not a readable sketch parameters file ({exc}); remove it or restore it"
        raise StateError(msg) from None
    if params.get("format") != FORMAT or hashing not in HASHES:
        msg = f"{side}: not a panstream sketch parameters file (hash {hashing!r})"
        raise StateError(msg)
    return str(hashing)
