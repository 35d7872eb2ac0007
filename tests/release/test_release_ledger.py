"""The ledger composes releases sequentially, refuses overspending before any noise is drawn, and
stays a small data-independent JSON object."""

from __future__ import annotations

import json

import pytest

import panstream as ps
import panstream.release.noise as noise
from panstream.errors import BudgetExhaustedError, ConfigurationError, StateError
from panstream.release.ledger import DEFAULT_BUDGET, LedgerEntry, PrivacyLedger, group_privacy


def test_sequential_composition_arithmetic() -> None:
    led = PrivacyLedger(budget=1.0)
    for _ in range(10):
        led.charge(0.1, "laplace")  # 10 x 0.1 fits in 1.0 despite float rounding
    assert led.releases == 10
    assert led.spent == pytest.approx(1.0, abs=1e-15)
    assert led.remaining == pytest.approx(0.0, abs=1e-15)
    assert led.epsilon_total(0.5) == pytest.approx(1.5)
    with pytest.raises(BudgetExhaustedError):
        led.charge(0.001, "geometric")


def test_exhaustion_error_says_what_is_left_and_records_nothing() -> None:
    led = PrivacyLedger(budget=0.5)
    led.charge(0.375, "geometric")
    with pytest.raises(BudgetExhaustedError, match=r"0\.125 left") as exc:
        led.charge(0.25, "laplace")
    assert "epsilon <= 0.125" in str(exc.value) and "new epoch" in str(exc.value)
    assert led.releases == 1 and led.spent == 0.375
    led.charge(0.125, "laplace")  # exactly what is left is allowed
    assert led.remaining == 0.0


def test_release_refused_before_any_noise_is_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    est = ps.DensityEstimator("range:1024", budget=0.3)

    def boom(self: object) -> int:
        raise AssertionError("noise drawn although the budget was short")

    monkeypatch.setattr(noise.NoiseLaw, "sample_steps", boom)
    with pytest.raises(BudgetExhaustedError, match=r"0\.3 left"):
        est.release(0.5, "laplace")
    assert est.ledger.releases == 0


def test_default_budget_and_invalid_values() -> None:
    assert DEFAULT_BUDGET == 1.0
    assert ps.DensityEstimator("range:16").ledger.budget == DEFAULT_BUDGET
    for bad in [-1.0, float("inf"), float("nan"), "1", True]:
        with pytest.raises(ConfigurationError):
            PrivacyLedger(budget=bad)  # type: ignore[arg-type]
    led = PrivacyLedger(1.0)
    for bad_eps in [0.0, -0.1, float("nan")]:
        with pytest.raises(ConfigurationError):
            led.charge(bad_eps, "laplace")
    assert led.releases == 0


def test_zero_budget_refuses_everything() -> None:
    est = ps.DensityEstimator("range:16", budget=0.0)
    with pytest.raises(BudgetExhaustedError, match="budget of 0 is spent.*rotate"):
        est.release(1e-6)


def test_entries_hold_only_epsilon_mechanism_time_and_a_random_id_and_round_trip_json() -> None:
    """The ledger holds what was released and when, and random labels (the epoch, an id per
    entry) that make copies of it recombinable: nothing about the data."""
    est = ps.DensityEstimator("range:4096", budget=1.0)
    est.update(range(100))
    est.release(0.25, "laplace")
    est.release(0.5, "geometric")
    d = est.ledger.to_dict()
    assert set(d) == {"budget", "entries", "epoch"}
    assert [set(e) for e in d["entries"]] == [{"epsilon", "mechanism", "time", "id"}] * 2
    assert len({d["epoch"], *(e["id"] for e in d["entries"])}) == 3  # independent labels
    text = json.dumps(d)  # JSON-serializable, no released value or count in it
    back = PrivacyLedger.from_dict(json.loads(text))
    assert back == est.ledger
    assert back.entries[1] == LedgerEntry(0.5, "geometric", d["entries"][1]["time"],
                                          d["entries"][1]["id"])


@pytest.mark.parametrize("bad", [{}, {"budget": "x"}, {"budget": 1.0, "entries": [{"epsilon": 1}]},
                                 {"budget": 1.0, "entries": [{"epsilon": -1, "mechanism": "laplace",
                                                              "time": 0}]}])
def test_malformed_ledger_is_a_state_error(bad: dict) -> None:
    with pytest.raises(StateError, match="new epoch"):
        PrivacyLedger.from_dict(bad)


def test_group_privacy() -> None:
    assert group_privacy(1, 0.7) == 0.7
    assert group_privacy(5, 0.5) == 2.5
    for bad in [0, -2, 1.5, True]:
        with pytest.raises(ValueError):
            group_privacy(bad, 1.0)  # type: ignore[arg-type]
    est = ps.DensityEstimator("range:1024", epsilon=1.0, budget=1.0)
    r = est.release(0.5, "geometric")
    assert r.group_privacy(3) == pytest.approx(3 * (est.epsilon_state + 0.5))
    assert est.ledger.group_epsilon(3, est.epsilon_state) == pytest.approx(r.group_privacy(3))


def test_a_spent_budget_says_so_and_points_at_rotate() -> None:
    """Issue 14: a spent budget used to say "release with epsilon <= 0"."""
    est = ps.DensityEstimator("range:16", budget=0.5)
    est.release(0.5)
    with pytest.raises(BudgetExhaustedError) as exc:
        est.release(0.1)
    msg = str(exc.value)
    assert "is spent (1 release(s))" in msg and "rotate" in msg and "<= 0" not in msg


def test_a_refusal_prints_enough_digits_to_see_why() -> None:
    """Issue 14: asking 1.0000001 with 1 left read "epsilon 1 refused ... <= 1"."""
    est = ps.DensityEstimator("range:16", budget=1.0)
    with pytest.raises(BudgetExhaustedError, match=r"epsilon 1\.0000001 refused.*<= 1\b"):
        est.release(1.0000001)
