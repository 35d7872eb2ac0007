"""The routed layout against a real broker, beyond log lines (the layout itself and its law:
``test_routed.py``, whose helpers and bounds this file shares): an item topic keyed by anything,
kept in a state topic; an IPv6 universe of /64s; the frequency family's multiplicities. Each is one
table: every client's cell reads 1 at ``--epsilon 30`` (false failure below 1e-16), and a release
at a realistic epsilon is within 5.33 standard errors (normal tail 1e-7).
"""

from __future__ import annotations

import json
import math
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _kafka_helpers import Broker, assert_frequency_truths, committed_offsets, panstream_cmd
from test_routed import IDLE, Z, member_argv, release_json, send_round_robin

from panstream.calibration import calibrate
from panstream.state.stores import DirectoryStore, merge_store
from panstream.universe import Universe

pytestmark = pytest.mark.kafka


def run_member(broker: Broker, topic: str, group: str, universe: str, *extra: str,
               state: Path | None = None) -> dict[str, Any]:
    """One bounded member; returns its JSON summary."""
    argv = member_argv(broker, topic, group, universe, state or Path("/nonexistent"), *extra,
                       "--idle-timeout", IDLE)
    if state is None:  # --state-topic given in extra instead
        i = argv.index("--state-dir")
        del argv[i:i + 2]
    run = subprocess.run(argv, capture_output=True, timeout=120)
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    out: dict[str, Any] = json.loads(run.stdout)
    return out


def test_an_item_topic_keyed_by_anything_in_a_state_topic(
        kafka_broker: Broker, topic_factory: Callable[..., str], producer: Any, admin: Any,
        tmp_path: Path) -> None:
    """Bare addresses keyed by a random request id (an item reaches every partition): one table
    in a state topic, released from the topic at state epsilon x1 within 5.33 standard errors."""
    universe = Universe.parse("ipv4:10.0.0.0/16")
    topic = topic_factory(4)
    rng = np.random.default_rng(23)
    cells = rng.choice(universe.size, 3000, replace=False)
    stream = rng.permutation(np.concatenate([cells, rng.choice(cells, 3000)]))
    futures = [producer.send(topic, value=universe.item_of(int(c)).encode(),
                             key=rng.bytes(8)) for c in stream]
    producer.flush()
    hw: dict[int, int] = {}
    for f in futures:
        md = f.get(timeout=30)
        hw[md.partition] = max(hw.get(md.partition, 0), md.offset + 1)
    state_topic = f"{topic}-state"
    out = run_member(kafka_broker, topic, "g-anykey", universe.spec, "--epsilon", "1",
                     "--state-topic", state_topic)
    assert out["layout"] == "slices" and out["format"] == "auto"
    assert committed_offsets(admin, "g-anykey") == hw
    rel = subprocess.run(panstream_cmd("release", "-b", kafka_broker.bootstrap, "--state-topic",
                                       state_topic, "--epsilon", "0.5", "--json"),
                         capture_output=True, timeout=60)
    assert rel.returncode == 0, rel.stderr.decode()
    r = json.loads(rel.stdout)
    assert r["state_tables"] == 1 and r["sensitivity"] == 1
    assert r["epsilon_state"] == pytest.approx(calibrate(1).epsilon_state)
    assert abs(r["distinct"] - 3000) <= Z * r["stderr_density"] * r["size"], r
    # inspect reads the topic (never creates it, appends nothing): layout, slices, family and the
    # ledger replayed from its reservation log; never an estimate
    ins = subprocess.run(panstream_cmd("inspect", "-b", kafka_broker.bootstrap, "--state-topic",
                                       state_topic, "--json"), capture_output=True, timeout=60)
    assert ins.returncode == 0, ins.stderr.decode()
    d = json.loads(ins.stdout)
    assert (d["layout"], d["universe"], d["slices"]) == ("slices", universe.spec, 16)
    assert d["slices_present"] == list(range(16)) and d["estimator"] == ["density"]
    assert d["parameters"]["epsilon"] == 1 and d["epsilon_state"] == pytest.approx(
        calibrate(1).epsilon_state)
    assert (d["budget"], d["budget_spent"], d["releases"]) == (1, 0.5, 1)
    assert not {"distinct", "density", "estimate"} & set(d)
    text = subprocess.run(panstream_cmd("inspect", "-b", kafka_broker.bootstrap, "--state-topic",
                                        state_topic), capture_output=True, timeout=60)
    out = text.stdout.decode()
    assert text.returncode == 0 and f"state topic      {state_topic}" in out, out
    assert "in 16 slices (16 saved: 0-15)" in out and "output budget    1: spent 0.5 in 1" in out
    assert "internal topic   g-anykey-cells: drained (every routed record applied" in out, out
    missing = subprocess.run(panstream_cmd("inspect", "-b", kafka_broker.bootstrap,
                                           "--state-topic", f"{state_topic}-typo"),
                             capture_output=True, timeout=60)
    assert missing.returncode == 1 and missing.stderr.decode().startswith("panstream: error:")


