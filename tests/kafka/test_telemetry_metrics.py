"""What ``panstream kafka`` exports about the stream is covered by its guarantee (issue 10 §2), and
an unreachable broker is announced at once and fails with one clear line (issue 14 item 8).

The attack on metrics: a scraper of ``/metrics`` knows the traffic up to one message and guesses
whether it was there. Exact per-window counts (the old ``items_per_second``) and cumulative
malformed/outside counters answer exactly; now every count is a per-window geometric release at
the telemetry epsilon (sensitivity 2: the message and its item), and no guess gains more than
tanh(eps_t / 2) = 0.05 over a coin.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

from _kafka_helpers import Broker, Producer, free_port, kill_left, panstream_cmd

from panstream.sources.kafka import Metrics, consumer_config, unreachable_message
from panstream.telemetry import TelemetryPolicy

#: The noisy opt-in these tests exercise (--telemetry-epsilon 0.1; the default counts nothing).
EPS_T = 0.1


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _scrape(m: Metrics, name: str) -> float | None:
    return m.registry.get_sample_value(name)


def test_by_default_the_metrics_count_nothing() -> None:
    """Issue 21 §1: the default metrics have no message or item gauge at all; they show liveness
    (uptime, checkpoints), and lag and committed offsets (what the broker shows any client)."""
    clock = Clock()
    m = Metrics(clock=clock)
    m.batch(messages=5000, items=4990, malformed=7, outside=3)  # dropped: nothing outlives a batch
    clock.t = 2.0
    m.tick()
    names = {s.name for metric in m.registry.collect() for s in metric.samples}
    assert not any("per_second" in n or "messages" in n or "items" in n for n in names), names
    assert m.window is None
    assert _scrape(m, "panstream_kafka_telemetry_epsilon") == 0.0
    assert _scrape(m, "panstream_kafka_uptime_seconds") == 2.0
    m.committed.labels("t", "0").set(42)
    assert m.registry.get_sample_value("panstream_kafka_committed_offset",
                                       {"topic": "t", "partition": "0"}) == 42


def test_metrics_export_only_noisy_window_rates_and_no_cumulative_count() -> None:
    clock = Clock()
    m = Metrics(telemetry=TelemetryPolicy.noisy(EPS_T, 2), clock=clock)
    m.batch(messages=5000, items=4990, malformed=7, outside=3)
    clock.t = 0.5
    m.tick()  # not due: nothing published yet, the window keeps counting
    assert _scrape(m, "panstream_kafka_items_per_second") == 0.0
    clock.t = 1.0
    m.tick()
    assert set(m.window._exact.values()) == {0}  # the exact counts are gone
    assert _scrape(m, "panstream_kafka_telemetry_epsilon") == EPS_T
    assert round(_scrape(m, "panstream_kafka_telemetry_noise_sd") or 0, 1) == 28.3
    names = {s.name for metric in m.registry.collect() for s in metric.samples}
    # The old exact counters are gone; what counts items is a per-window rate.
    assert not any("malformed_messages" in n or "outside_items" in n for n in names)
    assert {"panstream_kafka_malformed_per_second", "panstream_kafka_outside_per_second"} <= names
    # A window without traffic is still released (noise only) on the clock's schedule.
    clock.t = 2.0
    m.tick()
    assert m.window.windows == 2


def test_exact_metrics_are_the_opt_in() -> None:
    clock = Clock()
    m = Metrics(telemetry=TelemetryPolicy.exact_counts(sensitivity=2), clock=clock)
    m.batch(messages=10, items=8, malformed=1, outside=1)
    clock.t = 2.0
    m.tick()
    assert _scrape(m, "panstream_kafka_items_per_second") == 4.0
    assert _scrape(m, "panstream_kafka_telemetry_epsilon") == math.inf


TRIALS = 20_000


def _advantage(policy: TelemetryPolicy) -> float:
    """Likelihood-ratio attack on one scraped window: the message and item rates of 1,000 vs 1,001
    messages; guess "1,001" when their sum is at least 2,002 (both counts move together)."""
    clock = Clock()
    m = Metrics(telemetry=policy, clock=clock)
    hits = {1000: 0, 1001: 0}
    for n in (1000, 1001):
        for _ in range(TRIALS):
            m.batch(messages=n, items=n)
            clock.t += 1.0
            m.tick()
            seen = (_scrape(m, "panstream_kafka_messages_per_second") or 0) + \
                (_scrape(m, "panstream_kafka_items_per_second") or 0)
            hits[n] += seen >= 2002
    return (hits[1001] - hits[1000]) / TRIALS


def test_one_message_more_is_hidden_in_the_scraped_metrics() -> None:
    """Exact metrics (the broken variant) give it away every time; noisy ones gain at most
    tanh(0.05) = 0.05. Difference of proportions: sd <= sqrt(0.5 / 20,000) = 0.005, bound
    0.05 + 6 sd = 0.080 (false failure < 1e-9)."""
    assert _advantage(TelemetryPolicy.exact_counts(sensitivity=2)) == 1.0
    adv = _advantage(TelemetryPolicy.noisy(EPS_T, 2))
    assert adv <= math.tanh(EPS_T / 2) + 6 * math.sqrt(0.5 / TRIALS), adv


def test_a_run_summary_counts_nothing_by_default(kafka_broker: Broker, topic_factory,
                                                 produce: Producer, tmp_path: Path) -> None:
    """The exit summary has no count by default and says so; under the noisy opt-in it gives noisy
    totals with eps_t per arrival and their sd, after a warning of what they cost."""
    topic = topic_factory(2)
    produce(topic, [b"10.0.0.%d" % i for i in range(200)] + [b"junk"])

    def run(group: str, *extra: str) -> subprocess.Popen[bytes]:
        argv = panstream_cmd("kafka", "-b", kafka_broker.bootstrap, "-t", topic, "-g", group,
                             "-u", "ipv4:10.0.0.0/16", "--epsilon", "1", "--state-dir",
                             str(tmp_path / group), "--idle-timeout", "2", "-C",
                             "session_timeout_ms=6000", "-C", "heartbeat_interval_ms=1000", *extra)
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    # the two runs at once (own groups and state directories): each spends its time waiting
    runs = [run("g-telemetry-json", "--json"), run("g-telemetry-text", "--telemetry-epsilon", "0.1")]
    try:
        (out_json, err_json), (out_text, err_text) = (p.communicate(timeout=90) for p in runs)
    finally:
        kill_left(*runs)
    assert runs[0].returncode == 0, err_json.decode()[-2000:]
    assert runs[1].returncode == 0, err_text.decode()[-2000:]
    out = json.loads(out_json)
    assert not {"messages", "items_applied", "malformed_skipped", "outside_universe_skipped",
                "count_sd"} & set(out)
    assert out["telemetry"].startswith("telemetry: nothing counted")
    text = out_text.decode()
    assert "~" in text and "telemetry epsilon 0.1 per ARRIVAL" in text and "sd 28.3 per count" in text
    assert "WARNING: noisy counts are on" in err_text.decode()


# ------------------------------------------------------------------ unreachable broker
def test_unreachable_broker_is_announced_at_once_and_fails_clearly(tmp_path: Path) -> None:
    """The first stderr line comes while the consumer is still waiting (it used to be silent for
    30 s); the error names the servers, the wait and what to check, without a traceback."""
    port = free_port()  # nothing listens there
    argv = panstream_cmd("kafka", "-b", f"127.0.0.1:{port}", "-t", "x", "-g", "g", "-u",
                         "range:10", "--epsilon", "1", "--state-dir", str(tmp_path / "s"),
                         "-C", "bootstrap_timeout_ms=3000")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    first = proc.stderr.readline().decode()
    assert f"connecting to Kafka at 127.0.0.1:{port} (waiting up to 3 s" in first
    assert "bootstrap_timeout_ms" in first
    rest = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1
    assert f"no Kafka broker answered at 127.0.0.1:{port} within 3 s" in rest
    assert "check -b HOST:PORT" in rest and "Traceback" not in rest


def test_the_state_topic_clients_honour_the_same_wait(tmp_path: Path) -> None:
    """-C bootstrap_timeout_ms reaches the state-topic admin client too (it waited 30 s)."""
    port = free_port()
    argv = panstream_cmd("kafka", "-b", f"127.0.0.1:{port}", "-t", "x", "-g", "g", "-u",
                         "range:10", "--epsilon", "1", "--state-topic", "st",
                         "-C", "bootstrap_timeout_ms=2000")
    run = subprocess.run(argv, capture_output=True, timeout=25)
    err = run.stderr.decode()
    assert run.returncode == 1 and "connecting to Kafka" in err.splitlines()[0]
    assert "within 2 s" in err and "state topic 'st'" in err


def test_unreachable_message_unit() -> None:
    cfg = consumer_config("10.9.9.9:9092,10.9.9.8:9092", "g", {"bootstrap_timeout_ms": 1500})
    msg = unreachable_message(cfg, TimeoutError())
    assert msg.startswith("no Kafka broker answered at 10.9.9.9:9092,10.9.9.8:9092 within 1.5 s")


def test_release_from_an_unreachable_state_topic_says_what_it_waits_for() -> None:
    """`release --state-topic` keeps its one-line output when the broker answers, and says what it
    waits for once the wait passes 2 s (it was silent for 30 s)."""
    port = free_port()
    run = subprocess.run(panstream_cmd("release", "-b", f"127.0.0.1:{port}", "--state-topic", "st",
                                       "--epsilon", "0.1", "-C", "bootstrap_timeout_ms=4000"),
                         capture_output=True, timeout=60)
    lines = run.stderr.decode().splitlines()
    assert run.returncode == 1 and len(lines) == 2, lines
    assert lines[0].startswith(f"panstream: still connecting to Kafka at 127.0.0.1:{port}")
    assert f"no Kafka broker answered at 127.0.0.1:{port} (for state topic 'st') within 4 s" in lines[1]


def test_a_quick_block_prints_no_notice(capsys) -> None:  # type: ignore[no-untyped-def]
    from panstream.cli.kafka_options import notice_if_slow

    with notice_if_slow("waiting", after=5.0):
        pass
    assert capsys.readouterr().err == ""
