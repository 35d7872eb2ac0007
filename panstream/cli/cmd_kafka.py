"""``panstream kafka``: tail Kafka topics in a consumer group into pan-private shard tables."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from types import FrameType
from typing import Any

import click

from panstream import estimators
from panstream.cli.common import (
    AliasOption,
    FiniteFloatRange,
    Interrupt,
    SpecParam,
    apply_split,
    budget_option,
    calibration_option,
    check_family_options,
    emit_json,
    env,
    epsilon_option,
    estimator_options,
    expected_option,
    given,
    handle_errors,
    json_option,
    total_epsilon_options,
    universe_option,
    warn_settings,
)
from panstream.cli.kafka_options import bootstrap_option, connection_options
from panstream.cli.kafka_windows import check_window_args, kafka_window_options
from panstream.cli.sketch_hash import sketch_hash_option, with_sketch_hash
from panstream.cli.telemetry_options import telemetry_options
from panstream.cli.window_options import say_window, zone_notice
from panstream.errors import ConfigurationError
from panstream.inputs.formats import format_examples
from panstream.inputs.parser import Format, parse_format
from panstream.release.telemetry import TelemetryPolicy
from panstream.state.slices import DEFAULT_SLICES, MAX_SLICES
from panstream.universe import Universe
from panstream.windows.eventtime import label


def kafka_universe(estimator: str, universe: Universe | None) -> Universe:
    """The universe a ``kafka`` run routes: ``-u``, or for ``--estimator sketch`` without it the
    sketch's default grid (:class:`panstream.estimators.sketch.sfm.SketchGrid`, ``sketch:4096x24:ip``), as
    ``ingest --estimator sketch`` picks it. Every other family needs ``-u``.

    >>> kafka_universe("sketch", None).spec
    'sketch:4096x24:ip'

    Raises:
        click.UsageError: no ``-u`` for a family without a default universe.
    """
    if universe is not None:
        return universe
    if estimator == "sketch":
        from panstream.estimators.sketch.sfm import SketchGrid

        return SketchGrid()
    raise click.UsageError(f"--estimator {estimator} needs -u/--universe (or set "
                           "PANSTREAM_UNIVERSE); only --estimator sketch has a default grid")


@click.command()
@bootstrap_option()
@click.option("-t", "--topic", "topics", required=True, multiple=True,
              help="Topic to tail (repeat for several; the env var takes space-separated names).",
              **env("KAFKA_TOPIC"))
@click.option("-g", "--group", required=True, help="Consumer group id: members split partitions.",
              **env("KAFKA_GROUP"))
@universe_option(required=False)
@epsilon_option(default=1.0, help="State epsilon: privacy of a leaked table (as 'ingest'; or "
                "give --total-epsilon instead).")
@budget_option(help="Total output epsilon the group's releases may spend (a new group ledger "
               "only; not with --window, whose windows are released once each).")
@total_epsilon_options()
@estimator_options()
@sketch_hash_option()
@calibration_option()
@expected_option()
@click.option("--state-dir", "-s", "--state", "state_dir", cls=AliasOption,
              hidden_aliases=("-s", "--state"),  # ingest's and release's spelling (issue 37)
              type=click.Path(file_okay=False), default=None,
              help="Directory of the group's snapshots (one file per slice, or per partition "
                   "with --layout partition) and its release ledger; a shared or persistent "
                   "volume for several hosts.", **env("STATE_DIR"))
@click.option("--state-topic", default=None,
              help="Keep shard snapshots in this compacted Kafka topic instead of a directory "
                   "(created if missing).", **env("KAFKA_STATE_TOPIC"))
@click.option("--state-chunk-bytes", type=click.IntRange(min=1024), default=900_000,
              show_default=True, help="Split state-topic snapshots into messages of at most this "
              "size (below the broker's message.max.bytes).", **env("KAFKA_STATE_CHUNK_BYTES"))
@click.option("--value-format", type=click.Choice(["item", "lines"]), default="item",
              show_default=True, help="item: one item per message; lines: newline-separated items "
              "per message (as log shippers batch them).", **env("KAFKA_VALUE_FORMAT"))
@click.option("-f", "--format", "fmt", type=SpecParam("FORMAT", parse_format, Format), default="auto",
              show_default=True,
              help=f"Line format of each item, as 'panstream ingest -f' ({format_examples(5)}, "
                   "...: docs/logs.md); auto: detected once per member and announced with the -f "
                   "that pins it.", **env("KAFKA_FORMAT"))
@click.option("--keep-going", is_flag=True, default=False,
              help="Route even if (almost) nothing of the first 1,000 lines reads (by default "
                   "the member stops with exit 1 and the -f that would read them).",
              **env("KAFKA_KEEP_GOING"))
@click.option("--layout", type=click.Choice(["slices", "partition"]), default="slices",
              show_default=True,
              help="slices: one table for the group, routed through GROUP-cells, any keying; "
                   "partition: the old layout, a table per source partition (topics keyed by "
                   "the item only, checked message by message).", **env("KAFKA_LAYOUT"))
@click.option("--partitioner", type=click.Choice(["murmur2", "crc32"]), default="murmur2",
              show_default=True,
              help="With --layout partition: the producers' partitioner every message is checked "
                   "against (murmur2: Kafka's default; crc32: librdkafka's).",
              **env("KAFKA_PARTITIONER"))
@click.option("--source-client", type=click.Choice(["librdkafka", "kafka-python"]),
              default="librdkafka", show_default=True,
              help="The routed member's consumer client (the partition layout and --window "
                   "use kafka-python); librdkafka reads in C, in a child process (a crash: "
                   "one line, exit 1).",
              **env("KAFKA_SOURCE_CLIENT"))
@click.option("--slices", "slice_count", type=click.IntRange(min=1, max=MAX_SLICES),
              default=None, show_default=f"{DEFAULT_SLICES}, or |X| if smaller",
              help="The partitions of GROUP-cells, each a slice of the table (public; fixed "
                   "for the life of the group's state).",
              **env("KAFKA_SLICES"))
@click.option("--cells-retention", type=FiniteFloatRange(min=0.0), default=0.0,
              show_default="0: the source topics' longest retention", metavar="SECONDS",
              help="Least retention of GROUP-cells (never shorter than the source topics'; a "
                   "shorter value is raised).",
              **env("KAFKA_CELLS_RETENTION"))
@click.option("--checkpoint-interval", "--checkpoint-every", "checkpoint_interval",
              cls=AliasOption, hidden_aliases=("--checkpoint-every",),  # ingest's (issue 37)
              type=FiniteFloatRange(min=0.0), default=5.0,
              show_default=True, help="Seconds between checkpoints (snapshots durable, then commit).",
              **env("KAFKA_CHECKPOINT_INTERVAL"))
@click.option("--idle-timeout", type=FiniteFloatRange(min=0.0), default=None,
              help="Stop with exit 0 after this many seconds without messages, once the "
                   "whole group has drained (default: run until SIGTERM/SIGINT).",
              **env("KAFKA_IDLE_TIMEOUT"))
@click.option("--drain-timeout", type=FiniteFloatRange(min=0.0), default=None, metavar="SECONDS",
              show_default="120, or 2 x session_timeout_ms + 10 s if longer",
              help="With --idle-timeout: how long a quiet member waits for its group to drain "
                   "before it stops with exit 1, saying what is pending.",
              **env("KAFKA_DRAIN_TIMEOUT"))
@connection_options("Consumer setting, by its kafka-python name (session_timeout_ms=6000) or "
                    "librdkafka's (session.timeout.ms, fetch.wait.max.ms, sasl.username: the "
                    "ones docs/kafka.md lists). Repeat.")
@click.option("--metrics-port", type=click.IntRange(min=0, max=65535), default=None,
              help="Serve Prometheus metrics here: liveness, lag and committed offsets (public "
                   "broker facts); counts only under --telemetry-epsilon or --exact-counts.",
              **env("METRICS_PORT"))
@click.option("--metrics-host", default="127.0.0.1", show_default=True,
              help="Address the metrics endpoint binds (0.0.0.0 in a container).",
              **env("METRICS_HOST"))
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="warning", show_default=True, help="Log level (stderr).", **env("LOG_LEVEL"))
@kafka_window_options()
@telemetry_options(sensitivity=2, what="summary and the metrics")
@json_option()
@click.pass_context
@handle_errors
def command(ctx: click.Context, bootstrap: str, topics: tuple[str, ...], group: str,
            universe: Universe | None, epsilon: float, budget: float, total_epsilon: float | None,
            releases: int | None, estimator: str, modulus: int, sketch_hash: str | None,
            calibration: str, expected_distinct: int | None, state_dir: str | None,
            state_topic: str | None,
            state_chunk_bytes: int, value_format: str, fmt: Format, keep_going: bool,
            source_client: str,
            layout: str, partitioner: str,
            slice_count: int | None, cells_retention: float, checkpoint_interval: float,
            idle_timeout: float | None, drain_timeout: float | None, overrides: tuple[str, ...],
            security: dict[str, Any],
            metrics_port: int | None, metrics_host: str, log_level: str,
            telemetry: TelemetryPolicy, as_json: bool, window: int | None = None,
            lateness: int = 300, release_epsilon: float | None = None, series: str | None = None,
            series_topic: str | None = None, horizon: int | None = None,
            range_from: int | None = None, range_to: int | None = None,
            time_zone: Any = None) -> None:
    """Tail Kafka topics into one pan-private table, as a consumer group, any keying.

    Each member reads its share of the topics' partitions, parses every line as 'panstream
    ingest' does (-f, --value-format) and routes its cell through the group's internal topic
    GROUP-cells; the members keep the table's slices in --state-dir (or --state-topic), one table
    for the group. Snapshots are durable before offsets are committed; SIGTERM/SIGINT make a
    final checkpoint and exit 0 (130
    after SIGINT, Ctrl+C). Release with 'panstream release --state-dir DIR'.

    \b
    Essentials:
      -b HOST:PORT -t TOPIC -g GROUP        brokers, source topics, consumer group
      -u UNIVERSE [--epsilon E]             the table, as in ingest (E = 1; or --total-epsilon)
      -f FORMAT --value-format item|lines   how a message reads (-f auto: detected, announced)
      --state-dir DIR | --state-topic T     where the slices and the group's ledger live
      --idle-timeout S                      a bounded run (default: until SIGTERM)
      --window 1h --release-epsilon E       a released series of windows (docs/windows.md)

    \b
    Examples:
      panstream kafka -b 127.0.0.1:9092 -t access-logs -g panstream -f clf \\
          --value-format lines -u ipv4:10.0.0.0/16 --state-dir /var/lib/panstream
      panstream release --state-dir /var/lib/panstream --epsilon 0.5
      panstream kafka -b 127.0.0.1:9092 -t access-logs -g hourly -f clf \\
          --value-format lines -u ipv4:10.0.0.0/16 --window 1h --lateness 5m \\
          --release-epsilon 0.5 --state-dir /var/lib/panstream

    Every option is listed below, briefly; docs/kafka.md explains each (the routed layout, the
    commit order, the first-sample check, metrics, the per-partition layout, Docker).
    """
    logging.basicConfig(level=log_level.upper(), format="panstream: %(levelname)s: %(message)s")
    if log_level in ("warning", "error"):  # kafka-python logs every reconnect attempt
        logging.getLogger("kafka").setLevel(logging.CRITICAL)
    from panstream.sources.kafka.build import MemberOptions, WindowOptions, run_member

    check_family_options(ctx, estimator)
    universe = kafka_universe(estimator, with_sketch_hash(ctx, estimator, universe, sketch_hash)
                              or universe)
    if getattr(universe, "items", None) == "ip-country" or \
            universe.spec.startswith("hashed-ip-country:"):
        raise click.UsageError(f"a by-country table ({universe.spec}) is not routed on Kafka "
                               "yet: count by country with 'panstream ingest'")
    if (estimator == "sketch") != (universe.kind == "sketch"):
        raise click.UsageError(
            f"--universe {universe.spec} is a sketch grid: add --estimator sketch"
            if universe.kind == "sketch" else
            f"--estimator sketch counts any items in a hashed grid, not cells of {universe.spec}: "
            "give a grid such as --universe sketch:4096x24:ip (or :id for any IDs)")
    if estimator == "sketch":
        calibration = "rr"  # the sketch's randomized response (its slices' calibration)
    check_window_args(ctx, window=window, layout=layout, state_dir=state_dir,
                      total_epsilon=total_epsilon, release_epsilon=release_epsilon)
    if window is not None and estimator == "sketch":
        raise click.UsageError("--window with --estimator sketch is not supported on Kafka yet: "
                               "window a density or frequency table, or export a sketch per epoch "
                               "with 'panstream rotate --state-dir DIR --export-presto FILE'")
    if window is not None and given(ctx, "budget"):
        raise click.UsageError("--window gives each window a budget of exactly its one release: "
                               "drop --budget")
    if releases is not None and total_epsilon is None:
        raise click.UsageError("--releases goes with --total-epsilon")
    if total_epsilon is not None:  # refuses a given --epsilon or --budget with it
        epsilon, budget, _ = apply_split(ctx, total_epsilon, releases, universe, calibration,
                                         telemetry=telemetry)
    warn_settings(universe, epsilon, calibration, estimator, modulus, expected_distinct)
    if (state_dir is None) == (state_topic is None):
        msg = "give exactly one of --state-dir DIR or --state-topic TOPIC (where shards are kept)"
        raise ConfigurationError(msg)
    keyed = _keying(ctx, layout, value_format, universe, partitioner)
    if (layout == "partition" or window is not None) and not given(ctx, "source_client"):
        source_client = "kafka-python"  # the default (librdkafka) is the routed layout's
    win = None
    if window is not None:
        assert release_epsilon is not None
        win = WindowOptions(window, release_epsilon, lateness, series, series_topic, horizon,
                            range_from, range_to, time_zone)
        unused = zone_notice(fmt.spec, time_zone)
        if unused:
            click.echo(f"panstream: {unused}", err=True)
    asked = ("--total-epsilon" if total_epsilon is not None
             else "--budget" if given(ctx, "budget") else None)
    opts = MemberOptions(
        bootstrap=bootstrap, topics=tuple(t for arg in topics for t in arg.split() if t),
        group=group, universe=universe, epsilon=epsilon, calibration=calibration,
        estimator=estimator, modulus=modulus, budget=budget, budget_asked=asked,
        state_dir=state_dir, state_topic=state_topic, state_chunk_bytes=state_chunk_bytes,
        value_format=value_format, fmt=fmt.spec, keep_going=keep_going, layout=layout,
        partitioner=keyed, source_client=source_client, slice_count=slice_count,
        cells_retention=cells_retention, checkpoint_interval=checkpoint_interval,
        idle_timeout=idle_timeout, drain_timeout=drain_timeout, overrides=overrides,
        security=security, metrics_port=metrics_port, metrics_host=metrics_host,
        telemetry=telemetry, window=win)

    stop = threading.Event()
    interrupt = Interrupt()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if stop.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        if interrupt.signum is None:
            interrupt.signum = signum
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        ran = run_member(opts, stop, _notice, lambda rec: say_window(rec, as_json))
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if ran.exit_code is not None:  # the member ran in a supervised child, which said it all
        sys.exit(ran.exit_code)
    summary, runner, where, topic_list = ran.summary, ran.runner, opts.where, list(opts.topics)
    deletes = ran.internal_deletes
    out = {"topics": topic_list, "group": group, "universe": universe.spec, "layout": layout,
           "format": fmt.spec, "internal_deletes": deletes, "state": where,
           "partitions_at_exit": summary.partitions,
           "messages": summary.messages, "items_applied": summary.items,
           "malformed_skipped": summary.malformed, "outside_universe_skipped": summary.outside,
           "exact_counts": summary.exact_counts, "telemetry_epsilon": summary.telemetry_epsilon,
           "count_sd": summary.count_sd,
           "checkpoints": summary.checkpoints, "rebalances": summary.rebalances,
           "stopped_by": summary.stopped_by, "seconds": round(summary.seconds, 3),
           "estimator": estimator,
           "epsilon_state": estimators.state_epsilon(estimator, epsilon, calibration=calibration,
                                                     modulus=modulus)}
    if not telemetry.counts:  # the default: no count exists, so none is printed
        out = {k: v for k, v in out.items() if k not in ("messages", "items_applied",
               "malformed_skipped", "outside_universe_skipped", "exact_counts", "count_sd")}
    out["telemetry"] = telemetry.describe()
    # the common names (docs/schema/release.schema.json); nothing is released by a consumer
    out["family"] = estimator
    out["epsilon"] = {"state": out["epsilon_state"], "release": 0.0,
                      "total": None if telemetry.counts else out["epsilon_state"]}
    if window is not None:
        out["windows_released"] = runner.slices.released
        out["windows_open"] = {str(r): [label(w) for w in ws]
                               for r, ws in runner.slices.open_windows().items()}
    if as_json:
        emit_json(out)
        interrupt.exit()  # Ctrl+C: 130, after the final checkpoint, commit and summary
        return
    click.echo(f"panstream kafka: stopped ({summary.stopped_by}) after {summary.seconds:.1f} s; "
               f"final checkpoint committed; state in {where}")
    owned = "slices owned at exit     " if layout == "slices" else "partitions owned at exit "
    click.echo(f"  {owned} {', '.join(summary.partitions) or '-'}")
    n = (lambda x: f"{x:,}") if summary.exact_counts else (lambda x: f"~{max(x, 0):,}")
    if telemetry.counts:
        click.echo(f"  consumed                  {n(summary.messages)} messages, "
                   f"{n(summary.items)} items applied")
        click.echo(f"  skipped                   {n(summary.malformed)} malformed, "
                   f"{n(summary.outside)} outside {universe.spec}")
    if not summary.exact_counts:
        click.echo(f"  counts                    {telemetry.describe()}"
                   + (f"; these totals: sd {summary.count_sd:,.0f} each" if telemetry.counts else ""))
    click.echo(f"  checkpoints / rebalances  {summary.checkpoints} / {summary.rebalances}")
    if window is not None:
        click.echo(f"  windows                   {runner.slices.released} released by this "
                   "member; open windows checkpointed for the next run")
    if layout == "partition":
        click.echo(f"  state privacy             epsilon_state = {out['epsilon_state']:.6f} realized"
                   f" per shard table (times the number of shards one item's messages reach: 1 "
                   f"if keyed by the item, every partition if not) {telemetry.total_clause()}")
    else:
        click.echo(f"  state privacy             epsilon_state = {out['epsilon_state']:.6f} realized"
                   f" for the group's one table (its slices laid end to end), whatever the keying "
                   f"{telemetry.total_clause()}")
    interrupt.exit()  # Ctrl+C: 130, after the final checkpoint, commit and summary


def _keying(ctx: click.Context, layout: str, value_format: str, universe: Universe,
            partitioner: str) -> str | None:
    """The partitioner the per-partition layout checks every message against (issue 39), or
    ``None`` (the routed layout; a universe whose cells name no key, said on stderr).

    Raises:
        ConfigurationError: --value-format lines under --layout partition; --partitioner without it.
    """
    from panstream.sources.kafka.keyed import require_keyable, verifiable

    if layout != "partition":
        if given(ctx, "partitioner"):
            msg = ("--partitioner is what --layout partition checks the topic's keying against; "
                   "the routed layout is right for any keying: leave it out")
            raise ConfigurationError(msg)
        return None
    require_keyable(value_format)
    if not verifiable(universe):
        click.echo(f"panstream: note: the keying of a {universe.kind} universe's topic is not "
                   "checked (a cell names no key); its shards are released with the sum merge",
                   err=True)
        return None
    return partitioner


def _notice(msg: str) -> None:
    """A member's one-line notice on stderr (``panstream: ...``; a line that names its speaker,
    ``panstream kafka: ...``, as it is)."""
    click.echo(msg if msg.startswith("panstream kafka: ") else f"panstream: {msg}", err=True)
