"""Shared fixtures. Statistical tests in this suite use fixed trial counts and state their
false-failure probability; none retries.

The suite's longest files start first. ``--dist loadfile`` (pyproject.toml) hands whole files to
the 4 workers in collection order, so a long file collected late (``tests/kafka`` sorts after
``tests/cli`` and ``tests/core``) left three workers idle while one finished it: 10 min 28 s on 2
cores, against 9 min 39 s with every file, CPU-bound, spread from the start. The list is the
slowest files of ``pytest --durations=60`` on a 2-core machine (issue 35/36 round); the order of
everything else is unchanged.
"""

from __future__ import annotations

import pytest

#: Files (under tests/) started before all others, longest first.
FIRST = (
    "kafka/test_group_law.py",
    "kafka/test_librdkafka.py",
    "kafka/test_routed.py",
    "kafka/test_windows_kafka.py",
    "kafka/test_zombie.py",
    "kafka/test_topology.py",
    "state/test_audit_learned.py",
    "kafka/test_group_identity.py",
    "kafka/test_broker.py",
    "kafka/test_churn.py",
    "state/test_audit_rr.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Move the files of :data:`FIRST` to the front, in its order (a stable sort: each file's
    tests and every other file keep their order)."""
    rank = {f"tests/{name}": i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(FIRST)))
