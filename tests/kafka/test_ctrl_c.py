"""Ctrl+C stops ``panstream kafka`` cleanly and says so by its exit status (issue 37).

SIGINT used to end a member with exit 0, like SIGTERM: a ``set -e`` script or ``make`` that ran
``panstream kafka ...`` went on as if the run had ended by itself. Now SIGINT makes the same final
checkpoint and commit, prints the summary, then exits 130 (128 + 2, what a shell reports for an
interrupted command); SIGTERM, a service manager's ordinary stop, stays 0 (tests/kafka/
test_broker.py).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from _kafka_helpers import GROUP_SETTINGS, Broker, Producer, free_port, kill_left, panstream_cmd

pytestmark = pytest.mark.kafka


def _assigned(port: int) -> float:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return 0.0
    for line in text.splitlines():
        if line.startswith("panstream_kafka_assigned_partitions "):
            return float(line.split()[1])
    return 0.0


@pytest.mark.parametrize("layout", ["partition", "slices"])
def test_ctrl_c_exits_130_after_the_final_checkpoint(
        kafka_broker: Broker, topic_factory: Callable[..., str], produce: Producer,
        tmp_path: Path, layout: str) -> None:
    """Both layouts; the routed one reads with librdkafka, in a child process of the command
    (docs/kafka.md, Topology changes): the command forwards the signal once and exits with the
    member's 130."""
    topic = topic_factory(1)
    produce(topic, [b"10.0.0.1", b"10.0.0.2"])
    port = free_port()
    args = ["kafka", "-b", kafka_broker.bootstrap, "-t", topic, "-g", f"g-ctrl-c-{layout}", "-u",
            "ipv4:10.0.0.0/16", "--epsilon", "1", "--checkpoint-interval", "0.5", "--json",
            "--layout", layout, "--state-dir", str(tmp_path / "state"), "--metrics-port",
            str(port)]
    for k, v in GROUP_SETTINGS.items():
        args += ["-C", f"{k}={v}"]
    log = tmp_path / "member.log"
    with open(log, "wb") as out:
        p = subprocess.Popen(panstream_cmd(*args), stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while _assigned(port) < 1:  # its loop runs: the signal handlers are set
            assert time.monotonic() < deadline and p.poll() is None, log.read_text()
            time.sleep(0.1)
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=60) == 130, log.read_text()
    finally:
        kill_left(p)
    summary = json.loads(log.read_text().splitlines()[-1])
    assert summary["stopped_by"] == "signal" and "Traceback" not in log.read_text()
