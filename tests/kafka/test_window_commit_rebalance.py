"""A ``--window`` checkpoint whose commit meets a rebalance: the member goes on, and every window
is still released once, with every arrival it took.

Under ``--window`` (:class:`~panstream.sources.kafka.windows.WindowSliceStage`) a checkpoint
follows the clock's schedule for each owned slice (closes the windows due, durably, as closed
slices; saves every open window), all under the slice's fenced claim, and only then commits the
internal offsets and releases the complete windows. So when Kafka refuses that commit because the
group rebalances under it, the member may wait as the routed slice stage does
(``test_slice_commit_rebalance.py``) instead of stopping with exit 1. What a replay of the
uncommitted records then does depends on the window each record belongs to:

1. the window is still open: its next owner restores the open window-slice, which holds the
   record, and applies it again: harmless for the bit table, counted twice by the counter family,
   exactly as after a crash (docs/kafka.md, "Replays after a crash");
2. the window has closed since (its closed slice written, or the window already released): the
   closed slice was written from the table that had applied the record, and its next owner finds
   the window closed (its closed slice, or its record in the series) and drops the record. So a
   replay can neither add an arrival to a closed window twice nor reopen it, and the window's one
   release, made by whichever member completes it, reads every arrival once: no loss and no second
   release, for both families;
3. a final checkpoint whose commit meets a rebalance exits 0 only if the broker already holds the
   offsets, else stops with one line (exit 1): no exit 0 with work pending.

Before this change each of these stopped the member (``offset commit failed``, exit 1). The
schedule is test_window_fence's: the 00:00 window, open 00:00 to 01:10 (10 minutes of lateness).
Tables are density bit tables at epsilon 30 (a cell reads its truth except with probability
1/(1 + e^30) < 1e-13; a few hundred cells read a few times: false failure below 1e-9) or modular
counters (no randomness after the initial draw: exact differences).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _group_fakes import Consumer, DeletesAdmin, Group
from kafka import TopicPartition
from test_window_fence import CLOSED, LAYOUT, OPEN, SPEC, STREAM, TP, A, B, C, Clock, H, stored

from panstream import estimators
from panstream.errors import SourceError
from panstream.sources.kafka.tail import TailConfig
from panstream.sources.kafka.windows import WindowSliceStage
from panstream.state.stores import DirectoryStore
from panstream.windows.eventtime import label
from panstream.windows.series import Series

TP1 = TopicPartition("g-wcells", 1)


def member(tmp: Path, clock: Clock, group: Group, kind: str = "density",
           tps: tuple[TopicPartition, ...] = (TP,)) -> WindowSliceStage:
    """A member of ``g-slices`` owning ``tps`` (slice 0 by default) in the group's current
    generation, sharing ``tmp``'s state directory, its notices in ``s.said``."""
    cfg = TailConfig({}, ["g-wcells"], LAYOUT.universe, 30.0, "rr", DirectoryStore(tmp / "state"),
                     estimator=kind)
    s = WindowSliceStage(cfg, LAYOUT, admin_client={}, spec=SPEC, group="g", sources=["logs"],
                         wstore=DirectoryStore(tmp / "state" / "windows"),
                         series_path=str(tmp / "state" / "g-series.jsonl"), wall_clock=clock)
    s._admin = DeletesAdmin()
    s.said = []  # type: ignore[attr-defined]
    s.notice = s.said.append  # type: ignore[attr-defined]
    s.consumer = Consumer(group)
    s._assigned(set(tps))
    s._restore_pending()
    return s


def replay(s: WindowSliceStage, group: Group) -> None:
    """What the member's consumer reads of slice 0: the records from the committed offset on."""
    start = group.committed.get(TP, 0)
    s._apply({TP: [r for r in STREAM if r.offset >= start]})


def counts(tmp: Path, key: str) -> np.ndarray:
    """The counters of slice 0's window file ``key`` (the frequency family)."""
    data = DirectoryStore(tmp / "state" / "windows").load(key)
    assert data is not None
    est = estimators.restore(data, layout=LAYOUT.table_layout)
    try:
        return est.counters().astype(np.int64)
    finally:
        est.wipe()


