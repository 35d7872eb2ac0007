"""Deliberately broken variants of panstream's state, for the audit to catch. BROKEN ON PURPOSE.

They live in the test tree only (``tests/state/test_audit_learned.py`` checks that the audit catches
them, ``bench/bench_audit_power.py`` measures its power on them) and are never a code path of
panstream. Each maker returns a :data:`panstream.audit.Runner` and documents the variant's *true*
epsilon, computed exactly from its laws: the bound the audit certifies must stay below it, and the
audit should catch the variant when it is well above the claim.

Tables are drawn with NumPy's default generator (fresh OS entropy, no seed kept): these are test
doubles, not panstream's CSPRNG path.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

import panstream as ps
from panstream import audit as A
from panstream.state import format as fmt

RNG = np.random.default_rng()
#: Bytes of the SHA-256 trailer of a snapshot (docs/snapshot-format.md).
DIGEST = 32


def tight_p(epsilon: float) -> Fraction:
    """The exact D1 probability of the tight calibration (what the real estimator uses)."""
    return ps.calibrate(epsilon, "tight").p


def claimed(epsilon: float) -> float:
    """The realized epsilon_state the real estimator claims at ``epsilon`` (tight calibration)."""
    return ps.calibrate(epsilon, "tight").epsilon_state


def as_snapshot(template: bytes, bits: np.ndarray) -> bytes:
    """``bits`` written into a real snapshot, using only the documented layout: the packed table
    (least significant bit first) sits right before the 32-byte SHA-256 of everything before it."""
    table = np.packbits(bits, bitorder="little").tobytes()
    head = template[: len(template) - DIGEST - len(table)]
    body = head + table
    return body + hashlib.sha256(body).digest()


def snapshot_template(cells: int, epsilon: float = 1.0) -> bytes:
    """A real estimator's snapshot over ``range:cells``, to carry a variant's table."""
    return ps.DensityEstimator(ps.Universe.range(cells), epsilon).snapshot()


# ---------------------------------------------------------------------- a biased D0
def biased_d0_epsilon(q: float, epsilon: float) -> float:
    """True epsilon of one cell that holds Bernoulli(q) if absent and Bernoulli(p) if present."""
    p = float(tight_p(epsilon))
    return max(abs(math.log(p / q)), abs(math.log((1 - p) / (1 - q))))


def biased_d0(q: float, epsilon: float = 1.0, size: int = 64, *, snapshot: bool = False) -> A.Runner:
    """The estimator with D0 = Bernoulli(``q``) instead of 1/2, D1 tight for ``epsilon``.

    The claim (realized epsilon_state) assumes D0 = 1/2; a dump is really
    :func:`biased_d0_epsilon` (q, epsilon)-DP: the target's cell is the only one whose law differs.
    Dumps: the bit table as a ``uint8`` array, or inside real snapshot bytes.
    """
    return bit_table(size, float(tight_p(epsilon)), q, epsilon, snapshot=snapshot)


def bit_table(size: int, p: float, q: float, epsilon: float, *, snapshot: bool,
              then: Callable[[np.ndarray, np.ndarray], None] | None = None) -> A.Runner:
    """A bit table drawn D0 = Bernoulli(``q``), each arrival's cell redrawn D1 = Bernoulli(``p``);
    ``then(bits, batch)`` alters the table after each batch (the broken design's shortcut). Dumps:
    the bits as a ``uint8`` array, or inside real snapshot bytes over ``range:size``."""
    template = snapshot_template(size, epsilon) if snapshot else b""

    def run(batches: Sequence[np.ndarray], dumps: Sequence[int]) -> list[Any]:
        bits = (RNG.random(size) < q).astype(np.uint8)
        out: list[Any] = []
        for i, batch in enumerate(batches):
            bits[batch] = RNG.random(batch.size) < p
            if then is not None:
                then(bits, batch)
            if i in dumps:
                out.append(as_snapshot(template, bits) if snapshot else bits.copy())
        return out

    return run


# ---------------------------------------------------------------------- a second cell per arrival
def second_cell(size: int = 64, *, shadow: bool = False, epsilon: float = 1.0,
                snapshot: bool = False) -> A.Runner:
    """Each arrival of ``x`` also redraws a second cell from D1: ``x + 1`` (mod ``size``), or, with
    ``shadow``, cell ``size + x`` of a table twice as large (a Bloom-style second hash).

    True epsilon: ``2 * epsilon_state`` (two independent cells each go from D0 to D1, so the
    likelihood ratio of "both 0" is (1/2 / (1 - p))**2) *when nothing else touches the second
    cell*. With ``x + 1`` that needs worlds without background traffic: with background, the target's
    own cell is redrawn by cell ``target - 1`` in both worlds and the variant leaks nothing (true
    epsilon 0). The shadow cells of others never collide, so it leaks 2 epsilon_state either way.
    """
    p = float(tight_p(epsilon))
    cells = 2 * size if shadow else size
    template = snapshot_template(cells, epsilon) if snapshot else b""

    def run(batches: Sequence[np.ndarray], dumps: Sequence[int]) -> list[Any]:
        bits = RNG.integers(0, 2, cells, dtype=np.uint8)
        out: list[Any] = []
        for i, batch in enumerate(batches):
            second = batch + size if shadow else (batch + 1) % size
            touched = np.concatenate([batch, second])
            bits[touched] = RNG.random(touched.size) < p
            if i in dumps:
                out.append(as_snapshot(template, bits) if snapshot else bits.copy())
        return out

    return run


# ---------------------------------------------------------------------- the designs test_audit.py had
def stored_count(size: int = 64) -> A.Runner:
    """The real estimator whose snapshot ledger also records how many items were seen (true
    epsilon infinite: the count differs by one between the worlds, always). Dumps: snapshot bytes."""
    u = ps.Universe.range(size)

    def run(batches: Sequence[np.ndarray], dumps: Sequence[int]) -> list[Any]:
        # The ledger's random epoch label is fixed, as the audit's own runner does, so that only
        # the stored count makes the non-table bytes differ.
        est, seen, out = ps.DensityEstimator(u, _ledger=ps.PrivacyLedger(epoch="audit")), 0, []
        for i, batch in enumerate(batches):
            seen += batch.size
            est.update(batch.copy())
            if i in dumps:
                ledger = {**est.ledger.to_dict(), "items_seen": seen}
                out.append(fmt.encode(est.params(), ledger, est._payload_view()))
        return out

    return run


def noisy_counters(batches: Sequence[np.ndarray], dumps: Sequence[int]) -> list[Any]:
    """A :data:`panstream.audit.Runner`: per-cell uint8 arrival counters (saturating, 64 cells) plus
    noise uniform in 0..3. The target's counter is 0..3 in world A and 1..4 in world B: 0 and 4 each
    occur in one world only (true epsilon infinite). Dumps: the uint8 arrays."""
    counts = np.zeros(64, np.int64)
    out = []
    for i, batch in enumerate(batches):
        np.add.at(counts, batch, 1)
        if i in dumps:
            out.append(np.minimum(counts + RNG.integers(0, 4, 64), 255).astype(np.uint8))
    return out


def seeded_pcg64(size: int = 64) -> A.Runner:
    """A table drawn by a seeded PCG64 whose seed is saved with it. Dumps: ``(seed, bits)``.

    The intruder replays the initial table from the seed and sees whether the target's bit was
    redrawn: a redraw that changed the bit never happens in world A (true epsilon infinite)."""
    p = float(tight_p(1.0))

    def run(batches: Sequence[np.ndarray], dumps: Sequence[int]) -> list[Any]:
        seed = int.from_bytes(os.urandom(8), "little")
        rng = np.random.Generator(np.random.PCG64(seed))
        bits = rng.integers(0, 2, size, dtype=np.uint8)
        out = []
        for i, batch in enumerate(batches):
            bits[batch] = rng.random(batch.size) < p
            if i in dumps:
                out.append((seed, bits.copy()))
        return out

    return run


def replayed_bit_differs(target: int, size: int = 64) -> A.Distinguisher:
    """The hand-written test against :func:`seeded_pcg64`: replay the seed, compare the target."""

    def test(d: Sequence[Any]) -> bool:
        seed, bits = d[-1]
        initial = np.random.Generator(np.random.PCG64(seed)).integers(0, 2, size, dtype=np.uint8)
        return bool(bits[target] != initial[target])

    return test


def exact_set() -> A.Runner:
    """Keep the set of items seen (true epsilon infinite). Dumps: ``frozenset`` of cells."""

    def run(batches: Sequence[np.ndarray], dumps: Sequence[int]) -> list[Any]:
        seen: set[int] = set()
        out = []
        for i, batch in enumerate(batches):
            seen.update(batch.tolist())
            if i in dumps:
                out.append(frozenset(seen))
        return out

    return run


COUNT_MIN_DEPTH, COUNT_MIN_WIDTH = 3, 16


def count_min_columns(size: int = 64) -> np.ndarray:
    """The public hash of each cell into each row of :func:`count_min`."""
    return np.array([[int.from_bytes(hashlib.blake2b(f"{r}:{x}".encode(), digest_size=4).digest(),
                                     "little") % COUNT_MIN_WIDTH for r in range(COUNT_MIN_DEPTH)]
                     for x in range(size)])


def count_min(size: int = 64) -> A.Runner:
    """A count-min sketch (depth 3, width 16, public hashes; true epsilon infinite: the counters
    are a deterministic function of the stream). Dumps: ``int64`` counter arrays of shape (3, 16)."""
    cols = count_min_columns(size)

    def run(batches: Sequence[np.ndarray], dumps: Sequence[int]) -> list[Any]:
        c = np.zeros((COUNT_MIN_DEPTH, COUNT_MIN_WIDTH), dtype=np.int64)
        out = []
        for i, batch in enumerate(batches):
            for r in range(COUNT_MIN_DEPTH):
                np.add.at(c[r], cols[batch, r], 1)
            if i in dumps:
                out.append(c.copy())
        return out

    return run


# ---------------------------------------------------------------------- issue 21: what per-bit features miss
def rr_p_q(epsilon: float) -> tuple[float, float]:
    """D1 and D0 probabilities of the rr calibration (panstream's default) at ``epsilon``."""
    c = ps.calibrate(epsilon, "rr")
    return float(c.p), float(c.q)


def claimed_rr(epsilon: float) -> float:
    """The realized epsilon_state the default (rr) estimator claims at ``epsilon``."""
    return ps.calibrate(epsilon, "rr").epsilon_state


def xor_pad_journal(size: int = 64, epsilon: float = 1.0, *, snapshot: bool = True) -> A.Runner:
    """The real table (rr) plus a journal of the cells touched, stored XOR-ed with a one-time pad
    that is stored beside it: a snapshot of a ``3 * size``-cell table laid out as
    ``table | journal ^ pad | pad``.

    Every journal and pad bit alone is a fair coin in both worlds, so no single bit says more than
    the table's own cell (epsilon_state); the pair (cell ``size + x``, cell ``2 size + x``) XORs to
    "x was touched". True epsilon infinite: in world A the target's pair always agrees, in world B
    it never does. Dumps: snapshot bytes (or the ``3 * size`` bits as a ``uint8`` array).
    """
    p, q = rr_p_q(epsilon)
    template = snapshot_template(3 * size, epsilon) if snapshot else b""

    def run(batches: Sequence[np.ndarray], dumps: Sequence[int]) -> list[Any]:
        table = (RNG.random(size) < q).astype(np.uint8)
        pad = RNG.integers(0, 2, size, dtype=np.uint8)
        masked = pad.copy()  # the journal (all zero: nothing touched yet) XOR the pad
        out: list[Any] = []
        for i, batch in enumerate(batches):
            table[batch] = RNG.random(batch.size) < p
            masked[batch] = 1 ^ pad[batch]
            if i in dumps:
                bits = np.concatenate([table, masked, pad])
                out.append(as_snapshot(template, bits) if snapshot else bits)
        return out

    return run


def batch_saturation(size: int = 64, epsilon: float = 1.0, *, threshold: int = 8,
                     snapshot: bool = True) -> A.Runner:
    """The real table (rr), except that a cell hit ``threshold`` or more times within one batch is
    set to 1 (a "heavy hitter" shortcut) instead of holding a fresh D1 draw.

    A person seen once, or a few times per batch, gets exactly the real table's epsilon_state, so
    single-arrival scenarios certify at most the claim. A heavy user's cell is 1 with certainty: in
    world A it is 0 with probability 1 - q (or 1 - p after background traffic), in world B never.
    True epsilon infinite once the target arrives ``threshold`` times in one batch. Dumps: snapshot
    bytes over ``range:size`` (or the bits as a ``uint8`` array).
    """
    p, q = rr_p_q(epsilon)

    def saturate(bits: np.ndarray, batch: np.ndarray) -> None:
        bits[np.bincount(batch, minlength=size) >= threshold] = 1

    return bit_table(size, p, q, epsilon, snapshot=snapshot, then=saturate)
