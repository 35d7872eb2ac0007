"""A checkpoint whose commit meets a rebalance: the member goes on, and nothing is lost, whatever
the task.

Kafka refuses a commit made while the group rebalances (kafka-python raises
``RebalanceInProgressError``; librdkafka's adapter ``CommitFailedError`` for
``ILLEGAL_GENERATION``). Every task kind (a per-partition shard, a routed slice, a window slice:
``_layouts.py``) commits only after its tables are durable under the member's fenced epoch, so
such a commit may wait for the next checkpoint instead of stopping the member (exit 1, as before
this change). What each test proves, for every task kind unless it names one:

* ``test_a_commit_that_meets_a_rebalance_waits_for_the_next_checkpoint``: the tables stay
  durable, the offsets uncommitted, no internal record is deleted, and the member says so in one
  line; if it keeps the task, its next checkpoint commits the offsets (nothing replayed).
* ``test_librdkafkas_illegal_generation_is_the_same_case``: librdkafka rebalances on its own
  thread; a commit in a generation the member has not joined yet waits as well.
* ``test_a_task_that_moves_is_reread_by_its_next_owner``: if the task moves, its next owner
  restores the table and re-reads the records after the last commit: harmless for the bit table
  (a fresh D1 draw of a cell already drawn), counted twice by the counter family, exactly as after
  a crash (docs/kafka.md, "Replays after a crash"). Nothing is lost either way, since the
  committed offset never passes the durable table.
* ``test_a_final_commit_that_meets_a_rebalance_never_exits_0_with_work_pending``: the final
  checkpoint's commit meeting a rebalance with the broker's offsets behind stops the member with
  one line (exit 1), its tables durable; close() writes nothing more after it.
* ``test_a_final_commit_of_offsets_already_committed_may_meet_a_rebalance``: nothing came since
  the last commit (a drained group, members leaving): nothing is pending, the member exits 0.
* ``test_without_a_fenced_store_the_member_stops_as_before``: the wait is safe only because every
  save carries the member's claimed epoch (a zombie that went on could not replace a newer
  owner's table); without claims the member stops as before.
* Window slices: ``test_a_replay_into_a_window_closed_meanwhile_is_dropped_and_the_window_released_once``:
  a record replayed after its window closed finds the window closed (its closed slice, or its
  line in the series) and is dropped, so a window is never reopened, never gets an arrival twice
  and is released once, by whichever member completes it.

Tables are density bit tables at epsilon 30 (a cell reads its truth except with probability
1/(1 + e^30) < 1e-13; at most 1,000 cells read a dozen times a test: false failure below 1e-8 for
the file) or modular counters (no randomness after the initial draw: exact differences).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _group_fakes import Group
from _layouts import KINDS, A, B, C, H, Layout, Task
from kafka import TopicPartition

from panstream.errors import SourceError
from panstream.windows.eventtime import label

ABC = set(A) | set(B) | set(C)


@pytest.fixture(params=KINDS)
def lay(request: pytest.FixtureRequest, tmp_path: Path) -> Layout:
    return Layout(request.param, tmp_path)


def owner(lay: Layout, group: Group, family: str = "density") -> Task:
    """A member owning the task, A checkpointed and committed, then B applied."""
    t = lay.member(group, family=family)
    t.apply(lay.batch("A"))
    t.checkpoint()                                       # A durable, committed
    assert group.committed[lay.tp] == lay.ends["A"]
    if t.deleted is not None:                            # the internal records A came in: gone
        assert t.deleted == [{lay.tp: lay.ends["A"]}]
    t.apply(lay.batch("B"))
    return t


def test_a_commit_that_meets_a_rebalance_waits_for_the_next_checkpoint(lay: Layout) -> None:
    group = Group()
    t = owner(lay, group)
    group.rebalancing = True
    lay.clock.now += 600
    t.checkpoint()                                       # 1. not raised: the member goes on
    assert group.committed[lay.tp] == lay.ends["A"]      #    nothing committed,
    if t.deleted is not None:
        assert t.deleted == [{lay.tp: lay.ends["A"]}]    #    nothing deleted,
    assert lay.durable() == set(A) | set(B)              #    but B is durable
    assert t.deferred == {lay.tp: lay.ends["B"]}
    (line,) = t.said
    assert "\n" not in line
    assert line.startswith(f"a commit of {lay.where} met a rebalance (")
    assert "retried at the next checkpoint" in line
    group.rebalancing = False                            # 2. the member kept its task
    t.apply(lay.batch("C"))
    lay.clock.now += 600
    t.checkpoint()                                       #    this commit covers B too
    assert group.committed[lay.tp] == lay.ends["C"] and t.deferred == {}
    if t.deleted is not None:
        assert t.deleted[-1] == {lay.tp: lay.ends["C"]}
    assert t.ones() == lay.durable() == ABC
    assert len(t.said) == 1                              #    said once, for the one checkpoint


def test_librdkafkas_illegal_generation_is_the_same_case(lay: Layout) -> None:
    group = Group()
    t = lay.member(group)
    t.apply(lay.batch("A"))
    group.generation += 1                                # a generation this consumer lacks
    t.checkpoint()
    assert lay.tp not in group.committed and t.deferred == {lay.tp: lay.ends["A"]}
    assert lay.durable() == set(A)


@pytest.mark.parametrize("family", ["density", "frequency"])
def test_a_task_that_moves_is_reread_by_its_next_owner(lay: Layout, family: str) -> None:
    """3. The task moves after the deferred commit (the revoke's commit meets the same
    rebalance): N restores the table (A and B) and re-reads B (after the last commit), then C.
    Every arrival is in N's table; the bit table cannot tell, the counters count B twice."""
    group = Group()
    z = owner(lay, group, family)
    group.rebalancing = True
    lay.clock.now += 600
    z.checkpoint()                                       # B durable, its commit deferred
    held = z.counters() if family == "frequency" else None
    z.revoke()                                           # the revoke saves, and would commit
    assert z.consumer.revoke_commits == [{lay.tp: lay.ends["B"]}]  # the deferred offsets,
    group.rebalancing = False                            # but that commit met the rebalance
    group.rebalance()                                    # too: the offsets stay after A
    assert group.committed[lay.tp] == lay.ends["A"]
    lay.clock.now += 300
    n = lay.member(group, family=family)
    n.replay(group)                                      # B again, then C
    n.checkpoint()
    assert group.committed[lay.tp] == lay.ends["C"]
    if family == "density":
        assert n.ones() == lay.durable() == ABC          # nothing lost, nothing extra
    else:
        # N's counters minus the table Z held: C counted once (new), B once more (replayed: B is
        # now counted twice in all), every other cell untouched. Nothing lost.
        assert held is not None
        diff = (n.counters() - held) % n.modulus
        expect = np.zeros_like(diff)
        expect[list(B) + list(C)] = 1
        assert diff.tolist() == expect.tolist()


