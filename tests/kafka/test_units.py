"""Kafka pieces that need no broker: -C settings, message decoding, the chunked topic store, merges."""

from __future__ import annotations

import math

import numpy as np
import pytest
from fakes import MemoryLog

from panstream.errors import ConfigurationError, StateError
from panstream.estimators.density import DensityEstimator
from panstream.sources.kafka import Decoder, consumer_config, parse_overrides
from panstream.state.merge import (
    concatenate,
    kafka_partitions_of_cells,
    merge_partitioned,
    merge_sum,
    murmur2_partition,
)
from panstream.state.stores import TopicStore
from panstream.universe import Universe

Z = 5.33  # two-sided normal tail 1e-7 per check


# ------------------------------------------------------------------ -C key=value
def test_overrides_are_checked_against_kafka_python_defaults() -> None:
    got = parse_overrides(["session.timeout.ms=6000", "heartbeat-interval-ms=1000",
                           "check_crcs=false", "api_version=3.7", "client_id=x"])
    assert got == {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000,
                   "check_crcs": False, "api_version": (3, 7), "client_id": "x"}
    with pytest.raises(ConfigurationError, match="unknown Kafka consumer setting 'sesion_timeout_ms'"
                       ".*session_timeout_ms"):
        parse_overrides(["sesion_timeout_ms=1"])
    with pytest.raises(ConfigurationError, match="expected key=value"):
        parse_overrides(["session_timeout_ms"])
    with pytest.raises(ConfigurationError, match="auto-commit is always off"):
        parse_overrides(["enable_auto_commit=true"])


def test_overrides_take_librdkafkas_names_too() -> None:
    """librdkafka is the default source client, so its spelling of a setting panstream translates
    is taken for the kafka-python key (issue 37), and reaches librdkafka under its own name; one
    panstream does not translate is still an error (statistics would count messages)."""
    from panstream.sources.kafka.rdkafka import SETTINGS, rdkafka_config

    got = parse_overrides(["fetch.wait.max.ms=100", "sasl.username=u", "ssl.ca.location=/ca",
                           "socket.timeout.ms=9000", "allow.auto.create.topics=true"])
    assert got == {"fetch_max_wait_ms": 100, "sasl_plain_username": "u", "ssl_cafile": "/ca",
                   "request_timeout_ms": 9000, "allow_auto_create_topics": True}
    conf, _ = rdkafka_config(consumer_config("h:9092", "g", got))
    assert {SETTINGS[k]: conf[SETTINGS[k]] for k in got} == {  # type: ignore[index]
        "fetch.wait.max.ms": 100, "sasl.username": "u", "ssl.ca.location": "/ca",
        "socket.timeout.ms": 9000, "allow.auto.create.topics": True}
    with pytest.raises(ConfigurationError, match="or the librdkafka names of those panstream "
                       "translates"):
        parse_overrides(["statistics.interval.ms=1000"])


def test_consumer_config_keeps_auto_commit_off() -> None:
    cfg = consumer_config("127.0.0.1:9092", "g", {"max_poll_records": 10},
                          {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN",
                           "ssl_cafile": None})
    assert cfg["enable_auto_commit"] is False and cfg["group_id"] == "g"
    assert cfg["auto_offset_reset"] == "earliest" and cfg["max_poll_records"] == 10
    assert cfg["security_protocol"] == "SASL_SSL" and "ssl_cafile" not in cfg


# ------------------------------------------------------------------ decoding
def test_item_format_counts_malformed_messages() -> None:
    d = Decoder(Universe.parse("ipv4:10.0.0.0/16"), "item")
    r = d([b"10.0.0.1", b"10.0.1.0", b"junk", b"192.168.0.1", b"10.0.0.01", b""])
    assert r.indices.tolist() == [1, 256]
    assert (r.malformed, r.outside) == (3, 1)
    r = d([b"10.0.0.1\n10.0.0.2", b"10.0.0.3", None])  # newline inside an item: per-item path
    assert r.indices.tolist() == [3] and r.malformed == 2
    d = Decoder(Universe.parse("range:100"), "item")
    r = d([b"5", b"99", b"100", b"x"])
    assert r.indices.tolist() == [5, 99] and (r.malformed, r.outside) == (1, 1)


