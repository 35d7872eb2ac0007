"""Fenced tasks: a zombie's late table is never the one restored or released, whatever the task.

Every task a group member owns (a per-partition shard, a routed slice, a window slice: see
``_layouts.py``) is checkpointed under a *claim*: on assignment the member claims the task with
the generation it was assigned in, and every save carries that epoch. The interleaving that used
to lose arrivals (issue 26), played with members of one group on one store and a fake group
coordinator that, like Kafka, accepts commits only from the current generation:

1. member Z owns the task, checkpoints arrivals A (commits), applies B and stops (a
   stop-the-world pause longer than its session);
2. the group rebalances (generation 2): N restores the task (A), replays from Z's commit (B) and
   applies C, checkpoints and commits;
3. Z wakes and checkpoints its table (A and B, not C) (for a window slice: when the clock closes
   the window, so Z would close it with its table and remove N's open copy);
4. N dies with ``kill -9`` before its next checkpoint; M restores the task and replays from N's
   commit.

What each test proves, for every task kind unless it names one:

* ``test_without_the_fence_a_zombie_loses_the_new_owners_arrivals``: the attack is real. Without
  claims Z's late save replaces N's table; its commit fails, but M restores Z's table and replays
  from N's commit: C is gone.
* ``test_a_zombies_late_table_is_never_restored_nor_released``: with the fence the directory store
  refuses Z's save, and Z drops the task unsaved with one line and goes on (its consumer rejoins
  at the next poll; before this round the member stopped with exit 1); the state topic takes the
  save under Z's older epoch, which readers ignore. Either way Z leaves its offsets uncommitted.
  A release meanwhile, and M after its replay, hold A, B and C; Z's final checkpoint then exits
  0, since the broker already holds N's later commit.
* ``test_a_zombie_that_saves_on_revoke_is_refused_too``: a zombie told its task was *revoked*
  saves it before handing it over: fenced like a checkpoint's save (refused, nothing committed).
* ``test_a_member_that_claims_late_is_refused``: a member assigned in generation 1 that claims only
  after the generation-2 owner claimed and saved cannot prove itself current: refused, and the
  task waits paused and unread (said once) until the member's rejoin hands it over again, now
  claimed above the owner's epoch.
* ``test_a_recreated_group_whose_generations_restart_takes_its_tasks_back``: Kafka forgets an idle
  group; its next incarnation counts generations from 1 again, below the stored epoch. A commit
  proves the member current: it rebases above the stored epoch, and its saves win.
* ``test_a_current_member_whose_proof_meets_a_rebalance_waits_and_claims_after_it``: that proving
  commit meeting a rebalance says nothing of eviction: the member leaves the task unclaimed and
  paused (said once) and claims it after the rebalance, instead of stopping on the fence.
* ``test_a_claim_writes_only_public_parameters``: the claim file holds the epoch and its base and
  nothing of the stream; a busy and an idle member leave the same one, and no lock file.
* Shards and routed slices (the stores they share with ``release``):
  ``test_a_store_written_before_fencing_restores_and_is_taken_over`` (a table saved without an
  epoch restores and the first fenced save replaces it) and
  ``test_the_state_topic_forgets_the_zombie_with_the_next_claim`` (Z's ignored snapshot has a
  compaction key of its own epoch, so it cannot supersede N's; M's first save tombstones both).
* Routed slices: ``test_a_rotation_replaces_the_fenced_slices`` (``rotate`` writes fresh slices
  under the highest epoch, and the base of a rebased claim survives it).
* Window slices: ``test_a_zombie_cannot_close_a_window_with_its_older_table`` (refused before it
  writes anything: no closed slice, N's open copy intact, M closes the window with A, B and C)
  and ``test_a_zombie_cannot_overwrite_an_open_window_either``.

Tables are density bit tables at epsilon 30: an arrived cell reads 1 and an unseen cell 0, each
wrong with probability 1/(1 + e^30) < 1e-13; every test reads at most 1,000 cells a dozen times,
so the file's 40-odd tests fail falsely with probability below 1e-7.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from _group_fakes import Group, released_ones
from _layouts import KINDS, A, B, C, Layout, Task

from panstream.errors import FencedError, SourceError
from panstream.state.stores import rotate_slice_store

ABC = set(A) | set(B) | set(C)


def layouts(kinds: tuple[str, ...] = KINDS, stores: tuple[str, ...] = ("directory", "topic")
            ) -> list[tuple[str, str]]:
    """(kind, store) pairs: every store each kind keeps its tables in."""
    return [(k, s) for k in kinds for s in Layout.stores_of(k) if s in stores]


@pytest.fixture(params=layouts(), ids=lambda p: f"{p[0]}-{p[1]}")
def lay(request: pytest.FixtureRequest, tmp_path: Path) -> Layout:
    kind, store = request.param
    return Layout(kind, tmp_path, store)


def zombie_interleaving(lay: Layout, fenced: bool = True) -> tuple[Task, Group]:
    """Steps 1-2 of the module docstring (and, for a window slice, the clock moved to the close
    instant for step 3); returns the woken zombie (not yet checkpointed again) and the group. N is
    dropped without a checkpoint (``kill -9``)."""
    group = Group()
    z = lay.member(group, fenced=fenced)                 # 1. Z owns the task
    z.apply(lay.batch("A"))
    z.checkpoint()                                       #    A durable, committed
    assert group.committed[lay.tp] == lay.ends["A"]
    z.apply(lay.batch("B"))                              #    B: Z pauses here
    group.rebalance()                                    # 2. Z evicted, N assigned
    lay.clock.now += 900                                 #    (00:45 for the window)
    n = lay.member(group, fenced=fenced)
    assert n.ones() == set(A)                            #    restored from Z's checkpoint
    n.replay(group)                                      #    B again, then C
    n.checkpoint()
    assert group.committed[lay.tp] == lay.ends["C"]
    assert lay.durable() == ABC
    lay.clock.now = lay.close_at if lay.kind == "window" else lay.clock.now
    return z, group                                      # 4. N killed: no close, no checkpoint


def test_without_the_fence_a_zombie_loses_the_new_owners_arrivals(lay: Layout) -> None:
    z, group = zombie_interleaving(lay, fenced=False)
    with pytest.raises(SourceError, match="offset commit failed"):
        z.checkpoint()                                   # 3. the save lands, the commit fails
    assert lay.durable() == set(A) | set(B)              #    Z's table replaced N's
    group.rebalance()
    m = lay.member(group, fenced=False)
    m.replay(group)
    m.checkpoint()
    assert lay.durable() == set(A) | set(B)              # C lost


def test_a_zombies_late_table_is_never_restored_nor_released(lay: Layout) -> None:
    z, group = zombie_interleaving(lay)
    # 3. Z wakes. The directory refuses its save: Z drops the task unsaved (one line) and goes
    # on; the topic takes the save, but under Z's older epoch (readers ignore it), and Kafka
    # refuses Z's commit. Either way Z's offsets wait uncommitted (its next poll tells it that it
    # was evicted; every later save of its is refused or ignored the same way).
    z.checkpoint()
    assert z.deferred == {lay.tp: lay.ends["B"]}
    if lay.store_kind == "directory":
        assert not z.holds()                             # wiped, unsaved; the member goes on
        fence = [line for line in z.said if "another member claimed them since" in line]
        assert len(fence) == 1 and "\n" not in fence[0], z.said
    assert group.committed[lay.tp] == lay.ends["C"]      # nothing of Z's was committed
    assert lay.durable() == ABC                          # a release meanwhile reads N's table
    # 4. M takes the task and replays from N's commit: it holds C too
    group.rebalance()
    m = lay.member(group)
    m.replay(group)
    assert m.ones() == ABC
    m.checkpoint()
    assert lay.durable() == ABC
    z.final_checkpoint()                                 # exit 0: the broker holds N's commit,
    assert lay.durable() == ABC                          # past everything Z applied


@pytest.mark.parametrize("kind", KINDS)
def test_a_zombie_that_saves_on_revoke_is_refused_too(kind: str, tmp_path: Path) -> None:
    """kafka-python may tell a woken zombie its task was *revoked* (not lost): the listener then
    saves it before handing it over. That save is fenced like a checkpoint's: refused, the task
    dropped unsaved with one line, nothing of it lands and nothing is committed."""
    lay = Layout(kind, tmp_path)
    z, group = zombie_interleaving(lay)
    lay.clock.now = lay.open_at + 1200                   # (00:50: the window still open)
    z.revoke()
    assert not z.holds()
    assert any("another member claimed them since" in line for line in z.said), z.said
    assert lay.durable() == ABC
    assert group.committed[lay.tp] == lay.ends["C"]


def test_a_member_that_claims_late_is_refused(lay: Layout) -> None:
    """Z is assigned in generation 1 but claims only after N (generation 2) claimed and saved:
    its claim is lower than the store's, and the commit that would prove it current fails."""
    group = Group()

    def paused() -> None:                                # between Z's assignment and its claim
        group.rebalance()
        n = lay.member(group)
        n.apply(lay.batch("A"))
        n.checkpoint()

    late = lay.member(group, join=False)
    late.join(pause=paused)                              # before: FencedError, exit 1
    late.poll()                                          # retried, refused again: said once
    assert not late.holds() and late.epoch is None
    assert len(late.said) == 1 and f"claim of {lay.where} was refused" in late.said[0], late.said
    assert lay.durable() == set(A)
    group.rebalance()                                    # its rejoin: generation 3, and the
    late.rejoin()                                        # task handed to it again
    late.consumer._events += [("lost", {lay.tp}), ("assigned", {lay.tp})]
    late.poll()
    assert late.holds() and late.ones() == set(A) and late.epoch == 3


