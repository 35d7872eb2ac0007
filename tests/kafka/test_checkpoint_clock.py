"""The consumer's checkpoints run on a fixed clock (issue 21 §2), without a broker.

The consumer used to plan each checkpoint ``interval`` seconds after the previous one *ended*, at the
first loop turn after that; a poll returns early when a message arrives, so arrivals shifted the
phase of every later checkpoint (the review saw the effect, weaker than for ``ingest``). Now
:meth:`Checkpointer.due` is the grid ``start + k * interval`` and the consumer never waits in
``poll`` past :meth:`Checkpointer.seconds_until_due`.
"""

from __future__ import annotations

import threading
from typing import Any

from panstream.estimators.density import DensityEstimator
from panstream.sources.kafka.group import TailConfig
from panstream.sources.kafka.member import Member
from panstream.sources.kafka.route import RouteConfig
from panstream.sources.kafka.slices import SliceStage
from panstream.sources.kafka.watch import StallWatch
from panstream.state.checkpoint import Checkpointer, Shard
from panstream.state.slices import SliceLayout
from panstream.universe import Universe

LAYOUT = SliceLayout(Universe.parse("range:64"), 4)


class Memory:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def save(self, key: str, data: bytes | bytearray) -> None:
        self.data[key] = bytes(data)

    def load(self, key: str) -> bytes | None:
        return self.data.get(key)

    def keys(self) -> list[str]:
        return sorted(self.data)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _checkpoint_times(arrivals: list[float], interval: float = 5.0, until: float = 31.0,
                      poll: float = 0.2, save_takes: float = 0.013) -> list[float]:
    """Drive the consumer's loop: poll (returns at the next arrival or after ``poll`` seconds, and
    never later than the next checkpoint's instant), then checkpoint when due. Returns the times
    (after the start) at which checkpoints began."""
    clock = Clock()
    start = clock.t
    cp = Checkpointer(Memory(), lambda offsets: None, clock=clock)
    shard = Shard("t/0", 0, DensityEstimator("range:16"))
    pending = sorted(start + a for a in arrivals)
    began = []
    while clock.t < start + until:
        wait = min(poll, cp.seconds_until_due(interval))
        nxt = pending[0] if pending else float("inf")
        if nxt <= clock.t + wait:
            clock.t = nxt
            pending.pop(0)
            shard.applied(1)
        else:
            clock.t += wait
        if cp.due(interval):
            began.append(round(clock.t - start, 9))
            cp.checkpoint([shard])
            clock.t += save_takes  # a checkpoint takes time: it must not shift the next one
    return began


def test_arrivals_do_not_move_the_checkpoints() -> None:
    idle = _checkpoint_times([])
    busy = _checkpoint_times([0.07, 3.33, 4.999, 7.1, 12.345, 14.99, 22.2])
    assert idle == busy == [5.0, 10.0, 15.0, 20.0, 25.0, 30.0]


def test_a_late_checkpoint_does_not_shift_the_next_one() -> None:
    clock = Clock()
    cp = Checkpointer(Memory(), lambda offsets: None, clock=clock)
    clock.t += 5.4  # a batch was in hand when the instant came
    assert cp.due(5.0)
    cp.checkpoint([])
    assert abs(cp.seconds_until_due(5.0) - 4.6) < 1e-9  # still start + 10, not 5.4 + 5
    clock.t += 4.6
    assert cp.due(5.0)


# ------------------------------------------------------------------ one clock for both stages
class _Router:
    """A routing stage whose polls return at the next arrival (or after ``timeout_ms``) on the
    fake clock; it records the instants of its source commits and stops the member at ``until``."""

    def __init__(self, clock: Clock, arrivals: list[float], until: float, stop: Any) -> None:
        self.clock, self.until, self.stop = clock, clock.t + until, stop
        self.pending = sorted(clock.t + a for a in arrivals)
        self.commits: list[float] = []
        self.config = RouteConfig({"group_id": "g"}, {}, ["logs"], LAYOUT, "g-cells")
        self.count: Any = None

    def open(self) -> None:
        pass

    def poll_once(self, timeout_ms: int) -> bool:
        wait = timeout_ms / 1000
        nxt = self.pending[0] if self.pending else float("inf")
        came = nxt <= self.clock.t + wait
        self.clock.t = self.pending.pop(0) if came else self.clock.t + wait
        if self.clock.t >= self.until:
            self.stop.set()
        return came

    def commit(self) -> None:
        self.commits.append(round(self.clock.t - (self.until - 31.0), 9))
        self.clock.t += 0.021  # a commit takes time: it must not shift the next one

    def settle(self) -> None:
        pass

    def finish(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_the_routing_stage_commits_on_the_slice_stage_checkpoint_grid() -> None:
    """The routing stage used to commit ``interval`` seconds after its previous commit (its own
    timer, in member.py), so its commits drifted off the slices' grid by each poll's overshoot
    and by the commits' own time. Now its routing thread follows the slice stage's checkpoint
    grid (:meth:`GroupLoop.commit_clock`): both stages, fed different arrivals, commit at
    ``start + k * interval``, the same instants."""
    clock = Clock()
    cfg = TailConfig({}, ["g-cells"], LAYOUT.universe, 1.0, "rr", Memory(), checkpoint_interval=5.0)
    slices = SliceStage(cfg, LAYOUT)
    slices.checkpointer = Checkpointer(slices.saves, slices._commit_sync, clock=clock)
    m = Member.__new__(Member)  # only the routing thread's loop: no broker, no drain question
    router = _Router(clock, [0.07, 3.33, 4.999, 7.1, 12.345, 14.99, 22.2], 31.0, threading.Event())
    m.route, m.slices, m._route_stop = router, slices, router.stop
    m._settle, m._settled = threading.Event(), threading.Event()
    m.watch, m._route_error = StallWatch(lambda line: None), None
    m._route_loop()
    assert m._route_error is None
    clock.t = slices.checkpointer.started  # the slices' own loop over other arrivals
    cp = slices.checkpointer
    began = []
    while clock.t < cp.started + 31.0:
        clock.t += min(0.2, cp.seconds_until_due(5.0)) + 0.0137
        if cp.due(5.0):
            began.append(round(clock.t - cp.started, 9))
            cp.run(lambda: {})
    grid = [5.0, 10.0, 15.0, 20.0, 25.0, 30.0]
    for commits in (router.commits, began):  # each within a poll's millisecond of the instant
        assert len(commits) == len(grid)
        assert all(0 <= c - g < 0.015 for c, g in zip(commits, grid, strict=True))
