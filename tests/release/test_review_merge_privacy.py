"""Review regression: a release over merged Kafka shards reports honest privacy numbers.

An item whose messages are not keyed may reach every partition, so one person can change every
shard table (K x epsilon_state for an intrusion on the state directory) and, in the sum merge, the
summed count of ones by up to K (the noise must be scaled to K). Only when the operator asserts
``--keyed`` (one partition per item per topic) do the single-table numbers hold.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import panstream as ps
import panstream.release.stats as release_mod
from panstream.cli.main import cli
from panstream.release.density import format_release
from panstream.release.noise import NoiseLaw
from panstream.state.keying import Keying
from panstream.state.stores import LEDGER_FILE, DirectoryStore, ensure_ledger, release_state_dir
from panstream.state.stores import directory as directory_store

K = 4


def shard_dir(tmp_path: Path, universe: str, topics: tuple[str, ...] = ("t",)) -> Path:
    """A state directory with K shards per topic, each fed a few cells."""
    d = tmp_path / "state"
    store = DirectoryStore(d)
    assert ensure_ledger(store, 10.0)  # as 'panstream kafka' does when it starts
    for topic in topics:
        for part in range(K):
            est = ps.DensityEstimator(universe, epsilon=1.0, budget=10.0)
            est.update_indices(np.arange(part * 10, part * 10 + 10))
            # with the keying record a checking member writes (issue 39)
            store.save(f"{topic}/{part}", est.snapshot_buffer(extra=Keying("murmur2", K).param()))
    return d


@pytest.fixture
def laws(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Fraction]]:
    """Record the (mechanism, epsilon) of every noise law the release stage builds."""
    seen: list[tuple[str, Fraction]] = []
    real = NoiseLaw.for_mechanism.__func__  # type: ignore[attr-defined]

    def spy(cls: type[NoiseLaw], mechanism: str, epsilon: Any) -> NoiseLaw:
        law = real(cls, mechanism, epsilon)
        seen.append((mechanism, law.epsilon_exact))
        return law

    monkeypatch.setattr(release_mod.NoiseLaw, "for_mechanism", classmethod(spy))
    return seen


def one_table_epsilon() -> float:
    return ps.DensityEstimator("range:1024", epsilon=1.0).epsilon_state


def test_unkeyed_sum_merge_scales_noise_and_state_epsilon_to_the_shard_count(
        tmp_path: Path, laws: list[tuple[str, Fraction]]) -> None:
    d = shard_dir(tmp_path, "hashed:1024")  # hashed: auto picks the sum merge
    rel, group = release_state_dir(d, 0.5, "geometric")
    assert group.method == "sum" and not group.keyed
    assert (group.sensitivity, group.state_tables) == (K, K)
    assert laws == [("geometric", Fraction(1, 2) / K)]  # noise of scale K/epsilon on the count
    assert rel.epsilon == 0.5 and rel.sensitivity == K and rel.state_tables == K
    assert rel.epsilon_state == pytest.approx(K * one_table_epsilon())
    assert rel.epsilon_total == pytest.approx(K * one_table_epsilon() + 0.5)
    ledger = json.loads(DirectoryStore(d).read_ledger() or b"")
    assert sum(e["epsilon"] for e in ledger["entries"]) == 0.5  # charged what was asked
    assert f"up to {K} stored table(s)" in format_release(rel)


def test_keyed_sum_merge_of_one_topic_keeps_single_table_numbers(
        tmp_path: Path, laws: list[tuple[str, Fraction]]) -> None:
    d = shard_dir(tmp_path, "hashed:1024")
    rel, group = release_state_dir(d, 0.5, "laplace", keyed=True)
    assert (group.sensitivity, group.state_tables) == (1, 1)
    assert laws == [("laplace", Fraction(1, 2))]
    assert rel.epsilon_state == pytest.approx(one_table_epsilon())
    assert "merged shards" not in format_release(rel)


def test_keyed_sum_merge_over_two_topics_counts_one_shard_per_topic(
        tmp_path: Path, laws: list[tuple[str, Fraction]]) -> None:
    """Keyed, an item is in one partition of *each* topic: two topics, two shards."""
    d = shard_dir(tmp_path, "range:1024", topics=("a", "b"))
    rel, group = release_state_dir(d, 0.5, "geometric", keyed=True)
    assert group.method == "sum" and (group.sensitivity, group.state_tables) == (2, 2)
    assert laws == [("geometric", Fraction(1, 4))]
    assert rel.epsilon_state == pytest.approx(2 * one_table_epsilon())


def test_partitioned_merge_has_sensitivity_one_but_counts_every_shard_when_unkeyed(
        tmp_path: Path, laws: list[tuple[str, Fraction]]) -> None:
    """The merged table holds one bit per cell (sensitivity 1) whatever the keying, but the shard
    files an intruder reads hold K bits of an unkeyed item's cell."""
    d = shard_dir(tmp_path, "range:1024")
    rel, group = release_state_dir(d, 0.5, "geometric")
    assert group.method == "partitioned"
    assert (group.sensitivity, group.state_tables) == (1, K)
    assert laws == [("geometric", Fraction(1, 2))]
    assert rel.epsilon_state == pytest.approx(K * one_table_epsilon())


