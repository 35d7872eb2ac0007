"""Tumbling windows on the routed Kafka layout: ``panstream kafka --window``.

The routed layout (:mod:`.route`, :mod:`.slices`) keeps one table as R slices. With windows every
slice keeps **one sub-table per open window** (a fresh D0 draw each), and a window is released
once, from its R slices laid end to end. Which windows exist and when each closes is the public
**clock's** doing (:class:`panstream.windows.schedule.WindowSchedule`, live): window ``s`` is open
from ``s`` to ``s + size + lateness`` on the wall clock, and closed at that instant, empty or not.
No line moves anything (issue 27): there is no watermark, no per-partition progress, no mark; a
silent source partition holds nothing up.

**Routing stage** (:class:`WindowRouteStage`). For each polled source partition the router reads
the event time of every line (:func:`panstream.windows.eventtime.lines_and_times`), keeps the
lines whose window the schedule has open at the wall clock (:meth:`WindowSchedule.accepts`),
drops the others (closed, not yet begun, or outside the range: not counted on Kafka), and routes
each window's cells as data records ``D | window start | offsets`` to the slice partitions of the
internal topic ``<group>-wcells``.

**Slice stage** (:class:`WindowSliceStage`). Internal partition ``r`` holds, per open window, the
``|X|/R`` cells of slice ``r``. At every checkpoint (on the fixed clock) the stage follows the
schedule for each owned slice: a window whose close instant has passed is closed (its slice
written durably as closed under ``<group>-w<start>-closed/<r>``, the open copy removed, the table
wiped); every window the schedule has open gets its table (a fresh one if no line came) and its
open snapshot ``<group>-w<start>/<r>``. So the state directory's window files are a function of
the clock: the same names and sizes whatever arrived. A data record for a window that is not open
(a replay after a crash, a record in flight across the close) is dropped.

**Release** (:func:`~panstream.windows.release.release_complete`, in :mod:`panstream.windows.release`
since issue 35). Whichever member finds all R closed slices of a window (at its checkpoints, and
its final one) releases it once: merged, charged to the window's own group ledger, appended to the
series. A slice whose owner never had the window open (the slice was unowned for the window's
whole life) is closed as a fresh table by its next owner, so one slice never holds a window back.

**The stage** (issue 35) is a :class:`~panstream.sources.kafka.group.GroupLoop` holding one
:class:`WindowSliceTask` per owned slice (:class:`WindowTasks`: the window store, the schedule,
the release after a checkpoint); before, it was a subclass of the slice stage overriding most of
its steps. Its files and keys are unchanged.

**Fenced window-slices** (:mod:`panstream.state.fence`, issue 26). Slice ``r``'s window files
(open and closed, of every window) belong to whoever owns partition ``r`` of ``<group>-wcells``.
On assignment the stage claims the slice in ``STATE_DIR/windows`` under the key
``<group>-wcells/<r>`` (claim file ``.<group>-wcells@<r>.shard.panstream-fence``) with its
generation in ``<group>-slices``, and every later write of the slice's window files (saving an
open window, closing one, closing a fresh one, removing an open copy) happens inside
:meth:`~panstream.state.stores.DirectoryStore.claimed` (:meth:`WindowTasks.owned`): under the
slice's ``flock``, only while the claim is still its own. A member evicted while it went on
running (a "zombie") therefore cannot write its older tables over the new owner's open windows,
nor close a window with them (a closed slice is what the window's one release reads): the write is
refused with :class:`~panstream.errors.FencedError` before anything is written, and the group loop
drops the slice and goes on (:meth:`~panstream.sources.kafka.group.GroupLoop._migrated`).

**A commit that meets a rebalance** waits for the next checkpoint, as in the other layouts
(:mod:`panstream.sources.kafka.group`): the checkpoint has already followed the schedule under the
slice's claim (the windows due closed durably, every open window saved), so the offsets may stay
uncommitted (nothing is deleted) and the complete windows are still released. A replay of the
uncommitted records by the slice's next owner is safe per window: a record of a window still open
re-enters the restored open window-slice that holds it (harmless for the bit table, counted twice
by the counter family, as after a crash); a record of a window closed since was applied before
the close wrote the closed slice, and the next owner finds the window closed (its closed slice,
or its record in the series) and drops it, so a replay neither misses nor doubles an arrival of a
closed window nor releases one twice. The final checkpoint stops with exit 1 (one line) if its
commit met a rebalance and the broker's offsets are behind.

Nothing about arrivals is counted: late and untimed lines are dropped without a count on Kafka.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import struct
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from kafka import TopicPartition

from panstream.errors import ConfigurationError, FencedError, StateError
from panstream.estimators.base import Estimator, wipe_buffer
from panstream.sources.kafka.group import GroupLoop, TailConfig
from panstream.sources.kafka.identity import decoded
from panstream.sources.kafka.joins import group_consumer
from panstream.sources.kafka.metrics import Metrics
from panstream.sources.kafka.route import RECORD_BYTES, RouteConfig, RouteStage, window_topic
from panstream.sources.kafka.slices import (
    apply_cells,
    expired,
    expired_warning,
    fresh_slice,
    restore_slice,
)
from panstream.sources.kafka.task import NO_COUNTS, Counts, KindSteps, TaskState
from panstream.sources.kafka.topology import no_auto_create
from panstream.state.checkpoint import Shard, shard_key
from panstream.state.slices import SliceLayout, encode_slice
from panstream.state.stores import DirectoryStore
from panstream.windows.eventtime import (
    TIMED_FORMATS,
    TimeReader,
    check_time,
    has_time,
    lines_and_times,
    seconds,
)
from panstream.windows.release import (
    WindowSpec,
    parse_key,
    release_complete,
    start_of_label,
    window_keys,
)
from panstream.windows.series import Series

log = logging.getLogger("panstream.kafka")

__all__ = ["SeriesTopic", "WindowRouteStage", "WindowSliceStage", "WindowSliceTask",
           "WindowSpec", "WindowTasks", "decode_record", "encode_data", "release_complete",
           "window_keys", "window_topic"]

#: Kinds of internal records: routed cells of one window; ``M`` (a watermark mark) was written
#: by earlier versions and is ignored.
DATA, MARK = b"D", b"M"
_HEAD = struct.Struct("<cq")


# ---------------------------------------------------------------------- record framing
def encode_data(start: int, payload: bytes | bytearray | memoryview) -> bytes:
    """A routed record: the window's start and the slice's raw local offsets.

    >>> decode_record(encode_data(3600, b"\\x01\\x00"))
    ('D', 3600, b'\\x01\\x00')
    """
    return _HEAD.pack(DATA, int(start)) + bytes(payload)


def decode_record(value: bytes) -> tuple[str, Any, Any]:
    """``("D", start, payload)``, or ``("M", None, None)`` for a mark an earlier version wrote
    (ignored: nothing closes on a line any more).

    Raises:
        StateError: not a windowed record (a plain routed group's record, or garbage).
    """
    kind = value[:1]
    try:
        if kind == DATA and len(value) >= _HEAD.size:
            _, start = _HEAD.unpack_from(value)
            return "D", int(start), value[_HEAD.size:]
        if kind == MARK:
            json.loads(value[1:])
            return "M", None, None
    except (ValueError, KeyError, TypeError, struct.error):
        pass
    msg = ("a record of the windowed internal topic is not a window record: was the topic "
           "written by another panstream? delete it (and the group's windows state) to start over")
    raise StateError(msg)


# ---------------------------------------------------------------------- results topic
class SeriesTopic:
    """The series on Kafka: every record, keyed by its window id, to a compacted topic (default
    ``<group>-series``), after it is durable in the series file.

    The file is the commit point; the topic is a copy delivered at least once: a member publishes
    each record it releases, and on start every record of the file (a crash between the file and
    the topic loses nothing). A window's copies are identical and share the key, so compaction (and
    any reader that keys by window) keeps it exactly once. A record is the released output only.

    Args:
        client: kafka-python connection settings; topic: the results topic.
    """

    def __init__(self, client: Mapping[str, Any], topic: str) -> None:
        self.client = dict(client)
        self.topic = topic
        self._producer: Any = None

    def open(self) -> None:
        """Create the topic (1 partition, ``cleanup.policy=compact``) if missing; the producer.

        Raises:
            SourceError: the broker is unreachable or refuses.
        """
        from kafka import KafkaAdminClient, KafkaProducer
        from kafka.admin import NewTopic
        from kafka.errors import KafkaError, TopicAlreadyExistsError

        from panstream.errors import SourceError

        try:
            admin = KafkaAdminClient(**self.client)
            try:
                if self.topic not in admin.list_topics():
                    with contextlib.suppress(TopicAlreadyExistsError):
                        admin.create_topics([NewTopic(self.topic, 1, -1, topic_configs={
                            "cleanup.policy": "compact"})])
            finally:
                admin.close()
            self._producer = no_auto_create(KafkaProducer(**self.client, acks="all",
                                                          allow_auto_create_topics=False))
        except KafkaError as exc:
            msg = (f"cannot open the results topic {self.topic!r}: {exc}; create it (compacted) "
                   "or pass --series-topic none")
            raise SourceError(msg) from None

    def publish(self, records: list[dict[str, Any]]) -> None:
        """Send ``records`` keyed by window and wait for ``acks=all``.

        Raises:
            SourceError: not acknowledged (the file has them; the next start publishes them).
        """
        from kafka.errors import KafkaError

        from panstream.errors import SourceError

        if self._producer is None or not records:
            return
        try:
            futures = [self._producer.send(
                self.topic, key=str(r["window"]).encode(),
                value=json.dumps(r, sort_keys=True, default=str).encode()) for r in records]
            self._producer.flush(timeout=60)
            for f in futures:
                f.get(timeout=60)
        except KafkaError as exc:
            msg = (f"the results topic {self.topic!r} did not acknowledge: {exc}; the series file "
                   "has the records and the next start publishes them again")
            raise SourceError(msg) from None

    def close(self) -> None:
        if self._producer is not None:
            with contextlib.suppress(Exception):
                self._producer.close(timeout=10)
            self._producer = None


# ---------------------------------------------------------------------- routing stage
class WindowRouteStage(RouteStage):
    """The routing stage of a windowed group (module docstring): per source partition, each line
    to the window of its time if the clock has that window open (else dropped), the window's
    cells routed by slice.

    Args:
        config, metrics: as :class:`~panstream.sources.kafka.route.RouteStage` (``config.fmt``
            must be a timed format, or ``auto`` resolved to one).
        spec: the window settings.
        wall_clock: the wall clock the schedule runs on (tests inject one).
    """

    pieces = False  # each partition's values are joined and read with their times (_route)

    def __init__(self, config: RouteConfig, metrics: Metrics, spec: WindowSpec,
                 wall_clock: Callable[[], float] = time.time, **kw: Any) -> None:
        super().__init__(config, metrics, **kw)
        self.spec = spec
        self.wall_clock = wall_clock
        #: The earliest window the held first sample has records of (None: nothing held).
        self._held_first: int | None = None

    def poll_once(self, timeout_ms: int) -> bool:
        """One poll (decode, route, send); then a first sample still held is judged if the clock
        has reached the end of the earliest window it holds records of (:meth:`_decide_due`)."""
        got = super().poll_once(timeout_ms)
        self._decide_due()
        return got

    def _decide_due(self) -> None:
        """Judge the first sample on what it holds once the clock reaches the **end** of the
        earliest window it has records of, not only at :data:`SAMPLE_LINES` lines.

        The routing stage holds its first records until the sample is judged (nothing routed or
        committed before the loud-failure check). On a quiet topic 1,000 lines can take longer
        than a window: held past the window's close (end + lateness), its records would reach
        the slices after the window closed and be dropped, the first window's lines lost without
        a word. Judged at the window's end, they have the lateness to reach their slices. When
        the sample is judged depends on the clock and on when lines came, as before."""
        first = self._held_first
        if first is not None and self.wall_clock() >= first + self.spec.size:
            self._decide()  # which forgets _held_first

    def _decide(self) -> None:
        self._held_first = None
        super()._decide()

    def _kind(self, values: list[bytes | None]) -> str:
        d = self.decoder
        if d._parser is None:
            d._resolve(values)
        kind = d.format.spec
        if d._parser is not None and not has_time(kind):
            msg = (f"--window needs lines that carry a time (-f {', '.join(TIMED_FORMATS)}, e.g. "
                   f"clf's [24/Nov/2026:10:00:00 +0000]; docs/windows.md); the topic's lines are "
                   f"{kind!r}")
            raise ConfigurationError(msg)
        if d._parser is not None:
            check_time(kind, self.spec.zone)  # a local time needs --time-zone
        return kind

    def _reader(self, kind: str) -> TimeReader:
        """A time reader for one poll of one partition (nothing kept across polls): the group's
        zone; a year-less time takes the year nearest to the wall clock."""
        return TimeReader(kind, self.spec.zone, None, self.wall_clock)

    def _route(self, records: Mapping[TopicPartition, list[Any]]) -> None:
        offsets: dict[TopicPartition, int] = {}
        out: list[tuple[int, bytes]] = []
        lines = items = bad = outside = 0
        for tp, recs in records.items():
            if not recs:
                continue
            offsets[tp] = recs[-1].offset + 1
            vals = [r.value for r in recs]
            kind = self._kind(vals)
            if self.decoder._parser is None:  # nothing but empty values so far
                bad += len(vals)
                continue
            buf = bytearray(b"\n").join([*(v for v in vals if v), b""])
            vals.clear()
            try:
                n, k, m, o = self._partition(tp, buf, kind, out)
            finally:
                wipe_buffer(buf)
            lines, items, bad, outside = lines + n, items + k, bad + m, outside + o
        self.count(sum(len(v) for v in records.values()), items, bad, outside)
        s = self._sample
        if s is None:
            self._send(offsets, out)
        else:  # the first sample's exact counts, judged as the plain routing stage does
            if out:
                first = min(_HEAD.unpack_from(v)[1] for _, v in out)
                held = self._held_first
                self._held_first = first if held is None else min(held, first)
            self._held.append((offsets, out))  # type: ignore[arg-type]
            s["accepted"] += items
            s["malformed"] += bad
            s["outside"] += outside
            if s["accepted"] + s["malformed"] + s["outside"] >= self._sample_size():
                self._decide()

    @staticmethod
    def _sample_size() -> int:
        from panstream.sources.kafka.route import SAMPLE_LINES

        return SAMPLE_LINES

    def _partition(self, tp: TopicPartition, buf: bytearray, kind: str,
                   out: list[tuple[int, bytes]]) -> tuple[int, int, int, int]:
        """Route one source partition's lines by window: only the windows the schedule has open
        at the wall clock now take lines; nothing is kept about the partition."""
        b = np.frombuffer(buf, dtype=np.uint8)
        starts, ends, t = lines_and_times(b, kind, self._reader(kind))
        secs, valid = seconds(t)
        t.view(np.int64).fill(0)
        sch = self.spec.schedule
        size = sch.size
        now = self.wall_clock()
        ws = (secs // size) * size
        items = bad = outside = 0
        try:
            keep = valid & sch.accepts_many(ws, now)
            n = ends - starts
            blank = (n == 0) | ((n == 1) & (b[np.maximum(ends - 1, 0)] == 13))
            bad += int((~valid & ~blank).sum())  # no readable time: malformed for the sample
            wins = np.unique(ws[keep])
            lens = ends - starts + 1
            lens[-1] -= int(ends[-1] >= b.size) if ends.size else 0
            whole = wins.size == 1 and bool(keep.all())  # the usual poll: one window, in place
            g = np.full(starts.size, -1, dtype=np.int32)
            g[keep] = np.searchsorted(wins, ws[keep])
            for k, s in enumerate(wins.tolist()):
                rows = np.flatnonzero(g == k)
                i, j = int(rows[0]), int(rows[-1]) + 1
                lo, hi = int(starts[i]), int(starts[i] + lens[i:j].sum())
                if whole or rows.size == j - i:  # one run of lines (logs are nearly in order)
                    res = self.decoder.parser.parse(memoryview(buf)[lo:hi])
                else:  # only the window's span compressed into a new buffer, wiped after use
                    chunk = b[lo:hi][np.repeat(g[i:j] == k, lens[i:j])]
                    try:
                        res = self.decoder.parser.parse(chunk.data)
                    finally:
                        chunk.fill(0)
                items += int(res.indices.size)
                bad += res.malformed
                outside += res.outside
                for r, data in self.config.layout.route(res.indices):  # wipes the indices
                    if not data:
                        continue
                    for i in range(0, max(len(data), 1), RECORD_BYTES):
                        out.append((r, encode_data(int(s), data[i:i + RECORD_BYTES])))
                    wipe_buffer(data)
            wins.fill(0)
        finally:
            secs.fill(0)
            ws.fill(0)
        return int(starts.size), items, bad, outside

    def _send(self, offsets: dict[TopicPartition, int],  # type: ignore[override]
              parts: list[tuple[int, bytes]]) -> None:
        topic, stamp = self.config.internal_topic, self.config.stamp()
        for r, value in parts:
            self._futures.append(self.producer.send(topic, value=value, partition=r, **stamp))
            self.routed_bytes += len(value)
        parts.clear()
        self._next.update(offsets)

    def close(self) -> None:
        self._held.clear()  # framed records (bytes): nothing of the table to wipe in them
        super().close()


# ---------------------------------------------------------------------- slice stage
class WindowTasks(KindSteps):
    """The kind of the windowed layout (module docstring): slice ``r`` of every open window is
    partition ``r`` of ``<group>-wcells``; its files live in the window store, claimed there.

    Args:
        config, layout: the slice stage's configuration and slice layout.
        spec, group, wstore, series_path, on_release, results: as :class:`WindowSliceStage`.
    """

    unit = "slices"
    counts = False
    every_checkpoint = True  # every checkpoint follows the schedule, whoever owns what
    one_sync = False

    def __init__(self, config: TailConfig, layout: SliceLayout, *, spec: WindowSpec, group: str,
                 wstore: DirectoryStore, series_path: str,
                 on_release: Callable[[dict[str, Any]], None] | None,
                 results: SeriesTopic | None) -> None:
        self.config = config
        self.layout = layout
        self.spec = spec
        self.group = group
        self.wstore = wstore
        self.series_path = os.fspath(series_path)
        self.on_release = on_release
        self.results = results
        self.released = 0

    def task(self, tp: TopicPartition) -> WindowSliceTask:
        return WindowSliceTask(self, tp)

    def claim_key(self, tp: TopicPartition) -> str:
        """``<group>-wcells/<r>``: the slice's claim in the window store."""
        return shard_key(window_topic(self.group), tp.partition)

    def claims(self) -> DirectoryStore:
        return self.wstore  # window-slices are claimed where they live (module docstring)

    def owned(self, r: int) -> contextlib.AbstractContextManager[None]:
        """The block that writes slice ``r``'s window files: it runs only while this member's
        claim of the slice is still the store's (module docstring).

        Raises:
            FencedError: another member claimed the slice since, or this one never did.
        """
        key = shard_key(window_topic(self.group), r)
        epoch = self.loop._epochs.get(key)
        if epoch is None:
            msg = f"window-slices of {key} not written: this member never claimed its partition"
            raise FencedError(msg)
        return self.wstore.claimed(key, epoch)

    def closed_elsewhere(self, r: int) -> set[int]:
        """Windows with a closed slice in the store other than ``r``'s (public: files made on the
        schedule)."""
        out: set[int] = set()
        for key in list(self.wstore.keys()):
            got = parse_key(self.group, key)
            if got is not None and got[1] and got[2] != r:
                out.add(got[0])
        return out

    def turn(self, now: float) -> None:
        """Each loop turn: the windows the clock has opened get their tables, in every slice."""
        for task in list(self.loop.tasks.values()):
            task.open_scheduled(now)

    def restored(self, fresh: list[TopicPartition]) -> None:
        lost = expired(self.loop.consumer, fresh)
        if lost:
            self.loop.notice(expired_warning(self.config.topics[0], lost))

    def checkpointed(self, final: bool) -> None:
        """Any complete window released (its lock awaited at the final checkpoint), and
        published to the results topic."""
        recs = release_complete(
            self.wstore, self.group, self.layout, self.config, self.spec, self.series_path,
            wait=30.0 if final else 0.0, notice=self.loop.notice, on_release=self.on_release)
        self.released += len(recs)
        if self.results is not None:
            self.results.publish(recs)

    def open(self) -> None:
        """Open the results topic and publish the series file to it."""
        if self.results is not None:
            self.results.open()
            if os.path.exists(self.series_path):
                from panstream.windows.series import read

                self.results.publish(read(self.series_path))

    def close(self) -> None:
        if self.results is not None:
            self.results.close()


