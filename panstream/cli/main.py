"""Entry point of the ``panstream`` command: discovers subcommands and maps errors to exit codes.

Exit codes: 0 success; 2 usage or configuration error (click's convention); 1 (or the error's own
code) for runtime errors, always with a one-line message on stderr and never a traceback for a user
mistake; 130 after a second Ctrl+C.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pkgutil
import sys
from typing import Any

import click

import panstream.cli as _pkg
from panstream import __version__
from panstream.errors import PanstreamError

_PREFIX = "cmd_"


def _command_modules() -> dict[str, str]:
    names = {}
    for mod in pkgutil.iter_modules(_pkg.__path__):
        if mod.name.startswith(_PREFIX):
            names[mod.name[len(_PREFIX):].replace("_", "-")] = f"{_pkg.__name__}.{mod.name}"
    return names


def _quiet_broken_pipe() -> None:
    """The reader of stdout went away (``panstream plan | head -1``): send what is left of stdout to
    /dev/null so that the interpreter's final flush does not complain, and exit 0 quietly."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    sys.exit(0)


class _LazyGroup(click.Group):
    """A group whose subcommands are imported only when used (fast ``--help`` and start-up), and
    whose usage errors are one ``panstream: error:`` line (click prints four)."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, False, **extra)
            sys.stdout.flush()
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "panstream"
            click.echo(f"panstream: error: {exc.format_message().rstrip('.')} (see '{where} "
                       "--help')", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo(f"panstream: error: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("panstream: aborted", err=True)
            sys.exit(1)
        except BrokenPipeError:
            _quiet_broken_pipe()
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        # click's own main turns a broken pipe into exit 1: stop quietly with 0 before it can.
        try:
            rv = super().invoke(ctx)
            sys.stdout.flush()
        except BrokenPipeError:
            _quiet_broken_pipe()
        return rv

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(_command_modules()))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        builtin = super().get_command(ctx, cmd_name)
        if builtin is not None:
            return builtin
        path = _command_modules().get(cmd_name)
        if path is None:
            return None
        cmd: click.Command = importlib.import_module(path).command
        return cmd


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"],
                                               "max_content_width": 100})
@click.version_option(__version__, prog_name="panstream")
def cli() -> None:
    """Pan-private stream measurement: count distinct clients without keeping who they were.

    panstream keeps only a randomized bit table over a public universe (an IPv4/IPv6 prefix, an
    integer range, or hash buckets of IDs). A leaked, stolen or subpoenaed table is
    epsilon-differentially private; published numbers carry their own noise and spend a privacy budget.

    \b
    Start here:
      panstream demo                                   # synthetic log, estimate vs truth
      panstream plan --universe ipv4:10.0.0.0/16 --epsilon 1
      tail -n +1 -F access.log | panstream ingest --universe ipv4:10.0.0.0/16 --state s.pst --format clf
      panstream release --state s.pst --epsilon 0.5
      panstream report --series daily.jsonl --map map.json -o report.html   # one page to share

    Every option can also be set through the PANSTREAM_... environment variable shown in each
    command's --help; explicit flags win.
    """


def main(argv: list[str] | None = None) -> Any:
    """Run the command line; convert panstream errors into one line on stderr and an exit code."""
    try:
        return cli.main(args=argv, prog_name="panstream", standalone_mode=True)
    except PanstreamError as exc:  # pragma: no cover - standalone_mode handles most paths
        click.echo(f"panstream: error: {exc}", err=True)
        sys.exit(exc.exit_code)


def fail(exc: PanstreamError) -> None:
    """Print a panstream error as one line and exit with its code (for use inside commands)."""
    click.echo(f"panstream: error: {exc}", err=True)
    sys.exit(exc.exit_code)