def test_release_cli_keyed_flag_and_env(tmp_path: Path) -> None:
    d = shard_dir(tmp_path, "range:1024")
    run = CliRunner().invoke
    out = run(cli, ["release", "--state-dir", str(d), "--epsilon", "0.25", "--json"],
              catch_exceptions=False)
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["state_tables"] == K
    out = run(cli, ["release", "--state-dir", str(d), "--epsilon", "0.25", "--json"],
              env={"PANSTREAM_RELEASE_KEYED": "1"}, catch_exceptions=False)
    assert out.exit_code == 0, out.output
    r = json.loads(out.output)
    assert r["state_tables"] == 1 and r["epsilon_state"] == pytest.approx(one_table_epsilon())
    assert "PANSTREAM_RELEASE_KEYED" in run(cli, ["release", "--help"]).output


def test_release_rejects_a_bad_sensitivity() -> None:
    est = ps.DensityEstimator("range:64")
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ps.ConfigurationError, match="positive integer"):
            est.release(0.1, sensitivity=bad)
    assert est.ledger.releases == 0  # refused before charging


def test_unreadable_release_ledger_is_one_line(tmp_path: Path) -> None:
    """A directory where the ledger file should be: a one-line error, not a traceback."""
    d = shard_dir(tmp_path, "range:1024")
    (d / LEDGER_FILE).unlink()
    (d / LEDGER_FILE).mkdir()
    out = CliRunner().invoke(cli, ["release", "--state-dir", str(d), "--epsilon", "0.25"])
    assert out.exit_code == 1 and isinstance(out.exception, SystemExit)
    assert "cannot read release ledger" in out.output and "Traceback" not in out.output


def test_a_lost_ledger_is_not_silently_replaced(tmp_path: Path) -> None:
    """Deleting the group's release ledger must not reset the budget spent on the same tables:
    without the ledger the release is refused, and once a release was recorded in the ledger's
    history even --new-ledger is (issue 21: it used to give 2 from a budget of 1)."""
    d = shard_dir(tmp_path, "range:1024")
    release_state_dir(d, 0.5, "laplace", keyed=True)
    (d / LEDGER_FILE).unlink()
    with pytest.raises(ps.StateError, match="--new-ledger"):
        release_state_dir(d, 0.5, "laplace", keyed=True)
    assert not ensure_ledger(DirectoryStore(d), 10.0)  # a restarted consumer does not recreate it
    with pytest.raises(ps.StateError, match="--new-ledger refused: the ledger history"):
        release_state_dir(d, 0.5, "laplace", keyed=True, new_ledger=True)


def test_new_ledger_is_for_shards_never_released_from(tmp_path: Path) -> None:
    d = shard_dir(tmp_path, "range:1024")
    (d / LEDGER_FILE).unlink()  # lost before any release: no history records a spend
    rel, _ = release_state_dir(d, 0.5, "laplace", keyed=True, new_ledger=True)  # explicit choice
    assert rel.epsilon == 0.5 and rel.budget_remaining == 0.5


def test_two_releases_of_one_directory_never_overlap(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A second release waits while one holds the group's ledger, and is refused with one line if
    it is held too long (LEDGER_LOCK_WAIT, shortened here)."""
    monkeypatch.setattr(directory_store, "LEDGER_LOCK_WAIT", 0.2)  # read where the store locks
    d = shard_dir(tmp_path, "range:1024")
    with DirectoryStore(d).ledger_lock(), pytest.raises(
        ps.StateError, match="in use by another panstream process"
    ):
        release_state_dir(d, 0.5, "laplace", keyed=True)
    rel, _ = release_state_dir(d, 0.5, "laplace", keyed=True)
    assert rel.budget_remaining == pytest.approx(9.5)
    # No lock or temporary file is left behind; only the ledger's history (no table), which lets a
    # later release notice an older release-ledger.log put back.
    hidden = sorted(p.name for p in d.iterdir() if p.name.startswith("."))
    assert hidden == [".release-ledger.json.panstream-ledger"]
