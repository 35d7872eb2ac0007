"""Operational telemetry that the privacy guarantee covers: noisy per-window counts.

An operator needs throughput and health figures (lines read, items applied, malformed and
out-of-universe input), but an exact count is itself a release: two streams that differ in one item
print "1,000 accepted" and "1,001 accepted", which against a read of memory, a log line or a scraped
metric is epsilon = infinity. So by default panstream never keeps an exact count longer than one
reporting window:

* a :class:`CountWindow` accumulates the exact counts of one short window (:attr:`TelemetryPolicy.
  window`, 1 s) and nothing else;
* when the window closes, every count is released once with the exact two-sided geometric mechanism
  (:class:`panstream.noise.NoiseLaw`, OS CSPRNG, integer arithmetic only) and the exact counts are
  set back to zero: only the noisy values and their running noisy sums survive;
* windows close on the clock whether or not anything arrived, so *when* a figure is published does
  not depend on the data either.

Privacy accounting (event level, separate from the table's and the releases' epsilon): one item
(one log line, one Kafka message) falls in exactly one window and changes the vector of that window's
counts by at most :attr:`TelemetryPolicy.sensitivity` in L1 norm (1 for ``ingest``: the line is one
of accepted/empty/malformed/outside, and the lines total is their sum; 2 for Kafka: one message
plus its item's class). Each count gets independent geometric noise with ``a = exp(-epsilon /
sensitivity)``, so every window's vector is ``epsilon``-DP with respect to one item and, the windows
being disjoint, the whole telemetry stream is ``epsilon``-DP at the event level (parallel
composition); every total printed is a sum of released values (post-processing, free). A person
with ``k`` items in the stream is covered at ``k * epsilon``.

Exact counts remain available behind an explicit opt-in (:meth:`TelemetryPolicy.exact_counts`, the
``--exact-counts`` flag): they reveal the counts exactly (epsilon = infinity for them).

>>> policy = TelemetryPolicy(epsilon=0.1)
>>> round(policy.noise_sd, 1)
14.1
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

from panstream.errors import ConfigurationError
from panstream.release.noise import NoiseLaw

#: Default event-level epsilon of the operational counts (noise sd 14.1 per count per window at
#: sensitivity 1, 28.3 at sensitivity 2).
DEFAULT_TELEMETRY_EPSILON = 0.1

#: Default reporting window in seconds.
DEFAULT_WINDOW_SECONDS = 1.0

#: What the exact-counts opt-in reveals (for help texts and the startup warning).
EXACT_COUNTS_WARNING = ("exact counts are on: the summary, progress lines and metrics show exact item "
                        "counts, which change by one when one item does (epsilon = infinity for "
                        "those counts; the table, its state file and releases keep their "
                        "guarantee). Do not publish or ship these figures to logs you would not "
                        "publish the items to.")


@dataclass(frozen=True)
class TelemetryPolicy:
    """How operational counts are released.

    Args:
        epsilon: event-level epsilon of the released counts (each item is counted in one window),
            or ``None`` for exact counts (use :meth:`exact_counts`).
        sensitivity: L1 change of one window's count vector when one item is added or removed
            (1 for log lines, 2 for Kafka messages + items).
        window: reporting window in seconds; exact counts live at most this long.

    Raises:
        ConfigurationError: epsilon not a finite number > 0, sensitivity < 1 or window <= 0.
    """

    epsilon: float | None = DEFAULT_TELEMETRY_EPSILON
    sensitivity: int = 1
    window: float = DEFAULT_WINDOW_SECONDS

    def __post_init__(self) -> None:
        if self.epsilon is not None and not (isinstance(self.epsilon, (int, float))
                                             and math.isfinite(self.epsilon) and self.epsilon > 0):
            msg = (f"telemetry epsilon must be a finite number > 0, got {self.epsilon!r} "
                   "(or ask for exact counts explicitly)")
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
    def exact_counts(cls, sensitivity: int = 1, window: float = DEFAULT_WINDOW_SECONDS
                     ) -> TelemetryPolicy:
        """The explicit opt-in: counts released exactly (see :data:`EXACT_COUNTS_WARNING`)."""
        return cls(None, sensitivity, window)

    @property
    def exact(self) -> bool:
        """True when counts are released without noise."""
        return self.epsilon is None

    @property
    def law(self) -> NoiseLaw:
        """The geometric noise added to each count: ``a = exp(-epsilon / sensitivity)``.

        Raises:
            ConfigurationError: the policy releases exact counts (no noise law).
        """
        if self.epsilon is None:
            msg = "exact counts have no noise law"
            raise ConfigurationError(msg)
        return NoiseLaw.for_mechanism("geometric", Fraction(self.epsilon) / self.sensitivity)

    @property
    def noise_sd(self) -> float:
        """Standard deviation of the noise on one count of one window (0 for exact counts)."""
        return 0.0 if self.epsilon is None else math.sqrt(self.law.variance)

    def release(self, count: int) -> int:
        """``count`` plus one draw of the noise (or ``count`` itself for exact counts)."""
        if self.epsilon is None:
            return int(count)
        return int(count) + self.law.sample_steps()

    def describe(self) -> str:
        """One line for operators: what the counts printed under this policy reveal."""
        if self.epsilon is None:
            return "counts are EXACT (--exact-counts): " + EXACT_COUNTS_WARNING
        return (f"counts are noisy: two-sided geometric noise per {self.window:g}-s window, "
                f"telemetry epsilon {self.epsilon:g} per item (separate from the table's and the "
                f"releases'), sd {self.noise_sd:.1f} per count per window")


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