def test_lines_format_counts_malformed_lines() -> None:
    d = Decoder(Universe.parse("ipv4:10.0.0.0/16"), "lines")
    r = d([b"10.0.0.1\n10.0.0.2\nbad\n", b"10.0.0.3", None, b"\n\n10.0.9.9\n8.8.8.8"])
    assert sorted(r.indices.tolist()) == [1, 2, 3, 9 * 256 + 9]
    assert (r.malformed, r.outside) == (2, 1)
    with pytest.raises(ConfigurationError):
        Decoder(Universe.parse("range:10"), "json")


# ------------------------------------------------------------------ chunked topic store
def test_topic_store_chunks_replaces_and_survives_compaction() -> None:
    log = MemoryLog()
    store = TopicStore(log, chunk_bytes=1000)
    a = DensityEstimator("range:65536").snapshot()           # ~8 KiB: 9 chunks
    b = DensityEstimator("range:65536").snapshot()
    assert store.load("t/0") is None
    store.save("t/0", a)
    assert max(len(v or b"") for _, v in log.records) <= 1000 + 200
    assert store.load("t/0") == a
    store.save("t/0", b)
    store.save("t/1", a)
    assert store.load("t/0") == b and store.load("t/1") == a and store.keys() == ["t/0", "t/1"]
    log.compact()  # old version's chunks were tombstoned: only the newest snapshots remain
    assert sum(len(v or b"") for _, v in log.records) < len(a) + len(b) + 2000
    assert TopicStore(log, 1000).load("t/0") == b


def test_topic_store_reports_missing_chunks() -> None:
    log = MemoryLog()
    store = TopicStore(log, chunk_bytes=1000)
    store.save("t/0", DensityEstimator("range:65536").snapshot())
    log.records = [r for r in log.records if not r[0].endswith(b"#3")]
    log.flushed = len(log.records)
    with pytest.raises(StateError, match="missing chunk 3"):
        store.load("t/0")


# ------------------------------------------------------------------ merges
def test_partitioned_merge_takes_each_cell_from_its_owner() -> None:
    u = Universe.parse("ipv4:10.0.0.0/20")
    k = 3
    owner = kafka_partitions_of_cells(u, k)
    assert owner[5] == murmur2_partition(b"10.0.0.5", k)
    shards = {j: DensityEstimator(u) for j in range(k)}
    merged = merge_partitioned(shards, owner)
    bits = merged.bits()
    for j, est in shards.items():
        assert np.array_equal(bits[owner == j], est.bits()[owner == j])
    with pytest.raises(ConfigurationError):
        kafka_partitions_of_cells(Universe.parse("hashed:1024"), 3)


@pytest.mark.parametrize("calibration", ["rr", "tight"])
def test_cells_of_an_unconsumed_partition_get_fresh_d0_bits(calibration: str) -> None:
    """Partition 2 of 3 never had a shard: its cells were never seen, so their bits must be D0 =
    Bernoulli(q) (q = 0.269 for rr: a fair coin there would read as density 0.5). Exact binomial
    test at alpha 1e-6 over the ~21,800 cells of that partition."""
    stats = pytest.importorskip("scipy.stats")
    u = Universe.parse("range:65536")
    owner = kafka_partitions_of_cells(u, 3)
    shards = {j: DensityEstimator(u, calibration=calibration) for j in (0, 1)}
    bits = merge_partitioned(shards, owner).bits()[owner == 2]
    q = float(shards[0].q)
    assert stats.binomtest(int(bits.sum()), bits.size, q).pvalue > 1e-6


