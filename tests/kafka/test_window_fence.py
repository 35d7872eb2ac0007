"""Fenced window-slices (``kafka --window``): a zombie can neither overwrite the new owner's open
windows nor close a window with its older table.

Under ``--window`` slice ``r`` keeps one table per open window, saved as ``<group>-w<start>/<r>``
at every checkpoint and, once the clock closes the window, as ``<group>-w<start>-closed/<r>``
(the open copy removed): the closed slices are what the window's one release reads. The owner of
partition ``r`` of ``<group>-wcells`` claims the slice (``<group>-wcells/<r>`` in
``STATE_DIR/windows``) on assignment, and every write of its window files happens under that
claim (``DirectoryStore.claimed``). The interleaving (issue 26), with a fake group coordinator
that, like Kafka, accepts commits only from the current generation, on the 00:00 window (open
00:00 to 01:10 with 10 minutes of lateness):

1. at 00:30 member Z owns slice 0, checkpoints arrivals A of the window (commits), applies B and
   stops (a stop-the-world pause longer than its session);
2. the group rebalances: N restores the open window (A), replays B and applies C, checkpoints
   (the open window-slice now holds A, B and C) and commits;
3. Z wakes at 01:10, when the clock closes the window, and checkpoints: it would close the window
   with its table (A and B, not C), and remove the open copy N saved;
4. N dies with ``kill -9`` before it closes the window; M restores the slice.

Without the fence (before this change) Z's closed slice is the one M finds, and N's open copy is
gone: the window's release lacks C (the first test shows it). With the fence Z's checkpoint is
refused before it writes anything, and M closes the window with A, B and C.

Tables are density bit tables at epsilon 30: an arrived cell reads 1 and an unseen cell 0, each
wrong with probability 1/(1 + e^30) < 1e-13, so reading 128 cells a few times fails falsely with
probability below 1e-10.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import pytest
from _group_fakes import Consumer, Group, Rec, read_from_commit
from kafka import TopicPartition

from panstream import estimators
from panstream.errors import FencedError, SourceError
from panstream.sources.kafka.tail import TailConfig
from panstream.sources.kafka.windows import (
    WindowSliceStage,
    WindowSpec,
    encode_data,
    window_keys,
)
from panstream.state.slices import SliceLayout
from panstream.state.stores import DirectoryStore
from panstream.universe import Universe

H = 1795478400  # 2026-11-24T00:00:00Z
SPEC = WindowSpec(3600, 600, 1.0)
LAYOUT = SliceLayout(Universe.parse("ipv4:10.9.0.0/24"), 2)  # slice 0: cells 0..127
TP = TopicPartition("g-wcells", 0)
OPEN, CLOSED = window_keys("g", H, 0)
A, B, C = range(0, 20), range(40, 60), range(80, 100)


def records(cells: range, first_offset: int) -> list[Rec]:
    """The routed records of ``cells`` in the 00:00 window, 10 cells a record."""
    out = []
    for i, lo in enumerate(range(cells.start, cells.stop, 10)):
        ((r, data),) = LAYOUT.route(np.arange(lo, lo + 10, dtype=np.intp))
        assert r == 0
        out.append(Rec(first_offset + i, encode_data(H, bytes(data))))
    return out


STREAM = records(A, 0) + records(B, 2) + records(C, 4)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = float(now)

    def __call__(self) -> float:
        return self.now


class Unfenced(WindowSliceStage):
    """The stage as it stood before this change: no claim, window files written unchecked (and
    a commit that meets a rebalance stops it: deferring needs the fence)."""

    defers_rebalanced_commits = False

    def _claim(self, tp: TopicPartition) -> None:
        pass

    def _owned(self, r: int) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


def member(tmp: Path, clock: Clock, group: Group,
           kind: type[WindowSliceStage] = WindowSliceStage) -> WindowSliceStage:
    """A member of ``g-slices`` assigned slice 0 in the group's current generation (claim, then
    restore), sharing ``tmp``'s state directory with the others."""
    cfg = TailConfig({}, ["g-wcells"], LAYOUT.universe, 30.0, "rr", DirectoryStore(tmp / "state"))
    s = kind(cfg, LAYOUT, spec=SPEC, group="g", sources=["logs"],
             wstore=DirectoryStore(tmp / "state" / "windows"),
             series_path=str(tmp / "state" / "g-series.jsonl"), wall_clock=clock)
    s.consumer = Consumer(group)
    s._assigned({TP})
    s._restore_pending()
    return s


def replay(s: WindowSliceStage, group: Group) -> None:
    """What the member's consumer reads: the records from the committed offset on."""
    read_from_commit(s, TP, STREAM, group)


def in_memory(s: WindowSliceStage) -> set[int]:
    return set(np.flatnonzero(s.wins[0][H].bits()).tolist())


def stored(tmp: Path, key: str) -> set[int] | None:
    """The cells slice 0's window file ``key`` reads as 1 (``None``: no such file)."""
    data = DirectoryStore(tmp / "state" / "windows").load(key)
    if data is None:
        return None
    est = estimators.restore(data, layout=LAYOUT.table_layout)
    try:
        return set(np.flatnonzero(est.bits()).tolist())
    finally:
        est.wipe()


