"""Shard state stores: where the members of a group keep their tables, its ledger and definition.

Two stores behind one protocol, both keeping only the *newest* snapshot of each shard or slice
(privacy invariant 5), and the group's merge and release beside them:

:mod:`panstream.state.stores.protocol`
    :class:`Store`, the methods every store has (snapshots, claims, the ledger's log, the
    group's definition), and what both stores share, written once (the ledger's JSON face,
    :func:`parse_ledger`, the order of keys).
:mod:`panstream.state.stores.codec`
    A shard's snapshot: :func:`encode_shard` and :func:`decode_shard` (the table and public
    parameters; no ledger, offset, count or timestamp of arrivals).
:mod:`panstream.state.stores.directory`
    :class:`DirectoryStore` (default): one file per shard, ``<topic>@<partition>.shard``,
    replaced atomically, beside the ledger's log (:data:`LEDGER_FILE`) and the definition
    (:data:`DEFINITION_FILE`). Members on several hosts share it through a shared volume.
:mod:`panstream.state.stores.topic`
    :class:`TopicStore`: a compacted Kafka topic (snapshots chunked below the broker's message
    size limit), through the tiny :class:`RecordLog` protocol whose Kafka implementation lives in
    :mod:`panstream.sources.kafka`, the only package that imports kafka.
:mod:`panstream.state.stores.group`
    A group's store as one table: :func:`merge_store` (:class:`GroupState`),
    :func:`store_layout` (``panstream inspect``), :func:`rotate_slice_store`.
:mod:`panstream.state.stores.release`
    The group's one ledger and its release: :func:`ensure_ledger`, :func:`group_ledger`,
    :func:`release_store`, :func:`release_state_dir`, :func:`ledger_summary`.

Every name stays importable from ``panstream.state.stores`` as before the split (issue 36).

Example:
    >>> import tempfile
    >>> from panstream.estimators.density import DensityEstimator
    >>> store = DirectoryStore(tempfile.mkdtemp())
    >>> est = DensityEstimator("range:1024", epsilon=1.0)
    >>> store.save("events/0", encode_shard(est))
    >>> store.keys()
    ['events/0']
    >>> back = decode_shard(store.load("events/0"), "range:1024", 1.0, "rr")
    >>> bool((back.bits() == est.bits()).all())
    True
"""

from panstream.state.slices import encode_slice
from panstream.state.stores.codec import decode_shard, encode_shard
from panstream.state.stores.directory import (
    DEFINITION_FILE,
    FENCE_LOCK_WAIT,
    FENCE_SUFFIX,
    LEDGER_FILE,
    LEDGER_LOCK_WAIT,
    LEGACY_LEDGER_FILE,
    DirectoryStore,
)
from panstream.state.stores.group import (
    MERGES,
    GroupState,
    merge_slice_store,
    merge_store,
    rotate_slice_store,
    store_layout,
)
from panstream.state.stores.protocol import LedgerJson, Store, key_order, parse_ledger
from panstream.state.stores.release import (
    ensure_ledger,
    group_ledger,
    ledger_summary,
    release_state_dir,
    release_store,
)
from panstream.state.stores.topic import (
    DEFAULT_CHUNK_BYTES,
    DEFINITION_PREFIX,
    INITIAL_LEDGER_KEY,
    LEDGER_KEY,
    LEDGER_RECORD_PREFIX,
    RecordLog,
    TopicStore,
    split_stem,
)

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "DEFINITION_FILE",
    "DEFINITION_PREFIX",
    "FENCE_LOCK_WAIT",
    "FENCE_SUFFIX",
    "INITIAL_LEDGER_KEY",
    "LEDGER_FILE",
    "LEDGER_KEY",
    "LEDGER_LOCK_WAIT",
    "LEDGER_RECORD_PREFIX",
    "LEGACY_LEDGER_FILE",
    "MERGES",
    "DirectoryStore",
    "GroupState",
    "LedgerJson",
    "RecordLog",
    "Store",
    "TopicStore",
    "decode_shard",
    "encode_shard",
    "encode_slice",
    "ensure_ledger",
    "group_ledger",
    "key_order",
    "ledger_summary",
    "merge_slice_store",
    "merge_store",
    "parse_ledger",
    "release_state_dir",
    "release_store",
    "rotate_slice_store",
    "split_stem",
    "store_layout",
]
