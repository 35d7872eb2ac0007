"""The per-partition layout's check that the topic is keyed by the item (issue 39).

``panstream kafka --layout partition`` keeps one full table per source partition, and ``release
--merge partitioned`` (``auto``) takes cell ``c``'s bit from the partition the producers'
partitioner gives the key ``text(c)`` (:mod:`panstream.state.keying`). Before, nothing checked
that: a log shipper's unkeyed, round-robin topic released 43 % low with exit 0. Now the member
checks, for every message it applies, that it sits in the partition the configured partitioner
(``--partitioner``: murmur2 or crc32) gives its item's canonical text; that is what a producer
keying each message by its item does, and exactly what the merge needs. The check runs on a whole
poll before any of it is applied: a message that fails stops the member with one line (its topic,
partition and offset, and what was expected; never the item or the key), so neither it nor
anything after it is applied or committed. Shards the member made fresh carry the public record
(:class:`~panstream.state.keying.Keying`: the partitioner and the topic's partition count); a
shard restored without it (written before issue 39) stays without it, since its earlier
arrivals were never checked.

``--value-format lines`` holds several items per message, which one key cannot name: refused at
start (:func:`require_keyable`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from panstream.errors import ConfigurationError, SourceError
from panstream.state.keying import KEYED_KINDS, PARTITIONERS, Keying, partitions_of_cells
from panstream.universe import Universe

#: How the two partitioners are known to operators (the line of a failed check names them).
PRODUCERS = {
    "murmur2": "Kafka's default partitioner (Java client, kafka-python; librdkafka "
               "partitioner=murmur2_random)",
    "crc32": "librdkafka's default partitioner (consistent_random: confluent-kafka, kcat and "
             "librdkafka-based shippers)",
}

#: librdkafka's name of each partitioner (its ``partitioner`` setting), for the producers' side.
LIBRDKAFKA = {"murmur2": "murmur2_random", "crc32": "consistent_random"}

#: The way out of a topic the per-partition layout cannot count.
ROUTED_WAY = ("count it with the routed layout (the default: drop --layout partition), which is "
              "right for any keying, on a new --state-dir")


def require_keyable(value_format: str) -> None:
    """Refuse what the per-partition layout can never verify.

    Raises:
        ConfigurationError: ``--value-format lines`` (several items a message: no key names them).
    """
    if value_format == "lines":
        msg = ("--layout partition is right only for topics keyed by the item, and --value-format "
               "lines holds several items per message, which one message key cannot name: "
               f"{ROUTED_WAY}")
        raise ConfigurationError(msg)


def verifiable(universe: Universe) -> bool:
    """Whether the cells of ``universe`` determine the message key (ipv4, range): the universes
    of the partition-aware merge, and of this check."""
    return universe.kind in KEYED_KINDS


class KeyCheck:
    """Checks the messages of a poll against the configured partitioner (module docstring).

    Args:
        universe: the member's universe (``ipv4`` or ``range``).
        partitioner: one of :data:`~panstream.state.keying.PARTITIONERS`.

    Raises:
        ConfigurationError: an unknown partitioner, or a universe whose cells do not name a key.
    """

    def __init__(self, universe: Universe, partitioner: str) -> None:
        if partitioner not in PARTITIONERS:
            msg = f"unknown partitioner {partitioner!r}: use {' or '.join(PARTITIONERS)}"
            raise ConfigurationError(msg)
        if not verifiable(universe):
            msg = (f"the keying of {universe.kind} universes cannot be checked (many items share "
                   "a cell, so a cell names no key)")
            raise ConfigurationError(msg)
        self.universe = universe
        self.partitioner = partitioner

    def keying(self, partitions: int) -> Keying:
        """The record of a shard verified against a topic of ``partitions`` partitions."""
        return Keying(self.partitioner, partitions)

    def check(self, partition: int, partitions: int, cells: np.ndarray, recs: Sequence[Any],
              decode: Callable[[list[bytes | None]], Any], topic: str) -> None:
        """Every cell applied from ``recs`` (one poll of one partition; ``cells`` as decoded)
        sits in the partition the partitioner gives its text.

        Raises:
            SourceError: one line naming the first message that does not (found by decoding the
                messages one at a time; ``decode`` is the member's decoder).
        """
        if not cells.size:
            return
        owner = partitions_of_cells(self.universe, partitions, self.partitioner, cells)
        wrong = bool((owner != partition).any())
        owner.fill(0)
        if wrong:
            raise SourceError(self._fault(partition, partitions, recs, decode, topic))

    def _fault(self, partition: int, partitions: int, recs: Sequence[Any],
               decode: Callable[[list[bytes | None]], Any], topic: str) -> str:
        """The one line for the first message of ``recs`` whose item sits elsewhere."""
        for r in recs:
            d = decode([r.value])
            try:
                if not d.indices.size:
                    continue
                cell = int(d.indices[0])
            finally:
                d.indices.fill(0)
            if int(partitions_of_cells(self.universe, partitions, self.partitioner,
                                       np.array([cell]))[0]) == partition:
                continue
            return self._line(topic, partition, r.offset, partitions, r.key, cell)
        return (f"{topic} partition {partition}: a message sits in another partition than "
                f"{self.partitioner}(its item) % {partitions}; {ROUTED_WAY}")

    def _line(self, topic: str, partition: int, offset: int, partitions: int,
              key: bytes | None, cell: int) -> str:
        text = self.universe.item_of(cell).encode()
        if key is None or not key:
            why = ("has no key (an unkeyed topic, as log shippers write: an item's messages reach "
                   "every partition)")
        elif bytes(key) != text:
            why = "is keyed by something other than its item's text"
        else:
            other = next(p for p in PARTITIONERS if p != self.partitioner)
            placed = int(partitions_of_cells(self.universe, partitions, other,
                                             np.array([cell]))[0])
            why = "is keyed by its item but placed by another partitioner"
            if placed == partition:
                why += (f" (where {PRODUCERS[other]} puts it: if the producers use that, give "
                        f"--partitioner {other} on a new --state-dir and group, or set "
                        f"partitioner={LIBRDKAFKA[self.partitioner]} on librdkafka producers)")
        return (f"{topic} partition {partition} offset {offset}: --layout partition needs every "
                f"message keyed by its item's text and placed by {PRODUCERS[self.partitioner]}, "
                f"in partition {self.partitioner}(item) % {partitions}, but this message {why}; "
                f"the member stopped before applying or committing it: {ROUTED_WAY}")
