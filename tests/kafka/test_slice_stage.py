"""The slice stage without a broker (fakes for the consumer and the admin client).

The order that makes deleting routed records safe: a slice's snapshot is durable, then the
internal offsets are committed, then the records before those offsets are deleted; a broker
without DeleteRecords is told once and never asked again (the records expire with retention).
A store written with another layout is refused on assignment instead of being mixed in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _group_fakes import Rec
from kafka import TopicPartition

from panstream.errors import StateError
from panstream.sources.kafka import Metrics, TailConfig
from panstream.sources.kafka.slices import SliceStage
from panstream.state.slices import SliceLayout, head_params, slice_of
from panstream.state.stores import DirectoryStore
from panstream.universe import Universe

U = Universe.parse("range:1000")


class Log:
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []


class Store(DirectoryStore):
    def __init__(self, path: Path, log: Log) -> None:
        super().__init__(path)
        self.log = log

    def save(self, key: str, data: bytes | bytearray) -> None:
        super().save(key, data)
        self.log.events.append(("save", key))


class Consumer:
    def __init__(self, log: Log) -> None:
        self.log = log

    def commit(self, offsets: dict[Any, Any]) -> None:
        self.log.events.append(("commit", {tp.partition: om.offset for tp, om in offsets.items()}))

    def committed(self, tp: Any) -> int | None:  # asked by a claim lower than the stored one
        return None

    def beginning_offsets(self, tps: list[Any]) -> dict[Any, int]:
        return dict.fromkeys(tps, 0)


class Admin:
    def __init__(self, log: Log, fail: bool = False) -> None:
        self.log, self.fail = log, fail

    def delete_records(self, offsets: dict[Any, int]) -> None:
        self.log.events.append(("delete", {tp.partition: off for tp, off in offsets.items()}))
        if self.fail:
            raise ConnectionError("socket disconnected")

    def close(self) -> None:
        pass


def stage(tmp_path: Path, log: Log, count: int = 4, fail: bool = False) -> SliceStage:
    lay = SliceLayout(U, count)
    cfg = TailConfig({}, ["g-cells"], U, 30.0, "rr", Store(tmp_path / "s", log))
    s = SliceStage(cfg, lay, Metrics(), admin_client={"bootstrap_servers": ["127.0.0.1:1"]})
    s.consumer = Consumer(log)
    s._admin = Admin(log, fail)
    notes: list[str] = []
    s.notice = notes.append
    s.notes = notes  # type: ignore[attr-defined]
    for r in range(count):
        tp = TopicPartition("g-cells", r)
        s.shards[tp] = s._restore(tp)
    return s


def test_slices_are_durable_then_committed_then_their_records_deleted(tmp_path: Path) -> None:
    log = Log()
    s = stage(tmp_path, log)
    lay = s.layout
    routed = dict(lay.route(np.array([3, 3, 260, 999], dtype=np.intp)))
    s._apply({TopicPartition("g-cells", r): [Rec(7, bytes(d))] for r, d in routed.items()})
    s.checkpoint()
    kinds = [e[0] for e in log.events]
    assert kinds == ["save"] * 4 + ["commit", "delete"]  # every slice written, whatever arrived
    assert log.events[-2][1] == log.events[-1][1] == {0: 8, 1: 8, 3: 8}
    data = s.config.store.load("g-cells/3")
    assert data is not None and slice_of(head_params(data)) == (lay, 3)
    s.close()


def test_a_broker_without_delete_records_is_told_once(tmp_path: Path) -> None:
    log = Log()
    s = stage(tmp_path, log, fail=True)
    s._apply({TopicPartition("g-cells", 0): [Rec(0, b"\x01\x00")]})
    s.checkpoint()
    s.checkpoint()
    assert [e[0] for e in log.events].count("delete") == 1 and s.deletes == "unsupported"
    assert len(s.notes) == 1 and "retention.ms" in s.notes[0]  # type: ignore[attr-defined]
    s.close()


def test_a_store_of_another_layout_is_refused_on_assignment(tmp_path: Path) -> None:
    log = Log()
    s = stage(tmp_path, log, count=4)
    s.checkpoint()
    s.close()
    with pytest.raises(StateError, match="not slice 0 of 5"):
        stage(tmp_path, log, count=5)
