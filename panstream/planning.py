"""The best split of one total pan-private epsilon between the state and the releases.

Users think in one number: the pan-private epsilon of a state and everything published from it,

    total = epsilon_state + releases * epsilon_release

(one intrusion plus all outputs; see :mod:`panstream.release.ledger`). Where the total goes
decides the error of every release. One release of the density has two independent noises:

* the table's binomial noise, standard deviation
  ``sqrt(f p(1-p) + (1-f) q(1-q)) / ((p - q) sqrt|X|)`` with (q, p) calibrated for
  ``epsilon_state`` (randomized response: ``1 / (2 sinh(epsilon_state / 2) sqrt|X|)``);
* the release noise on the count of ones, variance ``2 / epsilon_release**2`` for Laplace (the
  exact lattice law's variance is used), divided by ``(|X| (p - q))**2`` once debiased.

More state epsilon means a cleaner table *and* a larger ``p - q`` that shrinks the release noise
too, but leaves less for the releases. The sum is a function of one variable
(``epsilon_state + R epsilon_release = total``); :func:`plan_split` minimizes it numerically (a grid,
then golden-section search), rounds the per-release epsilon down to three significant digits (the
optimum is flat), and reports the error of one release next to the naive half/half split. Every
epsilon reported is realized: the state's from the exact dyadic (q, p), the releases' exactly as the
samplers use them; the state's ledger budget is ``R * epsilon_release``.

>>> s = plan_split(2.0, "range:65536", releases=1)
>>> s.best.epsilon_total <= 2.0 and s.best.stderr_density < s.naive.stderr_density
True
>>> round(s.best.epsilon_state, 3), s.best.epsilon_release, round(s.improvement, 2)
(1.926, 0.0737, 2.1)
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from panstream.calibration import CALIBRATIONS, DEFAULT_CALIBRATION, Calibrated, calibrate, validate_epsilon
from panstream.errors import ConfigurationError
from panstream.release.noise import MECHANISMS, MIN_EPSILON, NoiseLaw
from panstream.release.stats import DEFAULT_CONFIDENCE, noise_quantile, stderr_distinct, stderr_state
from panstream.universe import MAX_CELLS, Universe

__all__ = ["NO_PRIVACY_EPSILON", "SCALE_WARNING", "Split", "SplitPlan", "accuracy_warning",
           "best_table_size", "country_plan", "distinct_halfwidth", "epsilon_warning",
           "expressible_distinct", "hashed_error", "noise_warning", "plan_split",
           "planned_halfwidth", "release_error",
           "smallest_table_size", "suggest_universe"]

#: Significant digits the per-release epsilon is rounded (down) to.
_DIGITS = 3


@dataclass(frozen=True)
class Split:
    """One way to spend the total, and the error of one release made that way.

    Attributes:
        epsilon_state: realized state epsilon (from the exact dyadic q and p).
        epsilon_state_asked: the ``epsilon=`` / ``--epsilon`` that realizes it (equal to the
            target for "rr" and "tight"; "paper" realizes -ln(1 - epsilon/2)).
        epsilon_release: output epsilon of each release (realized exactly).
        releases: number of releases planned.
        budget: ``releases * epsilon_release``, the state's output budget (ledger).
        epsilon_total: ``epsilon_state + budget``, at most the total asked for.
        p, q: the exact D1 and D0 probabilities, as strings.
        stderr_density: standard deviation of one released density (state and release noise).
        density_95: its 95 % (``confidence``) half-width.
        stderr_distinct, distinct_95: the same for the distinct count (delta method if hashed).
        state_sd_density, release_sd_density: the two parts of ``stderr_density``.
    """

    epsilon_state: float
    epsilon_state_asked: float
    epsilon_release: float
    releases: int
    budget: float
    epsilon_total: float
    p: str
    q: str
    stderr_density: float
    density_95: float
    stderr_distinct: float
    distinct_95: float
    state_sd_density: float
    release_sd_density: float


@dataclass(frozen=True)
class SplitPlan:
    """The split minimizing the error of one release, and the naive half/half split beside it.

    Attributes:
        total_epsilon, universe, cells, releases, density, calibration, mechanism, confidence: the
            question asked.
        best: the split minimizing ``stderr_density`` of one release.
        naive: half the total to the state, half to the releases (``total / (2 R)`` each).
    """

    total_epsilon: float
    universe: str
    cells: int
    releases: int
    density: float
    calibration: str
    mechanism: str
    confidence: float
    best: Split
    naive: Split

    @property
    def improvement(self) -> float:
        """How many times smaller the best split's standard deviation is than the naive one's."""
        return self.naive.stderr_density / self.best.stderr_density

    def to_dict(self) -> dict[str, Any]:
        """All fields as a JSON-serializable dict (with ``improvement``)."""
        d = asdict(self)
        d["improvement"] = self.improvement
        return d


def _asked_for(target: float, calibration: str) -> float:
    """The epsilon to ask of ``calibration`` so that the realized state epsilon is at most
    ``target``: ``target`` itself for rr and tight (they round towards privacy), and for paper
    (whose realized epsilon is -ln(1 - epsilon/2)) ``2 (1 - e^-target)``."""
    if calibration == "paper":
        return -2 * math.expm1(-target)
    return target


def release_error(cal: Calibrated, cells: int, epsilon_release: float, density: float = 0.0,
                  mechanism: str = "laplace") -> tuple[float, float]:
    """Standard deviations of one released density from the state and from the release noise.

    Args:
        cal: the state's calibration (exact p and q).
        cells: |X|.
        epsilon_release: the release's output epsilon (sensitivity 1 on the count of ones).
        density: the true density (the state part depends on it unless p = 1 - q).
        mechanism: ``"laplace"`` or ``"geometric"``.

    >>> s, r = release_error(calibrate(1.0), 1 << 16, 1.0)
    >>> round(s, 5), float(f"{r:.3g}")
    (0.00375, 4.67e-05)
    """
    law = NoiseLaw.for_mechanism(mechanism, epsilon_release)
    state = stderr_state(density, cells, cal.p, cal.q)
    release = math.sqrt(law.variance) / (cells * float(cal.p - cal.q))
    return state, release


def _variance(target: float, total: float, releases: int, cells: int, density: float,
              calibration: str, mechanism: str) -> float:
    """Variance of one released density when ``target`` goes to the state (inf if impossible)."""
    out = (total - target) / releases
    if target <= 0 or out < MIN_EPSILON:
        return math.inf
    try:
        cal = calibrate(_asked_for(target, calibration), calibration)
    except ConfigurationError:
        return math.inf
    s, r = release_error(cal, cells, out, density, mechanism)
    return s * s + r * r


def _round_down(x: float, digits: int = _DIGITS) -> float:
    """``x > 0`` rounded down to ``digits`` significant digits (as the shortest float)."""
    v = float(f"{x:.{digits - 1}e}")
    if v > x:
        step = 10.0 ** (math.floor(math.log10(v)) - digits + 1)
        v = float(f"{v - step:.{digits - 1}e}")
    return v


def _split(state_target: float, epsilon_release: float, total: float, releases: int, universe: Universe,
           density: float, calibration: str, mechanism: str, confidence: float) -> Split:
    """The :class:`Split` giving ``state_target`` to the state and ``epsilon_release`` to each
    release, with the state's asked epsilon nudged down if float rounding would pass ``total``."""
    asked = _asked_for(state_target, calibration)
    budget = releases * epsilon_release
    cal = calibrate(asked, calibration)
    while cal.epsilon_state + budget > total:  # at most an ulp or two
        asked = math.nextafter(asked, 0.0)
        cal = calibrate(asked, calibration)
    m = universe.size
    hashed = universe.is_hashed
    s, r = release_error(cal, m, epsilon_release, density, mechanism)
    sd = math.hypot(s, r)
    scale = m * float(cal.p - cal.q)
    law = NoiseLaw.for_mechanism(mechanism, epsilon_release)
    half = noise_quantile(s * scale, law, confidence) / scale
    return Split(epsilon_state=cal.epsilon_state, epsilon_state_asked=asked,
                 epsilon_release=epsilon_release, releases=releases, budget=budget,
                 epsilon_total=cal.epsilon_state + budget, p=str(cal.p), q=str(cal.q),
                 stderr_density=sd, density_95=half,
                 stderr_distinct=stderr_distinct(density, sd, m, hashed),
                 distinct_95=stderr_distinct(density, half, m, hashed),
                 state_sd_density=s, release_sd_density=r)


