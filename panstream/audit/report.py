"""The standard audit ``panstream audit`` runs: a design in every standard scenario, and what it covers.

:func:`audit_design` runs any design (a runner per scenario) through :func:`standard_scenarios`;
:func:`audit_estimator` is that for panstream's own families. :data:`COVERS` and
:data:`NOT_COVERED` are the plain statement of what the bounds speak about, printed with them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from panstream import estimators
from panstream.audit.classic import (
    counter_distinguishers,
    estimator_runner,
    snapshot_distinguishers,
    snapshot_target_bits,
)
from panstream.audit.harness import AuditResult, audit
from panstream.audit.joint import TargetBits
from panstream.audit.learned import DEFAULT_TRAIN_FRACTION
from panstream.audit.scenarios import (
    Distinguisher,
    Runner,
    Scenario,
    Worlds,
    neighbouring_worlds,
    standard_scenarios,
)
from panstream.audit.sketch import (
    AUDIT_GRID,
    SketchFactory,
    SketchItems,
    real_sketch,
    sketch_distinguishers,
    sketch_runner,
)
from panstream.calibration import DEFAULT_CALIBRATION, DEFAULT_MODULUS
from panstream.errors import ConfigurationError
from panstream.estimators.sketch.sfm import SketchGrid
from panstream.universe import Universe

#: Largest universe ``panstream audit`` accepts: the guarantee is per cell, so small is enough.
MAX_AUDIT_CELLS = 1 << 16

#: What ``audit_estimator`` (and ``panstream audit --distinguisher``) tests the dumps with.
DISTINGUISHERS = ("learned", "classic", "both")

#: What the audit's bounds speak about, stated in its report (text and ``--json``) and in
#: ``docs/threat-model.md``.
COVERS = (
    "state dumps: every byte of a snapshot (table, head, ledger, checksum) after a batch, one dump "
    "or two per run, each bit alone, the change of each bit between two dumps, and the XOR of pairs "
    "of bits",
    "a target seen once, many times across batches, and many times within one batch",
)
#: What the audit does not measure: each needs its own argument or test (docs/threat-model.md).
NOT_COVERED = (
    "telemetry: metrics, progress lines, logs and summaries",
    "file times and the timing and shape of writes (stat() of a state file)",
    "releases (their noise is charged to the ledger, docs/release.md)",
    "leaks that only a computation reveals (a stored seed replayed) or that need three or more "
    "bits together",
    "memory between the dumps of a scenario (one dump per batch boundary is what is taken)",
)

#: Builds a scenario's mechanism (for example with its rotation) as a :data:`Runner`.
RunnerFactory = Callable[[Scenario], Runner]
#: Builds a scenario's fixed tests from its worlds and the dumps of one world-A run.
ClassicFactory = Callable[[Worlds, Sequence[Any]], Mapping[str, Distinguisher]]


def audit_design(make_runner: RunnerFactory, cells: int, claimed: float, *,
                 scenarios: Sequence[Scenario] | None = None, trials: int = 10_000,
                 alpha: float = 1e-6, background: int = 2, distinguisher: str = "learned",
                 classic: ClassicFactory | None = None,
                 train_fraction: float = DEFAULT_TRAIN_FRACTION,
                 target_bits: TargetBits | None = None) -> list[AuditResult]:
    """The standard audit of any design: every scenario (default :func:`standard_scenarios`) over
    ``cells`` cells, against one claim.

    This is what :func:`audit_estimator` runs for panstream's families; a new family (or a broken
    design in the tests) passes its own ``make_runner``, its fixed tests (``classic``, needed
    unless ``distinguisher`` is ``"learned"``) and, if its target's bits are not at the target's
    cell of a table, ``target_bits`` (:data:`~panstream.audit.joint.TargetBits`).

    Args:
        make_runner: the mechanism of one scenario (its ``rotate_after`` is the runner's business).
        cells: the universe size; the target is cell ``cells // 2``.
        claimed: the epsilon the design claims against one dump.
        scenarios, trials, alpha, background, distinguisher, train_fraction: as for
            :func:`audit_estimator`; ``alpha`` is per scenario.

    Returns:
        One :class:`AuditResult` per scenario.

    Raises:
        ConfigurationError: invalid parameters, or fixed tests asked for without ``classic``.
    """
    if distinguisher not in DISTINGUISHERS:
        msg = f"distinguisher must be one of {', '.join(DISTINGUISHERS)}, got {distinguisher!r}"
        raise ConfigurationError(msg)
    if distinguisher != "learned" and classic is None:
        raise ConfigurationError(f"distinguisher {distinguisher!r} needs the design's fixed tests")
    results = []
    for sc in scenarios if scenarios is not None else standard_scenarios():
        worlds = neighbouring_worlds(cells, occurrences=sc.occurrences, background=background,
                                     batches=4, first_batch=sc.first_batch, dumps=sc.dumps)
        run = make_runner(sc)
        tests = None
        if distinguisher != "learned" and classic is not None:
            tests = classic(worlds, run(worlds.a, worlds.dumps))
        results.append(audit(run, worlds, tests, trials=trials, claimed=claimed, alpha=alpha,
                             scenario=sc.name, covered=sc.covered,
                             learn=distinguisher != "classic", train_fraction=train_fraction,
                             target_bits=target_bits))
    return results


def audit_estimator(universe: Universe | str | None = None, epsilon: float = 1.0,
                    calibration: str = DEFAULT_CALIBRATION, *, trials: int = 10_000,
                    alpha: float = 1e-6, scenarios: Sequence[Scenario] | None = None,
                    background: int = 2, distinguisher: str = "learned",
                    train_fraction: float = DEFAULT_TRAIN_FRACTION, estimator: str = "density",
                    modulus: int = DEFAULT_MODULUS) -> list[AuditResult]:
    """Subpoena-simulate panstream's estimator; the claim audited is its realized ``epsilon_state``.

    Args:
        universe: a small public universe (the guarantee is per cell; at most 2**16 cells here;
            default ``range:64``), or for the sketch a small grid (default
            :data:`~panstream.audit.sketch.AUDIT_GRID`, ``sketch:64x8:id``): world index ``i`` is
            then an item whose hash lands on grid bit ``i`` (:mod:`panstream.audit.sketch`).
        epsilon, calibration: estimator parameters.
        estimator, modulus: the family audited (``"frequency"``: counters modulo ``modulus``;
            its classic tests are :func:`counter_distinguishers`; ``"sketch"``: a Sketch-Flip-Merge
            grid, its classic tests :func:`~panstream.audit.sketch.sketch_distinguishers`).
        trials: runs per world per scenario.
        alpha: error probability of each scenario's bound.
        scenarios: default :func:`standard_scenarios`.
        background: arrivals of each non-target cell.
        distinguisher: ``"learned"`` (default: learned on a training split of the runs, see
            :func:`audit`), ``"classic"`` (the fixed tests of :func:`snapshot_distinguishers` on all
            runs) or ``"both"`` (alpha split in half between them).
        train_fraction: share of the runs the learned distinguisher learns from.

    Returns:
        One :class:`AuditResult` per scenario.

    Raises:
        ConfigurationError: universe too large (or a grid with a bit no small item hashes to), a
            sketch audited over a universe that is not a grid, or invalid estimator or audit
            parameters.

    Example:
        >>> r = audit_estimator("range:16", trials=300, scenarios=standard_scenarios()[:1])[0]
        >>> r.empirical < r.claimed
        True
    """
    if estimator == "sketch":
        return audit_sketch(universe, epsilon, trials=trials, alpha=alpha, scenarios=scenarios,
                             background=background, distinguisher=distinguisher,
                             train_fraction=train_fraction)
    if universe is None:
        universe = "range:64"
    u = Universe.parse(universe) if isinstance(universe, str) else universe
    _check_size(u)
    claimed = estimators.state_epsilon(estimator, epsilon, calibration=calibration,
                                       modulus=modulus)

    def make_runner(sc: Scenario) -> Runner:
        return estimator_runner(u, epsilon, calibration, rotate_after=sc.rotate_after,
                                estimator=estimator, modulus=modulus)

    def classic(worlds: Worlds, reference: Sequence[Any]) -> Mapping[str, Distinguisher]:
        dumps = len(worlds.dumps)
        if estimator == "frequency":
            return counter_distinguishers(worlds.target, dumps, reference, modulus)
        return snapshot_distinguishers(worlds.target, dumps, reference)

    return audit_design(make_runner, u.size, claimed, scenarios=scenarios, trials=trials,
                        alpha=alpha, background=background, distinguisher=distinguisher,
                        classic=classic, train_fraction=train_fraction,
                        target_bits=snapshot_target_bits)


def _check_size(u: Universe, small: str = "range:64") -> None:
    if u.size > MAX_AUDIT_CELLS:
        msg = (f"audit runs the estimator many times; {u.spec} has {u.size} cells, at most "
               f"{MAX_AUDIT_CELLS} are allowed: use a small universe such as {small} (the "
               "guarantee is per cell, so the table size does not change it)")
        raise ConfigurationError(msg)
    if u.size < 2:
        raise ConfigurationError("audit needs a universe of at least 2 cells")


def audit_sketch(universe: Universe | str | None = None, epsilon: float = 1.0, *,
                 trials: int = 10_000, alpha: float = 1e-6,
                 scenarios: Sequence[Scenario] | None = None, background: int = 2,
                 distinguisher: str = "learned", train_fraction: float = DEFAULT_TRAIN_FRACTION,
                 make: SketchFactory = real_sketch) -> list[AuditResult]:
    """:func:`audit_estimator` for the sketch, over a small grid (default
    :data:`~panstream.audit.sketch.AUDIT_GRID`); ``make`` builds the sketch of one run (tests pass
    broken ones).

    World index ``i`` is an item hashing to grid bit ``i``
    (:class:`~panstream.audit.sketch.SketchItems`), the claim is the realized ``epsilon_state`` of
    randomized response's exact dyadic q, and the target's bits are its item's hashed bit
    (:meth:`~panstream.audit.sketch.SketchItems.target_bits`).

    Raises:
        ConfigurationError: not a grid, a grid too large for an audit, or invalid parameters.
    """
    if universe is None:
        universe = AUDIT_GRID
    if isinstance(universe, str):
        if not universe.strip().lower().startswith("sketch:"):
            msg = (f"the sketch is audited over a grid such as {AUDIT_GRID}, not the universe "
                   f"{universe!r}")
            raise ConfigurationError(msg)
        universe = SketchGrid.parse_spec(universe.strip().lower())
    if not isinstance(universe, SketchGrid):
        msg = (f"the sketch is audited over a grid such as {AUDIT_GRID}, not the universe "
               f"{universe.spec!r}")
        raise ConfigurationError(msg)
    _check_size(universe, AUDIT_GRID)
    items = SketchItems.find(universe)
    claimed = estimators.state_epsilon("sketch", epsilon)

    def make_runner(sc: Scenario) -> Runner:
        return sketch_runner(items, epsilon, rotate_after=sc.rotate_after, make=make)

    def classic(worlds: Worlds, reference: Sequence[Any]) -> Mapping[str, Distinguisher]:
        return sketch_distinguishers(items, worlds.target, len(worlds.dumps), reference)

    return audit_design(make_runner, universe.size, claimed, scenarios=scenarios, trials=trials,
                        alpha=alpha, background=background, distinguisher=distinguisher,
                        classic=classic, train_fraction=train_fraction,
                        target_bits=items.target_bits)
