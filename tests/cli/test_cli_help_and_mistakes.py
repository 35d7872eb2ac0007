"""What a user sees: every command's help teaches it, and a bad value is one error line, exit 2."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from panstream.cli.main import cli

ENV = {"PANSTREAM_UNIVERSE": None, "PANSTREAM_EPSILON": None, "PANSTREAM_STATE": None}


def run(*args: str, input: str | None = None):  # noqa: ANN201 - click's Result
    return CliRunner().invoke(cli, list(args), input=input, env=ENV, catch_exceptions=False)


def commands() -> list[str]:
    return cli.list_commands(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", commands())
def test_every_option_shows_its_environment_variable(name: str) -> None:
    cmd = cli.get_command(None, name)  # type: ignore[arg-type]
    assert cmd is not None
    for p in cmd.params:
        if not isinstance(p, click.Option) or p.name == "help":
            continue
        assert p.envvar and str(p.envvar).startswith("PANSTREAM_"), (name, p.name)
        assert getattr(p, "show_envvar", False), (name, p.name)


@pytest.mark.parametrize("name", ["audit", "demo", "ingest", "inspect", "plan", "rotate"])
def test_help_shows_an_example(name: str) -> None:
    out = run(name, "--help").stdout
    assert f"\n    panstream {name} " in out or f"| panstream {name} " in out, out


@pytest.mark.parametrize("args", [
    ["plan", "-u", "range:10", "--epsilon", "nan"],
    ["plan", "-u", "range:10", "--epsilon", "inf"],
    ["plan", "-u", "range:10", "--epsilon", "1", "--release-epsilon", "inf"],
    ["ingest", "-u", "range:10", "--checkpoint-every", "nan"],
    ["ingest", "-u", "range:10", "--release-every", "nan", "--release-epsilon", "0.1"],
    ["ingest", "-u", "range:10", "--budget", "inf"],
    ["audit", "--alpha", "nan"],
    ["demo", "--release-epsilon", "nan"],
])
def test_non_finite_numbers_are_a_usage_error_not_a_traceback(args: list[str]) -> None:
    r = run(*args, input="1\n")
    assert r.exit_code == 2, r.output
    assert "is not a finite number" in r.output and "Traceback" not in r.output


def test_rotate_takes_s_like_the_other_state_commands(tmp_path: Path) -> None:
    state = str(tmp_path / "s.pst")
    assert run("ingest", "-u", "range:10", "-s", state, input="1\n2\n").exit_code == 0
    r = run("rotate", "-s", state)
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(f"rotated {state}")
