"""Fakes shared by several test modules (importable as ``fakes``: pytest puts ``tests/`` on the
path for its ``conftest.py``). Unit tests may use fakes; integration tests use the real broker."""

from __future__ import annotations

from collections.abc import Iterator


class MemoryLog:
    """A :class:`panstream.state.stores.RecordLog` in memory: only flushed records are read back,
    and :meth:`compact` keeps the newest record of each key, as Kafka's log cleaner does."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []
        self.flushed = 0

    def append(self, key: bytes, value: bytes | None) -> None:
        self.records.append((key, value))

    def flush(self) -> None:
        self.flushed = len(self.records)

    def read_all(self) -> Iterator[tuple[bytes, bytes | None]]:
        return iter(list(self.records[: self.flushed]))

    def compact(self) -> None:
        last = {k: i for i, (k, _) in enumerate(self.records)}
        self.records = [r for i, r in enumerate(self.records)
                        if last[r[0]] == i and r[1] is not None]
        self.flushed = len(self.records)
