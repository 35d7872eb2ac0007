"""The ``-f`` formats: their spellings, names and the kinds a loud failure treats as sparse.

Formats (``--format``; docs/logs.md has a recipe for each):

``plain``
    One item per line; surrounding spaces, tabs and a trailing CR are tolerated.
``clf``
    Apache/nginx common or combined log: the item is the first field, up to the first space.
``field:N``, ``alb``, ``elb``, ``vhost``
    The N-th whitespace-separated field (1-based, like awk's ``$N``; ALB = 4, ELB = 3, Apache
    ``vhost_combined`` = 2).
``json:PATH``, ``csv:COLUMN``, ``tsv:COLUMN``, ``w3c:FIELD``, ``zeek:FIELD``, ``regex:PATTERN``,
``sshd``, ``pam``, ``haproxy``, ``squid``, ``apache-error``, ``nginx-error``, ``xff[:CIDR,...]``
    The extractors of :mod:`panstream.inputs.extractors`.
``auto``
    Recognised per input from its first lines (:func:`panstream.inputs.detection.detect`), which
    names its choice, or says that no known format fits (kind ``none``).

GoAccess's ``--log-format`` names are accepted as spellings of these (:data:`ALIASES`).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from panstream.errors import ConfigurationError

#: Formats :func:`parse_format` accepts without an argument.
FORMATS = ("plain", "clf", "auto", "alb", "elb", "vhost", "sshd", "xff", "pam", "haproxy", "squid",
           "apache-error", "nginx-error")

#: GoAccess's ``--log-format`` names (and a few common spellings) for the formats above, matched
#: ignoring case: ``-f COMBINED`` is ``-f clf``. The client is where GoAccess's ``%h`` sits.
ALIASES = {
    "combined": "clf", "common": "clf", "ncsa": "clf", "traefikclf": "clf", "nginx": "clf",
    "apache": "clf", "vcombined": "vhost", "vcommon": "vhost", "w3c": "w3c:c-ip",
    "cloudfront": "w3c:c-ip", "iis": "w3c:c-ip", "awsalb": "alb", "caddy": "json:request.client_ip",
    "cloudstorage": "csv:c_ip", "awss3": "field:5", "zeek": "zeek:id.orig_h",
    "auth": "sshd", "openssh": "sshd", "syslog-sshd": "sshd", "squid-native": "squid",
    "apache_error": "apache-error", "error_log": "apache-error", "nginx_error": "nginx-error",
}

#: The kind ``-f auto`` resolves to when no known format fits: every line is malformed, and the
#: loud-failure check says so (not offered in ``--help``).
NO_FORMAT = "none"

#: Formats written ``KIND:ARG`` (``xff`` also takes one: the trusted proxies).
ARG_FORMATS = ("field", "json", "csv", "tsv", "w3c", "zeek", "regex", "xff")

#: The field of the client address in the whitespace-separated formats.
FIELD_OF = {"alb": 4, "elb": 3, "vhost": 2}

#: What ``-f`` accepts, for messages and ``--help``.
FORMAT_HELP = ("plain, clf (combined, common), field:N, json:PATH, csv:COLUMN, tsv:COLUMN, "
               "w3c:FIELD, zeek:FIELD, 'regex:PATTERN' (one named group), xff[:TRUSTED_CIDR,...], "
               "alb, elb, vhost (vcombined), sshd, pam, haproxy, squid, apache-error, nginx-error, "
               "the GoAccess names (cloudfront, caddy, awsalb, traefikclf, ...) or auto")


@dataclass(frozen=True)
class Format:
    """A parsed ``--format`` value.

    Attributes:
        kind: ``plain``, ``clf``, ``auto``, ``field``, ``json``, ``csv``, ``tsv``, ``w3c``, ``zeek``,
            ``regex``, ``xff``, ``alb``, ``elb``, ``vhost`` or ``sshd``.
        field: the 1-based field number of ``field`` (and of ``alb``, ``elb``, ``vhost``).
        arg: the argument of the other kinds: a JSON path, a column name or number, a pattern, the
            trusted proxies of ``xff`` (comma-separated CIDRs).
    """

    kind: str
    field: int = 0
    arg: str = ""

    @property
    def spec(self) -> str:
        """The ``-f`` spelling (``parse_format(f.spec) == f``)."""
        if self.kind == "field":
            return f"field:{self.field}"
        return f"{self.kind}:{self.arg}" if self.arg else self.kind


def _bad_format(spec: str, why: str = "") -> ConfigurationError:
    return ConfigurationError(f"unknown log format {spec!r}{why}: use {FORMAT_HELP} "
                              "(docs/logs.md has a recipe per log format)")


def parse_format(spec: str) -> Format:
    """Parse a ``--format`` value (see :data:`FORMAT_HELP` and docs/logs.md).

    Raises:
        ConfigurationError: an unknown kind, or an argument it cannot use (a field number under 1, a
            regular expression that does not compile or has no group, a trusted proxy that is no
            CIDR).

    >>> parse_format("field:3")
    Format(kind='field', field=3, arg='')
    >>> parse_format("json:request.remote_ip").spec
    'json:request.remote_ip'
    >>> parse_format("alb")
    Format(kind='alb', field=4, arg='')
    >>> parse_format("COMBINED").spec, parse_format("VCOMBINED").spec, parse_format("cloudfront").spec
    ('clf', 'vhost', 'w3c:c-ip')
    """
    s = spec.strip()
    kind, colon, arg = s.partition(":")
    kind = kind.lower()
    if not colon and kind in ALIASES:
        return parse_format(ALIASES[kind])
    if not colon and kind == "awselb":
        raise _bad_format(spec, " (GoAccess's AWSELB: -f alb for lines that start with the type, "
                                "http/https/h2, client in field 4; -f elb for classic ELB lines "
                                "that start with the time, client in field 3)")
    if not colon and (kind in FORMATS or kind == NO_FORMAT):
        return Format(kind, FIELD_OF.get(kind, 0))
    if not colon or kind not in ARG_FORMATS:
        raise _bad_format(spec)
    if kind == "field":
        try:
            n = int(arg)
        except ValueError:
            n = 0
        if n < 1:
            raise _bad_format(spec, " (field:N counts from 1)")
        return Format("field", n)
    if kind == "regex":
        try:
            pat = re.compile(arg)
        except re.error as exc:
            raise _bad_format(spec, f" (the regular expression does not compile: {exc})") from None
        if pat.groups < 1:
            raise _bad_format(spec, " (the regular expression needs a group around the address, "
                                    "e.g. 'regex:from (?P<ip>\\S+) port')")
        return Format("regex", 0, arg)
    arg = arg.strip()
    if kind == "xff":
        for c in arg.split(","):
            try:
                ipaddress.ip_network(c.strip(), strict=False)
            except ValueError:
                raise _bad_format(spec, f" ({c.strip()!r} is no trusted-proxy CIDR, e.g. "
                                        "10.0.0.0/8)") from None
        return Format("xff", 0, ",".join(c.strip() for c in arg.split(",")))
    if not arg or (kind == "json" and "" in arg.split(".")):
        raise _bad_format(spec, f" ({kind} needs a {'path' if kind == 'json' else 'column'})")
    if arg.isdigit() and int(arg) < 1:
        raise _bad_format(spec, " (columns count from 1)")
    return Format(kind, 0, arg)


def format_name(spec: str) -> str:
    """A human name of a format spec, for notices and hints.

    >>> format_name("json:httpRequest.remoteIp")
    'GCP Cloud Logging JSON'
    """
    kind, _, arg = spec.partition(":")
    if kind == "json":
        if arg.startswith("request."):
            return "Caddy JSON"
        return {"httpRequest.remoteIp": "GCP Cloud Logging JSON",
                "downstream_remote_address": "Envoy JSON"}.get(arg, "JSON lines")
    return {"plain": "one item per line", "clf": "Apache/nginx common or combined log",
            "field": "whitespace-separated fields", "csv": "CSV with a header",
            "tsv": "TSV with a header", "w3c": "W3C extended log (CloudFront, IIS)",
            "zeek": "Zeek log", "regex": "regular expression", "xff": "X-Forwarded-For",
            "alb": "AWS ALB log", "elb": "AWS classic ELB log", "vhost": "Apache vhost_combined",
            "sshd": "sshd auth log", "pam": "PAM auth log (rhost=)",
            "haproxy": "HAProxy log", "squid": "Squid native access log",
            "apache-error": "Apache error log", "nginx-error": "nginx error log",
            NO_FORMAT: "no known format", "auto": "auto"}.get(kind, kind)


#: The pattern formats whose logs are mostly other lines (an auth.log, an error log, a syslog
#: stream): only a pattern that matches (almost) nothing is called wrong
#: (:data:`panstream.inputs.check.MIN_SHARE_PATTERN`).
SPARSE_KINDS = frozenset(("regex", "sshd", "pam", "haproxy", "apache-error", "nginx-error"))
