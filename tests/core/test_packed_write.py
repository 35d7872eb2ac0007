"""The packed table's write, on its two paths (issue 38).

A packed table holds eight cells in a byte: cell ``i`` is bit ``i % 8`` of byte ``i // 8``. An
update gives each named cell one fresh draw and must leave the other seven bits of its byte alone.
Two paths do it:

* the C kernel ``panstream.estimators._packed.write`` (built by ``pip install -e .`` or
  ``python3 setup.py build_ext --inplace``): one pass in item order, entry ``k`` writing draw
  ``k``, so a cell named twice keeps the draw of its last entry;
* the NumPy passes (``_packed_write_numpy``), the fallback when the kernel is not built or
  ``PANSTREAM_NATIVE=0``: one pass per bit position, so the draws are dealt in pass order (all
  entries of position 0 first, each pass in item order), and a repeated cell again keeps the draw
  of its last entry.

Either way the draw a cell keeps is chosen by position, never by value. Dealing the NumPy path's
draws in its pass order to the kernel gives the same table bit for bit, which the tests below pin
on small tables. The laws of the bits (one Bernoulli(p) draw per touched cell) are checked on both
paths in test_table.py. No test here is statistical.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from panstream.estimators import bittable
from panstream.estimators.bittable import BitTable, _packed_write, _packed_write_numpy


@pytest.fixture
def kernel() -> object:
    """The C kernel; tests that need it are skipped where it is not built."""
    if bittable._native is None:
        pytest.skip("the C kernel panstream.estimators._packed is not built (or PANSTREAM_NATIVE=0)")
    return bittable._native


def pass_order(idx: np.ndarray) -> np.ndarray:
    """The order in which the NumPy path deals its draws: by bit position, then by position."""
    return np.argsort(idx % 8, kind="stable")


def both_paths(table: np.ndarray, idx: np.ndarray, bits: np.ndarray, kernel: object
               ) -> tuple[np.ndarray, np.ndarray]:
    """The table after the NumPy path writes ``bits`` to ``idx``, and after the kernel writes the
    same draws to the same cells (the entries in the NumPy path's pass order)."""
    by_numpy = table.copy()
    _packed_write_numpy(by_numpy, idx.copy(), bits.copy())  # it consumes (shifts) its draws
    by_kernel = table.copy()
    kernel.write(by_kernel, idx[pass_order(idx)].copy(), bits.copy())  # type: ignore[attr-defined]
    return by_numpy, by_kernel


# Pinned vectors on a 4-byte (32-cell) table: (indices, bits).
VECTORS = {
    "index 0": ([0], [1]),
    "the last cell of the table": ([31], [1]),
    "two cells of one byte": ([3, 4], [1, 1]),
    "all eight cells of one byte": (list(range(8, 16)), [1, 0, 1, 1, 0, 0, 1, 0]),
    "a duplicate cell, last draw 0": ([5, 5, 5], [1, 1, 0]),
    "a duplicate cell, last draw 1": ([5, 5, 5], [0, 0, 1]),
    "duplicates among neighbours": ([9, 8, 9, 15, 8, 9], [1, 1, 0, 1, 0, 1]),
    "every cell, shuffled": (list(np.random.default_rng(7).permutation(32)), [1, 0] * 16),
}


@pytest.mark.parametrize("name", list(VECTORS))
@pytest.mark.parametrize("start", [0x00, 0xFF, 0xA5])
def test_kernel_and_numpy_write_the_same_bits(name: str, start: int, kernel: object) -> None:
    """On a table of all zeros, all ones or a pattern: the same draws to the same cells give the
    same bytes, and a cell no entry names keeps its old bit."""
    idx = np.array(VECTORS[name][0], dtype=np.int64)
    bits = np.array(VECTORS[name][1], dtype=np.uint8)
    table = np.full(4, start, dtype=np.uint8)
    by_numpy, by_kernel = both_paths(table, idx, bits, kernel)
    np.testing.assert_array_equal(by_kernel, by_numpy)
    old = np.unpackbits(table, bitorder="little")
    new = np.unpackbits(by_kernel, bitorder="little")
    untouched = np.setdiff1d(np.arange(32), idx)
    np.testing.assert_array_equal(new[untouched], old[untouched])


def test_the_last_entry_of_a_cell_wins_on_both_paths(kernel: object) -> None:
    """Cell 5 named three times: it keeps the third draw, whatever the first two were."""
    for bits, kept in (([1, 1, 0], 0), ([0, 0, 1], 1), ([1, 0, 1], 1)):
        for write in (kernel.write, _packed_write_numpy):  # type: ignore[attr-defined]
            table = np.zeros(1, dtype=np.uint8)
            write(table, np.array([5, 5, 5]), np.array(bits, dtype=np.uint8))
            assert table[0] == kept << 5


def test_kernel_and_numpy_agree_on_a_random_batch_with_repeats(kernel: object) -> None:
    """10,000 entries over 256 cells (many repeats, many shared bytes), on a random table."""
    rng = np.random.default_rng(3)  # synthetic indices and draws, not privacy draws
    table = rng.integers(0, 256, 32, dtype=np.uint8)
    idx = rng.integers(0, 256, 10_000)
    bits = rng.integers(0, 2, 10_000, dtype=np.uint8)
    by_numpy, by_kernel = both_paths(table, idx, bits, kernel)
    np.testing.assert_array_equal(by_kernel, by_numpy)


def test_the_kernel_writes_in_item_order(kernel: object) -> None:
    """Entries sorted by bit position already are the NumPy path's pass order: no reordering."""
    idx = np.array([8, 0, 16, 1, 9, 25, 2, 7, 31])
    idx = idx[pass_order(idx)]
    bits = np.array([1, 0, 1, 1, 1, 0, 1, 1, 1], dtype=np.uint8)
    by_kernel = np.zeros(4, dtype=np.uint8)
    kernel.write(by_kernel, idx, bits)  # type: ignore[attr-defined]
    by_numpy = np.zeros(4, dtype=np.uint8)
    _packed_write_numpy(by_numpy, idx.copy(), bits.copy())
    np.testing.assert_array_equal(by_kernel, by_numpy)


@pytest.mark.parametrize("dtype", [np.int64, np.uint64, np.int32, np.uint32, np.intp])
def test_every_index_dtype_the_callers_pass_is_written_alike(dtype: type, kernel: object) -> None:
    idx = np.array([0, 9, 9, 30, 31], dtype=dtype)
    bits = np.array([1, 1, 0, 1, 1], dtype=np.uint8)
    table = np.zeros(4, dtype=np.uint8)
    kernel.write(table, idx, bits)  # type: ignore[attr-defined]
    assert table.tolist() == [0b1, 0b0, 0b0, 0b1100_0000]


def test_the_corners_of_a_2_to_the_32_cell_table(kernel: object) -> None:
    """Cells 0 and 2**32 - 1 of the real 512 MiB layout (zero pages: only the two written pages
    are touched), with 32- and 64-bit indices; 2**32 is past the end."""
    table = np.zeros(1 << 29, dtype=np.uint8)
    for dtype in (np.uint32, np.int64, np.uint64):
        table[0] = table[-1] = 0
        kernel.write(table, np.array([0, 2**32 - 1], dtype=dtype),  # type: ignore[attr-defined]
                     np.ones(2, dtype=np.uint8))
        assert (table[0], table[-1]) == (0x01, 0x80)
    with pytest.raises(IndexError):
        kernel.write(table, np.array([2**32], dtype=np.int64),  # type: ignore[attr-defined]
                     np.ones(1, dtype=np.uint8))


@pytest.mark.parametrize("bad", [32, 33, 1 << 40, -1])
def test_an_index_past_the_table_raises_and_nothing_is_written(bad: int, kernel: object) -> None:
    """The table is the first 4 bytes of a larger buffer: an index past it raises IndexError, and
    neither the table (not even the valid entries before the bad one) nor the bytes after it
    change. Every index is checked before the first write."""
    memory = np.full(8, 0x5A, dtype=np.uint8)
    table = memory[:4]
    idx = np.array([0, 1, 2, bad, 3], dtype=np.int64)
    with pytest.raises(IndexError, match="outside the table"):
        kernel.write(table, idx, np.ones(5, dtype=np.uint8))  # type: ignore[attr-defined]
    assert memory.tolist() == [0x5A] * 8


def test_a_huge_unsigned_index_is_out_of_range(kernel: object) -> None:
    with pytest.raises(IndexError):
        kernel.write(np.zeros(4, dtype=np.uint8),  # type: ignore[attr-defined]
                     np.array([2**63 + 1], dtype=np.uint64), np.ones(1, dtype=np.uint8))


def test_wrong_buffers_raise(kernel: object) -> None:
    """A read-only table, a table of another type, indices of a type the kernel does not take or
    not contiguous, bits of another length: an error, and nothing written."""
    write = kernel.write  # type: ignore[attr-defined]
    table = np.zeros(4, dtype=np.uint8)
    one = np.ones(1, dtype=np.uint8)
    frozen = np.zeros(4, dtype=np.uint8)
    frozen.flags.writeable = False
    with pytest.raises(TypeError):
        write(frozen, np.array([1]), one)
    with pytest.raises(TypeError):
        write(table.view(np.int32), np.array([1]), one)
    swapped = np.array([1], dtype=np.int64).astype(np.dtype(np.int64).newbyteorder())
    for idx in (np.array([1], dtype=np.int16), np.array([1.0]), np.arange(1, 5)[::2], swapped):
        with pytest.raises(TypeError):
            write(table, idx, np.ones(idx.size, dtype=np.uint8))
    with pytest.raises(TypeError):
        write(table, np.array([1]), np.ones(1, dtype=np.int64))
    with pytest.raises(ValueError):
        write(table, np.array([1, 2]), one)
    assert not table.any()


def test_the_kernel_leaves_indices_and_draws_as_they_were(kernel: object) -> None:
    """It reads them where they lie (no copy) and changes neither: the caller wipes both, as it
    does after the NumPy path (privacy invariant 1)."""
    idx = np.array([3, 17, 3])
    bits = np.array([1, 0, 1], dtype=np.uint8)
    kernel.write(np.zeros(4, dtype=np.uint8), idx, bits)  # type: ignore[attr-defined]
    assert idx.tolist() == [3, 17, 3] and bits.tolist() == [1, 0, 1]


def test_an_index_dtype_the_kernel_refuses_goes_to_the_numpy_path() -> None:
    """int16 indices: the kernel says TypeError, ``_packed_write`` writes them with NumPy."""
    table = np.zeros(4, dtype=np.uint8)
    _packed_write(table, np.array([0, 31], dtype=np.int16), np.ones(2, dtype=np.uint8))
    assert table.tolist() == [0x01, 0, 0, 0x80]


def test_without_the_kernel_panstream_uses_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The extension missing (its import fails) or switched off by ``PANSTREAM_NATIVE=0``: no kernel
    is loaded, and a packed table's updates still give every named cell its draw."""
    monkeypatch.setitem(sys.modules, "panstream.estimators._packed", None)  # import fails
    assert bittable._load_native() is None
    monkeypatch.delitem(sys.modules, "panstream.estimators._packed")
    monkeypatch.setenv("PANSTREAM_NATIVE", "0")
    assert bittable._load_native() is None

    monkeypatch.setattr(bittable, "_native", None)
    table = BitTable.random(1000, "packed")
    cells = np.arange(0, 1000, 3)
    table.redraw(cells.copy(), 1 << 32)  # p = 1: every named cell becomes 1
    assert table.bits()[cells].all()
    table.redraw(cells.copy(), 0)  # p = 0: every named cell becomes 0
    assert not table.bits()[cells].any()
