"""Operational counts under the printed guarantee (issue 10 §2): what a window releases, what it
forgets, and the attack that an exact count would lose to.

The attacker sees the released counts of two streams that differ in one item (1,000 vs 1,001
accepted) and guesses which stream ran. Against exact counts it always wins; against the default
policy no test can gain more than ``(e^eps - 1) / (e^eps + 1)`` (0.05 at eps_t = 0.1) over a coin.
"""

from __future__ import annotations

import math

import pytest

from panstream import TelemetryPolicy
from panstream.errors import ConfigurationError, PanstreamError
from panstream.telemetry import CountWindow

#: The noisy opt-in these tests exercise (--telemetry-epsilon 0.1; the default counts nothing).
EPS_T = 0.1


def test_noise_is_the_geometric_law_at_epsilon_over_sensitivity() -> None:
    """sd of one count per window: 14.1 for log lines (sensitivity 1), 28.3 for Kafka (2)."""
    ingest, kafka = TelemetryPolicy.noisy(EPS_T), TelemetryPolicy.noisy(EPS_T, 2)
    assert ingest.epsilon == EPS_T == 0.1
    assert ingest.law.mechanism == "geometric"
    assert float(ingest.law.epsilon_exact) == 0.1 and float(kafka.law.epsilon_exact) == 0.05
    assert round(ingest.noise_sd, 1) == 14.1 and round(kafka.noise_sd, 1) == 28.3
    # The exact pmf ratio of neighbouring counts never exceeds exp(eps / sensitivity).
    for pol in (ingest, kafka):
        worst = max(pol.law.pmf(z) / pol.law.pmf(z + 1) for z in range(-60, 60))
        assert worst <= math.exp(pol.epsilon / pol.sensitivity) * (1 + 1e-12)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), 1e-12])
def test_bad_epsilon_is_a_configuration_error(bad: float) -> None:
    with pytest.raises(ConfigurationError):
        TelemetryPolicy(bad)
    assert issubclass(ConfigurationError, PanstreamError)


def test_a_window_forgets_its_exact_counts_when_it_closes() -> None:
    """A read of memory after the window closed finds only released values."""
    w = CountWindow(TelemetryPolicy.noisy(EPS_T), ("accepted", "malformed"), now=0.0)
    w.add(accepted=1_000_003, malformed=7)
    assert not w.due(0.5) and w.due(1.0)
    out = w.close(now=1.0)
    assert w._exact == {"accepted": 0, "malformed": 0}
    assert w.totals == out == w.last and w.windows == 1 and w.opened == 1.0
    # A second, empty window is still released on schedule (noise only: it does not say "nothing
    # arrived" by being skipped), and the totals are sums of released values.
    out2 = w.close(now=2.0)
    assert w.totals == {k: out[k] + out2[k] for k in out} and w.windows == 2
    assert w.total_sd() == pytest.approx(TelemetryPolicy.noisy(EPS_T).noise_sd * math.sqrt(2))


def test_exact_counts_are_an_explicit_opt_in() -> None:
    pol = TelemetryPolicy.exact_counts()
    assert pol.exact and pol.noise_sd == 0 and "EXACT" in pol.describe()
    assert "infinity" in pol.describe()
    with pytest.raises(ConfigurationError):
        pol.law  # noqa: B018
    assert not TelemetryPolicy.noisy(EPS_T).exact and "0.1" in TelemetryPolicy.noisy(EPS_T).describe()


TRIALS = 20_000


def _advantage(policy: TelemetryPolicy) -> float:
    """Best threshold attack on one released window: guess "1,001" when the count is >= 1,001.

    For the geometric mechanism this threshold test is the likelihood-ratio test, the most
    powerful one; its advantage P[guess B | B] - P[guess B | A] is what a distinguisher gains."""

    def released(count: int) -> int:
        w = CountWindow(policy, ("accepted",), now=0.0)
        w.add(accepted=count)
        return w.close(now=1.0)["accepted"]

    hits_b = sum(released(1001) >= 1001 for _ in range(TRIALS))
    hits_a = sum(released(1000) >= 1001 for _ in range(TRIALS))
    return (hits_b - hits_a) / TRIALS


def test_two_streams_differing_in_one_item_are_hard_to_tell_apart() -> None:
    """The attack wins outright against exact counts (the broken variant) and gains at most
    tanh(eps/2) = 0.05 against the default. Each proportion has sd <= sqrt(0.25 / 20,000), the
    difference sd <= 0.0050: the bound 0.05 + 6 sd = 0.080 fails falsely with probability < 1e-9."""
    assert _advantage(TelemetryPolicy.exact_counts()) == 1.0
    bound = math.tanh(EPS_T / 2)
    adv = _advantage(TelemetryPolicy.noisy(EPS_T))
    assert adv <= bound + 6 * math.sqrt(0.5 / TRIALS), adv
