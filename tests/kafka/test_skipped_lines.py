"""A topic that parses, but not all of it: the member says so, in one bit, not in counts.

A log shipper's topic of access-log lines with 2 % junk passes the first-sample check (under 1 %
accepted stops a member: tests/kafka/test_routed.py) and used to be routed without a word unless
counts were opted into (issue 37: 423 of 20,423 lines skipped, nothing said). Now the routing
stage says it once, when it decides its first sample, as the loud failure does: whether at least
1 % of the sample's first 1,000 non-empty lines were skipped, in words naming the format and the
universe, never a count (docs/threat-model.md, "The loud-failure decision"). ``--exact-counts``,
which prints exact counts anyway, adds the sample's.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _kafka_helpers import Broker, committed_offsets
from test_routed import IDLE, clf, member_argv, send_round_robin

from panstream.inputs.check import SKIPPED_SHARE, skipped_notice

NOTICE = "some of the first lines could not be read"


def test_the_notice_is_one_bit_of_the_sample() -> None:
    """The observer of the notice learns whether the share reached 1 %, and nothing else: one
    junk line more or less leaves the line as it was unless it crosses the threshold."""
    u = "ipv4:10.9.0.0/16"
    lines = {skipped_notice({"accepted": 1000 - j, "empty": 0, "malformed": j, "outside": 0},
                            "clf", u) for j in range(10, 200)}
    assert len(lines) == 1 and NOTICE in lines.pop()
    assert skipped_notice({"accepted": 991, "empty": 0, "malformed": 9, "outside": 0}, "clf",
                          u) is None  # under the threshold: silent
    outside = skipped_notice({"accepted": 900, "empty": 0, "malformed": 0, "outside": 100}, "clf", u)
    junk = skipped_notice({"accepted": 900, "empty": 0, "malformed": 100, "outside": 0}, "clf", u)
    assert outside == junk  # not which of the two: both fixes are named
    assert SKIPPED_SHARE == 0.01 and "1 % or more" in junk  # type: ignore[operator]
    # an auth.log's lines mostly name no client: the pattern formats are never told
    assert skipped_notice({"accepted": 5, "empty": 0, "malformed": 995, "outside": 0}, "sshd",
                          u) is None
    exact = skipped_notice({"accepted": 979, "empty": 0, "malformed": 15, "outside": 6}, "clf", u,
                           exact=True)
    assert exact is not None and "15 malformed and 6 outside of the first 1,000 lines" in exact


def _topic_with_junk(topic: str, producer: Any) -> dict[int, int]:
    """20,423 lines, 500 a message, round robin over 2 partitions: every 48th line is junk
    (425 of them, 2.1 %, in the first sample too)."""
    lines = [("GET /favicon.ico HTTP/1.1" if i % 48 == 47 else clf(f"10.9.{i % 200}.{i % 250}", i))
             for i in range(20_423)]
    msgs = ["\n".join(lines[i:i + 500]).encode() for i in range(0, len(lines), 500)]
    return send_round_robin(producer, topic, msgs, 2, {})


@pytest.mark.kafka
@pytest.mark.parametrize("exact", [False, True], ids=["default", "exact-counts"])
def test_a_topic_with_some_junk_is_said_once(
        kafka_broker: Broker, topic_factory: Callable[..., str], producer: Any, admin: Any,
        tmp_path: Path, exact: bool) -> None:
    topic = topic_factory(2)
    hw = _topic_with_junk(topic, producer)
    group = f"g-junk-{int(exact)}"
    run = subprocess.run(member_argv(kafka_broker, topic, group, "ipv4:10.9.0.0/16",
                                     tmp_path / "s", "--epsilon", "1", "--value-format", "lines",
                                     "-f", "clf", "--idle-timeout", IDLE,
                                     *(["--exact-counts"] if exact else [])),
                         capture_output=True, timeout=120)
    err = run.stderr.decode()
    assert run.returncode == 0, err[-2000:]
    assert committed_offsets(admin, group) == hw  # routed all the same
    said = [ln for ln in err.splitlines() if NOTICE in ln]
    assert len(said) == 1, err
    assert said[0].startswith(f"panstream: {topic} (--value-format lines): {NOTICE} (1 % or more "
                              "gave no address in ipv4:10.9.0.0/16 when read as")
    out = json.loads(run.stdout)
    if exact:
        assert "malformed and 0 outside of the first " in said[0]  # the first polls: 1,000 or more
        assert out["malformed_skipped"] == 20_423 // 48
    else:  # no count at all: not in the notice, not in the summary
        assert "--exact-counts exactly" in said[0]
        assert not any(ch.isdigit() for ch in said[0].split("could not be read")[1]
                       .replace("1 %", "").replace("ipv4:10.9.0.0/16", ""))
        assert "malformed_skipped" not in out
