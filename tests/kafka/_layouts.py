"""The three task kinds of a consumer group, as the tests written once over all of them see them.

A group member of ``panstream kafka`` keeps one table per task it owns:

* ``partition``: a per-partition shard (``--layout partition``): the full table of source
  partition ``events/0``, fed one item a message (:class:`KafkaTail`);
* ``slice``: a routed slice (the default layout): slice 0 of the universe, fed the routed records
  of the internal topic ``g-cells`` (:class:`SliceStage`);
* ``window``: a window slice (``--window``): slice 0's table of the 00:00 window (open 00:00 to
  01:10 with 10 minutes of lateness), fed from ``g-wcells`` (:class:`WindowSliceStage`).

:class:`Layout` builds a member's stage of one kind on a shared store, feeds it, and reads what
it holds; :class:`Task` is one member's hold of partition or slice 0. The fence, commit-rebalance
and drain tests (``test_fence.py``, ``test_commit_rebalance.py``, ``test_drain.py``) are written
against these two classes only, so **this module is the one place that knows how each stage is
constructed, fed and read**: a member joins through the stage's ``open`` and ``poll_once`` (a fake
consumer delivers the assignment, and records, through the rebalance listener the stage
subscribed with), and stops through ``checkpoint``/``final_checkpoint``/``close``. What a test
reads of a stage's inside (its tables, claimed epochs, deferred offsets) is read here.

Every kind holds the same arrivals: cells A, B and C of the module constants, in that order, at
offsets that end at :attr:`Layout.ends` (20 messages each for a shard, 2 routed records each for
a slice). Tables are density bit tables (or modular counters) at epsilon 30: a cell reads its
truth except with probability 1/(1 + e^30) < 1e-13.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
from _group_fakes import Consumer, DeletesAdmin, Group, Rec, Unfenced, released_ones
from fakes import MemoryLog
from kafka import TopicPartition

from panstream import estimators
from panstream.sources.kafka import Metrics, TailConfig
from panstream.sources.kafka.member import Member
from panstream.sources.kafka.progress import Pending
from panstream.sources.kafka.slices import SliceStage
from panstream.sources.kafka.tail import KafkaTail
from panstream.sources.kafka.windows import WindowSliceStage, WindowSpec, encode_data, window_keys
from panstream.state.slices import SliceLayout
from panstream.state.stores import DirectoryStore, TopicStore, encode_shard, encode_slice
from panstream.universe import Universe
from panstream.windows.series import Series

#: The arrivals, in cells of partition or slice 0 (every kind's universe holds them).
A, B, C = range(0, 20), range(40, 60), range(80, 100)
KINDS = ("partition", "slice", "window")
H = 1795478400  # 2026-11-24T00:00:00Z: the window of the window kind
SPEC = WindowSpec(3600, 600, 1.0)
OPEN_AT, CLOSE_AT = H + 1800, H + 3600 + 600  # 00:30 (the window open), 01:10 (it closes)


class Clock:
    """A wall clock the tests move (``clock.now``)."""

    def __init__(self, now: float) -> None:
        self.now = float(now)

    def __call__(self) -> float:
        return self.now


class GroupConsumer(Consumer):
    """A member's consumer in ``group`` that, like kafka-python's, calls the rebalance listener
    its stage subscribed with from inside ``poll``, and hands out the records fed to it."""

    def __init__(self, group: Group) -> None:
        super().__init__(group)
        self.listener: Any = None
        self._events: list[tuple[str, set[TopicPartition]]] = []
        self._records: dict[TopicPartition, list[Any]] = {}
        #: What the listener tried to commit on revoke (kafka-python's ``commit_async``).
        self.revoke_commits: list[dict[TopicPartition, int]] = []
        #: Runs inside the next poll, after the assignment was delivered (a pause: the member was
        #: assigned, then stopped before it claimed).
        self.after_assignment: Callable[[], None] | None = None
        self.leaving = threading.Event()
        self.leaving.set()

    def subscribe(self, topics: list[str], listener: Any) -> None:
        self.listener = listener

    def rejoin(self) -> None:
        """The member joined the group's current generation (without a new assignment)."""
        self.generation = self._coordinator._generation.generation_id = self.group.generation

    def poll(self, timeout_ms: int = 0, **_: Any) -> dict[TopicPartition, list[Any]]:
        events, self._events = self._events, []
        for what, tps in events:
            called = getattr(self.listener, f"on_partitions_{what}")(tps)
            if asyncio.iscoroutine(called):
                asyncio.run(called)
            if what == "assigned" and self.after_assignment is not None:
                pause, self.after_assignment = self.after_assignment, None
                pause()
        records, self._records = self._records, {}
        return records

    async def commit_async(self, offsets: dict[TopicPartition, Any]) -> None:
        self.revoke_commits.append({tp: om.offset for tp, om in offsets.items()})
        self.commit(offsets)

    def close(self, autocommit: bool = False) -> None:
        self.leaving.wait()  # clear it: a consumer that never leaves its group

    #: Set: ``close`` returns (leaves the group).
    leaving: threading.Event


