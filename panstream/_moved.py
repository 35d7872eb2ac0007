"""Old module names kept importable for one release, as aliases of the modules that moved.

``import panstream.parse`` (or ``from panstream import extract``) returns the very module object
of its new place, so code written against the old layout, and branches merged from before the
move, keep working; new code imports the new names. Nothing is copied: one module, two names.

Beside the aliases, the other way panstream looks a module up by name: :func:`optional_extension`,
its optional C kernels (issue 38), each with a NumPy fallback.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Any

#: old name -> new name.
MOVED = {
    "panstream.parse": "panstream.inputs.parser",
    "panstream.extract": "panstream.inputs.extractors",
    "panstream.parse_check": "panstream.inputs.check",
    "panstream.normalize": "panstream.universe.addresses",
    "panstream.sfm": "panstream.estimators.sketch.sfm",
    "panstream.release.sketch": "panstream.estimators.sketch.release",
    # Issue 36 (one house): one wing per feature, the sketch among the families, drivers on top.
    "panstream.inputs.normalize": "panstream.universe.addresses",
    "panstream.geo": "panstream.country.table",
    "panstream.estimators.hashed_country": "panstream.country.hashed",
    "panstream.sketch.country": "panstream.country.sketch",
    "panstream.release.country": "panstream.country.release",
    "panstream.sketch": "panstream.estimators.sketch",
    "panstream.sketch.sfm": "panstream.estimators.sketch.sfm",
    "panstream.sketch.hashing": "panstream.estimators.sketch.hashing",
    "panstream.sketch.xxh64": "panstream.estimators.sketch.xxh64",
    "panstream.sketch.estimator": "panstream.estimators.sketch.estimator",
    "panstream.sketch.release": "panstream.estimators.sketch.release",
    "panstream.telemetry": "panstream.release.telemetry",
    "panstream.windows.ingestor": "panstream.sources.windowed",
    "panstream.ingest": "panstream.sources.ingest",
    # Issue 36: a log format is one file; a line's time is read in inputs/, beside its address.
    "panstream.windows.zones": "panstream.inputs.zones",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old name and loads it as the module at its new name."""

    def find_spec(self, fullname: str, path: object = None, target: object = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        """The module is already executed at its new name."""


def install() -> None:
    """Put the alias finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.insert(0, _Alias())  # before any finder that still knows the old files


def optional_extension(name: str) -> Any:
    """The optional C extension ``name`` (``panstream.estimators._packed``, ``panstream.inputs._v6``;
    issue 38), or None when it was not built, fails to import, or ``PANSTREAM_NATIVE=0`` asks for
    the NumPy paths: the caller then runs its NumPy fallback. Its callers read it once, at import.

    By name: an extension is a leaf that imports nothing of panstream, but a ``from
    panstream.estimators import _packed`` reads (to the floor plan's tool, which sees only .py
    files) as an import of that package's ``__init__``, a circle that does not exist.
    """
    if os.environ.get("PANSTREAM_NATIVE", "1").strip() == "0":
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None
