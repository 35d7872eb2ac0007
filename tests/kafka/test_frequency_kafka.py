"""The frequency family through Kafka, against the real broker: a consumer group keeps one counter
table per partition, and the group's release merges them (counters from the owner partition).

Statistical checks compare each released figure with the truth within 5.33 of its standard errors
(normal tail 1e-7 each; four checks: false failure below 4e-7).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _kafka_helpers import (
    GROUP_SETTINGS,
    Broker,
    Producer,
    assert_frequency_truths,
    committed_offsets,
    panstream_cmd,
)

from panstream.state import format as fmt
from panstream.universe import Universe

pytestmark = pytest.mark.kafka

U = Universe.parse("ipv4:10.0.0.0/16")
Z = 5.33


def test_a_frequency_group_counts_how_often_and_releases_through_the_group_ledger(
        kafka_broker: Broker, topic_factory: Callable[..., str], produce: Producer, admin: Any,
        tmp_path: Path) -> None:
    topic = topic_factory(4)
    rng = np.random.default_rng(11)
    cells = rng.choice(U.size, 3000, replace=False)
    counts = np.repeat([1, 2, 3], 1000)                       # 1000 seen once, twice, 3 times
    stream = rng.permutation(np.repeat(cells, counts))
    items = [U.item_of(int(c)).encode() for c in stream]
    hw = produce(topic, items, keys=items)                     # keyed by the item
    state = tmp_path / "state"
    argv = ["kafka", "-b", kafka_broker.bootstrap, "-t", topic, "-g", "g-freq", "-u", U.spec,
            "--layout", "partition",
            "--estimator", "frequency", "--modulus", "8", "--epsilon", "2", "--state-dir",
            str(state), "--checkpoint-interval", "0.5", "--idle-timeout", "3", "--json"]
    for k, v in GROUP_SETTINGS.items():
        argv += ["-C", f"{k}={v}"]
    run = subprocess.run(panstream_cmd(*argv), capture_output=True, timeout=90)
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    assert json.loads(run.stdout)["estimator"] == "frequency"
    assert committed_offsets(admin, "g-freq") == hw

    # Four shard files of the frequency family, none with a ledger of its own.
    shards = sorted(state.glob("*.shard"))
    assert len(shards) == 4
    for path in shards:
        snap = fmt.decode(path.read_bytes())
        assert snap.kind == "frequency" and snap.params["modulus"] == 8 and snap.ledger is None

    rel = subprocess.run(panstream_cmd("release", "--state-dir", str(state), "--keyed",
                                       "--epsilon", "1", "--json"), capture_output=True, timeout=60)
    assert rel.returncode == 0, rel.stderr.decode()[-2000:]
    out = json.loads(rel.stdout)
    assert out["modulus"] == 8 and out["budget_remaining"] == pytest.approx(0.0)
    stats = out["stats"]
    assert_frequency_truths(stats, Z)

    # The group's one ledger is spent; a shard cannot be released on its own.
    again = subprocess.run(panstream_cmd("release", "--state-dir", str(state), "--keyed",
                                         "--epsilon", "0.1"), capture_output=True, timeout=60)
    assert again.returncode == 1 and b"spent" in again.stderr
    alone = subprocess.run(panstream_cmd("release", "-s", str(shards[0]), "--epsilon", "0.1"),
                           capture_output=True, timeout=60)
    assert alone.returncode == 1 and b"--state-dir" in alone.stderr

    # Resuming the group with the other family is refused with what the store holds: since
    # issue 35 by the group's definition, before the member routes anything (exit 2).
    argv[argv.index("frequency")] = "density"
    argv.remove("--modulus")
    argv.remove("8")
    wrong = subprocess.run(panstream_cmd(*argv), capture_output=True, timeout=90)
    assert wrong.returncode == 2, wrong.stderr.decode()
    assert b"family (--estimator) (density) differs" in wrong.stderr
    assert b"(frequency)" in wrong.stderr
