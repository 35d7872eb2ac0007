"""A routed poll read in pieces (issue 38): the same cells and the same routed records as one
poll, each piece's values copied into the parser's buffer as they come, nothing left behind.

A librdkafka member reads a poll in pieces of about one parser chunk (2 MiB of values), so that
each piece is joined into the parser's buffer while it is still in the cache (a whole poll of
the group bench's 50 KB messages is 50 MB: the join read it back from memory). These tests walk
through what must not change: the decoder's cells and counts, the routed records, the offsets a
commit takes, and the zeroed buffer after the poll.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from _group_fakes import Rec
from kafka import TopicPartition

from panstream.sources.kafka import Metrics, decode
from panstream.sources.kafka.decode import CHUNK_BYTES, Decoder
from panstream.sources.kafka.route import RouteConfig, RouteStage, _Rebalance
from panstream.state.slices import SliceLayout
from panstream.universe import Universe

U = Universe.parse("ipv4:10.9.0.0/16")
TPS = [TopicPartition("logs", p) for p in range(3)]


def clf(cells: np.ndarray) -> bytes:
    return "\n".join(f'{U.item_of(int(c))} - - [01/Jan/2026:00:00:00 +0000] "GET / HTTP/1.1" 200 1'
                     for c in cells).encode()


def values(seed: int = 1) -> list[bytes | None]:
    """Messages of 1-300 CLF lines, with a null, an empty value and malformed lines among them."""
    rng = np.random.default_rng(seed)  # test data only
    out: list[bytes | None] = []
    for i in range(120):
        out.append(clf(rng.integers(0, U.size, int(rng.integers(1, 300)))))
        if i % 17 == 5:
            out += [None, b"", b"not a log line\n8.8.8.8 - - [x] y"]
    return out


@pytest.mark.parametrize("piece", [1, 7, 40, 1000])
def test_feeding_a_poll_in_pieces_gives_the_cells_of_one_call(
        piece: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``feed(a); feed(b); flush()`` is ``decoder(a + b)``: same cells in the same order, same
    malformed and outside counts, whatever the pieces (a parser chunk spans pieces: here the
    chunk is 64 KiB, so a poll is several chunks and a piece boundary falls inside most)."""
    monkeypatch.setattr(decode, "_LINES_CHUNK", 1 << 16)
    vals = values()
    whole = Decoder(U, "lines", "clf")(vals)
    d = Decoder(U, "lines", "clf")
    for i in range(0, len(vals), piece):
        d.feed(vals[i:i + piece])
    got = d.flush()
    assert np.array_equal(got.indices, whole.indices)
    assert (got.malformed, got.outside) == (whole.malformed, whole.outside)
    assert whole.malformed >= 7 * 2 and whole.outside >= 7  # the null and the two bad lines


def test_no_line_is_left_in_the_buffer_after_a_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    """The buffer a chunk is joined into is reused, and zeroed when the poll's cells are taken:
    including a value bigger than the buffer (parsed in a buffer of its own, wiped)."""
    monkeypatch.setattr(decode, "_LINES_CHUNK", 1 << 12)
    d = Decoder(U, "lines", "clf")
    huge = clf(np.arange(400))  # over 4 chunks: a buffer of its own
    d.feed([clf(np.arange(30)), huge])
    d.feed([clf(np.arange(5))])
    got = d.flush()
    assert got.indices.size == 435
    assert not any(d._joined) and d._used == d._kept == 0
    d.feed([clf(np.arange(50))])
    d.discard()  # an error mid-poll: the fed lines and cells are forgotten
    assert not any(d._joined) and d.flush().indices.size == 0


class PieceConsumer:
    """A source consumer that hands out what is queued, at most ``max_records`` a poll (as the
    librdkafka adapter does); ``on_poll`` runs before a poll (a rebalance between pieces)."""

    def __init__(self, queued: list[tuple[TopicPartition, Rec]], max_records: int = 5000) -> None:
        self.queued, self.max_records = queued, max_records
        self.asked: list[int] = []
        self.on_poll: Any = None
        self.committed: dict[Any, int] = {}

    async def commit_async(self, offsets: dict[Any, Any]) -> None:
        self.committed.update({tp: om.offset for tp, om in offsets.items()})

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict[Any, list[Rec]]:
        if self.on_poll is not None:
            self.on_poll(len(self.asked))
        n = max_records or self.max_records
        self.asked.append(n)
        take, self.queued = self.queued[:n], self.queued[n:]
        out: dict[Any, list[Rec]] = {}
        for tp, rec in take:
            out.setdefault(tp, []).append(rec)
        return out


