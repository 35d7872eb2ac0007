"""The group's identity on Kafka: settled before a member routes, checked on every internal record.

:mod:`panstream.state.group_definition` holds the definition (pure). This module does what needs
the broker and the store, at two moments:

* **At start** (:func:`settle`, called by ``panstream kafka`` before the ledger is opened, the
  internal topic created or any consumer joins): the member describes its source topics to the
  broker (:func:`describe_sources`: partition counts and topic IDs), builds its own definition
  from its options, and writes it into the store if the store holds none (first writer wins:
  :meth:`~panstream.state.stores.DirectoryStore.put_definition`). A member whose definition
  differs from the stored one stops with one line naming the first differing field and the way
  out (:class:`~panstream.errors.ConfigurationError`, exit 2): it has routed, committed and
  produced nothing. A store written before issue 35 (slices or shards, no definition) is adopted:
  the member first compares what the snapshots say (universe, slice count, family, epsilon,
  calibration, modulus) with its options, then writes its definition.
* **On every internal record** (:class:`RecordGate`): the routing stage stamps each record it
  produces with the definition's digest (Kafka header ``panstream-group``); the slice stage
  applies a record only if it carries this group's digest, or none (a record of a panstream
  before issue 35, which the layout's own decoding still checks). Any other record (written
  under another definition: a member of the same ``-g`` with another store, or the group's
  previous life before its state was deleted) is skipped, never applied, and its offset is
  committed past like any other, so it never blocks the group; the member says so once per
  foreign definition (no count: invariant 6).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from panstream.errors import ConfigurationError, SourceError, StateError
from panstream.state.group_definition import (
    HEADER,
    Difference,
    GroupDefinition,
    SourceTopic,
)

log = logging.getLogger("panstream.kafka")

@contextlib.contextmanager
def broker_admin(client: Mapping[str, Any]) -> Iterator[Any]:
    """One kafka-python admin client for the checks at start (closed after them).

    Raises:
        SourceError: no broker answered.
    """
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    from panstream.sources.kafka.config import unreachable_message

    try:
        admin = KafkaAdminClient(**client)
    except KafkaError as exc:
        raise SourceError(unreachable_message(dict(client), exc)) from None
    try:
        yield admin
    finally:
        with contextlib.suppress(Exception):
            admin.close()


def describe_sources(admin: Any, topics: Iterable[str]) -> tuple[SourceTopic, ...]:
    """Each source topic's partition count and topic ID as the broker describes them
    (:func:`panstream.sources.kafka.topology.describe`). A topic the broker does not know yet
    has 0 partitions and no ID; a broker without topic IDs gives ``None``.

    Raises:
        SourceError: the broker did not answer, or refused to describe a topic.
    """
    from kafka.errors import KafkaError

    from panstream.sources.kafka.topology import describe

    names = sorted(set(topics))
    try:
        shapes = describe(admin, names)
    except KafkaError as exc:
        msg = f"the broker did not describe the source topics {', '.join(names)}: {exc}"
        raise SourceError(msg) from None
    return tuple(SourceTopic(n, s.partitions if s else 0, s.topic_id if s else None)
                 for n, s in shapes.items())


def other_layouts(group: str, layout: str) -> dict[str, str]:
    """The internal topics that name ``group`` under the layouts it is not run in:
    ``{topic: layout}`` (``GROUP-cells`` is the routed layout's, ``GROUP-wcells`` the windowed
    one's; the per-partition layout has none).

    >>> other_layouts("g", "routed")
    {'g-wcells': 'windows'}
    >>> sorted(other_layouts("g", "partition"))
    ['g-cells', 'g-wcells']
    """
    from panstream.sources.kafka.route import internal_topic, window_topic

    names = {internal_topic(group): "routed", window_topic(group): "windows"}
    return {t: kind for t, kind in names.items() if kind != layout}


def check_names(admin: Any, mine: GroupDefinition) -> None:
    """Refuse a group whose ``-g`` another layout already uses on this broker: the layouts share
    the consumer group ``GROUP`` (and the routed and windowed ones ``GROUP-slices``), so a
    windowed member beside a routed group would take half the source partitions into its own
    tables. The other layout's internal topic shows it, whatever store that group used.

    Raises:
        ConfigurationError: one line, naming the topic and the ways out.
        SourceError: the broker did not answer.
    """
    from kafka.errors import KafkaError

    others = other_layouts(mine.group, mine.layout)
    try:
        found = sorted(t for t in admin.list_topics() if t in others)
    except KafkaError as exc:
        raise SourceError(f"the broker did not list its topics: {exc}") from None
    if found:
        t = found[0]
        msg = (f"-g {mine.group} already names a {others[t]} group on this broker (its internal "
               f"topic {t} exists), and this member runs the {mine.layout} layout: the two would "
               f"share the consumer group {mine.group}; give this group another -g (and its own "
               f"state), or, if that {others[t]} group is gone for good, delete topic {t}; "
               "nothing was routed, committed or produced")
        raise ConfigurationError(msg)


def _adopted(store: Any, mine: GroupDefinition) -> list[Difference]:
    """Where a store written before issue 35 (snapshots, no definition) departs from ``mine``,
    read from its snapshots' public parameters (:func:`panstream.state.stores.store_layout`)."""
    from panstream.state.stores import store_layout

    held = store_layout(store)
    if held["layout"] == "empty":
        return []
    if held["layout"] == "mixed" or len(held["estimator"]) != 1:
        msg = (f"{store!r} holds the snapshots of several groups (slices and per-partition shards, "
               "or several families): give this group a --state-dir or --state-topic of its own")
        raise ConfigurationError(msg)
    params = held.get("parameters", {})
    family = held["estimator"][0]
    seen = replace(
        mine, family=family,
        layout={"slices": "routed", "partitions": "partition"}[held["layout"]],
        epsilon=float(params.get("epsilon", mine.epsilon)),
        calibration=str(params.get("calibration", mine.calibration)) if family != "sketch"
        else mine.calibration,
        modulus=params.get("modulus", mine.modulus),
        universe=held.get("universe") or mine.universe,
        slices=held.get("slices") if held["layout"] == "slices" else mine.slices)
    out = [d for d in seen.differences(mine)
           if d.field not in ("group", "sources", "internal_topic", "window")]
    names = {s.name for s in mine.sources}
    stray = sorted(set(held.get("topics", [])) - names)  # per-partition shards name their topic
    if stray:
        out.append(Difference("sources", ", ".join(stray), ", ".join(sorted(names))))
    return out


def settle(store: Any, mine: GroupDefinition, notice: Callable[[str], None] = log.info,
           check: Callable[[], None] | None = None) -> GroupDefinition:
    """The group's definition: the store's, which ``mine`` (this member's) must match; written
    from ``mine`` if the store holds none (first writer wins). ``check`` (e.g. :func:`check_names`)
    runs once the store has nothing against ``mine``, before anything is written.

    Raises:
        ConfigurationError: ``mine`` differs (one line: the field, both values, the way out);
            nothing was routed, committed or produced.
        StateError: the store cannot be read or written, or its definition is corrupt.
    """
    where = store.definition_where()
    raw = store.definition()
    compared = raw is not None
    if raw is not None:
        _refuse(GroupDefinition.decode(raw).differences(mine), where, notice)
    else:
        diffs = _adopted(store, mine)
        if diffs:
            raise ConfigurationError(diffs[0].line(f"the snapshots of {store!r} (written "
                                                   "before group definitions)"))
    if check is not None:
        check()
    if raw is None:
        raw = store.put_definition(mine.encode())
        if raw == mine.encode():
            notice(f"group definition written to {where}: {mine.describe()} "
                   f"(definition {mine.digest})")
    held = GroupDefinition.decode(raw)
    if not compared:  # another member's, written first: compared now
        _refuse(held.differences(mine), where, notice)
    return held


def _refuse(diffs: list[Difference], where: str, notice: Callable[[str], None]) -> None:
    """Refuse the first option that differs (one line); say a re-created source topic (the
    topology checks, :mod:`panstream.sources.kafka.topology`, decide what its offsets mean)."""
    options = [d for d in diffs if not d.recreated]
    if options:
        raise ConfigurationError(options[0].line(where))
    for d in diffs:
        notice(d.note())


class RecordGate:
    """Which internal records a slice stage applies: those stamped with this group's digest, and
    unstamped ones (written before issue 35); any other is skipped and said once per digest.

    Args:
        digest: the group definition's :attr:`~GroupDefinition.digest`.
        topic: the internal topic (for the notice).
        notice: where the one-line warning goes.
    """

    def __init__(self, digest: str, topic: str,
                 notice: Callable[[str], None] = log.warning) -> None:
        self.digest = digest
        self.topic = topic
        self.notice = notice
        self._stamp = digest.encode()
        self._told: set[str] = set()

    def headers(self) -> list[tuple[str, bytes]]:
        """The header every routed record carries."""
        return [(HEADER, self._stamp)]

    def admits(self, record: Any, r: int) -> bool:
        """Whether ``record`` (of slice ``r``) was written under this group's definition (or
        before definitions existed)."""
        stamp = stamp_of(record)
        if stamp is None or stamp == self._stamp:
            return True
        self.refuse(r, stamp.decode("ascii", "replace"))
        return False

    def refuse(self, r: int, why: str) -> None:
        """Say once per foreign definition (or kind of unreadable record) that records of it
        were skipped."""
        if why in self._told:
            return
        self._told.add(why)
        what = (f"under another group definition ({why}; this group's is {self.digest})"
                if why != "unreadable" else "in another layout (they do not decode as this "
                "group's records)")
        self.notice(f"warning: records of {self.topic} (first seen in slice {r}) were written "
                    f"{what}: skipped, not applied, and committed past; the arrivals they "
                    "carry are not in this table (docs/kafka.md, 'The group's identity')")


def stamp(member: Any, digest: str) -> RecordGate:
    """Bind a routed member (:class:`~panstream.sources.kafka.member.Member`) to its group's
    definition: its routing stage stamps every record with ``digest``, its slice stage admits
    records through a :class:`RecordGate` (notices through the slice stage's)."""
    gate = RecordGate(digest, member.route.config.internal_topic,
                      lambda msg: member.slices.notice(msg))
    member.route.config.headers = gate.headers()
    member.slices.gate = gate
    return gate


def stamp_of(record: Any) -> bytes | None:
    """The ``panstream-group`` header of a consumed record (kafka-python's ``ConsumerRecord`` or
    the librdkafka adapter's), or ``None``."""
    for key, value in getattr(record, "headers", None) or ():
        if key == HEADER:
            return bytes(value) if value is not None else b""
    return None


def decoded(gate: RecordGate | None, r: int, decode: Callable[..., Any], *args: Any) -> Any:
    """``decode(*args)``, or ``None`` (said through ``gate``) for a record of slice ``r`` that
    does not decode as this group's: skipped rather than stopping the group for good (without a
    gate: raised)."""
    try:
        return decode(*args)
    except StateError:
        if gate is None:
            raise
        gate.refuse(r, "unreadable")
        return None


__all__ = ["RecordGate", "broker_admin", "check_names", "decoded", "describe_sources",
           "other_layouts", "settle", "stamp", "stamp_of"]
