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
