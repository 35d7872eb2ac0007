"""``panstream kafka --json`` speaks the common names of docs/schema/release.schema.json (family,
universe, epsilon.state/release/total), against the real broker started by conftest.py."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from _kafka_helpers import GROUP_SETTINGS, Broker, Producer, panstream_cmd
from schema_check import validate, validate_lines

pytestmark = pytest.mark.kafka


@pytest.mark.parametrize("estimator", ["density", "frequency"])
def test_the_consumer_summary_validates(kafka_broker: Broker, topic_factory: Callable[..., str],
                                        produce: Producer, tmp_path: Path,
                                        estimator: str) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, [b"10.0.0.1", b"10.0.0.2"], keys=[b"10.0.0.1", b"10.0.0.2"])
    argv = ["kafka", "-b", kafka_broker.bootstrap, "-t", topic, "-g", f"g-schema-{estimator}",
            "-u", "ipv4:10.0.0.0/16", "--estimator", estimator, "--epsilon", "1",
            "--state-dir", str(tmp_path / "state"), "--idle-timeout", "3", "--json"]
    for k, v in GROUP_SETTINGS.items():
        argv += ["-C", f"{k}={v}"]
    run = subprocess.run(panstream_cmd(*argv), capture_output=True, timeout=120)
    assert run.returncode == 0, run.stderr.decode()
    out = validate_lines(run.stdout.decode())[-1]
    validate(out, "state")
    assert out["family"] == estimator and out["epsilon"]["release"] == 0.0
