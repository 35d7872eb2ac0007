"""Negative estimates of a density table: released unclamped, shown clamped and marked.

The one rule (docs/release.md, "Negative estimates: one rule for every family"), here for the
plain density release of a hashed table (``hashed:M``, ``hashed-ip:M``), which until this change
clamped its distinct count and interval at 0 inside the release: what is *released* (the API's
attributes, ``--json``, series files, metrics) is the unbiased estimate, below 0 about half the
time for an empty table, so that sums and averages of releases stay unbiased; what is *shown* to a
person (the printout, the one-line progress and window lines, ``series show``, the report) is
clamped at 0 and marked.

Statistical checks use fixed trial counts and state their false-failure probability (at most
1e-6); none retries.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from schema_check import validate, validate_lines
from scipy import stats

import panstream as ps
from panstream.cli.cmd_ingest import release_line
from panstream.cli.main import cli
from panstream.cli.window_options import window_line
from panstream.release.density import Release, format_release
from panstream.release.honesty import CLAMP_MARK_NOTE
from panstream.release.stats import distinct_from_density, linear_count
from panstream.windows.series import Series, record

M = 1024
TRIALS = 3000
#: Hoeffding: a frequency of TRIALS Bernoulli trials is more than this far from its probability
#: with probability at most 2 exp(-2 TRIALS t^2) = 1e-6.
HOEFFDING = math.sqrt(math.log(2e6) / (2 * TRIALS))
#: A mean of TRIALS i.i.d. terms (light tails: a binomial plus a Laplace) is more than this many
#: standard errors from its expectation with probability about 1e-7 (normal approximation).
Z = 5.33


def below_zero_probability(est: ps.DensityEstimator, epsilon: float) -> float:
    """Pr[released density < 0] for an empty table: its count of ones K ~ Binomial(M, q) plus
    Laplace(1/epsilon) noise (the 2**-10 lattice of the exact sampler is treated as continuous)
    falls below M q."""
    q = float(est.q)
    ks = range(M + 1)
    pmf = stats.binom.pmf(ks, M, q)
    return float(sum(w * stats.laplace.cdf(M * q - k, scale=1 / epsilon)
                     for k, w in zip(ks, pmf, strict=True)))


@pytest.mark.parametrize("universe", ["hashed:1024", "hashed-ip:1024", "range:1024"])
def test_an_empty_table_is_released_below_zero_half_the_time_and_its_mean_is_unbiased(
        universe: str) -> None:
    """3,000 empty tables of 1,024 cells, each released once at epsilon 1 (laplace).

    * About half the releases are below 0 (0.502 from the binomial and the Laplace): the
      frequency is within Hoeffding's 0.049 of it (false failure 1e-6).
    * The mean of the unclamped releases covers the truth, 0: within 5.33 standard errors, plus
      for a hashed table linear counting's own convexity, ``M E[f^2] / 2`` (about half a count
      here against a standard error of the mean of about 0.6).
    * The mean of the same releases clamped at 0 does not: an empty table's clamped estimate
      averages about ``sd / sqrt(2 pi)`` (0.4 sd, about 12 counts), 21.8 standard errors of the
      mean above 0 (``se = sd / sqrt(3000)``). The test asks for more than 15 se and 0.3 sd: the
      clamped mean's own sd is ``0.584 sd / sqrt(3000)``, so falling short needs a shortfall of
      9 of its sds (false failure far below 1e-6).
    * The noiseless diagnostic estimate (``estimate()``) is unclamped too: below 0 with
      probability Pr[K < M q] (0.505), within Hoeffding's bound.
    """
    released, noiseless = [], []
    for _ in range(TRIALS):
        est = ps.DensityEstimator(universe, epsilon=1.0, budget=1.0)
        noiseless.append(est.estimate().distinct)
        r = est.release(1.0)
        assert r.distinct_low < r.distinct < r.distinct_high  # the interval is not clamped either
        released.append(r.distinct)
    est = ps.DensityEstimator(universe, epsilon=1.0)
    below = sum(x < 0 for x in released) / TRIALS
    assert abs(below - below_zero_probability(est, 1.0)) < HOEFFDING, below
    k_below = float(stats.binom.cdf(math.ceil(M * float(est.q)) - 1, M, float(est.q)))
    assert abs(sum(x < 0 for x in noiseless) / TRIALS - k_below) < HOEFFDING

    sd = statistics.stdev(released)
    se = sd / math.sqrt(TRIALS)
    convexity = sd**2 / (2 * M) if universe.startswith("hashed") else 0.0
    mean = statistics.fmean(released)
    assert -Z * se < mean < Z * se + convexity, (mean, se)
    clamped = statistics.fmean(max(x, 0.0) for x in released)
    assert clamped > 15 * se and clamped > 0.3 * sd, (clamped, se, sd)


def test_the_sum_of_many_small_tables_is_unbiased_where_the_clamped_sum_is_not() -> None:
    """An operator who adds 900 per-site releases (each site's table empty) gets about 0 from the
    released values and a large positive total from clamped ones: the reason for the rule.

    With ``s`` one release's standard deviation (about 31), the sum of the 900 unclamped releases
    has sd ``30 s``: it lies within ``5.33 x 30 s`` of 0 plus linear counting's convexity
    (``900 s^2 / 2M``, about ``13 s``), false failure about 1e-7. The sum of the same releases
    clamped at 0 has mean ``900 s / sqrt(2 pi)``, about ``359 s``, and sd ``30 x 0.584 s``, about
    ``17.5 s``: it exceeds that bound (at most ``173 s``) unless it falls 10 of its sds short
    (probability far below 1e-6)."""
    n = 900
    releases = [ps.DensityEstimator("hashed-ip:1024", budget=1.0).release(1.0) for _ in range(n)]
    s = statistics.fmean(r.stderr_distinct for r in releases)
    bound = Z * math.sqrt(n) * s + n * s**2 / (2 * M)
    assert abs(math.fsum(r.distinct for r in releases)) < bound
    assert math.fsum(max(r.distinct, 0.0) for r in releases) > bound


def test_linear_counting_extends_below_zero_and_keeps_its_saturation_cap() -> None:
    """Below density 0 the count is ``-M ln(1 - f)`` as above it (near 0: ``M f``); at or beyond
    ``1 - 1/M`` a hashed table saturates and the count is capped at ``M ln M`` (the table is too
    small for the stream). A plain universe's count is ``f |X|`` on both sides."""
    assert linear_count(-0.05, M) == pytest.approx(-M * math.log(1.05))
    assert distinct_from_density(-0.05, M, True) == linear_count(-0.05, M) < 0
    assert distinct_from_density(-0.05, M, False) == -0.05 * M
    cap = M * math.log(M)
    assert linear_count(1 - 1 / M, M) == pytest.approx(cap)
    assert linear_count(1.3, M) == linear_count(1 - 1 / M, M)
    full = ps.DensityEstimator("hashed:64", epsilon=4.0, budget=1.0)
    full.update([f"client-{i}" for i in range(5000)])  # 5,000 items in 64 cells: saturated
    r = full.release(1.0)
    assert r.distinct <= r.distinct_high <= 64 * math.log(64) + 1e-9


def _empty_hashed_releases(n: int) -> list[Release]:
    return [ps.DensityEstimator("hashed-ip:1024", budget=1.0).release(1.0) for _ in range(n)]


def test_json_keeps_the_negative_release_and_validates() -> None:
    """The JSON of an empty table's release: ``estimate`` (and ``distinct``, its old name) and
    ``low`` are what the release computed, below 0 for at least one of 40 releases (none below
    with probability about 2^-40), and every line validates against the schema."""
    releases = _empty_hashed_releases(40)
    dicts = [r.to_dict() for r in releases]
    for r, d in zip(releases, dicts, strict=True):
        validate(d, "estimate")
        assert (d["estimate"], d["low"], d["high"]) == (r.distinct, r.distinct_low,
                                                        r.distinct_high)
        assert d["distinct"] == r.distinct and d["extras"]["density"] == r.density
    assert any(d["estimate"] < 0 for d in dicts)
    assert all(d["low"] < 0 for d in dicts if d["estimate"] < 0)


def _shown(text: str, label: str) -> tuple[str, str, str]:
    m = re.search(rf"{label}\s+([\d,.]+)\s+\S+ CI \[([\d,.]+), ([\d,.]+)\]", text)
    assert m, text
    return m.group(1), m.group(2), m.group(3)


def test_the_printout_shows_the_release_clamped_at_zero_and_says_so() -> None:
    """The same releases printed: the distinct count and its interval at ``max(0, value)`` (a
    hashed table has no upper cap shown but its saturation), never a negative number, and the
    line that says they were clamped exactly when a figure was."""
    for r in _empty_hashed_releases(40):
        text = format_release(r)
        want = tuple(f"{max(v, 0.0):,.0f}" for v in (r.distinct, r.distinct_low, r.distinct_high))
        if r.distinct_high < 0:  # the whole interval below 0: no "0 CI [0, 0]" (issue 37)
            assert re.search(r"distinct \(estimated\)\s+indistinguishable from 0", text), text
        else:
            assert _shown(text, "distinct \\(estimated\\)") == want
        assert re.findall(r"(?<![\w.])-\d", text.split("noisy count")[0]) == []
        clamped = min(r.distinct_low, r.density_low) < 0
        assert ("shown clamped at 0" in text) == clamped
        assert ("--json keeps the released, unbiased values" in text) == clamped
    # a negative estimate, whatever the draw: shown 0, its interval [0, high], marked
    r = _empty_hashed_releases(1)[0]
    neg = replace(r, distinct=-12.4, distinct_low=-70.0, distinct_high=45.6, density=-0.0121,
                  density_low=-0.07, density_high=0.045)
    text = format_release(neg)
    assert _shown(text, "distinct \\(estimated\\)") == ("0", "0", "46")
    assert "shown clamped at 0 (a count is never negative)" in text
    assert "which may be below 0" in text and "universe's size" not in text  # hashed: no top
    plain = replace(neg, universe="range:1024")
    assert "shown clamped at 0 and at the universe's size" in format_release(plain)


def test_the_command_line_release_of_an_empty_hashed_table(tmp_path: Path) -> None:
    """``panstream release --json`` of a saved empty ``hashed-ip`` table prints the release as
    computed (validating against the schema). Each of 40 fresh tables is released once (one
    table released 40 times would not do: its own count of ones is fixed, so a table drawn above
    its mean stays above 0 under the release noise alone); at least one is below 0 (all 40 above
    with probability 0.498^40 < 1e-12). The text printout never shows a negative count."""
    runner = CliRunner()
    out = []
    for i in range(40):
        state = tmp_path / f"empty-{i}.pst"
        ps.DensityEstimator("hashed-ip:1024", budget=2.0).save(str(state))
        r = runner.invoke(cli, ["release", "-s", str(state), "--epsilon", "1", "--json"],
                          catch_exceptions=False)
        assert r.exit_code == 0, r.output
        out += validate_lines(r.stdout)
        text = runner.invoke(cli, ["release", "-s", str(state), "--epsilon", "1"]).stdout
        assert re.findall(r"(?<![\w.])-\d", text.split("noisy count")[0]) == []
    assert any(d["estimate"] < 0 for d in out)


def test_one_line_printouts_mark_a_clamped_figure() -> None:
    """The periodic release line of ``ingest`` and a closed window's line show a negative figure
    as ``0*`` and end by saying what the ``*`` means; a line with nothing clamped has neither."""
    r = _empty_hashed_releases(1)[0]
    neg = replace(r, distinct=-12.4, distinct_low=-70.0, distinct_high=45.6, density=-0.0121)
    line = release_line(json.loads(json.dumps(neg.to_dict())))
    assert "distinct 0* [0*, 46]" in line and "density 0.000000*" in line
    assert line.endswith(f"({CLAMP_MARK_NOTE})") and not re.search(r"(?<![\w.])-\d", line)
    pos = replace(r, distinct=120.0, distinct_low=60.0, distinct_high=180.0, density=0.12)
    assert "*" not in release_line(pos.to_dict())
    rec = record("w1", 0, 3600, "density", neg.to_dict(), epsilon_state=1.0)
    wl = window_line(rec)
    assert "distinct 0* [0*, 46]" in wl and wl.endswith(f"({CLAMP_MARK_NOTE})")
    assert "*" not in window_line(record("w2", 0, 3600, "density", pos.to_dict(),
                                         epsilon_state=1.0))


def test_series_show_marks_clamped_windows_and_the_file_keeps_them(tmp_path: Path) -> None:
    """A series file keeps a window's negative estimate as released; ``series show`` prints it
    as ``0*`` with one closing line that says so, and ``--json`` gives it back unclamped."""
    path = tmp_path / "hourly.jsonl"
    s = Series(path)
    r = _empty_hashed_releases(1)[0]
    neg = replace(r, distinct=-12.4, distinct_low=-70.0, distinct_high=45.6, density=-0.0121)
    pos = replace(r, distinct=120.0, distinct_low=60.0, distinct_high=180.0, density=0.12)
    s.append(record("w0", 0, 3600, "density", pos.to_dict(), epsilon_state=1.0))
    s.append(record("w1", 3600, 7200, "density", neg.to_dict(), epsilon_state=1.0))
    out = CliRunner().invoke(cli, ["series", "show", str(path)], catch_exceptions=False).stdout
    lines = out.splitlines()
    assert re.search(r"\b0\*\s+\[0\*, 46\]", lines[1]) and "*" not in lines[0]
    assert "shown clamped at 0" in out and not re.search(r"(?<![\w.])-\d", out)
    js = CliRunner().invoke(cli, ["series", "show", str(path), "--json"]).stdout
    recs = validate_lines(js)
    assert [d["window"]["estimate"] for d in recs] == [120.0, -12.4]
