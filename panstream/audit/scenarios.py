"""What the intruder is shown: two neighbouring worlds, and the intrusion patterns of the standard audit.

World A lacks the target, world B adds its arrivals among identical other traffic; a
:class:`Scenario` says how often and when the target arrives, when the state is dumped and when the
epoch is rotated. Everything here is deterministic and public: no random generator.

>>> w = neighbouring_worlds(8, target=3, occurrences=2, background=1, batches=2)
>>> [b.tolist() for b in w.a], [b.tolist() for b in w.b]
([[0, 1, 2, 4], [5, 6, 7]], [[3, 0, 1, 2, 4], [3, 5, 6, 7]])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from panstream.errors import ConfigurationError

#: A mechanism under audit: given the batches of one world and the batch indices after which the
#: intruder dumps the state, run once from a fresh state and return the dumps.
Runner = Callable[[Sequence[np.ndarray], Sequence[int]], list[Any]]
#: An event an intruder tests on the dumps of one run.
Distinguisher = Callable[[Sequence[Any]], bool]

@dataclass(frozen=True)
class Worlds:
    """Two neighbouring streams, identical except for the target's arrivals.

    Attributes:
        size: number of cells.
        target: the target's cell.
        occurrences: how often the target arrives in world B (never in A).
        a, b: the batches of world A and world B.
        dumps: batch indices after which the intruder dumps the state.
    """

    size: int
    target: int
    occurrences: int
    a: tuple[np.ndarray, ...]
    b: tuple[np.ndarray, ...]
    dumps: tuple[int, ...]


def neighbouring_worlds(size: int, *, target: int | None = None, occurrences: int = 1,
                        background: int = 2, batches: int = 4, first_batch: int = 0,
                        dumps: Sequence[int] | None = None) -> Worlds:
    """Build worlds A and B over cells ``0..size-1``.

    Other traffic: every cell except the target arrives ``background`` times, in rounds, split into
    ``batches`` batches. World B adds the target ``occurrences`` times, spread evenly over batches
    ``first_batch..batches-1`` and interleaved with the other traffic.

    Args:
        size: cells in the universe (at least 2).
        target: the target cell (default ``size // 2``).
        occurrences: arrivals of the target in world B (at least 1).
        background: arrivals of each other cell (0 for none).
        batches: number of batches (state is only observable between batches).
        first_batch: first batch that may contain the target (for dumps straddling its arrival).
        dumps: batch indices after which to dump (default: after the last batch only).

    Returns:
        The two worlds.

    Raises:
        ValueError: inconsistent arguments.
    """
    target = size // 2 if target is None else target
    dumps = (batches - 1,) if dumps is None else tuple(dumps)
    if size < 2 or not 0 <= target < size or occurrences < 1 or background < 0 or batches < 1:
        msg = "need size >= 2, 0 <= target < size, occurrences >= 1, background >= 0, batches >= 1"
        raise ConfigurationError(msg)
    if not 0 <= first_batch < batches or not dumps or any(not 0 <= d < batches for d in dumps):
        msg = f"first_batch and dumps must be batch indices in 0..{batches - 1}"
        raise ConfigurationError(msg)
    others = np.delete(np.arange(size, dtype=np.int64), target)
    world_a = [np.ascontiguousarray(x) for x in np.array_split(np.tile(others, background), batches)]
    world_b = list(world_a)
    window = batches - first_batch
    for j in range(window):
        k = occurrences // window + (1 if j < occurrences % window else 0)
        if k:
            batch = world_a[first_batch + j]
            at = np.linspace(0, batch.size, k, endpoint=False).astype(np.intp)
            world_b[first_batch + j] = np.insert(batch, at, target)
    return Worlds(size, target, occurrences, tuple(world_a), tuple(world_b), dumps)


@dataclass(frozen=True)
class Scenario:
    """One intrusion pattern of the standard audit.

    Attributes:
        name: description.
        occurrences: arrivals of the target in world B.
        dumps: batch indices after which the state is dumped.
        first_batch: first batch the target may arrive in.
        rotate_after: batch indices after which the epoch is rotated.
        covered: whether the single-intrusion guarantee is meant to hold.
    """

    name: str
    occurrences: int
    dumps: tuple[int, ...] = (3,)
    first_batch: int = 0
    rotate_after: tuple[int, ...] = ()
    covered: bool = True


def standard_scenarios(many: int = 16) -> tuple[Scenario, ...]:
    """The scenarios ``panstream audit`` runs (4 batches each).

    1. one dump, target arrives once; 2. one dump, target arrives ``many`` times, spread over the
    4 batches and interleaved with other traffic; 3. two dumps straddling the target's arrival,
    rotation after the first (covered: the second epoch is independent of the dumped one); 4. the
    same without rotation: *not* covered, shown to document what two intrusions of one epoch reveal;
    5. and 6. a heavy user: ``many`` arrivals within one batch, and ``many`` in each of the 4 batches
    (a design that treats a cell hit often within one update differently shows only here).

    The order of the first four is kept from earlier versions (callers pick scenarios by index).

    >>> [(s.occurrences, s.first_batch) for s in standard_scenarios(8)[4:]]
    [(8, 3), (32, 0)]
    """
    return (
        Scenario("one dump, target arrives once", 1),
        Scenario(f"one dump, target arrives {many} times", many),
        Scenario("two dumps around the target's arrivals, rotation after the first", many,
                 dumps=(0, 3), first_batch=1, rotate_after=(0,)),
        Scenario("two dumps around the target's arrivals, same epoch (not covered)", many,
                 dumps=(0, 3), first_batch=1, covered=False),
        Scenario(f"one dump, heavy user: target arrives {many} times in one batch", many,
                 first_batch=3),
        Scenario(f"one dump, heavy user: target arrives {many} times in each of 4 batches",
                 4 * many),
    )