class WholeConsumer(PieceConsumer):
    """The same queue, one poll for all (no ``max_records``: the stage polls whole)."""

    def __init__(self, queued: list[tuple[TopicPartition, Rec]]) -> None:
        super().__init__(queued)
        del self.max_records

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict[Any, list[Rec]]:
        return super().poll(timeout_ms, len(self.queued) or 1)


class Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[int, bytes]] = []

    def send(self, topic: str, value: bytes, partition: int) -> Any:
        self.sent.append((partition, value))
        return type("F", (), {"is_done": True, "failed": lambda _: False})()

    def flush(self, timeout: float) -> None:
        pass


def stage(consumer: Any) -> RouteStage:
    r = RouteStage(RouteConfig({}, {}, ["logs"], SliceLayout(U, 4), "g-cells", "lines", "clf",
                               check=False, distinct=True), Metrics())
    r.consumer, r.producer = consumer, Producer()
    r._owned.update(TPS)
    return r


def queue() -> list[tuple[TopicPartition, Rec]]:
    rng = np.random.default_rng(3)  # test data only
    return [(TPS[i % 3], Rec(i // 3, clf(rng.integers(0, U.size, 500)))) for i in range(240)]


def test_a_poll_in_pieces_routes_what_one_poll_routes() -> None:
    """Same routed records (each distinct cell of the poll once, by slice), same offsets; the
    pieces after the first ask for about a parser chunk of these 34 KB messages."""
    pieces, whole = stage(PieceConsumer(queue())), stage(WholeConsumer(queue()))
    assert pieces.poll_once(0) and whole.poll_once(0)
    assert sorted(pieces.producer.sent) == sorted(whole.producer.sent)
    assert pieces._next == whole._next == {tp: 80 for tp in TPS}
    per_piece = CHUNK_BYTES // np.mean([len(rec.value) for _, rec in queue()])
    asked = pieces.consumer.asked
    assert asked[0] == 64 and len(asked) >= 4  # the first: 64 messages, then learnt
    assert all(abs(n - per_piece) <= 1 for n in asked[1:])
    assert not pieces.poll_once(0)  # nothing queued


def test_a_poll_stops_at_max_records() -> None:
    c = PieceConsumer(queue(), max_records=25)
    r = stage(c)
    assert r.poll_once(0)
    assert sum(c.asked) == 25 and len(c.queued) == 240 - 25
    assert r._next == {TPS[0]: 9, TPS[1]: 8, TPS[2]: 8}


def test_a_rebalance_between_two_pieces_routes_and_commits_what_was_read() -> None:
    """librdkafka runs the rebalance callbacks inside a poll, so one can fall between two pieces
    of a poll. The pieces read so far are routed first, then the revoked partition's offset is
    committed as far as they go, as when a poll was one call: nothing read is replayed, and the
    rest of the poll takes no offset of the partition that left."""
    c = PieceConsumer(queue())
    r = stage(c)
    first: dict[Any, int] = {}

    def revoke(i: int) -> None:
        if i == 1:  # before the second piece: the first was fed, not yet routed
            first.update(r._fed[2])
            asyncio.run(_Rebalance(r).on_partitions_revoked({TPS[1]}))
            c.queued = [q for q in c.queued if q[0] != TPS[1]]  # librdkafka drops its queue

    c.on_poll = revoke
    assert r.poll_once(0)
    assert c.committed == {TPS[1]: first[TPS[1]]} and r.producer.sent
    assert set(r._next) == {TPS[0], TPS[2]}
    read = [q for q in queue() if q[0] != TPS[1] or q[1].offset < first[TPS[1]]]
    whole = stage(WholeConsumer(read))
    assert whole.poll_once(0)
    assert cells(r) == cells(whole)  # every line read was routed, once a poll


def cells(r: RouteStage) -> set[int]:
    """The cells a stage routed, back in the universe's numbering."""
    lay = r.config.layout
    return {int(c) + int(lay.edges()[p]) for p, v in r.producer.sent for c in lay.decode(p, v)}
