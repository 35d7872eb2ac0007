"""``panstream report``: one self-contained HTML page of what may be published.

The people who read panstream's numbers are not the operators who run it. The report puts the
publishable numbers, their uncertainty and their privacy cost on one page that a manager, a
data-protection officer or a journalist can open in any browser, offline:

* :mod:`panstream.report.fields` reads a figure out of any release JSON or series record (the
  unified schema first, today's per-family names as the fallback);
* :mod:`panstream.report.svg` draws inline SVG charts by hand (no library, no script);
* :mod:`panstream.report.page` lays out the page from released results only, with its sections in
  :mod:`panstream.report.sections` (a series, a single release) and :mod:`panstream.report.buckets`
  (a map, distinct clients by country), made of :mod:`panstream.report.parts` (the page being
  built, the inputs, how a released number is printed and clamped);
* :mod:`panstream.report.inputs` reads the published files (never a state).

>>> from panstream.report import ReleaseInput, render
>>> html = render(releases=[ReleaseInput("r.json", {"distinct": 812.0, "distinct_low": 700.0,
...     "distinct_high": 924.0, "epsilon": 0.5, "epsilon_state": 1.0, "epsilon_total": 1.5,
...     "universe": "ipv4:10.0.0.0/16"})], generated=0)
>>> html.startswith("<!DOCTYPE html>"), "<script" in html, "epsilon 1.5" in html
(True, False, True)
"""

from __future__ import annotations

from panstream.report.fields import Figure, figure
from panstream.report.inputs import load_release, load_series
from panstream.report.page import ReleaseInput, SeriesInput, render

__all__ = ["Figure", "ReleaseInput", "SeriesInput", "figure", "load_release", "load_series",
           "render", "write"]


def write(path: str, html: str) -> int:
    """Write the page to ``path`` (UTF-8); returns its size in bytes.

    Raises:
        SourceError: the file cannot be written.
    """
    from panstream.errors import SourceError

    data = html.encode("utf-8")
    try:
        with open(path, "wb") as f:
            f.write(data)
    except OSError as exc:
        raise SourceError(f"cannot write the report {path}: {exc.strerror}") from None
    return len(data)
