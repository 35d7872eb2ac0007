"""Options and helpers shared by the subcommands.

Every option has an explicit ``PANSTREAM_...`` environment variable, shown in ``--help``; a flag given
on the command line wins over the environment.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

import click

from panstream.calibration import CALIBRATIONS, DEFAULT_CALIBRATION, DEFAULT_MODULUS, MODULI
from panstream.errors import PanstreamError, SourceError
from panstream.estimators import FAMILIES
from panstream.ingest import Input
from panstream.sources import open_input, stdin_reader
from panstream.sources.files import require_codec, sniff
from panstream.universe import Universe

#: The estimator families the command line offers.
FAMILY_NAMES = tuple(FAMILIES)

F = TypeVar("F", bound=Callable[..., Any])


def env(name: str) -> dict[str, Any]:
    """``envvar=PANSTREAM_<NAME>`` with ``show_envvar`` for a click option."""
    return {"envvar": f"PANSTREAM_{name}", "show_envvar": True}


class SpecParam(click.ParamType):
    """A textual spec parsed by a core function at option-parse time; its error becomes a usage
    error (exit 2) with the core's message.

    Args:
        name: metavar shown in ``--help``.
        parse: the core parser (raises :class:`PanstreamError` on a bad spec).
        kind: the parsed type, passed through unchanged when given as a default.
    """

    def __init__(self, name: str, parse: Callable[[str], Any], kind: type) -> None:
        self.name = name
        self._parse = parse
        self._kind = kind

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> Any:
        if isinstance(value, self._kind):
            return value
        try:
            return self._parse(str(value))
        except PanstreamError as exc:
            self.fail(str(exc), param, ctx)


def UniverseParam() -> SpecParam:  # noqa: N802 - used like a click type class
    """A universe spec such as ``ipv4:10.0.0.0/16``, checked at parse time (exit 2 if bad)."""
    return SpecParam("UNIVERSE", parse_universe, Universe)


def parse_universe(spec: str) -> Universe:
    """:meth:`Universe.parse`, plus the grids of ``--estimator sketch`` (``sketch:4096x24:ip``)."""
    if spec.strip().lower().startswith("sketch:"):
        from panstream.estimators.sketch.sfm import SketchGrid

        return SketchGrid.parse_spec(spec.strip().lower())
    return Universe.parse(spec)


class FiniteFloatRange(click.FloatRange):
    """A ``click.FloatRange`` that also refuses ``nan`` and ``inf`` (which compare past any bound)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> Any:
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{rv} is not a finite number.", param, ctx)
        return rv


class StatePath(click.Path):
    """A state file path, checked when the options are parsed, before any input is read: not
    empty, not a directory, and (``for_writing``) in a directory that exists.

    Args:
        for_writing: the command creates the file if it is missing (``ingest``).
    """

    def __init__(self, for_writing: bool = False) -> None:
        super().__init__(dir_okay=False)
        self._for_writing = for_writing

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> Any:
        text = os.fspath(value) if isinstance(value, os.PathLike) else str(value)
        if not text.strip():
            self.fail("the state path is empty: give a file name, e.g. -s web.pst", param, ctx)
        if os.path.isdir(text):
            self.fail(f"{text!r} is a directory: give a state file, e.g. -s "
                      f"{os.path.join(text, 'web.pst')}", param, ctx)
        if self._for_writing:
            parent = os.path.dirname(os.path.abspath(text))
            if not os.path.isdir(parent):
                self.fail(f"the directory of {text!r} does not exist: create it (mkdir -p "
                          f"{os.path.dirname(text) or '.'}) or give another path", param, ctx)
        return super().convert(value, param, ctx)


UNIVERSE_HELP = ("The public universe of cells: ipv4:CIDR, ipv6:CIDR@G, range:N, hashed:M or "
                 "hashed-ip:M (internet-facing logs; docs/cli.md).")


def universe_option(required: bool = True, **kw: Any) -> Callable[[F], F]:
    kw.setdefault("help", UNIVERSE_HELP)
    return click.option("-u", "--universe", type=UniverseParam(), required=required,
                        **env("UNIVERSE"), **kw)


