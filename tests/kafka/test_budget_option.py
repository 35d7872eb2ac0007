"""``panstream kafka --budget B`` (issue 37's habits: as ``ingest --budget``): a new group's
release ledger opens with budget B; an existing ledger keeps its budget, and a later ``--budget``
says so instead of changing it."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from _kafka_helpers import Broker
from test_routed import IDLE, member_argv

from panstream.state.stores import DirectoryStore, group_ledger


def test_budget_opens_a_new_group_ledger_and_never_changes_an_existing_one(
        kafka_broker: Broker, topic_factory: Callable[..., str], tmp_path: Path) -> None:
    topic, state = topic_factory(2), tmp_path / "st"

    def member(budget: str) -> subprocess.CompletedProcess[bytes]:
        argv = member_argv(kafka_broker, topic, "g-budget", "ipv4:10.0.0.0/24", state,
                           "--budget", budget, "--idle-timeout", IDLE)
        return subprocess.run(argv, capture_output=True, timeout=120, check=False)

    first = member("3")
    assert first.returncode == 0, first.stderr.decode()
    assert group_ledger(DirectoryStore(str(state))).budget == 3.0
    again = member("5")
    assert again.returncode == 0, again.stderr.decode()
    assert "the group's release ledger already exists: --budget does not change its budget" in \
        again.stderr.decode()
    assert group_ledger(DirectoryStore(str(state))).budget == 3.0
