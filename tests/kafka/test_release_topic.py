"""``panstream release --state-topic``: release a consumer group's shards from its state topic.

The group's release ledger lives in the state topic itself, as an append-only log of records with
keys of their own (``#ledger/...``): consumers open it when they find the topic without shards,
releases append their reservations (tests/kafka/test_ledger_race.py races them). The semantics match
``--state-dir``: same merges, same privacy accounting (``--keyed`` or K x epsilon_state), same
refusal of a lost ledger unless ``--new-ledger``.

Statistical checks: the release states a standard error covering both the coin-flip noise of the
table and the release noise; the checks widen it to z = 5.33 (two-sided normal tail 1e-7; the
Laplace part has a standard deviation of 2.8 counts beside about 127 counts of binomial noise, so
its heavier tail does not matter at this width). Two such checks: false failure < 1e-6.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from _kafka_helpers import Broker, Producer, committed_offsets, group_options, panstream_cmd
from click.testing import CliRunner
from fakes import MemoryLog

from panstream.calibration import calibrate
from panstream.cli.main import cli
from panstream.errors import BudgetExhaustedError
from panstream.estimators.density import DensityEstimator
from panstream.sources.kafka import state_client, topic_store
from panstream.state.keying import Keying
from panstream.state.stores import (
    DEFINITION_PREFIX,
    LEDGER_RECORD_PREFIX,
    TopicStore,
    encode_shard,
    ensure_ledger,
    release_store,
)
from panstream.universe import Universe

U = Universe.parse("ipv4:10.0.0.0/16")
Z = 5.33
IDLE = "3"  # see test_broker.py: well above any stall of a consumer with a backlog

#: The keying record a checking member's shards carry (issue 39): one partition, murmur2.
ONE = Keying("murmur2", 1)


def ips(cells: np.ndarray) -> list[bytes]:
    return [U.item_of(int(c)).encode() for c in cells]


def release(broker: Broker, state_topic: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(panstream_cmd("release", "--state-topic", state_topic, "-b",
                                        broker.bootstrap, "--json", *args),
                          capture_output=True, timeout=60)


def ledger_records(broker: Broker, state_topic: str) -> tuple[list[str], dict[str, Any]]:
    """The keys of the state topic's ledger records, and its ledger as every reader replays it."""
    store = topic_store(state_topic, state_client(broker.bootstrap), create=False)
    try:
        keys = [k.decode() for k, _ in store.log.read_all()
                if k.startswith(b"#") and not k.startswith(DEFINITION_PREFIX.encode())]
        return keys, json.loads(store.read_ledger() or b"null")
    finally:
        store.log.close()  # type: ignore[attr-defined]


@pytest.mark.kafka
def test_release_from_state_topic_charges_the_groups_ledger(
        kafka_broker: Broker, topic_factory: Callable[..., str], produce: Producer,
        admin: Any) -> None:
    """Consume keyed IPs into a state topic, then release twice from it and get refused once."""
    topic = topic_factory(4)
    cells = np.random.default_rng(5).choice(U.size, 3000, replace=False)  # synthetic test data
    stream = np.concatenate([cells, cells[:500]])                          # with repeats
    hw = produce(topic, ips(stream), keys=ips(stream))
    state_topic = f"{topic}-state"
    argv = ["kafka", "-b", kafka_broker.bootstrap, "-t", topic, "-g", "g-rel-topic", "-u", U.spec,
            "--layout", "partition",
            "--epsilon", "1", "--state-topic", state_topic, "--idle-timeout", IDLE, "--json",
            *group_options()]
    run = subprocess.run(panstream_cmd(*argv), capture_output=True, timeout=60)
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    assert committed_offsets(admin, "g-rel-topic") == hw

    # The consumer created the empty ledger; no release has charged it yet.
    keys, initial = ledger_records(kafka_broker, state_topic)
    assert len(keys) == 1 and keys[0].startswith(LEDGER_RECORD_PREFIX)     # one opening
    assert {k: v for k, v in initial.items() if k != "epoch"} == {"budget": 1.0, "entries": []}

    eps_state = calibrate(1).epsilon_state
    first = release(kafka_broker, state_topic, "--keyed", "--epsilon", "0.5")
    assert first.returncode == 0, first.stderr.decode()
    r = json.loads(first.stdout)
    assert (r["sensitivity"], r["state_tables"]) == (1, 1)    # keyed, partitioned merge
    assert r["epsilon_state"] == pytest.approx(eps_state)
    assert (r["budget"], r["budget_remaining"]) == (1.0, 0.5)
    assert abs(r["distinct"] - 3000) <= Z * r["stderr_density"] * r["size"]

    # Unkeyed: same ledger, 0.4 more spent; the state epsilon counts all 4 shards (as --state-dir).
    second = release(kafka_broker, state_topic, "--epsilon", "0.4")
    assert second.returncode == 0, second.stderr.decode()
    r2 = json.loads(second.stdout)
    assert r2["budget_remaining"] == pytest.approx(0.1)
    assert (r2["sensitivity"], r2["state_tables"]) == (1, 4)
    assert r2["epsilon_state"] == pytest.approx(4 * eps_state)
    assert r2["epsilon_total"] == pytest.approx(4 * eps_state + 0.9)
    assert abs(r2["distinct"] - 3000) <= Z * r2["stderr_density"] * r2["size"]

    # A density map of the same group: one more entry in the same ledger, whatever the bucket count.
    mapped = release(kafka_broker, state_topic, "--keyed", "--epsilon", "0.05", "--by", "/20")
    assert mapped.returncode == 0, mapped.stderr.decode()
    m = json.loads(mapped.stdout)
    assert len(m["rows"]) == 16 and m["rows"][1]["label"] == "10.0.16.0/20"
    assert m["budget_remaining"] == pytest.approx(0.05) and m["state_tables"] == 1

    # A third release over budget: one line, exit 1, nothing charged.
    third = release(kafka_broker, state_topic, "--keyed", "--epsilon", "0.5")
    assert third.returncode == 1 and third.stdout == b""
    err = third.stderr.decode().strip()
    assert err.startswith("panstream: error: release of epsilon 0.5 refused") and "\n" not in err
    keys, ledger = ledger_records(kafka_broker, state_topic)
    assert [e["epsilon"] for e in ledger["entries"]] == [0.5, 0.4, 0.05]
    assert ledger["entries"][2]["mechanism"] == "laplace map /20"
    assert len(set(keys)) == len(keys) == 4  # the opening and 3 reservations, each its own key


