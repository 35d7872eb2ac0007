"""``panstream release``: publish a noisy estimate from a state (a file, or the shards of a Kafka
consumer group in a directory or a state topic) and record it in its ledger."""

from __future__ import annotations

import logging
from typing import Any

import click

from panstream.cli.common import FiniteFloatRange, emit_json, env, handle_errors, json_option, state_options
from panstream.cli.kafka_options import bootstrap_option, connection_options, notice_if_slow
from panstream.errors import ConfigurationError
from panstream.estimators.sketch.release import SketchRelease, format_sketch_release
from panstream.release.density import Release, format_release
from panstream.release.frequency import FrequencyRelease, format_frequency_release
from panstream.release.ledger import DEFAULT_BUDGET
from panstream.release.maps import MapRelease, format_map
from panstream.release.noise import MECHANISMS
from panstream.state.group_definition import GroupDefinition, definition_line, stored, summary
from panstream.state.persist import release_file


@click.command()
@state_options(
    state="State file written by 'panstream ingest' (its ledger records this release).",
    state_dir="Instead of --state: the shard directory of 'panstream kafka' (shards merged, see --merge).",
    state_topic="Instead of --state: the state topic of 'panstream kafka --state-topic' (needs -b; "
                "never created).")
@bootstrap_option(required=False, help="With --state-topic: Kafka bootstrap servers; with "
                  "--state-dir of a routed group: check that GROUP-cells is drained.")
@connection_options("With --state-topic or -b: a kafka-python client setting, as for "
                    "'panstream kafka' (repeat).")
@click.option("--merge", type=click.Choice(["auto", "partitioned", "sum"]), default="auto",
              show_default=True, help="With --state-dir/--state-topic: partitioned (messages keyed "
              "by the item) or sum; auto: partitioned for one topic over ipv4/range.",
              **env("RELEASE_MERGE"))
@click.option("--partitions", type=click.IntRange(min=1), default=None,
              help="With --merge partitioned: the topic's partition count (default: the one the "
                   "shards recorded).",
              **env("RELEASE_PARTITIONS"))
@click.option("--keyed/--unkeyed", default=False, show_default=True,
              help="With --state-dir/--state-topic: assert that messages are keyed by their item "
                   "(else a person is counted in every shard).", **env("RELEASE_KEYED"))
@click.option("--new-ledger", is_flag=True, default=False,
              help="With --state-dir/--state-topic: start a new release ledger (only where no "
                   "release was ever made from the shards).", **env("RELEASE_NEW_LEDGER"))
@click.option("--budget", type=FiniteFloatRange(min=0), default=None,
              help="With --new-ledger: the output budget of the group's new ledger (default 1; "
                   "shard files carry no budget of their own).", **env("RELEASE_BUDGET"))
@click.option("--epsilon", type=click.FloatRange(min=0, min_open=True), required=True,
              help="Output epsilon of this release, spent from the state's output budget.",
              **env("RELEASE_EPSILON"))
@click.option("--mechanism", type=click.Choice(MECHANISMS), default="laplace", show_default=True,
              help="laplace: discretized Laplace (unbiased); geometric: two-sided geometric, "
                   "clamped to [0, |X|].",
              **env("MECHANISM"))
@click.option("--by", default=None, metavar="/LEN|CELLS|country",
              help="A density map instead of one figure: per /LEN prefix, per CELLS of a range, "
                   "or country; costs EPSILON once (docs/maps.md).",
              **env("RELEASE_BY"))
@click.option("--csv", "csv_out", default=None, metavar="FILE|-",
              help="With --by: also write one CSV line per bucket to FILE ('-' = stdout, instead "
                   "of the summary).", **env("RELEASE_CSV"))
@click.option("--plot", "plot_out", default=None, metavar="FILE.png",
              help="With --by: also draw the map as a PNG (needs pip install 'panstream[plot]').",
              **env("RELEASE_PLOT"))
@click.option("--crop", "crop", type=click.IntRange(min=1), default=None, metavar="T",
              help="Frequency states: the threshold of the cropped mean and of 'seen >= T times' "
                   "(1..modulus-1; default min(4, modulus-1)).", **env("RELEASE_CROP"))