def released(tmp: Path) -> list[str]:
    """The windows of the series file, in order (a window twice would be a second release)."""
    path = tmp / "state" / "g-series.jsonl"
    return sorted(Series(path).released()) if path.exists() else []


def test_a_commit_that_meets_a_rebalance_waits_for_the_next_checkpoint(tmp_path: Path) -> None:
    clock, group = Clock(H + 1800), Group()              # 00:30: the window is open
    s = member(tmp_path, clock, group)
    s._apply({TP: STREAM[:2]})                           # A
    s.checkpoint()                                       # open window durable, commit 2
    assert group.committed[TP] == 2 and s._admin.deleted == [{TP: 2}]
    s._apply({TP: STREAM[2:4]})                          # B
    group.rebalancing = True
    clock.now = H + 2400
    s.checkpoint()                                       # not raised: the member goes on
    assert group.committed[TP] == 2                      # nothing committed,
    assert s._admin.deleted == [{TP: 2}]                 # nothing deleted,
    assert stored(tmp_path, OPEN) == set(A) | set(B)     # but B is durable
    assert s._deferred == {TP: 4}
    (line,) = s.said
    assert "\n" not in line
    assert line.startswith("a commit of g-wcells slices 0 met a rebalance (")
    group.rebalancing = False                            # the member kept its slice
    s._apply({TP: STREAM[4:]})                           # C
    clock.now = H + 3000
    s.checkpoint()                                       # this commit covers B too
    assert group.committed[TP] == 6 and s._admin.deleted[-1] == {TP: 6}
    assert s._deferred == {} and stored(tmp_path, OPEN) == set(A) | set(B) | set(C)


@pytest.mark.parametrize("kind", ["density", "frequency"])
def test_a_replay_into_an_open_window_is_a_replay_as_after_a_crash(tmp_path: Path,
                                                                   kind: str) -> None:
    """1. The slice moves while the window is open: N restores the open window-slice (A and B)
    and re-applies B (after the last commit, 2), then C. The bit table cannot tell; the counters
    count B twice, as after a crash. Nothing is lost."""
    clock, group = Clock(H + 1800), Group()
    z = member(tmp_path, clock, group, kind)
    z._apply({TP: STREAM[:2]})
    z.checkpoint()
    held = counts(tmp_path, OPEN) if kind == "frequency" else None  # the window after A
    z._apply({TP: STREAM[2:4]})
    group.rebalancing = True
    clock.now = H + 2400
    z.checkpoint()                                       # B durable, its commit deferred
    revoke = z._release({TP}, save=True)                 # the revoke saves, and would commit
    assert {tp: om.offset for tp, om in revoke.items()} == {TP: 4}
    group.rebalancing = False                            # but that commit met the rebalance
    group.rebalance()                                    # too: the offsets stay at 2
    clock.now = H + 2700
    n = member(tmp_path, clock, group, kind)
    replay(n, group)                                     # B again, then C
    n.checkpoint()
    assert group.committed[TP] == 6
    if kind == "density":
        assert stored(tmp_path, OPEN) == set(A) | set(B) | set(C)
    else:
        assert held is not None
        diff = (counts(tmp_path, OPEN) - held) % n.config.modulus
        expect = np.zeros_like(diff)
        expect[list(B)] = 2                              # once by Z, once more by N's replay
        expect[list(C)] = 1
        assert diff.tolist() == expect.tolist()


