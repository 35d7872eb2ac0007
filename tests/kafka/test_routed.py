"""The routed layout against a real broker: any topic, one table.

A log shipper writes whole access-log lines, 500 per message, no key, round robin over 8
partitions. Two ``panstream kafka`` members route the parsed clients by cell range through
``<group>-cells`` and keep only their slices; one of them is killed with ``kill -9`` mid-run and
restarted. The group's store is then exactly one table: every client is in it, and the release
charges state epsilon x1 and sensitivity 1, with no ``--keyed`` assertion.

"Nothing lost" runs at ``--epsilon 30`` (see tests/kafka/test_broker.py: at most 2 zeros among the
seen cells fails falsely with probability below 1e-16). At state epsilon 30 the table is exact, so
a release's error is its Laplace noise alone: ``|distinct - truth| <= ln(1e7) / epsilon_out`` fails
with probability 1e-7 (P(|L| > t) = exp(-t epsilon) for Laplace of scale 1/epsilon). Statistical
checks at realistic epsilons allow 5.33 standard errors (normal tail 1e-7).

Other topics and tables through the routed layout (an item topic keyed by anything, in a state
topic; an IPv6 universe; the frequency family) are in ``test_routed_tables.py``, which shares this
file's helpers (apart so that the suite's workers share the broker time).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _kafka_helpers import (
    ROUTED_IDLE,
    Broker,
    all_exit_0,
    committed_offsets,
    group_options,
    kill_left,
    panstream_cmd,
)
from test_broker import start, wait_for

from panstream.calibration import calibrate
from panstream.state.stores import DirectoryStore, merge_store, store_layout
from panstream.universe import Universe

pytestmark = pytest.mark.kafka

Z = 5.33
#: A bounded member stops this long after its last work, and only once its group has drained
#: (``_kafka_helpers.ROUTED_IDLE``): a member killed with ``kill -9`` keeps its partitions until
#: its session expires, and a survivor that goes quiet meanwhile finds the dead member's records
#: pending and waits for them (the kill test idled 12 s to cover a session before members asked
#: whether the group had drained).
IDLE = ROUTED_IDLE


def member_argv(broker: Broker, topic: str, group: str, universe: str, state: Path,
                *extra: str) -> list[str]:
    args = ["kafka", "-b", broker.bootstrap, "-t", topic, "-g", group, "-u", universe,
            "--state-dir", str(state), "--checkpoint-interval", "0.5", "--json", *group_options()]
    return panstream_cmd(*args, *extra)


def clf(addr: str, i: int) -> str:
    return (f'{addr} - - [24/Nov/2026:10:{i // 60 % 60:02d}:{i % 60:02d} +0000] "GET /p/{i % 97} '
            f'HTTP/1.1" 200 {512 + i % 4096} "-" "Mozilla/5.0 (X11; Linux x86_64)"')


def clf_messages(universe: Universe, seed: int, distinct: int, repeats: int,
                 per_message: int) -> tuple[np.ndarray, list[bytes]]:
    """A log shipper's topic: ``distinct`` clients of ``universe`` and ``repeats`` more requests
    of theirs, shuffled, as CLF lines ``per_message`` to a message; and the clients (the truth)."""
    rng = np.random.default_rng(seed)
    clients = rng.choice(universe.size, distinct, replace=False)
    stream = rng.permutation(np.concatenate([clients, rng.choice(clients, repeats)]))
    lines = [clf(universe.item_of(int(c)), i) for i, c in enumerate(stream)]
    return clients, ["\n".join(lines[i:i + per_message]).encode()
                     for i in range(0, len(lines), per_message)]


def send_round_robin(producer: Any, topic: str, values: list[bytes], partitions: int,
                     hw: dict[int, int]) -> dict[int, int]:
    """Unkeyed, round robin (as a log shipper); returns the high-water marks so far."""
    futures = [producer.send(topic, value=v, partition=i % partitions)
               for i, v in enumerate(values)]
    producer.flush()
    for f in futures:
        md = f.get(timeout=30)
        hw[md.partition] = max(hw.get(md.partition, 0), md.offset + 1)
    return dict(hw)


def release_json(state: Path, epsilon: float) -> dict[str, Any]:
    rel = subprocess.run(panstream_cmd("release", "--state-dir", str(state), "--epsilon",
                                       str(epsilon), "--json"), capture_output=True, timeout=60)
    assert rel.returncode == 0, rel.stderr.decode()
    out: dict[str, Any] = json.loads(rel.stdout)
    return out


def test_log_shipper_topic_two_members_one_killed_is_one_table(
        kafka_broker: Broker, topic_factory: Callable[..., str], producer: Any, admin: Any,
        tmp_path: Path) -> None:
    universe = Universe.parse("ipv4:10.9.0.0/16")
    topic = topic_factory(8)
    clients, msgs = clf_messages(universe, 19, 20_000, 80_000, 500)
    hw: dict[int, int] = {}
    send_round_robin(producer, topic, msgs[:40], 8, hw)
    state = tmp_path / "state"
    group = "g-shipper"
    argv = member_argv(kafka_broker, topic, group, universe.spec, state, "--epsilon", "30",
                       "--value-format", "lines", "-f", "clf", "--slices", "4",
                       "-C", "max_poll_records=2", "--idle-timeout", IDLE)
    a = start(argv, tmp_path / "a.log")
    b = start(argv, tmp_path / "b.log")
    try:
        wait_for(lambda: sum(committed_offsets(admin, group).values()) > 0, 90,
                 "a first routed commit", [a, b])
        os.kill(a.pid, signal.SIGKILL)  # mid-run: 160 of the 200 messages are still to come
        a.wait(timeout=10)
        hw = send_round_robin(producer, topic, msgs[40:], 8, hw)
        a = start(argv, tmp_path / "a2.log")
    except BaseException:
        kill_left(a, b)
        raise
    all_exit_0([a, b], [tmp_path / "a2.log", tmp_path / "b.log"])
    assert committed_offsets(admin, group) == hw  # every source message routed, then committed
    log = (tmp_path / "a2.log").read_text()
    assert "this member now holds" in log and "4 slices of ipv4:10.9.0.0/16" in log

    store = DirectoryStore(state)
    assert store_layout(store)["layout"] == "slices"
    assert sorted(store.keys()) == [f"{group}-cells/{r}" for r in range(4)]
    g = merge_store(store)
    assert (g.method, g.state_tables, g.sensitivity) == ("slices", 1, 1)
    bits = g.estimator.bits()
    zeros = int((bits[clients] == 0).sum())
    assert zeros <= 2, f"{zeros} of 20,000 clients read 0: arrivals were lost"
    assert int(bits.sum()) - int(bits[clients].sum()) <= 2  # nothing else was seen
    g.estimator.wipe()

    out = release_json(state, 0.5)
    assert out["state_tables"] == 1 and out["sensitivity"] == 1
    assert out["epsilon_state"] == pytest.approx(calibrate(30).epsilon_state)  # x1, no K
    assert out["epsilon_total"] == pytest.approx(out["epsilon_state"] + 0.5)
    assert abs(out["distinct"] - 20_000) <= math.log(1e7) / 0.5 + 3
    assert out["distinct_low"] < 20_000 + 40 and out["distinct_high"] > 20_000 - 40


def test_a_topic_whose_values_do_not_parse_fails_loudly(
        kafka_broker: Broker, topic_factory: Callable[..., str], producer: Any, admin: Any,
        tmp_path: Path) -> None:
    """Whole access-log lines read as bare addresses: one line, exit 1, the -f that fixes it, and
    no offset committed (a restart with the right -f reads everything)."""
    topic = topic_factory(2)
    lines = [clf(f"10.9.{i % 200}.{i % 250}", i) for i in range(3000)]
    msgs = ["\n".join(lines[i:i + 500]).encode() for i in range(0, 3000, 500)]
    send_round_robin(producer, topic, msgs, 2, {})
    run = subprocess.run(member_argv(kafka_broker, topic, "g-bad", "ipv4:10.9.0.0/16",
                                     tmp_path / "s", "--epsilon", "1", "--value-format", "lines",
                                     "-f", "plain", "--idle-timeout", IDLE),
                         capture_output=True, timeout=90)
    assert run.returncode == 1, run.stderr.decode()
    err = [ln for ln in run.stderr.decode().splitlines() if ln.startswith("panstream: error:")]
    assert len(err) == 1 and "(-f plain, given): if the format is wrong" in err[0], err
    assert "; try -f clf (it reads addresses" in err[0] and "%" not in err[0].replace("1 %", ""), err
    assert committed_offsets(admin, "g-bad") == {}


def test_a_topic_whose_values_all_lie_outside_the_universe_fails_loudly(
        kafka_broker: Broker, topic_factory: Callable[..., str], producer: Any, admin: Any,
        tmp_path: Path) -> None:
    """Public clients into 10.9.0.0/16, -f auto on Caddy JSON values: the format is detected and
    announced once, every value parses, none is inside: exit 1 with the universe fix, nothing
    committed (the old rule judged only malformed values and routed nothing, silently). The
    suggestion is detect's answer alone since issue 37 (P1k): "may lie outside", not "most"."""
    topic = topic_factory(2)
    vals = [json.dumps({"request": {"remote_ip": f"198.51.100.{i % 250}", "remote_port": "4431"},
                        "status": 200}).encode() for i in range(1500)]
    send_round_robin(producer, topic, vals, 2, {})
    run = subprocess.run(member_argv(kafka_broker, topic, "g-outside", "ipv4:10.9.0.0/16",
                                     tmp_path / "s", "--epsilon", "1", "--idle-timeout", IDLE),
                         capture_output=True, timeout=90)
    assert run.returncode == 1, run.stderr.decode()
    lines = run.stderr.decode().splitlines()
    err = [ln for ln in lines if ln.startswith("panstream: error:")]
    assert len(err) == 1 and "addresses may lie outside ipv4:10.9.0.0/16: check --universe" in err[0], err
    assert "read as Caddy JSON (-f json:request.remote_ip, detected)" in err[0], err
    assert "use a universe that holds them" in err[0], err
    assert [ln for ln in lines if "detected, decided once" in ln] == [
        f"panstream: {topic}: format Caddy JSON detected, decided once for this member "
        "(-f json:request.remote_ip pins it)"]
    assert committed_offsets(admin, "g-outside") == {}
