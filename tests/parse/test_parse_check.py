"""The loud-failure decision (panstream.parse_check.verdict): a pure function of a sample's counts.

It must stop a run that parses to (almost) nothing, say which option fixes it, and never stop a
log that is merely sparse in the universe or too short to judge.
"""

from __future__ import annotations

import pytest

from panstream.parse_check import MIN_LINES, verdict
from panstream.universe import Universe

U = Universe.parse("ipv4:10.0.0.0/16")


def counts(accepted: int, malformed: int = 0, outside: int = 0, empty: int = 0) -> dict[str, int]:
    return {"accepted": accepted, "malformed": malformed, "outside": outside, "empty": empty}


@pytest.mark.parametrize(("c", "fmt"), [
    (counts(950, 50), "clf"),                       # a normal log
    (counts(20, 1980), "clf"),                      # 1 % accepted: sparse, not wrong
    (counts(0, MIN_LINES - 1), "clf"),              # too short to judge
    (counts(0, 0, 0, 5000), "clf"),                 # only blank lines
    (counts(5, 4000), "sshd"),                      # an auth.log with few logins
])
def test_no_verdict_on_logs_that_parse(c: dict[str, int], fmt: str) -> None:
    assert verdict(c, fmt, U) is None


def test_a_json_log_read_as_clf_names_format_shares_and_the_fix() -> None:
    msg = verdict(counts(3, 299_961, 36), "clf", U, auto=True)
    assert msg is not None and "\n" not in msg
    assert "100 % malformed" in msg and "0 % outside" in msg and "(-f clf, detected)" in msg
    assert "json:PATH" in msg and "field:N" in msg and msg.endswith("--keep-going to go on anyway")


def test_the_wrong_universe_is_named_not_the_format() -> None:
    msg = verdict(counts(0, 10, 5000), "alb", U)
    assert msg is not None and "outside ipv4:10.0.0.0/16" in msg and "ipv6:PREFIX@64" in msg


@pytest.mark.parametrize(("fmt", "needle"), [
    ("json:request.remote_ip", "json:httpRequest.remoteIp"), ("csv:ip", "-f csv:NAME"),
    ("w3c:cip", "w3c:c-ip"), ("zeek:orig", "zeek:id.orig_h"), ("sshd", "--keep-going"),
    ("field:3", "field 3"), ("xff", "X-Forwarded-For"),
])
def test_each_format_gets_its_own_hint(fmt: str, needle: str) -> None:
    msg = verdict(counts(0, 5000), fmt, U)
    assert msg is not None and needle in msg


def test_noisy_counts_are_fine_even_negative() -> None:
    assert verdict({"accepted": -12, "malformed": 4000, "outside": -3, "empty": 2}, "clf", U)
    assert verdict(type("S", (), {"accepted": 3000, "malformed": 9, "outside": 1, "empty": 0})(),
                   "clf", U) is None


def test_noisy_counts_wait_for_enough_lines_then_decide() -> None:
    """With noise sd 14.1 (one window), no verdict under 2 x 3 x 14.1 / 1 % = 8,460 lines."""
    assert verdict(counts(0, 8000), "clf", U, sd=14.1) is None
    assert verdict(counts(0, 20_000), "clf", U, sd=14.1) is not None
    assert verdict(counts(170, 20_000), "clf", U, sd=14.1) is None  # within 3 sd of 1 %
