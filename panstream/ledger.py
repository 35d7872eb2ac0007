"""Privacy budget ledger: sequential composition of output releases.

(Minimal version from the core issue; the release-stage issue owns and extends it.)
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from panstream.errors import BudgetExhaustedError, ConfigurationError

#: Default total output epsilon a state may spend on releases.
DEFAULT_BUDGET = 1.0


@dataclass(frozen=True)
class LedgerEntry:
    """One recorded release: its output epsilon, mechanism and UNIX time."""

    epsilon: float
    mechanism: str
    time: float


@dataclass
class PrivacyLedger:
    """Total output budget and the releases charged against it (data-independent)."""

    budget: float = DEFAULT_BUDGET
    entries: list[LedgerEntry] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not (isinstance(self.budget, (int, float)) and math.isfinite(self.budget)
                and self.budget >= 0):
            msg = f"budget must be a finite non-negative number, got {self.budget!r}"
            raise ConfigurationError(msg)
        self.budget = float(self.budget)

    @property
    def spent(self) -> float:
        """Output epsilon spent so far (sum over releases)."""
        return math.fsum(e.epsilon for e in self.entries)

    @property
    def remaining(self) -> float:
        """Output epsilon still available."""
        return max(0.0, self.budget - self.spent)

    def charge(self, epsilon: float, mechanism: str) -> LedgerEntry:
        """Record a release, or refuse it if it would exceed the budget."""
        if epsilon > self.remaining + 1e-12:
            msg = (f"release of epsilon {epsilon:g} refused: the budget of {self.budget:g} has "
                   f"{self.remaining:g} left; release with a smaller epsilon or rotate to a new epoch")
            raise BudgetExhaustedError(msg)
        entry = LedgerEntry(float(epsilon), mechanism, time.time())
        self.entries.append(entry)
        return entry

    def to_dict(self) -> dict[str, Any]:
        return {"budget": self.budget, "entries": [asdict(e) for e in self.entries]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PrivacyLedger:
        return cls(float(d["budget"]), [LedgerEntry(**e) for e in d.get("entries", [])])