class Task:
    """One member's stage owning partition or slice 0 (``layout.tp``): feed it, stop it, read it."""

    def __init__(self, layout: Layout, stage: Any, consumer: GroupConsumer) -> None:
        self.layout = layout
        self.stage = stage
        self.consumer = consumer
        #: The one-line notices the member printed.
        self.said: list[str] = []
        stage.notice = self.said.append

    # -------------------------------------------------------------- the group
    def join(self, tps: Iterable[TopicPartition] | None = None,
             pause: Callable[[], None] | None = None) -> Task:
        """Join (``open``), get ``tps`` (partition or slice 0) assigned, claim and restore them
        (one ``poll_once``); ``pause`` runs between the assignment and the claim."""
        self.stage.open()
        self.consumer._events.append(("assigned", set(tps or [self.layout.tp])))
        self.consumer.after_assignment = pause
        self.poll()
        return self

    def poll(self) -> bool:
        """One ``poll_once``: the fed records applied, pending claims and restores retried."""
        return bool(self.stage.poll_once(0))

    def apply(self, records: list[Rec], tp: TopicPartition | None = None) -> None:
        """Feed ``records`` (of ``tp``, by default partition or slice 0) and poll them."""
        if records:
            self.consumer._records[tp or self.layout.tp] = list(records)
            self.poll()

    def replay(self, group: Group) -> None:
        """What the member's consumer reads: the stream from the committed offset on."""
        start = group.committed.get(self.layout.tp, 0)
        self.apply([r for r in self.layout.stream if r.offset >= start])

    def revoke(self) -> None:
        """The group revokes partition or slice 0: the listener saves it before handing it over,
        and commits (see :attr:`GroupConsumer.revoke_commits`)."""
        self.consumer._events.append(("revoked", {self.layout.tp}))
        self.poll()

    def rejoin(self) -> None:
        self.consumer.rejoin()

    def checkpoint(self) -> None:
        self.stage.checkpoint()

    def final_checkpoint(self) -> None:
        self.stage.final_checkpoint()

    def close(self) -> None:
        self.stage.close()

    # -------------------------------------------------------------- what it holds
    def holds(self) -> bool:
        """Whether the member restored partition or slice 0 (its claim made)."""
        return self.layout.tp in self.stage.shards

    def table(self) -> Any:
        tp = self.layout.tp
        if self.layout.kind == "window":
            return self.stage.wins[tp.partition][H]
        return self.stage.shards[tp].estimator

    def ones(self) -> set[int]:
        """The cells the member's table of A, B and C reads as 1 (in memory)."""
        return set(np.flatnonzero(self.table().bits()).tolist())

    def counters(self) -> np.ndarray:
        return self.table().counters().astype(np.int64)

    @property
    def modulus(self) -> int:
        return int(self.stage.config.modulus)

    @property
    def deferred(self) -> dict[TopicPartition, int]:
        """The offsets whose commit met a rebalance, left to the next checkpoint."""
        return dict(self.stage._deferred)

    @property
    def epoch(self) -> int | None:
        """The epoch of this member's claim of partition or slice 0 (``None``: not claimed)."""
        return self.stage._epochs.get(self.layout.key)

    @property
    def deleted(self) -> list[dict[Any, int]] | None:
        """The internal records deleted (DeleteRecords) after commits; ``None``: no internal
        topic (a per-partition shard reads its source topic)."""
        admin = getattr(self.stage, "_admin", None)
        return admin.deleted if isinstance(admin, DeletesAdmin) else None

    @property
    def final_done(self) -> bool:
        return bool(self.stage._final_checkpoint_done)

    @property
    def partitions(self) -> list[str]:
        """The keys the run's summary names (set by the final checkpoint)."""
        return list(self.stage.summary.partitions)

    def open_windows(self) -> list[int]:
        return self.stage.open_windows().get(self.layout.tp.partition, [])

    def closed_windows(self) -> set[int]:
        return set(self.stage.closed.get(self.layout.tp.partition, set()))