@json_option()
@handle_errors
def command(state: str | None, state_dir: str | None, state_topic: str | None,
            bootstrap: str | None, overrides: tuple[str, ...], security: dict[str, Any],
            merge: str, partitions: int | None, keyed: bool, new_ledger: bool,
            budget: float | None, epsilon: float,
            mechanism: str, by: str | None, csv_out: str | None, plot_out: str | None,
            crop: int | None, as_json: bool) -> None:
    """Release the noisy statistics of a state, spending output budget.

    Adds exact noise to the state's table, records the release in its privacy ledger and saves
    it before printing; a release beyond the budget is refused and nothing is drawn. The epsilon
    printed is the realized one. A Kafka group's shards (--state-dir, or --state-topic with -b)
    are merged into one estimate and charged to the group's ledger.

    \b
    Examples:
      panstream release -s web.pst --epsilon 0.5                   # a state file of 'ingest'
      panstream release -s web.pst --epsilon 0.25 --mechanism geometric --json
      panstream release --state-dir /var/lib/panstream --keyed --epsilon 0.5
      panstream release -s web.pst --epsilon 0.5 --by /24 --csv map.csv   # a density map

    Every option is listed below, briefly; docs/release.md ('every option') explains each,
    docs/cli.md the command, docs/maps.md the maps (--by), docs/windows.md a window's release.
    """
    for flag, value in (("--csv", csv_out), ("--plot", plot_out)):
        if value is not None and by is None:
            msg = f"{flag} writes a map: give --by too (e.g. --by /24)"
            raise ConfigurationError(msg)
    if plot_out is not None and by == "country":
        msg = "--plot draws maps of address universes; --by country has no picture (use --csv)"
        raise ConfigurationError(msg)
    if plot_out is not None:  # refuse before any budget is spent
        from panstream.release.plot import require_matplotlib

        require_matplotlib()
    if sum(x is not None for x in (state, state_dir, state_topic)) != 1:
        msg = "give exactly one of --state FILE, --state-dir DIR or --state-topic TOPIC"
        raise ConfigurationError(msg)
    _check_epsilon(state, epsilon, mechanism)
    if budget is not None and not new_ledger:
        msg = ("--budget sets the budget of a new group ledger: give it with --new-ledger (a "
               "state's budget is fixed when the state or the group's ledger is created)")
        raise ConfigurationError(msg)
    new_budget = DEFAULT_BUDGET if budget is None else budget
    options = {} if crop is None else {"t": crop}
    internal: dict[str, Any] | None = None
    definition: GroupDefinition | None = None
    group_store = state is None  # a Kafka group's store: say which group definition it holds
    if state_dir is not None:  # shards of 'panstream kafka' (panstream.state.stores)
        from panstream.cli.routed_check import check_routed, require_releasable
        from panstream.state.stores import DirectoryStore, release_state_dir

        # a routed group: what its internal topic still holds (refused before anything is spent)
        held = DirectoryStore(state_dir)
        definition = stored(held)
        internal = check_routed(held, bootstrap, overrides, security)
        require_releasable(internal)
        rel, _ = release_state_dir(state_dir, epsilon, mechanism, merge, partitions, keyed,
                                   new_ledger, by=by, budget=new_budget, **options)
    elif state_topic is not None:
        rel, internal, definition = _release_topic(state_topic, bootstrap, overrides, security,
                                                   epsilon, mechanism, merge, partitions, keyed,
                                                   new_ledger, by, new_budget, options)
    else:
        assert state is not None
        # Under the state's lock (a running ingest would overwrite the charge); the ledger is
        # durable before the number is shown.
        rel = release_file(state, epsilon, mechanism, by=by, **options)
    if isinstance(rel, Release) and rel.density_high - rel.density_low >= 1:
        click.echo(f"panstream: warning: this release says nothing: its {100 * rel.confidence:g} % "
                   f"density interval [{rel.density_low:.3g}, {rel.density_high:.3g}] is as "
                   "wide as every possible density (0..1); raise --epsilon ('panstream plan' "
                   "shows the error first)", err=True)
    if group_store and not as_json:  # --json: the "group_definition" key
        click.echo(f"panstream: {definition_line(definition)}", err=True)
    group_counters = isinstance(rel, FrequencyRelease) and state is None
    if group_counters:  # a Kafka group's counters: say what at-least-once delivery can add
        click.echo(f"panstream: note: {GROUP_REPLAY_NOTE}", err=True)
    from panstream.country.release import CountryRelease

    if isinstance(rel, CountryRelease):
        _show_countries(rel, csv_out, as_json)
        return
    if isinstance(rel, (Release, FrequencyRelease, SketchRelease)):
        if as_json:
            out = rel.to_dict()
            if group_counters:
                out["replay_note"] = GROUP_REPLAY_NOTE
            if internal is not None:  # whether drained; the lag itself stays an operator's line
                out["internal_topic"] = {k: v for k, v in internal.items() if k in RELEASED}
            if group_store:
                out["group_definition"] = summary(definition)
            emit_json(out)
        else:
            click.echo(format_release(rel) if isinstance(rel, Release)
                       else format_sketch_release(rel) if isinstance(rel, SketchRelease)
                       else format_frequency_release(rel))
        return
    _show_map(rel, csv_out, as_json)
    if plot_out is not None:
        try:
            rel.plot(plot_out)
        except ConfigurationError as exc:
            msg = f"{exc} (the map was released, charged and printed above)"
            raise ConfigurationError(msg) from None
        click.echo(f"map picture written to {plot_out}", err=True)


