"""Kafka connection options shared by ``panstream kafka`` and ``panstream release --state-topic``.

One definition of ``-b/--bootstrap-server``, ``-C key=value`` and the SASL/TLS options, with the
same ``PANSTREAM_KAFKA_...`` environment variables, so a consumer and a release configured from one
environment talk to the same brokers the same way. The values are turned into kafka-python
settings by :mod:`panstream.sources.kafka` (``parse_overrides``, ``consumer_config``,
``state_client``); nothing here imports kafka.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

import click

from panstream.cli.common import F, env

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER")

#: CLI parameter name -> kafka-python client setting.
_SECURITY = {"security_protocol": "security_protocol", "sasl_mechanism": "sasl_mechanism",
             "sasl_username": "sasl_plain_username", "sasl_password": "sasl_plain_password",
             "ssl_cafile": "ssl_cafile", "ssl_certfile": "ssl_certfile",
             "ssl_keyfile": "ssl_keyfile", "ssl_password": "ssl_password"}


def bootstrap_option(required: bool = True, help: str = "Kafka bootstrap servers."
                     ) -> Callable[[F], F]:
    """``-b/--bootstrap-server HOST:PORT[,...]`` (``PANSTREAM_KAFKA_BOOTSTRAP``)."""
    # No explicit default: click >= 8.3 treats default=None as a value and skips the required check.
    return click.option("-b", "--bootstrap-server", "bootstrap", required=required,
                        metavar="HOST:PORT[,...]", help=help, **env("KAFKA_BOOTSTRAP"))


def connection_options(config_help: str) -> Callable[[F], F]:
    """``-C key=value`` (repeatable) and the SASL/TLS options.

    The decorated command receives ``overrides`` (the raw ``-C`` pairs, for
    ``panstream.sources.kafka.parse_overrides``) and ``security`` (a dict of kafka-python security
    settings, ``None`` where not given) instead of one argument per security option.

    Args:
        config_help: help text of ``-C`` (which kafka-python clients the settings reach).
    """
    options = [
        click.option("-C", "--consumer-config", "overrides", multiple=True, metavar="KEY=VALUE",
                     help=config_help, **env("KAFKA_CONFIG")),
        click.option("--security-protocol", type=click.Choice(SECURITY_PROTOCOLS), default=None,
                     help="Kafka security protocol.", **env("KAFKA_SECURITY_PROTOCOL")),
        click.option("--sasl-mechanism", type=click.Choice(SASL_MECHANISMS), default=None,
                     help="SASL mechanism.", **env("KAFKA_SASL_MECHANISM")),
        click.option("--sasl-username", default=None, help="SASL username.",
                     **env("KAFKA_SASL_USERNAME")),
        click.option("--sasl-password", default=None, help="SASL password (prefer the env var).",
                     **env("KAFKA_SASL_PASSWORD")),
        click.option("--ssl-cafile", type=click.Path(dir_okay=False), default=None,
                     help="CA bundle to verify the brokers.", **env("KAFKA_SSL_CAFILE")),
        click.option("--ssl-certfile", type=click.Path(dir_okay=False), default=None,
                     help="Client certificate (mutual TLS).", **env("KAFKA_SSL_CERTFILE")),
        click.option("--ssl-keyfile", type=click.Path(dir_okay=False), default=None,
                     help="Client private key (mutual TLS).", **env("KAFKA_SSL_KEYFILE")),
        click.option("--ssl-password", default=None, help="Password of the client key.",
                     **env("KAFKA_SSL_PASSWORD")),
    ]

    def decorate(f: F) -> F:
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            kwargs["security"] = {_SECURITY[name]: kwargs.pop(name) for name in _SECURITY}
            return f(*args, **kwargs)

        out: Any = wrapper
        for option in reversed(options):  # listed in --help in the order above
            out = option(out)
        return out

    return decorate


@contextlib.contextmanager
def notice_if_slow(message: str, after: float = 2.0) -> Iterator[None]:
    """Print ``panstream: <message>`` on stderr if the block is still running after ``after``
    seconds: a command whose broker answers at once keeps its one-line output, one that waits for
    an unreachable broker says what it waits for instead of being silent.
    """
    timer = threading.Timer(after, lambda: click.echo(f"panstream: {message}", err=True))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
