"""Topology changes under a routed group: noticed and said, never survived silently (issue 35).

A routed group (:mod:`.member`) is a function of its topics: the source topics it reads (their
partitions and the group's committed offsets on them) and the internal topic ``<group>-cells``
that only panstream creates, with exactly ``--slices`` partitions. When one of them changes
identity under the group, the offsets the group committed no longer mean what they meant:

* **a source topic deleted and re-created under the same name** (a new topic id where the broker
  gives one; else fewer partitions, or end offsets below the group's commits): the commits belong
  to the old topic, the new one would be read from offsets that are not its own;
* **the internal topic gone** (deleted, or the broker restarted without its data): the records
  routed to slices but not yet applied went with it, and releases of the table miss them;
* **the internal topic with another partition count** (created by a broker's auto-create, by
  hand, or by another group): its partitions are not the group's slices.

So: no panstream client lets a broker auto-create a topic (:func:`no_auto_create` for kafka-python
consumers and producers, :data:`LIBRDKAFKA` for librdkafka's); a member checks at start
(:func:`offset_changes`, asked through :class:`~.progress.GroupProgress`) and while it runs
(:class:`TopologyWatch`, a thread of its own comparing topic ids and partition counts with what it
saw at start), and stops with exit 1 and one line (:class:`TopologyError`) that says what changed
and what was lost or may have been; ``release -b`` and ``inspect -b`` say it instead of "drained".
A source topic that does not exist *yet* is no change: the member waits for it
(:func:`wait_for_topics`), as Kafka Streams and log shippers do, instead of a crash loop.

Nothing here reads a record: topic ids, partition counts and offsets are what any client of the
group sees (``kafka-topics --describe``, ``kafka-consumer-groups --describe``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from panstream.errors import SourceError

#: The same for librdkafka's consumers and producers (:mod:`.rdkafka` sets it on every client).
LIBRDKAFKA: dict[str, Any] = {"allow.auto.create.topics": False}


def no_auto_create(client: Any) -> Any:
    """Make a kafka-python consumer's or producer's metadata requests say
    ``allow_auto_topic_creation=false``, and return it.

    kafka-python 3.0.12 takes ``allow_auto_create_topics=False`` on ``KafkaConsumer`` and
    ``KafkaProducer`` but never hands it to the cluster metadata that builds the requests, which
    keep asking for auto-creation (measured on Tansu: a group consumer subscribed to a missing
    topic, and a producer sending to one, each created it; librdkafka's clients did not). A broker
    restarted empty then re-created ``GROUP-cells`` with its default partition count for the
    first member that asked. So the setting is also put where the requests read it; clients
    without that metadata (librdkafka's, fakes) are returned unchanged.
    """
    cluster = getattr(getattr(client, "_client", None), "cluster", None) or getattr(
        client, "_metadata", None)
    config = getattr(cluster, "config", None)
    if isinstance(config, dict):
        config["allow_auto_create_topics"] = False
    return client


class TopologyError(SourceError):
    """A topic of the group changed identity under it (exit 1, one line)."""


@dataclass(frozen=True)
class Shape:
    """What identifies a topic now: its partition count and, where the broker gives one, its id."""

    partitions: int
    topic_id: str | None = None


#: Metadata answers that mean "no such topic" (UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID);
#: LEADER_NOT_AVAILABLE (a topic being created) also reads as not there yet.
_MISSING = {3, 5, 100}


def describe(admin: Any, topics: Iterable[str]) -> dict[str, Shape | None]:
    """The :class:`Shape` of each topic (``None``: it does not exist), from one Metadata request
    (``describe_topics``; Tansu and Kafka 2.8+ give topic ids).

    Raises:
        SourceError: the broker refused to describe a topic for another reason (authorization):
            a topic that exists but may not be read must not look like one not created yet.
    """
    names = list(dict.fromkeys(topics))
    if not names:
        return {}
    out: dict[str, Shape | None] = dict.fromkeys(names)
    for t in admin.describe_topics(names):
        name, code = t.get("name"), int(t.get("error_code") or 0)
        if name in out and code and code not in _MISSING:
            from kafka.errors import for_code

            msg = (f"the broker refused to describe the topic {name} ({for_code(code).__name__}): "
                   "check the ACLs and the security options")
            raise SourceError(msg)
        if name in out and not code and t.get("partitions"):
            tid = t.get("topic_id")
            tid = None if tid in (None, "", "AAAAAAAAAAAAAAAAAAAAAA") or set(str(tid)) <= {"0", "-"} \
                else str(tid)
            out[name] = Shape(len(t["partitions"]), tid)
    return out


def offset_changes(committed: Mapping[tuple[str, int], int], ends: Mapping[tuple[str, int], int],
                   partitions: Mapping[str, int | None]) -> list[str]:
    """What the group's committed offsets say about topics whose shape changed: one phrase per
    topic (a topic deleted since, one with fewer partitions, one whose ends lie below the
    commits: deleted and re-created, or truncated by hand). Pure.

    Args:
        committed: (topic, partition) -> the group's committed offset.
        ends: (topic, partition) -> the partition's end offset now (high-water mark).
        partitions: topic -> its partition count now (``None``: it does not exist).

    >>> offset_changes({("logs", 0): 500, ("logs", 1): 40}, {("logs", 0): 20, ("logs", 1): 40},
    ...                {"logs": 2})[0].split(": it was")[0]
    'logs ends below the offsets the group committed (partition 0: end 20, committed 500)'
    >>> offset_changes({("logs", 3): 5}, {}, {"logs": 2})
    ['logs has 2 partitions, but the group committed offsets on partition 3: it was re-created with fewer']
    >>> offset_changes({("old", 0): 5}, {}, {"old": None})
    ['old no longer exists, but the group committed offsets on it']
    >>> offset_changes({("logs", 0): 5}, {("logs", 0): 9}, {"logs": 1})
    []
    """
    out = []
    for topic in sorted({t for t, _ in committed}):
        mine = sorted((p, off) for (t, p), off in committed.items() if t == topic)
        count = partitions.get(topic)
        if count is None:
            out.append(f"{topic} no longer exists, but the group committed offsets on it")
            continue
        beyond = [p for p, _ in mine if p >= count]
        if beyond:
            out.append(f"{topic} has {count} partitions, but the group committed offsets on "
                       f"partition {beyond[0]}: it was re-created with fewer")
            continue
        below = [(p, ends[(topic, p)], off) for p, off in mine
                 if (topic, p) in ends and ends[(topic, p)] < off]
        if below:
            p, end, off = below[0]
            out.append(f"{topic} ends below the offsets the group committed (partition {p}: end "
                       f"{end}, committed {off}): it was deleted and re-created, or emptied")
    return out


def shape_changes(before: Mapping[str, Shape | None], now: Mapping[str, Shape | None],
                  internal: str, slices: int) -> list[str]:
    """What changed between two looks at the group's topics, one phrase each (pure). A source
    topic that grew partitions is no change (Kafka allows it; the group rebalances onto them).

    >>> a = {"logs": Shape(8, "A"), "g-cells": Shape(16, "C")}
    >>> shape_changes(a, {"logs": Shape(8, "B"), "g-cells": Shape(16, "C")}, "g-cells", 16)
    ['the source topic logs was deleted and re-created (topic id A, now B)']
    >>> shape_changes(a, {"logs": Shape(12, "A"), "g-cells": None}, "g-cells", 16)
    ['the internal topic g-cells is gone (deleted, or the broker lost its data)']
    >>> shape_changes(a, {"logs": None, "g-cells": Shape(4, "D")}, "g-cells", 16)[1]
    'the internal topic g-cells was re-created with 4 partitions, not the slice count 16 (topic id C, now D)'
    """
    out = []
    for topic, was in before.items():
        if was is None:
            continue
        kind = "internal" if topic == internal else "source"
        is_ = now.get(topic, was)
        if is_ is None:
            out.append(f"the internal topic {topic} is gone (deleted, or the broker lost its data)"
                       if kind == "internal" else f"the source topic {topic} was deleted")
            continue
        moved = was.topic_id is not None and is_.topic_id is not None and was.topic_id != is_.topic_id
        ids = f" (topic id {was.topic_id}, now {is_.topic_id})" if moved else ""
        if kind == "internal" and is_.partitions != slices:
            out.append(f"the internal topic {topic} was re-created with {is_.partitions} "
                       f"partitions, not the slice count {slices}{ids}")
        elif moved:
            out.append(f"the {kind} topic {topic} was deleted and re-created{ids}")
        elif is_.partitions < was.partitions:
            out.append(f"the {kind} topic {topic} now has {is_.partitions} partitions, not "
                       f"{was.partitions}: it was deleted and re-created")
    return out


def recorded_shapes(definition: Any) -> dict[str, Shape | None]:
    """The source topics' :class:`Shape` as a group definition
    (:class:`~panstream.state.group_definition.GroupDefinition`) recorded them (``None``: a topic
    that did not exist yet when the group was defined)."""
    return {t.name: Shape(t.partitions, t.topic_id) if t.partitions else None
            for t in definition.sources}


def identity_changes(recorded: Mapping[str, Shape | None], now: Mapping[str, Shape | None],
                     read: Iterable[str] = ()) -> list[str]:
    """The source topics whose identity differs from the one the group definition recorded
    (a new topic id; where the broker gives none, fewer partitions; or gone), and which no member
    has read since (``read``: the topics the group holds commits on; the broker drops a deleted
    topic's commits, so commits on a topic were made on the topic as it is now, by members that
    were warned at their start). One phrase each (pure). ``release -b`` and ``inspect -b`` ask
    this: offsets alone cannot show a re-creation no member saw (issue 35).

    >>> identity_changes({"logs": Shape(8, "A")}, {"logs": Shape(8, "B")})[0][:62]
    'the source topic logs was deleted and re-created (topic id A, '
    >>> identity_changes({"logs": Shape(8, "A")}, {"logs": Shape(8, "B")}, read=["logs"])
    []
    >>> identity_changes({"logs": Shape(8, None)}, {"logs": Shape(4, None)})[0][:71]
    'the source topic logs now has 4 partitions, not 8: it was deleted and r'
    >>> identity_changes({"new": None, "logs": Shape(2, "A")}, {"new": Shape(3, "C"), "logs": Shape(3, "A")})
    []
    """
    done = set(read)
    before = {t: s for t, s in recorded.items() if s is not None and s.partitions and t not in done}
    return [f"{c} since the group was defined, and no member has read it since"
            for c in shape_changes(before, now, "", 0)]


def stop_line(changes: list[str], internal: str) -> str:
    """The one line a member stops with when its topics changed, with what was or may be lost and
    the way out (no promise that nothing is lost: records routed but not applied may be gone)."""
    what = "; ".join(changes)
    gone = bool(internal) and any(internal in c for c in changes)
    lost = (f"records routed to slices but not yet applied went with the old {internal}, so "
            "releases of this table miss them (the slices in the store hold what was applied); "
            if gone else "")
    src = not internal or any(internal not in c for c in changes)
    way = ("the group's committed offsets belong to the old source topic: for a new stream start "
           "a new group (-g, and a new state) on it; if the new topic continues the same stream, "
           "reset this group's source offsets to its start (kafka-consumer-groups "
           "--reset-offsets --to-earliest) and restart" if src else
           f"delete {internal} if another tool made it, then restart: panstream creates it with "
           "the group's slice count")
    return f"the group's topics changed under it: {what}; {lost}{way}"


def wait_for_topics(exists: Callable[[list[str]], list[str]], topics: list[str],
                    notice: Callable[[str], None], stop: threading.Event | None = None,
                    limit: float | None = None, every: float = 1.0, say_every: float = 60.0,
                    clock: Callable[[], float] = time.monotonic,
                    sleep: Callable[[float], None] = time.sleep) -> bool:
    """Wait until every topic in ``topics`` exists (as Kafka Streams and log shippers wait for a
    source topic not created yet, instead of exiting into a crash loop). Says once what it waits
    for, then every ``say_every`` seconds how long it has waited.

    Args:
        exists: topics -> those of them that exist now.
        limit: give up after this many seconds (``--idle-timeout``; ``None``: wait for ever).

    Returns:
        ``True`` once they exist; ``False`` if ``stop`` was set meanwhile.

    Raises:
        SourceError: ``limit`` passed first.
    """
    start = clock()
    said = None
    while True:
        there = set(exists(topics))
        missing = [t for t in topics if t not in there]
        if not missing:
            if said is not None:
                notice(f"{', '.join(topics)}: the source topics exist now; starting")
            return True
        waited = clock() - start
        names = ", ".join(missing)
        if limit is not None and waited >= limit:
            msg = (f"stopped by --idle-timeout after {waited:.0f} s: the source topic {names} "
                   "does not exist: create it (or check -t and -b), then start the group")
            raise SourceError(msg)
        if said is None:
            bound = (f"giving up after --idle-timeout {limit:g} s" if limit is not None
                     else "waiting for as long as it takes; --idle-timeout bounds the wait")
            notice(f"the source topic {names} does not exist yet: waiting for it to be created "
                   f"(nothing is read or committed meanwhile; {bound})")
            said = waited
        elif waited - said >= say_every:
            notice(f"still waiting for the source topic {names} to be created ({waited:.0f} s)")
            said = waited
        if stop is not None and stop.wait(every):
            return False
        if stop is None:
            sleep(every)


class TopologyWatch:
    """Looks at the group's topics every ``interval`` seconds, from a thread of its own, and keeps
    the first change it sees (:attr:`changes`) for the member to stop on.

    A change is kept only when a second look ``confirm`` seconds later still shows one (the
    second look's words), so a broker that answers "no such topic" for a moment while it restarts
    with its data does not stop a group.

    Args:
        admin_factory: builds a kafka-python ``KafkaAdminClient``.
        sources: the source topics; internal: ``<group>-cells`` (``""``: none, the per-partition
            layout); slices: its partition count.
        on_change: called once, from the watch's thread, when it keeps a change.
    """

    def __init__(self, admin_factory: Callable[[], Any], sources: list[str], internal: str,
                 slices: int, interval: float = 2.0, confirm: float = 1.0,
                 on_change: Callable[[], None] | None = None) -> None:
        self._factory = admin_factory
        self.topics = [*sources, *([internal] if internal else [])]
        self.on_change = on_change
        self.internal = internal
        self.slices = slices
        self.interval = interval
        self.confirm = confirm
        self.baseline: dict[str, Shape | None] = {}
        #: The changes seen (empty: none yet).
        self.changes: list[str] = []
        self._admin: Any = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def look(self) -> dict[str, Shape | None]:
        """The topics' shapes now."""
        if self._admin is None:
            self._admin = self._factory()
        return describe(self._admin, self.topics)

    def start(self) -> None:
        """Take the baseline now (the topics as the member starts with them), then watch."""
        self.baseline = self.look()
        self._thread = threading.Thread(target=self._run, name="panstream-topology", daemon=True)
        self._thread.start()

    def check(self) -> list[str]:
        """Look (twice if the first look shows a change); remember and return the changes
        against the baseline."""
        if not self.changes and self.baseline:
            with self._lock, contextlib.suppress(Exception):  # no answer is no change
                if self._changes():
                    time.sleep(self.confirm)
                    self.changes = self._changes()
        return self.changes

    def _changes(self) -> list[str]:
        return shape_changes(self.baseline, self.look(), self.internal, self.slices)

    def _run(self) -> None:
        while not self._stop.wait(self.interval) and not self.changes:
            if self.check() and self.on_change is not None:
                self.on_change()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._admin is not None:
            with contextlib.suppress(Exception):
                self._admin.close()
            self._admin = None


__all__ = ["LIBRDKAFKA", "no_auto_create", "Shape", "TopologyError", "TopologyWatch", "describe",
           "identity_changes", "offset_changes", "recorded_shapes", "shape_changes", "stop_line",
           "wait_for_topics"]
