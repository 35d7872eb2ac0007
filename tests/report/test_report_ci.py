""".ci/run installs the browser the report's test needs, only when it is missing and CI runs as
root, and still ends in exactly the README's test command."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ci_installs_chromium_only_when_missing_and_root_and_keeps_the_test_command() -> None:
    text = (ROOT / ".ci" / "run").read_text()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines[-1] == 'python3 -m pip install -q -e ".[test]" && python3 -m pytest -q -n 6'
    guard = next(ln for ln in lines if "apt-get" in ln and ln.startswith("if "))
    assert "! command -v chromium" in guard and '"$(id -u)" = 0' in guard
    assert "install -y" in text and " chromium" in text
    assert 'pytest -q -n 6' in (ROOT / "README.md").read_text()
