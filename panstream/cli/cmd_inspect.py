"""``panstream inspect``: the public parameters and budget of a state file, never its estimate."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from typing import Any

import click

from panstream import estimators
from panstream.cli.common import emit_json, handle_errors, json_option, state_options
from panstream.cli.kafka_options import bootstrap_option, connection_options, notice_if_slow
from panstream.errors import ConfigurationError
from panstream.release.telemetry import TOTAL_TELEMETRY_NOTE
from panstream.state import persist
from panstream.state.format import PREFIX_SIZE, read_frame
from panstream.state.group_definition import GroupDefinition, definition_line, stored, summary
from panstream.state.keying import keying_of
from panstream.state.slices import head_params, slice_of


def describe(path: str) -> dict[str, Any]:
    """Everything public about the state at ``path`` (verified in full, checksum included).

    Raises:
        StateError: missing, unreadable, corrupt or foreign file.
    """
    est = persist.load(path)
    with open(path, "rb") as f:
        frame = read_frame(f.read(PREFIX_SIZE))
    led = est.ledger
    out = {
        "state": path, "format_version": frame.version, "bytes": os.path.getsize(path),
        "estimator": est.kind, "universe": est.universe.spec, "kind": est.universe.kind,
        "cells": est.size, "epsilon_requested": est.epsilon, **est.describe(),
        "epsilon_state": est.epsilon_state,
        "budget": led.budget, "budget_spent": led.spent, "budget_remaining": led.remaining,
        "releases": len(led.entries), "epsilon_total": est.epsilon_state + led.spent,
        "epsilon_total_at_budget": est.epsilon_state + led.budget,
        "telemetry": "nothing counted by default (0 per person)",
        "shard": led.shard, "releases_refused": led.blocked,
        # the common names of every --json output (docs/schema/release.schema.json): here the
        # release epsilon is the output budget spent so far
        "family": est.kind,
        "epsilon": {"state": est.epsilon_state, "release": led.spent,
                    "total": est.epsilon_state + led.spent},
    }
    est.wipe()
    with open(path, "rb") as f:
        head = f.read(frame.head_size)
    params = head_params(head + bytes(max(0, PREFIX_SIZE - len(head))))
    rec = keying_of(params)
    if rec is not None:  # a per-partition shard whose member checked the keying (issue 39)
        out["keying"] = {"partitioner": rec.partitioner, "partitions": rec.partitions}
    where = slice_of(params)
    if where is not None:
        lay, r = where
        lo, hi = lay.bounds(r)
        out["slice"] = {"of": lay.universe.spec, "index": r, "count": lay.count, "cells": [lo, hi]}
        if lay.is_sketch:  # whole buckets of the grid, at every level (bucket-major order)
            out["slice"]["buckets"] = [lo // lay.unit, hi // lay.unit]
    return out


def describe_store(directory: str) -> dict[str, Any]:
    """The layout, family parameters and release ledger of a consumer group's state directory
    (public figures only; never an estimate).

    Raises:
        StateError: a snapshot or the ledger log cannot be read.
    """
    from panstream.state.stores import DirectoryStore

    return {"state_dir": directory, **_group(DirectoryStore(directory))}


def describe_topic(topic: str, client: dict[str, Any],
                   check: tuple[str, tuple[str, ...], dict[str, Any]] | None = None
                   ) -> dict[str, Any]:
    """As :func:`describe_store`, for the state topic of ``panstream kafka --state-topic`` (read
    in full, never created, nothing appended).

    Raises:
        SourceError: no broker answered; StateError: the topic does not exist or a record of it
            cannot be read.
    """
    from panstream.cli.routed_check import check_routed
    from panstream.sources import kafka as src

    store = src.topic_store(topic, client, create=False)
    try:
        out = {"state_topic": topic, **_group(store)}
        if check is not None:  # a routed group's internal topic, asked with the same -b
            out["internal_topic"] = check_routed(store, *check)
        return out
    finally:
        store.log.close()  # type: ignore[attr-defined]  # KafkaRecordLog


def _group(store: Any) -> dict[str, Any]:
    from panstream.state.stores import ledger_summary, store_layout

    out = store_layout(store)
    fam = out["parameters"]
    if len(out["estimator"]) == 1 and "epsilon" in fam:
        kind = out["estimator"][0]
        opts = {k: fam[k] for k in ("calibration", "modulus") if k in fam}
        # a family this panstream does not know: no figure
        with contextlib.suppress(Exception):
            out["epsilon_state"] = estimators.state_epsilon(kind, float(fam["epsilon"]), **opts)
    out.update(ledger_summary(store))
    out["family"] = out["estimator"][0] if len(out["estimator"]) == 1 else None
    out["group_definition"] = summary(stored(store))
    return out


@click.command()
@state_options(
    state="State file written by 'panstream ingest' (or one shard or slice file).",
    state_dir="Instead of --state: the state directory of a 'panstream kafka' group; says which "
              "layout it holds (routed slices of one table, or per-partition shards).",
    state_topic="Instead of --state: the state topic of 'panstream kafka --state-topic' (needs -b); "
                "says the same as --state-dir. The topic is never created.")
@bootstrap_option(required=False, help="With --state-topic: Kafka bootstrap servers. With "
                  "--state-dir of a routed group: also ask the broker what GROUP-cells holds.")
@connection_options("With --state-topic: kafka-python client setting, as for 'panstream kafka' "
                    "(e.g. -C request_timeout_ms=60000; repeat; unknown keys are an error).")
@json_option()
@handle_errors
def command(state: str | None, state_dir: str | None, state_topic: str | None,
            bootstrap: str | None, overrides: tuple[str, ...], security: dict[str, Any],
            as_json: bool) -> None:
    """Show a state's parameters, realized epsilon, budget spent and left, and format version.

    It never shows the estimate: reading it out is a release and spends budget (use 'panstream
    release').

    \b
    Example:
      panstream inspect -s web.pst
      panstream inspect -s web.pst --json
      panstream inspect --state-dir /var/lib/panstream
      panstream inspect --state-topic panstream-state -b 127.0.0.1:9092
    """
    if sum(x is not None for x in (state, state_dir, state_topic)) != 1:
        raise click.UsageError("give exactly one of -s/--state FILE, --state-dir DIR or "
                               "--state-topic TOPIC")
    if state_dir is not None:
        from panstream.cli.routed_check import check_routed
        from panstream.state.stores import DirectoryStore

        d = describe_store(state_dir)
        d["internal_topic"] = check_routed(DirectoryStore(state_dir), bootstrap, overrides,
                                           security)
        _store(d, as_json)
        return
    if state_topic is not None:
        if not bootstrap:
            msg = ("--state-topic needs -b/--bootstrap-server HOST:PORT (or "
                   "PANSTREAM_KAFKA_BOOTSTRAP)")
            raise ConfigurationError(msg)
        logging.getLogger("kafka").setLevel(logging.CRITICAL)  # reconnect chatter; errors raise
        from panstream.sources import kafka as src

        client = src.state_client(bootstrap, src.parse_overrides(overrides), security)
        with notice_if_slow(f"still {src.connecting_notice(client)}"):
            _store(describe_topic(state_topic, client, (bootstrap, overrides, security)),
                   as_json)
        return
    assert state is not None
    presto = _presto_file(state)
    if presto is not None:
        if as_json:
            emit_json(presto)
            return
        click.echo(f"sketch           {state}: a Presto SfmSketch (format tag 7, {presto['bytes']:,} "
                   f"bytes), {presto['buckets']} buckets x {presto['levels']} levels")
        click.echo(f"privacy          flip probability {presto['flip']!r}: epsilon "
                   f"{presto['epsilon_flip']:.6g} (already published: counting it is "
                   "post-processing)")
        click.echo(f"distinct         {presto['cardinality']:,} (Presto's cardinality(), +- "
                   f"{presto['stderr']:,.0f} standard error)"
                   + (" NOISE-DOMINATED: its 95 % interval is wider than the count"
                      if presto["noise_dominated"] else ""))
        click.echo(f"hash             {presto['hash'] or 'not recorded (no FILE.params.json)'}"
                   " (merge only with sketches of the same hash: docs/sketch.md, 'Which hash')")
        return
    d = describe(state)
    if as_json:
        emit_json(d)
        return
    click.echo(f"state            {d['state']} (format version {d['format_version']}, "
               f"{d['bytes']:,} bytes)")
    click.echo(f"universe         {d['universe']} ({d['cells']:,} cells)")
    click.echo(f"state privacy    epsilon_state = {d['epsilon_state']:.6f} realized (asked "
               f"{d['epsilon_requested']:g}, {_probabilities(d)})")
    if "slice" in d:
        sl = d["slice"]
        what = (f"buckets {sl['buckets'][0]:,} to {sl['buckets'][1] - 1:,} at every level"
                if "buckets" in sl else f"cells {sl['cells'][0]:,} to {sl['cells'][1] - 1:,}")
        click.echo(f"layout           slice {sl['index']} of {sl['count']} of {sl['of']} ({what}):"
                   " a routed group's one table")
    if "keying" in d:
        kg = d["keying"]
        click.echo(f"keying           verified: every message its member applied sat in the "
                   f"partition {kg['partitioner']}(item) % {kg['partitions']} gives its item")
    if d["shard"]:
        click.echo("output budget    none of its own: one shard of a Kafka consumer group; the "
                   "group's ledger is in its --state-dir/--state-topic (panstream release "
                   "--state-dir)")
        return
    click.echo(f"output budget    {d['budget']:g}: spent {d['budget_spent']:g} in "
               f"{d['releases']} release(s), {d['budget_remaining']:g} left")
    click.echo(f"pan-private      epsilon_state + spent = {d['epsilon_total']:.6f} per person "
               f"{TOTAL_TELEMETRY_NOTE}; at most {d['epsilon_total_at_budget']:.6f} once the "
               "budget is spent")
    if d["releases_refused"]:
        click.echo(f"ROLLED BACK      releases are refused: {d['releases_refused']}")


def _presto_file(path: str) -> dict[str, Any] | None:
    """What a Presto-format sketch file holds (a published object, so its count is shown), or
    ``None`` if ``path`` is not one (then it is read as a state file)."""
    from panstream.estimators.sketch import sfm

    try:
        with open(path, "rb") as f:
            data = f.read(1 << 26)
    except OSError:
        return None  # the state reader says what is wrong, in its words
    if not data or data[0] != sfm.FORMAT_TAG:
        return None
    from panstream.state.sketch_params import read_hash

    sk = sfm.from_presto(data)
    fit = sfm.mple(sk.ones_by_level(), sk.buckets, sk.flip)
    from panstream.estimators.sketch.release import interval_halfwidth
    from panstream.release.schema import estimate_fields
    from panstream.release.stats import DEFAULT_CONFIDENCE

    # A published object: its count is an estimate in the common shape (no release noise; the
    # whole flip epsilon is the state's), with the Presto figures under extras and as aliases.
    h = interval_halfwidth(fit.stderr, 0.0, DEFAULT_CONFIDENCE)
    old = {"sketch": path, "format": "presto-sfm", "bytes": len(data), "buckets": sk.buckets,
           "levels": sk.levels, "flip": sk.flip, "epsilon_flip": sk.epsilon,
           "cardinality": sk.cardinality(), "hash": read_hash(path)}
    return estimate_fields(
        family="sketch", universe=f"sketch:{sk.buckets}x{sk.levels}:id", statistic="distinct",
        estimate=fit.n, low=fit.n - h, high=fit.n + h, stderr=fit.stderr,
        confidence=DEFAULT_CONFIDENCE, epsilon_state=sk.epsilon, epsilon_release=0.0,
        epsilon_total=sk.epsilon, extras=old, aliases=old)


def _probabilities(d: dict[str, Any]) -> str:
    """The exact probabilities of a described state, for one line."""
    if d["estimator"] == "density":
        return (f"{d['calibration']} calibration, p = {d['p']} = {d['p_float']:.9f}, "
                f"q = {d['q']} = {d['q_float']:.9f}")
    if d["estimator"] == "sketch":
        return (f"randomized response, flip probability q = {d['q']} = {d['q_float']:.9f}; "
                f"{d['buckets']} buckets x {d['levels']} levels = {d['grid_bytes']:,} bytes, "
                f"{d['items']} items hashed with {d['hash']} "
                + ("as Presto's Java SfmSketch.add does" if d["hash"].startswith("murmur3")
                   else "as Presto SQL's noisy_approx_set_sfm does"))
    return ", ".join(f"{k} = {v}" for k, v in d.items() if k in ("modulus", "alpha"))


def _store(d: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json(d)
        return
    if "state_topic" in d:
        click.echo(f"state topic      {d['state_topic']}")
    else:
        click.echo(f"state directory  {d['state_dir']}")
    held = d.get("group_definition")
    group = None if held is None else GroupDefinition.decode(json.dumps(held))
    click.echo(f"group            {definition_line(group)}")
    if d["layout"] == "slices":
        n = len(d["slices_present"])
        rest = ("" if n == d["slices"] else "; a release lays fresh draws for the others only if "
                "-b shows that they never received a record")
        click.echo(f"layout           routed slices: one {', '.join(d['estimator'])} table over "
                   f"{d['universe']} in {d['slices']} slices ({n} saved: "
                   f"{_ranges(d['slices_present'])}{rest})")
        _internal(d.get("internal_topic"))
        click.echo("release          one table: sensitivity 1, state epsilon x1, whatever the "
                   "producers' keying")
    elif d["layout"] == "partitions":
        click.echo(f"layout           per-partition shards: {len(d['shards'])} full tables of "
                   f"{', '.join(d['topics'])} ('panstream kafka --layout partition'): "
                   f"{', '.join(d['shards'])}")
        click.echo("release          merged per partition (--merge); state epsilon x the shards "
                   "one item reaches unless --keyed")
        _keying_line(d["keying"])
    elif d["layout"] == "mixed":
        click.echo("layout           MIXED: routed slices and per-partition shards in one "
                   "store; give each layout its own --state-dir/--state-topic")
    else:
        click.echo("layout           empty: no shard or slice snapshots yet")
    fam = d.get("parameters") or {}
    if fam:
        shown = ", ".join(f"{k} {v}" for k, v in fam.items()
                          if k in ("epsilon", "calibration", "modulus"))
        real = (f": epsilon_state = {d['epsilon_state']:.6f} realized per table"
                if "epsilon_state" in d else "")
        click.echo(f"family           {', '.join(d['estimator'])} ({shown}){real}")
    if d.get("ledger") is None:
        click.echo(f"output budget    no release ledger yet ({d['ledger_where']})")
        return
    refused = (f"; {d['reservations_refused']} reservation(s) refused"
               if d["reservations_refused"] else "")
    click.echo(f"output budget    {d['budget']:g}: spent {d['budget_spent']:g} in "
               f"{d['releases']} release(s), {d['budget_remaining']:g} left (replayed from the "
               f"ledger log, {d['ledger_where']}{refused})")


def _keying_line(kg: dict[str, Any]) -> None:
    """The line on per-partition shards' keying records (issue 39)."""
    from panstream.state.keying import UNVERIFIED_WAY

    seen = ", ".join(f"{r['partitioner']} over {r['partitions']} partitions" for r in kg["verified"])
    if kg["unverified"]:
        click.echo(f"keying           NOT verified for {len(kg['unverified'])} shard(s) "
                   f"({', '.join(kg['unverified'])}; written before panstream checked it, issue "
                   f"39): --merge partitioned and auto refuse them; {UNVERIFIED_WAY}")
    elif len(kg["verified"]) > 1:
        click.echo(f"keying           verified against DIFFERENT placements ({seen}): the "
                   f"partition-aware merge refuses them; {UNVERIFIED_WAY}")
    elif kg["verified"]:
        click.echo(f"keying           verified by the members: every message applied sat where "
                   f"{seen} puts its item: --merge partitioned (auto) applies")


def _internal(info: dict[str, Any] | None) -> None:
    """The line on a routed group's internal topic (:mod:`panstream.cli.routed_check`)."""
    if info is None:
        return
    if not info["checked"]:
        click.echo(f"internal topic   {info['name']}: not checked (give -b HOST:PORT to ask the "
                   "broker for routed records not yet applied)")
    elif info.get("topology_changed"):
        click.echo(f"internal topic   {info['name']}: not drained: the group's topics changed "
                   f"under it: {'; '.join(info['topology_changed'])}")
    elif info["drained"]:
        click.echo(f"internal topic   {info['name']}: drained (every routed record applied to a "
                   "saved slice and committed)")
    else:
        click.echo(f"internal topic   {info['pending_line']}: not yet in the slices")


def _ranges(xs: list[int]) -> str:
    """``[0, 1, 2, 5]`` as ``0-2, 5``."""
    out: list[str] = []
    for x in xs:
        if out and out[-1].split("-")[-1] == str(x - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{x}"
        else:
            out.append(str(x))
    return ", ".join(out) or "-"
