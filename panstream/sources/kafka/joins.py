"""Group consumers that keep a finished join: kafka-python's lost-join start-up delay, cured here.

**The fault.** kafka-python (3.0.x, ``kafka/coordinator/base.py``, ``join_group_async``) runs a
group's JoinGroup/SyncGroup round as a task on its IO thread. When the ``poll()`` that started it
returns before the round ends (its timer ran out: 200 ms in panstream's loops), the task is kept
for the next poll to await. But when the round *finishes* in the gap before that next poll, the
next poll finds the task done and starts a new JoinGroup instead of taking the finished round's
assignment. A broker holds every new join for its initial rebalance delay (3 s on Kafka and on
Tansu), so such a start waits 3 s more; it hit about one join in 17 on a quiet machine and more
under load (docs/kafka.md, Start-up: 9.09 s instead of 4.0-4.5 s).

**The cure.** :func:`keep_finished_joins` wraps one consumer's coordinator: before each join
attempt, a round that is already finished is handed over as a *pending* future that completes, on
the IO loop, with the finished round's outcome (its assignment, or its error). The library then
awaits that future as it awaits any round in flight, and goes on exactly as if the round had ended
during its poll. Nothing of the library is copied or replaced; the wrapper only changes which
future the library awaits, and only for a round that already finished.

It is applied by feature detection (the coordinator's ``_join_task``, ``_manager.call_soon`` and
``join_group_async``), not by version: a kafka-python that takes the finished round itself is
unaffected (the hand-over yields the same outcome), and one without those internals is left as it
is (:func:`keep_finished_joins` returns ``False``; the start is then only slower, never wrong).
``tests/kafka/test_joins.py`` pins the fault and the cure on the test broker.

:func:`commit_on_revoke` is the one commit of revoked partitions' positions that the group loop and
the routing stage share (a failure there only means the next owner replays from the last commit).
"""

from __future__ import annotations

import logging
from typing import Any

from kafka import KafkaConsumer

from panstream.sources.kafka.topology import no_auto_create

log = logging.getLogger("panstream.kafka")


def keep_finished_joins(consumer: Any) -> bool:
    """Make ``consumer``'s group coordinator take a join round that finished between two polls
    (module docstring). Whether the consumer's internals allowed it."""
    coordinator = getattr(consumer, "_coordinator", None)
    manager: Any = getattr(coordinator, "_manager", None)
    original = getattr(coordinator, "join_group_async", None)
    if (coordinator is None or original is None or not hasattr(coordinator, "_join_task")
            or not callable(getattr(manager, "call_soon", None))):
        return False
    from kafka.future import Future

    async def join_group_async(*args: Any, **kwargs: Any) -> Any:
        finished = coordinator._join_task
        if finished is not None and getattr(finished, "is_done", False):
            handover = Future()

            def complete() -> None:
                if finished.exception is not None:
                    handover.failure(finished.exception)
                else:
                    handover.success(finished.value)

            coordinator._join_task = handover
            manager.call_soon(complete)  # runs on the IO loop once the library awaits handover
            log.debug("a join round finished between two polls: its outcome is kept")
        return await original(*args, **kwargs)

    coordinator.join_group_async = join_group_async
    return True


def group_consumer(**settings: Any) -> KafkaConsumer:
    """A kafka-python ``KafkaConsumer`` with :func:`keep_finished_joins` applied (panstream's
    default consumer factory for groups)."""
    consumer = no_auto_create(KafkaConsumer(**settings))
    if settings.get("group_id") is not None:
        keep_finished_joins(consumer)
    return consumer


async def commit_on_revoke(consumer: Any, offsets: Any, what: str, then: str) -> None:
    """Commit the positions of partitions being revoked, if any. A failure is only a warning: the
    next owner starts from the previous commit (``then`` says what it does again), which is harmless.
    """
    if not offsets:
        return
    try:
        await consumer.commit_async(offsets)
    except Exception as exc:  # noqa: BLE001 - a failed commit only means a replay
        log.warning("%s on revoke failed (%s): the next owner %s, which is harmless", what, exc, then)