def test_a_recreated_group_whose_generations_restart_takes_its_tasks_back(lay: Layout) -> None:
    """Kafka forgets a group a week after its last member left; the next incarnation counts
    generations from 1 again. Its member's claim is lower than the stored epoch, but a commit
    proves it current: it rebases above the stored epoch and its saves win."""
    old = Group()
    old.generation = 7
    a = lay.member(old)
    a.apply(lay.batch("A"))
    a.checkpoint()
    new = Group()                                        # generation 1, nothing committed
    b = lay.member(new)
    assert b.ones() == set(A)
    b.apply(lay.batch("B"))
    b.checkpoint()
    new.rebalance()
    c = lay.member(new)                                  # generation 2: epoch 7 + 2
    assert c.ones() == set(A) | set(B)
    assert b.epoch == 8 and c.epoch == 9
    c.checkpoint()
    with contextlib.suppress(FencedError):               # the older claims' late saves: refused
        b.checkpoint()                                   # (directory) or ignored (topic)
    assert lay.durable() == set(A) | set(B)


def test_a_current_member_whose_proof_meets_a_rebalance_waits_and_claims_after_it(
        lay: Layout) -> None:
    """Tansu counts generations from 0, and the claim counts 0 as 1: the member assigned the task
    in generation 1 claims no higher than its owner of generation 0, so it must prove itself
    current with a commit. If a rebalance has begun meanwhile (another member joins), that commit
    fails with ``RebalanceInProgressError``, which says nothing of eviction: before, the claim read
    it as "not current" and stopped a current member on the fence (exit 1). It now leaves the
    task unclaimed, unread and paused, and claims it after the rebalance."""
    group = Group()
    group.generation = 0
    a = lay.member(group)                                # generation 0: epoch 1
    a.apply(lay.batch("A"))
    a.checkpoint()
    group.rebalance()                                    # generation 1: the task moves to B
    b = lay.member(group, join=False)
    group.rebalancing = True                             # a third member joins
    b.join()                                             # before: FencedError
    b.poll()                                             # still rebalancing: said once
    assert not b.holds() and b.epoch is None
    assert len(b.said) == 1 and f"claim of {lay.where} met a rebalance" in b.said[0], b.said
    group.rebalancing = False                            # B stays current, the task with it
    b.poll()
    assert b.holds() and b.ones() == set(A) and b.epoch == 2  # proved current: rebased, 1 + 1
    b.replay(group)
    b.checkpoint()
    with contextlib.suppress(FencedError):               # the old owner's late save: refused
        a.checkpoint()                                   # (directory) or ignored (topic)
    assert lay.durable() == ABC


