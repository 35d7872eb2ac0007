"""Topology changes while the group is down or its broker lost its data (issue 35; the changes
under a running group, and the helpers: ``test_topology.py``).

* **The broker restarted empty** (a lost cluster): the member stops with one line saying that the
  internal topic is gone and routed-but-unapplied records with it (no "nothing is lost"), no
  client of panstream auto-creates ``GROUP-cells`` with the broker's default count, a restarted
  member re-creates it with the slice count and says what was lost, and one that finds a
  ``GROUP-cells`` of another count (as a broker's auto-create made it) refuses, naming the topic
  as the wrong side.
* **A source topic re-created while no member ran** is not called drained: the offsets the group
  committed belong to the old topic.

Each test asserts outcomes (exit status, the one line, what the broker holds), never times.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from _kafka_helpers import ROUTED_IDLE, Broker, panstream_cmd
from test_topology import (
    ENV,
    _crashed_saying_so,
    _create,
    _errors,
    _inspect,
    _lines,
    _member,
    _produce,
    _running,
    _until,
)

pytestmark = pytest.mark.kafka


@pytest.mark.parametrize("client", ["kafka-python", "librdkafka"])
def test_a_broker_restarted_empty_is_said_truthfully(own_broker: Any, tmp_path: Path,
                                                     client: str) -> None:
    from kafka import KafkaAdminClient

    b, topic, state = own_broker.bootstrap, "logs", tmp_path / "state"
    cells = f"g-{topic}-cells"
    _create(b, topic, 4)
    _produce(b, topic, _lines(0, 40))
    log = tmp_path / "member.err"
    with _running(_member(b, topic, state, client, idle=60), log) as member:
        _until(lambda: len(list(state.glob(f"{cells}@*.shard"))) == 4)
        own_broker.restart_empty()
        rc = member.wait(timeout=90)
    if client == "librdkafka" and _crashed_saying_so(log, rc):
        return  # its fetches met the lost topic's id before the member saw the change
    errors = _errors(log)
    assert rc == 1, log.read_text()
    assert len(errors) == 1, log.read_text()
    assert f"the internal topic {cells} is gone" in errors[0]
    assert "went with the old" in errors[0]
    assert "nothing is lost" not in errors[0]
    admin = KafkaAdminClient(bootstrap_servers=b)
    try:
        assert cells not in admin.list_topics()  # no client of panstream auto-created it
    finally:
        admin.close()
    if client == "librdkafka":
        return  # what follows is the store's and the topic's, the same for both clients
    # a restarted member: the source is back, GROUP-cells is made again with the slice count, and
    # the member says what was lost. (The broker is emptied once more first: the stopped member's
    # consumers had joined the new broker's groups, and Tansu stalls a group whose member left in
    # the middle of a rebalance: docs/kafka.md, Tests and the Tansu broker.)
    own_broker.restart_empty()
    admin = KafkaAdminClient(bootstrap_servers=b)
    try:
        _create(b, topic, 4)
        _produce(b, topic, _lines(50, 10))
        again = subprocess.run(_member(b, topic, state, "kafka-python", idle=ROUTED_IDLE), env=ENV,
                               capture_output=True, text=True, timeout=180)
        assert again.returncode == 0, again.stderr
        assert f"warning: {cells} did not exist, but the store holds slices" in again.stderr
        assert len(admin.describe_topics([cells])[0]["partitions"]) == 4
        # a GROUP-cells of another count (as a broker's auto-create makes it) is refused, the
        # topic named as the wrong side, not --slices
        admin.delete_topics([cells])
        _until(lambda: cells not in admin.list_topics(), 30)
        _create(b, cells, 2)
        refused = subprocess.run(_member(b, topic, state, "kafka-python", idle=ROUTED_IDLE), env=ENV,
                                 capture_output=True, text=True, timeout=120)
    finally:
        admin.close()
    assert refused.returncode != 0  # a configuration the member refuses (exit 2)
    [line] = [ln for ln in refused.stderr.splitlines() if "error" in ln]
    assert "saved slices were written with --slices 4" in line
    assert f"Delete {cells} and restart with --slices 4" in line
    assert "--slices 2" not in line


def test_a_source_topic_recreated_while_no_member_ran_is_not_called_drained(
        kafka_broker: Broker, admin: Any, fresh_topic: str, tmp_path: Path) -> None:
    """The group drains and stops; its source topic is deleted and re-created (new messages in
    it) while no member runs. The broker dropped the old topic's commits, so offsets show
    nothing; the group definition's topic ID does: ``inspect -b`` says so in one line instead of
    "drained", and ``release -b`` refuses. A member started afterwards is told at its start and
    reads the new topic from its start; from then on the group is the new topic's (its commits
    are), and it drains again."""
    b, topic, state = kafka_broker.bootstrap, fresh_topic, tmp_path / "state"
    _create(b, topic, 4)
    _produce(b, topic, _lines(0, 20))
    first = subprocess.run(_member(b, topic, state, "kafka-python", idle=ROUTED_IDLE), env=ENV,
                           capture_output=True, text=True, timeout=180)
    assert first.returncode == 0, first.stderr
    assert ": drained (" in _inspect(b, state).stdout
    admin.delete_topics([topic])
    _until(lambda: topic not in admin.list_topics(), 30)
    _create(b, topic, 4)
    _produce(b, topic, _lines(100, 8))
    shown = _inspect(b, state)
    assert shown.returncode == 0, shown.stderr
    [line] = [ln for ln in shown.stdout.splitlines() if "changed under it" in ln]
    assert f"the source topic {topic} was deleted and re-created (topic id" in line
    assert "since the group was defined, and no member has read it since" in line
    assert ": drained (" not in shown.stdout
    released = subprocess.run(panstream_cmd("release", "--state-dir", str(state), "-b", b,
                                            "--epsilon", "0.5"),
                              env=ENV, capture_output=True, text=True, timeout=120)
    assert released.returncode == 1, released.stderr
    [error] = [ln for ln in released.stderr.splitlines() if ln.startswith("panstream: error:")]
    assert "was deleted and re-created" in error and "no member has read it since" in error
    again = subprocess.run(_member(b, topic, state, "kafka-python", idle=ROUTED_IDLE), env=ENV,
                           capture_output=True, text=True, timeout=180)
    assert again.returncode == 0, again.stderr
    assert "differs from the group definition's" in again.stderr  # said at its start
    assert ": drained (" in _inspect(b, state).stdout