@pytest.mark.parametrize("kind", ["density", "frequency"])
def test_a_replay_into_a_window_closed_meanwhile_is_dropped_and_the_window_released_once(
        tmp_path: Path, kind: str) -> None:
    """2. Z's commits of B and C meet a rebalance at 00:40 and again at 01:10, when the clock
    closes the window (Z writes its closed slice: A, B and C, each once). The slice then moves:
    N finds the window closed and drops the replayed B and C, so the closed slice is unchanged.
    The member owning slice 1 completes the window: one release; N's replay after the release
    (the series names the window) is dropped as well, and nothing is released twice."""
    clock, group = Clock(H + 1800), Group()
    z = member(tmp_path, clock, group, kind)
    other = member(tmp_path, clock, group, kind, (TP1,))  # slice 1's owner
    z._apply({TP: STREAM[:2]})
    z.checkpoint()                                       # A: commit 2
    held = counts(tmp_path, OPEN) if kind == "frequency" else None
    z._apply({TP: STREAM[2:4]})
    group.rebalancing = True
    clock.now = H + 2400
    z.checkpoint()                                       # B durable, commit deferred
    z._apply({TP: STREAM[4:]})
    clock.now = H + 3600 + 600                           # 01:10: the window closes
    z.checkpoint()                                       # closed with A, B, C; commit deferred
    assert group.committed[TP] == 2 and z._deferred == {TP: 6}
    assert stored(tmp_path, OPEN) is None
    closed = (stored(tmp_path, CLOSED) if kind == "density"
              else counts(tmp_path, CLOSED).tolist())
    if kind == "density":
        assert closed == set(A) | set(B) | set(C)
    else:
        assert held is not None
        expect = np.zeros_like(held)
        expect[list(B) + list(C)] = 1                    # B and C once each (A in held)
        assert ((counts(tmp_path, CLOSED) - held) % z.config.modulus).tolist() == expect.tolist()
    assert released(tmp_path) == []                      # slice 1 is not closed yet

    z._release({TP}, save=True)                          # the revoke's commit fails as well
    group.rebalancing = False
    group.rebalance()
    n = member(tmp_path, clock, group, kind)             # offsets at 2: B and C replayed
    assert H not in n.wins[0] and H in n.closed[0]       # the window is closed for N
    replay(n, group)                                     # dropped: the window is closed
    assert H not in n.wins[0]
    n.checkpoint()                                       # commits 6; writes no window file
    assert group.committed[TP] == 6
    after = (stored(tmp_path, CLOSED) if kind == "density"
             else counts(tmp_path, CLOSED).tolist())
    assert after == closed                               # the closed slice as Z wrote it
    assert stored(tmp_path, OPEN) is None                # never reopened

    other.consumer = Consumer(group)                     # slice 1's owner, in the new generation
    other.checkpoint()                                   # closes slice 1: the window completes
    assert released(tmp_path) == [label(H)]              # released once
    assert stored(tmp_path, CLOSED) is None              # its closed slices deleted

    group.rebalance()                                    # the slice moves once more, and (as
    group.committed[TP] = 2                              # if N's commit had failed too) its
    m = member(tmp_path, clock, group, kind)             # records are read again from 2
    replay(m, group)
    m.checkpoint()
    other.consumer = Consumer(group)
    other.checkpoint()
    assert H not in m.wins[0] and stored(tmp_path, CLOSED) is None
    assert released(tmp_path) == [label(H)]              # still once
    assert len((tmp_path / "state" / "g-series.jsonl").read_text().splitlines()) == 1


def test_a_final_commit_that_meets_a_rebalance_never_exits_0_with_work_pending(
        tmp_path: Path) -> None:
    """3. The final checkpoint's commit meets a rebalance with the broker behind: one line,
    exit 1; the window-slices are durable first. Nothing came since the last commit: exit 0."""
    clock, group = Clock(H + 1800), Group()
    s = member(tmp_path, clock, group)
    s._apply({TP: STREAM[:2]})
    s.checkpoint()
    s._apply({TP: STREAM[2:4]})
    group.rebalancing = True
    with pytest.raises(SourceError) as err:
        s.final_checkpoint()
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith("the final commit of g-wcells slices 0 met a rebalance (")
    assert "pending" in line and "nothing is lost" in line
    assert group.committed[TP] == 2 and stored(tmp_path, OPEN) == set(A) | set(B)

    group.rebalancing = False
    t = member(tmp_path / "t", clock, group)
    t._apply({TP: STREAM[:4]})
    t.checkpoint()                                       # committed 4
    group.rebalancing = True
    t.final_checkpoint()                                 # nothing pending: no error
    assert group.committed[TP] == 4
