"""The house has floors: no import circle, and no import up the plan but the one docs name.

``docs/architecture.md`` draws panstream as floors, bottom to top; a room (a folder directly under
``panstream/``, or a loose module there) may import rooms on its own floor or below. This test
reads every import of every module, at the top or inside a function (a lazy import is still an
import: it only hides a circle), and fails on

* any circle between modules, or between rooms;
* any arrow up the plan other than the one ``docs/architecture.md`` names and justifies
  (``estimators -> release``: an estimator carries its ledger and answers ``release()``);
* a plan here that differs from the one in ``docs/architecture.md``.

Issue 36 took the count from 2 room circles, 3 module circles (one through 12 modules) and 11
arrows up to 0, 0 and 1. The kinds that features above register with the layers below (universe
kinds, sketch grids, estimator variants, the batch reader, the state side of the estimator) are
checked from a fresh interpreter that imports only the low module: ``import panstream`` runs first
and imports every feature, so no spec a user can type is missed.

The logic is a copy of ``../shared/measure/layers.py`` (the suite does not reach outside the
repository).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The plan, bottom to top (docs/architecture.md, "The floors").
FLOORS = [
    {"errors", "_moved", "randomness", "calibration", "universe", "clock", "schedule"},
    {"inputs"},
    {"estimators"},
    {"release"},
    {"country"},
    {"state"},
    {"windows"},
    {"sources"},
    {"planning", "audit", "report", "demo"},
    {"cli", "__main__", "__init__"},
]
#: The arrows up the plan that docs/architecture.md names and justifies.
ALLOWED_UP = {("estimators", "release")}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / "panstream").rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        out[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = path
    return out


def _imports(path: Path, module: str, modules: dict[str, Path]) -> set[str]:
    """The panstream modules ``module`` imports (the deepest existing module of each name)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.startswith("panstream"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("panstream"):
                for a in node.names:  # `from panstream.x import y` may name a submodule y
                    sub = f"{target}.{a.name}"
                    names.add(sub if sub in modules else target)
    out = set()
    for name in names:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name and name != module:
            out.add(name)
    return out


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def _graphs() -> tuple[dict[str, set[str]], dict[str, set[str]], dict[tuple[str, str], str]]:
    modules = _modules()
    mgraph: dict[str, set[str]] = defaultdict(set)
    rgraph: dict[str, set[str]] = defaultdict(set)
    where: dict[tuple[str, str], str] = {}
    for name, path in modules.items():
        for target in _imports(path, name, modules):
            mgraph[name].add(target)
            a, b = _room(name), _room(target)
            if a != b and b != "__init__":  # `from panstream import __version__` is no arrow
                rgraph[a].add(b)
                where.setdefault((a, b), f"{name} imports {target}")
    return mgraph, rgraph, where


def test_no_module_imports_a_module_that_imports_it_back() -> None:
    mgraph, _, _ = _graphs()
    assert _circles(mgraph) == [], "module circles (break one edge: a registry, or a move)"


def test_no_room_imports_a_room_that_imports_it_back() -> None:
    _, rgraph, _ = _graphs()
    assert _circles(rgraph) == []


def test_every_room_is_on_the_plan_and_only_the_named_arrow_points_up() -> None:
    _, rgraph, where = _graphs()
    floor = {room: i for i, rooms in enumerate(FLOORS) for room in rooms}
    rooms = set(rgraph) | {b for s in rgraph.values() for b in s}
    assert rooms <= set(floor), f"rooms not on the plan: {sorted(rooms - set(floor))}"
    up = {(a, b) for a in rgraph for b in rgraph[a] if floor[b] > floor[a]}
    assert up <= ALLOWED_UP, [f"{a} -> {b}: {where[(a, b)]}" for a, b in sorted(up - ALLOWED_UP)]


def test_the_plan_here_is_the_plan_in_docs() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- floors -->\n```\n(.*?)```", text, re.S)
    assert block is not None, "docs/architecture.md has no floors block"
    lines = [ln for ln in block.group(1).splitlines() if ln.strip()]
    documented = [set(re.findall(r"[\w]+", ln.split("  ", 1)[0].replace("/", ""))) for ln in lines]
    assert documented[::-1] == FLOORS  # the docs draw the top floor first


_FRESH = """
import sys
low = sys.argv[1]
if low == "universe":
    from panstream.universe import Universe
    for spec in ["ipv4:10.0.0.0/16", "ipv6:2001:db8::/48@64", "range:1000", "hashed:1024",
                 "hashed-ip:1024", "hashed-ip-country:16"]:
        assert Universe.parse(spec).spec == spec, spec
    import numpy as np
    r = Universe.parse("hashed-ip:1024").indices([b"10.0.0.1"] * 64 + [b"x"])
    assert r.indices.size == 64 and r.malformed == 1   # the batch reader is registered
elif low == "sfm":
    from panstream.estimators.sketch.sfm import SketchGrid
    for spec in ["sketch:4096x24:ip", "sketch:256x16:id:xxhash64-bigint", "sketch:256x8:ip-country"]:
        assert SketchGrid.parse_spec(spec).spec == spec, spec
elif low == "base":
    from panstream.estimators.base import FAMILIES, variant
    assert list(FAMILIES) == ["density", "frequency", "sketch"], list(FAMILIES)
    assert variant("density", "hashed-ip-country").__name__ == "CountryDensityEstimator"
    assert variant("sketch", "ip-country").__name__ == "CountrySketchEstimator"
    est = FAMILIES["density"]("range:8")
    assert type(FAMILIES["density"].restore(est.snapshot())) is FAMILIES["density"]
print("ok")
"""


def test_every_kind_resolves_from_a_fresh_interpreter_that_imports_only_the_low_module() -> None:
    """Universe kinds, sketch grids and estimator families and variants registered by the
    features above them resolve even when a program imports only the low module."""
    for low in ("universe", "sfm", "base"):
        run = subprocess.run([sys.executable, "-c", _FRESH, low], capture_output=True, text=True,
                             timeout=120, check=False)
        assert run.returncode == 0 and run.stdout.strip() == "ok", (low, run.stderr[-2000:])
