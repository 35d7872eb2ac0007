"""A habit from one command works in the other (issue 37).

``ingest`` says ``--checkpoint-every`` and ``-s/--state``, ``kafka`` said ``--checkpoint-interval``
and ``--state-dir``; ``ingest`` defaults ``--epsilon`` to 1 and takes ``--budget``, ``kafka``
required ``--epsilon`` and had no ``--budget`` although its help said "Instead of --epsilon and
--budget". Now each command accepts the other's spelling (a hidden alias: ``--help`` shows one
name), ``kafka`` defaults ``--epsilon`` to 1 and takes ``--budget`` for a new group ledger, with
the same ``--total-epsilon`` rules as ``ingest``. No broker is needed: a dead one on a free port
fails after the options are settled and the group's ledger is opened.
"""

from __future__ import annotations

import re
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import click
import pytest

from panstream.cli.cmd_ingest import command as ingest
from panstream.cli.cmd_kafka import command as kafka
from panstream.state.stores import LEDGER_FILE

Run = Callable[..., subprocess.CompletedProcess[bytes]]


def _params(cmd: click.Command, args: list[str]) -> dict[str, object]:
    with cmd.make_context(cmd.name or "x", args) as ctx:
        return dict(ctx.params)


def _help(cmd: click.Command) -> str:
    with click.Context(cmd) as ctx:
        return cmd.get_help(ctx)


@pytest.mark.usefixtures("clean_env")
def test_each_command_takes_the_others_spelling_and_shows_its_own() -> None:
    base = ["-b", "127.0.0.1:9", "-t", "logs", "-g", "g", "-u", "range:10"]
    got = _params(kafka, [*base, "-s", "/tmp/st", "--checkpoint-every", "7"])
    assert (got["state_dir"], got["checkpoint_interval"]) == ("/tmp/st", 7.0)
    assert _params(kafka, [*base, "--state", "/tmp/st"])["state_dir"] == "/tmp/st"
    assert got["epsilon"] == 1.0 and got["budget"] == 1.0  # as ingest's defaults
    assert _params(ingest, ["--checkpoint-interval", "7", "-"])["checkpoint_every"] == 7.0
    k, i = _help(kafka), _help(ingest)
    assert "--checkpoint-interval" in k and "--checkpoint-every" not in k and "--state-dir" in k
    assert "-s," not in k and "--state " not in k
    assert "--checkpoint-every" in i and "--checkpoint-interval" not in i


def test_ingest_runs_with_kafkas_spelling(run_cli: Run, tmp_path: Path) -> None:
    state = tmp_path / "s.pst"
    r = run_cli(["ingest", "-u", "ipv4:10.0.0.0/24", "-f", "plain", "-s", str(state),
                 "--checkpoint-interval", "0", "-"], stdin=b"10.0.0.1\n10.0.0.2\n")
    assert r.returncode == 0, r.stderr.decode()
    assert state.exists()


def _kafka(run_cli: Run, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[bytes]:
    """``panstream kafka`` against a loopback port where no broker answers (1 s wait)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return run_cli(["kafka", "-b", f"127.0.0.1:{port}", "-t", "logs", "-g", "g",
                    "-u", "ipv4:10.0.0.0/24", "-C", "bootstrap.timeout.ms=1000", *extra],
                   timeout=60)


def test_kafka_defaults_epsilon_to_1_and_takes_budget(run_cli: Run, tmp_path: Path) -> None:
    """``--epsilon`` defaults to 1 and ``--budget`` is taken: the options pass, and the run stops
    only because no broker answers. Nothing is written before the group's definition is settled
    on the broker (issue 35): no ledger yet. tests/kafka/test_budget_option.py opens one."""
    state = tmp_path / "st"
    r = _kafka(run_cli, tmp_path, "-s", str(state), "--budget", "3")
    err = r.stderr.decode()
    assert r.returncode == 1 and "no Kafka broker answered" in err, err  # options were fine
    assert not (state / LEDGER_FILE).exists()


@pytest.mark.parametrize(("extra", "says"), [
    (["--total-epsilon", "2", "--epsilon", "1"], "drop --epsilon"),
    (["--total-epsilon", "2", "--budget", "1"], "drop --budget"),
    (["--releases", "2"], "--releases goes with --total-epsilon"),
    (["--window", "1h", "-f", "clf", "--release-epsilon", "0.5", "--budget", "2"],
     "drop --budget"),
])
def test_kafka_refuses_what_ingest_refuses(run_cli: Run, tmp_path: Path, extra: list[str],
                                           says: str) -> None:
    r = _kafka(run_cli, tmp_path, "--state-dir", str(tmp_path / "st"), *extra)
    err = r.stderr.decode()
    assert r.returncode == 2 and says in err and "Traceback" not in err, err


DOCS = Path(__file__).resolve().parents[2] / "docs" / "kafka.md"


def test_kafka_help_leads_with_a_screen_of_essentials_and_every_option_is_in_the_docs() -> None:
    """The help's first screen (before the options list, under 40 lines) holds the essentials
    and a runnable example; the details live in docs/kafka.md, whose options table names every
    option the command takes, with its environment variable."""
    text = _help(kafka)
    head = text.split("\nOptions:")[0]
    assert len(head.splitlines()) <= 40, len(head.splitlines())
    for essential in ("-b HOST:PORT", "-t TOPIC", "-g GROUP", "-u UNIVERSE", "--state-dir",
                      "-f FORMAT", "--idle-timeout", "docs/kafka.md"):
        assert essential in head, essential
    assert "\n    panstream kafka -b " in head and "\n    panstream release --state-dir" in head
    table = [ln for ln in DOCS.read_text().split("\n## Options\n")[1].split("\n## ")[0]
             .splitlines() if ln.startswith("| `")]
    for p in kafka.params:
        if not isinstance(p, click.Option) or p.name == "help":
            continue
        names = [o for o in p.opts if o.startswith("--")]
        rows = [ln for ln in table if any(re.search(rf"(?<![\w-]){o}(?![\w-])", ln.split(" | ")[0])
                                          for o in names)]
        assert rows, f"{names} is not in the options table of docs/kafka.md"
        assert any(str(p.envvar) in ln or "..." in ln for ln in rows), (names, p.envvar)
