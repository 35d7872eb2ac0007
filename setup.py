"""Build of panstream's one optional C extension (issue 38); everything else is in pyproject.toml.

``panstream.estimators._packed`` writes the packed 2**32-cell bit table in one pass. It is
``optional``: without a C compiler or Python headers the build only warns, and panstream runs its
NumPy path instead (docs/benchmarks.md, "Packed 2^32 update"). Build it in a checkout with
``python3 setup.py build_ext --inplace``; ``pip install -e .`` and ``pip install .`` build it too.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "panstream.estimators._packed",
            sources=["panstream/estimators/_packed.c"],
            optional=True,
        )
    ],
)