class WindowSliceTask:
    """Slice ``r`` of every open window (one table each), and the windows it has closed."""

    def __init__(self, kind: WindowTasks, tp: TopicPartition) -> None:
        self.kind = kind
        self.r = tp.partition
        self.shard = Shard(f"{kind.group}-w/{self.r}", tp, None)  # type: ignore[arg-type]
        self.state = TaskState.CREATED
        self.wins: dict[int, Estimator] = {}
        self.closed: set[int] = set()

    def restore(self) -> None:
        """The slice's open windows from their files, and the windows closed (files, series),
        under the slice's claim."""
        with self.kind.owned(self.r):
            self._restore_owned()

    def _restore_owned(self) -> None:
        k, r = self.kind, self.r
        opened: list[int] = []
        for key in list(k.wstore.keys()):  # the keys first, then the series (release_complete)
            if key == f"{k.group}-marks/{r}":
                k.wstore.delete(key)  # an earlier version's watermarks: data-driven, dropped
                continue
            got = parse_key(k.group, key)
            if got is not None and got[2] == r:
                (self.closed.add if got[1] else opened.append)(got[0])
        if os.path.exists(k.series_path):
            self.closed.update(start_of_label(w) for w in Series(k.series_path).released())
        for start in opened:
            key = window_keys(k.group, start, r)[0]
            if start in self.closed:
                k.wstore.delete(key)  # closed before a crash: never reopened
                continue
            data = k.wstore.load(key)
            if data is not None:
                self.wins[start] = restore_slice(
                    data, key, str(k.wstore.directory), k.layout, r, k.config,
                    (k.config.estimator, k.config.calibration))

    def window(self, start: int, now: float) -> Estimator | None:
        """The table of window ``start`` if the schedule has it open at ``now``."""
        est = self.wins.get(start)
        if est is not None:
            return est
        if start in self.closed or not self.kind.spec.schedule.accepts(start, now):
            return None
        est = self.wins[start] = fresh_slice(self.kind.layout, self.r, self.kind.config)
        return est

    def open_scheduled(self, now: float) -> None:
        """Give every window the schedule has open at ``now`` its table (so which tables exist
        in memory never depends on which windows records came for)."""
        for start in self.kind.spec.schedule.open_at(now):
            self.window(start, now)

    def apply(self, records: list[Any]) -> Counts:
        k, r = self.kind, self.r
        now = k.loop.wall_clock()
        self.open_scheduled(now)  # every window the clock has open, before any record
        for rec in records:
            if not rec.value:
                continue
            kind, start, payload = decoded(k.loop.gate, r, decode_record, rec.value) \
                or ("", None, None)
            if kind == "D":
                est = self.window(start, now)
                if est is not None and payload:
                    apply_cells(k.loop, r, k.layout.decode, est, payload)
        return NO_COUNTS

    def follow(self, now: float) -> None:
        """At clock ``now`` (under the slice's claim): close every window due (durable as
        closed), give every window the schedule has open its table, and close as a fresh table
        any due window that other slices closed and this slice never had (its owner was away
        for all of it)."""
        sch = self.kind.spec.schedule
        for start in sorted(self.wins):
            if sch.due(start, now):
                self._close(start)
        self.open_scheduled(now)
        for start in self.kind.closed_elsewhere(self.r):
            if sch.due(start, now) and start not in self.wins and start not in self.closed:
                self.wins[start] = fresh_slice(self.kind.layout, self.r, self.kind.config)
                self._close(start)

    def _close(self, start: int) -> None:
        """The window's slice durable as closed, its open snapshot removed, its table wiped."""
        k = self.kind
        est = self.wins.pop(start)
        opened, closed = window_keys(k.group, start, self.r)
        data = encode_slice(est, k.layout, self.r)
        try:
            k.wstore.save(closed, data)
        finally:
            wipe_buffer(data)
            est.wipe()
        k.wstore.delete(opened)
        self.closed.add(start)

    def snapshot(self, now: float | None) -> None:
        """Every open window-slice durable under the slice's claim (one hold for all of them);
        with ``now``, the slice first follows the schedule at ``now`` in the same hold.

        Raises:
            FencedError: another member claimed the slice since (none of its files written).
        """
        k = self.kind
        with k.owned(self.r):
            if now is not None:
                self.follow(now)
            for start, est in sorted(self.wins.items()):
                data = encode_slice(est, k.layout, self.r)
                try:
                    k.wstore.save(window_keys(k.group, start, self.r)[0], data)
                finally:
                    wipe_buffer(data)

    def close(self) -> None:
        for est in self.wins.values():
            est.wipe()
        self.wins.clear()


