"""The input side is one package, ``panstream.inputs``; the old module names are aliases.

Branches and scripts written before the move import ``panstream.parse``, ``panstream.extract``,
``panstream.parse_check`` and ``panstream.normalize``: for one release these names give the very
module objects of their new places (one module, two names: no second copy whose state could
differ).
"""

from __future__ import annotations

import importlib

import pytest

from panstream._moved import MOVED


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_module_name_is_the_moved_module(old: str, new: str) -> None:
    assert importlib.import_module(old) is importlib.import_module(new)


def test_from_panstream_import_an_old_name_works() -> None:
    from panstream import extract, parse  # noqa: F401 - the aliases under test
    from panstream.inputs import extractors, parser

    assert extract is extractors and parse is parser
