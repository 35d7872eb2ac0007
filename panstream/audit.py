"""Subpoena simulation: measure, from leaked states alone, how much they reveal about one person.

Differential privacy promises that for two *neighbouring* streams (world A without a target item,
world B with it, all other traffic identical) and every event E an intruder can test on a dump,

    P[E | B] <= e^epsilon * P[E | A]   and the same with A and B, or E and not-E, swapped.

This module runs a mechanism many times in each world, takes the dumps an intruder would get (a
snapshot file, a memory read between batches), applies distinguishers (events E) and turns the hit
counts into an empirical epsilon **lower bound**: Clopper-Pearson intervals for P[E | A] and
P[E | B] hold simultaneously with probability at least ``1 - alpha`` (Bonferroni over the
distinguishers), and the smallest ratio they allow is an epsilon the mechanism certainly exceeds.
If that bound is above the claimed epsilon, the claim is false (with confidence ``1 - alpha``).

For panstream's table the best distinguisher is the target's own cell: in A it holds a D0 =
Bernoulli(1/2) draw, in B a D1 = Bernoulli(p) draw, and ``P[bit=0 | A] / P[bit=0 | B] = 1/(2(1-p))
= e^epsilon_state`` exactly under the tight calibration. The bound therefore approaches, but with
probability ``1 - alpha`` stays below, ``epsilon_state``. Pointed at broken designs (a state that
keeps a count, a seed, an exact set, a count-min sketch; or two dumps of one run) the same harness
reports bounds far above the claim: see ``tests/state/test_audit.py``.

Everything here is deterministic except the mechanism's own draws: the neighbouring streams are
fixed, public, and need no random generator.

>>> w = neighbouring_worlds(8, target=3, occurrences=2, background=1, batches=2)
>>> [b.tolist() for b in w.a], [b.tolist() for b in w.b]
([[0, 1, 2, 4], [5, 6, 7]], [[3, 0, 1, 2, 4], [3, 5, 6, 7]])
>>> round(clopper_pearson_upper(0, 100, 0.05), 4), round(clopper_pearson_lower(100, 100, 0.05), 4)
(0.0295, 0.9705)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from panstream.calibration import DEFAULT_CALIBRATION
from panstream.errors import ConfigurationError
from panstream.estimators.density import DensityEstimator
from panstream.release.ledger import PrivacyLedger
from panstream.state.format import DIGEST_SIZE, read_frame
from panstream.universe import Universe

#: A mechanism under audit: given the batches of one world and the batch indices after which the
#: intruder dumps the state, run once from a fresh state and return the dumps.
Runner = Callable[[Sequence[np.ndarray], Sequence[int]], list[Any]]
#: An event an intruder tests on the dumps of one run.
Distinguisher = Callable[[Sequence[Any]], bool]

#: Largest universe ``panstream audit`` accepts: the guarantee is per cell, so small is enough.
MAX_AUDIT_CELLS = 1 << 16


# ---------------------------------------------------------------------- Clopper-Pearson
def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 100_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def beta_cdf(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function ``I_x(a, b)``: the CDF of Beta(a, b) at ``x``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def beta_ppf(q: float, a: float, b: float) -> float:
    """The ``q``-quantile of Beta(a, b), by bisection on :func:`beta_cdf` (to about 1e-16)."""
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if beta_cdf(mid, a, b) < q:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def clopper_pearson_lower(k: int, n: int, alpha: float) -> float:
    """One-sided Clopper-Pearson lower bound on a binomial proportion: ``P[bound > p] <= alpha``."""
    return 0.0 if k <= 0 else beta_ppf(alpha, k, n - k + 1)


def clopper_pearson_upper(k: int, n: int, alpha: float) -> float:
    """One-sided Clopper-Pearson upper bound on a binomial proportion: ``P[bound < p] <= alpha``."""
    return 1.0 if k >= n else beta_ppf(1.0 - alpha, k + 1, n - k)


def _log_ratio(num: float, den: float) -> float:
    if num <= 0.0:
        return -math.inf
    return math.inf if den <= 0.0 else math.log(num / den)


def epsilon_lower_bound(hits_a: int, hits_b: int, trials: int, alpha: float) -> float:
    """Smallest epsilon consistent (at confidence ``1 - alpha``) with the hit counts of one event.

    Two-sided Clopper-Pearson intervals at ``alpha/4`` per tail for ``P[E | A]`` and ``P[E | B]``
    hold together with probability ``>= 1 - alpha``; the bound is the largest of the four
    log-ratios (E and not-E, in both directions) those intervals still allow, or 0.
    """
    t = alpha / 4
    a_lo, a_hi = clopper_pearson_lower(hits_a, trials, t), clopper_pearson_upper(hits_a, trials, t)
    b_lo, b_hi = clopper_pearson_lower(hits_b, trials, t), clopper_pearson_upper(hits_b, trials, t)
    return max(0.0, _log_ratio(b_lo, a_hi), _log_ratio(a_lo, b_hi),
               _log_ratio(1 - b_hi, 1 - a_lo), _log_ratio(1 - a_hi, 1 - b_lo))


def epsilon_point(hits_a: int, hits_b: int, trials: int) -> float:
    """The plug-in estimate of the same four log-ratios (may be infinite; no confidence)."""
    a, b = hits_a / trials, hits_b / trials
    return max(0.0, _log_ratio(b, a), _log_ratio(a, b), _log_ratio(1 - b, 1 - a),
               _log_ratio(1 - a, 1 - b))


# ---------------------------------------------------------------------- neighbouring worlds
@dataclass(frozen=True)
class Worlds:
    """Two neighbouring streams, identical except for the target's arrivals.

    Attributes:
        size: number of cells.
        target: the target's cell.
        occurrences: how often the target arrives in world B (never in A).
        a, b: the batches of world A and world B.
        dumps: batch indices after which the intruder dumps the state.
    """

    size: int
    target: int
    occurrences: int
    a: tuple[np.ndarray, ...]
    b: tuple[np.ndarray, ...]
    dumps: tuple[int, ...]


def neighbouring_worlds(size: int, *, target: int | None = None, occurrences: int = 1,
                        background: int = 2, batches: int = 4, first_batch: int = 0,
                        dumps: Sequence[int] | None = None) -> Worlds:
    """Build worlds A and B over cells ``0..size-1``.

    Other traffic: every cell except the target arrives ``background`` times, in rounds, split into
    ``batches`` batches. World B adds the target ``occurrences`` times, spread evenly over batches
    ``first_batch..batches-1`` and interleaved with the other traffic.

    Args:
        size: cells in the universe (at least 2).
        target: the target cell (default ``size // 2``).
        occurrences: arrivals of the target in world B (at least 1).
        background: arrivals of each other cell (0 for none).
        batches: number of batches (state is only observable between batches).
        first_batch: first batch that may contain the target (for dumps straddling its arrival).
        dumps: batch indices after which to dump (default: after the last batch only).

    Returns:
        The two worlds.

    Raises:
        ValueError: inconsistent arguments.
    """
    target = size // 2 if target is None else target
    dumps = (batches - 1,) if dumps is None else tuple(dumps)
    if size < 2 or not 0 <= target < size or occurrences < 1 or background < 0 or batches < 1:
        msg = "need size >= 2, 0 <= target < size, occurrences >= 1, background >= 0, batches >= 1"
        raise ConfigurationError(msg)
    if not 0 <= first_batch < batches or not dumps or any(not 0 <= d < batches for d in dumps):
        msg = f"first_batch and dumps must be batch indices in 0..{batches - 1}"
        raise ConfigurationError(msg)
    others = np.delete(np.arange(size, dtype=np.int64), target)
    world_a = [np.ascontiguousarray(x) for x in np.array_split(np.tile(others, background), batches)]
    world_b = list(world_a)
    window = batches - first_batch
    for j in range(window):
        k = occurrences // window + (1 if j < occurrences % window else 0)
        if k:
            batch = world_a[first_batch + j]
            at = np.linspace(0, batch.size, k, endpoint=False).astype(np.intp)
            world_b[first_batch + j] = np.insert(batch, at, target)
    return Worlds(size, target, occurrences, tuple(world_a), tuple(world_b), dumps)


# ---------------------------------------------------------------------- the harness
@dataclass(frozen=True)
class Evidence:
    """What one distinguisher achieved.

    Attributes:
        name: the event tested.
        hits_a, hits_b: runs of world A and world B in which the event occurred.
        lower: the epsilon lower bound it certifies (Bonferroni-corrected confidence).
        point: the plug-in estimate (no confidence).
    """

    name: str
    hits_a: int
    hits_b: int
    lower: float
    point: float


@dataclass(frozen=True)
class AuditResult:
    """The outcome of one subpoena simulation.

    Attributes:
        scenario: a short description.
        claimed: the epsilon the mechanism claims against this kind of intrusion.
        empirical: the best certified lower bound over the distinguishers.
        confidence: ``1 - alpha``: probability that ``empirical`` is below the true epsilon.
        trials: runs per world.
        evidence: per distinguisher.
        covered: whether the claim is meant to cover this scenario (two dumps of one epoch are not).
    """

    scenario: str
    claimed: float
    empirical: float
    confidence: float
    trials: int
    evidence: tuple[Evidence, ...]
    covered: bool = True
    best: str = field(default="")

    @property
    def exceeded(self) -> bool:
        """The certified lower bound is above the claim: the claim is false for this scenario."""
        return self.empirical > self.claimed

    @property
    def violation(self) -> bool:
        """A claim the design makes is refuted (``exceeded`` on a covered scenario)."""
        return self.covered and self.exceeded

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable dict (infinite bounds as the string ``"inf"``)."""
        d = asdict(self)
        d.update(exceeded=self.exceeded, violation=self.violation, empirical=_json_num(self.empirical))
        for e in d["evidence"]:
            e.update(lower=_json_num(e["lower"]), point=_json_num(e["point"]))
        return d


def _json_num(x: float) -> float | str:
    return x if math.isfinite(x) else "inf"


def audit(run: Runner, worlds: Worlds, distinguishers: Mapping[str, Distinguisher], *,
          trials: int, claimed: float, alpha: float = 1e-6, scenario: str = "",
          covered: bool = True) -> AuditResult:
    """Run ``run`` ``trials`` times per world and certify an epsilon lower bound.

    Args:
        run: the mechanism (see :data:`Runner`); each call must start from a fresh state.
        worlds: the neighbouring streams.
        distinguishers: named events on the dumps of one run.
        trials: runs per world.
        claimed: the epsilon the mechanism claims.
        alpha: total error probability of the bound (split evenly over the distinguishers).
        scenario: a description for reports.
        covered: whether ``claimed`` is meant to hold in this scenario.

    Returns:
        An :class:`AuditResult`; ``empirical`` is below the true epsilon with probability
        ``>= 1 - alpha``.

    Raises:
        ValueError: no distinguisher, fewer than one trial, or ``alpha`` outside (0, 1).
    """
    if not distinguishers or trials < 1 or not 0 < alpha < 1:
        msg = "audit needs at least one distinguisher, trials >= 1 and 0 < alpha < 1"
        raise ConfigurationError(msg)
    names = list(distinguishers)
    hits = {w: dict.fromkeys(names, 0) for w in ("a", "b")}
    for w, batches in (("a", worlds.a), ("b", worlds.b)):
        for _ in range(trials):
            dumps = run(batches, worlds.dumps)
            for name in names:
                hits[w][name] += bool(distinguishers[name](dumps))
    each = alpha / len(names)
    evidence = tuple(Evidence(n, hits["a"][n], hits["b"][n],
                              epsilon_lower_bound(hits["a"][n], hits["b"][n], trials, each),
                              epsilon_point(hits["a"][n], hits["b"][n], trials)) for n in names)
    best = max(evidence, key=lambda e: e.lower)
    return AuditResult(scenario, claimed, best.lower, 1 - alpha, trials, evidence, covered, best.name)


# ---------------------------------------------------------------------- panstream's estimator
def estimator_runner(universe: Universe | str, epsilon: float = 1.0,
                     calibration: str = DEFAULT_CALIBRATION, *,
                     rotate_after: Sequence[int] = ()) -> Runner:
    """The real estimator as a :data:`Runner`: fresh state per run, dumps are ``snapshot()`` bytes.

    Args:
        universe, epsilon, calibration: as for :class:`DensityEstimator`.
        rotate_after: batch indices after which the operator rotates the epoch (after the dump
            taken at that index, i.e. an announced intrusion).
    """
    u = Universe.parse(universe) if isinstance(universe, str) else universe

    def run(batches: Sequence[np.ndarray], dumps: Sequence[int]) -> list[Any]:
        # The ledger's epoch is a random label, independent of the stream by construction; it is
        # fixed here so that the test "non-table bytes differ from world A" compares exactly.
        est = DensityEstimator(u, epsilon, calibration, _ledger=PrivacyLedger(epoch="audit"))
        out: list[Any] = []
        for i, batch in enumerate(batches):
            est.update(batch.copy())  # update() wipes the array it is handed
            if i in dumps:
                out.append(est.snapshot())
            if i in rotate_after:
                est.rotate()
                est.ledger.epoch = "audit"  # the new epoch's random label, fixed as above
        return out

    return run


def cell_bit(dump: bytes, cell: int) -> int:
    """The bit of ``cell`` in a snapshot, read at the offset ``docs/snapshot-format.md`` gives."""
    frame = read_frame(dump)
    return (dump[frame.head_size + cell // 8] >> (cell % 8)) & 1


def non_table_bytes(dump: bytes) -> bytes:
    """Every byte of a snapshot except the table and its checksum (which is a function of them)."""
    frame = read_frame(dump)
    return dump[: frame.head_size] + dump[frame.head_size + frame.payload_size + DIGEST_SIZE :]


def snapshot_distinguishers(target: int, dumps: int, reference: Sequence[bytes]
                            ) -> dict[str, Distinguisher]:
    """The intruder's tests on snapshot dumps.

    * ``target bit of dump k is 1``: the optimal test against one dump.
    * ``target bit changed between dumps k and k+1``: the optimal test against two dumps.
    * ``non-table bytes differ from world A``: catches anything stored besides the table
      (``reference`` is the dumps of one world-A run).
    """
    def bit_is_one(k: int) -> Distinguisher:
        return lambda d: cell_bit(d[k], target) == 1

    def bit_changed(k: int) -> Distinguisher:
        return lambda d: cell_bit(d[k], target) != cell_bit(d[k + 1], target)

    refs = [non_table_bytes(r) for r in reference]

    def other_bytes_differ(d: Sequence[Any]) -> bool:
        return any(non_table_bytes(x) != r for x, r in zip(d, refs, strict=True))

    tests = {f"target bit of dump {k + 1} is 1": bit_is_one(k) for k in range(dumps)}
    for k in range(dumps - 1):
        tests[f"target bit changed between dumps {k + 1} and {k + 2}"] = bit_changed(k)
    tests["non-table bytes differ from world A"] = other_bytes_differ
    return tests


@dataclass(frozen=True)
class Scenario:
    """One intrusion pattern of the standard audit.

    Attributes:
        name: description.
        occurrences: arrivals of the target in world B.
        dumps: batch indices after which the state is dumped.
        first_batch: first batch the target may arrive in.
        rotate_after: batch indices after which the epoch is rotated.
        covered: whether the single-intrusion guarantee is meant to hold.
    """

    name: str
    occurrences: int
    dumps: tuple[int, ...] = (3,)
    first_batch: int = 0
    rotate_after: tuple[int, ...] = ()
    covered: bool = True


def standard_scenarios(many: int = 16) -> tuple[Scenario, ...]:
    """The scenarios ``panstream audit`` runs (4 batches each).

    1. one dump, target arrives once; 2. one dump, target arrives ``many`` times, interleaved;
    3. two dumps straddling the target's arrival, rotation after the first (covered: the second
       epoch is independent of the dumped one); 4. the same without rotation: *not* covered, shown
       to document what two intrusions of one epoch reveal.
    """
    return (
        Scenario("one dump, target arrives once", 1),
        Scenario(f"one dump, target arrives {many} times", many),
        Scenario("two dumps around the target's arrivals, rotation after the first", many,
                 dumps=(0, 3), first_batch=1, rotate_after=(0,)),
        Scenario("two dumps around the target's arrivals, same epoch (not covered)", many,
                 dumps=(0, 3), first_batch=1, covered=False),
    )


def audit_estimator(universe: Universe | str = "range:64", epsilon: float = 1.0,
                    calibration: str = DEFAULT_CALIBRATION, *, trials: int = 10_000,
                    alpha: float = 1e-6, scenarios: Sequence[Scenario] | None = None,
                    background: int = 2) -> list[AuditResult]:
    """Subpoena-simulate panstream's estimator; the claim audited is its realized ``epsilon_state``.

    Args:
        universe: a small public universe (the guarantee is per cell; at most 2**16 cells here).
        epsilon, calibration: estimator parameters.
        trials: runs per world per scenario.
        alpha: error probability of each scenario's bound.
        scenarios: default :func:`standard_scenarios`.
        background: arrivals of each non-target cell.

    Returns:
        One :class:`AuditResult` per scenario.

    Raises:
        ConfigurationError: universe too large, or invalid estimator parameters.

    Example:
        >>> r = audit_estimator("range:16", trials=300, scenarios=standard_scenarios()[:1])[0]
        >>> r.empirical < r.claimed
        True
    """
    u = Universe.parse(universe) if isinstance(universe, str) else universe
    if u.size > MAX_AUDIT_CELLS:
        msg = (f"audit runs the estimator many times; {u.spec} has {u.size} cells, at most "
               f"{MAX_AUDIT_CELLS} are allowed: use a small universe such as range:64 (the "
               "guarantee is per cell, so the table size does not change it)")
        raise ConfigurationError(msg)
    if u.size < 2:
        raise ConfigurationError("audit needs a universe of at least 2 cells")
    claimed = DensityEstimator(u, epsilon, calibration).epsilon_state
    results = []
    for sc in scenarios if scenarios is not None else standard_scenarios():
        worlds = neighbouring_worlds(u.size, occurrences=sc.occurrences, background=background,
                                     batches=4, first_batch=sc.first_batch, dumps=sc.dumps)
        run = estimator_runner(u, epsilon, calibration, rotate_after=sc.rotate_after)
        tests = snapshot_distinguishers(worlds.target, len(sc.dumps), run(worlds.a, worlds.dumps))
        results.append(audit(run, worlds, tests, trials=trials, claimed=claimed, alpha=alpha,
                             scenario=sc.name, covered=sc.covered))
    return results
