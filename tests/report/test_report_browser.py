"""The report in a real browser: headless Chromium (Debian's ``chromium``) opens the page with the
network off, reports no error and fetches nothing, and its screenshot shows the series with its
intervals and the map where the page puts them. Skipped, saying why, where no browser is
installed (``.ci/run`` installs Debian's ``chromium`` when it runs as root)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from panstream.report import ReleaseInput, SeriesInput, render
from panstream.report.svg import BAND, EMPTY, INK, viridis
from panstream.windows.series import read

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
BROWSER = next((p for p in (shutil.which(b) for b in BROWSERS) if p), None)
pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="no headless browser: install Debian's chromium "
    "(apt-get install -y chromium; .ci/run does this when run as root)")

#: The flags of every run: headless, no sandbox (containers), no GPU, and nothing that talks to
#: the network on the browser's own account; every host name resolves to nothing, so a page that
#: tried to fetch something would fail to (and the probe below would see it).
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--host-resolver-rules=MAP * ~NOTFOUND")

#: Put at the top of a copy of the page (the page itself has no script): records every error
#: event (a script error, or a resource that failed to load) and every resource the page fetched,
#: and writes them into the DOM when the page has loaded, for --dump-dom to show.
PROBE = """<script>(function(){var errs=[];
window.addEventListener('error',function(e){var t=e.target;errs.push(t&&t!==window?
('resource '+(t.src||t.href||t.tagName)):('script '+e.message));},true);
window.addEventListener('load',function(){var p=document.createElement('pre');
p.id='panstream-probe';p.textContent=JSON.stringify({errors:errs,
resources:performance.getEntriesByType('resource').map(function(r){return r.name;}),
height:document.documentElement.scrollHeight});document.body.appendChild(p);});})();</script>"""


def chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert BROWSER is not None
    profile = tmp / "profile"
    profile.mkdir(exist_ok=True)
    return subprocess.run([BROWSER, *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=180, check=False)


def probe(html: str, tmp: Path) -> dict:
    """Open ``html`` (with :data:`PROBE` added) and return what the probe saw."""
    page = tmp / "probed.html"
    page.write_text(html.replace("<head>", "<head>" + PROBE, 1) if "<head>" in html
                    else PROBE + html)
    res = chromium(tmp, "--dump-dom", page.as_uri())
    m = re.search(r'<pre id="panstream-probe">(.*?)</pre>', res.stdout, re.S)
    assert m, f"the probe did not report (exit {res.returncode}): {res.stderr[-2000:]}"
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def test_the_probe_sees_a_script_error_and_a_fetch(tmp_path: Path) -> None:
    """The check below must be able to fail: a page with a broken script and an external image."""
    seen = probe('<html><head></head><body><img src="http://example.invalid/x.png">'
                 "<script>undefined_function();</script></body></html>", tmp_path)
    assert any("undefined_function" in e for e in seen["errors"])
    assert any("example.invalid" in e for e in seen["errors"])
    assert seen["resources"] == ["http://example.invalid/x.png"]


@pytest.fixture(scope="module")
def page(week: tuple[Path, Path]) -> tuple[str, dict]:
    series_path, map_path = week
    m = json.loads(map_path.read_text())
    html = render([SeriesInput("week.jsonl", read(series_path))], [ReleaseInput("map.json", m)],
                  horizon=7 * 86400)
    return html, m


def test_chromium_renders_the_report_without_errors_or_fetches(page: tuple[str, dict],
                                                             tmp_path: Path) -> None:
    seen = probe(page[0], tmp_path)
    assert seen["errors"] == []
    assert seen["resources"] == []
    # and with no script at all, nothing reaches the browser's console either
    report = tmp_path / "report.html"
    report.write_text(page[0])
    res = chromium(tmp_path, "--enable-logging=stderr", "--v=0", "--dump-dom", report.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    assert [ln for ln in res.stderr.splitlines() if ":CONSOLE" in ln] == []
    assert "Privacy cost per person" in res.stdout


def _mask(packed: np.ndarray, colours: set[str] | str, tol: int = 10) -> np.ndarray:
    """Pixels of ``packed`` (0xRRGGBB per pixel) within ``tol`` per channel of any of ``colours``."""
    offs = np.arange(-tol, tol + 1)
    codes = []
    for c in [colours] if isinstance(colours, str) else sorted(colours):
        r, g, b = (int(c[i:i + 2], 16) for i in (1, 3, 5))
        rr, gg, bb = np.meshgrid(np.clip(r + offs, 0, 255), np.clip(g + offs, 0, 255),
                                 np.clip(b + offs, 0, 255), indexing="ij")
        codes.append(((rr << 16) | (gg << 8) | bb).ravel())
    return np.isin(packed, np.unique(np.concatenate(codes)))


def screenshot(html: str, tmp: Path) -> np.ndarray:
    """Chromium's screenshot of the whole page (1100 pixels wide), as 0xRRGGBB per pixel."""
    import matplotlib.image as mpimg

    height = min(int(probe(html, tmp)["height"]) + 20, 8000)
    report = tmp / "report.html"
    report.write_text(html)
    shot = tmp / "report.png"
    res = chromium(tmp, f"--screenshot={shot}", f"--window-size=1100,{height}", report.as_uri())
    assert shot.exists(), res.stderr[-2000:]
    img = np.rint(mpimg.imread(str(shot)) * 255).astype(np.int64)
    assert img.shape[0] >= 600 and img.shape[1] == 1100
    return (img[:, :, 0] << 16) | (img[:, :, 1] << 8) | img[:, :, 2]


