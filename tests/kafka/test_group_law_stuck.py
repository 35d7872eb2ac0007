"""A member whose group cannot drain (the law of one table: ``test_group_law.py``): a consumer
squatting in ``<group>-slices`` holds every slice and applies nothing. The member exits 1 with one
line saying what is pending, its release is refused (the squatter's slices were never saved, and
the broker shows records routed to them), ``inspect -b`` names the pending slices, and once the
squatter leaves a rerun applies everything: nothing was lost.
"""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from _kafka_helpers import GROUP_SETTINGS, Broker, all_exit_0, committed_offsets, panstream_cmd
from test_broker import start, wait_for
from test_group_law import SLICES, _argv, _messages, _release, _topic, assert_one_table
from test_routed import send_round_robin

pytestmark = pytest.mark.kafka


class _Squatter:
    """A consumer in ``<group>-slices`` that polls (so it keeps its partitions) but never applies
    or commits anything: a stuck member holding slices."""

    def __init__(self, broker: Broker, group: str, topic: str) -> None:
        from kafka import KafkaConsumer

        self.consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=f"{group}-slices",
                                      enable_auto_commit=False, auto_offset_reset="earliest",
                                      **GROUP_SETTINGS)
        self.consumer.subscribe([topic])
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            self.consumer.poll(timeout_ms=200)

    def held(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def leave(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        self.consumer.close(autocommit=False)


def test_a_member_whose_group_cannot_drain_exits_1_and_loses_nothing(
        kafka_broker: Broker, admin: Any, producer: Any, tmp_path: Path) -> None:
    from kafka.admin import NewTopic

    topic = _topic(admin, "law-stuck", 4)
    clients, msgs = _messages(28, 3_000, 10_000)
    hw = send_round_robin(producer, topic, msgs, 4, {})
    group, state = "g-law-stuck", tmp_path / "state"
    admin.create_topics([NewTopic(f"{group}-cells", SLICES, 1)])
    squatter = _Squatter(kafka_broker, group, f"{group}-cells")
    try:
        wait_for(lambda: len(squatter.held()) == SLICES, 60, "the squatter's slices")
        run = subprocess.run(_argv(kafka_broker, topic, group, state) + ["--drain-timeout", "5"],
                             capture_output=True, timeout=180)
        stuck = sorted(squatter.held())
        err = [ln for ln in run.stderr.decode().splitlines() if ln.startswith("panstream: error:")]
        assert run.returncode == 1, run.stderr.decode()[-3000:]
        assert len(err) == 1 and err[0].startswith(
            "panstream: error: stopped by --idle-timeout with work pending for the group: "), err
        assert f"routed records unapplied in {group}-cells (slices " in err[0], err
        assert "idle, but the group has not drained" in run.stderr.decode()
        assert committed_offsets(admin, group) == hw  # routed: the records wait in the topic
        # what a release says now: the squatter's slices were never saved, and received records
        plain = subprocess.run(panstream_cmd("release", "--state-dir", str(state), "--epsilon",
                                             "0.5"), capture_output=True, timeout=60)
        assert plain.returncode == 1 and "without -b the release cannot tell" in \
            plain.stderr.decode()
        asked = _release(kafka_broker, state)
        assert asked.returncode == 1 and f"but {group}-cells has held records routed to them" in \
            asked.stderr.decode(), asked.stderr.decode()
        ins = subprocess.run(panstream_cmd("inspect", "--state-dir", str(state), "-b",
                                           kafka_broker.bootstrap, "--json"),
                             capture_output=True, timeout=60)
        info = json.loads(ins.stdout)["internal_topic"]
        assert not info["drained"] and set(info["slices_pending"]) <= set(stuck), info
        assert info["routed_records_unapplied"] > 0
        # (the member's exit rebalanced the squatter onto every slice: let that finish, since a
        # LeaveGroup in the middle of a rebalance stalls Tansu's group for minutes)
        wait_for(lambda: len(squatter.held()) == SLICES, 60, "the squatter alone")
    finally:
        squatter.leave()
    # the squatter gone, a rerun takes every slice and applies what waited: nothing was lost
    log = tmp_path / "rerun.log"
    all_exit_0([start(_argv(kafka_broker, topic, group, state), log)], [log])
    assert_one_table(kafka_broker, admin, group, topic, hw, clients, state)
