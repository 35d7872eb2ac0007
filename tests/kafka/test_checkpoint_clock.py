"""The consumer's checkpoints run on a fixed clock (issue 21 §2), without a broker.

The consumer used to plan each checkpoint ``interval`` seconds after the previous one *ended*, at the
first loop turn after that; a poll returns early when a message arrives, so arrivals shifted the
phase of every later checkpoint (the review saw the effect, weaker than for ``ingest``). Now
:meth:`Checkpointer.due` is the grid ``start + k * interval`` and the consumer never waits in
``poll`` past :meth:`Checkpointer.seconds_until_due`.
"""

from __future__ import annotations

from panstream.estimators.density import DensityEstimator
from panstream.state.checkpoint import Checkpointer, Shard


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
