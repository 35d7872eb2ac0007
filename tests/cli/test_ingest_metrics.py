"""``ingest --metrics-port`` without ``--window`` (issue 37: it had no metrics at all).

A live run on standard input with a release every second serves liveness (uptime, checkpoints
and releases made, all on fixed clocks from the start) and the last periodic release (estimate,
interval, its epsilon), which stdout prints anyway. Nothing that counts arrivals is served.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from metrics_scrape import by_name, ingest_serving

ALLOWED = {"panstream_ingest_uptime_seconds", "panstream_ingest_checkpoints_total",
           "panstream_ingest_checkpoints_created", "panstream_releases_total",
           "panstream_releases_created", "panstream_release_estimate", "panstream_release_low",
           "panstream_release_high", "panstream_release_epsilon"}


def test_ingest_without_window_serves_liveness_and_the_last_release() -> None:
    with ingest_serving("-u", "ipv4:10.0.0.0/24", "-f", "plain", "--release-every", "1",
                        "--release-epsilon", "0.5", "--budget", "100", "--json",
                        stdout=subprocess.PIPE) as (proc, port):
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("".join(f"10.0.0.{i}\n" for i in range(100)))
        proc.stdin.flush()
        release = json.loads(proc.stdout.readline())["release"]  # the first periodic release
        deadline = time.monotonic() + 60
        while by_name(port).get("panstream_releases_total", ({}, 0))[1] < 1:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        got = by_name(port)
        assert set(got) <= ALLOWED, set(got) - ALLOWED  # nothing that counts arrivals
        assert got["panstream_ingest_uptime_seconds"][1] > 0
        labels, est = got["panstream_release_estimate"]
        assert labels == {"statistic": "distinct", "family": "density"}
        if got["panstream_releases_total"][1] == 1:  # still the release read above
            assert est == pytest.approx(release["distinct"])  # --json rounds to 10 digits
            assert got["panstream_release_low"][1] == pytest.approx(release["distinct_low"])
        assert got["panstream_release_epsilon"][1] == 0.5
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
