"""A Kafka group's definition: what the group *is*, written once, checked by every member (pure).

A consumer group of ``panstream kafka`` computes one table (or one per window, or one per source
partition). Every member must agree on what that table is: the universe, the family and its
parameters, the layout, the slice count, the source topics and the internal topic. Before issue 35
nothing recorded it, so a member started with other options (``-u hashed-ip:65536`` beside a
``/16``, ``--window 1h`` under the same ``-g``, ``--epsilon 2`` beside ``--epsilon 8``) joined the
group, routed or committed under its own definition, and the release mixed two tables.

:class:`GroupDefinition` is that record: public parameters only (no count, no offset, nothing an
arrival moves), encoded as canonical JSON. The first member of a group writes it into the store
(:meth:`panstream.state.stores.DirectoryStore.put_definition`, the state topic's ``#group/``
records): first writer wins, every later member compares its own definition with the stored one
(:meth:`GroupDefinition.differences`) and refuses in one line before it routes, commits or
produces anything (:mod:`panstream.sources.kafka.identity`). :attr:`GroupDefinition.digest`, a
short hash of the encoding, rides on every record of the internal topic (a Kafka header), so a
record written under another definition is refused one by one, never applied.

>>> d = GroupDefinition(group="g", layout="routed", universe="ipv4:10.0.0.0/16",
...                     family="density", epsilon=1.0, calibration="tight", slices=16,
...                     internal_topic="g-cells",
...                     sources=(SourceTopic("logs", 8, "01a2"),))
>>> GroupDefinition.decode(d.encode()) == d
True
>>> e = GroupDefinition.decode(d.encode().replace(b'"epsilon":1.0', b'"epsilon":2.0'))
>>> d.differences(e)[0].field
'epsilon'
>>> len(d.digest)
16
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from panstream.errors import StateError

#: Version of the encoding (:meth:`GroupDefinition.encode`).
VERSION = 1

#: The layouts a group runs (``--layout slices`` is ``routed``; ``--window`` makes ``windows``).
LAYOUTS = ("routed", "partition", "windows")

#: Name of the Kafka record header that carries :attr:`GroupDefinition.digest` on every record of
#: the internal topic.
HEADER = "panstream-group"


@dataclass(frozen=True)
class SourceTopic:
    """A source topic as the group first saw it.

    Attributes:
        name: the topic's name.
        partitions: its partition count when the definition was written (a topic may gain
            partitions; one with fewer was deleted and re-created).
        topic_id: the broker's topic ID (a UUID, new at every creation of a topic of that name;
            Kafka 2.8+ and Tansu give it), or ``None`` where the broker gave none.
    """

    name: str
    partitions: int
    topic_id: str | None = None


@dataclass(frozen=True)
class Window:
    """A windowed group's public schedule (``--window``, ``--lateness``, ``--release-epsilon``,
    ``--from``/``--to``, ``--time-zone``)."""

    size: int
    lateness: int
    release_epsilon: float
    first: int | None = None
    stop: int | None = None
    time_zone: str | None = None


@dataclass(frozen=True)
class Difference:
    """One field in which two definitions differ: ``field``, the stored value, this member's."""

    field: str
    stored: Any
    given: Any

    @property
    def recreated(self) -> bool:
        """Whether this is a source topic's identity (its ID, or fewer partitions), not an
        option: the topic was deleted and re-created since the group was defined."""
        return self.field.startswith(("topic_id:", "partitions:"))

    def note(self) -> str:
        """The warning a member says for a :attr:`recreated` source topic (it does not refuse:
        what the group's offsets then mean is the topology checks' to say)."""
        topic = self.field.partition(":")[2]
        what = "topic ID" if self.field.startswith("topic_id:") else "partition count"
        return (f"warning: source topic {topic}'s {what} ({_show(self.given)}) differs from the "
                f"group definition's ({_show(self.stored)}): it was deleted and re-created since "
                "the group was defined; its tables hold arrivals of the old topic")

    def line(self, store: str) -> str:
        """The one line a member that differs prints (what differs, and the ways out)."""
        kind, _, topic = self.field.partition(":")
        if topic:  # topic_id:NAME or partitions:NAME
            what = f"source topic {topic}'s {'topic ID' if kind == 'topic_id' else 'partitions'}"
            fix = source_fix(topic)
        else:
            what = _WORDS.get(self.field, self.field)
            fix = _FIXES.get(self.field, "start it with the options the group was defined with "
                                         "(or give other options their own -g and state)")
        return (f"this member's {what} ({_show(self.given)}) "
                f"differs from the group definition in {store} ({_show(self.stored)}): {fix}; "
                "nothing was routed, committed or produced")