class UnfencedWindows(WindowSliceStage):
    """The window-slice stage as it stood before fencing: no claim, window files written
    unchecked (and a commit that meets a rebalance stops it: deferring needs the fence)."""

    defers_rebalanced_commits = False

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.windows.owned = lambda r: contextlib.nullcontext()  # type: ignore[method-assign]

    def _claim(self, tp: TopicPartition) -> None:
        pass


class Layout:
    """Members of one task kind on one store (``directory`` or ``topic``) under ``tmp``."""

    def __init__(self, kind: str, tmp: Path, store: str = "directory") -> None:
        assert kind in KINDS and store in self.stores_of(kind)
        self.kind, self.tmp, self.store_kind = kind, tmp, store
        self.log = MemoryLog()
        self.clock = Clock(OPEN_AT)
        self.open_at, self.close_at = OPEN_AT, CLOSE_AT
        if kind == "partition":
            self.universe = Universe.parse("range:1000")
            self.tp = TopicPartition("events", 0)
            self.where = "events partitions 0"
        elif kind == "slice":
            self.slices = SliceLayout(Universe.parse("range:1000"), 2)  # slice 0: cells 0..499
            self.universe = self.slices.universe
            self.tp = TopicPartition("g-cells", 0)
            self.where = "g-cells slices 0"
        else:
            self.slices = SliceLayout(Universe.parse("ipv4:10.9.0.0/24"), 2)  # 0: cells 0..127
            self.universe = self.slices.universe
            self.tp = TopicPartition("g-wcells", 0)
            self.where = "g-wcells slices 0"
            self.open_key, self.closed_key = window_keys("g", H, 0)
        #: The key of partition or slice 0's claim (and snapshot, but for the window kind).
        self.key = f"{self.tp.topic}/{self.tp.partition}"
        #: How the run's summary names the task (a window slice: ``<group>-w/<slice>``).
        self.summary_key = "g-w/0" if kind == "window" else self.key
        self.stream: list[Rec] = []
        self.ends: dict[str, int] = {}
        for name, cells in (("A", A), ("B", B), ("C", C)):
            self.stream += self._records(cells, len(self.stream))
            self.ends[name] = len(self.stream)

    @staticmethod
    def stores_of(kind: str) -> tuple[str, ...]:
        """The stores a kind keeps its tables in (window-slices: the state directory only)."""
        return ("directory",) if kind == "window" else ("directory", "topic")

    def __repr__(self) -> str:
        return f"{self.kind}-{self.store_kind}"

    def _records(self, cells: range, first: int) -> list[Rec]:
        if self.kind == "partition":  # one item a message (-V item)
            return [Rec(first + i, str(x).encode()) for i, x in enumerate(cells)]
        out = []
        for i, lo in enumerate(range(cells.start, cells.stop, 10)):  # 10 cells a routed record
            ((r, data),) = self.slices.route(np.arange(lo, lo + 10, dtype=np.intp))
            assert r == 0
            value = bytes(data) if self.kind == "slice" else encode_data(H, bytes(data))
            out.append(Rec(first + i, value))
        return out

    def batch(self, *names: str) -> list[Rec]:
        """The records of arrivals ``names`` (consecutive: "A", "B" or "A", "B", "C")."""
        starts = {"A": 0, "B": self.ends["A"], "C": self.ends["B"]}
        return self.stream[starts[names[0]]:self.ends[names[-1]]]

    # -------------------------------------------------------------- stores
    def open_store(self) -> Any:
        """A handle on the shared store: each member opens its own, as processes do."""
        if self.store_kind == "topic":
            return TopicStore(self.log, chunk_bytes=40)
        return DirectoryStore(self.tmp / "state")

    def member(self, group: Group, *, family: str = "density", fenced: bool = True,
               tps: Iterable[TopicPartition] | None = None, join: bool = True,
               consumer_settings: dict[str, Any] | None = None, **settings: Any) -> Task:
        """A member of ``group`` owning partition or slice 0 (or ``tps``) in the group's current
        generation, joined (claimed and restored) unless ``join`` is false. ``fenced=False``:
        the member as it stood before fencing (no claims). ``consumer_settings`` and
        ``settings`` (``idle_timeout``, ``checkpoint_interval``, ...): the member's options."""
        consumer = GroupConsumer(group)

        def factory(**_: Any) -> GroupConsumer:
            consumer.rejoin()  # joins at open(), in the generation current then
            return consumer

        store = self.open_store()
        if self.kind != "window" and not fenced:
            store = Unfenced(store)
        cfg = TailConfig(dict(consumer_settings or {}), [self.tp.topic], self.universe, 30.0,
                         "rr", store, estimator=family,
                         partitioner="murmur2" if self.kind == "partition" else None, **settings)
        stage: Any
        if self.kind == "partition":
            stage = KafkaTail(cfg, Metrics(), consumer_factory=factory)
        elif self.kind == "slice":
            stage = SliceStage(cfg, self.slices, Metrics(), admin_client={},
                               consumer_factory=factory)
        else:
            cls = WindowSliceStage if fenced else UnfencedWindows
            state = self.tmp / "state"
            stage = cls(cfg, self.slices, admin_client={}, spec=SPEC, group="g",
                        sources=["logs"], wstore=DirectoryStore(state / "windows"),
                        series_path=str(state / "g-series.jsonl"), wall_clock=self.clock,
                        consumer_factory=factory)
        if self.kind != "partition":
            stage._admin = DeletesAdmin()  # DeleteRecords, recorded
        task = Task(self, stage, consumer)
        return task.join(tps) if join else task

    # -------------------------------------------------------------- what is durable
    def window_file(self, key: str, read: str = "ones") -> Any:
        """Slice 0's window file ``key``: its cells read as 1, or its counters (``None``: no such
        file)."""
        data = DirectoryStore(self.tmp / "state" / "windows").load(key)
        if data is None:
            return None
        est = estimators.restore(data, layout=self.slices.table_layout)
        try:
            if read == "counters":
                return est.counters().astype(np.int64)
            return set(np.flatnonzero(est.bits()).tolist())
        finally:
            est.wipe()

    def durable(self) -> set[int]:
        """The cells partition or slice 0 reads as 1 where it is durable: what its next owner
        restores and what a release reads (the window: its closed slice once closed, else its
        open one)."""
        if self.kind == "window":
            for key in (self.closed_key, self.open_key):
                cells = self.window_file(key)
                if cells is not None:
                    return cells
            return set()
        return released_ones(self.open_store())

    def save_before_fencing(self, cells: range) -> None:
        """Partition or slice 0 saved as panstream did before the fence: no claim, no epoch."""
        if self.kind == "partition":
            est = estimators.new("density", self.universe, 30.0)
            est.update_indices(np.arange(cells.start, cells.stop, dtype=np.intp))
            self.open_store().save(self.key, encode_shard(est))
            return
        est = estimators.new("density", self.slices.slice_universe(0), 30.0,
                             layout=self.slices.table_layout)
        est.update_indices(np.arange(cells.start, cells.stop, dtype=np.intp))
        self.open_store().save(self.key, encode_slice(est, self.slices, 0))

    def claim_file(self) -> Path:
        """The file of partition or slice 0's claim in a state directory."""
        where = self.tmp / "state" / ("windows" if self.kind == "window" else "")
        return where / f".{self.tp.topic}@{self.tp.partition}.shard.panstream-fence"

    def released_windows(self) -> list[str]:
        """The windows of the series file, in order (a window twice would be a second release)."""
        path = self.tmp / "state" / "g-series.jsonl"
        return sorted(Series(path).released()) if path.exists() else []


