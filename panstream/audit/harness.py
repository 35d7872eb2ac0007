"""The harness: run a mechanism in both worlds, count each distinguisher's hits, certify a bound.

:func:`audit` is the entry point for any mechanism (a :data:`~panstream.audit.scenarios.Runner`);
:class:`AuditResult` and :class:`Evidence` are what it reports.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from panstream.audit.bounds import epsilon_lower_bound, epsilon_point
from panstream.audit.features import _BLOCK_BYTES, _Layout
from panstream.audit.joint import TargetBits
from panstream.audit.learned import DEFAULT_TRAIN_FRACTION, LearnedEvent, _learn
from panstream.audit.scenarios import Distinguisher, Runner, Worlds
from panstream.errors import ConfigurationError


@dataclass(frozen=True)
class Evidence:
    """What one distinguisher achieved.

    Attributes:
        name: the event tested.
        hits_a, hits_b: runs of world A and world B in which the event occurred.
        lower: the epsilon lower bound it certifies (Bonferroni-corrected confidence).
        point: the plug-in estimate (no confidence).
        runs: runs per world the hits are counted on: all ``trials`` for a fixed event, the test
            split for the learned one.
    """

    name: str
    hits_a: int
    hits_b: int
    lower: float
    point: float
    runs: int = 0


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
        best: the name of the evidence with the largest bound.
        learned: what the learned distinguisher chose on its training split (``None`` if unused).
    """

    scenario: str
    claimed: float
    empirical: float
    confidence: float
    trials: int
    evidence: tuple[Evidence, ...]
    covered: bool = True
    best: str = field(default="")
    learned: LearnedEvent | None = None

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
        if d["learned"] is not None:
            d["learned"].update(threshold=_json_num(d["learned"]["threshold"]),
                                train_lower=_json_num(d["learned"]["train_lower"]),
                                train_point=_json_num(d["learned"]["train_point"]))
        return d


def _json_num(x: float) -> float | str:
    return x if math.isfinite(x) else "inf"


