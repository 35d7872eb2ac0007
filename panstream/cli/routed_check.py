"""What ``release`` and ``inspect`` say about a routed group's internal topic.

A routed group's store holds its slices; the group's internal topic ``<group>-cells`` may still
hold routed records that no slice has applied (a member stopped, a slice waits for its next
owner). A release made then misses those arrivals. So for a store of routed slices:

* **with ``-b``** the broker is asked (:class:`~panstream.sources.kafka.progress.GroupProgress`):
  the internal topic's end offsets against the ``<group>-slices`` commits. Unapplied records are
  said on stderr (a running group always has a few in flight) and in ``--json``
  (``internal_topic``); a slice with no snapshot is laid as fresh initial draws only if its
  internal partition never held a record (end offset 0), else the release is refused: that slice
  received arrivals that no snapshot holds.
* **without ``-b``** (a directory alone) nothing about the topic can be known: the release says so
  in one note, and refuses if a slice has no snapshot (whether it never received anything is the
  broker's to say; ``-b`` lets it decide).

Nothing here reads or prints an estimate; offsets are what any client of the group sees.
"""

from __future__ import annotations

import logging
from typing import Any

import click

from panstream.errors import StateError


def routed_topic(store: Any) -> tuple[str, int, list[int]] | None:
    """``(internal topic, slice count, slices present)`` of a store of routed slices, else
    ``None`` (per-partition shards, an empty or a mixed store: their own checks apply)."""
    from panstream.state.stores import store_layout

    lay = store_layout(store)
    if lay["layout"] != "slices" or lay.get("slices") is None:
        return None
    topics = sorted({k.rpartition("/")[0] for k in store.keys() if "/" in k})  # noqa: SIM118
    if len(topics) != 1:
        return None
    return topics[0], int(lay["slices"]), list(lay["slices_present"])


def check_routed(store: Any, bootstrap: str | None, overrides: tuple[str, ...],
                 security: dict[str, Any]) -> dict[str, Any] | None:
    """What the internal topic of a routed store holds (``None``: not a routed store).

    Returns:
        ``{"name", "slices", "missing", "checked", "drained", "routed_records_unapplied",
        "slices_pending", "never_routed"}`` (the last four only when ``checked``).

    Raises:
        SourceError: ``-b`` given but the broker cannot say.
    """
    found = routed_topic(store)
    if found is None:
        return None
    topic, count, present = found
    missing = sorted(set(range(count)) - set(present))
    out: dict[str, Any] = {"name": topic, "slices": count, "missing": missing,
                           "checked": bool(bootstrap)}
    if not bootstrap:
        return out
    logging.getLogger("kafka").setLevel(logging.CRITICAL)  # reconnect chatter; errors raise
    from panstream.sources import kafka as src
    from panstream.sources.kafka.progress import GroupProgress, group_of_internal
    from panstream.sources.kafka.topology import recorded_shapes
    from panstream.state.group_definition import stored

    client = src.state_client(bootstrap, src.parse_overrides(overrides), security)
    held = stored(store)  # the group's source topics, where its definition names them
    probe = GroupProgress(client, group_of_internal(topic),
                          None if held is None else [t.name for t in held.sources], topic,
                          recorded=None if held is None else recorded_shapes(held))
    try:
        if not probe.partitions(topic):
            msg = (f"the broker at {bootstrap} has no topic {topic!r}: give the -b of the "
                   "group that wrote these slices; if this is its broker, the topic was deleted "
                   "or the broker lost its data (restarted empty), and records routed to slices "
                   "but not yet applied went with it: a release without -b covers only what the "
                   "saved slices hold")
            raise StateError(msg)
        pending = probe.pending()
    finally:
        probe.close()
    out.update(pending.to_dict(), never_routed=sorted(pending.never_routed),
               pending_line=pending.describe())
    return out


def require_releasable(info: dict[str, Any] | None) -> None:
    """Refuse (before anything is spent) a release that would lay fresh draws where a slice may
    have received arrivals; say on stderr what the release cannot include.

    Raises:
        StateError: a slice has no snapshot and the broker was not asked, or says that its
            internal partition held records.
    """
    if info is None:
        return
    topic, missing = info["name"], info["missing"]
    if not info["checked"]:
        if missing:
            msg = (f"slices {_ranges(missing)} of {info['slices']} have no snapshot, and without "
                   f"-b the release cannot tell whether {topic} holds records routed to them: "
                   f"give -b HOST:PORT (fresh draws are laid only for slices that never received "
                   f"a record), or run the group until every slice is saved")
            raise StateError(msg)
        click.echo(f"panstream: note: {topic} was not checked for routed records not yet applied "
                   "to a slice (give -b HOST:PORT to check): this release covers what the saved "
                   "slices hold", err=True)
        return
    if info.get("topology_changed"):
        msg = (f"the group's topics changed under it: {'; '.join(info['topology_changed'])}: its "
               "committed offsets no longer say what this table holds, so a release cannot know "
               "what it misses. Find out what happened to the topics; a release without -b "
               "covers only what the saved slices hold (and says so)")
        raise StateError(msg)
    lost = [r for r in missing if r not in info["never_routed"]]
    if lost:
        msg = (f"slices {_ranges(lost)} have no snapshot, but {topic} has held records routed to "
               "them: a release would lay fresh draws where arrivals were routed. Run the group "
               "until every slice is saved and the topic drained (panstream kafka "
               "--idle-timeout exits 0 only then)")
        raise StateError(msg)
    if info.get("routed_records_expired"):
        click.echo(f"panstream: warning: {info['pending_line']}: this table misses the expired "
                   "arrivals for good (the whole group was down longer than the internal topic's "
                   "retention.ms)", err=True)
    elif not info["drained"]:
        click.echo(f"panstream: warning: {info['pending_line']}: this release does not include "
                   "them (run the group until it drains for a release of every arrival)",
                   err=True)


def _ranges(xs: list[int]) -> str:
    from panstream.sources.kafka.progress import ranges

    return ranges(xs)
