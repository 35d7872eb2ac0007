"""A group with an identity (issue 35), on Tansu: a member that differs is refused, never mixed in.

The first member of a group writes the group's definition into its store (``group-definition.json``
in ``--state-dir``, ``#group/`` records in ``--state-topic``). Every later member compares its own
options with it before it routes, commits or produces anything, and one that differs stops with
exit 2 and one line naming the field and the way out. These tests play the operator mistakes of
issue 35's table against a real broker and check, for each refused member, that it left no trace:
the store's files are byte for byte the same, no consumer group offset moved, and the internal
topic holds no record more. Where two members race, the one that wrote first runs and its release
covers the truth (within 5.33 standard errors: false failure below 1e-7, no retries).

Records on the internal topic carry the definition's digest (header ``panstream-group``): a record
of another definition, or one that does not decode as this group's, is skipped with one warning
and committed past, so the group drains (before, one such record stopped every member for good).

A store written before this change (``fixtures/pre_identity_store``, made by main's code, see
:func:`test_a_store_written_before_definitions_resumes_adopts_and_releases`) releases as before,
refuses a member whose options differ from its snapshots, and resumes under the first member with
its options, which writes the definition.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _kafka_helpers import Broker, committed_offsets, kill_left, panstream_cmd
from kafka import KafkaConsumer, TopicPartition
from kafka.admin import NewTopic
from test_broker import start
from test_routed import IDLE, clf, member_argv, send_round_robin

from panstream.state.group_definition import GroupDefinition
from panstream.state.stores import DEFINITION_FILE, DirectoryStore, merge_store
from panstream.universe import Universe

UNIVERSE = Universe.parse("ipv4:10.9.0.0/16")
SLICES = 4
CLIENTS = 1500
LINES = 3000
Z = 5.33  # standard errors: two-sided normal tail 1e-7
FIXTURE = Path(__file__).parent / "fixtures" / "pre_identity_store"


def _topic(admin: Any, name: str, partitions: int = 4) -> str:
    admin.create_topics([NewTopic(name, partitions, 1)])
    return name


def _lines(seed: int, clients: int = CLIENTS, lines: int = LINES, base: int = 256
           ) -> tuple[np.ndarray, list[bytes]]:
    """``lines`` CLF lines from ``clients`` distinct addresses (cells from ``base``), 100 a
    message."""
    rng = np.random.default_rng(seed)
    cells = base + rng.choice(UNIVERSE.size - base, clients, replace=False)
    picks = np.concatenate([cells, rng.choice(cells, lines - clients)])
    rng.shuffle(picks)
    text = [clf(f"10.9.{c >> 8}.{c & 255}", i) for i, c in enumerate(picks)]
    return np.sort(cells), ["\n".join(text[i:i + 100]).encode() for i in range(0, lines, 100)]


def _argv(broker: Broker, topic: str, group: str, state: Path, *extra: str,
          universe: str = UNIVERSE.spec, epsilon: str = "8") -> list[str]:
    return member_argv(broker, topic, group, universe, state, "--epsilon", epsilon,
                       "--value-format", "lines", "-f", "clf", "--slices", str(SLICES),
                       "--idle-timeout", IDLE, *extra)


def _run(argv: list[str], timeout: float = 180) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, capture_output=True, timeout=timeout)


def _errors(run: subprocess.CompletedProcess[bytes]) -> list[str]:
    return [ln for ln in run.stderr.decode().splitlines() if ln.startswith("panstream: error:")]


def _records(broker: Broker, topic: str, admin: Any) -> int:
    """Records in ``topic`` from its start (0 if it does not exist: not asked, so that no
    metadata request creates it)."""
    if topic not in admin.list_topics():
        return 0
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    try:
        parts = c.partitions_for_topic(topic)
        if not parts:
            return 0
        tps = [TopicPartition(topic, p) for p in parts]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        n, quiet = 0, 0
        while quiet < 3:
            got = c.poll(timeout_ms=500)
            quiet = 0 if got else quiet + 1
            n += sum(len(v) for v in got.values())
        return n
    finally:
        c.close()


def _trace(broker: Broker, admin: Any, group: str, state: Path) -> dict[str, Any]:
    """Everything a member could have written: its store's files, its groups' offsets, its
    internal topics' records."""
    return {"files": {p.name: p.read_bytes() for p in sorted(state.rglob("*")) if p.is_file()},
            "offsets": [committed_offsets(admin, g) for g in (group, f"{group}-slices")],
            "records": [_records(broker, t, admin) for t in (f"{group}-cells", f"{group}-wcells")]}


