"""The standard audit ``panstream audit`` runs: panstream's estimator in every standard scenario."""

from __future__ import annotations

from collections.abc import Sequence

from panstream import estimators
from panstream.audit.classic import counter_distinguishers, estimator_runner, snapshot_distinguishers
from panstream.audit.harness import AuditResult, audit
from panstream.audit.learned import DEFAULT_TRAIN_FRACTION
from panstream.audit.scenarios import Scenario, neighbouring_worlds, standard_scenarios
from panstream.calibration import DEFAULT_CALIBRATION, DEFAULT_MODULUS
from panstream.errors import ConfigurationError
from panstream.universe import Universe

#: Largest universe ``panstream audit`` accepts: the guarantee is per cell, so small is enough.
MAX_AUDIT_CELLS = 1 << 16

#: What ``audit_estimator`` (and ``panstream audit --distinguisher``) tests the dumps with.
DISTINGUISHERS = ("learned", "classic", "both")


def audit_estimator(universe: Universe | str = "range:64", epsilon: float = 1.0,
                    calibration: str = DEFAULT_CALIBRATION, *, trials: int = 10_000,
                    alpha: float = 1e-6, scenarios: Sequence[Scenario] | None = None,
                    background: int = 2, distinguisher: str = "learned",
                    train_fraction: float = DEFAULT_TRAIN_FRACTION, estimator: str = "density",
                    modulus: int = DEFAULT_MODULUS) -> list[AuditResult]:
    """Subpoena-simulate panstream's estimator; the claim audited is its realized ``epsilon_state``.

    Args:
        universe: a small public universe (the guarantee is per cell; at most 2**16 cells here).
        epsilon, calibration: estimator parameters.
        estimator, modulus: the family audited (``"frequency"``: counters modulo ``modulus``;
            its classic tests are :func:`counter_distinguishers`).
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
        ConfigurationError: universe too large, or invalid estimator or audit parameters.

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
    if distinguisher not in DISTINGUISHERS:
        msg = f"distinguisher must be one of {', '.join(DISTINGUISHERS)}, got {distinguisher!r}"
        raise ConfigurationError(msg)
    claimed = estimators.state_epsilon(estimator, epsilon, calibration=calibration,
                                       modulus=modulus)
    results = []
    for sc in scenarios if scenarios is not None else standard_scenarios():
        worlds = neighbouring_worlds(u.size, occurrences=sc.occurrences, background=background,
                                     batches=4, first_batch=sc.first_batch, dumps=sc.dumps)
        run = estimator_runner(u, epsilon, calibration, rotate_after=sc.rotate_after,
                               estimator=estimator, modulus=modulus)
        tests = None
        if distinguisher != "learned":
            reference = run(worlds.a, worlds.dumps)
            tests = (counter_distinguishers(worlds.target, len(sc.dumps), reference, modulus)
                     if estimator == "frequency" else
                     snapshot_distinguishers(worlds.target, len(sc.dumps), reference))
        results.append(audit(run, worlds, tests, trials=trials, claimed=claimed, alpha=alpha,
                             scenario=sc.name, covered=sc.covered,
                             learn=distinguisher != "classic", train_fraction=train_fraction))
    return results
