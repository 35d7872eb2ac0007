"""The member ``panstream kafka`` runs, built from its options and run (issue 35: the topology is
built here, not in the CLI).

:class:`MemberOptions` holds every option of a member once the CLI has checked them (public
parameters and connection settings, nothing read off the data); :func:`run_member` builds the
member for its layout and runs it until stopped:

* **routed** (the default): a :class:`~.route.RouteStage` and a :class:`~.slices.SliceStage` in
  one :class:`~.member.Member`, routed through ``GROUP-cells``;
* **windows** (``--window``): a :class:`~.windows.WindowRouteStage` and a
  :class:`~.windows.WindowSliceStage` through ``GROUP-wcells``;
* **partition** (``--layout partition``): a :class:`~.tail.KafkaTail`, watched by
  :class:`~.watched.WatchedTail` (the same topology watch the routed member has, :mod:`.topology`).

In every layout the group's definition is settled first (:mod:`.identity`: a member whose options
differ stops there, before anything is written), then the release ledger is opened, then the
member runs. A routed member on librdkafka runs in a supervised child process
(:mod:`.supervise`): librdkafka 2.16.0 crashes the process when a topic it fetches is deleted,
and the supervisor turns that death into one line and exit 1.

Everything said on the way goes through ``notice`` (the CLI prints it on stderr after
``panstream: ``, except a line that names its speaker already: ``panstream kafka: ...``); errors
are panstream errors (one line and an exit code in the CLI).
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from panstream.errors import ConfigurationError
from panstream.release.telemetry import TelemetryPolicy
from panstream.state.slices import DEFAULT_SLICES, SliceLayout, mib, slice_family
from panstream.universe import Universe

#: A routed table at least this large gets a note about the 6 s default session at start.
LARGE_TABLE_BYTES = 256 << 20

Notice = Callable[[str], None]

#: glibc's ``mallopt`` parameters (``malloc.h``) that :func:`steady_heap` sets.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8
#: Freed heap a routed member keeps mapped at most (bytes): above one poll's source values, which
#: librdkafka's prefetch queue bounds (``queued.max.messages.kbytes``, 64 MiB).
HEAP_KEPT = 128 << 20
#: Allocations at least this large are mapped of their own (glibc's largest automatic value).
HEAP_MAP_FROM = 32 << 20


def steady_heap() -> bool:
    """Keep a routed member's heap mapped from poll to poll (glibc only; issue 38). Whether set.

    Each poll of the routing stage receives its source values as fresh ``bytes`` (confluent-kafka
    and kafka-python copy every value; 50 MB a poll in ``bench/bench_kafka_group.py``), on a
    thread of its own, and frees them after the parse. glibc gives a thread its own arena in
    64 MiB heaps and unmaps a heap, or trims the heap's top, as soon as it is free, so every poll
    page-faulted its values in again: 10-17 page faults per 1,000 lines on the routing thread, and
    ``consume()`` cost 40-50 ns a line of the member's 200-250. One arena, a trim threshold above a
    poll and a fixed mapping threshold keep those pages: ``consume()`` 11 ns a line, 3-5 faults
    per 1,000 lines (docs/kafka.md, issue 38). Set before the process starts any thread (the
    supervisor's child inherits it): a thread that allocated before has an arena of its own, which
    a later thread may be given. Freed memory is never wiped by the allocator either way
    (docs/threat-model.md, *A memory read*).
    """
    import ctypes
    import platform

    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # pragma: no cover - glibc always has it
        return False
    return all([mallopt(_M_ARENA_MAX, 1), mallopt(_M_MMAP_THRESHOLD, HEAP_MAP_FROM),
                mallopt(_M_TRIM_THRESHOLD, HEAP_KEPT)])


@dataclass(frozen=True)
class WindowOptions:
    """``--window`` and the options that go with it (durations in seconds)."""

    window: int
    release_epsilon: float
    lateness: int = 300
    series: str | None = None
    series_topic: str | None = None
    horizon: int | None = None
    range_from: int | None = None
    range_to: int | None = None
    time_zone: Any = None


@dataclass(frozen=True)
class MemberOptions:
    """Every option of a ``panstream kafka`` member, checked (``panstream kafka --help``;
    docs/kafka.md, Options).

    ``partitioner`` is the keying the per-partition layout checks (``None``: none checked);
    ``budget_asked`` names the option that asked for a ledger budget (``--budget`` or
    ``--total-epsilon``; ``None``: the default), said if the ledger exists already.
    """

    bootstrap: str
    topics: tuple[str, ...]
    group: str
    universe: Universe
    epsilon: float
    calibration: str
    estimator: str = "density"
    modulus: int = 0
    budget: float = 1.0
    budget_asked: str | None = None
    state_dir: str | None = None
    state_topic: str | None = None
    state_chunk_bytes: int = 900_000
    value_format: str = "item"
    fmt: str = "auto"
    keep_going: bool = False
    layout: str = "slices"
    partitioner: str | None = None
    source_client: str = "librdkafka"
    slice_count: int | None = None
    cells_retention: float = 0.0
    checkpoint_interval: float = 5.0
    idle_timeout: float | None = None
    drain_timeout: float | None = None
    overrides: tuple[str, ...] = ()
    security: Mapping[str, Any] = field(default_factory=dict)
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    telemetry: TelemetryPolicy | None = None
    window: WindowOptions | None = None

    @property
    def kind(self) -> str:
        """The layout as the group definition names it: ``routed``, ``partition`` or ``windows``."""
        return ("partition" if self.layout == "partition"
                else "windows" if self.window is not None else "routed")

    @property
    def slices(self) -> int:
        """The slice count: ``--slices``, or 16 (|X| if smaller)."""
        if self.slice_count is not None:
            return self.slice_count
        return min(DEFAULT_SLICES, self.universe.size // SliceLayout.unit_of(self.universe))

    @property
    def where(self) -> str:
        """Where the state lives, in words (``directory DIR`` or ``topic T``)."""
        return (f"directory {self.state_dir}" if self.state_dir is not None
                else f"topic {self.state_topic}")


@dataclass
class MemberRun:
    """What a member's run leaves for the summary the CLI prints.

    ``exit_code`` is set only in a supervisor whose member ran in a child process (the child
    printed everything itself; the supervisor exits with this code and prints nothing more).
    """

    summary: Any = None
    runner: Any = None
    exit_code: int | None = None

    @property
    def internal_deletes(self) -> Any:
        return getattr(getattr(self.runner, "slices", None), "deletes", None)


def run_member(opts: MemberOptions, stop: threading.Event, notice: Notice,
               on_release: Callable[[dict[str, Any]], None] | None = None) -> MemberRun:
    """Build the member ``opts`` describe and run it until ``stop`` is set (or its bounded run
    ends): connect, settle the group's definition, open the ledger, run.

    Args:
        stop: set by the caller's signal handlers (SIGTERM/SIGINT).
        notice: where one-line notices go (stderr).
        on_release: with ``--window``, called with each released window's record.

    Returns:
        The run's :class:`MemberRun` (in a supervisor: only its ``exit_code``).

    Raises:
        PanstreamError: an option the broker or the store refuses, a topology change, a failed
            commit or save (one line each, as the CLI prints them).
    """
    from panstream.sources import kafka as src
    from panstream.sources.kafka.supervise import supervise, supervised

    if opts.kind != "routed" and opts.source_client != "kafka-python":
        msg = (f"--source-client {opts.source_client} is for the routed layout without --window; "
               "use --source-client kafka-python here")
        raise ConfigurationError(msg)
    cfg = src.source_config(opts.bootstrap, opts.group, src.parse_overrides(opts.overrides),
                            dict(opts.security))
    # Say at once what we are waiting for: an unreachable broker is otherwise a silent wait.
    notice(src.connecting_notice(cfg))
    watcher = False
    if opts.kind == "routed":  # before any thread exists, the supervisor's too (issue 38)
        steady_heap()
    if opts.kind == "routed" and opts.source_client == "librdkafka":
        code = supervise()  # before any thread or client exists: the member runs in a child
        if code is not None:
            return MemberRun(exit_code=code)
        watcher = not supervised()  # no child (stdio not files): the crash watcher says it
    store = _store(opts, cfg)
    metrics = src.Metrics(opts.metrics_port, opts.metrics_host, opts.telemetry)
    try:
        tail_cfg = src.TailConfig(cfg, list(opts.topics), opts.universe, opts.epsilon,
                                  opts.calibration, store, opts.value_format,
                                  opts.checkpoint_interval, opts.idle_timeout,
                                  estimator=opts.estimator, modulus=opts.modulus, fmt=opts.fmt,
                                  partitioner=opts.partitioner)
        runner: Any
        if opts.kind == "partition":
            runner = partition_member(tail_cfg, metrics, notice)
        elif opts.window is not None:
            assert on_release is not None
            runner = windowed_member(opts, tail_cfg, metrics, notice, on_release)
        else:
            runner = routed_member(opts, tail_cfg, metrics, notice, crash_watcher=watcher)
        # The group's definition, once every option is checked and before anything is written:
        # a member that differs stops here (docs/kafka.md, "The group's identity"). A signal
        # meanwhile stops the run that follows at once, as one during the run does.
        from panstream.sources.kafka.identity import stamp
        from panstream.state.stores import ensure_ledger

        definition = settle_definition(opts, store, src.client_config(cfg), notice)
        if opts.kind != "partition":
            stamp(runner, definition.digest)
        # the group's release ledger lives beside the shards (a windowed group: one per window)
        if opts.window is None and not ensure_ledger(store, opts.budget) and opts.budget_asked:
            notice(f"the group's release ledger already exists: {opts.budget_asked} does not "
                   "change its budget (release prints the budget left)")
        return MemberRun(runner.run(stop), runner)
    finally:
        metrics.close()


def _store(opts: MemberOptions, cfg: Mapping[str, Any]) -> Any:
    """The group's store: a state directory or a state topic (exactly one is given)."""
    from panstream.sources import kafka as src
    from panstream.state.stores import DirectoryStore

    if (opts.state_dir is None) == (opts.state_topic is None):
        msg = "give exactly one of --state-dir DIR or --state-topic TOPIC (where shards are kept)"
        raise ConfigurationError(msg)
    if opts.state_dir is not None:
        return DirectoryStore(opts.state_dir)
    return src.topic_store(opts.state_topic, src.client_config(cfg), opts.state_chunk_bytes)


def partition_member(tail_cfg: Any, metrics: Any, notice: Notice) -> Any:
    """The per-partition layout's member (:class:`~.tail.KafkaTail`), with the topology watch of
    the routed member (:class:`~.watched.WatchedTail`)."""
    from panstream.sources.kafka.tail import KafkaTail
    from panstream.sources.kafka.watched import WatchedTail

    watched = WatchedTail(tail_cfg, notice)
    tail = KafkaTail(tail_cfg, metrics, consumer_factory=watched.consumer_factory)
    tail.notice = notice
    watched.tail = tail
    return watched


def _internal_topic_check(topic: str, topics: list[str]) -> None:
    if topic in topics:
        msg = f"-t {topic} is the group's own internal topic: tail the source topics instead"
        raise ConfigurationError(msg)


def routed_member(opts: MemberOptions, tail_cfg: Any, metrics: Any, notice: Notice,
                  crash_watcher: bool = False) -> Any:
    """The routed layout's member (routing and slice stages); says what it will hold.
    ``opts.source_client`` is the client of both stages' consumers (the source topics, the
    internal topic): ``librdkafka`` (:mod:`panstream.sources.kafka.rdkafka`) or ``kafka-python``.
    ``crash_watcher``: start :func:`~.rdkafka.say_native_crash` (a librdkafka member not run in a
    supervised child)."""
    from panstream.sources import kafka as src
    from panstream.sources.kafka.joins import group_consumer
    from panstream.sources.kafka.member import Member
    from panstream.sources.kafka.route import RouteConfig, RouteStage, internal_topic
    from panstream.sources.kafka.slices import SliceStage
    from panstream.sources.kafka.topology import TopologyWatch
    from panstream.sources.kafka.watched import LookBeforeCommit, admin_of

    c = tail_cfg
    lay = SliceLayout(c.universe, opts.slices)
    topic = internal_topic(opts.group)
    _internal_topic_check(topic, c.topics)
    parsed = src.parse_overrides(opts.overrides)
    slice_consumer = src.internal_config(",".join(c.consumer["bootstrap_servers"]),
                                         f"{opts.group}-slices", parsed, dict(opts.security))
    client = src.client_config(c.consumer)
    factory: Any = None
    clients: dict[str, Any] = {}
    if opts.source_client == "librdkafka":
        from panstream.sources.kafka.rdkafka import (
            RdKafkaConsumer,
            RdKafkaProducer,
            crash_line,
            rdkafka_config,
            say_native_crash,
        )

        rdkafka_config(c.consumer)  # an untranslatable -C key is an error now, not in a thread
        rdkafka_config(slice_consumer)
        factory = RdKafkaConsumer
        clients = {"consumer_factory": RdKafkaConsumer, "producer_factory": RdKafkaProducer}
        if crash_watcher:
            say_native_crash(crash_line())
    # the routing stage's commits look at the topics first (:class:`~.watched.LookBeforeCommit`:
    # the member's watch looks every 2 s; a commit between two looks would put the old topic's
    # positions on a source topic re-created under the same name)
    look = LookBeforeCommit(TopologyWatch(admin_of(client), list(c.topics), topic, lay.count),
                            owns_watch=True)
    clients["consumer_factory"] = look.wrap(clients.get("consumer_factory", group_consumer))
    distinct = slice_family(c.estimator, c.calibration)[0] == "density"  # a redraw: once a poll
    route = RouteStage(RouteConfig(c.consumer, client, c.topics, lay, topic, c.value_format,
                                   c.fmt, not opts.keep_going, distinct=distinct), metrics,
                       **clients)
    route.notice = notice
    scfg = dataclasses.replace(c, consumer=slice_consumer, topics=[topic], value_format="item",
                               fmt="plain")
    slices = SliceStage(scfg, lay, metrics, admin_client=client,
                        **({"consumer_factory": factory} if factory is not None else {}))
    whole = sum(lay.table_bytes(r, c.estimator, c.modulus) for r in range(lay.count))
    notice(f"routed layout: {lay.describe(c.estimator, c.modulus)}, routed through "
           f"{topic} ({lay.width} bytes per arrival); a member holds the slices of its "
           f"internal partitions: with N members about {lay.count}/N slices and "
           f"{mib(whole)}/N (the whole table: {mib(whole)})")
    if whole >= LARGE_TABLE_BYTES and "session_timeout_ms" not in parsed and factory is None:
        notice(f"note: a revoke writes this member's slices (up to {mib(whole)}) "
               "on kafka-python's IO thread, which sends no heartbeat meanwhile; if that can "
               "take seconds here, raise the 6 s session: -C session_timeout_ms=30000 -C "
               "heartbeat_interval_ms=3000")

    def held(owned: list[int]) -> None:
        total = sum(lay.table_bytes(r, c.estimator, c.modulus) for r in owned)
        notice(f"this member now holds {len(owned)} of {lay.count} slices "
               f"({', '.join(map(str, owned)) or '-'}): {mib(total)}")

    slices.on_assign = held
    slices.notice = notice
    return Member(route, slices, client, int(opts.cells_retention * 1000) or None,
                  drain_timeout=opts.drain_timeout)


def windowed_member(opts: MemberOptions, tail_cfg: Any, metrics: Any, notice: Notice,
                    on_release: Callable[[dict[str, Any]], None]) -> Any:
    """The windowed member: routing and slice stages over ``<group>-wcells``; says the
    per-window accounting; ``on_release`` gets each released window's record."""
    from panstream import estimators
    from panstream.sources import kafka as src
    from panstream.sources.kafka.member import Member
    from panstream.sources.kafka.route import RouteConfig
    from panstream.sources.kafka.windows import (
        SeriesTopic,
        WindowRouteStage,
        WindowSliceStage,
        WindowSpec,
        window_topic,
    )
    from panstream.state.stores import DirectoryStore
    from panstream.windows import duration_text, horizon_line
    from panstream.windows.eventtime import check_time, has_time

    w = opts.window
    assert w is not None and opts.state_dir is not None
    c = tail_cfg
    group = opts.group
    lay = SliceLayout(c.universe, opts.slices)
    topic = window_topic(group)
    _internal_topic_check(topic, c.topics)
    spec = WindowSpec(w.window, w.lateness, float(w.release_epsilon), first=w.range_from,
                      stop=w.range_to,
                      time_zone=w.time_zone.name if w.time_zone is not None else None)
    spec.schedule  # noqa: B018  (refuses a --from/--to off the window grid, before connecting)
    if has_time(c.fmt):  # a local time without --time-zone: refused now (never for auto)
        check_time(c.fmt, spec.zone)
    ser = w.series or os.path.join(opts.state_dir, f"{group}-series.jsonl")
    parsed = src.parse_overrides(opts.overrides)
    slice_consumer = src.internal_config(",".join(c.consumer["bootstrap_servers"]),
                                         f"{group}-slices", parsed, dict(opts.security))
    client = src.client_config(c.consumer)
    route = WindowRouteStage(RouteConfig(c.consumer, client, c.topics, lay, topic,
                                         c.value_format, c.fmt), metrics, spec)
    scfg = dataclasses.replace(c, consumer=slice_consumer, topics=[topic], value_format="item",
                               fmt="plain")
    results_topic = w.series_topic or f"{group}-series"
    results = None if results_topic.lower() == "none" else SeriesTopic(client, results_topic)
    slices = WindowSliceStage(scfg, lay, metrics, admin_client=client, spec=spec, group=group,
                              sources=list(c.topics),
                              wstore=DirectoryStore(os.path.join(opts.state_dir, "windows")),
                              series_path=ser, on_release=on_release, results=results)
    eps_state = estimators.state_epsilon(c.estimator, c.epsilon, calibration=c.calibration,
                                         modulus=c.modulus)
    eps_window = eps_state + spec.release_epsilon
    whole = sum(lay.table_bytes(r, c.estimator, c.modulus) for r in range(lay.count))
    # (these two lines name their speaker, "panstream kafka:", as they always did)
    notice(f"panstream kafka: {duration_text(w.window)} windows (event time, lateness "
           f"{duration_text(w.lateness)}; a window is open on the wall clock from its start "
           "to its end + lateness and released then, empty or not); each window: "
           "epsilon_state "
           f"{eps_state:.6f} + one release {spec.release_epsilon:g} = {eps_window:.6f} per "
           f"person per window; series {ser}"
           + (f" and topic {results_topic}" if results is not None else ""))
    notice("panstream kafka: a person seen in W windows is covered at W x "
           f"{eps_window:.6g} against whoever reads the whole series"
           + (f"; {horizon_line(eps_window, w.window, w.horizon)}" if w.horizon else ""))
    notice(f"routed layout: {lay.describe(c.estimator, c.modulus)}, routed through "
           f"{topic}; each open window is one table of {mib(whole)} in {lay.count} slices "
           f"(with N members about {mib(whole)}/N per open window)")

    def held(owned: list[int]) -> None:
        notice(f"this member now holds {len(owned)} of {lay.count} slices "
               f"({', '.join(map(str, owned)) or '-'}) of every open window")

    slices.on_assign = held
    slices.notice = notice
    return Member(route, slices, client, int(opts.cells_retention * 1000))


def settle_definition(opts: MemberOptions, store: Any, client: Mapping[str, Any],
                      notice: Notice) -> Any:
    """This member's group definition, settled against the store's
    (:func:`panstream.sources.kafka.identity.settle`): written if the store holds none, else
    compared; a member that differs stops here with one line."""
    from panstream.sources.kafka.identity import (
        broker_admin,
        check_names,
        describe_sources,
        settle,
    )
    from panstream.sources.kafka.route import internal_topic, window_topic
    from panstream.state.group_definition import GroupDefinition, Window

    kind = opts.kind
    routed = kind != "partition"
    w = opts.window
    win = None if w is None else Window(
        int(w.window), int(w.lateness), float(w.release_epsilon or 0.0), w.range_from,
        w.range_to, getattr(w.time_zone, "name", None))
    with broker_admin(client) as admin:
        mine = GroupDefinition(
            group=opts.group, layout=kind, universe=opts.universe.spec, family=opts.estimator,
            epsilon=float(opts.epsilon), calibration=opts.calibration,
            modulus=int(opts.modulus) if opts.estimator == "frequency" else None,
            slices=opts.slices if routed else None,
            internal_topic=(window_topic(opts.group) if w is not None
                            else internal_topic(opts.group)) if routed else None,
            window=win, sources=describe_sources(admin, list(opts.topics)),
            partitioner=opts.partitioner)
        return settle(store, mine, notice=notice,
                      check=lambda: check_names(admin, mine))  # another layout under this -g


__all__ = ["LARGE_TABLE_BYTES", "MemberOptions", "MemberRun", "WindowOptions",
           "partition_member", "routed_member", "run_member", "settle_definition",
           "windowed_member"]
