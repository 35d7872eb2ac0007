"""Review regression: an ingest that cannot open its inputs fails before creating a state file."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from panstream.cli.main import cli


def test_missing_second_input_fails_before_a_state_is_created(tmp_path: Path) -> None:
    good = tmp_path / "a.log"
    good.write_bytes(b"10.0.0.1\n")
    state = tmp_path / "new.pst"
    r = CliRunner().invoke(cli, ["ingest", "-u", "ipv4:10.0.0.0/16", "-s", str(state), str(good),
                                 str(tmp_path / "nope.log")])
    assert r.exit_code == 1
    assert r.output.startswith("panstream: error: cannot open") and "nope.log" in r.output
    assert len(r.output.strip().splitlines()) == 1
    assert not state.exists()  # nothing written for a run that could not start
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.log"]  # no temp file either