#: What a release's ``--json`` says of a routed group's internal topic: whether it was checked and
#: drained, and the slices without a snapshot (the store's own files say that). Not the counts or
#: the slices of what is pending, nor which slices never received a record: those follow the
#: traffic, and a release is made to be published (stderr and ``inspect`` say them to the operator,
#: as the lag metric and ``kafka-consumer-groups --describe`` do).
RELEASED = ("name", "slices", "missing", "checked", "drained")

#: What a release of a Kafka group's counters (frequency family) says about replays: delivery is
#: at-least-once, and a counter counts a replayed arrival again (docs/kafka.md, "Replays after a
#: crash"). The bound is in checkpoint intervals: the interval is the consumers' setting, and the
#: volume it holds is not known here (nothing counts arrivals).
GROUP_REPLAY_NOTE = (
    "a Kafka group's counters are at-least-once: each crash of a member (kill -9, host loss, an "
    "expired session) may have counted up to one --checkpoint-interval of the arrivals it routed "
    "twice, and up to one more of its slices' arrivals if it fell between a slice save and its "
    "commit; a clean stop or rebalance counts nothing twice. The interval above does not include "
    "this (docs/kafka.md, 'Replays after a crash')")


def _check_epsilon(state: str | None, epsilon: float, mechanism: str) -> None:
    """Warn about an output epsilon that protects nothing; for a density state file, refuse
    (before anything is spent) a release whose 95 % interval would cover every possible density.

    Raises:
        ConfigurationError: the release (or the state's own table) could say nothing.
    """
    from panstream.calibration import calibrate
    from panstream.errors import PanstreamError
    from panstream.planning import NO_PRIVACY_EPSILON, Z95
    from panstream.release.stats import noise_quantile, output_law, stderr_state
    from panstream.state.files import read_head
    from panstream.universe import Universe

    if epsilon > NO_PRIVACY_EPSILON:
        click.echo(f"panstream: warning: --epsilon {epsilon:g} gives practically no privacy (a "
                   f"likelihood ratio of e^{epsilon:g} between neighbouring tables); 1 or less "
                   "is usual", err=True)
    if state is None:
        return
    try:  # only the head: the full load happens under the lock, in release_file
        _, params, _ = read_head(state)
        if params.get("kind") != "density":
            return
        cells = int(params["cells"])
        cal = calibrate(float(params["epsilon"]), str(params["calibration"]))
        law, _ = output_law(epsilon, mechanism)
        universe = Universe.parse(str(params["universe"]))
    except (PanstreamError, KeyError, TypeError, ValueError):
        return  # release_file reports what is wrong with the state or the options
    scale = cells * float(cal.p - cal.q)
    table = stderr_state(0.0, cells, cal.p, cal.q) * Z95
    if table >= 1:
        msg = (f"{state} cannot say anything: its table (state epsilon "
               f"{cal.epsilon_state:.3g}) gives every density a 95 % error of +-{table:.3g}, more "
               "than the whole range 0..1, so a release would spend budget on noise; nothing was "
               "spent. Start a new state with a larger --epsilon ('panstream plan' shows the "
               "error first)")
        raise ConfigurationError(msg)
    alone = noise_quantile(0.0, law) / scale
    if alone >= 1:
        need = epsilon * alone / 0.1
        msg = (f"--epsilon {epsilon:g} is too small to say anything about {state}: the release "
               f"noise alone gives its density a 95 % error of +-{alone:.3g}, more than the whole "
               f"range 0..1 (distinct +-{alone * cells:,.3g} of {universe.spec}); nothing was "
               f"spent. The error falls as 1/epsilon: --epsilon {need:.2g} gives +-0.1")
        raise ConfigurationError(msg)


