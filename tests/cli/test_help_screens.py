"""``ingest --help`` and ``release --help`` lead with one screen (issue 37).

The help used to run to 270 and 146 lines: a newcomer scrolled past paragraphs to find the one
example. Now the first screen holds the usage, what the command does and runnable examples, each
option's help is at most two lines, and the details live in the docs, whose option table names
every option the command takes (so nothing the help used to say is only in the code).
"""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from panstream.cli.cmd_ingest import command as ingest
from panstream.cli.cmd_release import command as release

DOCS = Path(__file__).resolve().parents[2] / "docs"
TWO_LINES = 130  # characters of an option's own help: two lines of a 65-column help column

# command, its page, the section heading whose table lists every option, what the screen holds
SCREENS = {
    "ingest": (ingest, "cli.md", "### Every `ingest` option",
               ("-u UNIVERSE", "-s FILE", "-f FORMAT", "-n N", "--window", "hashed-ip:M",
                "docs/cli.md", "\n    panstream ingest -u ", "| panstream ingest -u ")),
    "release": (release, "release.md", "## `panstream release`: every option",
                ("--epsilon", "--state-dir", "--state-topic", "docs/release.md", "docs/cli.md",
                 "\n    panstream release -s web.pst --epsilon 0.5",
                 "\n    panstream release --state-dir ", "--by /24")),
}


def _help(cmd: click.Command) -> str:
    with click.Context(cmd, info_name=cmd.name) as ctx:
        return cmd.get_help(ctx)


def _options(cmd: click.Command) -> list[click.Option]:
    return [p for p in cmd.params if isinstance(p, click.Option) and p.name != "help"]


@pytest.mark.parametrize("name", sorted(SCREENS))
def test_the_first_screen_holds_the_usage_and_examples(name: str) -> None:
    cmd, page, _, essentials = SCREENS[name]
    head = _help(cmd).split("\nOptions:")[0]
    assert len(head.splitlines()) <= 30, len(head.splitlines())
    assert head.startswith("Usage: ") and "Examples:" in head
    for essential in essentials:
        assert essential in head, essential
    assert f"docs/{page}" in head


@pytest.mark.parametrize("name", sorted(SCREENS))
def test_each_option_helps_in_two_lines_and_its_docs_row_says_the_rest(name: str) -> None:
    cmd, page, heading, _ = SCREENS[name]
    section = (DOCS / page).read_text().split(f"\n{heading}")[1].split("\n## ")[0]
    rows = [ln.split(" | ")[0] for ln in section.splitlines() if ln.startswith("| `")]
    for p in _options(cmd):
        assert len(p.help or "") <= TWO_LINES, (p.opts, len(p.help or ""))
        names = [o for o in p.opts + p.secondary_opts if o.startswith("--")]
        assert any(re.search(rf"(?<![\w-]){o}(?![\w-])", row) for row in rows for o in names), \
            f"{names} has no row in the options table of docs/{page}"
