"""What a log format declares, in one place, and the registry every consumer reads.

A format module (one file under :mod:`panstream.inputs.formats`) builds one :class:`LogFormat`
per ``-f`` kind it reads and passes it to :func:`register`: its name and the GoAccess names that
mean it, how ``-f auto`` recognises it (:attr:`LogFormat.detect`, run in :attr:`LogFormat.rank`
order over a :class:`Sample`), where the client address is (:attr:`LogFormat.extractor`), how its
time is read (a :class:`TimeRule`), and the words the help texts and the loud check use.
Detection (:mod:`panstream.inputs.detection`), the loud check (:mod:`panstream.inputs.check`),
the time readers (:mod:`panstream.inputs.times`) and every help text take their lists from
:func:`all_formats`; none of them names a format.

This module imports no format: the package's ``__init__`` imports every module beside it, so a
new file is a new format (docs/logs.md, "Adding a format").
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from panstream.errors import ConfigurationError
from panstream.universe.addresses import normalize_address

if TYPE_CHECKING:
    import numpy as np

    from panstream.inputs.extractors import Extractor

#: The kind ``-f auto`` resolves to when no known format fits: every line is malformed, and the
#: loud-failure check says so (not offered in ``--help``).
NO_FORMAT = "none"


@dataclass(frozen=True)
class Format:
    """A parsed ``--format`` value.

    Attributes:
        kind: the format's name (``plain``, ``clf``, ``field``, ``json``, ...; ``auto``; ``none``).
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


@dataclass(frozen=True)
class Detection:
    """What :func:`panstream.inputs.detection.detect` found: the format (``spec``, the ``-f``
    spelling), a human name, and a note for the operator (e.g. that a combined log also carries
    an X-Forwarded-For field)."""

    spec: str
    name: str
    note: str = ""
    #: False when no known format fits: ``spec`` is then ``"none"`` (every line malformed) and
    #: ``note`` says what the lines look like and lists candidate ``-f`` values.
    known: bool = True
    #: The input is not text (:func:`panstream.inputs.detection.looks_binary`): ``known`` is false
    #: and ``note`` says to decompress or convert it.
    binary: bool = False


#: A time reader: ``(chunk bytes, line starts, line ends) -> datetime64[s]`` per line (``NaT``:
#: no readable time), UTC.
Reader = Callable[["np.ndarray", "np.ndarray", "np.ndarray"], "np.ndarray"]


@dataclass(frozen=True)
class TimeRule:
    """How a format's lines carry their time (:mod:`panstream.inputs.times` reads it).

    Exactly one of ``reader`` and ``local`` is given.

    Attributes:
        reader: a UTC format: ``reader(fmt)`` is the reader of one input stream (it may keep a
            header from one chunk to the next).
        local: a local wall-clock time without a zone: ``local(b, starts, ends)`` is ``(local
            seconds, good)`` per line (the reading as if it were UTC), or, with ``yearless``,
            the dict of :func:`panstream.inputs.formats.syslog.syslog_parts`.
        yearless: the time has no year either (syslog's ``Dec 10 06:55:46``).
        what: a local time's refusal names it: ``"haproxy's accept date ([30/Jul/...])"``.
        whose: ... and says whose zone to give: ``"the proxy host's zone"``.
        note: what the time looks like, for the "not one line went into a window" message
            (``"haproxy: the accept date"``; formats that share one note give the same text).
    """

    reader: Callable[[Format], Reader] | None = None
    local: Callable[[np.ndarray, np.ndarray, np.ndarray], Any] | None = None
    yearless: bool = False
    what: str = ""
    whose: str = ""
    note: str = ""


