"""Replays after a crash, for the counter family of a routed group (no broker needed).

Delivery is at-least-once: a crashed member's source messages since its last routing commit are
routed again, and a slice saved just before a crash is replayed from its previous commit. A bit
table does not care (a redraw is a fresh D1 draw); a counter counts the arrival again. We do not
close the gap by storing the internal topic's next offset in the slice snapshot: that offset
counts routed records, i.e. batches that reached the slice, a volume no epsilon covers
(invariants 1 and 6; docs/threat-model.md, "Replays of the counter family"). These tests pin
both halves of that decision: the snapshot carries nothing that grows with traffic (the attack:
compare two leaked snapshots' heads and sizes), and a release of a group's counters says what a
crash may have added.
"""

from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from panstream import estimators
from panstream.cli.main import cli
from panstream.state.slices import SliceLayout, encode_slice, head_params
from panstream.state.stores import DirectoryStore, ensure_ledger
from panstream.universe import Universe

LAY = SliceLayout(Universe.parse("ipv4:10.0.0.0/20"), 4)


def _slice(kind: str, r: int, arrivals: int) -> bytearray:
    est = estimators.new(kind, LAY.slice_universe(r), 1.0, modulus=8, layout=LAY.table_layout)
    rng = np.random.default_rng(arrivals)
    for _ in range(arrivals // 100):  # as the slice stage applies routed records, one by one
        est.update_indices(rng.integers(0, LAY.size(r), 100).astype(np.intp))
    return encode_slice(est, LAY, r)


def test_a_slice_snapshot_carries_no_offset_or_volume() -> None:
    """A slice that applied 0 and one that applied 50,000 routed arrivals (500 records) have the
    same parameters and the same size: nothing in a snapshot counts records or arrivals."""
    for kind in ("density", "frequency"):
        quiet, busy = _slice(kind, 1, 0), _slice(kind, 1, 50_000)
        assert head_params(quiet) == head_params(busy)
        assert len(quiet) == len(busy)
        assert not {"offset", "next_offset", "records", "arrivals"} & set(head_params(busy))


def _store(tmp_path, kind: str) -> str:  # noqa: ANN001
    d = tmp_path / kind
    store = DirectoryStore(d)
    ensure_ledger(store, 1.0)
    for r in range(LAY.count):
        store.save(f"g-cells/{r}", _slice(kind, r, 1000))
    return str(d)


def test_a_release_of_a_groups_counters_says_what_a_crash_may_have_added(tmp_path) -> None:  # noqa: ANN001
    res = CliRunner().invoke(cli, ["release", "--state-dir", _store(tmp_path, "frequency"),
                                   "--epsilon", "0.5", "--json"])
    assert res.exit_code == 0, res.output
    note = ("panstream: note: a Kafka group's counters are at-least-once: each crash of a member "
            "(kill -9, host loss, an expired session) may have counted up to one "
            "--checkpoint-interval of the arrivals it routed twice")
    assert note in res.stderr
    out = json.loads(res.stdout)
    assert out["replay_note"].startswith("a Kafka group's counters are at-least-once")
    dens = CliRunner().invoke(cli, ["release", "--state-dir", _store(tmp_path, "density"),
                                    "--epsilon", "0.5"])
    assert dens.exit_code == 0 and "at-least-once" not in dens.stderr  # a redraw is harmless