# ------------------------------------------------------------------ a routed member's drain
#: The drain tests' member: quiet after 5 s, checkpoints every second, a 6 s session.
DRAIN_SETTINGS = {"idle_timeout": 5.0, "checkpoint_interval": 1.0, "poll_timeout_ms": 20,
                  "consumer_settings": {"group_id": "g", "session_timeout_ms": 6000}}


class Router:
    """A member's routing stage (``logs`` to the layout's internal topic), as far as the member's
    drain and stop read it: its activity, and a final commit (``finishing``) and a leave
    (``closing``) that a test may hold (clear the event)."""

    def __init__(self, internal_topic: str) -> None:
        self.config = type("RouteConfig", (), {})()
        self.config.consumer = dict(DRAIN_SETTINGS["consumer_settings"])
        self.config.topics = ["logs"]
        self.config.internal_topic = internal_topic
        self.assignments = 1
        self.last_activity = 0.0  # quiet since long ago
        self.last_records = 0.0
        self.count: Any = None
        self.closing, self.finishing = threading.Event(), threading.Event()
        self.closing.set()
        self.finishing.set()

    def open(self) -> None:
        pass

    def poll_once(self, timeout_ms: int) -> bool:
        time.sleep(timeout_ms / 1000)
        return False

    def settle(self) -> None:
        pass

    def commit(self) -> None:
        pass

    def finish(self) -> None:
        self.finishing.wait()

    def close(self) -> None:
        self.closing.wait()


