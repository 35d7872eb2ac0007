"""Backtracking-resistant randomness for every privacy-relevant draw.

All draws come from the operating system's CSPRNG through :func:`os.urandom` (``getrandom(2)`` on
Linux). The kernel generator is forward-secure: reading this process's memory, or the kernel state
later, does not reveal bytes that were already handed out. No seed, key or generator state exists in
panstream, so a leaked dump cannot be used to recompute the initial D0 table and so learn which cells
were redrawn (who arrived). NumPy's seeded bit generators never appear here: their state, once read, replays
every past draw.

Bernoulli draws are exact: probabilities are dyadic rationals ``numerator / 2**P_BITS`` and a draw
compares uniform random bytes against the binary expansion of that rational, most significant byte
first, looking at the next byte only on a tie. One byte decides 255 times in 256, so a draw costs
about 8.03 random bits, and the probability realized is exactly ``numerator / 2**P_BITS``.

>>> p = dyadic_at_most(0.75)
>>> p == 3 << (P_BITS - 2)
True
>>> bits = bernoulli(100_000, p)
>>> bool(0.73 < bits.mean() < 0.77)
True
"""

from __future__ import annotations

import io
import math
import os
import threading
from fractions import Fraction

import numpy as np

from panstream.errors import ConfigurationError

#: Precision of every Bernoulli probability: p = numerator / 2**P_BITS exactly.
P_BITS = 32
_P_BYTES = P_BITS // 8
_ONE = 1 << P_BITS


_urandom_file: io.FileIO | None = None
_urandom_lock = threading.Lock()


def _device() -> io.FileIO | None:
    global _urandom_file
    with _urandom_lock:
        if _urandom_file is None and os.path.exists("/dev/urandom"):
            _urandom_file = io.FileIO("/dev/urandom", "rb")
        return _urandom_file


def fill_secure(buf: np.ndarray) -> np.ndarray:
    """Fill a contiguous ``uint8`` array in place with bytes from the OS CSPRNG and return it.

    Reads ``/dev/urandom`` straight into the array (the kernel CSPRNG behind ``os.urandom``), so no
    intermediate copy of the random bytes is left behind in freed memory. Falls back to
    :func:`os.urandom` where there is no such device.
    """
    view = buf.data.cast("B")
    dev = _device()
    done, n = 0, len(view)
    while done < n:
        if dev is not None:
            got = dev.readinto(view[done:])
            if not got:
                raise OSError("/dev/urandom returned no data")
        else:
            chunk = os.urandom(min(n - done, 1 << 20))
            got = len(chunk)
            view[done : done + got] = chunk
        done += got
    return buf


def secure_bytes(n: int) -> np.ndarray:
    """``n`` uniform bytes from the OS CSPRNG as a writable ``uint8`` array."""
    return fill_secure(np.empty(max(n, 0), dtype=np.uint8))


def secure_uniform_below(bound: int) -> int:
    """One uniform integer in ``0..bound-1`` from the OS CSPRNG (rejection sampling, no bias)."""
    if bound <= 0:
        msg = f"bound must be positive, got {bound}"
        raise ConfigurationError(msg)
    nbytes = (bound.bit_length() + 7) // 8 + 1
    limit = (1 << (8 * nbytes)) // bound * bound
    while True:
        r = int.from_bytes(os.urandom(nbytes), "little")
        if r < limit:
            return r % bound


def dyadic_at_most(p: float | Fraction) -> int:
    """The numerator of the largest dyadic ``k / 2**P_BITS`` that is ``<= p`` (0 <= p <= 1).

    Rounding down keeps the realized epsilon of ``p > 1/2`` at or below the one asked for.
    """
    f = Fraction(p)
    if not 0 <= f <= 1:
        msg = f"probability must lie in [0, 1], got {p!r}"
        raise ConfigurationError(msg)
    return math.floor(f * _ONE)


def probability(numerator: int) -> Fraction:
    """The exact probability ``numerator / 2**P_BITS`` a draw with this numerator realizes."""
    return Fraction(numerator, _ONE)


def _threshold_bytes(numerator: int) -> bytes:
    if not 0 <= numerator <= _ONE:
        msg = f"numerator must lie in 0..2**{P_BITS}, got {numerator}"
        raise ConfigurationError(msg)
    return min(numerator, _ONE - 1).to_bytes(_P_BYTES, "big")


def bernoulli(n: int, numerator: int, out: np.ndarray | None = None) -> np.ndarray:
    """``n`` independent draws of Bernoulli(``numerator / 2**P_BITS``) as a ``bool`` array.

    Each draw is ``U < p`` for a uniform ``U`` read byte by byte from the OS CSPRNG: the first byte
    is compared with the first byte of ``p``'s expansion and only ties read a further byte. The
    random bytes are overwritten before returning.

    Args:
        n: number of draws.
        numerator: ``p * 2**P_BITS``, an integer in ``0..2**P_BITS``.
        out: optional ``bool`` array of length ``n`` to write into.
    """
    return bernoulli_from_bytes(secure_bytes(n), numerator, out)


def bernoulli_from_bytes(first: np.ndarray, numerator: int, out: np.ndarray | None = None) -> np.ndarray:
    """Finish ``first.size`` Bernoulli(``numerator / 2**P_BITS``) draws whose first bytes are given.

    ``first`` must be fresh uniform bytes from the OS CSPRNG (:func:`secure_bytes`) used for nothing
    else; it is the most significant byte of each draw's ``U``. Ties with ``p``'s first byte read
    further bytes here. ``first`` is overwritten with zeros before returning. This split lets a
    caller read the bytes in another thread (the read releases the GIL) and compare them here.

    Args:
        first: ``uint8`` array of uniform CSPRNG bytes, one per draw (wiped).
        numerator: ``p * 2**P_BITS``, an integer in ``0..2**P_BITS``.
        out: optional ``bool`` array of length ``first.size`` to write into.

    Returns:
        The draws as a ``bool`` array (``out`` if given).
    """
    n = first.size
    if numerator >= _ONE:  # p == 1 exactly
        first.fill(0)
        res = out if out is not None else np.empty(n, dtype=bool)
        res[:] = True
        return res
    thr = _threshold_bytes(numerator)
    res = np.less(first, thr[0], out=out if out is not None else np.empty(n, dtype=bool))
    ties = np.flatnonzero(first == thr[0])
    first.fill(0)
    for k in range(1, _P_BYTES):
        if ties.size == 0:
            break
        rk = secure_bytes(ties.size)
        res[ties] = rk < thr[k]
        nxt = ties[rk == thr[k]]
        ties.fill(0)
        ties = nxt
        rk.fill(0)
    ties.fill(0)
    # Ties on every byte mean U == p on all P_BITS bits, i.e. U >= p: the draw is 0, as set above.
    return res


def bernoulli_half_packed(nbytes: int) -> np.ndarray:
    """``8 * nbytes`` independent fair bits (D0), packed eight to a byte, as a ``uint8`` array."""
    return secure_bytes(nbytes)
