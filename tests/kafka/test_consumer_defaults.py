"""The consumer settings panstream chooses when ``-C`` says nothing (issue 26: start-up).

kafka-python 3's own session timeout is 45 s, and a broker that holds a new group's join open for
half the session (Tansu 0.6 does) kept a member from its first slice for 23 s. panstream's default
is 6 s, the smallest session a Kafka broker accepts by default (``group.min.session.timeout.ms``),
with a heartbeat every second. The price: a member whose revoke-time snapshot write takes seconds
sends no heartbeat meanwhile, so a member that will hold a large table is told, once, how to
raise the session. (Start-up times are measured by ``bench/bench_kafka_group.py``; tests do not
time anything.)
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from _kafka_helpers import panstream_cmd

from panstream.sources.kafka.config import CONSUMER_DEFAULTS, consumer_config


def test_default_group_settings_join_fast_and_keep_heartbeats_inside_the_session() -> None:
    session, beat = CONSUMER_DEFAULTS["session_timeout_ms"], CONSUMER_DEFAULTS["heartbeat_interval_ms"]
    assert session == 6000 and beat * 3 <= session
    cfg = consumer_config("127.0.0.1:9092", "g", {"session_timeout_ms": 30000})
    assert cfg["session_timeout_ms"] == 30000 and cfg["heartbeat_interval_ms"] == 1000  # -C wins


def _start_lines(tmp_path: Path, universe: str, *extra: str) -> str:
    """stderr of a member that finds no broker (it prints its layout first, then exits 1)."""
    run = subprocess.run(panstream_cmd(
        "kafka", "-b", "127.0.0.1:9", "-t", "t", "-g", "g", "-u", universe, "--epsilon", "1",
        "--state-dir", str(tmp_path), "-C", "bootstrap_timeout_ms=500", *extra),
        capture_output=True, timeout=60)
    assert run.returncode == 1
    return run.stderr.decode()


def test_a_large_table_is_told_how_to_raise_the_session(tmp_path: Path) -> None:
    """With kafka-python (whose IO thread writes the slices on a revoke, sending no heartbeat
    meanwhile) a /0 table (512 MiB) gets one note naming the -C settings; a /16 (64 KiB) does not,
    nor a member that already set its session. With librdkafka (the default) no member does: its
    heartbeats run on a thread of their own."""
    kp = ("--source-client", "kafka-python")
    big = _start_lines(tmp_path, "ipv4:0.0.0.0/0", *kp)
    note = [ln for ln in big.splitlines() if "raise the 6 s session" in ln]
    assert len(note) == 1 and "-C session_timeout_ms=30000" in note[0] and "512.0 MiB" in note[0]
    assert "raise the 6 s session" not in _start_lines(tmp_path, "ipv4:10.0.0.0/16", *kp)
    assert "raise the 6 s session" not in _start_lines(
        tmp_path, "ipv4:0.0.0.0/0", "-C", "session_timeout_ms=30000", *kp)
    assert "raise the 6 s session" not in _start_lines(tmp_path, "ipv4:0.0.0.0/0")