class Progress:
    """The broker's answers to "has the group drained?" (the last one repeats); ``hold`` cleared:
    the question hangs until it is set; ``on_ask`` runs at each question."""

    def __init__(self, answers: list[Pending], on_ask: Callable[[], None] | None = None) -> None:
        self.answers = answers
        self.on_ask = on_ask
        self.hold = threading.Event()
        self.hold.set()

    def pending(self) -> Pending:
        self.hold.wait()
        if self.on_ask is not None:
            self.on_ask()
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def close(self) -> None:
        pass


class Draining:
    """A routed member's stop decisions, as the drain tests drive them: what :class:`Member` does
    at each check of a quiet member, and at its stop (the one place that names its insides)."""

    def __init__(self, member: Member) -> None:
        self.member = member

    # -------------------------------------------------------------- the drain decision
    def may_stop(self, now: float) -> bool:
        """One check of the quiet member at ``now``: whether it stops (the final checkpoint next;
        :attr:`failure` says whether the run then fails)."""
        return bool(self.member._may_stop(now))

    def restless(self, now: float) -> None:
        """One check of a member that is not quiet (its groups rebalance)."""
        self.member._restless(now)

    def no_records_since(self, t: float, *, rebalances_seen: bool = False) -> None:
        """The slice stage's last records came at ``t`` (and, with ``rebalances_seen``, every
        rebalance so far was seen then)."""
        self.member._records_at = t
        if rebalances_seen:
            self.member._rebalances_mark = self.member._rebalances()

    @property
    def failure(self) -> str | None:
        """Why the run fails once stopped (exit 1), or ``None``."""
        return self.member._failure

    @property
    def asking(self) -> threading.Thread | None:
        """The thread asking the broker whether the group has drained (``None``: not asked)."""
        return self.member._asking

    #: The member's public settings, read and set through: how long a quiet member waits
    #: without progress, and how long a consumer may take to leave its group at the stop.
    SETTINGS = ("give_up_seconds", "close_seconds")

    def __getattr__(self, name: str) -> Any:
        if name in Draining.SETTINGS:
            return getattr(self.member, name)
        raise AttributeError(name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in Draining.SETTINGS:
            setattr(self.member, name, value)
        else:
            super().__setattr__(name, value)

    # -------------------------------------------------------------- the stop
    def stop_routing(self) -> threading.Thread:
        """Stop the member's routing thread (its loop finishes, makes its final commit and
        closes) and wait for it as the member does, bounded; returns the thread."""
        m = self.member
        m._route_stop.set()
        thread = threading.Thread(target=m._route_loop, name="panstream-route", daemon=True)
        thread.start()
        m._join_router(thread)
        return thread

    @property
    def route_error(self) -> BaseException | None:
        return self.member._route_error

    @property
    def router_left(self) -> bool:
        """Whether the routing thread was left behind at the stop (its consumer not closed)."""
        return bool(self.member._router_left)

    def close_slices(self) -> None:
        """Leave the slice group, bounded by :attr:`close_seconds`."""
        self.member._close_slices()


def drain_member(layout: Layout, answers: list[Pending], *, drain_timeout: float | None = 22.0,
                 on_ask: Callable[[], None] | None = None, asynchronous: bool = False,
                 assigned: bool = True) -> tuple[Draining, Router, Task, Progress]:
    """A routed member (:class:`Member`) of a slice or window-slice group: the layout's slice
    stage holding slice 0 (none if not ``assigned``) and a :class:`Router`; the broker answers
    the drain question with ``answers``. ``asynchronous``: as in a run, the question is asked
    from a thread of its own."""
    assert layout.kind != "partition", "a per-partition member has no group drain"
    task = layout.member(Group(), join=assigned, **DRAIN_SETTINGS)
    router = Router(layout.tp.topic)
    if not assigned:
        router.assignments = 0
    progress = Progress(answers, on_ask)
    m = Member(router, task.stage, {}, progress=progress,  # type: ignore[arg-type]
               drain_timeout=drain_timeout)
    m._async = asynchronous
    return Draining(m), router, task, progress
