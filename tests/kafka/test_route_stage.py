"""The routing stage without a broker (fake consumer and producer).

Source offsets are committed only after every routed record is acknowledged: a record the broker
refused stops the member with nothing committed (kafka-python's ``flush()`` returns even then, so
each record's future is asked). A first sample that does not parse is refused before anything is
routed or committed, with the option that would parse it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from kafka import TopicPartition

from panstream.errors import SourceError
from panstream.sources.kafka import Metrics
from panstream.sources.kafka.route import RouteConfig, RouteStage
from panstream.state.slices import SliceLayout
from panstream.universe import Universe

U = Universe.parse("ipv4:10.9.0.0/16")
TP = TopicPartition("logs", 0)


@dataclass
class Rec:
    offset: int
    value: bytes


class Future:
    def __init__(self, ok: bool) -> None:
        self.ok, self.is_done = ok, True
        self.exception = None if ok else RuntimeError("MessageSizeTooLarge")

    def failed(self) -> bool:
        return not self.ok


class Producer:
    def __init__(self, events: list[Any], ok: bool = True) -> None:
        self.events, self.ok = events, ok
        self.sent: list[tuple[int, bytes]] = []

    def send(self, topic: str, value: bytes, partition: int) -> Future:
        self.sent.append((partition, value))
        return Future(self.ok)

    def flush(self, timeout: float) -> None:
        self.events.append("flush")


class Consumer:
    def __init__(self, events: list[Any], batches: list[dict[Any, list[Rec]]]) -> None:
        self.events, self.batches = events, batches

    def poll(self, timeout_ms: int) -> dict[Any, list[Rec]]:
        return self.batches.pop(0) if self.batches else {}

    def commit(self, offsets: dict[Any, Any]) -> None:
        self.events.append(("commit", {tp.partition: om.offset for tp, om in offsets.items()}))


def stage(batches: list[dict[Any, list[Rec]]], fmt: str = "clf", ok: bool = True
          ) -> tuple[RouteStage, list[Any]]:
    events: list[Any] = []
    lay = SliceLayout(U, 4)
    r = RouteStage(RouteConfig({}, {}, ["logs"], lay, "g-cells", "lines", fmt), Metrics())
    r.consumer = Consumer(events, batches)
    r.producer = Producer(events, ok)
    return r, events


def clf_lines(cells: np.ndarray) -> bytes:
    return "\n".join(f'{U.item_of(int(c))} - - [01/Jan/2026:00:00:00 +0000] "GET / HTTP/1.1" 200 1'
                     for c in cells).encode()


def test_offsets_are_committed_after_the_routed_records_are_acknowledged() -> None:
    cells = np.arange(0, 65536, 40)  # 1639 lines: the sample is decided in the first batch
    r, events = stage([{TP: [Rec(0, clf_lines(cells[:900])), Rec(1, clf_lines(cells[900:]))]}])
    assert r.poll_once(0)
    r.commit()
    assert events == ["flush", ("commit", {0: 2})]
    got = np.sort(np.concatenate([np.frombuffer(v, "<u2").astype(np.int64) + p * 16384
                                  for p, v in r.producer.sent]))
    assert np.array_equal(got, cells)


def test_a_refused_record_stops_the_member_with_nothing_committed() -> None:
    r, events = stage([{TP: [Rec(0, clf_lines(np.arange(2000)))]}], ok=False)
    r.poll_once(0)
    with pytest.raises(SourceError, match="did not acknowledge routed records: MessageSize"):
        r.commit()
    assert events == ["flush"]


def test_a_sample_that_does_not_parse_is_refused_before_anything_is_routed() -> None:
    r, events = stage([{TP: [Rec(0, clf_lines(np.arange(1500)))]}], fmt="plain")
    with pytest.raises(SourceError) as err:
        r.poll_once(0)
    msg = str(err.value)
    assert "100.0% of the first 1,500 lines of logs are malformed for -f plain" in msg
    assert "try -f clf (100% of them parse that way)" in msg
    assert r.producer.sent == [] and events == []
