"""Operational telemetry: by default nothing that counts arrivals; counts only as an opt-in.

An operator needs to see that a consumer is alive and keeping up. A count of lines or items is the
obvious figure, and the wrong one for a pan-private system: the guarantee users read is *per
person* (one cell of the universe appears or not, however often), while a count moves with every
arrival. Geometric noise at an event-level epsilon_t per arrival (panstream 0.2's default) covers one
arrival, not one person: a client making 10 requests a second for two minutes (1,200 arrivals) is
covered at 1,200 x epsilon_t = 120 by those counts, and was told apart from its absence 266 times in
267 (issue 21 §1). So, by default (:meth:`TelemetryPolicy.none`):

* **nothing counts arrivals**: no line, item, malformed or outside count is kept past the chunk
  being parsed, printed, logged or served; summaries say ``telemetry: nothing counted``;
* operators see liveness and progress from figures that arrivals cannot move or that the input
  already shows to anyone who can read it: uptime and checkpoints made on the clock's fixed
  schedule (:mod:`panstream.schedule`), a file's read position in bytes (its offset), and for Kafka
  the consumer lag and committed offsets the broker serves to any client of the group;
* every printed total is therefore the deployment's: ``epsilon_state + spent + 0`` per person.

Two explicit opt-ins remain, each announced at startup with what it costs a person with ``k``
arrivals (:meth:`TelemetryPolicy.cost`):

* :meth:`TelemetryPolicy.noisy` (``--telemetry-epsilon E``): per-window counts with two-sided
  geometric noise. A :class:`CountWindow` accumulates one short window's exact counts and nothing
  else; when it closes, each count is released once with the exact two-sided geometric mechanism
  (:class:`panstream.release.noise.NoiseLaw`, OS CSPRNG, integer arithmetic) at ``a = exp(-E /
  sensitivity)`` and the exact counts are zeroed. One arrival changes one window's count vector by
  at most :attr:`TelemetryPolicy.sensitivity` in L1 (1 for ``ingest``: a line is exactly one of
  accepted/empty/malformed/outside; 2 for Kafka: a message and its item's class), so the counts are
  E-DP per *arrival* and ``k x E`` for a person with ``k`` arrivals (group privacy): no per-person
  bound exists, and the printed totals say so.
* :meth:`TelemetryPolicy.exact_counts` (``--exact-counts``): exact counts, epsilon = infinity.

>>> TelemetryPolicy().counts, TelemetryPolicy().cost(1000)
(False, 0.0)
>>> policy = TelemetryPolicy.noisy(0.1)
>>> round(policy.noise_sd, 1), policy.cost(1200)
(14.1, 120.0)
>>> w = CountWindow(policy, ("accepted", "malformed"), now=0.0)
>>> w.add(accepted=1000, malformed=2)
>>> released = w.close(now=1.0)
>>> sorted(released), w.windows
(['accepted', 'malformed'], 1)
>>> exact = CountWindow(TelemetryPolicy.exact_counts(), ("accepted",), now=0.0)
>>> exact.add(accepted=1000)
>>> exact.close(now=1.0)
{'accepted': 1000}
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

from panstream.errors import ConfigurationError
from panstream.release.noise import NoiseLaw

#: Default event-level epsilon of the operational counts: ``None``, nothing is counted. (The noisy
#: opt-in takes an explicit ``--telemetry-epsilon``.)
DEFAULT_TELEMETRY_EPSILON: float | None = None

#: Default reporting window of the opt-in counts, in seconds.
DEFAULT_WINDOW_SECONDS = 1.0

#: What the default prints in place of counts.
NOTHING_COUNTED = "telemetry: nothing counted"

#: What a printed total adds for the telemetry when the printer cannot know how the stream was
#: read (release, inspect, plan): nothing by default.
TOTAL_TELEMETRY_NOTE = ("+ telemetry 0 (nothing counted by default; a run with --telemetry-epsilon E "
                        "adds k x E for a person with k arrivals, --exact-counts infinity)")

#: What the exact-counts opt-in reveals (for help texts and the startup warning).
EXACT_COUNTS_WARNING = ("exact counts are on: the summary, progress lines and metrics show exact item "
                        "counts, which change by one when one item does (epsilon = infinity for "
                        "those counts, whatever the pan-private total printed for the table and "
                        "releases). Do not publish or ship these figures to logs you would not "
                        "publish the items to.")


def noisy_counts_warning(epsilon: float) -> str:
    """The startup warning of the noisy opt-in: what it costs a person with k arrivals."""
    return (f"noisy counts are on (--telemetry-epsilon {epsilon:g}): the summary, progress lines "
            f"and metrics show per-window counts with geometric noise at epsilon {epsilon:g} per "
            f"ARRIVAL, not per person: a person with k arrivals is covered at k x {epsilon:g} by "
            f"them (k = 1,200, 10 requests a second for two minutes: {1200 * epsilon:g}), on top "
            "of the table's and the releases' total. Without the flag nothing is counted.")


@dataclass(frozen=True)
class TelemetryPolicy:
    """Whether and how operational counts are released.

    Args:
        epsilon: event-level epsilon of noisy counts (each arrival is counted in one window), or
            ``None``: no noisy counts (nothing counted, unless ``exact``).
        sensitivity: L1 change of one window's count vector when one arrival is added or removed
            (1 for log lines, 2 for Kafka messages + items).
        window: reporting window in seconds; exact counts live at most this long.
        exact: exact counts (the explicit opt-in; ``epsilon`` must be ``None``).

    Raises:
        ConfigurationError: epsilon not a finite number > 0, sensitivity < 1, window <= 0, or both
            an epsilon and exact counts.
    """

    epsilon: float | None = DEFAULT_TELEMETRY_EPSILON
    sensitivity: int = 1
    window: float = DEFAULT_WINDOW_SECONDS
    exact: bool = False

    def __post_init__(self) -> None:
        if self.epsilon is not None and not (isinstance(self.epsilon, (int, float))
                                             and math.isfinite(self.epsilon) and self.epsilon > 0):
            msg = (f"telemetry epsilon must be a finite number > 0, got {self.epsilon!r} "
                   "(or leave it out: nothing is counted)")
            raise ConfigurationError(msg)
        if self.exact and self.epsilon is not None:
            msg = "exact counts have no telemetry epsilon: give one or the other"
            raise ConfigurationError(msg)
        if not isinstance(self.sensitivity, int) or self.sensitivity < 1:
            msg = f"telemetry sensitivity must be an integer >= 1, got {self.sensitivity!r}"
            raise ConfigurationError(msg)
        if not (math.isfinite(self.window) and self.window > 0):
            msg = f"telemetry window must be a number of seconds > 0, got {self.window!r}"
            raise ConfigurationError(msg)
        if self.epsilon is not None:
            self.law  # noqa: B018 - validates epsilon / sensitivity against the sampler's minimum

    @classmethod
    def none(cls, sensitivity: int = 1) -> TelemetryPolicy:
        """The default: nothing that counts arrivals is kept or emitted."""
        return cls(None, sensitivity)

    @classmethod
    def noisy(cls, epsilon: float, sensitivity: int = 1,
              window: float = DEFAULT_WINDOW_SECONDS) -> TelemetryPolicy:
        """The noisy opt-in: per-window geometric noise at event-level ``epsilon``."""
        return cls(epsilon, sensitivity, window)

    @classmethod
    def exact_counts(cls, sensitivity: int = 1, window: float = DEFAULT_WINDOW_SECONDS
                     ) -> TelemetryPolicy:
        """The exact opt-in: counts released exactly (see :data:`EXACT_COUNTS_WARNING`)."""
        return cls(None, sensitivity, window, exact=True)

    @property
    def counts(self) -> bool:
        """Whether any count of arrivals is kept and shown (an opt-in)."""
        return self.exact or self.epsilon is not None

    def cost(self, k: int = 1) -> float:
        """Epsilon the counts cost a person with ``k`` arrivals: 0 by default, ``k x epsilon``
        for noisy counts (group privacy), infinity for exact ones."""
        if self.exact:
            return math.inf
        return 0.0 if self.epsilon is None else k * self.epsilon

    @cached_property  # worked out once per policy: every window's every count draws from it
    def law(self) -> NoiseLaw:
        """The geometric noise added to each count: ``a = exp(-epsilon / sensitivity)``.

        Raises:
            ConfigurationError: the policy releases no noisy counts (no noise law).
        """
        if self.epsilon is None:
            msg = "only noisy counts have a noise law"
            raise ConfigurationError(msg)
        return NoiseLaw.for_mechanism("geometric", Fraction(self.epsilon) / self.sensitivity)

    @property
    def noise_sd(self) -> float:
        """Standard deviation of the noise on one count of one window (0 if not noisy)."""
        return 0.0 if self.epsilon is None else math.sqrt(self.law.variance)

    def release(self, count: int) -> int:
        """``count`` plus one draw of the noise (or ``count`` itself for exact counts)."""
        if self.epsilon is None:
            if not self.exact:
                msg = "nothing is counted under this policy"
                raise ConfigurationError(msg)
            return int(count)
        return int(count) + self.law.sample_steps()

    def describe(self) -> str:
        """One line for operators: what the counts printed under this policy reveal."""
        if self.exact:
            return "counts are EXACT (--exact-counts): " + EXACT_COUNTS_WARNING
        if self.epsilon is None:
            return (NOTHING_COUNTED + " (liveness, checkpoints, file positions and Kafka lag only; "
                    "they cost 0 per person)")
        return (f"counts are noisy: two-sided geometric noise per {self.window:g}-s window, "
                f"telemetry epsilon {self.epsilon:g} per ARRIVAL (k x {self.epsilon:g} for a "
                f"person with k arrivals), sd {self.noise_sd:.1f} per count per window")

    def total_clause(self) -> str:
        """What the telemetry adds to a printed pan-private total, for one line."""
        if self.exact:
            return "+ exact counts (infinity: --exact-counts)"
        if self.epsilon is None:
            return "+ 0 (" + NOTHING_COUNTED + ")"
        return f"+ k x {self.epsilon:g} for a person with k arrivals (noisy counts)"


class CountWindow:
    """Exact counts of the current reporting window, released noisy when it closes.

    The exact counts are zeroed at every :meth:`close`; what survives are the released values of the
    last window (:attr:`last`) and their running sums (:attr:`totals`), both safe to print.

    Args:
        policy: the :class:`TelemetryPolicy`.
        fields: names of the counts.
        now: the clock reading when the first window opens.
    """

    def __init__(self, policy: TelemetryPolicy, fields: Sequence[str], now: float) -> None:
        self.policy = policy
        self.fields = tuple(fields)
        self._exact = dict.fromkeys(self.fields, 0)
        self.totals: dict[str, int] = dict.fromkeys(self.fields, 0)
        self.last: dict[str, int] = dict.fromkeys(self.fields, 0)
        self.last_seconds = 0.0
        self.windows = 0
        self.opened = now

    def add(self, **counts: int) -> None:
        """Add exact counts to the current window (unknown names are an error)."""
        exact = self._exact
        for name, n in counts.items():
            exact[name] += n  # KeyError for a name not in fields: a programming error

    def due(self, now: float) -> bool:
        """True once the current window has lasted :attr:`TelemetryPolicy.window` seconds."""
        return now - self.opened >= self.policy.window

    def close(self, now: float) -> dict[str, int]:
        """Release the window's counts, forget the exact ones, open the next window.

        Returns:
            The released (noisy, or exact under the opt-in) counts of the window just closed.
        """
        released = {name: self.policy.release(self._exact[name]) for name in self.fields}
        for name in self.fields:
            self._exact[name] = 0
            self.totals[name] += released[name]
        self.last = released
        self.last_seconds = max(now - self.opened, 0.0)
        self.opened = now
        self.windows += 1
        return released

    def total_sd(self, n_fields: int = 1) -> float:
        """Noise sd of a sum of ``n_fields`` of the :attr:`totals` (independent noise per window)."""
        return self.policy.noise_sd * math.sqrt(self.windows * n_fields)