def what_is_missing(packed: np.ndarray, m: dict) -> list[str]:
    """Compare a screenshot loosely with what the page must show: the series (dots and whiskers
    in INK inside a BAND of intervals) above the map (its buckets' colours and grey), each a
    block of pixels of a plausible size. Returns what is missing (empty: all there)."""
    ink, band, grey = _mask(packed, INK), _mask(packed, BAND), _mask(packed, EMPTY, tol=3)
    fills = {viridis(min(max(r["density"], 0.0), 1.0)) for r in m["rows"] if r["signal"]}
    cells = _mask(packed, fills, tol=2)
    missing = []
    if ink.sum() < 1_000 or band.sum() < 5_000:
        missing.append(f"series: {ink.sum()} estimate pixels, {band.sum()} interval pixels")
    if cells.sum() < 50_000 or grey.sum() < 20_000:
        missing.append(f"map: {cells.sum()} coloured bucket pixels, {grey.sum()} grey")
    if not missing:
        ys_ink = np.nonzero(ink.any(axis=1))[0]
        ys_band = np.nonzero(band.any(axis=1))[0]
        ys_map = np.nonzero(cells.any(axis=1))[0]
        xs_map = np.nonzero(cells.any(axis=0))[0]
        if not ys_ink.max() < ys_map.min():
            missing.append("the series chart is not above the map")
        if (ys_map.max() - ys_map.min()) < 300 or (xs_map.max() - xs_map.min()) < 300:
            missing.append("the map is smaller than 300 x 300 pixels")
        if ys_band.min() < ys_ink.min() - 40 or ys_band.max() > ys_ink.max() + 40:
            missing.append("the interval band is not where the estimates are")
    return missing


def test_the_screenshot_shows_the_series_with_intervals_and_the_map(page: tuple[str, dict],
                                                                    tmp_path: Path) -> None:
    html, m = page
    assert what_is_missing(screenshot(html, tmp_path), m) == []


def test_the_screenshot_check_notices_a_missing_map(week: tuple[Path, Path],
                                                    tmp_path: Path) -> None:
    series_path, map_path = week
    html = render([SeriesInput("week.jsonl", read(series_path))])
    missing = what_is_missing(screenshot(html, tmp_path), json.loads(map_path.read_text()))
    assert len(missing) == 1 and missing[0].startswith("map:")


def test_a_per_country_page_renders_its_ranked_chart(countries: Path, tmp_path: Path) -> None:
    """The per-country section in Chromium: no error, nothing fetched, and the ranked chart's
    dots and intervals on the screenshot."""
    html = render([], [ReleaseInput("countries.json", json.loads(countries.read_text()))])
    seen = probe(html, tmp_path)
    assert seen["errors"] == [] and seen["resources"] == []
    packed = screenshot(html, tmp_path)
    assert _mask(packed, INK).sum() >= 500  # the dots of the countries told from noise
