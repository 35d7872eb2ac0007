"""Fixtures of the report tests: the published files of a small deployment (a week of daily
windows and a /24 map), made once per session through panstream's real API."""

from __future__ import annotations

from pathlib import Path

import pytest
from _week import write_week


@pytest.fixture(scope="session")
def week(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``(week.jsonl, map.json)``: 7 daily windows and one /24 map of ipv4:10.0.0.0/16."""
    return write_week(tmp_path_factory.mktemp("published"))