@pytest.mark.kafka
def test_lost_ledger_missing_topic_and_missing_broker_are_one_line(kafka_broker: Broker) -> None:
    """Shards without a ledger are refused unless --new-ledger; a missing topic is not created."""
    from kafka import KafkaAdminClient

    state_topic = "rel-topic-no-ledger"
    store = topic_store(state_topic, state_client(kafka_broker.bootstrap))
    store.save("ev/0", encode_shard(DensityEstimator(U, epsilon=1.0), ONE))   # shards, no ledger
    store.log.close()  # type: ignore[attr-defined]
    runner = CliRunner()
    base = ["release", "--state-topic", state_topic, "-b", kafka_broker.bootstrap, "--keyed",
            "--epsilon", "0.25"]
    out = runner.invoke(cli, base)
    assert out.exit_code == 1 and "--new-ledger" in out.output
    assert out.output.count("\n") == 1 and "Traceback" not in out.output
    out = runner.invoke(cli, [*base, "--new-ledger", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["budget_remaining"] == 0.75
    out = runner.invoke(cli, [*base, "--json"])                # the new ledger now exists
    assert out.exit_code == 0 and json.loads(out.output)["budget_remaining"] == 0.5

    out = runner.invoke(cli, ["release", "--state-topic", "no-such-state-topic", "-b",
                              kafka_broker.bootstrap, "--epsilon", "0.25"])
    assert out.exit_code == 1 and "does not exist" in out.output
    assert out.output.count("\n") == 1
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        assert "no-such-state-topic" not in admin.list_topics()   # a reader never creates it
    finally:
        admin.close()

    out = runner.invoke(cli, ["release", "--state-topic", state_topic, "--epsilon", "0.25"],
                        env={"PANSTREAM_KAFKA_BOOTSTRAP": None})
    assert out.exit_code == 2 and "needs -b/--bootstrap-server" in out.output
    out = runner.invoke(cli, ["release", "--state-topic", state_topic, "-b",
                              kafka_broker.bootstrap, "-C", "fetch_max_byte=1", "--epsilon", "1"])
    assert out.exit_code == 2 and "did you mean fetch_max_bytes" in out.output


# ---------------------------------------------------------------- the ledger records (no broker)
def test_consumers_never_overwrite_the_charged_ledger() -> None:
    """A consumer that checked an empty topic and writes its initial ledger late (it raced a whole
    group and a release) does not reset the budget: releases charge another record."""
    log = MemoryLog()
    late = TopicStore(log, 1000)
    assert late.keys() == [] and late.read_ledger() is None   # the late consumer's check ...
    first = TopicStore(log, 1000)
    assert ensure_ledger(first, 1.0)
    first.save("ev/0", encode_shard(DensityEstimator("range:1024"), ONE))
    assert not ensure_ledger(TopicStore(log, 1000), 1.0)      # shards exist: left alone
    rel, _ = release_store(TopicStore(log, 1000), 0.75, keyed=True)
    late.create_ledger(b'{"budget": 1.0, "entries": []}')    # ... and its write, much later
    store = TopicStore(log, 1000)
    assert store.keys() == ["ev/0"]                           # ledger records are not shards
    assert json.loads(store.read_ledger() or b"")["entries"][0]["epsilon"] == 0.75
    with pytest.raises(BudgetExhaustedError, match="refused"):
        release_store(store, 0.5, keyed=True)