def epsilon_option(name: str = "--epsilon", envname: str = "EPSILON", default: float | None = None,
                   help: str = "State epsilon: privacy of a leaked table.",
                   required: bool | None = None) -> Callable[[F], F]:
    """A positive finite epsilon; required unless it has a default (or ``required=False``: then
    ``None`` when not given, for commands that accept an alternative such as --total-epsilon)."""
    # click >= 8.3 treats an explicit default=None as a value and skips the required check.
    extra: dict[str, Any] = {} if default is None else {"default": default}
    return click.option(name, type=FiniteFloatRange(min=0, min_open=True), **extra,
                        required=default is None if required is None else required,
                        show_default=default is not None, help=help, **env(envname))


def state_options(state: str, state_dir: str, state_topic: str | None = None) -> Callable[[F], F]:
    """Where a command reads an existing state: ``-s/--state`` (a file), ``--state-dir`` (a Kafka
    group's directory) and, where ``state_topic`` gives its help, ``--state-topic``; each argument
    is its option's help text."""

    def deco(f: F) -> F:
        if state_topic is not None:
            f = click.option("--state-topic", default=None, help=state_topic,
                             **env("KAFKA_STATE_TOPIC"))(f)
        f = click.option("--state-dir", type=click.Path(file_okay=False, exists=True), default=None,
                         help=state_dir, **env("STATE_DIR"))(f)
        return click.option("-s", "--state", "state", type=StatePath(), default=None, help=state,
                            **env("STATE"))(f)

    return deco


CALIBRATION_HELP = ("How a bit is randomized: rr (randomized response, exactly eps-DP), tight or "
                    "paper (docs/cli.md).")


def calibration_option(help: str = CALIBRATION_HELP) -> Callable[[F], F]:
    return click.option("--calibration", type=click.Choice(CALIBRATIONS),
                        default=DEFAULT_CALIBRATION, show_default=True,
                        help=help, **env("CALIBRATION"))


ESTIMATOR_HELP = ("density: a bit per cell (how many, where); frequency: a counter mod --modulus "
                  "(how often); sketch: any items (docs/sketch.md).")


def estimator_options() -> Callable[[F], F]:
    """``--estimator density|frequency`` and ``--modulus K`` (frequency's counters, mod K)."""

    def deco(f: F) -> F:
        f = click.option("--modulus", type=click.Choice([str(k) for k in MODULI]),
                         default=str(DEFAULT_MODULUS), show_default=True, callback=_as_int,
                         help="With --estimator frequency: counters count modulo this; pick it above the "
                              "counts you want to tell apart.", **env("MODULUS"))(f)
        return click.option("--estimator", type=click.Choice(list(FAMILY_NAMES)),
                            default="density", show_default=True, help=ESTIMATOR_HELP,
                            **env("ESTIMATOR"))(f)

    return deco


def _as_int(ctx: click.Context, param: click.Parameter, value: Any) -> int | None:
    return None if value is None else int(value)


def given(ctx: click.Context, name: str) -> bool:
    """Whether option ``name`` was given on the command line or in the environment (not a
    default)."""
    return ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)


def check_family_options(ctx: click.Context, estimator: str) -> None:
    """Refuse an option of one estimator family given for the other.

    Raises:
        click.UsageError: --calibration or --total-epsilon with frequency or sketch, --modulus with
            density or sketch, and the sketch in ``kafka`` (not supported yet).
    """
    if estimator == "frequency":
        wrong = [f"--{n.replace('_', '-')}" for n in ("calibration", "total_epsilon")
                 if n in ctx.params and given(ctx, n)]
        if wrong:
            verb = "concern" if len(wrong) > 1 else "concerns"
            raise click.UsageError(f"{' and '.join(wrong)} {verb} the density estimator; the "
                                   "frequency estimator takes --epsilon and --modulus")
    elif estimator == "sketch" and ctx.info_name == "kafka" and \
            ctx.params.get("layout") == "partition":
        raise click.UsageError("--estimator sketch needs --layout slices: one sketch per source "
                               "partition would not add up to one sketch (an item in several "
                               "partitions would be counted, and exposed, in each); the routed "
                               "layout keeps one sketch, routed by bucket range (docs/kafka.md)")
    elif estimator == "sketch" and [n for n in ("calibration", "total_epsilon")
                                    if n in ctx.params and given(ctx, n)]:
        raise click.UsageError("--calibration and --total-epsilon concern the density estimator; "
                               "the sketch takes --epsilon (randomized response) and its grid as "
                               "--universe sketch:BxP:ip|id")
    if estimator != "frequency" and "modulus" in ctx.params and given(ctx, "modulus"):
        raise click.UsageError("--modulus concerns the frequency estimator: add --estimator "
                               "frequency")