@pytest.mark.parametrize("kind", KINDS)
def test_a_claim_writes_only_public_parameters(kind: str, tmp_path: Path) -> None:
    """The claim file beside a task's tables holds the epoch and its base (the group's
    rebalances), and nothing of the stream: no offset, no count. A busy and an idle member leave
    the same one, and the lock file is gone after each use."""
    claims = []
    for traffic in (True, False):
        lay = Layout(kind, tmp_path / ("busy" if traffic else "idle"))
        t = lay.member(Group())
        if traffic:
            t.apply(lay.stream)
        t.checkpoint()
        claim = lay.claim_file()
        claims.append(claim.read_bytes())
        assert sorted(p.name for p in claim.parent.iterdir() if p.name.startswith(".")) == \
            [claim.name]
    assert claims[0] == claims[1] == b'{"base": 0, "epoch": 1}'


# ------------------------------------------------------------------ shards and routed slices
@pytest.fixture(params=layouts(("partition", "slice")), ids=lambda p: f"{p[0]}-{p[1]}")
def stored(request: pytest.FixtureRequest, tmp_path: Path) -> Layout:
    """The kinds whose tables lie in the group's store (a directory or a state topic)."""
    kind, store = request.param
    return Layout(kind, tmp_path, store)


def test_a_store_written_before_fencing_restores_and_is_taken_over(stored: Layout) -> None:
    """A table saved without an epoch (panstream before the fence) has epoch 0: it restores, and
    the first fenced save replaces it (on a state topic, its records get tombstones)."""
    lay = stored
    lay.save_before_fencing(range(300, 310))
    t = lay.member(Group())
    assert t.ones() == set(range(300, 310))
    t.apply(lay.batch("A"))
    t.checkpoint()
    # a shard written before the keying check too (issue 39) keeps no record, so only the sum
    # merge releases it (one shard: the same cells)
    merge = "sum" if lay.kind == "partition" else "auto"
    assert released_ones(lay.open_store(), merge) == set(range(300, 310)) | set(A)
    assert lay.open_store().keys() == [lay.key]          # one table, whatever its epochs