def plan_split(total_epsilon: float, universe: Universe | str, releases: int = 1,
               density: float = 0.0, calibration: str = DEFAULT_CALIBRATION,
               mechanism: str = "laplace", confidence: float = DEFAULT_CONFIDENCE) -> SplitPlan:
    """The split of ``total_epsilon`` (state + ``releases`` equal releases) minimizing the standard
    deviation of one released density, beside the naive half/half split.

    Args:
        total_epsilon: the pan-private epsilon of the state and all its releases.
        universe: the universe (or its spec).
        releases: how many releases the state's budget must pay for (equal shares).
        density: the expected density (fraction of cells that appear), in [0, 1]; 0 is the worst
            case for "tight" and "paper" and changes nothing for "rr".
        calibration: of the state (default "rr").
        mechanism: of the releases, ``"laplace"`` or ``"geometric"``.
        confidence: level of the ``*_95`` half-widths.

    Returns:
        A :class:`SplitPlan`; ``best.epsilon_total <= total_epsilon``.

    Raises:
        ConfigurationError: invalid arguments, or a total too small to split at 32-bit precision.
    """
    total = validate_epsilon(total_epsilon, "total epsilon")
    u = Universe.parse(universe) if isinstance(universe, str) else universe
    if isinstance(releases, bool) or not isinstance(releases, int) or releases < 1:
        msg = f"releases must be a positive integer, got {releases!r}"
        raise ConfigurationError(msg)
    if not (isinstance(density, (int, float)) and 0.0 <= density <= 1.0):
        msg = f"density must lie in [0, 1], got {density!r}"
        raise ConfigurationError(msg)
    if calibration not in CALIBRATIONS:
        msg = f"unknown calibration {calibration!r}: use one of {', '.join(CALIBRATIONS)}"
        raise ConfigurationError(msg)
    if mechanism not in MECHANISMS:
        msg = f"unknown mechanism {mechanism!r}: use one of {', '.join(MECHANISMS)}"
        raise ConfigurationError(msg)
    if not 0 < confidence < 1:
        msg = f"confidence must lie strictly between 0 and 1, got {confidence!r}"
        raise ConfigurationError(msg)
    m, f = u.size, float(density)

    def var(t: float) -> float:
        return _variance(t, total, releases, m, f, calibration, mechanism)

    grid = [total * i / 256 for i in range(1, 256)]
    values = [var(t) for t in grid]
    i = min(range(len(grid)), key=values.__getitem__)
    if not math.isfinite(values[i]):
        msg = (f"a total epsilon of {total:g} is too small to split between a state and "
               f"{releases} release(s) at {calibration} calibration")
        raise ConfigurationError(msg)
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    g = (math.sqrt(5) - 1) / 2
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = var(a), var(b)
    for _ in range(60):
        if fa <= fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = var(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = var(b)
    t = a if fa <= fb else b
    eps_out = _round_down((total - t) / releases)
    best = _split(total - releases * eps_out, eps_out, total, releases, u, f, calibration,
                  mechanism, confidence)
    naive = _split(total / 2, total / (2 * releases), total, releases, u, f, calibration,
                   mechanism, confidence)
    return SplitPlan(total, u.spec, m, releases, f, calibration, mechanism, float(confidence),
                     best, naive)


# ------------------------------------------------------------------ hashed tables: sizing
def _occupancy(n: float, m: int) -> tuple[float, float, float]:
    """Expected occupied fraction, linear-counting variance and bias for ``n`` IDs in ``m`` buckets."""
    t = n / m
    f = -math.expm1(-t)
    g = math.expm1(t) - t if t < 200 else math.inf  # e^t - t - 1 (saturated table: infinite)
    return f, m * g, g / 2


def hashed_error(n: float, m: int, p: float, q: float, release_epsilon: float | None = None
                 ) -> dict[str, float]:
    """Error budget of the distinct count of ``n`` IDs in a hashed table of ``m`` buckets.

    Returns:
        ``{"density", "table_noise", "release_noise", "occupancy_sd", "bias", "rmse",
        "uncorrected_bias"}`` (counts of distinct IDs).
    """
    f, var_occ, bias = _occupancy(n, m)
    fc = min(f, 1 - 1 / m)
    se = stderr_state(fc, m, p, q)
    table = stderr_distinct(fc, se, m, True)
    rel = 0.0
    if release_epsilon:
        rel = math.sqrt(2) / (release_epsilon * m * (p - q)) * m / (1 - fc)
    rmse = math.sqrt(table**2 + rel**2 + var_occ + bias**2) if math.isfinite(var_occ) else math.inf
    return {"density": f, "table_noise": table, "release_noise": rel,
            "occupancy_sd": math.sqrt(var_occ) if math.isfinite(var_occ) else math.inf,
            "bias": bias, "rmse": rmse, "uncorrected_bias": n - m * f}


def calibrations(epsilon: float) -> Iterator[tuple[str, Calibrated | None, dict[str, Any]]]:
    """Every calibration of ``epsilon`` for a plan's rows: ``(name, calibrated, row)`` where
    ``row`` already says the calibration's error (``calibrated`` is then ``None``) or is empty
    for the plan to fill."""
    for cal in CALIBRATIONS:
        try:
            yield cal, calibrate(epsilon, cal), {"calibration": cal}
        except ConfigurationError as exc:
            yield cal, None, {"calibration": cal, "error": str(exc)}


def country_plan(block: int, blocks: int, epsilon: float, expected: int | None = None,
                 release_epsilon: float | None = None) -> dict[str, Any]:
    """Plan of a ``hashed-ip-country:M`` table: ``blocks`` blocks (one per country slot) of
    ``block`` hashed cells each, released per country.

    Each block is a hashed table of its own (:func:`hashed_error` with ``m = block``): a country's
    distinct count has the error of a ``hashed-ip:M`` table holding that country's clients, and the
    release by country puts noise of scale ``1/release_epsilon`` on every block's count of ones
    (parallel composition: one person is in one country). Without knowing how clients spread
    over countries, the plan gives two per-country errors: a country with no clients (the floor,
    every calibration) and, with ``expected``, a country holding all ``expected`` clients (the
    largest a country can be; a smaller country has a smaller error). The total over all
    countries sums independent blocks: its sd is ``sqrt((blocks - 1) e0**2 + eN**2)``.

    Memory: ``blocks x block`` bits.

    >>> d = country_plan(4096, 253, 1.0, expected=1000)
    >>> d["bits"], d["bytes"]
    (1036288, 129536)
    >>> rr = d["calibrations"][0]
    >>> 0 < rr["empty_country"]["stderr"] < rr["largest_country"]["stderr"] < rr["total"]["stderr"]
    True
    """
    rows: list[dict[str, Any]] = []
    for cal, c, err in calibrations(epsilon):
        if c is None:
            rows.append(err)
            continue
        p, q = float(c.p), float(c.q)

        def one(n: float, p: float = p, q: float = q) -> dict[str, Any]:
            e = hashed_error(n, block, p, q, release_epsilon)
            sd = e["rmse"] if math.isfinite(e["rmse"]) and e["rmse"] <= block * math.log(block) \
                else None  # more than a block can express: it says nothing
            return {"clients": n, "stderr": sd, "stderr_95": None if sd is None else Z95 * sd}

        empty = one(0)
        big = one(expected) if expected is not None else None
        tot = None
        if empty["stderr"] is not None and (big is None or big["stderr"] is not None):
            last = big["stderr"] if big is not None else empty["stderr"]
            tot = math.sqrt((blocks - 1) * empty["stderr"] ** 2 + last ** 2)
        rows.append({"calibration": cal, "p": str(c.p), "q": str(c.q),
                     "epsilon_state": c.epsilon_state, "empty_country": empty,
                     "largest_country": big,
                     "total": {"stderr": tot, "stderr_95": None if tot is None else Z95 * tot}})
    return {"universe": f"hashed-ip-country:{block}", "per": "country", "blocks": blocks,
            "cells_per_country": block, "bits": blocks * block, "bytes": -(-blocks * block // 8),
            "epsilon": epsilon, "expected_distinct": expected,
            "release_epsilon": release_epsilon,
            "error_level": "1 sd (the *_95 fields: 95 % half-width)", "calibrations": rows}


def best_table_size(n: float, p: float, q: float, release_epsilon: float | None = None
                    ) -> tuple[int, int]:
    """The bucket count (any integer, and the best power of two) minimizing the distinct-count RMSE.

    >>> m, m2 = best_table_size(100_000, 0.7310585786, 0.2689414214)
    >>> 100_000 < m < 10_000_000 and m2 & (m2 - 1) == 0
    True
    """
    lo, hi = max(2.0, n / 50), float(MAX_CELLS)

    def err(m: int) -> float:
        return hashed_error(n, m, p, q, release_epsilon)["rmse"]

    grid = sorted({int(round(lo * (hi / lo) ** (i / 600))) for i in range(601)})
    best = min(grid, key=err)
    # refine around the best grid point
    a, b = max(2, int(best / 1.05)), min(MAX_CELLS, int(best * 1.05) + 1)
    step = max(1, (b - a) // 400)
    best = min(range(a, b + 1, step), key=err)
    pow2 = min((1 << k for k in range(1, 33)), key=err)
    return best, pow2


def smallest_table_size(n: float, p: float, q: float, target: float, best: int,
                        release_epsilon: float | None = None) -> int | None:
    """The smallest bucket count ``<= best`` whose distinct-count RMSE is at most ``target`` IDs, or
    ``None`` if even ``best`` misses it. Below the best size the error falls as ``m`` grows
    (collisions dominate), so a bisection finds it.

    >>> p, q = 0.8160602794, 0.5   # tight at epsilon 1
    >>> m = smallest_table_size(100_000, p, q, 5_000, 178_893)
    >>> hashed_error(100_000, m, p, q)["rmse"] <= 5_000 < hashed_error(100_000, m - 1, p, q)["rmse"]
    True
    """

    def err(m: int) -> float:
        return hashed_error(n, m, p, q, release_epsilon)["rmse"]

    if err(best) > target:
        return None
    lo, hi = 2, best  # err(hi) <= target
    if err(lo) <= target:
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if err(mid) <= target:
            hi = mid
        else:
            lo = mid
    return hi


#: z for a two-sided 95 % normal interval.
Z95 = 1.959963984540054


def expressible_distinct(universe: Universe) -> float:
    """The largest distinct count the estimator can report for ``universe``: ``|X|`` cells, or for a
    hashed table linear counting at one empty bucket, ``m ln m``."""
    m = universe.size
    return m * math.log(m) if universe.is_hashed else float(m)


# ------------------------------------------------------------------ warnings for nonsense plans
#: Without an expected count, ``ingest`` warns when a new universe cannot tell fewer than this many
#: distinct items from none (the 95 % error of its distinct count at density 0): the scale of one
#: site's clients, where ``ipv4:0.0.0.0/0`` (+-123,000 at epsilon 1, 512 MiB) is useless.
SCALE_WARNING = 10_000
#: Above this epsilon (a likelihood ratio of e^20 = 4.9e8) a table or release protects practically
#: nothing: warned about.
NO_PRIVACY_EPSILON = 20.0
#: Universe kinds whose items are addresses (a hashed-ip table can replace them).
_ADDRESS_KINDS = ("ipv4", "ipv6", "hashed-ip")


def distinct_halfwidth(universe: Universe, epsilon: float, calibration: str = DEFAULT_CALIBRATION,
                       expected: float | None = None, confidence_z: float = Z95) -> float:
    """95 % half-width of the distinct count of one table (its own noise, plus the collision
    error of a hashed table at ``expected`` items; no release noise), at ``expected`` distinct
    items or at density 0 (``None``).

    >>> round(distinct_halfwidth(Universe.parse("ipv4:0.0.0.0/0"), 1.0, expected=50_000), -2)
    123200.0
    """
    cal = calibrate(epsilon, calibration)
    p, q = float(cal.p), float(cal.q)
    m = universe.size
    if universe.is_hashed and expected is not None:
        return confidence_z * hashed_error(expected, m, p, q)["rmse"]
    f = 0.0 if expected is None else (
        -math.expm1(-expected / m) if universe.is_hashed else min(1.0, expected / m))
    return confidence_z * stderr_distinct(f, stderr_state(f, m, p, q), m, universe.is_hashed)


def suggest_universe(n: float, epsilon: float, calibration: str = DEFAULT_CALIBRATION,
                     addresses: bool = True) -> tuple[str, float]:
    """The hashed table (power-of-two size minimizing the error) for ``n`` distinct items, and
    the 95 % half-width of its distinct count: ``hashed-ip:M`` for addresses, else ``hashed:M``.

    >>> suggest_universe(50_000, 1.0)[0]
    'hashed-ip:131072'
    """
    cal = calibrate(epsilon, calibration)
    p, q = float(cal.p), float(cal.q)
    _, pow2 = best_table_size(n, p, q)
    half = Z95 * hashed_error(n, pow2, p, q)["rmse"]
    return f"{'hashed-ip' if addresses else 'hashed'}:{pow2}", half


def accuracy_warning(universe: Universe, epsilon: float, calibration: str = DEFAULT_CALIBRATION,
                     expected: int | None = None, scale: float = SCALE_WARNING) -> str | None:
    """A one-line warning when a density table over ``universe`` at ``epsilon`` cannot count what
    it is meant to, naming the universe that would (``None`` when all is well):

    * with ``expected`` N: the 95 % error of the distinct count exceeds N;
    * without: that error at density 0 is at least ``scale`` (fewer items than that cannot be told
      from none: the universe is sized for the address space, not for the clients);
    * either way, an error beyond everything the universe can express: epsilon is too small.

    >>> w = accuracy_warning(Universe.parse("ipv4:0.0.0.0/0"), 1.0, expected=50_000)
    >>> print(w.replace("; ", ";\\n").replace(": ", ":\\n"))
    the planned 95 % error of the distinct count, +-123,248, exceeds the 50,000 distinct expected:
    the table cannot count them;
    use hashed-ip:131072 (+-1,018 at 50,000;
    'panstream plan -u hashed-ip:131072 --epsilon 1 -n 50000' shows the details)
    """
    half = distinct_halfwidth(universe, epsilon, calibration, expected)
    cap = expressible_distinct(universe)
    saturated = universe.is_hashed and expected is not None
    if not saturated and (not math.isfinite(half) or half >= cap):
        return (f"epsilon {epsilon:g} is too small for {universe.spec}: the 95 % error of a "
                f"distinct count, +-{half:,.3g}, exceeds all the {cap:,.0f} it can express, so the "
                f"table says nothing; raise --epsilon ('panstream plan -u {universe.spec} "
                f"--epsilon E' shows the errors)")
    addresses = universe.kind in _ADDRESS_KINDS
    if expected is not None:
        if half <= expected:
            return None
        err = f"+-{half:,.0f}" if math.isfinite(half) and half < cap else "beyond what it can express"
        head = (f"the planned 95 % error of the distinct count, {err}, exceeds the "
                f"{expected:,} distinct expected: the table cannot count them")
        n = float(expected)
    else:
        if half < scale:
            return None
        n = 10.0 ** math.floor(math.log10(half))
        head = (f"{universe.spec} ({universe.size:,} cells) gives every distinct count a 95 % "
                f"error of +-{half:,.0f}: fewer distinct items than that cannot be told from none")
    spec, better = suggest_universe(n, epsilon, calibration, addresses)
    if better >= n:
        return (f"{head}; no table size counts {n:,.0f} at epsilon {epsilon:g} (the best, {spec}, "
                f"gives +-{better:,.0f}): raise --epsilon")
    if expected is not None:
        return (f"{head}; use {spec} (+-{better:,.0f} at {expected:,}; 'panstream plan -u {spec} "
                f"--epsilon {epsilon:g} -n {expected}' shows the details)")
    return (f"{head}; if you expect fewer, use a hashed table sized for them, e.g. {spec} "
            f"(+-{better:,.0f} at {n:,.0f}; give -n N, or see 'panstream plan -u {spec} "
            f"--epsilon {epsilon:g} -n N')")


def planned_halfwidth(estimator: str, universe: Universe | None, epsilon: float, expected: int,
                      calibration: str = DEFAULT_CALIBRATION, modulus: int = 16) -> float:
    """95 % half-width of the headline count (distinct, or present cells for frequency) that a
    table of ``estimator`` will have at ``expected`` items, from its own noise (no release).

    >>> round(planned_halfwidth("sketch", None, 1.0, 25), -1) > 25
    True
    """
    if estimator == "sketch":
        from panstream.estimators.sketch.sfm import DEFAULT_BUCKETS, DEFAULT_LEVELS, planned_error

        b = getattr(universe, "buckets", DEFAULT_BUCKETS)
        lv = getattr(universe, "levels", DEFAULT_LEVELS)
        return Z95 * planned_error(float(expected), epsilon, None, b, lv)["total"]
    assert universe is not None
    if estimator == "frequency":
        from panstream.release.incidence import plan_frequency

        return plan_frequency(universe.size, epsilon, modulus,
                              min(int(expected), universe.size)).present
    return distinct_halfwidth(universe, epsilon, calibration, expected)


def noise_warning(estimator: str, universe: Universe | None, epsilon: float, expected: int,
                  calibration: str = DEFAULT_CALIBRATION, modulus: int = 16) -> str | None:
    """A one-line warning when a table of any family will report ``expected`` items with an
    interval wider than the count (the noise-dominated rule of :mod:`panstream.release.honesty`),
    naming the state epsilon that would avoid it (``None`` when all is well).

    >>> print(noise_warning("sketch", None, 1.0, 30).split(";")[0].replace(", is", ",\\nis"))
    the planned 95 % interval of the sketch's distinct count at 30 items, +-209,
    is wider than the 30 expected: its figures will be mostly noise
    """
    half = planned_halfwidth(estimator, universe, epsilon, expected, calibration, modulus)
    if not (math.isfinite(half) and 2 * half > expected):
        return None
    what = {"sketch": "the sketch's distinct count", "frequency": "the present cells",
            "density": "the distinct count"}.get(estimator, "the count")
    head = (f"the planned 95 % interval of {what} at {expected:,} items, +-{half:,.0f}, is wider "
            f"than the {expected:,} expected: its figures will be mostly noise")
    better = None
    for e in (1.5, 2, 3, 4, 6, 8, 12, 16):
        eps = epsilon * e
        if eps > NO_PRIVACY_EPSILON:
            break
        try:
            if 2 * planned_halfwidth(estimator, universe, eps, expected, calibration,
                                     modulus) <= expected:
                better = eps
                break
        except ConfigurationError:
            break
    lever = (f"--epsilon {better:.3g} would make it usable" if better is not None
             else "no epsilon below 20 makes it usable at this size")
    more = ("a smaller universe or " if estimator != "sketch" else "") + \
        "a longer window (more items per table) also helps"
    return f"{head}; {lever}; {more} ('panstream plan -n {expected}' compares the families)"


def epsilon_warning(epsilon: float, realized: float, what: str = "--epsilon") -> str | None:
    """A one-line warning for an epsilon that means something else than it seems (``None`` if
    fine): realized above what was asked (paper calibration), asked far above what the 32-bit
    probabilities realize, or above :data:`NO_PRIVACY_EPSILON` (practically no privacy).
    ``realized`` is the realized epsilon (a calibration that realizes less by design, paper below
    1.59, is the caller's to skip).

    >>> print(epsilon_warning(1000.0, 22.18070977791825).split(";")[0].replace(", so", ",\\nso"))
    --epsilon 1000 cannot be realized: the table's probabilities are multiples of 2^-32,
    so this calibration stops at realized epsilon 22.18
    """
    if realized > 1.01 * epsilon:
        return (f"{what} {epsilon:g} realizes epsilon {realized:.4g}, more than asked (the paper "
                "calibration above about 1.59 is not epsilon-DP): use the rr calibration (the "
                "default), whose realized epsilon never exceeds the one asked")
    if realized < 0.99 * epsilon and epsilon > 1.0:
        return (f"{what} {epsilon:g} cannot be realized: the table's probabilities are multiples "
                f"of 2^-32, so this calibration stops at realized epsilon {realized:.4g}; at such "
                f"an epsilon a leaked table shows who arrived (a likelihood ratio of "
                f"{math.exp(realized):.2g}): practically no privacy. Use an epsilon below "
                f"{NO_PRIVACY_EPSILON:g} (1 is usual)")
    if realized > NO_PRIVACY_EPSILON:
        return (f"{what} {epsilon:g} gives practically no privacy (a likelihood ratio of "
                f"{math.exp(realized):.2g} between neighbouring streams); 1 is usual")
    return None
