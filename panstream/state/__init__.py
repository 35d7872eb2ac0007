"""State: snapshots, files, stores and the commit order, around the estimators' tables.

:mod:`panstream.state.format`
    The binary snapshot codec (bytes in, bytes out).
:mod:`panstream.state.persist`
    An estimator to snapshot bytes and state files, and back (``save``, ``load``, ``restore``,
    ``release_file``): the core knows no file system (issue 36).
:mod:`panstream.state.files`
    Atomic state files, the lock, the ledger history that refuses a rolled-back file.
:mod:`panstream.state.stores`
    Where a group's tables live: a directory store and a topic store behind one protocol
    (``Store``), the shard codec, and beside them the group's merge and its release against the
    one ledger (a package: its docstring lists its modules).
:mod:`panstream.state.fence`
    The fence against a zombie member's late writes.
:mod:`panstream.state.checkpoint`
    The one owner of the commit order: snapshots durable, then offsets.
:mod:`panstream.state.slices`
    The slice layout of a group's one table and its routed encoding.
:mod:`panstream.state.merge`
    The group merge of shard tables (pure).
:mod:`panstream.state.group_definition`
    What a Kafka group is, written once where every member and ``release`` read it.
:mod:`panstream.state.keying`
    Where a keyed Kafka producer puts an item, and the record a verified shard carries.
:mod:`panstream.state.sketch_params`
    The public parameters beside an exported sketch.
"""