@pytest.mark.parametrize("kind", ["partition", "slice"])
def test_the_state_topic_forgets_the_zombie_with_the_next_claim(kind: str, tmp_path: Path) -> None:
    """Compaction keeps the newest record of each key: Z's ignored snapshot has a key of its own
    epoch (``<key>@1``), so it cannot supersede N's (``<key>@2``); M's first save then tombstones
    every older epoch's records."""
    lay = Layout(kind, tmp_path, "topic")
    z, group = zombie_interleaving(lay)
    z.checkpoint()                                       # saved under epoch 1, not committed
    assert group.committed[lay.tp] == lay.ends["C"]

    def stems() -> set[str]:
        lay.log.compact()
        return {k.decode().split("#", 1)[0] for k, _ in lay.log.records if not k.startswith(b"#")}

    assert stems() == {f"{lay.key}@1", f"{lay.key}@2"}   # Z's (ignored) and N's
    assert lay.durable() == ABC
    group.rebalance()
    lay.member(group).checkpoint()
    assert stems() == {f"{lay.key}@3"}                   # one snapshot left: M's
    assert lay.durable() == ABC


# ------------------------------------------------------------------ routed slices
@pytest.mark.parametrize("store", ["directory", "topic"])
def test_a_rotation_replaces_the_fenced_slices(store: str, tmp_path: Path) -> None:
    """``rotate`` (members stopped) writes fresh slices without a claim: under the highest epoch,
    so the next owner restores the fresh table, not the rotated-away one; and the base of a
    rebased claim (a re-created group's) survives it."""
    lay = Layout("slice", tmp_path, store)
    old = Group()
    old.generation = 7
    s = lay.member(old)
    s.apply(lay.batch("A"))
    s.checkpoint()
    new = Group()
    t = lay.member(new)                                  # rebased: epoch 7 + 1
    t.checkpoint()
    t.close()
    rotate_slice_store(lay.open_store())
    new.rebalance()
    fresh = lay.member(new)
    assert not fresh.ones()
    assert fresh.epoch == 9                              # 7 + 2, no second rebase


# ------------------------------------------------------------------ window slices
def test_a_zombie_cannot_close_a_window_with_its_older_table(tmp_path: Path) -> None:
    """Z wakes at the close instant (01:10): refused before it writes anything, so no closed
    slice and N's open copy intact; M restores the open window and closes it with A, B and C."""
    lay = Layout("window", tmp_path)
    z, group = zombie_interleaving(lay)
    z.checkpoint()                                       # refused: dropped unsaved, goes on
    assert not z.holds()
    assert lay.window_file(lay.closed_key) is None       # nothing closed
    assert lay.window_file(lay.open_key) == ABC          # N's open copy intact
    group.rebalance()
    m = lay.member(group)
    assert m.ones() == ABC
    m.replay(group)
    m.checkpoint()
    assert lay.window_file(lay.closed_key) == ABC
    assert lay.window_file(lay.open_key) is None


def test_without_the_fence_a_zombie_closes_the_window_and_removes_the_open_copy(
        tmp_path: Path) -> None:
    """The attack on a window, as ``--window`` stood before: Z closes the window with A and B
    and removes N's open copy; M then finds the window closed, without C."""
    lay = Layout("window", tmp_path)
    z, _ = zombie_interleaving(lay, fenced=False)
    with pytest.raises(SourceError, match="offset commit failed"):
        z.checkpoint()                                   # the close lands, the commit fails
    assert lay.window_file(lay.closed_key) == set(A) | set(B)
    assert lay.window_file(lay.open_key) is None         # N's open copy removed by Z


def test_a_zombie_cannot_overwrite_an_open_window_either(tmp_path: Path) -> None:
    """Z wakes while the window is still open (00:50): its save of the open window-slice would
    replace N's; refused, and N's copy (A, B and C) stays what any next owner restores."""
    lay = Layout("window", tmp_path)
    z, _ = zombie_interleaving(lay)
    lay.clock.now = lay.open_at + 1200
    z.checkpoint()                                       # refused: dropped unsaved, goes on
    assert not z.holds()
    assert lay.window_file(lay.open_key) == ABC
