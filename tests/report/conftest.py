"""Fixtures of the report tests: the published files of a small deployment (a week of daily
windows, a /24 map, a per-country release), made once per session by panstream's own commands."""

from __future__ import annotations

from pathlib import Path

import pytest
from _week import write_countries, write_week


@pytest.fixture(scope="session")
def week(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``(week.jsonl, map.json)``: 7 daily windows and one /24 map of ipv4:10.0.0.0/16."""
    return write_week(tmp_path_factory.mktemp("published"))


@pytest.fixture(scope="session")
def countries(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``countries.json``: ``release --by country --json`` of a sketch:1024x24:ip-country state
    of 20,000 lines of public clients (every one of the 253 slots, one charge)."""
    pytest.importorskip("iptocc", reason="countries need the offline table: pip install iptocc")
    return write_countries(tmp_path_factory.mktemp("countries"))