@dataclass(frozen=True)
class GroupDefinition:
    """What a Kafka group is (public parameters only; the module docstring says why).

    Attributes:
        group: the consumer group id (``-g``); its stages' consumer groups and internal topic
            derive from it.
        layout: ``routed``, ``partition`` or ``windows`` (:data:`LAYOUTS`).
        universe: the universe's spec (a sketch grid's spec names its grid and hash).
        family: ``density``, ``frequency`` or ``sketch``.
        epsilon: the state epsilon asked for (``--epsilon``, or the one ``--total-epsilon``
            gave).
        calibration: the table's calibration (the sketch's ``rr``).
        modulus: the frequency family's counter modulus (``None`` for the others).
        slices: R, the internal topic's partitions (``None`` for the per-partition layout).
        internal_topic: ``GROUP-cells`` / ``GROUP-wcells`` (``None`` for the per-partition layout).
        window: the windowed group's schedule, or ``None``.
        sources: the source topics, sorted by name.
        partitioner: the per-partition layout's keying check (``--partitioner``, issue 39), or
            ``None`` (the routed layouts; a universe whose cells name no key).
    """

    group: str
    layout: str
    universe: str
    family: str
    epsilon: float
    calibration: str
    modulus: int | None = None
    slices: int | None = None
    internal_topic: str | None = None
    window: Window | None = None
    sources: tuple[SourceTopic, ...] = field(default_factory=tuple)
    partitioner: str | None = None

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            msg = f"group layout {self.layout!r} is not one of {', '.join(LAYOUTS)}"
            raise StateError(msg)
        object.__setattr__(self, "sources", tuple(sorted(self.sources, key=lambda s: s.name)))

    # ------------------------------------------------------------------ codec
    def to_dict(self) -> dict[str, Any]:
        """The definition as JSON-ready values (``version`` first)."""
        out: dict[str, Any] = {"version": VERSION}
        out.update(asdict(self))
        out["sources"] = [asdict(s) for s in self.sources]
        return out

    def encode(self) -> bytes:
        """Canonical JSON (sorted keys, no spaces): equal definitions encode to equal bytes."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes | bytearray | str) -> GroupDefinition:
        """The definition :meth:`encode` wrote.

        Raises:
            StateError: not a definition (or one of a newer panstream).
        """
        try:
            d = json.loads(raw)
            if int(d.get("version", 0)) > VERSION:
                msg = (f"the group definition has version {d['version']}, newer than this "
                       f"panstream reads ({VERSION}): upgrade panstream")
                raise StateError(msg)
            win = d.get("window")
            return cls(
                group=str(d["group"]), layout=str(d["layout"]), universe=str(d["universe"]),
                family=str(d["family"]), epsilon=float(d["epsilon"]),
                calibration=str(d["calibration"]),
                modulus=None if d.get("modulus") is None else int(d["modulus"]),
                slices=None if d.get("slices") is None else int(d["slices"]),
                internal_topic=d.get("internal_topic"),
                window=None if win is None else Window(**win),
                sources=tuple(SourceTopic(str(s["name"]), int(s["partitions"]),
                                          s.get("topic_id")) for s in d.get("sources", [])),
                partitioner=d.get("partitioner"))
        except StateError:
            raise
        except (ValueError, KeyError, TypeError) as exc:
            msg = f"the stored group definition is not readable ({exc}): it is corrupt"
            raise StateError(msg) from None

    @property
    def digest(self) -> str:
        """16 hex digits of SHA-256 of :meth:`encode`: the short name of this definition, carried
        by every internal record (header :data:`HEADER`). Public: a hash of public parameters."""
        return hashlib.sha256(self.encode()).hexdigest()[:16]

    # ------------------------------------------------------------------ comparison
    def differences(self, other: GroupDefinition) -> list[Difference]:
        """Where ``other`` (a member's options) departs from this (the stored) definition, most
        telling first: another group, layout, universe, family, parameters, slices, topics.

        A source topic may have gained partitions (Kafka allows adding them); one with fewer
        partitions, or another topic ID, was deleted and re-created: a different topic.

        >>> a = GroupDefinition("g", "routed", "range:10", "density", 1.0, "tight", slices=2,
        ...                     sources=(SourceTopic("t", 4, "x"),))
        >>> b = GroupDefinition("g", "routed", "range:10", "density", 1.0, "tight", slices=2,
        ...                     sources=(SourceTopic("t", 6, "x"),))
        >>> a.differences(b)
        []
        >>> [d.field for d in a.differences(GroupDefinition("g", "windows", "range:12",
        ...      "density", 1.0, "tight", slices=2, sources=(SourceTopic("t", 4, "x"),),
        ...      window=Window(3600, 300, 0.5)))]
        ['layout', 'universe', 'window']
        """
        out: list[Difference] = []
        for f in fields(self):
            if f.name == "sources":
                continue
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if mine != theirs:
                out.append(Difference(f.name, mine, theirs))
        names = [s.name for s in self.sources]
        if names != [s.name for s in other.sources]:
            out.append(Difference("sources", ", ".join(names),
                                  ", ".join(s.name for s in other.sources)))
            return out
        for was, now in zip(self.sources, other.sources, strict=True):
            if was.topic_id and now.topic_id and was.topic_id != now.topic_id:
                out.append(Difference(f"topic_id:{was.name}", was.topic_id, now.topic_id))
            elif now.partitions < was.partitions:
                out.append(Difference(f"partitions:{was.name}", was.partitions, now.partitions))
        return out

    def describe(self) -> str:
        """One line for ``release``, ``inspect`` and the member's start.

        >>> GroupDefinition("g", "routed", "range:10", "density", 1.0, "tight", slices=2,
        ...                 internal_topic="g-cells", sources=(SourceTopic("t", 4),)).describe()
        'group g: routed, range:10, density epsilon 1 (tight), 2 slices in g-cells, from t (4 partitions)'
        """
        fam = f"{self.family} epsilon {self.epsilon:g} ({self.calibration})"
        if self.modulus is not None:
            fam += f" mod {self.modulus}"
        parts = [self.layout, self.universe, fam]
        if self.slices is not None:
            parts.append(f"{self.slices} slices in {self.internal_topic}")
        if self.window is not None:
            w = self.window
            parts.append(f"windows of {w.size} s, lateness {w.lateness} s, release epsilon "
                         f"{w.release_epsilon:g}")
        src = ", ".join(f"{s.name} ({s.partitions} partitions)" for s in self.sources)
        return f"group {self.group}: {', '.join(parts)}, from {src or '-'}"


def stored(store: Any) -> GroupDefinition | None:
    """The definition a store holds (its ``definition()`` bytes decoded), or ``None`` for a store
    written before issue 35 (or a group that never started).

    Raises:
        StateError: the stored definition is corrupt or newer than this panstream.
    """
    raw = store.definition()
    return None if raw is None else GroupDefinition.decode(raw)


def summary(definition: GroupDefinition | None) -> dict[str, Any] | None:
    """What ``release --json`` and ``inspect --json`` say of a store's definition (``None``: a
    store written before issue 35)."""
    if definition is None:
        return None
    return {**definition.to_dict(), "digest": definition.digest}


#: What ``release`` and ``inspect`` say of a store without a definition.
NO_DEFINITION = ("no group definition (a store written before issue 35, or a group that never "
                 "started): the next member of its group writes it from its options")


def definition_line(definition: GroupDefinition | None) -> str:
    """The one line ``release`` and ``inspect`` print about a store's definition."""
    if definition is None:
        return NO_DEFINITION
    return f"{definition.describe()} (definition {definition.digest})"