def test_both_merges_are_unbiased_for_keyed_streams() -> None:
    """Items keyed by their text land in their owner partition; both merges estimate the truth.

    False-failure probability: two z = 5.33 checks, < 1e-6.
    """
    u = Universe.parse("range:65536")
    k = 4
    owner = kafka_partitions_of_cells(u, k)
    seen = np.arange(0, 65536, 3)                      # 21,846 distinct cells
    shards = {j: DensityEstimator(u) for j in range(k)}
    for j in range(k):
        shards[j].update_indices(seen[owner[seen] == j].copy())
    s = merge_sum(list(shards.values()))
    assert abs(s.distinct - seen.size) <= Z * s.stderr_distinct
    cat = concatenate([shards[j] for j in range(k)]).estimate()
    assert math.isclose(cat.distinct, s.distinct, rel_tol=1e-9)
    part = merge_partitioned(shards, owner).estimate()
    assert abs(part.distinct - seen.size) <= Z * part.stderr_distinct
    # The partition-aware error does not grow with the shard count: about sqrt(K) smaller.
    assert part.stderr_distinct < 0.6 * s.stderr_distinct


# ------------------------------------------------------------------ command line
def test_cli_rejects_unknown_consumer_setting_with_one_line(tmp_path) -> None:
    from click.testing import CliRunner

    from panstream.cli.main import cli

    args = ["kafka", "-b", "127.0.0.1:1", "-t", "t", "-g", "g", "-u", "range:10", "--epsilon", "1",
            "--state-dir", str(tmp_path), "-C", "fetch_max_byte=10"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 2
    assert "unknown Kafka consumer setting 'fetch_max_byte'" in res.output
    assert "fetch_max_bytes" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(cli, args[:-4])  # neither --state-dir nor --state-topic
    assert res.exit_code == 2 and "exactly one of --state-dir" in res.output
    res = CliRunner().invoke(cli, ["kafka", "--help"])
    assert "PANSTREAM_KAFKA_CONFIG" in res.output and "PANSTREAM_METRICS_PORT" in res.output


def test_kafka_sketch_without_universe_uses_the_default_grid_as_ingest_does(tmp_path) -> None:
    """``kafka --estimator sketch`` without ``-u`` routes the grid ``ingest --estimator sketch``
    uses (``sketch:4096x24:ip``); every other family still needs ``-u``, in one line. No broker:
    the run stops at a later check (an unknown -C setting, a partition layout), after the
    universe was resolved."""
    import click
    from click.testing import CliRunner

    from panstream.cli.cmd_kafka import kafka_universe
    from panstream.cli.main import cli
    from panstream.sketch.sfm import SketchGrid

    assert kafka_universe("sketch", None).spec == SketchGrid().spec == "sketch:4096x24:ip"
    given = SketchGrid.parse_spec("sketch:1024x24:id")
    assert kafka_universe("sketch", given) is given
    for family in ("density", "frequency"):
        with pytest.raises(click.UsageError, match=f"--estimator {family} needs -u/--universe"):
            kafka_universe(family, None)
    base = ["kafka", "-b", "127.0.0.1:1", "-t", "t", "-g", "g", "--epsilon", "1",
            "--state-dir", str(tmp_path)]
    env = {"PANSTREAM_UNIVERSE": None}
    res = CliRunner().invoke(cli, [*base, "--estimator", "sketch", "-C", "fetch_max_byte=10"],
                             env=env)
    assert res.exit_code == 2 and "unknown Kafka consumer setting" in res.output, res.output
    res = CliRunner().invoke(cli, [*base, "--estimator", "sketch", "--layout", "partition"],
                             env=env)
    assert res.exit_code == 2 and "needs --layout slices" in res.output, res.output
    res = CliRunner().invoke(cli, base, env=env)
    assert res.exit_code == 2 and "--estimator density needs -u/--universe" in res.output
    assert "Traceback" not in res.output