def _show_countries(rel: Any, csv_out: str | None, as_json: bool) -> None:
    """Print a by-country release (summary or JSON) and write its CSV; the ledger is durable."""
    from panstream.country.release import format_country_release

    if csv_out == "-":
        click.echo(rel.csv_text(), nl=False)
        return
    if csv_out is not None:
        try:
            with open(csv_out, "w", encoding="utf-8") as f:
                f.write(rel.csv_text())
        except OSError as exc:
            click.echo(f"cannot write the CSV to {csv_out}: {exc.strerror or exc}; the release "
                       "was charged: its rows follow", err=True)
            click.echo(rel.csv_text(), nl=False)
            return
    if as_json:
        emit_json(rel.to_dict())
    else:
        click.echo(format_country_release(rel))


def _show_map(m: MapRelease, csv_out: str | None, as_json: bool) -> None:
    """Print a map (summary or JSON) and write its CSV; the ledger is already durable."""
    if csv_out == "-":
        click.echo(m.csv_text(), nl=False)
    elif csv_out is not None:
        try:
            m.to_csv(csv_out)
        except OSError as exc:
            msg = (f"cannot write the map's CSV to {csv_out}: {exc.strerror or exc}; the map was "
                   "released and charged: its rows are printed below instead")
            click.echo(msg, err=True)
            csv_out = "-"
            click.echo(m.csv_text(), nl=False)
    if csv_out == "-":
        return
    if as_json:
        emit_json(m.to_dict())
    else:
        click.echo(format_map(m))


def _release_topic(topic: str, bootstrap: str | None, overrides: tuple[str, ...],
                   security: dict[str, Any], epsilon: float, mechanism: str, merge: str,
                   partitions: int | None, keyed: bool, new_ledger: bool,
                   by: str | None = None, budget: float = DEFAULT_BUDGET,
                   options: dict[str, Any] | None = None
                   ) -> tuple[Any, dict[str, Any] | None, GroupDefinition | None]:
    """Release the shards of a state topic, charged to the topic's release ledger record; for a
    routed group's slices, after asking the broker what its internal topic still holds
    (:mod:`panstream.cli.routed_check`). Returns the release and that answer."""
    if not bootstrap:
        msg = "--state-topic needs -b/--bootstrap-server HOST:PORT (or PANSTREAM_KAFKA_BOOTSTRAP)"
        raise ConfigurationError(msg)
    logging.getLogger("kafka").setLevel(logging.CRITICAL)  # reconnect chatter; errors raise
    from panstream.cli.routed_check import check_routed, require_releasable
    from panstream.sources import kafka as src
    from panstream.state.stores import release_store

    client = src.state_client(bootstrap, src.parse_overrides(overrides), security)
    with notice_if_slow(f"still {src.connecting_notice(client)}"):
        store = src.topic_store(topic, client, create=False)
    try:
        definition = stored(store)
        internal = check_routed(store, bootstrap, overrides, security)
        require_releasable(internal)
        rel, _ = release_store(store, epsilon, mechanism, merge, partitions, keyed, new_ledger,
                               by=by, budget=budget, **(options or {}))
    finally:
        store.log.close()  # type: ignore[attr-defined]  # KafkaRecordLog: flushes, then closes
    return rel, internal, definition
