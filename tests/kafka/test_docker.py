"""docker/: the compose file parses and wires a KRaft single-node Kafka to a panstream consumer.

No container engine runs in CI; this checks structure and the settings that must hold.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from panstream.cli.cmd_kafka import command

DOCKER = Path(__file__).resolve().parents[2] / "docker"


def test_compose_parses_and_is_kraft_single_node() -> None:
    doc = yaml.safe_load((DOCKER / "docker-compose.yml").read_text())
    kafka = doc["services"]["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    env = kafka["environment"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    for key, value in env.items():
        if "REPLICATION_FACTOR" in key or key.endswith("MIN_ISR"):
            assert value == 1, key
    ps = doc["services"]["panstream"]
    assert ps["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert ps["build"]["dockerfile"] == "docker/Dockerfile"
    # Every PANSTREAM_ variable the service sets is one that `panstream kafka` reads.
    known = {p.envvar for p in command.params if getattr(p, "envvar", None)}
    assert set(ps["environment"]) <= known, set(ps["environment"]) - known
    assert "panstream-state" in doc["volumes"]


def test_dockerfile_runs_the_kafka_command_unprivileged() -> None:
    text = (DOCKER / "Dockerfile").read_text()
    assert "ENTRYPOINT [\"panstream\"]" in text and "USER panstream" in text
    assert "STOPSIGNAL SIGTERM" in text