def test_an_ipv6_universe_of_64s_is_one_table(kafka_broker: Broker,
                                               topic_factory: Callable[..., str], producer: Any,
                                               tmp_path: Path) -> None:
    """Several addresses of one /64, keyed by the address, reach several partitions; their cell
    still has one bit. At epsilon 30 the table reads exactly the /64s seen."""
    universe = Universe.parse("ipv6:2001:db8::/48@64")
    topic = topic_factory(4)
    rng = np.random.default_rng(29)
    nets = rng.choice(universe.size, 2000, replace=False)
    addrs = [f"2001:db8:0:{n:x}:{rng.integers(1, 1 << 16):x}::{i % 7 + 1:x}"
             for i, n in enumerate(np.repeat(nets, 3))]
    futures = [producer.send(topic, value=a.encode(), key=a.encode()) for a in addrs]
    producer.flush()
    for f in futures:
        f.get(timeout=30)
    state = tmp_path / "state"
    run_member(kafka_broker, topic, "g-v6", universe.spec, "--epsilon", "30", state=state)
    g = merge_store(DirectoryStore(state))
    assert (g.method, g.state_tables, g.estimator.universe.spec) == ("slices", 1, universe.spec)
    bits = g.estimator.bits()
    assert int((bits[nets] == 0).sum()) <= 2 and int(bits.sum()) - int(bits[nets].sum()) <= 2
    g.estimator.wipe()
    out = release_json(state, 0.5)
    assert out["state_tables"] == 1 and abs(out["distinct"] - 2000) <= math.log(1e7) / 0.5 + 3


def test_the_frequency_family_routes_multiplicities(
        kafka_broker: Broker, topic_factory: Callable[..., str], produce: Any, tmp_path: Path,
        producer: Any) -> None:
    """Counters need every arrival, not the set: 1000 clients seen once, twice and three times,
    unkeyed round robin; the release's counts are within 5.33 standard errors (4 checks)."""
    universe = Universe.parse("ipv4:10.0.0.0/16")
    topic = topic_factory(4)
    rng = np.random.default_rng(31)
    cells = rng.choice(universe.size, 3000, replace=False)
    stream = rng.permutation(np.repeat(cells, np.repeat([1, 2, 3], 1000)))
    send_round_robin(producer, topic, [universe.item_of(int(c)).encode() for c in stream], 4, {})
    state = tmp_path / "state"
    out = run_member(kafka_broker, topic, "g-freq-routed", universe.spec, "--estimator",
                     "frequency", "--modulus", "8", "--epsilon", "2", state=state)
    assert out["estimator"] == "frequency" and out["layout"] == "slices"
    rel = release_json(state, 1.0)
    assert rel["modulus"] == 8 and "at-least-once" in rel["replay_note"]
    stats = rel["stats"]
    assert_frequency_truths(stats, Z)
