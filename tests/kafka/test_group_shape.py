"""The Kafka code's shape (issue 35): one group loop, tasks in it, no subclass chains.

Before issue 35 the three layouts were a three-level chain (``KafkaTail`` <- ``SliceStage`` <-
``WindowSliceStage``), the last overriding most of its parents' steps, some rewritten without
``super()`` and drifted apart. These checks keep the shape that replaced it: no class of
``panstream.sources.kafka`` extends a project class that extends another, none overrides more
than six concrete methods of a project base, and each task kind's tasks meet the one interface.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import panstream.sources.kafka as kafka_pkg
from panstream.sources.kafka.group import GroupLoop
from panstream.sources.kafka.slices import SliceStage, SliceTask
from panstream.sources.kafka.tail import KafkaTail, PartitionTask
from panstream.sources.kafka.task import Task, TaskState
from panstream.sources.kafka.windows import WindowSliceStage, WindowSliceTask


def _classes() -> list[type]:
    out = []
    for info in pkgutil.iter_modules(kafka_pkg.__path__):
        if info.name == "rdkafka":  # confluent-kafka is optional; its classes extend none of ours
            continue
        mod = importlib.import_module(f"panstream.sources.kafka.{info.name}")
        out += [c for _, c in inspect.getmembers(mod, inspect.isclass)
                if c.__module__ == mod.__name__ and not issubclass(c, BaseException)]
    return out  # errors excepted: their family tree (PanstreamError, SourceError, ...) is the API


def _ours(cls: type) -> bool:
    return cls.__module__.startswith("panstream.") and cls.__name__ != "Protocol"


def test_no_class_extends_a_project_class_that_extends_another() -> None:
    for cls in _classes():
        for base in cls.__bases__:
            if _ours(base):
                assert not any(_ours(b) for b in base.__bases__), (cls, base)


def test_no_class_overrides_more_than_six_concrete_methods_of_a_project_base() -> None:
    for cls in _classes():
        for base in (b for b in cls.__bases__ if _ours(b)):
            mine = {n for n, v in vars(cls).items() if inspect.isfunction(v)}
            theirs = {n for n, v in vars(base).items() if inspect.isfunction(v)}
            assert len(mine & theirs) <= 6, (cls, sorted(mine & theirs))


def test_the_old_names_are_the_group_loop_with_a_task_kind() -> None:
    """``KafkaTail``, ``SliceStage`` and ``WindowSliceStage`` keep their names and methods: each
    is the one loop, built with its layout's tasks (which meet the one interface)."""
    for stage in (KafkaTail, SliceStage, WindowSliceStage):
        assert stage.__bases__ == (GroupLoop,)
        for name in ("open", "poll_once", "run", "maintain", "checkpoint", "final_checkpoint",
                     "close", "idle", "commit_clock"):
            assert getattr(stage, name) is getattr(GroupLoop, name)
    for task in (PartitionTask, SliceTask, WindowSliceTask):
        for name in ("restore", "apply", "snapshot", "close"):
            assert callable(getattr(task, name)), (task, name)
        assert set(Task.__annotations__) <= {"shard", "state"}
    assert [s.name for s in TaskState] == ["CREATED", "RESTORING", "RUNNING", "SUSPENDED",
                                           "CLOSED"]
