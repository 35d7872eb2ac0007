"""The sketch family on the routed layout, against a real broker: any topic, one sketch.

A log shipper writes whole access-log lines of public IPv4 and IPv6 clients, 500 per message, no
key, round robin over 4 partitions. Two ``panstream kafka --estimator sketch`` members parse the
lines, hash every client to its cell of the 4096 x 24 Sketch-Flip-Merge grid, route the cells by
bucket range through ``<group>-cells`` (8 slices of 512 whole buckets) and keep only their slices.
The group's store is then one sketch: ``panstream inspect --state-dir`` says so, and
``panstream release --state-dir`` releases a distinct count with sensitivity 1 and state epsilon
x1 whose error is within its stated standard error.

False failure: the released count is checked against the truth at 5.33 of its printed standard
errors (state and release noise together; normal tail 1e-7, the normal approximation the
interval itself uses).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _kafka_helpers import Broker, all_exit_0, committed_offsets, panstream_cmd
from test_broker import start
from test_routed import clf, member_argv, release_json, send_round_robin

from panstream.calibration import calibrate
from panstream.sketch.estimator import SketchEstimator
from panstream.state.stores import DirectoryStore, merge_store

pytestmark = pytest.mark.kafka

Z = 5.33
TRUTH = 30_000


def public_clients(n: int, rng: np.random.Generator) -> list[str]:
    """n distinct clients: half IPv4 anywhere, half IPv6 in 2001:db8::/32 (test data only)."""
    v4 = rng.choice(1 << 32, n // 2, replace=False)
    out = [f"{a >> 24}.{(a >> 16) & 255}.{(a >> 8) & 255}.{a & 255}" for a in v4.tolist()]
    v6 = rng.choice(1 << 40, n - len(out), replace=False)
    out += [f"2001:db8:{a >> 32:x}:{(a >> 16) & 0xffff:x}::{a & 0xffff:x}" for a in v6.tolist()]
    return out


def test_unkeyed_log_lines_of_ipv4_and_ipv6_clients_make_one_sketch(
        kafka_broker: Broker, topic_factory: Callable[..., str], producer: Any, admin: Any,
        tmp_path: Path) -> None:
    rng = np.random.default_rng(22)
    clients = public_clients(TRUTH, rng)
    stream = rng.permutation(np.concatenate([np.arange(TRUTH), rng.integers(0, TRUTH, 30_000)]))
    lines = [clf(clients[int(c)], i) for i, c in enumerate(stream)]
    msgs = ["\n".join(lines[i:i + 500]).encode() for i in range(0, len(lines), 500)]
    topic = topic_factory(4)
    hw = send_round_robin(producer, topic, msgs, 4, {})
    state = tmp_path / "state"
    group = "g-sketch"
    argv = member_argv(kafka_broker, topic, group, "sketch:4096x24:ip", state, "--epsilon", "1",
                       "--estimator", "sketch", "--value-format", "lines", "-f", "clf",
                       "--slices", "8", "--idle-timeout", "5")
    a = start(argv, tmp_path / "a.log")
    b = start(argv, tmp_path / "b.log")
    all_exit_0([a, b], [tmp_path / "a.log", tmp_path / "b.log"], 240)
    assert committed_offsets(admin, group) == hw  # every source message routed, then committed
    log = (tmp_path / "a.log").read_text()
    assert "8 slices of sketch:4096x24:ip (98,304 cells): 12,288 cells = 512 buckets x 24 " \
           "levels" in log
    summary = json.loads(log.strip().splitlines()[-1])  # --json: one line, last
    assert summary["estimator"] == "sketch"
    assert summary["epsilon_state"] == pytest.approx(calibrate(1.0, "rr").epsilon_state)

    shown = subprocess.run(panstream_cmd("inspect", "--state-dir", str(state), "--json"),
                           capture_output=True, timeout=60)
    assert shown.returncode == 0, shown.stderr.decode()
    d = json.loads(shown.stdout)
    assert (d["layout"], d["estimator"], d["universe"]) == ("slices", ["sketch"],
                                                            "sketch:4096x24:ip")
    assert sorted(DirectoryStore(state).keys()) == [f"{group}-cells/{r}" for r in range(8)]
    g = merge_store(DirectoryStore(state))
    assert isinstance(g.estimator, SketchEstimator) and g.state_tables == 1
    g.estimator.wipe()

    out = release_json(state, 1.0)
    assert out["epsilon_state"] == pytest.approx(calibrate(1.0, "rr").epsilon_state)  # x1
    assert out["epsilon_total"] == pytest.approx(out["epsilon_state"] + 1.0)
    assert abs(out["distinct"] - TRUTH) <= Z * out["stderr"], out
    assert out["stderr"] < 0.05 * TRUTH  # a 12 KiB sketch, not a 2**128-cell table
