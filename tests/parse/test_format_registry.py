"""A log format is one file (issue 36): each module of ``panstream/inputs/formats/`` declares its
names, its detection, where its address is and how its time is read, and everything else reads
the registry.

These tests walk through what that promises: every module beside ``base`` registers formats;
names and GoAccess aliases are unique; the lists every message and help text prints
(``FORMAT_HELP``, the timed formats, the loud check's ways to name the client) are read off the
registry; and no code outside the formats' folder names a format, except the few places listed
below with their reason. Adding a format is then one new file (docs/logs.md, "Adding a
format"), and its tests.
"""

from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

import panstream
import panstream.inputs.formats as formats
from panstream.inputs import times
from panstream.inputs.check import _ALL_FORMATS
from panstream.inputs.formats import ALIASES, FORMAT_HELP, all_formats, parse_format

ROOT = Path(panstream.__file__).parent

#: Code outside ``inputs/formats/`` that may name a format, and why.
ALLOWED = {
    # The parser's own vectorized line readers (no extractor) read these two.
    "plain": {"inputs/parser.py", "inputs/ipv4.py", "inputs/ipv6.py",
              # a Kafka topic of bare items, and the demo, use plain lines
              "cli/cmd_demo.py", "sources/kafka/build.py", "sources/kafka/group.py",
              "sources/kafka/decode.py"},
    "clf": {"inputs/parser.py", "inputs/ipv4.py", "inputs/ipv6.py"},
    # --trusted-proxy is xff's option.
    "xff": {"cli/cmd_ingest.py"},
    # The column extractor serves the four header formats (their separators, their headers).
    "csv": {"inputs/extractors.py"}, "tsv": {"inputs/extractors.py"},
    "w3c": {"inputs/extractors.py"}, "zeek": {"inputs/extractors.py"},
}


def _code_strings(path: Path) -> set[str]:
    """The string constants of a module's code (docstrings, which carry examples, aside)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docs.add(id(body[0].value))
    return {n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs}


def test_every_module_beside_base_registers_formats() -> None:
    modules = {f"{formats.__name__}.{m.name}" for m in pkgutil.iter_modules(formats.__path__)}
    declared = {getattr(c, "__module__", None) for f in all_formats()
                for c in (f.extractor, f.detect, f.parse_arg, f.fix) if c is not None}
    assert modules - {f"{formats.__name__}.base"} <= declared
    assert {"plain", "clf", "json", "w3c", "zeek", "sshd", "squid"} <= {f.name for f in all_formats()}


def test_names_and_aliases_are_unique_and_every_alias_parses() -> None:
    names = [f.name for f in all_formats()]
    assert len(names) == len(set(names))
    for alias, spec in ALIASES.items():
        assert parse_format(alias.upper()) == parse_format(spec)


def test_the_printed_lists_are_the_registry() -> None:
    for f in all_formats():
        assert f.help in FORMAT_HELP
        if f.where_help:
            assert f.where_help in _ALL_FORMATS
        if f.time is not None:
            assert f.name in times.TIMED_FORMATS
            assert (f.name in times.LOCAL_FORMATS) == (f.time.local is not None)
    assert _ALL_FORMATS.endswith("or 'regex:... (?P<ip>\\S+) ...' (docs/logs.md)")
    local = [times.TIMED_FORMATS.index(n) for n in times.LOCAL_FORMATS]
    assert min(local) > max(times.TIMED_FORMATS.index(n) for n in times.TIMED_FORMATS
                            if n not in times.LOCAL_FORMATS)  # those needing --time-zone last


def test_no_code_outside_the_formats_folder_names_a_format() -> None:
    """The plug-in property: a format's name is written in its own module (and its docs and
    tests), so moving or adding a format touches one file."""
    found: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("inputs/formats/"):
            continue
        strings = _code_strings(path)
        for f in all_formats():
            if f.name in strings or any(a in strings for a in f.aliases):
                found.setdefault(f.name, set()).add(rel)
    extra = {n: files - ALLOWED.get(n, set()) for n, files in found.items()}
    assert {n: files for n, files in extra.items() if files} == {}
