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

**Release** (:func:`release_complete`). Whichever member finds all R closed slices of a window (at
its checkpoints, and its final one) takes the series lock, and unless the window is already in the
series: merges the slices (:func:`panstream.state.merge.merge_slices`), charges the **window's own
group ledger** (an append-only reservation log in ``STATE_DIR/windows/ledgers/<start>/``, budget:
exactly one release at ``--release-epsilon``; :func:`panstream.state.stores.group_ledger`), draws
the release, appends the record to the series (``fsync``: the commit point), then deletes the
closed slices and wipes the merged table. A window is therefore released at most once by any
number of members on any hosts sharing the state directory, and appears in the series exactly once
(a crash between the ledger's reservation and the series append, a few microseconds, drops that
window with a notice instead of releasing it twice). A slice whose owner never had the window
open (the slice was unowned for the window's whole life) is closed as a fresh table by its next
owner, so one slice never holds a window back.

**Fenced window-slices** (:mod:`panstream.state.fence`, issue 26). Slice ``r``'s window files
(open and closed, of every window) belong to whoever owns partition ``r`` of ``<group>-wcells``.
On assignment the stage claims the slice in ``STATE_DIR/windows`` under the key
``<group>-wcells/<r>`` (claim file ``.<group>-wcells@<r>.shard.panstream-fence``) with its
generation in ``<group>-slices``, and every later write of the slice's window files (saving an
open window, closing one, closing a fresh one, removing an open copy) happens inside
:meth:`~panstream.state.stores.DirectoryStore.claimed`: under the slice's ``flock``, only while
the claim is still its own. A member evicted while it went on running (a "zombie") therefore
cannot write its older tables over the new owner's open windows, nor close a window with them
(a closed slice is what the window's one release reads): it stops with
:class:`~panstream.errors.FencedError` (exit 1) before writing anything.

**A commit that meets a rebalance** waits for the next checkpoint, as in the other layouts
(:mod:`panstream.sources.kafka.tail`): the checkpoint has already followed the schedule under the
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

import calendar
import contextlib
import functools
import json
import logging
import os
import re
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from kafka import TopicPartition

from panstream import estimators
from panstream.errors import (
    BudgetExhaustedError,
    ConfigurationError,
    FencedError,
    StateError,
)
from panstream.estimators.base import Estimator, wipe_buffer
from panstream.release.ledger import ShardLedger
from panstream.sources.kafka.identity import decoded
from panstream.sources.kafka.metrics import Metrics
from panstream.sources.kafka.route import RECORD_BYTES, RouteConfig, RouteStage, window_topic
from panstream.sources.kafka.slices import SliceStage
from panstream.sources.kafka.tail import TailConfig
from panstream.sources.kafka.topology import no_auto_create
from panstream.state.checkpoint import Shard, shard_key
from panstream.state.files import state_lock
from panstream.state.slices import SliceLayout, encode_slice, head_params, slice_of
from panstream.state.stores import DirectoryStore, group_ledger
from panstream.windows.eventtime import (
    TIMED_FORMATS,
    TimeReader,
    check_time,
    has_time,
    label,
    lines_and_times,
    seconds,
)
from panstream.windows.schedule import WindowSchedule
from panstream.windows.series import Series, record
from panstream.windows.zones import Zone, parse_zone

log = logging.getLogger("panstream.kafka")

__all__ = ["SeriesTopic", "WindowSpec", "WindowRouteStage", "WindowSliceStage", "decode_record",
           "encode_data", "release_complete", "window_topic", "window_keys"]

#: Kinds of internal records: routed cells of one window; ``M`` (a watermark mark) was written
#: by earlier versions and is ignored.
DATA, MARK = b"D", b"M"
_HEAD = struct.Struct("<cq")


@dataclass(frozen=True)
class WindowSpec:
    """The public window settings of a group: ``size`` and ``lateness`` in seconds, the one
    release of each window (``release_epsilon``, ``mechanism``), an optional declared range
    ``[first, stop)`` (``--from``/``--to``, on the window grid), and the zone of formats that
    write a local time (``time_zone``: ``--time-zone``; a year-less syslog time takes the year
    nearest to the wall clock)."""

    size: int
    lateness: int
    release_epsilon: float
    mechanism: str = "laplace"
    first: int | None = None
    stop: int | None = None
    time_zone: str | None = None

    def __post_init__(self) -> None:
        if self.size <= 0 or self.lateness < 0:
            msg = f"a window must last > 0 s and lateness >= 0 s (got {self.size}, {self.lateness})"
            raise ConfigurationError(msg)

    @functools.cached_property
    def zone(self) -> Zone | None:
        """The parsed ``time_zone`` (one object: its offset tables are computed once)."""
        return parse_zone(self.time_zone) if self.time_zone is not None else None

    @functools.cached_property
    def schedule(self) -> WindowSchedule:
        """The group's public schedule: live, on the wall clock."""
        return WindowSchedule.live(self.size, self.lateness, self.first, self.stop)



def _stamp(start: int) -> str:
    return label(start).replace("-", "").replace(":", "")


def _start_of(stamp: str) -> int:
    return calendar.timegm(time.strptime(stamp, "%Y%m%dT%H%M%SZ"))


def window_keys(group: str, start: int, r: int) -> tuple[str, str]:
    """``(open key, closed key)`` of slice ``r`` of the window at ``start`` in the window store.

    >>> window_keys("g", 1795478400, 3)
    ('g-w20261124T000000Z/3', 'g-w20261124T000000Z-closed/3')
    """
    base = f"{group}-w{_stamp(start)}"
    return f"{base}/{r}", f"{base}-closed/{r}"


def _parse_key(group: str, key: str) -> tuple[int, bool, int] | None:
    """``(start, closed, r)`` of a window store key of ``group``, else ``None``."""
    m = re.fullmatch(re.escape(group) + r"-w(\d{8}T\d{6}Z)(-closed)?/(\d+)", key)
    if m is None:
        return None
    return _start_of(m.group(1)), m.group(2) is not None, int(m.group(3))


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
class WindowSliceStage(SliceStage):
    """The slice stage of a windowed group (module docstring): per owned slice, one table per
    window the clock has open; windows close on the clock, at the checkpoints; complete windows
    are released once into the series.

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
                 wall_clock: Callable[[], float] = time.time, **kw: Any) -> None:
        super().__init__(config, layout, metrics, admin_client, **kw)
        self.wall_clock = wall_clock
        self.results = results
        self.spec = spec
        self.group = group
        self.sources = list(sources)
        self.wstore = wstore
        self._fenced = wstore  # window-slices are claimed where they live (module docstring)
        self.series_path = os.fspath(series_path)
        self.on_release = on_release
        self.wins: dict[int, dict[int, Estimator]] = {}
        self.closed: dict[int, set[int]] = {}
        self.released = 0

    # -------------------------------------------------------------- fencing
    def _claim_key(self, tp: TopicPartition) -> str:
        """``<group>-wcells/<r>``: the slice's claim in the window store."""
        return self._slice_key(tp.partition)

    def _slice_key(self, r: int) -> str:
        return shard_key(window_topic(self.group), r)

    def _owned(self, r: int) -> contextlib.AbstractContextManager[None]:
        """The block that writes slice ``r``'s window files: it runs only while this member's
        claim of the slice is still the store's (module docstring).

        Raises:
            FencedError: another member claimed the slice since, or this one never did.
        """
        key = self._slice_key(r)
        epoch = self._epochs.get(key)
        if epoch is None:
            msg = f"window-slices of {key} not written: this member never claimed its partition"
            raise FencedError(msg)
        return self.wstore.claimed(key, epoch)

    # -------------------------------------------------------------- tables
    def _fresh_window(self, r: int) -> Estimator:
        return self._fresh_slice(r)

    def _load(self, key: str, r: int) -> Estimator | None:
        data = self.wstore.load(key)
        if data is None:
            return None
        c = self.config
        try:
            where = slice_of(head_params(data))
            if where is None or where[1] != r or where[0] != self.layout:
                msg = (f"{key} in {self.wstore.directory} is not slice {r} of {self.layout.count} "
                       f"of {self.layout.universe.spec}: resume with the --universe and --slices "
                       "it was written with, or use a new state and group")
                raise StateError(msg)
            expect = estimators.expect_of(c.estimator, self.layout.slice_universe(r), c.epsilon,
                                          c.calibration, c.modulus)
            est = estimators.restore(data, expect=expect, layout=self.layout.table_layout)
            est.ledger = ShardLedger()
            return est
        finally:
            wipe_buffer(data)

    def _restore(self, tp: TopicPartition) -> Shard:
        r = tp.partition
        self._claim(tp)
        with self._owned(r):
            return self._restore_owned(tp)

    def _restore_owned(self, tp: TopicPartition) -> Shard:
        r = tp.partition
        wins: dict[int, Estimator] = {}
        closed: set[int] = set()
        opened: list[int] = []
        for key in list(self.wstore.keys()):  # the keys first, then the series (see release_complete)
            if key == f"{self.group}-marks/{r}":
                self.wstore.delete(key)  # an earlier version's watermarks: data-driven, dropped
                continue
            got = _parse_key(self.group, key)
            if got is not None and got[2] == r:
                (closed.add if got[1] else opened.append)(got[0])
        if os.path.exists(self.series_path):
            closed.update(_start_of(_stamp_of_label(w)) for w in Series(self.series_path).released())
        for start in opened:
            key = window_keys(self.group, start, r)[0]
            if start in closed:
                self.wstore.delete(key)  # closed before a crash: never reopened
                continue
            est = self._load(key, r)
            if est is not None:
                wins[start] = est
        self.wins[r], self.closed[r] = wins, closed
        return Shard(f"{self.group}-w/{r}", tp, None)  # type: ignore[arg-type]

    def _open(self, r: int, start: int, now: float) -> Estimator | None:
        """The table of window ``start`` in slice ``r`` if the schedule has it open at ``now``."""
        est = self.wins[r].get(start)
        if est is not None:
            return est
        if start in self.closed[r] or not self.spec.schedule.accepts(start, now):
            return None
        est = self.wins[r][start] = self._fresh_window(r)
        return est

    # -------------------------------------------------------------- records
    def _apply(self, records: Mapping[TopicPartition, list[Any]]) -> None:
        for tp, recs in records.items():
            shard = self.shards.get(tp)
            if shard is None or not recs:
                continue
            r = tp.partition
            now = self.wall_clock()
            self._open_scheduled(r, now)  # every window the clock has open, before any record
            gate = self.gate
            for rec in recs:
                if not rec.value or (gate is not None and not gate.admits(rec, r)):
                    continue
                kind, a, b = decoded(gate, r, decode_record, rec.value) \
                    or ("", None, None)
                if kind == "D":
                    est = self._open(r, a, now)
                    part = decoded(gate, r, self.layout.decode, r, b) \
                        if est is not None and b else None
                    if est is not None and part is not None:
                        est.update_indices(part)  # wipes the offsets
            shard.applied(recs[-1].offset)

    def _open_scheduled(self, r: int, now: float) -> None:
        """Give every window the schedule has open at ``now`` its table in slice ``r`` (so which
        tables exist in memory never depends on which windows records came for)."""
        for start in self.spec.schedule.open_at(now):
            self._open(r, start, now)

    def maintain(self, now: float) -> None:
        """Each loop turn: the windows the clock has opened get their tables, in every owned
        slice; then the checkpoint if due (which also closes the windows due)."""
        wall = self.wall_clock()
        for r in list(self.wins):
            self._open_scheduled(r, wall)
        super().maintain(now)

    def follow_schedule(self, r: int, now: float) -> None:
        """Slice ``r`` at clock ``now``: close every window due (durable as closed), give every
        window the schedule has open its table, and close as a fresh table any due window that
        other slices closed and this slice never had (its owner was away for all of it).

        Raises:
            FencedError: another member claimed the slice since (nothing written).
        """
        with self._owned(r):
            self._follow_owned(r, now)

    def _follow_owned(self, r: int, now: float) -> None:
        sch = self.spec.schedule
        for start in sorted(self.wins[r]):
            if sch.due(start, now):
                self._close(r, start)
        self._open_scheduled(r, now)
        for start in self._closed_elsewhere(r):
            if sch.due(start, now) and start not in self.wins[r] and start not in self.closed[r]:
                self.wins[r][start] = self._fresh_window(r)
                self._close(r, start)

    def _closed_elsewhere(self, r: int) -> set[int]:
        """Windows with a closed slice in the store other than ``r``'s (public: files made on the
        schedule)."""
        out: set[int] = set()
        for key in list(self.wstore.keys()):
            got = _parse_key(self.group, key)
            if got is not None and got[1] and got[2] != r:
                out.add(got[0])
        return out

    def _close(self, r: int, start: int) -> None:
        """The window's slice durable as closed, its open snapshot removed, its table wiped."""
        est = self.wins[r].pop(start)
        opened, closed = window_keys(self.group, start, r)
        data = encode_slice(est, self.layout, r)
        try:
            self.wstore.save(closed, data)
        finally:
            wipe_buffer(data)
            est.wipe()
        self.wstore.delete(opened)
        self.closed[r].add(start)

    # -------------------------------------------------------------- checkpoint, release
    def _save_open(self, shards: list[Shard], now: float | None = None
                   ) -> dict[TopicPartition, int]:
        """Every open window-slice of ``shards`` durable, each slice under its claim (one hold
        of the slice's claim for all its windows); with ``now``, the slice first follows the
        schedule at ``now`` in the same hold. Returns the offsets to commit.

        Raises:
            FencedError: another member claimed one of the slices since (none of that slice's
                files written; the member stops).
        """
        offsets: dict[TopicPartition, int] = {}
        for shard in shards:
            r = shard.partition.partition  # type: ignore[attr-defined]
            with self._owned(r):
                if now is not None and r in self.wins:
                    self._follow_owned(r, now)
                for start, est in sorted(self.wins.get(r, {}).items()):
                    data = encode_slice(est, self.layout, r)
                    try:
                        self.wstore.save(window_keys(self.group, start, r)[0], data)
                    finally:
                        wipe_buffer(data)
            if shard.next_offset is not None:
                offsets[shard.partition] = shard.next_offset
        return offsets

    def open(self) -> None:
        """Join the slice group; open the results topic and publish the series file to it."""
        super().open()
        if self.results is not None:
            self.results.open()
            if os.path.exists(self.series_path):
                from panstream.windows.series import read

                self.results.publish(read(self.series_path))

    def checkpoint(self) -> None:
        """The schedule followed at this instant (due windows closed, open ones made), every open
        window-slice durable, then the internal offsets committed (then deleted), then any
        complete window released (and published to the results topic)."""
        offsets, deferred, why = self.checkpointer.commit(  # a rebalance defers to the next one
            self._save_open(list(self.shards.values()), self.wall_clock()))
        self.checkpointer.checkpoint([])  # serves this instant of the fixed clock; records it
        self.metrics.checkpoints.inc()
        self.summary.checkpoints += 1
        if offsets:
            self._delete(offsets)
        self._defer(deferred, why)
        recs = release_complete(
            self.wstore, self.group, self.layout, self.config, self.spec, self.series_path,
            wait=30.0 if self._final_checkpoint_done else 0.0, notice=self.notice,
            on_release=self.on_release)
        self.released += len(recs)
        if self.results is not None:
            self.results.publish(recs)

    def final_checkpoint(self) -> None:
        """The last checkpoint (its releases wait for the series lock); a commit of it that met
        a rebalance stops the member with exit 1 unless the broker holds the offsets already
        (:meth:`~panstream.sources.kafka.tail.KafkaTail.final_checkpoint`).

        Raises:
            SourceError: the final commit met a rebalance and the broker's offsets are behind.
        """
        self._final_checkpoint_done = True  # releases wait for the series lock this time
        self.checkpoint()
        self.summary.partitions = sorted(s.key for s in self.shards.values())
        self._final_deferred()

    def _release(self, tps: set[TopicPartition], save: bool) -> Any:
        shards = [self.shards[tp] for tp in tps if tp in self.shards]
        offsets: dict[TopicPartition, Any] = {}
        if save and shards and not self._final_checkpoint_done:
            offsets = self._offsets(self._save_open(shards))
            self.checkpointer.done()
        for tp in tps:
            self.shards.pop(tp, None)
            self._pending.discard(tp)
            for est in self.wins.pop(tp.partition, {}).values():
                est.wipe()
            self.closed.pop(tp.partition, None)
            self._unclaim(tp)
        self._last_activity = time.monotonic()
        self.metrics.assigned.set(len(self.shards))
        return offsets

    def open_windows(self) -> dict[int, list[int]]:
        """The open windows' starts per owned slice (their tables are the state in memory)."""
        return {r: sorted(w) for r, w in self.wins.items()}

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.consumer is not None:
                self.consumer.close(autocommit=False)
        for wins in self.wins.values():
            for est in wins.values():
                est.wipe()
        self.wins.clear()
        self.shards.clear()
        self._epochs.clear()
        self._close_admin()
        if self.results is not None:
            self.results.close()


def _stamp_of_label(window: str) -> str:
    return window.replace("-", "").replace(":", "")


def release_complete(wstore: DirectoryStore, group: str, layout: SliceLayout, config: TailConfig,
                     spec: WindowSpec, series_path: str, *, wait: float = 0.0,
                     notice: Callable[[str], None] = log.info,
                     on_release: Callable[[dict[str, Any]], None] | None = None
                     ) -> list[dict[str, Any]]:
    """Release every window whose R closed slices are all in ``wstore``, once (module docstring).

    Order per window, under the series lock: already in the series -> only its closed slices are
    deleted; else merge, charge the window's ledger (refused -> dropped with a notice), release,
    append to the series (the commit point), delete the closed slices, wipe.

    Returns:
        The records appended by this call (empty if the series is locked by another member and
        ``wait`` is 0: it releases them, or this member does at its next checkpoint).

    Raises:
        StateError: a slice, the ledger or the series could not be read or written.
    """
    ready: dict[int, set[int]] = {}
    for key in list(wstore.keys()):
        got = _parse_key(group, key)
        if got is not None and got[1]:
            ready.setdefault(got[0], set()).add(got[2])
    complete = sorted(s for s, rs in ready.items() if rs == set(range(layout.count)))
    if not ready:
        return []
    out: list[dict[str, Any]] = []
    held = contextlib.ExitStack()
    try:
        held.enter_context(state_lock(series_path, "kafka --window (its series)", wait=wait))
    except StateError:
        return []  # another member is releasing; it (or our next checkpoint) does these
    with held:
        ser = Series(series_path)
        done = ser.released()
        for start in sorted(set(ready) - set(complete)):
            if label(start) in done:  # a late slice of a released window (closed as fresh)
                for r in ready[start]:
                    wstore.delete(window_keys(group, start, r)[1])
        for start in complete:
            closed = [window_keys(group, start, r)[1] for r in range(layout.count)]
            if label(start) not in done:
                rec = _release_one(wstore, closed, group, layout, config, spec, start, notice)
                if rec is not None:
                    ser.append(rec)  # the commit point: from here on the window is released
                    out.append(rec)
            for key in closed:
                wstore.delete(key)
    for rec in out:
        if on_release is not None:
            on_release(rec)
    return out


def _release_one(wstore: DirectoryStore, closed: list[str], group: str, layout: SliceLayout,
                 config: TailConfig, spec: WindowSpec, start: int,
                 notice: Callable[[str], None]) -> dict[str, Any] | None:
    from panstream.state.merge import merge_slices

    c = config
    parts: dict[int, Estimator] = {}
    try:
        for r, key in enumerate(closed):
            data = wstore.load(key)
            if data is None:
                return None  # deleted meanwhile by a member that released it
            try:
                expect = estimators.expect_of(c.estimator, layout.slice_universe(r), c.epsilon,
                                              c.calibration, c.modulus)
                parts[r] = estimators.restore(data, expect=expect, layout=layout.table_layout)
            finally:
                wipe_buffer(data)
        est = merge_slices(parts, layout)
    finally:
        for e in parts.values():
            e.wipe()
    try:
        ledgers = Path(wstore.directory) / "ledgers" / _stamp(start)
        lstore = DirectoryStore(ledgers)
        with lstore.ledger_lock():
            est.ledger = group_ledger(lstore, new_ledger=True, budget=spec.release_epsilon)
            rel = est.release(spec.release_epsilon, spec.mechanism)
        out = rel.to_dict()
        out["time"] = float(spec.schedule.close_at(start))  # released_at: the schedule's instant
        return record(label(start), start, start + spec.size, est.kind, out,
                      epsilon_state=est.epsilon_state)
    except BudgetExhaustedError:
        notice(f"window {label(start)}: its one release was already reserved in {ledgers} but "
               "its record is not in the series (a crash between the two): the window is dropped "
               "rather than released twice")
        return None
    finally:
        est.wipe()
