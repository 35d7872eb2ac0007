"""The examples in panstream's docstrings are tests too: every module's doctests run here.

(``--doctest-modules`` would also import the test suite's ``conftest.py`` files as modules, whose
basenames collide; running :mod:`doctest` per module avoids that.)
"""

from __future__ import annotations

import doctest
import importlib
import io
import pkgutil
from contextlib import redirect_stdout

import pytest

import panstream

MODULES = sorted(m.name for m in pkgutil.walk_packages(panstream.__path__, "panstream.")
                 if m.name != "panstream.__main__")


@pytest.mark.parametrize("name", MODULES)
def test_the_docstring_examples_of_a_module_run(name: str) -> None:
    module = importlib.import_module(name)
    out = io.StringIO()
    with redirect_stdout(out):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, out.getvalue()
