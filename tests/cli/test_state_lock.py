"""One process at a time per state: a release or rotate never races a running ingest.

Without the lock, `panstream release -s s.pst` during an ingest would record its budget charge in
the file, and the ingest's next checkpoint would overwrite it with its in-memory ledger: spent
budget silently refunded. A rotate would be undone the same way.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import panstream as ps
from panstream.cli.main import cli
from panstream.state.files import lock_path, state_lock


@pytest.fixture
def state(tmp_path: Path) -> Path:
    p = tmp_path / "s.pst"
    ps.DensityEstimator("ipv4:10.0.0.0/24").save(p)
    return p


@pytest.mark.parametrize("args", [["release", "--epsilon", "0.5"], ["rotate"],
                                  ["ingest", "/dev/null"]])
def test_a_state_in_use_is_refused_with_one_line(state: Path, args: list[str]) -> None:
    with state_lock(state, "ingest"):  # as a running 'panstream ingest -s state' holds it
        res = CliRunner().invoke(cli, [*args, "-s", str(state)])
    assert res.exit_code == 1, res.output
    assert "in use by another panstream process" in res.output and "Traceback" not in res.output
    assert ps.DensityEstimator.load(state).ledger.spent == 0  # nothing was charged or written


def test_the_lock_is_free_again_after_use(state: Path) -> None:
    with state_lock(state, "ingest"):
        pass
    res = CliRunner().invoke(cli, ["release", "-s", str(state), "--epsilon", "0.5"])
    assert res.exit_code == 0, res.output
    assert ps.DensityEstimator.load(state).ledger.spent == 0.5
    assert not Path(lock_path(state)).exists()  # nothing but the state stays in the directory