@dataclass(frozen=True)
class LogFormat:
    """One ``-f`` kind, declared by its format module.

    Attributes:
        name: the ``-f`` name (``haproxy``); with :attr:`arg`, spelled ``name:ARG``.
        title: the human name (notices, the loud check); ``titled`` may refine it by argument.
        order: the place in every list (``--help``, messages): lower first.
        help: how ``--help`` spells it (``"clf (combined, common)"``, ``"json:PATH"``).
        aliases: other names (GoAccess's ``--log-format`` presets, common spellings), matched
            ignoring case, each to the ``-f`` spelling it means.
        refused: names refused with a reason (a GoAccess preset that fits two formats).
        shown_aliases: the aliases ``--help`` shows as examples of GoAccess's names.
        arg: ``""`` (no argument), ``"required"`` or ``"optional"`` (``xff[:CIDR,...]``).
        parse_arg: ``(spec, arg) -> Format`` for a kind with an argument (raises with
            :func:`bad_format`).
        field: the field of the client, for the whitespace-separated formats (``alb`` = 4).
        extractor: ``(fmt, max_line) -> Extractor``: where the client is; ``None``: the parser's
            own vectorized line reader (``plain``, ``clf``).
        detect: ``sample -> Detection | None``: whether the first lines are this format.
        rank: the order in which ``-f auto`` asks the formats (lower first).
        candidate: ``sample -> bool``: when no known format fits, whether to name this one
            ("some of the first lines match").
        sparse: most lines of such a log name no client (an auth.log, an error log): the loud
            check calls it wrong only when it matches (almost) nothing.
        where: the loud check's "say where the client is (not WHERE)" (``{arg}`` is replaced).
        fix: ``(kind, arg) -> str``: the loud check's own advice for this format instead.
        where_help: how the loud check lists this format among the ways to name the client
            (``""``: not listed).
        last_resort: listed last (``... or 'regex:...'``).
        time: how its lines carry a time; ``None``: they carry none.
        hash_headers: its ``#`` lines are headers and comments, not records.
        titled: ``arg -> title`` where the argument names the producer (``json:PATH``).
    """

    name: str
    title: str
    order: int
    help: str = ""
    aliases: dict[str, str] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    shown_aliases: tuple[str, ...] = ()
    arg: str = ""
    parse_arg: Callable[[str, str], Format] | None = None
    field: int = 0
    extractor: Callable[[Format, int], Extractor] | None = None
    detect: Callable[[Sample], Detection | None] | None = None
    rank: int = 1000
    candidate: Callable[[Sample], bool] | None = None
    sparse: bool = False
    where: str = ""
    fix: Callable[[str, str], str] | None = None
    where_help: str = ""
    last_resort: bool = False
    time: TimeRule | None = None
    hash_headers: bool = False
    titled: Callable[[str], str] | None = None

    def title_of(self, arg: str) -> str:
        """The human name of ``name:arg``."""
        return self.titled(arg) if self.titled is not None else self.title


_REGISTRY: dict[str, LogFormat] = {}


def register(*formats: LogFormat) -> None:
    """Add formats to the registry (a format module calls this once, at import).

    Raises:
        ValueError: a name or alias that another format already has.
    """
    for f in formats:
        taken = {a for g in _REGISTRY.values() for a in g.aliases} | set(_REGISTRY)
        clash = ({f.name} | set(f.aliases)) & taken
        if clash:
            msg = f"log format {f.name!r}: {', '.join(sorted(clash))} already registered"
            raise ValueError(msg)
        _REGISTRY[f.name] = f


def all_formats() -> list[LogFormat]:
    """Every registered format, in :attr:`LogFormat.order`."""
    return sorted(_REGISTRY.values(), key=lambda f: (f.order, f.name))


def lookup(kind: str) -> LogFormat | None:
    """The format named ``kind`` (not an alias), or ``None``."""
    return _REGISTRY.get(kind)


def format_help() -> str:
    """What ``-f`` accepts, for messages and ``--help``: every format's :attr:`~LogFormat.help`,
    examples of GoAccess's names, ``auto``."""
    fs = all_formats()
    shown = ", ".join(a for f in fs for a in f.shown_aliases)
    return (f"{', '.join(f.help for f in fs if f.help)}, the GoAccess names ({shown}, ...) "
            "or auto")


