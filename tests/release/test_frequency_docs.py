"""docs/frequency.md: its sizing table is what the planner computes, row by row."""

from __future__ import annotations

from pathlib import Path

import pytest

from panstream.calibration import calibrate_frequency
from panstream.release.incidence import plan_frequency

DOC = Path(__file__).parents[2] / "docs" / "frequency.md"


def _rows() -> list[list[str]]:
    text = DOC.read_text().split("<!-- sizing table:")[1].split("\n\n")[0]
    lines = [ln for ln in text.splitlines() if ln.startswith("| 2^")]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]


def test_the_sizing_table_has_rows() -> None:
    assert len(_rows()) >= 15


@pytest.mark.parametrize("row", _rows(), ids=lambda r: "-".join(r[:3]))
def test_a_sizing_row_is_what_plan_frequency_computes(row: list[str]) -> None:
    cells = 1 << int(row[0][2:])
    eps, k = float(row[1]), int(row[2])
    cal = calibrate_frequency(eps, k)
    plan = plan_frequency(cells, eps, k, cells // 4, alpha=cal.alpha,
                          epsilon_state=cal.epsilon_state, release_epsilon=0.5)
    assert row[3] == f"{float(cal.alpha):.4f}"
    assert row[4] == f"{plan.once:,.0f}"
    assert row[5] == f"{plan.fraction_once:.3f}"
    assert row[6] == f"{plan.cropped_mean:.3f}"
