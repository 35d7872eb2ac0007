"""Validate ``--json`` output against ``docs/schema/release.schema.json`` (importable as
``schema_check``: pytest puts ``tests/`` on the path)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "docs" / "schema" / "release.schema.json"
SCHEMA: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
Draft202012Validator.check_schema(SCHEMA)


def validate(obj: Any, part: str | None = None) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``obj`` is a valid output line or, with ``part``
    (``estimate``, ``record``, ``state``, ``group``, ``summary``), valid against that definition
    (and, for the parts that are whole lines, as a line too)."""
    if part is None:
        Draft202012Validator(SCHEMA).validate(obj)
        return
    sub = {"$ref": f"#/$defs/{part}", "$defs": SCHEMA["$defs"]}
    Draft202012Validator(sub).validate(obj)
    if part in ("estimate", "state", "group"):  # a whole output line as well
        Draft202012Validator(SCHEMA).validate(obj)


def validate_lines(text: str) -> list[dict[str, Any]]:
    """Validate every JSON line of a command's stdout; return them parsed."""
    out = [json.loads(ln) for ln in text.splitlines() if ln.startswith("{")]
    assert out, "no JSON line in the output"
    for d in out:
        validate(d)
    return out
