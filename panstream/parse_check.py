"""Loud failure: tell a wrong format or universe from a log that simply has few clients.

A log read with the wrong ``-f`` (JSON read as ``clf``, a CSV export read as ``plain``) or into the
wrong universe (public clients in ``ipv4:10.0.0.0/16``, IPv6 clients in an ``ipv4`` universe) used
to give exit 0, "~299,961 malformed", a saved state and a release of about 0. :func:`verdict` looks
at the counts of a sample of lines and returns one line that names the format used, the shares
malformed and outside, and the option that would fix it; ``None`` when the input looks right or the
sample is too small to say.

The function is pure (no I/O, no clock) so every source can use it: ``panstream ingest`` asks it
each time a telemetry window is released (the running totals, with their noise sd) and at the end
of the run, and stops at the first verdict; ``ingest`` (per input) and the Kafka routing stage (per
member) also ask it once about the exact counts of their first :data:`SAMPLE_LINES` non-empty
lines, which exist only until that decision (docs/threat-model.md, "The loud-failure decision").

Privacy: the counts it is given should be ones that may be printed anyway. ``ingest`` passes the
running sums of its noisy telemetry windows (:mod:`panstream.telemetry`), so the decision, and the
exit status that shows it, are post-processing of an eps_t-differentially private release and
reveal nothing more (docs/threat-model.md, "Operational counts"). With ``--exact-counts`` they are
exact, like everything else that run prints.

>>> verdict({"accepted": 0, "empty": 3, "malformed": 990, "outside": 10}, "clf", "ipv4:10.0.0.0/16")[:57]
'99 % malformed and 1 % outside ipv4:10.0.0.0/16 of ~1,000'
>>> verdict({"accepted": 950, "empty": 0, "malformed": 50, "outside": 0}, "clf", "ipv4:10.0.0.0/16") is None
True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from panstream.parse import format_name

#: Fewer accepted items than this share of the non-empty lines is "almost nothing accepted".
MIN_SHARE = 0.01

#: The share for the pattern formats (``regex``, ``sshd``): most lines of an auth.log are no login
#: attempt, so only a pattern that matches (almost) nothing is called wrong.
MIN_SHARE_PATTERN = 0.001

#: No verdict before this many non-empty lines were counted.
MIN_LINES = 200

#: Every source judges an input (a file, a pipe, a Kafka member's topics) on the exact counts of
#: its first this many non-empty lines (or of all of a shorter input), kept only until judged.
SAMPLE_LINES = 1000

#: Noisy counts: the accepted count must stay under the share by this many standard deviations,
#: and no verdict is given before the share exceeds twice that margin (``2 Z sd / share`` lines:
#: 8,500 lines for one 1-s window of the default noise, sd 14.1).
Z = 3.0


def _pct(x: float) -> str:
    x = min(max(x, 0.0), 1.0)
    return f"{100 * x:.0f} %" if x >= 0.01 or x == 0 else f"{100 * x:.1f} %"


def _format_fix(spec: str, auto: bool) -> str:
    kind, _, arg = spec.partition(":")
    if kind == "json":
        return (f"no string address at {arg!r} in these JSON lines: name the client field, "
                "-f json:request.remote_ip (Caddy), json:httpRequest.remoteIp (GCP), "
                "json:downstream_remote_address (Envoy) or json:PATH")
    if kind in ("csv", "tsv"):
        return (f"no address in column {arg!r}: name the address column as the header does, "
                f"-f {kind}:NAME, or give its number, -f {kind}:N")
    if kind == "w3c":
        return f"no address in field {arg!r}: -f w3c:c-ip (CloudFront, IIS) or the #Fields: name"
    if kind == "zeek":
        return f"no address in field {arg!r}: -f zeek:id.orig_h (client) or zeek:id.resp_h"
    if kind in ("regex", "sshd"):
        return ("the pattern matched (almost) no line: try it on a line of the log (docs/logs.md); "
                "if the log has no such line yet, add --keep-going")
    if kind == "xff":
        return ("no address in the first field or the last quoted field (X-Forwarded-For): check "
                "the log_format, or use -f field:N or -f 'regex:...'")
    where = {"clf": "the first field", "plain": "whole lines", "alb": "field 4 (client:port)",
             "elb": "field 3 (client:port)", "vhost": "field 2"}.get(
        kind, f"field {arg}" if kind == "field" else kind)
    return (f"no address in {where}{' (auto-detected)' if auto else ''}: say where the client is, "
            "-f field:N (N-th blank-separated field), json:PATH, csv:COLUMN, w3c:FIELD, "
            "zeek:FIELD, alb, elb, vhost, sshd or 'regex:... (?P<ip>\\S+) ...' (docs/logs.md)")


def _universe_fix(spec: str) -> str:
    kind = spec.partition(":")[0]
    if kind == "ipv4":
        return (f"the addresses lie outside {spec}: use a universe that holds them (a prefix "
                "that covers the clients, or ipv6:PREFIX@64 for IPv6 clients; 'panstream plan' "
                "sizes it)")
    if kind == "ipv6":
        return (f"the addresses lie outside {spec}: use a prefix that covers the clients (or "
                "ipv4:PREFIX for IPv4 clients)")
    return f"the items lie outside {spec}: use a larger universe"


def verdict(counts: Mapping[str, Any] | Any, detected_format: str, universe: Any, *,
            auto: bool = False, sd: float = 0.0) -> str | None:
    """Decide whether (almost) nothing of a sample was accepted; if so, say why and what to do.

    Args:
        counts: ``accepted``, ``empty``, ``malformed`` and ``outside`` of the sample (a mapping or
            an object with those attributes, e.g. :class:`panstream.ingest.IngestStats`); noisy
            counts are fine (negative values count as 0).
        detected_format: the ``-f`` spelling used (:attr:`panstream.parse.Format.spec`).
        universe: the universe (a :class:`~panstream.universe.Universe` or its spec).
        auto: the format was detected (``-f auto``), not given.
        sd: the noise standard deviation of each count (0 for exact counts).

    Returns:
        ``None`` if the sample is fine or too small to judge (under :data:`MIN_LINES` non-empty
        lines, or with noise under ``2 Z sd / share``), else one line (no trailing period) naming
        the format, the shares malformed and outside, and the option that fixes it, ending with
        ``--keep-going``.

    The rule: ``accepted + Z sd < share x non-empty`` (share :data:`MIN_SHARE`, or
    :data:`MIN_SHARE_PATTERN` for ``regex``/``sshd``). A log whose true accepted share is 5 % or
    more would need noise below ``-(0.04 n + 3 sd) < -27 sd`` to be stopped: never, in practice.
    """
    def get(name: str) -> float:
        v = counts[name] if isinstance(counts, Mapping) else getattr(counts, name)
        return max(float(v), 0.0)

    accepted, malformed, outside = get("accepted"), get("malformed"), get("outside")
    nonempty = accepted + malformed + outside
    kind = detected_format.partition(":")[0]
    share = MIN_SHARE_PATTERN if kind in ("regex", "sshd") else MIN_SHARE
    if nonempty < max(MIN_LINES, 2 * Z * sd / share):
        return None
    if accepted + Z * sd >= share * nonempty:
        return None
    uspec = getattr(universe, "spec", str(universe))
    how = "detected" if auto else "given"
    head = (f"{_pct(malformed / nonempty)} malformed and {_pct(outside / nonempty)} outside "
            f"{uspec} of ~{nonempty:,.0f} lines read as {format_name(detected_format)} "
            f"(-f {detected_format}, {how})")
    fix = _universe_fix(uspec) if outside > malformed else _format_fix(detected_format, auto)
    return f"{head}: {fix}; or --keep-going to go on anyway"
