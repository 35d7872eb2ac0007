"""docker/: the compose file parses and wires a KRaft single-node Kafka to a panstream consumer.

No container engine runs in CI; this checks structure and the settings that must hold, and runs
the compose file's panstream services as the container would (their own command and environment,
the Dockerfile's entrypoint) against the suite's broker: they must start, consume and stop cleanly.
(Issue 37: the compose file set a ``-C`` key the default librdkafka client rejects; the service
exited 2 at start and ``restart: unless-stopped`` looped, and nothing here ran it.)
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from _kafka_helpers import Broker, committed_offsets, free_port, kill_left, panstream_cmd
from metrics_scrape import samples
from test_broker import wait_for

from panstream.cli.cmd_kafka import command
from panstream.state.stores import DirectoryStore

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


def _listeners(value: str) -> dict[str, tuple[str, int]]:
    """``NAME://host:port,...`` as ``{NAME: (host, port)}``."""
    out = {}
    for part in value.split(","):
        name, _, addr = part.partition("://")
        host, _, port = addr.rpartition(":")
        out[name] = (host, int(port))
    return out


def check_listeners(doc: dict) -> list[str]:  # type: ignore[type-arg]
    """Everything wrong with the broker's listener settings (an empty list when consistent)."""
    kafka = doc["services"]["kafka"]
    env = kafka["environment"]
    bound = _listeners(env["KAFKA_LISTENERS"])
    advertised = _listeners(env["KAFKA_ADVERTISED_LISTENERS"])
    protocols = dict(p.split(":") for p in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    published = {}
    for mapping in kafka.get("ports", []):
        host_ip, host_port, container_port = str(mapping).split(":")
        published[int(container_port)] = (host_ip, int(host_port))
    problems = []
    for name in bound:
        if name not in protocols:
            problems.append(f"listener {name} has no security protocol")
    for name, (host, port) in advertised.items():
        if name not in bound or bound[name][1] != port:
            problems.append(f"advertised {name}://{host}:{port} is not bound on that port")
        if host in ("localhost", "127.0.0.1") and published.get(port) != ("127.0.0.1", port):
            problems.append(f"host listener {name} port {port} is not published on 127.0.0.1:{port}")
    for port, (host_ip, _) in published.items():
        if host_ip != "127.0.0.1":
            problems.append(f"port {port} is published beyond loopback ({host_ip})")
        names = [n for n, (h, p) in advertised.items() if p == port]
        if not any(advertised[n][0] in ("localhost", "127.0.0.1") for n in names):
            problems.append(f"port {port} is published but advertises no host-resolvable name: "
                            "a host client would be redirected to an address it cannot reach")
    for name in env["KAFKA_CONTROLLER_LISTENER_NAMES"].split(","):
        if name not in bound or name in advertised:
            problems.append(f"controller listener {name} must be bound and not advertised")
    if env["KAFKA_INTER_BROKER_LISTENER_NAME"] not in advertised:
        problems.append("the inter-broker listener is not advertised")
    bootstrap = doc["services"]["panstream"]["environment"]["PANSTREAM_KAFKA_BOOTSTRAP"]
    host, _, port = bootstrap.rpartition(":")
    if (host, int(port)) not in advertised.values() or host != kafka.get("hostname"):
        problems.append(f"the panstream service bootstraps from {bootstrap}, which the broker does "
                        "not advertise under its compose hostname")
    return problems


def test_compose_listeners_serve_both_the_compose_network_and_the_host() -> None:
    doc = yaml.safe_load((DOCKER / "docker-compose.yml").read_text())
    assert check_listeners(doc) == []
    advertised = _listeners(doc["services"]["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"])
    assert ("localhost", 9094) in advertised.values()  # what the docs tell host producers to use


def test_the_listener_check_catches_the_old_single_listener_compose() -> None:
    """The shipped defect: only kafka:9092 advertised, yet 9092 published to the host. A host
    producer bootstraps, then is told to reconnect to 'kafka', which it cannot resolve."""
    doc = yaml.safe_load((DOCKER / "docker-compose.yml").read_text())
    env = doc["services"]["kafka"]["environment"]
    env["KAFKA_LISTENERS"] = "PLAINTEXT://:9092,CONTROLLER://:9093"
    env["KAFKA_ADVERTISED_LISTENERS"] = "PLAINTEXT://kafka:9092"
    env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"] = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    doc["services"]["kafka"]["ports"] = ["127.0.0.1:9092:9092"]
    assert any("advertises no host-resolvable name" in p for p in check_listeners(doc))
    env["KAFKA_LISTENERS"] += ",EXTERNAL://:9094"
    env["KAFKA_ADVERTISED_LISTENERS"] += ",EXTERNAL://localhost:9094"  # no protocol, not published
    problems = check_listeners(doc)
    assert any("EXTERNAL has no security protocol" in p for p in problems)
    assert any("not published on 127.0.0.1:9094" in p for p in problems)


def test_dockerfile_does_not_delete_its_own_workdir() -> None:
    text = (DOCKER / "Dockerfile").read_text()
    workdirs = [ln.split()[1] for ln in text.splitlines() if ln.startswith("WORKDIR ")]
    removed = [w for ln in text.splitlines() if "rm -rf" in ln
               for w in ln.split("rm -rf", 1)[1].split("&&")[0].split()]
    current = "/"
    for ln in text.splitlines():
        if ln.startswith("WORKDIR "):
            current = ln.split()[1]
        if "rm -rf" in ln:
            gone = ln.split("rm -rf", 1)[1].split("&&")[0].split()
            assert not any(current == g or current.startswith(g.rstrip("/") + "/") for g in gone), ln
    assert workdirs and set(workdirs).isdisjoint(removed)


def _compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((DOCKER / "docker-compose.yml").read_text())
    return doc


def panstream_services(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The services that run the panstream image (built from docker/Dockerfile)."""
    return {name: s for name, s in doc["services"].items()
            if (s.get("build") or {}).get("dockerfile") == "docker/Dockerfile"}


def test_the_compose_file_states_its_compose_version_and_the_routed_layout() -> None:
    head = (DOCKER / "docker-compose.yml").read_text().split("\nname:")[0]
    assert "Docker Compose v2" in head and "docker-compose 1.x" in head
    assert "routed layout" in head and "panstream-cells" in head
    assert "one shard file per partition" not in head  # the old per-partition layout


def test_the_source_topic_is_created_before_the_consumer_starts() -> None:
    """librdkafka (the default source client) stops on a topic that does not exist: a one-shot
    service creates it, and every panstream service waits for it to complete."""
    doc = _compose()
    topics = doc["services"]["topics"]
    argv = topics["command"]
    for ps in panstream_services(doc).values():
        topic = ps["environment"]["PANSTREAM_KAFKA_TOPIC"]
        assert argv[argv.index("--topic") + 1] == topic and "--if-not-exists" in argv
        assert ps["depends_on"]["topics"]["condition"] == "service_completed_successfully"


def _by_partition(got: list[tuple[str, dict[str, str], float]], name: str, topic: str
                  ) -> dict[int, float]:
    return {int(lab["partition"]): v for n, lab, v in got if n == name and lab.get("topic") == topic}


@pytest.mark.kafka
def test_the_compose_services_consume_with_their_own_command_and_environment(
        kafka_broker: Broker, topic_factory: Callable[..., str], producer: Any, admin: Any,
        tmp_path: Path) -> None:
    """Each panstream service runs as its container would: the Dockerfile's entrypoint with the
    service's command and every variable it sets. Substituted are only what names the
    container's world: the broker address and the topic (the suite's broker, a fresh topic of the
    partitions the ``topics`` service creates), the state volume's path (a temporary directory),
    and the metrics address (127.0.0.1 on a free port: the tests touch loopback only). It must
    start (no exit 2 at start), consume every message (the source offsets committed up to the
    high-water marks, one slice snapshot per slice of the group's one table) and stop on SIGTERM
    with exit 0, as ``docker stop`` does. Its metrics endpoint shows the source topic's committed
    offsets and lag (issue 37: only the internal topic's were served)."""
    doc = _compose()
    dockerfile = (DOCKER / "Dockerfile").read_text()
    image_env = dict(re.findall(r"(PANSTREAM_\w+)=(\S+)", dockerfile))
    argv_create = doc["services"]["topics"]["command"]
    partitions = int(argv_create[argv_create.index("--partitions") + 1])
    services = panstream_services(doc)
    assert services, "no service runs the panstream image"
    for name, service in services.items():
        topic = topic_factory(partitions)
        state = tmp_path / name
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("PANSTREAM_")}
        env |= image_env
        env |= {k: str(v) for k, v in service["environment"].items()}
        group = env["PANSTREAM_KAFKA_GROUP"]
        env |= {"PANSTREAM_KAFKA_BOOTSTRAP": kafka_broker.bootstrap,
                "PANSTREAM_KAFKA_TOPIC": topic, "PANSTREAM_STATE_DIR": str(state),
                "PANSTREAM_METRICS_PORT": str(port), "PANSTREAM_METRICS_HOST": "127.0.0.1"}
        assert set(service["environment"]) - set(env) == set()
        values = [f"10.0.{i // 250}.{i % 250}".encode() for i in range(2000)]
        futures = [producer.send(topic, value=v, partition=i % partitions)
                   for i, v in enumerate(values)]
        producer.flush()
        hw: dict[int, int] = {}
        for f in futures:
            md = f.get(timeout=30)
            hw[md.partition] = max(hw.get(md.partition, 0), md.offset + 1)
        log = tmp_path / f"{name}.log"
        out = open(log, "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(panstream_cmd(*service["command"]), env=env, stdout=out,
                                stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: committed_offsets(admin, group, topic) == hw, 120,
                     f"{name}: every source message consumed and committed", [proc])

            def served() -> bool:
                try:
                    got = samples(port)
                except OSError:
                    return False
                return (_by_partition(got, "panstream_kafka_committed_offset", topic) == hw
                        and set(_by_partition(got, "panstream_kafka_consumer_lag", topic))
                        == set(hw))
            wait_for(served, 60, f"{name}: the source topic's offsets on /metrics", [proc])
            got = samples(port)
            assert set(_by_partition(got, "panstream_kafka_consumer_lag", topic).values()) == {0}
            assert any(n == "panstream_kafka_checkpoints_total" for n, _, _ in got)  # a counter: _total
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0, log.read_text()[-2000:]
        finally:
            kill_left(proc)
            out.close()
        text = log.read_text()
        assert "Traceback" not in text and "error" not in text, text[-2000:]
        keys = sorted(DirectoryStore(state).keys())
        assert keys and all(k.startswith(f"{group}-cells/") for k in keys), keys