def _show(value: Any) -> str:
    if isinstance(value, Window):
        return (f"--window {value.size}s --lateness {value.lateness}s --release-epsilon "
                f"{value.release_epsilon:g}")
    if value is None:
        return "none"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


#: How a difference is named in the refusal.
_WORDS = {
    "group": "group (-g)", "layout": "layout", "universe": "universe (-u)",
    "family": "family (--estimator)", "epsilon": "--epsilon", "calibration": "--calibration",
    "modulus": "--modulus", "slices": "--slices", "internal_topic": "internal topic",
    "window": "windows", "sources": "source topics (-t)", "partitioner": "--partitioner",
}

#: The way out of each difference.
_FIXES = {
    "group": "one state directory or state topic holds one group: give this group a --state-dir "
             "or --state-topic of its own (or run it with -g as stored)",
    "layout": "a group keeps one layout for life: run it as stored, or give the other layout its "
              "own -g and its own --state-dir/--state-topic",
    "window": "a group keeps one window schedule for life: run it as stored, or give the other "
              "schedule its own -g and --state-dir",
    "sources": "a group reads the topics it was defined with: run it with the stored -t, or give "
               "the other topics their own -g and state",
}


def source_fix(name: str) -> str:
    """The way out for a source topic that was re-created (another ID, or fewer partitions)."""
    return (f"source topic {name} was deleted and re-created since the group was defined: the "
            "group's committed offsets and tables belong to the old topic; start a new group "
            "(-g and state) for the new topic")


__all__ = ["HEADER", "LAYOUTS", "NO_DEFINITION", "VERSION", "Difference", "GroupDefinition",
           "SourceTopic", "Window", "definition_line", "source_fix", "stored", "summary"]