def test_a_final_commit_that_meets_a_rebalance_never_exits_0_with_work_pending(
        lay: Layout) -> None:
    group = Group()
    t = owner(lay, group)
    group.rebalancing = True
    with pytest.raises(SourceError) as err:
        t.final_checkpoint()
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith(f"the final commit of {lay.where} met a rebalance (")
    assert "pending" in line and "nothing is lost" in line
    assert group.committed[lay.tp] == lay.ends["A"] and t.final_done
    assert lay.durable() == set(A) | set(B)
    t.revoke()                                           # the close path: no second write,
    assert t.consumer.revoke_commits == []               # nothing more to commit


def test_a_final_commit_of_offsets_already_committed_may_meet_a_rebalance(lay: Layout) -> None:
    group = Group()
    t = lay.member(group)
    t.apply(lay.batch("A", "B"))
    t.checkpoint()                                       # committed: the group has drained
    group.rebalancing = True
    t.final_checkpoint()                                 # no error
    assert group.committed[lay.tp] == lay.ends["B"] and t.partitions == [lay.summary_key]


def test_without_a_fenced_store_the_member_stops_as_before(lay: Layout) -> None:
    group = Group()
    t = lay.member(group, fenced=False)
    t.apply(lay.batch("A"))
    group.rebalancing = True
    with pytest.raises(SourceError, match="offset commit failed"):
        t.checkpoint()