def zombie_interleaving(tmp: Path, kind: type[WindowSliceStage] = WindowSliceStage
                        ) -> tuple[WindowSliceStage, Group, Clock]:
    """Steps 1-2 of the module docstring, and the clock moved to 01:10 for step 3; returns the
    woken zombie (not yet checkpointed again). N is dropped without a checkpoint (``kill -9``)."""
    clock = Clock(H + 1800)                              # 00:30: the 00:00 window is open
    group = Group()
    z = member(tmp, clock, group, kind)                  # 1. Z owns slice 0
    z._apply({TP: STREAM[:2]})                           #    A
    z.checkpoint()                                       #    the open window durable, commit 2
    assert group.committed[TP] == 2 and stored(tmp, OPEN) == set(A)
    z._apply({TP: STREAM[2:4]})                          #    B: Z pauses here
    group.rebalance()                                    # 2. Z evicted, N assigned
    clock.now = H + 2700                                 #    00:45
    n = member(tmp, clock, group, kind)
    assert in_memory(n) == set(A)                        #    restored from Z's checkpoint
    replay(n, group)                                     #    B again, then C
    n.checkpoint()                                       #    commit 6
    assert group.committed[TP] == 6 and stored(tmp, OPEN) == set(A) | set(B) | set(C)
    clock.now = H + 3600 + 600                           # 3. 01:10: the window closes
    return z, group, clock


def test_without_the_fence_a_zombie_closes_the_window_without_the_new_owners_arrivals(
        tmp_path: Path) -> None:
    """The attack, as ``--window`` stood before: Z closes the window with A and B and removes
    N's open copy; its commit fails, but the damage is on disk. M finds the window closed and
    N's table gone: the window's release would lack C."""
    z, group, clock = zombie_interleaving(tmp_path, Unfenced)
    with pytest.raises(SourceError, match="offset commit failed"):
        z.checkpoint()                                   # the close lands, the commit fails
    assert stored(tmp_path, CLOSED) == set(A) | set(B)   # Z's table is the closed slice
    assert stored(tmp_path, OPEN) is None                # N's open copy removed by Z
    group.rebalance()                                    # 4. N killed; M takes the slice
    m = member(tmp_path, clock, group, Unfenced)
    replay(m, group)
    m.checkpoint()
    assert stored(tmp_path, CLOSED) == set(A) | set(B)   # C lost


def test_a_zombie_cannot_close_a_window_with_its_older_table(tmp_path: Path) -> None:
    z, group, clock = zombie_interleaving(tmp_path)
    # 3. Z wakes at the close instant: refused before it writes anything (one line, exit 1)
    with pytest.raises(FencedError) as err:
        z.checkpoint()
    assert "\n" not in str(err.value)
    assert str(err.value).startswith("snapshot g-wcells/0 not saved: the store shows epoch 2")
    assert stored(tmp_path, CLOSED) is None              # nothing closed
    assert stored(tmp_path, OPEN) == set(A) | set(B) | set(C)  # N's open copy intact
    assert group.committed[TP] == 6
    # 4. N killed; M restores the open window and closes it, with A, B and C
    group.rebalance()
    m = member(tmp_path, clock, group)
    assert in_memory(m) == set(A) | set(B) | set(C)
    replay(m, group)
    m.checkpoint()
    assert stored(tmp_path, CLOSED) == set(A) | set(B) | set(C)
    assert stored(tmp_path, OPEN) is None


def test_a_zombie_cannot_overwrite_an_open_window_either(tmp_path: Path) -> None:
    """Z wakes while the window is still open (00:50): its save of the open window-slice would
    replace N's; refused, and N's copy (A, B and C) stays what any next owner restores."""
    z, group, clock = zombie_interleaving(tmp_path)
    clock.now = H + 3000
    with pytest.raises(FencedError):
        z.checkpoint()
    assert stored(tmp_path, OPEN) == set(A) | set(B) | set(C)


def test_a_zombie_that_saves_on_revoke_is_refused_too(tmp_path: Path) -> None:
    """A woken zombie told its slice was *revoked* saves the open windows before handing them
    over: fenced like a checkpoint's save."""
    z, _, clock = zombie_interleaving(tmp_path)
    clock.now = H + 3000
    with pytest.raises(FencedError):
        z._release({TP}, save=True)
    assert stored(tmp_path, OPEN) == set(A) | set(B) | set(C)


def test_the_slice_claim_is_one_public_file_beside_the_window_files(tmp_path: Path) -> None:
    """One claim per slice, whatever windows it holds: ``.g-wcells@0.shard.panstream-fence``
    in ``STATE_DIR/windows`` with the epoch and its base (the group's rebalances), no lock file
    left behind, and no window file of the slice written outside it."""
    clock = Clock(H + 1800)
    s = member(tmp_path, clock, Group())
    s._apply({TP: STREAM})
    s.checkpoint()
    d = tmp_path / "state" / "windows"
    assert sorted(p.name for p in d.iterdir() if p.name.startswith(".")) == \
        [".g-wcells@0.shard.panstream-fence"]
    assert (d / ".g-wcells@0.shard.panstream-fence").read_bytes() == b'{"base": 0, "epoch": 1}'
