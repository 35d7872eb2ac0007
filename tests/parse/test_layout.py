"""The input side is one package, ``panstream.inputs``; the old module names are aliases.

Branches and scripts written before the move import ``panstream.parse``, ``panstream.extract``,
``panstream.parse_check`` and ``panstream.normalize``: for one release these names give the very
module objects of their new places (one module, two names: no second copy whose state could
differ).
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from panstream._moved import MOVED


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_module_name_is_the_moved_module(old: str, new: str) -> None:
    assert importlib.import_module(old) is importlib.import_module(new)


def test_from_panstream_import_an_old_name_works() -> None:
    from panstream import extract, parse  # noqa: F401 - the aliases under test
    from panstream.inputs import extractors, parser

    assert extract is extractors and parse is parser


def _imports(path: Path) -> set[str]:
    """Every panstream module a file imports, at the top or inside a function (a lazy import is an
    import too: it only hides a circle)."""
    import ast

    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("panstream"):
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)  # from pkg import module
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("panstream"))
    return out


def test_no_import_circle_between_the_parts_of_the_input_side_and_the_universe() -> None:
    """Issue 29: parse, extract and universe imported each other (two of the edges lazily, inside
    functions). Now the graph of the input side's modules and ``panstream.universe``, every
    import counted, has no cycle: the vectorized core (``inputs.ipv4``) imports only the universe
    (issue 36: to register its batch reader there) and the address spellings
    (``universe.addresses``, once ``inputs.normalize``), which import nothing."""
    root = Path(__file__).resolve().parents[2] / "panstream"
    files = {f"panstream.inputs.{p.stem}": p for p in (root / "inputs").glob("*.py")
             if p.stem != "__init__"}
    files["panstream.universe"] = root / "universe" / "__init__.py"
    files["panstream.universe.addresses"] = root / "universe" / "addresses.py"  # was inputs.normalize
    alias = {old: new for old, new in MOVED.items()}
    graph = {m: {alias.get(i, i) for i in _imports(p)} & set(files) - {m}
             for m, p in files.items()}
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            assert state.get(n) != 1, " -> ".join([*path, m, n])
            if n not in state:
                visit(n, [*path, m])
        state[m] = 2

    for m in sorted(files):
        if m not in state:
            visit(m, [])
    assert graph["panstream.inputs.ipv4"] <= {"panstream.universe.addresses", "panstream.universe"}
    assert graph["panstream.universe.addresses"] == set()