def format_examples(n: int) -> str:
    """The spellings of the first ``n`` formats (``plain, clf, field:N, ...``), for a short
    ``--help`` line that points to the docs for the rest."""
    return ", ".join(f.help.split(" (")[0] for f in all_formats()[:n])


def bad_format(spec: str, why: str = "") -> ConfigurationError:
    """The error for an ``-f`` value that names no format, or an argument it cannot use."""
    return ConfigurationError(f"unknown log format {spec!r}{why}: use {format_help()} "
                              "(docs/logs.md has a recipe per log format)")


def column_arg(spec: str, kind: str, arg: str) -> Format:
    """A column (or path) argument: not empty, a number counts from 1."""
    arg = arg.strip()
    if not arg:
        raise bad_format(spec, f" ({kind} needs a column)")
    if arg.isdigit() and int(arg) < 1:
        raise bad_format(spec, " (columns count from 1)")
    return Format(kind, 0, arg)


# ------------------------------------------------------------------------- detection's view
def is_address(token: bytes) -> bool:
    """Whether a token is an address (any spelling :func:`normalize_address` reduces)."""
    try:
        ipaddress.ip_address(normalize_address(token).decode("ascii"))
    except (ValueError, UnicodeDecodeError):
        return False
    return True


#: A syslog line's head: RFC 3164 (``Jun 14 15:16:01 host tag[pid]: ``) or an ISO time (RFC 5424,
#: rsyslog's high-precision template, journald's ``short-iso``), then host and tag.
SYSLOG = re.compile(rb"^(?:<\d{1,3}>\d?\s*)?(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|"
                    rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S*) \S+ [^\s:]+:")
#: The request time of Apache/nginx common and combined logs: ``[10/Oct/2000:13:55:36 -0700] "``.
CLF_TIME = re.compile(rb" \[\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d [+-]\d{4}\] \"")


class Sample:
    """The first non-blank lines of an input, as the detection rules see them.

    Attributes:
        lines: the lines (stripped; a UTF-8 byte order mark dropped from the first); none for an
            input of blank lines only.
        first: the first of them.
        split: each line split on blanks.
    """

    def __init__(self, lines: list[bytes]) -> None:
        self.lines = lines
        self.first = lines[0] if lines else b""
        self.split = [ln.split() for ln in lines]
        self._hits: dict[bytes, int] = {}
        #: Most lines have more than one field.
        self.multi = self.most_fields(lambda f: len(f) > 1)
        #: Most lines open with a syslog head (:data:`SYSLOG`).
        self.syslog = self.most(SYSLOG.match)

    def share(self, pred: Callable[[bytes], object]) -> int:
        """How many lines ``pred`` holds for."""
        return sum(1 for ln in self.lines if pred(ln))

    def most(self, pred: Callable[[bytes], object]) -> bool:
        """Whether ``pred`` holds for more than half of the lines."""
        return 2 * self.share(pred) > len(self.lines)

    def most_fields(self, pred: Callable[[list[bytes]], object]) -> bool:
        """Whether ``pred`` holds for more than half of the lines' fields."""
        return 2 * sum(1 for f in self.split if pred(f)) > len(self.split)

    def hits(self, pattern: Any) -> int:
        """How many lines a compiled bytes pattern is found in (kept per pattern)."""
        key = pattern.pattern
        if key not in self._hits:
            self._hits[key] = self.share(pattern.search)
        return self._hits[key]

    def unknown(self, what: str, note: str) -> Detection:
        """The lines are of this format's kind, but none of its known shapes fits: no format
        (``none``, every line malformed), with ``note`` saying which ``-f`` to try."""
        return Detection(NO_FORMAT, what, note, known=False)

    def found(self, spec: str, note: str = "") -> Detection:
        """The detection of ``spec`` (its human name from the registry)."""
        kind, _, arg = spec.partition(":")
        f = lookup(kind)
        return Detection(spec, f.title_of(arg) if f is not None else kind, note)
