"""Pictures of maps: the PNG exists, decodes, has the promised pixel size; a Hilbert layout keeps
neighbouring prefixes adjacent; a missing matplotlib names the extra before any budget is spent."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from fakes import hide_module

import panstream as ps
from panstream.cli.main import cli
from panstream.release.hilbert import d2xy
from panstream.release.plot import PIXELS, hilbert_grid

mpimg = pytest.importorskip("matplotlib.image")


def test_consecutive_hilbert_positions_are_neighbours() -> None:
    for order in range(6):
        xy = d2xy(order, np.arange(4**order))
        assert len({tuple(p) for p in xy.tolist()}) == 4**order  # a bijection onto the square
        assert (np.abs(np.diff(xy, axis=0)).sum(axis=1) == 1).all()


def test_odd_powers_of_two_lay_two_squares_side_by_side() -> None:
    img, xy = hilbert_grid(np.arange(8.0))
    assert img.shape == (2, 4) and not np.isnan(img).any()
    assert sorted(map(tuple, xy.tolist())) == [(x, y) for x in range(4) for y in range(2)]


@pytest.mark.parametrize(("universe", "by"), [("ipv4:10.0.0.0/16", "/24"),
                                              ("ipv4:10.0.0.0/15", "/24"),
                                              ("range:50000", 2500)])
def test_png_exists_decodes_and_has_the_promised_size(tmp_path: Path, universe: str,
                                                      by: object) -> None:
    est = ps.DensityEstimator(universe, budget=10.0)
    est.update_indices(np.arange(5000))
    path = tmp_path / "map.png"
    est.release_map(1.0, by=by).plot(path)  # type: ignore[arg-type]
    img = mpimg.imread(path)
    assert img.shape[:2] == (PIXELS[1], PIXELS[0])


def test_cli_plot_and_missing_matplotlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "s.pst"
    ps.DensityEstimator("ipv4:10.0.0.0/20", budget=1.0).save(state)
    out = tmp_path / "map.png"
    res = CliRunner().invoke(cli, ["release", "-s", str(state), "--epsilon", "0.5", "--by", "/24",
                                   "--plot", str(out)])
    assert res.exit_code == 0, res.output
    assert mpimg.imread(out).shape[:2] == (PIXELS[1], PIXELS[0])

    hide_module(monkeypatch, "matplotlib")
    res = CliRunner().invoke(cli, ["release", "-s", str(state), "--epsilon", "0.5", "--by", "/24",
                                   "--plot", str(tmp_path / "other.png")])
    assert res.exit_code != 0 and "panstream[plot]" in res.output and "Traceback" not in res.output
    assert ps.DensityEstimator.load(state).ledger.spent == 0.5  # the refused map cost nothing
