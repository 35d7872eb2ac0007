"""Consumer settings: panstream's defaults, ``-C key=value`` overrides, and the one-line messages
for a broker that does not answer."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from kafka import KafkaConsumer

from panstream.errors import ConfigurationError
from panstream.sources.kafka.rdkafka import SETTINGS

#: Settings panstream always sets itself; ``-C`` may not change them.
_FIXED = {"enable_auto_commit": False, "group_id": None, "bootstrap_servers": None,
          "key_deserializer": None, "value_deserializer": None}

#: Defaults panstream uses unless ``-C`` overrides them.
#:
#: ``session_timeout_ms=6000`` (the smallest session a Kafka broker accepts by default,
#: ``group.min.session.timeout.ms``) with ``heartbeat_interval_ms=1000``: kafka-python 3's own
#: default session is 45 s, and a broker that holds a new group's join open for half the session
#: (Tansu 0.6 does: measured 23.3 s to a first assignment with kafka-python's defaults, 3.1 s with
#: these) made a member wait half a minute before it held a slice; a member killed with ``kill -9``
#: also keeps its partitions for one session. The heartbeat must be well under the session (a
#: third, Kafka's advice; 1 s leaves room for a slow GIL). Raise both with ``-C`` for tables whose
#: revoke-time snapshot takes seconds to write (docs/kafka.md, Limitations).
CONSUMER_DEFAULTS: dict[str, Any] = {"auto_offset_reset": "earliest", "max_poll_records": 5000,
                                     "client_id": "panstream", "session_timeout_ms": 6000,
                                     "heartbeat_interval_ms": 1000}


def _coerce(key: str, raw: str, default: Any) -> Any:
    text = raw.strip()
    if key == "api_version":
        try:
            return tuple(int(x) for x in text.split("."))
        except ValueError:
            msg = f"-C api_version={raw!r}: expected a version such as 3.7 or 2.8.1"
            raise ConfigurationError(msg) from None
    if isinstance(default, bool):
        low = text.lower()
        if low in ("true", "1", "yes", "on"):
            return True
        if low in ("false", "0", "no", "off"):
            return False
        msg = f"-C {key}={raw!r}: expected true or false"
        raise ConfigurationError(msg)
    if isinstance(default, int):
        try:
            return int(text)
        except ValueError:
            msg = f"-C {key}={raw!r}: expected an integer"
            raise ConfigurationError(msg) from None
    if isinstance(default, float):
        try:
            return float(text)
        except ValueError:
            msg = f"-C {key}={raw!r}: expected a number"
            raise ConfigurationError(msg) from None
    if default is None or isinstance(default, str):
        if default is None and text.lstrip("-").isdigit():
            return int(text)
        return None if text.lower() in ("none", "null") else text
    msg = (f"-C {key}: kafka-python expects a Python object ({type(default).__name__}) here, which "
           "cannot be given on the command line")
    raise ConfigurationError(msg)


def parse_overrides(pairs: Sequence[str]) -> dict[str, Any]:
    """Turn ``-C key=value`` pairs into kafka-python ``KafkaConsumer`` settings.

    Keys are checked against ``KafkaConsumer.DEFAULT_CONFIG`` (dashes and dots may be used for
    underscores, as in Java client names: ``session.timeout.ms``); a librdkafka property that
    panstream translates (:data:`~panstream.sources.kafka.rdkafka.SETTINGS`: ``fetch.wait.max.ms``,
    ``sasl.username``, ``ssl.ca.location``, ``allow.auto.create.topics``, ...) is taken for its
    kafka-python setting, so either client's spelling works whichever client runs (issue 37);
    values are converted to the type of the default.

    Raises:
        ConfigurationError: malformed pair, unknown key (with the closest known keys), a key
            panstream sets itself, or a value of the wrong type.

    Example:
        >>> parse_overrides(["session.timeout.ms=6000", "check_crcs=false"])
        {'session_timeout_ms': 6000, 'check_crcs': False}
        >>> parse_overrides(["fetch.wait.max.ms=100", "sasl.username=u"])
        {'fetch_max_wait_ms': 100, 'sasl_plain_username': 'u'}
    """
    known = KafkaConsumer.DEFAULT_CONFIG
    librdkafka = {v: k for k, v in SETTINGS.items() if v}
    out: dict[str, Any] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            msg = f"-C {pair!r}: expected key=value, e.g. -C session_timeout_ms=6000"
            raise ConfigurationError(msg)
        name = key.strip().replace(".", "_").replace("-", "_")
        if name not in known:
            name = librdkafka.get(key.strip(), name)
        if name not in known:
            close = difflib.get_close_matches(name, list(known), n=3)
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            msg = (f"unknown Kafka consumer setting {key.strip()!r} in -C{hint} (settings are "
                   "kafka-python KafkaConsumer options, see its DEFAULT_CONFIG, or the librdkafka "
                   "names of those panstream translates: docs/kafka.md, Options)")
            raise ConfigurationError(msg)
        if name in _FIXED:
            msg = (f"-C {name} cannot be set: panstream sets it itself (auto-commit is always off; "
                   "use -b/-g for servers and group)")
            raise ConfigurationError(msg)
        out[name] = _coerce(name, value, known[name])
    return out


def consumer_config(bootstrap: str | Sequence[str], group: str, overrides: Mapping[str, Any]
                    | None = None, security: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The full ``KafkaConsumer`` settings: panstream's defaults, then security, then ``-C``."""
    servers = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    cfg: dict[str, Any] = dict(CONSUMER_DEFAULTS)
    cfg.update({k: v for k, v in (security or {}).items() if v is not None})
    cfg.update(overrides or {})
    cfg.update(bootstrap_servers=[s.strip() for s in servers if s.strip()], group_id=group,
               enable_auto_commit=False)
    return cfg


