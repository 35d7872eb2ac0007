"""A member of a routed group: the routing stage and the slice stage, one thread each.

``panstream kafka`` (default ``--layout slices``) runs one :class:`Member` per process: the
routing stage (:class:`~panstream.sources.kafka.route.RouteStage`: parse, route, send; commit
the source offsets after ``acks=all`` on the slice stage's checkpoint grid,
:meth:`~panstream.sources.kafka.group.GroupLoop.commit_clock`: one clock for both stages) in a
thread of its own, and the slice stage (:class:`~panstream.sources.kafka.slices.SliceStage`: apply
to the owned slices, checkpoint, commit, DeleteRecords) in the calling thread, which also ticks
the telemetry window.

Why two threads: each kafka-python consumer must be waiting in its own ``poll()`` when its group
join completes (kafka-python 3.0.12 discards a JoinGroup that finished between two polls and
joins again; against Tansu, whose joins take seconds, two consumers polled in turn from one
thread rejoined forever). Each consumer's rebalance listener runs on that consumer's IO thread
while its owner thread waits in ``poll()``, so a stage's state is never touched by two threads.
The only shared object is the telemetry window, behind a lock. With librdkafka (the default
``--source-client``, :mod:`~panstream.sources.kafka.rdkafka`) both consumers are confluent-kafka
ones: joins and heartbeats run on librdkafka's own threads, and each listener runs on its stage's
thread inside that stage's ``poll()``, so the same holds.

Stopping on SIGTERM/SIGINT: the routing thread decides a still-open sample, flushes and commits,
and leaves its group; the slice stage then drains what was routed to its partitions (at most
``drain_seconds``), makes its final checkpoint and leaves. Records routed to partitions this
member does not own stay in the internal topic for their owner (whose retention is never shorter
than the source topics': :func:`~panstream.sources.kafka.route.internal_retention`).

**A bounded run (``idle_timeout``) ends only when the group has drained.** Both stages quiet for
``idle_timeout`` is not enough: records routed to slices another member holds (or that nobody
holds yet: a member killed with ``kill -9`` keeps its partitions until its session expires) would
sit unapplied, their source offsets committed, and a release would miss them. So a quiet member
asks the broker what the *group* still owes (:class:`~panstream.sources.kafka.progress.
GroupProgress`: source ends against ``<group>``'s commits, internal ends against
``<group>-slices``' commits) and stops with exit 0 only when nothing is pending. Otherwise it keeps
polling, so that a rebalance can hand it the orphaned slices, and says once what it waits for. If
nothing moves for :attr:`Member.give_up_seconds` it stops with :class:`~panstream.sources.kafka.progress.
PendingWorkError` (exit 1, one line saying what is pending; the records wait in the internal topic
for the next run). A member that never got a partition of either group stops the same way.

**Every wait of a stopping member is bounded, and says where it waits** (issue 26: once a fresh
draining member held every slice and neither exited nor printed a line for 240 s). "Without
progress" counts every way a quiet member can wait: pending work that does not shrink (a count
that only grows is no progress), a drain question the broker has not answered, answers that all
predate the member's last activity (a group that rebalances during every question); each gives
up after :attr:`Member.give_up_seconds` with its own line (no records at all while the groups
rebalance too often for the member ever to be quiet is said once, not made fatal). At the stop,
a consumer that does not leave its group within :attr:`Member.close_seconds` after its last
commit is left behind with a notice (the broker drops it when its session expires), and a routing
stage that cannot make its final commit fails the run. A :class:`~panstream.sources.kafka.watch.
StallWatch` says once, with the code line, any step of any of the member's threads that lasts a
minute.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer
from kafka.errors import KafkaError

from panstream.errors import SourceError
from panstream.sources.kafka.config import unreachable_message
from panstream.sources.kafka.progress import GroupProgress, Pending, PendingWorkError
from panstream.sources.kafka.route import RouteStage, ensure_internal_topic
from panstream.sources.kafka.slices import SliceStage
from panstream.sources.kafka.tail import RunSummary, kafka_errors
from panstream.sources.kafka.topology import (
    TopologyError,
    TopologyWatch,
    describe,
    no_auto_create,
    stop_line,
    wait_for_topics,
)
from panstream.sources.kafka.watch import StallWatch, where

#: The least wait for a group to drain: Tansu evicts a member killed with ``kill -9`` about a
#: minute after its death with kafka-python's default 10 s session (measured; 7 s with a 6 s one).
MIN_DRAIN_TIMEOUT = 120.0


def default_drain_timeout(consumer: Mapping[str, Any]) -> float:
    """How long a quiet member waits without progress for its group to drain, by default: two
    session timeouts and 10 s (a dead member's session expires, its partitions move), at least
    :data:`MIN_DRAIN_TIMEOUT`.

    >>> default_drain_timeout({"session_timeout_ms": 45000}), default_drain_timeout({})
    (120.0, 120.0)
    """
    session = float(consumer.get("session_timeout_ms", 10_000)) / 1000
    return max(MIN_DRAIN_TIMEOUT, 2 * session + 10)


def progressed(before: Pending, now: Pending) -> bool:
    """Whether the group moved between two answers: some partition's pending count went down (or
    it drained). A count that only grows (records arriving that nobody routes or applies) is no
    progress, or a member waiting on it would never give up.

    >>> a = Pending({("logs", 0): 5}, {3: 40}, "g-cells")
    >>> progressed(a, Pending({("logs", 0): 5}, {3: 39}, "g-cells"))
    True
    >>> progressed(a, Pending({("logs", 0): 9}, {3: 41}, "g-cells"))
    False
    """
    return (any(now.source.get(k, 0) < v for k, v in before.source.items())
            or any(now.cells.get(k, 0) < v for k, v in before.cells.items()))


class Member:
    """Run a :class:`RouteStage` and a :class:`SliceStage` until stopped (module docstring).

    Args:
        route, slices: the two stages (sharing one :class:`~panstream.sources.kafka.Metrics`).
        client: connection settings for creating the internal topic.
        retention_ms: the least ``retention.ms`` of the internal topic (``None`` or 0: the
            source topics' longest, read from the broker; a shorter one is raised to that:
            :func:`~.route.internal_retention`).
        drain_seconds: how long the slice stage may drain on stop.
        progress: asks the broker what the group has pending (built from ``client`` if
            ``None``; tests inject one).
        drain_timeout: how long a quiet member waits without progress for its group to drain
            (``--drain-timeout``; default :func:`default_drain_timeout`).
    """

    def __init__(self, route: RouteStage, slices: SliceStage, client: Mapping[str, Any],
                 retention_ms: int | None = None, drain_seconds: float = 10.0,
                 progress: Any = None, drain_timeout: float | None = None) -> None:
        self.route = route
        self.slices = slices
        self.client = dict(client)
        self.retention_ms = retention_ms or None
        self.retention: Any = None
        self.drain_seconds = drain_seconds
        group = str(route.config.consumer.get("group_id") or "")
        self.progress = progress or GroupProgress(self.client, group, list(route.config.topics),
                                                  route.config.internal_topic)
        #: A quiet member whose group has not drained stops (exit 1) after this long without
        #: progress: long enough for a dead member's session to expire and its slices to move.
        self.give_up_seconds = (float(drain_timeout) if drain_timeout is not None
                                else default_drain_timeout(slices.config.consumer))
        #: At the stop: how long a consumer may take to leave its group after its last commit.
        self.close_seconds = 30.0
        self.pending: Pending | None = None
        self._pending_since = 0.0
        self._unanswered_since: float | None = None  # quiet, and no usable answer since
        self._stale = 0  # answers dropped as older than this member's last activity, meanwhile
        self._rebalances_then = 0
        self._rebalances_mark = 0  # rebalances seen at the last records or usable answer
        self._restless_said = False
        self._records_at = time.monotonic()  # the slice stage's last records
        self._answered_at = 0.0  # the last usable answer to the drain question
        self._route_phase = "starting"
        self._route_closing_at = 0.0
        self._router_left = False  # the routing thread was left behind at the stop
        self._last_check = 0.0
        self._failure: str | None = None  # why a bounded run stops with exit 1
        self._waiting_since: float | None = None
        self._said = False
        #: Where one-line notices go (the CLI prints them on stderr).
        self.notice = slices.notice
        self.summary = slices.summary
        #: Says once any step of the member's threads that lasts a minute (module docstring).
        self.watch = StallWatch(lambda line: self.notice(line))
        self._lock = threading.Lock()
        self._route_stop = threading.Event()
        self._settle = threading.Event()  # asks the routing thread to decide and commit now
        self._settled = threading.Event()  # ... which it has done
        self._router: threading.Thread | None = None
        #: The drain question, asked from its own thread during a run (:meth:`_ask`).
        self._async = False
        self._asking: threading.Thread | None = None
        self._answer: tuple[float, Pending] | None = None
        self._answer_error: BaseException | None = None
        self._answer_lock = threading.Lock()
        self._route_error: BaseException | None = None
        #: The group's topics as the member started with them, watched from :meth:`run` on
        #: (issue 35, :mod:`.topology`); nothing watched before.
        self.topology = TopologyWatch(self._admin, [], "", 0)
        metrics = slices.metrics

        def count(messages: int, items: int, malformed: int, outside: int) -> None:
            with self._lock:
                metrics.batch(messages, items, malformed, outside)

        route.count = count

    def _admin(self) -> KafkaAdminClient:
        try:
            return KafkaAdminClient(**self.client)
        except KafkaError as exc:
            raise SourceError(unreachable_message(self.client, exc)) from None

    def _wait_for_sources(self, stop: threading.Event) -> bool:
        """Wait (saying so) until every source topic exists, at most ``--idle-timeout`` if given;
        ``False`` if stopped meanwhile (:func:`~.topology.wait_for_topics`)."""
        if self.route.config.consumer.get("allow_auto_create_topics"):
            return True  # -C allow.auto.create.topics=true: the source consumer creates them
        admin = self._admin()
        try:
            def exists(topics: list[str]) -> list[str]:
                return [t for t, s in describe(admin, topics).items() if s is not None]

            return wait_for_topics(exists, list(self.route.config.topics), self.notice, stop,
                                   self.slices.config.idle_timeout)
        finally:
            admin.close()

    def _check_start(self) -> None:
        """Refuse to start on topics whose identity changed since the group committed on them
        (a source re-created, the internal topic re-created: :func:`~.topology.offset_changes`)."""
        changed = self.progress.pending().changed
        if changed:
            raise TopologyError(stop_line(list(changed), self.route.config.internal_topic))

    def _ensure_topic(self) -> None:
        cells = self.route.config.internal_topic
        admin = self._admin()
        try:
            had = describe(admin, [cells])[cells] is not None
        finally:
            admin.close()
        store = self.slices.config.store
        if not had and any(k.startswith(f"{cells}/") for k in store.keys()):  # noqa: SIM118
            self.notice(f"warning: {cells} did not exist, but the store holds slices of this "
                        "group: the topic was deleted or the broker lost its data (restarted "
                        "empty); records routed to slices but not yet applied before that are "
                        "lost, and releases of this table miss them. panstream creates it again "
                        "with the group's slice count")
        try:
            probe = no_auto_create(KafkaConsumer(**self.client, allow_auto_create_topics=False))
        except KafkaError as exc:
            raise SourceError(unreachable_message(self.client, exc)) from None
        try:
            self.retention = ensure_internal_topic(
                self.client, self.route.config.internal_topic, self.route.config.layout,
                self.retention_ms, probe, sources=list(self.route.config.topics),
                notice=self.notice, stored=self._stored_count)
        finally:
            probe.close()

    def _stored_count(self) -> int | None:
        """The slice count the store's saved slices were written with (``None``: none saved)."""
        from panstream.state.stores import store_layout

        lay = store_layout(self.slices.config.store)
        return int(lay["slices"]) if lay.get("layout") == "slices" and lay.get("slices") else None

    def _idle(self, now: float) -> bool:
        """Both stages quiet for ``idle_timeout`` (30 s more before the first assignments)."""
        s = self.slices
        if s.config.idle_timeout is None:
            return False
        ready = s._ever_assigned or self.route.assignments > 0
        last = max(self.route.last_activity, s._last_activity)
        return now - last >= s.config.idle_timeout + (0.0 if ready else 30.0)

    def _may_stop(self, now: float) -> bool:
        """Quiet: stop if the group has drained; else wait (a rebalance may hand this member the
        orphaned slices); after :attr:`give_up_seconds` without progress stop all the same, to
        fail (:class:`PendingWorkError`) once the final checkpoint is made. Asks the broker at
        most once a second."""
        if now - self._last_check < 1.0:
            return False
        self._last_check = now
        pending = self._ask()
        if pending is None:  # no answer yet that postdates this member's last work
            return self._unanswered(now)
        self._unanswered_since, self._stale, self._answered_at = None, 0, now
        self._rebalances_mark, self._restless_said = self._rebalances(), False
        if not pending:
            if not self.slices._ever_assigned and self.route.assignments == 0:
                msg = (f"stopped by --idle-timeout without ever getting a partition of "
                       f"{', '.join(self.route.config.topics)} or "
                       f"{self.route.config.internal_topic}: the group's other members did the "
                       "work, or this member could not join (check -g and the broker)")
                self._failure = msg
            return True
        if self._waiting_since is None:
            self._waiting_since = now
        if not self._said and now - self._waiting_since > self.slices.config.checkpoint_interval + 2:
            self._said = True  # not what the next slice checkpoint settles anyway: say it once
            self.notice(f"idle, but the group has not drained: {pending.describe()}; waiting for "
                        f"it (a rebalance may hand this member their partitions; giving up after "
                        f"{self.give_up_seconds:g} s without progress)")
        if pending.changed:  # not pending work: the group can never drain on these topics
            self._failure = stop_line(list(pending.changed), self.route.config.internal_topic)
            return True
        if self.pending is None or progressed(self.pending, pending):  # or first sight
            self.pending, self._pending_since = pending, now
            return False
        self.pending = pending
        if now - self._pending_since >= self.give_up_seconds:
            cells = self.route.config.internal_topic
            kept = (f"the records past the last commit wait in {cells}, except those said to "
                    "have expired" if pending.expired else
                    f"nothing is lost (the records wait in {cells})")
            msg = (f"stopped by --idle-timeout with work pending for the group: "
                   f"{pending.describe()}; {kept}: run the group's members until it "
                   "drains, then release")
            self._failure = msg
            return True
        return False

    def _rebalances(self) -> int:
        """Rebalances both stages have seen (assignments of either group)."""
        return int(self.route.assignments) + int(getattr(self.slices.summary, "rebalances", 0))

    def _unanswered(self, now: float) -> bool:
        """Quiet without a usable answer: give up after :attr:`give_up_seconds`, saying why."""
        if self._unanswered_since is None:
            self._unanswered_since, self._rebalances_then = now, self._rebalances()
            return False
        if now - self._unanswered_since < self.give_up_seconds:
            return False
        asking = self._asking
        if asking is not None and asking.is_alive():
            why = (f"the broker has not answered the drain check for {self.give_up_seconds:g} s "
                   f"(it waits {where(asking)})")
        else:
            why = (f"for {self.give_up_seconds:g} s every answer of the broker predated this "
                   f"member's last activity ({self._stale} dropped; "
                   f"{self._rebalances() - self._rebalances_then} rebalances meanwhile)")
        self._failure = (f"stopped by --idle-timeout without knowing whether the group has "
                         f"drained: {why}; nothing of this member is lost (its slices are "
                         "checkpointed): run the group's members until it drains, then release")
        return True

    def _restless(self, now: float) -> None:
        """Say once when neither a record nor a usable answer came for ``idle_timeout`` +
        :attr:`give_up_seconds` while the member is not quiet because its groups rebalanced
        (a rebalance counts as activity, so it does not ask whether the group has drained). Only
        said, not fatal: one long restore after one rebalance looks the same for a while."""
        s = self.slices
        if s.config.idle_timeout is None or self._restless_said:
            return
        records = max(self._records_at, getattr(self.route, "last_records", 0.0))
        last = max(records, self._answered_at)
        moved = self._rebalances() - self._rebalances_mark
        if moved <= 0 or now - last < s.config.idle_timeout + self.give_up_seconds or self._idle(now):
            return
        self._restless_said = True
        self.notice(f"no records for {now - records:.0f} s, but not quiet: its groups rebalanced "
                    f"{moved} times meanwhile (a rebalance counts as activity, so this member has "
                    "not asked whether the group has drained); a bounded run stops only once the "
                    "group has drained")

    def _ask(self) -> Pending | None:
        """The group's pending work, asked after this member's last work; ``None`` while no such
        answer has come. In a run the question is asked from a thread of its own: the slice
        stage's thread must stay in ``poll()``, or kafka-python discards a JoinGroup completing
        meanwhile and joins again (against Tansu's slow joins, a quiet member asking every second
        would never get the slices it waits for)."""
        if not self._async:
            return self._ask_broker()
        with self._answer_lock:
            answer, self._answer = self._answer, None
        if self._answer_error is not None:
            raise self._answer_error
        if self._asking is None or not self._asking.is_alive():
            self._asking = threading.Thread(target=self._ask_in_thread, name="panstream-drain",
                                            daemon=True)
            self._asking.start()
        if answer is None:
            return None
        started, pending = answer
        if started < max(self.route.last_activity, self.slices._last_activity):
            self._stale += 1
            return None  # asked before this member's last work: ask again
        return pending

    def _ask_broker(self) -> Pending:
        """Settle the routing stage (a short topic's first sample is held, nothing committed,
        until decided: decide it and commit what was routed), then ask the broker."""
        if self._router is not None and self._router.is_alive():
            self._settled.clear()
            self._settle.set()
            self._settled.wait(timeout=10)
        return self.progress.pending()

    def _ask_in_thread(self) -> None:
        started = time.monotonic()
        self.watch.step("asking the broker whether the group has drained")
        try:
            pending = self._ask_broker()
        except BaseException as exc:  # noqa: BLE001 - raised in the main thread
            self._answer_error = exc
            return
        finally:
            self.watch.done()
        with self._answer_lock:
            self._answer = (started, pending)

    # -------------------------------------------------------------- the routing thread
    def _route_loop(self) -> None:
        r = self.route
        timeout = self.slices.config.poll_timeout_ms
        # The slice stage's checkpoint grid: source commits fall on the same instants as the
        # slices' checkpoints, and no arrival moves them (one clock for the group, issue 35).
        clock = self.slices.commit_clock()
        group = r.config.consumer.get("group_id")
        try:
            with kafka_errors():
                self._route_phase = "routing"
                self.watch.step(f"joining the source group {group}")
                r.open()
                while not self._route_stop.is_set():
                    self.watch.step("routing the source topics (one poll, route, commit)")
                    r.poll_once(min(timeout, int(clock.seconds_until_due() * 1000) + 1))
                    if self._settle.is_set():  # the member is quiet: decide and commit now
                        self._settle.clear()
                        r.settle()
                        self._settled.set()
                    elif clock.due():
                        clock.served()
                        r.commit()
                self._route_phase = "finishing"
                self.watch.step("making the routing stage's final commit")
                r.finish()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread, raised there
            self._route_error = exc
        finally:
            self._settled.set()  # nobody waits for a settle that will not come
            self._route_closing_at = time.monotonic()
            self._route_phase = "closing"
            self.watch.step(f"leaving the source group {group} (closing the routing consumer)")
            r.close()
            self._route_phase = "done"
            self.watch.done()

    # -------------------------------------------------------------- the main thread
    def run(self, stop: threading.Event | None = None) -> RunSummary:
        """Route and apply until ``stop`` is set or both stages are idle; final commits first.

        Raises:
            SourceError: a broker is unreachable, a commit or an acknowledgement failed, or the
                topic's values do not parse (first sample).
            StateError: a slice could not be saved or restored.
            ConfigurationError: the internal topic has another partition count than ``--slices``.
        """
        stop = stop or threading.Event()
        s = self.slices
        t0 = time.monotonic()
        if not self._wait_for_sources(stop):
            self.summary.stopped_by = "signal"
            return self.summary
        self._ensure_topic()
        self._check_start()
        cfg = self.route.config
        self.topology = TopologyWatch(self._admin, list(cfg.topics), cfg.internal_topic,
                                      cfg.layout.count)
        self.topology.start()
        router = threading.Thread(target=self._route_loop, name="panstream-route", daemon=True)
        self._router = router
        self._async = True
        self._records_at = time.monotonic()
        cells = self.route.config.internal_topic
        self.watch.start()
        try:
            with kafka_errors():
                self.watch.step(f"joining the slice group of {cells}")
                s.open()
                router.start()
                while not stop.is_set() and self._route_error is None and not self.topology.changes:
                    self.watch.step(f"applying {cells} to this member's slices (one poll, "
                                    "checkpoint when due)")
                    applied = s.poll_once()
                    now = time.monotonic()
                    if applied:  # work came: a later wait starts afresh
                        self.pending = self._waiting_since = self._unanswered_since = None
                        self._records_at, self._stale = now, 0
                        self._rebalances_mark, self._restless_said = self._rebalances(), False
                    elif self._idle(now) and self._may_stop(now):
                        self.summary.stopped_by = "idle-timeout"
                        break
                    else:
                        self._restless(now)
                    with self._lock:
                        s.metrics.tick(now)
                    s.maintain(now)
                else:
                    self.summary.stopped_by = ("topology" if self.topology.changes else "signal"
                                               if self._route_error is None else "error")
                if self.topology.changes:
                    self.route.hold_commits = True  # its positions belong to the old topics
                self._route_stop.set()
                self.watch.step("waiting for the routing stage's final commit")
                self._join_router(router)
                if self._route_error is None and not self.topology.changes:
                    self.watch.step("draining what was routed to this member's slices")
                    s.drain(self.drain_seconds)
                self.watch.step("making the final checkpoint")
                s.final_checkpoint()
            self._topology_stop()
            if self._route_error is not None:
                raise self._route_error
            if self._failure is not None:  # after the final checkpoint: nothing of ours is lost
                raise PendingWorkError(self._failure)
        except (SourceError, KafkaError) as exc:
            if isinstance(exc, TopologyError):
                raise
            self._topology_stop()  # an error the topics' change caused says what changed instead
            raise
        finally:
            self.topology.stop()
            self._route_stop.set()
            if router.is_alive() and not self._router_left:
                router.join(timeout=self.close_seconds)
            self._close_slices()
            if self._asking is not None:
                self._asking.join(timeout=self.close_seconds)
            self.progress.close()
            with self._lock:
                s.metrics.close_window()
            s._summarize_counts()
            self.summary.seconds = time.monotonic() - t0
            self.watch.stop()
        return self.summary

    def _topology_stop(self) -> None:
        """Raise :class:`~.topology.TopologyError` if the group's topics changed under it (the
        watch saw it, or a look now does).

        Raises:
            TopologyError: they did.
        """
        changes = self.topology.check()
        if changes:
            self.route.hold_commits = True
            raise TopologyError(stop_line(changes, self.route.config.internal_topic)) from None

    def _join_router(self, router: threading.Thread) -> None:
        """Wait for the routing thread's final commit and its leaving, each bounded: a consumer
        still leaving its group :attr:`close_seconds` after its last commit is left behind with a
        notice (the broker drops it when its session expires); a final commit not made within
        :attr:`give_up_seconds` fails the run (nothing is lost: the routed records are durable)."""
        start = time.monotonic()
        group = self.route.config.consumer.get("group_id")
        while router.is_alive():
            router.join(timeout=0.5)
            if not router.is_alive():
                return
            now = time.monotonic()
            if self._route_phase in ("closing", "done"):
                if now - self._route_closing_at >= self.close_seconds:
                    self._router_left = True
                    self.notice(f"the routing consumer has not left group {group} "
                                f"{self.close_seconds:g} s after its last commit (its thread "
                                f"waits {where(router)}); this member goes on without it (the "
                                "broker drops it when its session expires)")
                    return
            elif now - start >= self.give_up_seconds:
                self._router_left = True
                if self._route_error is None:
                    msg = (f"the routing stage did not make its final commit within "
                           f"{self.give_up_seconds:g} s (its thread waits {where(router)}); "
                           "nothing is lost: the routed records are durable and a restart "
                           "routes those messages again")
                    self._route_error = SourceError(msg)
                return

    def _close_slices(self) -> None:
        """Leave the slice group (after the final checkpoint, or on error), bounded by
        :attr:`close_seconds`: the slice stage's snapshots are durable and committed by then."""
        s = self.slices
        self.watch.step(f"leaving the slice group of {self.route.config.internal_topic} "
                        "(closing the slice consumer)")
        closer = threading.Thread(target=s.close, name="panstream-close", daemon=True)
        closer.start()
        closer.join(timeout=self.close_seconds)
        if closer.is_alive():
            self.notice(f"the slice consumer has not left its group {self.close_seconds:g} s "
                        f"after its final checkpoint (its thread waits {where(closer)}); this "
                        "member exits without it (the broker drops it when its session expires)")
        self.watch.done()
