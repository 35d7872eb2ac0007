"""panstream's own families under audit: the real estimator as a runner, and the classic fixed tests.

The classic distinguishers read a target's cell where ``docs/snapshot-format.md`` says it is: its
bit (density) or its counter (frequency), a change of it between two dumps, and any byte outside
the table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from panstream import estimators
from panstream.audit.scenarios import Distinguisher, Runner
from panstream.calibration import DEFAULT_CALIBRATION, DEFAULT_MODULUS
from panstream.release.ledger import PrivacyLedger
from panstream.state.format import DIGEST_SIZE, decode, read_frame
from panstream.state.persist import snapshot_counter
from panstream.universe import Universe

T = TypeVar("T")


def estimator_runner(universe: Universe | str, epsilon: float = 1.0,
                     calibration: str = DEFAULT_CALIBRATION, *,
                     rotate_after: Sequence[int] = (), estimator: str = "density",
                     modulus: int = DEFAULT_MODULUS,
                     make: Callable[[], estimators.Estimator] | None = None) -> Runner:
    """The real estimator as a :data:`Runner`: fresh state per run, dumps are ``snapshot()`` bytes.

    Args:
        universe, epsilon, calibration: as for :class:`~panstream.DensityEstimator`.
        rotate_after: batch indices after which the operator rotates the epoch (after the dump
            taken at that index, i.e. an announced intrusion).
        estimator, modulus: the family (``"density"`` or ``"frequency"``, whose counters count
            modulo ``modulus``).
        make: builds the fresh estimator of each run instead (a test's own configuration); its
            ledger's epoch is the caller's to fix (the default one's is ``"audit"``).
    """
    u = Universe.parse(universe) if isinstance(universe, str) else universe

    def run(batches: Sequence[np.ndarray], dumps: Sequence[int]) -> list[Any]:
        # The ledger's epoch is a random label, independent of the stream by construction; it is
        # fixed here so that the test "non-table bytes differ from world A" compares exactly.
        est = make() if make is not None else estimators.new(
            estimator, u, epsilon, calibration=calibration, modulus=modulus,
            ledger=PrivacyLedger(epoch="audit"))
        out: list[Any] = []
        for i, batch in enumerate(batches):
            est.update(batch.copy())  # update() wipes the array it is handed
            if i in dumps:
                out.append(est.snapshot())
            if i in rotate_after:
                est.rotate()
                est.ledger.epoch = "audit"  # the new epoch's random label, fixed as above
        return out

    return run


def per_run(read: Callable[[Sequence[Any]], T]) -> Callable[[Sequence[Any]], T]:
    """``read(dumps)``, computed once per run however many distinguishers ask for it.

    The fixed tests of a family read the same value many times per run (a frequency snapshot's
    target counter: once for each of its ``modulus`` values and steps); :func:`audit` hands every
    distinguisher the same ``dumps`` object of a run, so the value is remembered for that object.
    The last run's dumps are held with it, so no later object can take their identity.

    >>> seen = []
    >>> first = per_run(lambda d: seen.append(1) or d[0])
    >>> run = [b"x", b"y"]
    >>> first(run), first(run), len(seen)
    (b'x', b'x', 1)
    """
    last: list[Any] = [None, None]  # [dumps, read(dumps)]

    def get(dumps: Sequence[Any]) -> T:
        if last[0] is not dumps:
            last[0], last[1] = dumps, read(dumps)
        return last[1]  # type: ignore[no-any-return]

    return get


def cell_bit(dump: bytes, cell: int) -> int:
    """The bit of ``cell`` in a snapshot, read at the offset ``docs/snapshot-format.md`` gives."""
    frame = read_frame(dump)
    return (dump[frame.head_size + cell // 8] >> (cell % 8)) & 1


def snapshot_target_bits(dump: bytes, cell: int) -> list[int]:
    """Where ``cell`` sits in a density or frequency snapshot, as bit offsets ``8 * byte + bit``
    (least significant bit first): its table bit, or the bits of its counter field.

    This is panstream's own :data:`~panstream.audit.joint.TargetBits`: the learned distinguisher
    pairs every bit with these when a dump is too large for all pairs. A family whose cells are not
    one contiguous field each (a sketch hashing a person to several cells) passes its own.

    >>> from panstream import DensityEstimator
    >>> d = DensityEstimator("range:64").snapshot()
    >>> snapshot_target_bits(d, 3) == [8 * read_frame(d).head_size + 3]
    True
    """
    frame = read_frame(dump)
    cells = int(decode(dump).params["cells"])
    per = max(1, 8 * frame.payload_size // max(1, cells))
    start = 8 * frame.head_size + cell * per
    return list(range(start, start + per))


def non_table_bytes(dump: bytes) -> bytes:
    """Every byte of a snapshot except the table and its checksum (which is a function of them)."""
    frame = read_frame(dump)
    return dump[: frame.head_size] + dump[frame.head_size + frame.payload_size + DIGEST_SIZE :]


def snapshot_distinguishers(target: int, dumps: int, reference: Sequence[bytes],
                            what: str = "target bit") -> dict[str, Distinguisher]:
    """The intruder's tests on snapshot dumps.

    * ``target bit of dump k is 1``: the optimal test against one dump.
    * ``target bit changed between dumps k and k+1``: the optimal test against two dumps.
    * ``non-table bytes differ from world A``: catches anything stored besides the table
      (``reference`` is the dumps of one world-A run).

    ``target`` is the bit's index in the table; ``what`` names it in the tests' names.
    """
    def bit_is_one(k: int) -> Distinguisher:
        return lambda d: cell_bit(d[k], target) == 1

    def bit_changed(k: int) -> Distinguisher:
        return lambda d: cell_bit(d[k], target) != cell_bit(d[k + 1], target)

    tests = {f"{what} of dump {k + 1} is 1": bit_is_one(k) for k in range(dumps)}
    for k in range(dumps - 1):
        tests[f"{what} changed between dumps {k + 1} and {k + 2}"] = bit_changed(k)
    tests["non-table bytes differ from world A"] = other_bytes_differ(reference)
    return tests


def other_bytes_differ(reference: Sequence[bytes]) -> Distinguisher:
    """The event "some byte outside the table differs from the world-A run ``reference``": it
    catches anything a snapshot stores beside its table."""
    refs = [non_table_bytes(r) for r in reference]
    return lambda d: any(non_table_bytes(x) != r for x, r in zip(d, refs, strict=True))


def counter_distinguishers(target: int, dumps: int, reference: Sequence[bytes], modulus: int
                           ) -> dict[str, Distinguisher]:
    """The intruder's tests on frequency snapshots (counters modulo ``modulus``).

    * ``target counter of dump k is j`` for every value j: together they hold the optimal test
      against one dump (the counter's law is D shifted by the target's count);
    * ``target counter moved by s between dumps k and k+1``: what two dumps of one epoch give away
      (the count in between, modulo k);
    * ``non-table bytes differ from world A``, as for :func:`snapshot_distinguishers`.
    """
    counters = per_run(lambda d: [snapshot_counter(x, target) for x in d])

    def value_is(k: int, j: int) -> Distinguisher:
        return lambda d: counters(d)[k] == j

    def moved_by(k: int, step: int) -> Distinguisher:
        return lambda d: (counters(d)[k + 1] - counters(d)[k]) % modulus == step

    tests = {f"target counter of dump {k + 1} is {j}": value_is(k, j)
             for k in range(dumps) for j in range(modulus)}
    for k in range(dumps - 1):
        for step in range(modulus):
            tests[f"target counter moved by {step} between dumps {k + 1} and {k + 2}"] = \
                moved_by(k, step)
    tests["non-table bytes differ from world A"] = other_bytes_differ(reference)
    return tests