# ------------------------------------------------------------------ window slices
@pytest.mark.parametrize("family", ["density", "frequency"])
def test_a_replay_into_a_window_closed_meanwhile_is_dropped_and_the_window_released_once(
        tmp_path: Path, family: str) -> None:
    """Z's commits of B and C meet a rebalance at 00:40 and again at 01:10, when the clock closes
    the window (Z writes its closed slice: A, B and C, each once). The slice then moves: N finds
    the window closed and drops the replayed B and C, so the closed slice is unchanged. The
    member owning slice 1 completes the window: one release; N's replay after the release (the
    series names the window) is dropped as well, and nothing is released twice."""
    lay = Layout("window", tmp_path)
    read = "ones" if family == "density" else "counters"
    group = Group()
    z = lay.member(group, family=family)
    other = lay.member(group, family=family, tps=[TopicPartition("g-wcells", 1)])  # slice 1
    z.apply(lay.batch("A"))
    z.checkpoint()                                       # A: committed
    held = lay.window_file(lay.open_key, read)
    z.apply(lay.batch("B"))
    group.rebalancing = True
    lay.clock.now += 600
    z.checkpoint()                                       # B durable, commit deferred
    z.apply(lay.batch("C"))
    lay.clock.now = lay.close_at                         # 01:10: the window closes
    z.checkpoint()                                       # closed with A, B, C; commit deferred
    assert group.committed[lay.tp] == lay.ends["A"] and z.deferred == {lay.tp: lay.ends["C"]}
    assert lay.window_file(lay.open_key) is None
    closed = lay.window_file(lay.closed_key, read)
    if family == "density":
        assert closed == ABC
    else:
        expect = np.zeros_like(held)
        expect[list(B) + list(C)] = 1                    # B and C once each (A in held)
        assert ((closed - held) % z.modulus).tolist() == expect.tolist()
    assert lay.released_windows() == []                  # slice 1 is not closed yet

    z.revoke()                                           # the revoke's commit fails as well
    group.rebalancing = False
    group.rebalance()
    n = lay.member(group, family=family)                 # offsets after A: B and C replayed
    assert H not in n.open_windows() and H in n.closed_windows()  # the window is closed for N
    n.replay(group)                                      # dropped: the window is closed
    assert H not in n.open_windows()
    n.checkpoint()                                       # commits; writes no window file
    assert group.committed[lay.tp] == lay.ends["C"]
    after = lay.window_file(lay.closed_key, read)
    assert after == closed if family == "density" else after.tolist() == closed.tolist()
    assert lay.window_file(lay.open_key) is None         # never reopened

    other.rejoin()                                       # slice 1's owner, in the new generation
    other.checkpoint()                                   # closes slice 1: the window completes
    assert lay.released_windows() == [label(H)]          # released once
    assert lay.window_file(lay.closed_key) is None       # its closed slices deleted

    group.rebalance()                                    # the slice moves once more, and (as
    group.committed[lay.tp] = lay.ends["A"]              # if N's commit had failed too) its
    m = lay.member(group, family=family)                 # records are read again after A
    m.replay(group)
    m.checkpoint()
    other.rejoin()
    other.checkpoint()
    assert H not in m.open_windows() and lay.window_file(lay.closed_key) is None
    assert lay.released_windows() == [label(H)]          # still once
    assert len((tmp_path / "state" / "g-series.jsonl").read_text().splitlines()) == 1
