"""The loud-failure decision (panstream.inputs.check.verdict): a pure function of a sample's counts.

It must stop a run that parses to (almost) nothing, say which options fix it, never stop a log
that is merely sparse in the universe, judge a short input on what it had, and reveal one bit: the
line it gives for an exact sample depends on nothing but the verdict and the run's parameters.
"""

from __future__ import annotations

import re

import pytest

from panstream.inputs.check import MIN_LINES, verdict
from panstream.universe import Universe

U = Universe.parse("ipv4:10.0.0.0/16")


def counts(accepted: int, malformed: int = 0, outside: int = 0, empty: int = 0) -> dict[str, int]:
    return {"accepted": accepted, "malformed": malformed, "outside": outside, "empty": empty}


@pytest.mark.parametrize(("c", "fmt"), [
    (counts(950, 50), "clf"),                       # a normal log
    (counts(20, 1980), "clf"),                      # 1 % accepted: sparse, not wrong
    (counts(0, 0, 0, 5000), "clf"),                 # only blank lines: nothing to judge
    (counts(0), "clf"),                             # an empty input
    (counts(5, 4000), "sshd"),                      # an auth.log with few logins
    (counts(1, 9), "haproxy"),                      # 10 lines, one client: judged, and fine
])
def test_no_verdict_on_logs_that_parse(c: dict[str, int], fmt: str) -> None:
    assert verdict(c, fmt, U) is None


@pytest.mark.parametrize("n", [1, 10, MIN_LINES - 1, 999])
def test_a_short_sample_is_judged_on_what_it_had(n: int) -> None:
    """An input that ends before the sample is complete (10 HAProxy lines read as CLF) gets the
    same verdict as a long one; the 200-line floor applies to noisy released totals only."""
    assert verdict(counts(0, n), "clf", U) is not None
    assert verdict(counts(0, n), "clf", U, sd=14.1) is None


def test_a_json_log_read_as_clf_names_the_format_and_both_fixes() -> None:
    msg = verdict(counts(3, 299_961, 36), "clf", U, auto=True)
    assert msg is not None and "\n" not in msg
    assert "(-f clf, detected)" in msg and "auto-detected" not in msg
    assert "json:PATH" in msg and "field:N" in msg and "haproxy" in msg
    assert "outside ipv4:10.0.0.0/16" in msg and "ipv6:PREFIX@64" in msg
    assert msg.endswith("--keep-going to go on anyway")


@pytest.mark.parametrize("other", [
    counts(0, 1000, 0), counts(0, 999, 1), counts(0, 0, 1000), counts(0, 500, 500),
    counts(9, 991, 0), counts(0, 1, 0), counts(0, 0, 7, 300), counts(3, 299_961, 36),
])
def test_the_exact_sample_line_is_one_bit(other: dict[str, int]) -> None:
    """Issue 27, item 4: the line given for an exact sample is a function of the verdict and of
    the run's public parameters only. Every failing sample, whatever its size and shares, gets
    the very same line (it used to say "of ~601 lines" against "~600", and shares in 0.1 %
    steps)."""
    ref = verdict(counts(0, 1000), "alb", U, auto=True)
    assert ref is not None and verdict(other, "alb", U, auto=True) == ref
    assert "~" not in ref and re.findall(r"[\d,.]+ ?%", ref) == ["1 %"]  # the public threshold


def test_released_totals_may_show_their_noisy_shares() -> None:
    """Under a counting opt-in the released totals are printed anyway, at their printed cost: the
    line may add them."""
    msg = verdict(counts(-4, 20_000, 31), "clf", U, sd=14.1, released=True)
    assert msg is not None and "100 % malformed" in msg and "0.2 % outside" in msg
    assert "the lines counted so far" in msg


@pytest.mark.parametrize(("fmt", "needle"), [
    ("json:request.remote_ip", "json:httpRequest.remoteIp"), ("csv:ip", "-f csv:NAME"),
    ("w3c:cip", "w3c:c-ip"), ("zeek:orig", "zeek:id.orig_h"), ("sshd", "--keep-going"),
    ("field:3", "field 3"), ("xff", "X-Forwarded-For"), ("pam", "try the pattern"),
    ("none", "no known log format fits"),
])
def test_each_format_gets_its_own_hint(fmt: str, needle: str) -> None:
    msg = verdict(counts(0, 5000), fmt, U)
    assert msg is not None and needle in msg


def test_a_universe_nothing_can_lie_outside_gets_no_universe_hint() -> None:
    msg = verdict(counts(0, 5000), "clf", "hashed-ip:65536")
    assert msg is not None and "outside" not in msg


def test_noisy_counts_are_fine_even_negative() -> None:
    assert verdict({"accepted": -12, "malformed": 4000, "outside": -3, "empty": 2}, "clf", U)
    assert verdict(type("S", (), {"accepted": 3000, "malformed": 9, "outside": 1, "empty": 0})(),
                   "clf", U) is None


def test_noisy_counts_wait_for_enough_lines_then_decide() -> None:
    """With noise sd 14.1 (one window), no verdict under 2 x 3 x 14.1 / 1 % = 8,460 lines."""
    assert verdict(counts(0, 8000), "clf", U, sd=14.1) is None
    assert verdict(counts(0, 20_000), "clf", U, sd=14.1) is not None
    assert verdict(counts(170, 20_000), "clf", U, sd=14.1) is None  # within 3 sd of 1 %
