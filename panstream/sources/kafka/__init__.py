"""Tail Kafka topics into pan-private tables: by default one table for the whole group, cut into
slices routed by cell range; or (``--layout partition``) one table per partition; or
(``--window``) one table per window of the public schedule.

This package is the only part of panstream that imports ``kafka`` (and ``confluent_kafka``). Its
modules, one line each (docs/kafka.md opens with the group's life and which module owns each step):

* :mod:`.config`: consumer settings, ``-C`` overrides, messages for an unreachable broker;
* :mod:`.joins`: the group consumer every stage joins with (kafka-python's join quirks handled);
* :mod:`.topology`: the group's topics: waiting for a source, the internal topic's partition count,
  a topic re-created or deleted under the group (watched, said in one line);
* :mod:`.identity`: the group's definition, settled against the store's at start, and the
  per-record check of the internal topic (:class:`~.identity.RecordGate`);
* :mod:`.decode`: message values to cell indices (``item``, ``lines``; the ``-f`` formats);
* :mod:`.keyed`: the per-partition layout's check that every message sits where its key puts it;
* :mod:`.route`: the routing stage (source topics to the internal topic ``<group>-cells``);
* :mod:`.rdkafka`: the routed layout's consumers on librdkafka (``--source-client librdkafka``;
  the only module importing confluent-kafka, lazily);
* :mod:`.group`: the group loop (:class:`~.group.GroupLoop`): subscribe, rebalance, claims and
  epochs, the one checkpoint clock, commit-or-defer, DeleteRecords, drain, the final checkpoint;
* :mod:`.task`: what the loop holds: the :class:`~.task.Task` interface (restore, apply,
  snapshot, close) and its lifecycle states (:class:`~.task.TaskState`);
* :mod:`.tail`: the per-partition layout's task (a partition shard) and its member
  :class:`~.tail.KafkaTail`;
* :mod:`.watched`: the per-partition member under the topology watch of the routed one;
* :mod:`.slices`: the routed layout's task (a slice of ``<group>-cells``) and its stage
  :class:`~.slices.SliceStage`;
* :mod:`.windows`: ``--window``: the routing stage by window and the window-slice task and stage
  (the window's release itself is :mod:`panstream.windows.release`);
* :mod:`.member`: both routed stages in one process (the default ``panstream kafka``), the drain
  question of a bounded run;
* :mod:`.build`: the member built from its options (:class:`~.build.MemberOptions`) and run;
* :mod:`.supervise`: a librdkafka member in a supervised child process of the command;
* :mod:`.progress`: what the group still owes (source and internal ends against the commits);
* :mod:`.watch`: a step of any member thread that lasts a minute, said once with its code line;
* :mod:`.metrics`: Prometheus figures (counts only as noisy window releases);
* :mod:`.store`: the state topic (a :class:`~panstream.state.stores.RecordLog` on Kafka).

The package wires consumer groups to the pure parts: :mod:`panstream.state.checkpoint` (the
commit order and its clock), :mod:`panstream.state.fence` (claims), :mod:`panstream.state.slices`
(the slice layout and the routed encoding), :mod:`panstream.state.stores` (where tables live) and
the estimator.

Life of a table-keeping member (:class:`~.group.GroupLoop`, whose docstring has the details):

* **Assign.** The rebalance listener pauses each newly assigned partition; the main loop then
  claims the partition's state in the store with this member's generation (the fence against a
  zombie's late writes: :mod:`panstream.state.fence`), restores the partition's task (its
  snapshot, or fresh D0 tables) and resumes it. The consumer reads on from the committed offset.
* **Process.** ``poll()`` returns batches per partition; each batch goes to its task (decoded into
  cell indices, applied with fresh D1 draws, the working buffers overwritten with zeros).
  Malformed messages are skipped. Their counts, like every count of messages and items, live only
  in the current 1-s telemetry window and are published with geometric noise (:class:`Metrics`,
  :mod:`panstream.telemetry`); nothing exact about the items is kept longer.
* **Checkpoint** on the fixed clock (``start + k * checkpoint_interval``): every task's snapshot
  durable (whether or not its partition received anything: the writes must not say who arrived),
  then commit offsets (last processed + 1). Auto-commit is always off. The routing stage commits
  its source offsets on the same grid.
* **Revoke.** Before a rebalance takes partitions away, the listener makes their tasks durable and
  commits their offsets, then wipes them; the next owner restores them. Partitions *lost* (this
  member was evicted) are wiped without saving: another member may already own them.
* **Stop** (SIGTERM/SIGINT, or ``idle_timeout`` seconds without messages): final checkpoint and
  commit, leave the group (``close()``), return.

Threading: kafka-python 3 runs the group protocol on its own IO thread, and rebalance listener
callbacks run there, but only while the main thread is blocked inside ``poll()`` or ``close()``; the
tasks are therefore never touched by two threads at once. Blocking calls that need the IO loop
(``commit()``) cannot be made from the listener, so it commits with ``commit_async`` and awaits the
returned future (the listener is an ``AsyncConsumerRebalanceListener``).
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
from panstream.sources.kafka.group import GroupLoop
from panstream.sources.kafka.member import Member
from panstream.sources.kafka.metrics import COUNT_FIELDS, KAFKA_TELEMETRY_SENSITIVITY, Metrics
from panstream.sources.kafka.route import RouteConfig, RouteStage, internal_topic
from panstream.sources.kafka.slices import SliceStage
from panstream.sources.kafka.store import KafkaRecordLog, state_client, topic_store
from panstream.sources.kafka.tail import KafkaTail, RunSummary, TailConfig
from panstream.sources.kafka.task import Task, TaskState

__all__ = [
    "CONSUMER_DEFAULTS", "COUNT_FIELDS", "KAFKA_TELEMETRY_SENSITIVITY", "VALUE_FORMATS", "Decoded",
    "Decoder", "GroupLoop", "KafkaRecordLog", "KafkaTail", "Member", "Metrics", "RouteConfig", "RouteStage",
    "RunSummary", "SliceStage", "TailConfig", "Task", "TaskState", "bootstrap_seconds", "client_config",
    "connecting_notice", "consumer_config", "internal_config", "internal_topic", "parse_overrides",
    "source_config", "state_client", "topic_store", "unreachable_message",
]
