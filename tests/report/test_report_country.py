"""A per-country release on the page: ``release --by country --json`` of a real by-country sketch
(20,000 lines of public clients, countries from the offline iptocc table) becomes a ranked chart
of the countries told from noise, the total, a folded table of all 253 slots, and ONE charge in
the privacy accounting (a person is one address in one country: parallel composition)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from _html import external_references
from _week import write_countries
from click.testing import CliRunner
from test_report_page import shown_cell, visible_text

from panstream.cli.main import cli
from panstream.report import ReleaseInput, render
from panstream.report.page import MAX_RANKED, column_text


def _ranked_labels(html: str) -> list[str]:
    svg = html[html.index('<svg class="ranked"'):]
    svg = svg[:svg.index("</svg>")]
    return re.findall(r'text-anchor="end" fill="#222">([^<]+)</text>', svg)


def test_a_country_release_is_ranked_tabulated_and_charged_once(countries: Path,
                                                                tmp_path: Path) -> None:
    d = json.loads(countries.read_text())
    assert len(d["rows"]) == 253 and d["budget_remaining"] == 0  # the release: every slot, once
    out = tmp_path / "c.html"
    res = CliRunner().invoke(cli, ["report", "--release", str(countries), "-o", str(out)],
                             env={"PANSTREAM_REPORT_RELEASE": None}, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    html = out.read_text()
    assert external_references(html) == ([], 0) and out.stat().st_size < 1_000_000
    # the chart: only the countries the release told from empty by its rule over all slots,
    # largest first, and the page says how many slots that hides
    told = sorted((r for r in d["rows"] if r["signal"]),
                  key=lambda r: (-r["estimate"], r["country"]))
    assert len(told) >= 5  # 20,000 clients over 20 blocks: several countries stand out
    assert _ranked_labels(html) == [r["country"] for r in told[:MAX_RANKED]]
    fdr = f"{100 * d['extras']['fdr']:g} %"
    assert (f"{len(told)} of 253 slots are told from an empty one by one rule over all of them "
            f"(false-discovery rate {fdr}") in html
    assert f"The other {253 - len(told)} slots are not ranked" in html
    # the table: all 253 slots, folded (a click opens it), ranked, with every number
    table = html[html.index("Table: all 253 country slots"):]
    table = table[:table.index("</table>")]
    assert html.count("<details><summary>Table: all 253 country slots") == 1
    assert table.count("<tr") == 253 + 1
    fmt = column_text([r[k] for r in d["rows"] for k in ("estimate", "low", "high")])
    for r in d["rows"]:
        assert f"<td>{r['country']}</td>{shown_cell(r['estimate'], fmt=fmt)}" in table, r["country"]
    # the file keeps the released, unclamped rows: an empty country is below 0 about half the
    # time (~230 empty slots: none below 0 has probability 2^-230); the page shows them at 0,
    # marked '*', the released value one hover away, and says so
    below = [r for r in d["rows"] if r["estimate"] < 0]
    assert below and d["extras"]["rows"] == d["rows"]
    assert '<td class="cl" title="released -' in table
    assert "* shown at the edge" in html[html.index("Table: all 253 country slots"):]
    # one charge: the release's epsilon once for all slots, its ledger's total the whole cost
    assert f"{d['epsilon']['release']:g} once for 253 countries" in html
    assert "parallel composition" in html
    grand = re.search(r"is covered at <strong>epsilon ([0-9.]+)</strong>", html)
    assert grand and float(grand.group(1)) == pytest.approx(d["epsilon"]["total"], abs=1e-5)
    assert re.findall(r"(?<![\w.])[-\u2212]\d", visible_text(html)) == []


def test_a_total_below_zero_is_shown_at_zero_and_marked(countries: Path) -> None:
    """The total over countries is released unclamped too; when noise puts it (or its low end)
    below 0, the page shows 0 marked '*', with the released value in the tooltip and the note,
    and never a negative number."""
    d = json.loads(countries.read_text())
    d.update(estimate=-12.5, low=-410.0, high=385.0)
    html = render([], [ReleaseInput("c.json", d)])
    section = html[html.index("All countries:"):html.index("<figure>", html.index("All countries:"))]
    assert 'title="released -12.50 (unbiased, kept in the published file)' in section
    assert 'title="released -410 (unbiased' in section and "0*" in visible_text(section)
    assert "* shown at the edge of the possible range" in section
    assert re.findall(r"(?<![\w.])[-\u2212]\d", visible_text(html)) == []


def _old_file(d: dict) -> dict:
    """``d`` as a release before issue 37 wrote it: rows name the estimate ``distinct`` and carry
    no p-value or ``signal``."""
    old = [{("distinct" if k == "estimate" else k): v for k, v in r.items()
            if k not in ("p_empty", "signal")} for r in d["rows"]]
    return dict(d, rows=old, extras=dict(d["extras"], rows=old))


def test_an_old_file_with_few_clear_countries_draws_the_largest(countries: Path) -> None:
    """A file written before the rule over all slots (rows of ``distinct``, no ``signal``) is
    still read: where fewer than 5 countries are told from noise the old way, the chart draws the
    20 largest estimates and says why (a noise-dominated one carries its ring)."""
    d = _old_file(json.loads(countries.read_text()))
    d["rows"] = d["extras"]["rows"] = [dict(r, noise_dominated=True) for r in d["rows"]]
    html = render([], [ReleaseInput("c.json", d)])
    top = sorted(d["rows"], key=lambda r: (-r["distinct"], r["country"]))[:20]
    assert _ranked_labels(html) == [r["country"] for r in top]
    assert "the 20 largest estimates (only 0 countries are not noise-dominated)" in html
    assert "This file predates the rule over all slots" in html


def test_a_release_telling_no_country_from_empty_ranks_none(countries: Path) -> None:
    """Where the rule tells no country from an empty one, nothing is ranked, and the page says
    that every slot could be empty."""
    d = json.loads(countries.read_text())
    d["rows"] = d["extras"]["rows"] = [dict(r, signal=False) for r in d["rows"]]
    html = render([], [ReleaseInput("c.json", d)])
    assert '<svg class="ranked"' not in html
    assert "No country is told from an empty one: nothing is ranked." in html
    assert "0 of 253 slots are told from an empty one" in html


def test_a_hashed_ip_country_release_reads_the_same(tmp_path: Path) -> None:
    """``-u hashed-ip-country:M`` releases the same rows from a density table: the same page."""
    pytest.importorskip("iptocc", reason="countries need the offline table: pip install iptocc")
    d = json.loads(write_countries(tmp_path, "hashed-ip-country:4096").read_text())
    html = render([], [ReleaseInput("h.json", d)])
    assert "Countries: h.json" in html and "once for 253 countries" in html
    assert "<code>hashed-ip-country:4096</code>" in html and _ranked_labels(html)