def source_config(bootstrap: str | Sequence[str], group: str, overrides: Mapping[str, Any]
                  | None = None, security: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """:func:`consumer_config` for the source topics: no topic auto-created unless ``-C
    allow.auto.create.topics=true`` asks for it (issue 37: for brokers that auto-create the
    source topic; then a member does not wait for a missing one, its consumer creates it)."""
    return {"allow_auto_create_topics": False,
            **consumer_config(bootstrap, group, overrides, security)}


def internal_config(bootstrap: str | Sequence[str], group: str, overrides: Mapping[str, Any]
                    | None = None, security: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """:func:`consumer_config` for a group's internal topic (``GROUP-cells``): never auto-created,
    whatever ``-C`` says (issue 35: a broker restarted empty auto-created it with its default
    partition count for the first member that asked; only panstream creates it, with exactly the
    slice count, :mod:`~panstream.sources.kafka.topology`)."""
    return {**consumer_config(bootstrap, group, overrides, security),
            "allow_auto_create_topics": False}


_CLIENT_KEYS = ("bootstrap_servers", "bootstrap_timeout_ms", "client_id", "request_timeout_ms",
                "security_protocol",
                "ssl_context", "ssl_check_hostname", "ssl_cafile", "ssl_certfile", "ssl_keyfile",
                "ssl_password", "ssl_crlfile", "ssl_ciphers", "sasl_mechanism", "sasl_plain_username",
                "sasl_plain_password", "sasl_kerberos_service_name", "sasl_kerberos_domain_name",
                "sasl_oauth_token_provider", "api_version")


def client_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The connection and security settings of a consumer config, for admin/producer clients."""
    return {k: cfg[k] for k in _CLIENT_KEYS if k in cfg}


def bootstrap_seconds(cfg: Mapping[str, Any]) -> float:
    """How long a client built from ``cfg`` waits for a first broker before it gives up."""
    default = KafkaConsumer.DEFAULT_CONFIG["bootstrap_timeout_ms"]
    return float(cfg.get("bootstrap_timeout_ms", default)) / 1000


def connecting_notice(cfg: Mapping[str, Any]) -> str:
    """The line printed before the first connection, so an unreachable broker is not a silent wait.

    Example:
        >>> connecting_notice(consumer_config("127.0.0.1:9092", "g"))[:63]
        'connecting to Kafka at 127.0.0.1:9092 (waiting up to 30 s for a'
    """
    servers = ",".join(cfg.get("bootstrap_servers") or [])
    return (f"connecting to Kafka at {servers} (waiting up to {bootstrap_seconds(cfg):g} s for a "
            "broker to answer; -C bootstrap_timeout_ms=MS changes the wait)")


def unreachable_message(cfg: Mapping[str, Any], exc: Exception, what: str = "") -> str:
    """One line for a broker that did not answer: where, how long, what to check."""
    servers = ",".join(cfg.get("bootstrap_servers") or [])
    return (f"no Kafka broker answered at {servers}{what} within {bootstrap_seconds(cfg):g} s "
            f"({type(exc).__name__}): check -b HOST:PORT, that the broker is running and reachable "
            "from this host, and the security options")

