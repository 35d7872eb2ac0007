"""Tail Kafka topics with kafka-python into pan-private tables: by default one table for the whole
group, cut into slices routed by cell range; or (``--layout partition``) one table per partition.

This package is the only part of panstream that imports ``kafka`` (and ``confluent_kafka``). Its
files follow the stages:

* :mod:`.config`: consumer settings, ``-C`` overrides, messages for an unreachable broker;
* :mod:`.decode`: message values to cell indices (``item``, ``lines``; the ``-f`` formats);
* :mod:`.route`: the routing stage (source topics to the internal topic ``<group>-cells``);
* :mod:`.rdkafka`: the routing stage's source consumer on librdkafka (``--source-client
  librdkafka``; the only module importing confluent-kafka, lazily);
* :mod:`.slices`: the slice stage (``<group>-cells`` into the slices of one table);
* :mod:`.member`: both stages in one process (the default ``panstream kafka``);
* :mod:`.build`: the member built from its options (:class:`~.build.MemberOptions`) and run;
  :mod:`.supervise`: a librdkafka member in a child process of the command;
* :mod:`.topology`: the group's topics watched (:mod:`.watched`: the per-partition layout under
  the watch);
* :mod:`.tail`: a consumer-group member with one table per partition, and its rebalance listener
  (the per-partition layout, and the base of the slice stage);
* :mod:`.metrics`: Prometheus figures (counts only as noisy window releases);
* :mod:`.store`: the state topic (a :class:`~panstream.state.stores.RecordLog` on Kafka).

The package wires ``KafkaConsumer``s in consumer groups to the pure parts:
:mod:`panstream.state.checkpoint` (the commit order), :mod:`panstream.state.slices` (the slice
layout and the routed encoding), :mod:`panstream.state.stores` (where tables live) and the
estimator.

Life of a table-keeping consumer (:class:`KafkaTail`; the slice stage is one, whose partitions are
the internal topic's and whose tables are slices):

* **Assign.** The rebalance listener pauses each newly assigned partition; the main loop then
  claims the partition's state in the store with this member's generation (the fence against a
  zombie's late writes: :mod:`panstream.state.fence`), restores that partition's shard (or starts
  a fresh D0 table) and resumes it. The consumer reads on from the group's committed offset.
* **Process.** ``poll()`` returns batches per partition; each batch is decoded into cell indices
  (``item``: one item per message; ``lines``: newline-separated items per message), applied to the
  partition's shard with fresh D1 draws, and the working buffers are overwritten with zeros.
  Malformed messages (lines) are skipped. Their counts, like every count of messages and items,
  live only in the current 1-s telemetry window and are published with geometric noise
  (:class:`Metrics`, :mod:`panstream.telemetry`); nothing exact about the items is kept longer.
* **Checkpoint** every ``checkpoint_interval`` seconds: every owned shard's snapshot durable
  (whether or not its partition received anything: the writes must not say who arrived), then
  commit offsets (last processed + 1). Auto-commit is always off.
* **Revoke.** Before a rebalance takes partitions away, the listener checkpoints their shards and
  commits their offsets, then wipes them; the next owner restores them. Partitions *lost* (this
  member was evicted) are wiped without saving: another member may already own them.
* **Stop** (SIGTERM/SIGINT, or ``idle_timeout`` seconds without messages): final checkpoint and
  commit, leave the group (``close()``), return.

Threading: kafka-python 3 runs the group protocol on its own IO thread, and rebalance listener
callbacks run there, but only while the main thread is blocked inside ``poll()`` or ``close()``; the
shards are therefore never touched by two threads at once. Blocking calls that need the IO loop
(``commit()``) cannot be made from the listener, so it commits with ``commit_async`` and awaits the
returned future (:class:`_Rebalance` is an ``AsyncConsumerRebalanceListener``).
"""

from panstream.sources.kafka.config import (
    CONSUMER_DEFAULTS,
    bootstrap_seconds,
    client_config,
    connecting_notice,
    consumer_config,
    internal_config,
    parse_overrides,
    source_config,
    unreachable_message,
)
from panstream.sources.kafka.decode import VALUE_FORMATS, Decoded, Decoder
from panstream.sources.kafka.member import Member
from panstream.sources.kafka.metrics import COUNT_FIELDS, KAFKA_TELEMETRY_SENSITIVITY, Metrics
from panstream.sources.kafka.route import RouteConfig, RouteStage, internal_topic
from panstream.sources.kafka.slices import SliceStage
from panstream.sources.kafka.store import KafkaRecordLog, state_client, topic_store
from panstream.sources.kafka.tail import KafkaTail, RunSummary, TailConfig

__all__ = [
    "CONSUMER_DEFAULTS", "COUNT_FIELDS", "KAFKA_TELEMETRY_SENSITIVITY", "VALUE_FORMATS", "Decoded",
    "Decoder", "KafkaRecordLog", "KafkaTail", "Member", "Metrics", "RouteConfig", "RouteStage",
    "RunSummary", "SliceStage", "TailConfig", "bootstrap_seconds", "client_config",
    "connecting_notice", "consumer_config", "internal_config", "internal_topic", "parse_overrides",
    "source_config", "state_client", "topic_store", "unreachable_message",
]
