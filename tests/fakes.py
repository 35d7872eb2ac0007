"""Fakes shared by several test modules (importable as ``fakes``: pytest puts ``tests/`` on the
path for its ``conftest.py``). Unit tests may use fakes; integration tests use the real broker."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any


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


class TickingClock:
    """A monotonic clock that advances ``step`` seconds every time it is read (a loop's progress
    reports and checkpoints then come at known readings, whatever the machine's speed)."""

    def __init__(self, step: float = 1.0) -> None:
        self.step = step
        self.t = 0.0

    def __call__(self) -> float:
        self.t += self.step
        return self.t


def hide_module(monkeypatch: Any, prefix: str) -> Callable[[], None]:
    """Make ``import PREFIX...`` fail with ImportError (a package not installed) until the
    returned function, or the end of the test, restores the import."""
    import builtins

    real_import = builtins.__import__

    def hidden(name: str, *args: object, **kwargs: object) -> object:
        if name.startswith(prefix):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", hidden)
    return lambda: monkeypatch.setattr(builtins, "__import__", real_import)