def audit(run: Runner, worlds: Worlds, distinguishers: Mapping[str, Distinguisher] | None = None, *,
          trials: int, claimed: float, alpha: float = 1e-6, scenario: str = "",
          covered: bool = True, learn: bool | None = None,
          train_fraction: float = DEFAULT_TRAIN_FRACTION,
          encode: Callable[[Any], Any] | None = None, pairs: bool = True,
          target_bits: TargetBits | None = None) -> AuditResult:
    """Run ``run`` ``trials`` times per world and certify an epsilon lower bound.

    Without ``distinguishers`` the audit *learns* its event (DP-Sniper style): the first
    ``train_fraction`` of each world's runs are turned into feature vectors (every bit of a snapshot,
    every element of an array, what changed between consecutive dumps, and the XOR of pairs of bits:
    :mod:`panstream.audit.joint`), the features that tell the worlds apart are selected and
    weighted by their log-likelihood ratios, and the threshold on the summed score that promises the
    largest bound is chosen. Only then are the remaining runs made, and the event's hits among them
    alone give the Clopper-Pearson bound. The event is a fixed function of data independent of the
    test runs, so the bound is exactly as valid as for a hand-written event: whichever cell or byte
    leaks, nobody has to name it.

    Args:
        run: the mechanism (see :data:`Runner`); each call must start from a fresh state, so runs are
            independent and identically distributed.
        worlds: the neighbouring streams.
        distinguishers: named fixed events on the dumps of one run, counted on all runs.
        trials: runs per world.
        claimed: the epsilon the mechanism claims.
        alpha: total error probability of the bound. Split evenly over the events; with both learned
            and fixed events, half goes to the learned one and half is split over the fixed ones.
        scenario: a description for reports.
        covered: whether ``claimed`` is meant to hold in this scenario.
        learn: use the learned distinguisher (default: exactly when ``distinguishers`` is empty).
        train_fraction: share of each world's runs the learned distinguisher learns from.
        encode: for the learned distinguisher, turns one dump into a NumPy array or ``bytes`` (for
            dumps of another type, say a set); dumps must be arrays of one shape, or bytes, otherwise.
        pairs: let the learned distinguisher test the XOR of pairs of bits too (joint features).
        target_bits: where the target's bits are in a dump (:data:`~panstream.audit.joint.TargetBits`),
            to choose the pairs when a dump has too many bits for all of them (default: the target's
            cell modulo ``worlds.size`` in every part of the dump).

    Returns:
        An :class:`AuditResult`; ``empirical`` is below the true epsilon with probability
        ``>= 1 - alpha``.

    Raises:
        ConfigurationError: no event to test, fewer than one trial (or fewer than 2 with learning),
            ``alpha`` or ``train_fraction`` outside (0, 1), or dumps the learned distinguisher cannot
            read.

    Example:
        >>> from panstream.audit import neighbouring_worlds
        >>> w = neighbouring_worlds(16, background=0)
        >>> def leaky(batches, dumps):  # keeps the exact set of cells seen, as a bit table
        ...     bits = np.zeros(16, np.uint8)
        ...     bits[np.concatenate(batches)] = 1
        ...     return [bits]
        >>> r = audit(leaky, w, trials=200, claimed=1.0)
        >>> r.best, r.exceeded
        ('learned: dump 1 cell 8', True)
    """
    fixed = dict(distinguishers) if distinguishers else {}
    learning = not fixed if learn is None else learn
    if not (fixed or learning) or trials < 1 or not 0 < alpha < 1 or not 0 < train_fraction < 1:
        msg = ("audit needs at least one distinguisher (or learn=True), trials >= 1, 0 < alpha < 1 "
               "and 0 < train_fraction < 1")
        raise ConfigurationError(msg)
    n_train = min(max(round(trials * train_fraction), 1), trials - 1) if learning else 0
    if learning and trials < 2:
        raise ConfigurationError("the learned distinguisher needs trials >= 2 (training and test runs)")
    alpha_learned = (alpha / 2 if fixed else alpha) if learning else 0.0
    alpha_fixed = (alpha - alpha_learned) / len(fixed) if fixed else 0.0
    names = list(fixed)
    hits = {w: dict.fromkeys(names, 0) for w in ("a", "b")}
    batches = {"a": worlds.a, "b": worlds.b}

    def once(w: str) -> list[Any]:
        dumps = run(batches[w], worlds.dumps)
        for name in names:
            hits[w][name] += bool(fixed[name](dumps))
        if not learning:
            return []
        return [_keep(encode(d) if encode is not None else d) for d in dumps]

    learned: LearnedEvent | None = None
    test_hits = {"a": 0, "b": 0}
    if learning:
        # Training runs first; the event is fixed before a single test run exists.
        train = {w: [once(w) for _ in range(n_train)] for w in ("a", "b")}
        layout = _Layout(train["a"] + train["b"])
        event, learned = _learn(layout, train["a"], train["b"], trials - n_train, alpha_learned,
                                pairs=pairs, target=worlds.target, cells=worlds.size,
                                target_bits=target_bits)
        del train
        chunk = max(64, min(4096, _BLOCK_BYTES // max(1, layout.n_features)))
        for w in ("a", "b"):
            todo = trials - n_train
            while todo:
                runs = [once(w) for _ in range(min(chunk, todo))]
                todo -= len(runs)
                test_hits[w] += event.hits(layout, runs)
    else:
        for w in ("a", "b"):
            for _ in range(trials):
                once(w)
    evidence = [Evidence(n, hits["a"][n], hits["b"][n],
                         epsilon_lower_bound(hits["a"][n], hits["b"][n], trials, alpha_fixed),
                         epsilon_point(hits["a"][n], hits["b"][n], trials), trials) for n in names]
    if learned is not None:
        n_test = learned.test_runs
        evidence.append(Evidence(learned.describe(), test_hits["a"], test_hits["b"],
                                 epsilon_lower_bound(test_hits["a"], test_hits["b"], n_test,
                                                     alpha_learned),
                                 epsilon_point(test_hits["a"], test_hits["b"], n_test), n_test))
    best = max(evidence, key=lambda e: e.lower)
    return AuditResult(scenario, claimed, best.lower, 1 - alpha, trials, tuple(evidence), covered,
                       best.name, learned)


def _keep(dump: Any) -> Any:
    """A private copy of a dump the learned distinguisher stores (runners may reuse buffers)."""
    if isinstance(dump, (bytearray, memoryview)):
        return bytes(dump)
    if isinstance(dump, np.ndarray):
        return dump.copy()
    return dump
