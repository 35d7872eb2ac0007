"""A density release on the page: its headline is shown clamped at 0 and marked, as a table cell
and the by-country total are (the one rule, docs/release.md), while the file it was read from
keeps the released value; a hashed table's count is not capped at its number of cells (linear
counting exceeds it), only a plain universe's is."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace

from test_report_page import shown_cell, visible_text

import panstream as ps
from panstream.report import ReleaseInput, render


def _section(html: str) -> str:
    return html[html.index("<h2>Release:"):html.index("</section>", html.index("<h2>Release:"))]


def test_a_negative_hashed_release_is_shown_at_zero_marked_with_its_released_value() -> None:
    r = ps.DensityEstimator("hashed-ip:1024", budget=1.0).release(1.0)
    neg = replace(r, distinct=-12.4, distinct_low=-70.5, distinct_high=45.6, density=-0.0121)
    d = json.loads(json.dumps(neg.to_dict()))
    assert d["estimate"] == -12.4  # the file keeps the released value
    section = _section(render([], [ReleaseInput("empty.json", d)]))
    head = section[:section.index("<figure>")]
    assert 'title="released -12.40 (unbiased, kept in the published file)' in head
    assert 'title="released -70.50 (unbiased' in head and "0*" in visible_text(head)
    assert shown_cell(-12.4) in section and shown_cell(-70.5) in section
    assert "* shown at the edge of the possible range" in section
    assert re.findall(r"(?<![\w.])[-\u2212]\d", visible_text(section)) == []


def test_a_hashed_count_above_its_cells_is_not_clamped_but_a_plain_one_is() -> None:
    """Linear counting of a hashed table of 1,024 cells reaches up to 1,024 ln 1,024 = 7,098:
    1,500 is a possible count and shown as released; the same figure for ``range:1024`` (at most
    1,024 items) is shown at 1,024 and marked."""
    r = ps.DensityEstimator("hashed-ip:1024", budget=1.0).release(1.0)
    big = replace(r, distinct=1500.0, distinct_low=1400.0, distinct_high=1600.0, density=0.77)
    assert 1024 * math.log(1024) > 1500
    hashed = _section(render([], [ReleaseInput("h.json", big.to_dict())]))
    assert "1,500" in visible_text(hashed) and "shown at the edge" not in hashed
    plain = replace(big, universe="range:1024")
    page = _section(render([], [ReleaseInput("p.json", plain.to_dict())]))
    assert shown_cell(1500.0, 1024.0) in page and "1,024*" in visible_text(page)
