"""Loud failure: tell a wrong format or universe from a log that simply has few clients.

A log read with the wrong ``-f`` (JSON read as ``clf``, a CSV export read as ``plain``) or into the
wrong universe (public clients in ``ipv4:10.0.0.0/16``, IPv6 clients in an ``ipv4`` universe) used
to give exit 0, "~299,961 malformed", a saved state and a release of about 0. :func:`verdict`
looks at the counts of a sample of lines and returns one line that names the format used, the
universe, and the options that would fix either; ``None`` when the input looks right (or, for
noisy counts, when there are too few lines to tell).

The function is pure (no I/O, no clock) so every source can use it: ``panstream ingest`` (per
input) and the Kafka routing stage (per member) ask it once about the exact counts of their first
:data:`SAMPLE_LINES` non-empty lines, or of all of a shorter input, which exist only until that
decision (docs/threat-model.md, "The loud-failure decision"); under a counting opt-in ``ingest``
also asks it about the released running totals (``released=True``).

Privacy: the decision is **one bit** per input: whether under :data:`MIN_SHARE` (or
:data:`MIN_SHARE_PATTERN`) of the sample was accepted. The line it returns on an exact sample is a
function of that bit and of what the run was told or announced only (the ``-f`` used and whether
it was detected, the universe): no count, no share, no "malformed or outside" from the data, so
one line more or less in the sample changes nothing printed unless it flips the bit. (It used to
print "of ~601 lines" against "~600", and shares in 0.1 % steps: any one line of the sample
showed.) Released totals (``released=True``) are noisy or exact by the operator's opt-in and
already printed at their cost, so that line may add them.

>>> msg = verdict({"accepted": 0, "empty": 3, "malformed": 990, "outside": 10}, "clf", "ipv4:10.0.0.0/16")
>>> msg[:91]
'under 1 % of the first lines gave an address in ipv4:10.0.0.0/16 when read as Apache/nginx '
>>> msg == verdict({"accepted": 0, "empty": 0, "malformed": 991, "outside": 10}, "clf", "ipv4:10.0.0.0/16")
True
>>> verdict({"accepted": 950, "empty": 0, "malformed": 50, "outside": 0}, "clf", "ipv4:10.0.0.0/16") is None
True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from panstream.inputs.detection import BINARY_HINT
from panstream.inputs.formats import NO_FORMAT, SPARSE_KINDS, all_formats, format_name, lookup

#: Fewer accepted items than this share of the non-empty lines is "almost nothing accepted".
MIN_SHARE = 0.01

#: The share for the pattern formats (:data:`~panstream.inputs.formats.SPARSE_KINDS`: ``regex``,
#: the auth logs, the error logs, ...): most lines of an auth.log or an error log name no client,
#: so only a pattern that matches (almost) nothing is called wrong.
MIN_SHARE_PATTERN = 0.001

#: Noisy (released) totals: no verdict before this many non-empty lines were counted. An exact
#: sample is judged whatever its size (one non-empty line is enough): an input that ends before
#: :data:`SAMPLE_LINES` is judged on what it had.
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


def _format_fix(spec: str) -> str:
    kind, _, arg = spec.partition(":")
    f = lookup(kind)
    if f is not None and f.fix is not None:
        return f.fix(kind, arg)
    if f is not None and f.sparse:
        return ("try the pattern on a line of the log (docs/logs.md), or name another format with "
                "-f; if the log has no such line yet, add --keep-going")
    where = f.where.format(arg=arg) if f is not None and f.where else kind
    return f"say where the client is (not {where}): {_ALL_FORMATS}"


def _all_formats() -> str:
    """Every way to say where the client is, for the messages (the registry's
    :attr:`~panstream.inputs.formats.base.LogFormat.where_help`, the escape hatch last)."""
    ways = sorted((f for f in all_formats() if f.where_help), key=lambda f: f.last_resort)
    names = [f.where_help for f in ways]
    return f"-f {', '.join(names[:-1])} or {names[-1]} (docs/logs.md)"


_ALL_FORMATS = _all_formats()


def _universe_fix(spec: str) -> str:
    kind = spec.partition(":")[0]
    if kind == "ipv4":
        return ("use a universe that holds them (a prefix that covers the clients, or "
                "ipv6:PREFIX@64 for IPv6 clients; 'panstream plan' sizes it)")
    if kind == "ipv6":
        return "use a prefix that covers the clients (or ipv4:PREFIX for IPv4 clients)"
    return "use a larger universe"


def verdict(counts: Mapping[str, Any] | Any, detected_format: str, universe: Any, *,
            auto: bool = False, sd: float = 0.0, released: bool = False,
            binary: bool = False) -> str | None:
    """Decide whether (almost) nothing of a sample was accepted; if so, say what would fix it.

    Args:
        counts: ``accepted``, ``empty``, ``malformed`` and ``outside`` of the sample (a mapping or
            an object with those attributes, e.g. :class:`panstream.sources.ingest.IngestStats`); noisy
            counts are fine (negative values count as 0).
        detected_format: the ``-f`` spelling used (:attr:`panstream.inputs.parser.Format.spec`;
            ``"none"`` when ``-f auto`` found no known format).
        universe: the universe (a :class:`~panstream.universe.Universe` or its spec).
        auto: the format was detected (``-f auto``), not given.
        sd: the noise standard deviation of each count (0 for exact counts).
        released: the counts are released totals (a counting opt-in, printed at their cost):
            the line then adds their shares malformed and outside. Otherwise (an exact sample)
            the line is a function of the verdict, ``detected_format``, ``auto`` and
            ``universe`` only.
        binary: ``-f auto`` found the input to be binary, not text
            (:attr:`~panstream.inputs.detection.Detection.binary`): the line says so.

    Returns:
        ``None`` if the sample is fine, empty, or (noisy counts) too small to judge (under
        :data:`MIN_LINES` non-empty lines, or under ``2 Z sd / share``); else one line (no
        trailing period) naming the format and the universe, with the options that fix either,
        ending with ``--keep-going``.

    The rule: ``accepted + Z sd < share x non-empty`` (share :data:`MIN_SHARE`, or
    :data:`MIN_SHARE_PATTERN` for the pattern formats). A log whose true accepted share is 5 % or
    more would need noise below ``-(0.04 n + 3 sd) < -27 sd`` to be stopped: never, in practice.
    On an exact sample of under 100 lines (1,000 for the pattern formats) the rule reads
    "nothing accepted".
    """
    def get(name: str) -> float:
        v = counts[name] if isinstance(counts, Mapping) else getattr(counts, name)
        return max(float(v), 0.0)

    accepted, malformed, outside = get("accepted"), get("malformed"), get("outside")
    nonempty = accepted + malformed + outside
    kind = detected_format.partition(":")[0]
    share = MIN_SHARE_PATTERN if kind in SPARSE_KINDS else MIN_SHARE
    least = max(MIN_LINES, 2 * Z * sd / share) if (sd > 0 or released) else 1
    if nonempty < least:
        return None
    if accepted + Z * sd >= share * nonempty:
        return None
    uspec = getattr(universe, "spec", str(universe))
    tail = "; or --keep-going to go on anyway"
    if kind == NO_FORMAT:
        return no_format_line(binary=binary)
    lines = "the lines counted so far" if released else "the first lines"
    how = "detected" if auto else "given"
    head = (f"under {_pct(share)} of {lines} gave an address in {uspec} when read as "
            f"{format_name(detected_format)} (-f {detected_format}, {how})")
    if released:
        head += (f" (released counts: {_pct(malformed / nonempty)} malformed, "
                 f"{_pct(outside / nonempty)} outside, of ~{nonempty:,.0f} lines)")
    fix = f"{head}: if the format is wrong, {_format_fix(detected_format)}"
    if _can_be_outside(uspec):
        fix += f"; if the addresses lie outside {uspec}, {_universe_fix(uspec)}"
    return fix + tail


#: A sample that passed the verdict but had at least this share of its non-empty lines skipped
#: (malformed, or outside the universe) gets :func:`skipped_notice`.
SKIPPED_SHARE = 0.01


def skipped_notice(counts: Mapping[str, Any] | Any, detected_format: str, universe: Any, *,
                   exact: bool = False) -> str | None:
    """A notice for a sample the verdict let through of which some lines could not be read.

    A topic or log that is 2 % junk for the ``-f`` used passes :func:`verdict` and used to go
    unsaid unless counts were opted into (issue 37: 423 of 20,423 lines skipped, not a word). This
    says it as the verdict does: **one bit** (whether at least :data:`SKIPPED_SHARE` of the
    sample's non-empty lines were skipped), in words that name the format and the universe only,
    no count, no share beyond the threshold, not "malformed" against "outside" (it names both);
    ``exact`` (``--exact-counts``, which prints exact counts anyway) adds the sample's counts.
    ``None`` for a sample under the threshold, an empty one, or a pattern format
    (:data:`~panstream.inputs.formats.SPARSE_KINDS`: most lines of an auth.log name no client by
    design).

    >>> skipped_notice({"accepted": 979, "empty": 0, "malformed": 15, "outside": 6}, "clf",
    ...                "ipv4:10.0.0.0/16")[:60]
    'some of the first lines could not be read (1 % or more gave '
    >>> skipped_notice({"accepted": 991, "empty": 0, "malformed": 9, "outside": 0}, "clf",
    ...                "ipv4:10.0.0.0/16") is None
    True
    """
    def get(name: str) -> int:
        v = counts[name] if isinstance(counts, Mapping) else getattr(counts, name)
        return max(int(v), 0)

    accepted, malformed, outside = get("accepted"), get("malformed"), get("outside")
    nonempty = accepted + malformed + outside
    if detected_format.partition(":")[0] in SPARSE_KINDS or not nonempty or \
            malformed + outside < SKIPPED_SHARE * nonempty:
        return None
    uspec = getattr(universe, "spec", str(universe))
    line = (f"some of the first lines could not be read ({_pct(SKIPPED_SHARE)} or more gave no "
            f"address in {uspec} when read as {format_name(detected_format)}, -f "
            f"{detected_format}): such lines are skipped (malformed, or outside {uspec})")
    if exact:
        return line + (f"; exact counts: {malformed:,} malformed and {outside:,} outside of the "
                       f"first {nonempty:,} lines")
    return line + ("; nothing counts them by default (--telemetry-epsilon E counts them with "
                   "noise, --exact-counts exactly)")


def no_format_line(keep_going: bool = True, binary: bool = False) -> str:
    """The loud-failure line when ``-f auto`` found no known format: name the format with ``-f``.

    One line for every path that meets such an input (plain ``ingest``, ``ingest --window``):
    a function of the verdict and of the detection alone. ``keep_going`` adds the
    ``--keep-going`` way out, where the run has one (a windowed run has none: its lines would go
    into no window). ``binary``: the input is not text (NUL or control bytes): the line says so
    and suggests decompressing it.

    >>> no_format_line(keep_going=False).startswith("no known log format fits the first lines")
    True
    >>> no_format_line(binary=True).startswith("the input is binary data, not text lines")
    True
    """
    tail = "; or --keep-going to go on anyway" if keep_going else ""
    if binary:
        return (f"the input is binary data, not text lines (NUL or control bytes in its first "
                f"bytes), so no log format fits: {BINARY_HINT}; if it is text after all, name "
                f"the format with -f{tail}")
    return (f"no known log format fits the first lines (-f auto found none): name the format, "
            f"{_ALL_FORMATS}{tail}")


def empty_input_line(name: str) -> str:
    """The notice for an input that held no log line (nothing at all, or only blank lines and
    header or comment lines): a function of that one fact and the input's name.

    >>> empty_input_line("standard input")
    'standard input held no log line (it was empty, or blank or header lines only): nothing of it went into the table'
    """
    return (f"{name} held no log line (it was empty, or blank or header lines only): nothing of "
            "it went into the table")


def _can_be_outside(uspec: str) -> bool:
    """Whether an item can fall outside the universe (not in a hashed one, nor in all of IPv4)."""
    return not uspec.startswith("hashed") and uspec not in ("ipv4:0.0.0.0/0", "sketch")
