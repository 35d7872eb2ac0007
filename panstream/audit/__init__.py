"""Subpoena simulation: measure, from leaked states alone, how much they reveal about one person.

Differential privacy promises that for two *neighbouring* streams (world A without a target item,
world B with it, all other traffic identical) and every event E an intruder can test on a dump,

    P[E | B] <= e^epsilon * P[E | A]   and the same with A and B, or E and not-E, swapped.

This package runs a mechanism many times in each world, takes the dumps an intruder would get (a
snapshot file, a memory read between batches), applies distinguishers (events E) and turns the hit
counts into an empirical epsilon **lower bound**: Clopper-Pearson intervals for P[E | A] and
P[E | B] hold simultaneously with probability at least ``1 - alpha`` (Bonferroni over the
distinguishers), and the smallest ratio they allow is an epsilon the mechanism certainly exceeds.
If that bound is above the claimed epsilon, the claim is false (with confidence ``1 - alpha``).

For panstream's table the best distinguisher is the target's own cell: in A it holds a D0 =
Bernoulli(q) draw, in B a D1 = Bernoulli(p) draw, and the larger of ``P[bit=1 | B] / P[bit=1 | A] =
p/q`` and ``P[bit=0 | A] / P[bit=0 | B] = (1-q)/(1-p)`` is ``e^epsilon_state`` exactly (for the
default randomized-response calibration both are). The bound therefore approaches, but with
probability ``1 - alpha`` stays below, ``epsilon_state``.

A broken design need not leak through that cell, though (a biased D0 elsewhere, a second cell
redrawn per arrival, bytes beside the table). Without hand-written distinguishers :func:`audit`
therefore *learns* its event, in the spirit of DP-Sniper (Bichsel, Steffen, Bogunovic, Vechev 2021):
on a training split of the runs it turns each run's dumps into features (every bit of a snapshot,
every element of an array, what changed between consecutive dumps, and the XOR of pairs of bits),
selects the features whose law differs between the worlds, scores a run by the sum of their
log-likelihood ratios and fixes the threshold that promises the largest bound. Only then are the
test runs made; the event's hits among them alone are certified. The event is a function of data
independent of the test runs, so the Clopper-Pearson bound is exactly as valid as for a fixed
event. Pointed at broken designs the harness reports bounds above the claim: see
``tests/state/test_audit.py``, ``tests/state/test_audit_learned.py`` and
``tests/state/test_audit_heavy_and_joint.py``, and the power table in ``docs/threat-model.md``.

What the bounds speak about is state dumps only (:data:`COVERS`); telemetry, file times, releases
and the rest of :data:`NOT_COVERED` need arguments and tests of their own.

Everything here is deterministic except the mechanism's own draws: the neighbouring streams are
fixed and public, and no random generator is seeded or kept.

The package's parts, each readable in one sitting:

* :mod:`~panstream.audit.bounds`: hit counts to a Clopper-Pearson epsilon lower bound;
* :mod:`~panstream.audit.scenarios`: the neighbouring worlds and the standard intrusion patterns;
* :mod:`~panstream.audit.features`, :mod:`~panstream.audit.joint` and
  :mod:`~panstream.audit.learned`: the learned distinguisher (bits, pairs of bits, the event);
* :mod:`~panstream.audit.classic`: panstream's estimator as a runner, and the fixed tests;
* :mod:`~panstream.audit.harness`: :func:`audit`, the harness for any mechanism;
* :mod:`~panstream.audit.sketch`: the Sketch-Flip-Merge family as a runner (a person is an item,
  its hash names one grid bit: :class:`SketchItems`), and its fixed tests;
* :mod:`~panstream.audit.report`: :func:`audit_design` and :func:`audit_estimator`, the standard
  audit ``panstream audit`` runs (:func:`audit_sketch` for the sketch), and what it covers
  (:data:`COVERS`, :data:`NOT_COVERED`).

A new family hooks in with :func:`audit_design`: a runner per scenario, its claim, optionally its
fixed tests and a :data:`TargetBits` function saying where a target's bits sit in its dumps.

>>> w = neighbouring_worlds(8, target=3, occurrences=2, background=1, batches=2)
>>> [b.tolist() for b in w.a], [b.tolist() for b in w.b]
([[0, 1, 2, 4], [5, 6, 7]], [[3, 0, 1, 2, 4], [3, 5, 6, 7]])
>>> round(clopper_pearson_upper(0, 100, 0.05), 4), round(clopper_pearson_lower(100, 100, 0.05), 4)
(0.0295, 0.9705)
"""

from __future__ import annotations

from panstream.audit.bounds import (
    beta_cdf,
    beta_ppf,
    clopper_pearson_lower,
    clopper_pearson_upper,
    epsilon_lower_bound,
    epsilon_point,
)
from panstream.audit.classic import (
    cell_bit,
    counter_distinguishers,
    estimator_runner,
    non_table_bytes,
    other_bytes_differ,
    per_run,
    snapshot_distinguishers,
    snapshot_target_bits,
)
from panstream.audit.harness import AuditResult, Evidence, audit
from panstream.audit.joint import MAX_PAIR_CANDIDATES, TargetBits
from panstream.audit.learned import (
    DEFAULT_TRAIN_FRACTION,
    MAX_LEARNED_FEATURES,
    SELECTION_LEVEL,
    SMOOTHING,
    LearnedEvent,
)
from panstream.audit.report import (
    COVERS,
    DISTINGUISHERS,
    MAX_AUDIT_CELLS,
    NOT_COVERED,
    ClassicFactory,
    RunnerFactory,
    audit_design,
    audit_estimator,
    audit_sketch,
)
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

__all__ = [
    "AUDIT_GRID",
    "SketchFactory",
    "SketchItems",
    "audit_sketch",
    "real_sketch",
    "sketch_distinguishers",
    "sketch_runner",
    "COVERS",
    "MAX_PAIR_CANDIDATES",
    "NOT_COVERED",
    "ClassicFactory",
    "RunnerFactory",
    "TargetBits",
    "audit_design",
    "DEFAULT_TRAIN_FRACTION",
    "DISTINGUISHERS",
    "MAX_AUDIT_CELLS",
    "MAX_LEARNED_FEATURES",
    "SELECTION_LEVEL",
    "SMOOTHING",
    "AuditResult",
    "Distinguisher",
    "Evidence",
    "LearnedEvent",
    "Runner",
    "Scenario",
    "Worlds",
    "audit",
    "audit_estimator",
    "beta_cdf",
    "beta_ppf",
    "cell_bit",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "counter_distinguishers",
    "epsilon_lower_bound",
    "epsilon_point",
    "estimator_runner",
    "neighbouring_worlds",
    "non_table_bytes",
    "other_bytes_differ",
    "per_run",
    "snapshot_distinguishers",
    "snapshot_target_bits",
    "standard_scenarios",
]