def budget_option(help: str = "Total output epsilon releases may spend (new states only)."
                  ) -> Callable[[F], F]:
    """``--budget E``: the release budget of a new ledger (``ingest``'s state, ``kafka``'s group)."""
    from panstream.release.ledger import DEFAULT_BUDGET

    return click.option("--budget", type=FiniteFloatRange(min=0), default=DEFAULT_BUDGET,
                        show_default=True, help=help, **env("BUDGET"))


class AliasOption(click.Option):
    """An option with spellings it accepts but does not show in ``--help`` (``hidden_aliases``):
    the spelling of another command for the same thing (``--checkpoint-every`` of ``ingest`` and
    ``--checkpoint-interval`` of ``kafka``, issue 37), so a habit from one works in the other.

    >>> @click.command()
    ... @click.option("--a", "--b", "x", cls=AliasOption, hidden_aliases=("--b",), default=0)
    ... def f(x: int) -> None:
    ...     click.echo(x)
    >>> from click.testing import CliRunner
    >>> CliRunner().invoke(f, ["--b", "3"]).output.strip()
    '3'
    >>> "--b" in CliRunner().invoke(f, ["--help"]).output
    False
    """

    def __init__(self, *args: Any, hidden_aliases: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hidden_aliases = set(hidden_aliases)

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        shown, hidden = self.opts, self.hidden_aliases
        self.opts = [o for o in shown if o not in hidden]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = shown


def total_epsilon_options() -> Callable[[F], F]:
    """``--total-epsilon E`` and ``--releases R``: split one total pan-private epsilon between the
    state and R releases (:func:`panstream.planning.plan_split`) instead of --epsilon/--budget."""

    def deco(f: F) -> F:
        f = click.option("--releases", type=click.IntRange(min=1), default=None,
                         help="With --total-epsilon: how many equal releases the budget pays for "
                              "[default: 1].", **env("RELEASES"))(f)
        return click.option(
            "--total-epsilon", type=FiniteFloatRange(min=0, min_open=True), default=None,
            help="Instead of --epsilon and --budget: one total epsilon, split as 'panstream plan "
                 "--total-epsilon' shows (new states only).",
            **env("TOTAL_EPSILON"))(f)

    return deco


def apply_split(ctx: click.Context, total_epsilon: float | None, releases: int | None,
                universe: Universe | None, calibration: str, release_epsilon: float | None = None,
                telemetry: Any = None) -> tuple[float, float, float]:
    """The ``(epsilon, budget, per-release epsilon)`` of ``--total-epsilon``, announced on stderr.

    The announcement says what the total covers: the state, the releases and the telemetry (0 by
    default: nothing counted). With a counting opt-in (``telemetry``, a
    :class:`~panstream.release.telemetry.TelemetryPolicy`) it says that the total does not cover the
    counts, and what they cost a person with k arrivals.

    Raises:
        click.UsageError: --total-epsilon together with --epsilon, --budget or --release-epsilon,
            or without --universe.
    """
    from panstream.planning import plan_split

    assert total_epsilon is not None
    clash = [f"--{k.replace('_', '-')}" for k in ("epsilon", "budget", "release_epsilon")
             if k in ctx.params and given(ctx, k)]
    if clash:
        raise click.UsageError(f"--total-epsilon chooses the state epsilon, the budget and the "
                               f"release epsilon: drop {', '.join(clash)}")
    if universe is None:
        raise click.UsageError("--total-epsilon needs --universe: the best split depends on the "
                               "number of cells")
    sp = plan_split(total_epsilon, universe, releases or 1, 0.0, calibration)
    b = sp.best
    click.echo(f"panstream: total epsilon {total_epsilon:g} split for {b.releases} release(s): "
               f"epsilon_state {b.epsilon_state:.6f} (realized) + {b.releases} x release epsilon "
               f"{b.epsilon_release:g} (budget {b.budget:g}); one release +- "
               f"{b.density_95:.6f} density at 95 % (half/half split: +- "
               f"{sp.naive.density_95:.6f}); telemetry 0 (nothing counted): "
               f"{b.epsilon_total:.6f} per person in all"
               if telemetry is None or not telemetry.counts else
               f"{sp.naive.density_95:.6f}); WARNING: the counts you opted into are not in this "
               f"total ({telemetry.total_clause()})", err=True)
    return b.epsilon_state_asked, b.budget, b.epsilon_release


def warn_settings(universe: Universe | None, epsilon: float, calibration: str,
                  estimator: str = "density", modulus: int = DEFAULT_MODULUS,
                  expected: int | None = None) -> list[str]:
    """Print (stderr, one line each) and return the warnings of settings that do not mean what
    they seem: an epsilon the 32-bit probabilities cannot realize or that protects nothing
    (:func:`panstream.planning.epsilon_warning`), and a density table whose 95 % error exceeds the
    expected count, or the scale a universe can tell from none, naming the universe that would
    count them (:func:`panstream.planning.accuracy_warning`). Invalid settings print nothing here:
    the command refuses them with its own error.
    """
    from panstream.calibration import calibrate, calibrate_frequency
    from panstream.planning import accuracy_warning, epsilon_warning, noise_warning

    out: list[str] = []
    try:
        if estimator == "frequency":
            realized = calibrate_frequency(epsilon, modulus).epsilon_state
        else:
            realized = calibrate(epsilon, calibration).epsilon_state
    except PanstreamError:
        return out
    if calibration != "paper" or estimator == "frequency" or realized > epsilon:
        out.append(epsilon_warning(epsilon, realized) or "")  # paper realizes less by design
    if estimator == "density" and universe is not None:
        out.append(accuracy_warning(universe, epsilon, calibration, expected) or "")
    if expected is not None and not (estimator == "density" and out and out[-1]):
        # every family: an interval wider than the count expected (panstream.release.honesty)
        with contextlib.suppress(PanstreamError, ValueError):
            out.append(noise_warning(estimator, universe, epsilon, expected, calibration,
                                     modulus) or "")
    out = [w for w in out if w]
    for w in out:
        click.echo(f"panstream: warning: {w}", err=True)
    return out


def expected_option() -> Callable[[F], F]:
    """``-n/--expected-distinct N``: only checked against the planned error (a warning)."""
    return click.option("-n", "--expected-distinct", type=click.IntRange(min=1), default=None,
                        help="Distinct items you expect (not stored): warn if the table cannot count "
                             "that many.", **env("EXPECTED_DISTINCT"))


def json_option() -> Callable[[F], F]:
    return click.option("--json", "as_json", is_flag=True, default=False,
                        help="Print one JSON object instead of a human summary.", **env("JSON"))


def handle_errors(f: F) -> F:
    """Turn a :class:`PanstreamError` raised by a command into one line on stderr and its exit code."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return f(*args, **kwargs)
        except PanstreamError as exc:
            click.echo(f"panstream: error: {exc}", err=True)
            sys.exit(exc.exit_code)

    return wrapper  # type: ignore[return-value]


#: Significant digits of the floats in JSON output (``epsilon*`` fields stay exact).
JSON_DIGITS = 12


def json_ready(obj: Any, key: str = "") -> Any:
    """``obj`` with its floats rounded to :data:`JSON_DIGITS` significant digits (a budget left
    of 0.19999999999999996 is shown as 0.2) and non-finite floats as ``None`` (valid JSON).

    Fields whose name starts with ``epsilon`` (and every field inside one, such as the common
    shape's ``epsilon.state``) keep their exact value: they are the realized privacy parameters,
    and a user comparing or re-using them needs every bit.

    >>> json_ready({"budget_remaining": 1.0 - 0.8, "epsilon_state": 0.9999999991785604})
    {'budget_remaining': 0.2, 'epsilon_state': 0.9999999991785604}
    """
    if isinstance(obj, float):
        if not math.isfinite(obj):
            return None
        return obj if key.startswith("epsilon") else float(f"{obj:.{JSON_DIGITS}g}")
    if isinstance(obj, dict):
        return {k: json_ready(v, key if key.startswith("epsilon") else str(k))
                for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_ready(v, key) for v in obj]
    return obj


def emit_json(obj: Any) -> None:
    """Print ``obj`` as one line of JSON on stdout (floats rounded, see :func:`json_ready`)."""
    click.echo(json.dumps(json_ready(obj), sort_keys=True, default=str, allow_nan=False))


class Stoppable(Protocol):
    """A loop that stops after its current chunk when asked (``Ingestor``, ``WindowedIngestor``)."""

    @property
    def stopping(self) -> bool: ...

    def request_stop(self) -> None: ...


class Interrupt:
    """Which signal stopped a loop (:func:`stop_on_signals`), and the exit status it calls for."""

    signum: int | None = None

    @property
    def exit_code(self) -> int:
        """130 after SIGINT (Ctrl+C: 128 + 2, what a shell reports for a command it interrupted,
        so ``set -e`` scripts and ``make`` stop there too), 0 after SIGTERM (a service manager's
        ordinary stop) or none. Issue 37: Ctrl+C used to exit 0, as if the input had ended."""
        return 128 + signal.SIGINT if self.signum == signal.SIGINT else 0

    def exit(self) -> None:
        """Exit with :attr:`exit_code` if it is not 0 (after the summary: the checkpoint is
        written and said)."""
        if self.exit_code:
            sys.exit(self.exit_code)


@contextlib.contextmanager
def stop_on_signals(loop: Stoppable) -> Iterator[Interrupt]:
    """First SIGINT/SIGTERM: ``loop`` stops after the current chunk and checkpoints; the yielded
    :class:`Interrupt` records the signal (exit 130 after SIGINT, :attr:`Interrupt.exit_code`).
    Second: exit at once (130), removing a half-written save first (it would be a second copy of
    a table)."""
    from panstream.state.files import discard_temps

    got = Interrupt()

    def handler(signum: int, frame: Any) -> None:
        if loop.stopping:
            discard_temps()
            os.write(2, b"panstream: second signal, exiting without a final checkpoint\n")
            os._exit(130)
        if got.signum is None:
            got.signum = signum
        loop.request_stop()

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield got
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def check_inputs(files: tuple[str, ...], example: str) -> None:
    """Check the inputs of a run before any state is created or read: standard input (no FILE,
    or ``-``) is not a terminal, ``-`` comes once, every FILE opens and is in a known codec.

    Args:
        files: the FILE arguments (``-`` is standard input).
        example: a pipeline to show when standard input is a terminal.

    Raises:
        click.UsageError: standard input is a terminal, or ``-`` is given twice.
        SourceError: the first FILE that cannot be opened (same message as when reading it).
    """
    if (not files or "-" in files) and sys.stdin.isatty():
        raise click.UsageError(("no FILE given" if not files else "FILE '-' (standard input) given")
                               + f" and standard input is a terminal: pipe a log in, e.g. {example}")
    if files.count("-") > 1:
        raise click.UsageError("'-' (standard input) can be given only once")
    for path in files:
        if path == "-":
            continue
        try:
            with open(path, "rb", buffering=0) as f:
                head = f.read(16) if os.path.isfile(path) else b""
        except OSError as exc:
            msg = f"cannot open {path}: {exc.strerror or exc}; check the path and permissions"
            raise SourceError(msg) from None
        require_codec(sniff(head), path)


def named_inputs(files: tuple[str, ...], loop: Stoppable,
                 opened: list[str] | None = None) -> Iterator[Input]:
    """The run's inputs in order (:class:`panstream.ingest.Input`): each FILE, ``-`` (or no
    FILE at all) standard input; none once ``loop`` is stopping. ``opened`` collects the names
    begun (what a failed input's message says was not read)."""
    for path in files or ("-",):
        if loop.stopping:
            return
        if opened is not None:
            opened.append(path)
        if path == "-":
            yield Input("standard input", stdin_reader())
            continue
        with open_input(path) as f:
            yield Input(path, f.reader, f.position)