class WindowSliceStage(GroupLoop):
    """The slice stage of a windowed group (module docstring): a
    :class:`~panstream.sources.kafka.group.GroupLoop` of :class:`WindowSliceTask`\\ s: per
    owned slice, one table per window the clock has open; windows close on the clock, at the
    checkpoints; complete windows are released once into the series.

    Args:
        config, layout, metrics, admin_client: as :class:`~panstream.sources.kafka.slices.
            SliceStage` (``config.store`` is unused: window-slices live in ``wstore``).
        spec: the window settings.
        group: the group id (names the store keys).
        sources: the source topics (kept for the summary; nothing waits for them).
        wstore: the directory store of the window-slices (``STATE_DIR/windows``).
        series_path: the series file (shared by the members).
        on_release: called with each record once it is durable in the series.
        wall_clock: the wall clock the schedule runs on (tests inject one).
    """

    def __init__(self, config: TailConfig, layout: SliceLayout, metrics: Metrics | None = None,
                 admin_client: Mapping[str, Any] | None = None, *, spec: WindowSpec, group: str,
                 sources: list[str], wstore: DirectoryStore, series_path: str,
                 on_release: Callable[[dict[str, Any]], None] | None = None,
                 results: SeriesTopic | None = None,
                 wall_clock: Callable[[], float] = time.time,
                 consumer_factory: Callable[..., Any] = group_consumer) -> None:
        self.windows = WindowTasks(config, layout, spec=spec, group=group, wstore=wstore,
                                   series_path=series_path, on_release=on_release,
                                   results=results)
        super().__init__(config, self.windows, metrics, consumer_factory, wall_clock,
                         admin_client)
        self.layout, self.spec, self.group, self.wstore = layout, spec, group, wstore
        self.sources = list(sources)
        self.series_path, self.results = self.windows.series_path, results

    @property
    def wins(self) -> dict[int, dict[int, Estimator]]:
        """The open windows' tables per owned slice."""
        return {t.r: t.wins for t in self.tasks.values()}  # type: ignore[attr-defined]

    @property
    def closed(self) -> dict[int, set[int]]:
        """The windows each owned slice knows closed."""
        return {t.r: t.closed for t in self.tasks.values()}  # type: ignore[attr-defined]

    @property
    def on_release(self) -> Callable[[dict[str, Any]], None] | None:
        """Called with each record once it is durable in the series."""
        return self.windows.on_release

    @on_release.setter
    def on_release(self, call: Callable[[dict[str, Any]], None] | None) -> None:
        self.windows.on_release = call

    @property
    def released(self) -> int:
        """Windows this member released into the series."""
        return self.windows.released

    def follow_schedule(self, r: int, now: float) -> None:
        """Slice ``r`` at clock ``now`` (:meth:`WindowSliceTask.follow`, under its claim).

        Raises:
            FencedError: another member claimed the slice since (nothing written).
        """
        task = next(t for t in self.tasks.values() if t.r == r)  # type: ignore[attr-defined]
        with self.windows.owned(r):
            task.follow(now)

    def open_windows(self) -> dict[int, list[int]]:
        """The open windows' starts per owned slice (their tables are the state in memory)."""
        return {r: sorted(w) for r, w in self.wins.items()}