def _release(state: Path) -> dict[str, Any]:
    rel = _run(panstream_cmd("release", "--state-dir", str(state), "--epsilon", "0.5", "--json"))
    assert rel.returncode == 0, rel.stderr.decode()
    out: dict[str, Any] = json.loads(rel.stdout)
    return out


def _covers(out: dict[str, Any], truth: int) -> None:
    assert abs(out["distinct"] - truth) <= Z * out["stderr_density"] * out["size"], out


@pytest.fixture(scope="module")
def defined(kafka_broker: Broker, admin: Any, producer: Any,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One topic (4 partitions, 3,000 CLF lines of 1,500 clients) and a group ``ident`` that has
    read it, so its store holds its definition and four slices."""
    topic = _topic(admin, "ident-src")
    clients, values = _lines(35)
    hw = send_round_robin(producer, topic, values, 4, {})
    state = tmp_path_factory.mktemp("ident")
    run = _run(_argv(kafka_broker, topic, "ident", state))
    assert run.returncode == 0, run.stderr.decode()[-3000:]
    yield {"topic": topic, "group": "ident", "state": state, "clients": clients, "hw": hw}


def test_the_first_member_writes_the_definition_and_release_names_it(
        kafka_broker: Broker, admin: Any, defined: dict[str, Any]) -> None:
    state = defined["state"]
    held = GroupDefinition.decode((state / DEFINITION_FILE).read_bytes())
    assert (held.group, held.layout, held.universe, held.family, held.epsilon, held.slices,
            held.internal_topic) == ("ident", "routed", UNIVERSE.spec, "density", 8.0, SLICES,
                                     "ident-cells")
    (src,) = held.sources
    assert (src.name, src.partitions) == (defined["topic"], 4) and src.topic_id  # Tansu gives IDs
    assert committed_offsets(admin, "ident") == defined["hw"]
    out = _release(state)
    assert out["group_definition"]["digest"] == held.digest
    _covers(out, CLIENTS)
    ins = _run(panstream_cmd("inspect", "--state-dir", str(state)))
    assert f"group            group ident: routed, {UNIVERSE.spec}" in ins.stdout.decode()


@pytest.mark.parametrize(("extra", "universe", "field"), [
    ((), "hashed-ip:65536", "universe (-u) (hashed-ip:65536)"),
    ((), "ipv4:10.0.0.0/15", "universe (-u) (ipv4:10.0.0.0/15)"),
    (("--estimator", "sketch"), "sketch:4096x24:ip", "universe (-u) (sketch:4096x24:ip)"),
    (("--window", "1h", "--release-epsilon", "0.5"), UNIVERSE.spec, "layout (windows)"),
    (("--calibration", "tight"), UNIVERSE.spec, "--calibration (tight)"),
], ids=["hashed-ip", "ipv4-15", "sketch", "window-1h", "calibration"])
def test_a_second_member_with_other_options_is_refused_before_it_routes(
        kafka_broker: Broker, admin: Any, defined: dict[str, Any], extra: tuple[str, ...],
        universe: str, field: str) -> None:
    before = _trace(kafka_broker, admin, "ident", defined["state"])
    run = _run(_argv(kafka_broker, defined["topic"], "ident", defined["state"], *extra,
                     universe=universe), timeout=90)
    (line,) = _errors(run)
    assert run.returncode == 2, run.stderr.decode()
    assert f"this member's {field} differs from the group definition" in line, line
    assert "nothing was routed, committed or produced" in line
    assert _trace(kafka_broker, admin, "ident", defined["state"]) == before


@pytest.mark.parametrize("extra", [("--window", "1h", "--release-epsilon", "0.5"),
                                   ("--layout", "partition", "--value-format", "item", "-f",
                                    "plain")], ids=["window-1h", "partition"])
def test_another_layout_under_the_same_group_name_is_refused_whatever_its_store(
        kafka_broker: Broker, admin: Any, defined: dict[str, Any], tmp_path: Path,
        extra: tuple[str, ...]) -> None:
    """Given a state of its own, a windowed or per-partition member named ``-g ident`` would
    share the consumer group ``ident`` with the routed group: the routed group's internal topic
    on the broker says the name is taken."""
    before = _trace(kafka_broker, admin, "ident", defined["state"])
    state = tmp_path / "own"
    run = _run(_argv(kafka_broker, defined["topic"], "ident", state, *extra), timeout=90)
    (line,) = _errors(run)
    assert run.returncode == 2 and "already names a routed group" in line, line
    assert "ident-cells exists" in line and "another -g" in line
    assert _trace(kafka_broker, admin, "ident", defined["state"]) == before
    assert not (state / DEFINITION_FILE).exists()


def test_one_state_dir_for_two_groups_on_two_topics_refuses_the_second(
        kafka_broker: Broker, admin: Any, producer: Any, defined: dict[str, Any]) -> None:
    other = _topic(admin, "ident-other")
    send_round_robin(producer, other, _lines(36, 400, 800)[1], 4, {})
    before = _trace(kafka_broker, admin, "ident", defined["state"])
    run = _run(_argv(kafka_broker, other, "ident-two", defined["state"]), timeout=90)
    (line,) = _errors(run)
    assert run.returncode == 2 and "this member's group (-g) (ident-two)" in line, line
    assert "holds one group" in line
    assert _trace(kafka_broker, admin, "ident", defined["state"]) == before
    assert committed_offsets(admin, "ident-two") == {} and _records(kafka_broker,
                                                                    "ident-two-cells", admin) == 0


@pytest.mark.parametrize("where", ["dir", "topic"])
def test_two_members_started_together_with_other_epsilons_one_is_refused(
        kafka_broker: Broker, admin: Any, defined: dict[str, Any], tmp_path: Path,
        where: str) -> None:
    """Started at the same instant: the directory's first link, or the state topic's first
    ``#group/`` record in log order, is the definition; the other member is refused."""
    group = f"race-{where}"
    state = tmp_path / "race"
    store_args: tuple[str, ...] = ()
    if where == "topic":  # the same member, its slices and definition in a state topic
        store_args = ("--state-topic", f"{group}-state")
    logs = [tmp_path / "eps8.log", tmp_path / "eps2.log"]
    procs = [start(_on(_argv(kafka_broker, defined["topic"], group, state, epsilon=e), store_args),
                   log) for e, log in zip(("8", "2"), logs, strict=True)]
    try:
        codes = [p.wait(timeout=180) for p in procs]
    finally:
        kill_left(*procs)
    if where == "dir":
        held = GroupDefinition.decode((state / DEFINITION_FILE).read_bytes())
    else:
        ins = _run(panstream_cmd("inspect", "--state-topic", f"{group}-state", "-b",
                                 kafka_broker.bootstrap, "--json"))
        assert ins.returncode == 0, ins.stderr.decode()
        held = GroupDefinition.decode(json.dumps(json.loads(ins.stdout)["group_definition"]))
    winner = 0 if held.epsilon == 8.0 else 1
    assert codes[winner] == 0, logs[winner].read_text()[-3000:]
    assert codes[1 - winner] == 2, logs[1 - winner].read_text()[-3000:]
    refused = [ln for ln in logs[1 - winner].read_text().splitlines()
               if ln.startswith("panstream: error:")]
    assert len(refused) == 1 and "--epsilon" in refused[0], refused
    assert committed_offsets(admin, group) == defined["hw"]
    if where == "dir":
        _covers(_release(state), CLIENTS)
    else:
        rel = _run(panstream_cmd("release", "--state-topic", f"{group}-state", "-b",
                                 kafka_broker.bootstrap, "--epsilon", "0.5", "--json"))
        assert rel.returncode == 0, rel.stderr.decode()
        out = json.loads(rel.stdout)
        assert out["group_definition"]["digest"] == held.digest
        _covers(out, CLIENTS)


def _on(argv: list[str], store_args: tuple[str, ...]) -> list[str]:
    """``argv`` with its ``--state-dir DIR`` replaced by ``store_args`` (if any)."""
    if not store_args:
        return argv
    i = argv.index("--state-dir")
    return [*argv[:i], *store_args, *argv[i + 2:]]


def test_records_of_another_definition_are_skipped_and_the_group_still_drains(
        kafka_broker: Broker, admin: Any, producer: Any, defined: dict[str, Any],
        tmp_path: Path) -> None:
    """A record stamped by another definition and a record in another layout wait in the
    internal topic before the group starts: each is said once, skipped, committed past."""
    _topic(admin, "skip-cells", SLICES)
    producer.send("skip-cells", value=b"\x05\x00", partition=0,
                  headers=[("panstream-group", b"0123456789abcdef")]).get(timeout=30)
    producer.send("skip-cells", value=b"\x05\x00\x01", partition=1).get(timeout=30)
    state = tmp_path / "skip"
    run = _run(_argv(kafka_broker, defined["topic"], "skip", state, epsilon="30"))
    err = run.stderr.decode()
    assert run.returncode == 0, err[-3000:]
    warned = [ln for ln in err.splitlines() if "skipped, not applied" in ln]
    assert len(warned) == 2, warned  # one line each, in the order the slices were polled
    assert any("0123456789abcdef" in w for w in warned)
    assert any("in another layout" in w for w in warned)
    store = DirectoryStore(state)
    g = merge_store(store)
    bits = g.estimator.bits()
    clients = defined["clients"]
    assert int(bits[5]) == 0  # the foreign record's cell (slice 0, offset 5) was not applied
    assert int((bits[clients] == 0).sum()) <= 2 and int(bits.sum()) - int(bits[clients].sum()) <= 2
    g.estimator.wipe()
    assert committed_offsets(admin, "skip-slices")[0] >= 1  # committed past the foreign record


def test_a_store_written_before_definitions_resumes_adopts_and_releases(
        kafka_broker: Broker, admin: Any, producer: Any, tmp_path: Path) -> None:
    """``fixtures/pre_identity_store`` was made by main's code before issue 35 (commit a6c8342):
    Tansu, topic ``legacy-src`` (2 partitions) of 300 CLF lines from 256 clients of
    ``10.9.0.0/22`` (``10.9.{i % 4}.{7 i % 256}``, i < 300), one member ``panstream kafka -g
    legacy -u ipv4:10.9.0.0/22 --epsilon 30 --slices 4 --value-format lines -f clf
    --idle-timeout 2 --state-dir DIR``: four slices, their claim files, the ledger's opening."""
    state = tmp_path / "legacy"
    shutil.copytree(FIXTURE, state)
    old = {(i % 4) * 256 + (7 * i) % 256 for i in range(300)}
    before = _release(state)
    assert before["group_definition"] is None
    assert abs(before["distinct"] - len(old)) <= 2 / 0.5 * 16  # epsilon 30: the table is exact
    topic = _topic(admin, "legacy-src", 2)
    new = sorted(set(range(1024)) - old)[:100]
    lines = [clf(f"10.9.{c >> 8}.{c & 255}", i) for i, c in enumerate(new)]
    send_round_robin(producer, topic, ["\n".join(lines[i:i + 50]).encode()
                                       for i in range(0, 100, 50)], 2, {})
    argv = member_argv(kafka_broker, topic, "legacy", "ipv4:10.9.0.0/22", state,
                       "--value-format", "lines", "-f", "clf", "--slices", "4",
                       "--idle-timeout", IDLE)
    files = {p.name: p.read_bytes() for p in state.iterdir()}
    refused = _run([*argv, "--epsilon", "2"], timeout=90)
    (line,) = _errors(refused)
    assert refused.returncode == 2 and "--epsilon (2) differs" in line and "snapshots" in line
    assert {p.name: p.read_bytes() for p in state.iterdir()} == files  # nothing written
    run = _run([*argv, "--epsilon", "30"])
    assert run.returncode == 0, run.stderr.decode()[-3000:]
    held = GroupDefinition.decode((state / DEFINITION_FILE).read_bytes())
    assert (held.group, held.universe, held.epsilon, held.slices) == (
        "legacy", "ipv4:10.9.0.0/22", 30.0, 4)
    g = merge_store(DirectoryStore(state))
    ones = set(np.flatnonzero(g.estimator.bits()).tolist())
    g.estimator.wipe()
    assert len(ones ^ (old | set(new))) <= 2  # the old table resumed, the new clients added
    after = _release(state)
    assert after["group_definition"]["digest"] == held.digest
