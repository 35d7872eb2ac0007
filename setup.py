"""Build of panstream's two optional C extensions (issue 38); everything else is in pyproject.toml.

``panstream.estimators._packed`` writes the packed 2**32-cell bit table in one pass;
``panstream.inputs._v6`` reads IPv6 tokens (the first pass of the IPv6 reader) in one loop. Both
are ``optional``: without a C compiler or Python headers the build only warns, and panstream runs
its NumPy paths instead (docs/benchmarks.md, "The optional C kernels"). Build them in a checkout
with ``python3 setup.py build_ext --inplace``; ``pip install -e .`` and ``pip install .`` build
them too.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "panstream.estimators._packed",
            sources=["panstream/estimators/_packed.c"],
            optional=True,
        ),
        Extension(
            "panstream.inputs._v6",
            sources=["panstream/inputs/_v6.c"],
            optional=True,
        ),
    ],
)
