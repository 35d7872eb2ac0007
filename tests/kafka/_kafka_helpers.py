"""Helpers shared by the Kafka tests and their conftest (importable by name: no __init__.py)."""

from __future__ import annotations

import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: kafka-python settings for group members in tests: Tansu joins take ~session_timeout/2.
GROUP_SETTINGS = {"session_timeout_ms": "6000", "heartbeat_interval_ms": "1000"}


@dataclass(frozen=True)
class Broker:
    """A running broker: ``bootstrap`` is ``127.0.0.1:PORT``; ``log`` is its output file."""

    bootstrap: str
    pid: int
    log: Path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Producer:
    """``produce(topic, values, keys=None)`` sends byte values (keyed if given) and flushes.

    It remembers each partition's high-water mark from the broker's acknowledgements
    (``produce.highwater[topic][partition]``), since Tansu answers ListOffsets LATEST wrongly.
    """

    def __init__(self, producer: Any) -> None:
        self._p = producer
        self.highwater: dict[str, dict[int, int]] = {}

    def __call__(self, topic: str, values: Sequence[bytes],
                 keys: Sequence[bytes | None] | None = None) -> dict[int, int]:
        futures = [self._p.send(topic, value=v, key=None if keys is None else keys[i])
                   for i, v in enumerate(values)]
        self._p.flush()
        hw = self.highwater.setdefault(topic, {})
        for f in futures:
            md = f.get(timeout=30)
            hw[md.partition] = max(hw.get(md.partition, 0), md.offset + 1)
        return dict(hw)


def committed_offsets(admin: Any, group: str) -> dict[int, int]:
    """Committed offsets of a group by partition (``list_group_offsets``; describe_groups fails)."""
    res = admin.list_group_offsets(group)
    res = res.get(group, res)
    out = {}
    for tp, om in res.items():
        off = om.offset if hasattr(om, "offset") else om[0]
        if off is not None and off >= 0:
            out[tp.partition] = off
    return out


def panstream_cmd(*args: str) -> list[str]:
    """argv running the panstream CLI of this checkout in a subprocess."""
    return [sys.executable, "-m", "panstream", *args]
