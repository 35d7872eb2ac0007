"""A release whose whole interval fell below 0 (noise around a small count) is not shown as
``0 95% CI [0, 0]``, which reads as a certain zero (issue 37): the printout says
"indistinguishable from 0" and why, in every family's summary; ``--json`` keeps the released,
unbiased values."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

import panstream as ps
from panstream.release.country import format_country_release
from panstream.release.density import format_release
from panstream.release.honesty import BELOW_ZERO, ZERO_TEXT, interval_text
from panstream.sketch.release import format_sketch_release


def _says_zero_honestly(text: str, line: str) -> None:
    row = next(ln for ln in text.splitlines() if ln.lstrip().startswith(line))
    assert ZERO_TEXT in row and BELOW_ZERO in row, row
    assert "[0, 0]" not in row and not re.search(r"\[0\.0+, 0\.0+\]", row), row


def test_interval_text_never_prints_a_clamped_zero_interval() -> None:
    assert interval_text(-5.0, -30.0, -1.0, "95% CI ").strip().startswith(ZERO_TEXT)
    assert interval_text(5.0, -30.0, 41.0, "95% CI ").endswith("95% CI [0, 41]")
    assert interval_text(0.5, 0.25, 1.5, fmt=".2f", top=1).endswith("[0.25, 1.00]")


def test_density_and_sketch_printouts_say_indistinguishable_from_zero() -> None:
    est = ps.DensityEstimator("range:4096", epsilon=1.0, budget=1.0)
    r = est.release(0.5)
    below = replace(r, distinct=-20.0, distinct_low=-60.0, distinct_high=-2.0, density=-0.005,
                    density_low=-0.015, density_high=-0.001)
    text = format_release(below)
    _says_zero_honestly(text, "distinct (estimated)")
    _says_zero_honestly(text, "density")
    assert below.to_dict()["high"] == -2.0  # released as drawn
    sk = ps.SketchEstimator(epsilon=1.0, items="id", budget=1.0)
    sk.update(np.arange(10))
    s = sk.release(0.5)
    _says_zero_honestly(format_sketch_release(replace(s, distinct=-9.0, low=-30.0, high=-1.0)),
                        "distinct (estimated)")


def test_a_country_total_below_zero_is_indistinguishable_from_zero() -> None:
    pytest.importorskip("iptocc")
    from panstream.sketch.country import CountrySketchEstimator

    est = CountrySketchEstimator(epsilon=1.0, buckets=64, levels=8, budget=1.0)
    r = est.release(1.0)
    text = format_country_release(replace(r, distinct=-50.0, low=-400.0, high=-3.0))
    _says_zero_honestly(text, "distinct (all countries)")
