"""When is a printed estimate mostly noise? One rule for every family, printout, plot and report.

An estimate is *noise-dominated* when its interval is wider than the value itself:
``high - low > |estimate|``. Such a number says little beyond "small": every place that prints,
plots or reports an estimate flags it (``release``, series records, maps, the demo, ``report``),
and says what would make it usable (a larger epsilon, a smaller universe, a longer window):
:func:`advice` turns the two parts of an interval (the table's noise and the release's) into those
three levers, with the numbers the planner uses (:mod:`panstream.planning`).

One rule for values outside the possible range (all families): what is *released* (``--json``,
CSV, the API's attributes, series files) is the unbiased estimate and its interval, which may fall
below 0 or above the most the universe can hold; what is *shown* to a person (text lines,
pictures) is clamped to the possible range by :func:`shown`, and the printout says so
(:func:`clamp_note` under a block of figures, :func:`shown_count`'s ``*`` in a one-line one).

>>> noise_dominated(193.0, 0.0, 408.0)
True
>>> noise_dominated(19_983.0, 19_502.0, 20_465.0)
False
>>> shown(-27.4, 0, 65_536)
0.0
>>> shown_count(-27.4), shown_count(1234.5)
('0*', '1,234')
"""

from __future__ import annotations

import math

__all__ = ["BELOW_ZERO", "CLAMP_MARK_NOTE", "NOISE_FLAG", "ZERO_TEXT", "advice", "clamp_note",
           "count_cap", "fdr_rule", "flag_line", "interval_text", "noise_dominated", "shown",
           "shown_count"]

#: The mark a one-line printout appends to a noise-dominated estimate.
NOISE_FLAG = "NOISE-DOMINATED"
#: What a printout says when a whole interval fell below 0, so its clamped "[0, 0]" is not read
#: as a certain zero.
BELOW_ZERO = "the whole interval fell below 0: noise around a small count"
#: What a printout shows instead of a value and its interval when the whole interval fell below 0:
#: clamped, they would read "0 [0, 0]", which looks like a certain zero (issue 37).
ZERO_TEXT = "indistinguishable from 0"
#: What a one-line printout appends when a figure it shows carries :func:`shown_count`'s ``*``.
CLAMP_MARK_NOTE = "* shown clamped at 0; --json keeps the released, unbiased value"


def noise_dominated(estimate: float, low: float, high: float) -> bool:
    """True when the interval ``[low, high]`` is wider than ``|estimate|`` (module docstring).

    An undefined estimate (``nan``) is not flagged: the printout says it is undefined instead.
    """
    width = float(high) - float(low)
    if math.isnan(width) or math.isnan(float(estimate)):
        return False
    return width > abs(float(estimate))


def shown(value: float, low: float = 0.0, high: float = math.inf) -> float:
    """``value`` clamped to ``[low, high]`` for display (released values are never clamped)."""
    return float(min(max(float(value), low), high))


def count_cap(universe: str, size: float | None) -> float:
    """The most a count can show: the universe's size; unbounded for a hashed table (linear
    counting reaches ``size ln size``, where the release itself caps it) or an unknown size.

    >>> count_cap("range:4096", 4096), count_cap("hashed-ip:65536", 65536), count_cap("x", None)
    (4096.0, inf, inf)
    """
    if universe.startswith("hashed") or size is None or size <= 0:
        return math.inf
    return float(size)


def interval_text(value: float, low: float, high: float, ci: str = "", *, width: int = 12,
                  fmt: str = ",.0f", top: float = math.inf) -> str:
    """A value and its interval as a printout shows them: clamped to ``[0, top]``
    (``"{value}   {ci}[{low}, {high}]"``); when the whole interval fell below 0, no number at all,
    but :data:`ZERO_TEXT` and why (a clamped ``0 [0, 0]`` would read as certainty).

    >>> interval_text(12.4, -3.0, 30.2, "95% CI ", width=4)
    '  12   95% CI [0, 30]'
    >>> interval_text(-20.0, -41.0, -3.0, "95% CI ", width=4)
    'indistinguishable from 0   (the whole interval fell below 0: noise around a small count)'
    """
    if high < 0:
        return f"{ZERO_TEXT:>{width}}   ({BELOW_ZERO})"
    return (f"{shown(value, 0, top):>{width}{fmt}}   {ci}[{shown(low, 0, top):{fmt}}, "
            f"{shown(high, 0, top):{fmt}}]")


def shown_count(value: float, low: float = 0.0, high: float = math.inf) -> str:
    """A count for a one-line printout: :func:`shown`, to the unit, marked ``*`` when it was
    clamped (the line then ends with :data:`CLAMP_MARK_NOTE`)."""
    s = shown(value, low, high)
    return f"{s:,.0f}" + ("*" if s != float(value) else "")


def clamp_note(outputs: str = "--json", upper: bool = False, indent: str = "  ") -> str:
    """The line a printout adds under its figures when one it shows was clamped (``upper``: also
    at the most the universe holds), naming the outputs that keep the released values.

    >>> print(clamp_note("--json and --csv"))  # doctest: +NORMALIZE_WHITESPACE
      shown clamped at 0 (a count is never negative); --json and --csv keep the released,
      unbiased values, which may be below 0
    """
    where, beyond = ("at 0 and at the universe's size", " or above it") if upper else ("at 0", "")
    verb = "keeps" if " and " not in outputs else "keep"
    return (f"{indent}shown clamped {where} (a count is never negative); {outputs} {verb} the "
            f"released, unbiased values, which may be below 0{beyond}")


def _rr_state_epsilon(epsilon_state: float, factor: float) -> float:
    """The state epsilon whose randomized-response table noise is ``factor`` times smaller than at
    ``epsilon_state`` (the count's sd is ``sqrt(cells) / (2 sinh(epsilon/2))``)."""
    return 2 * math.asinh(math.sinh(epsilon_state / 2) * factor)


def advice(estimate: float, low: float, high: float, *, state_half: float, release_half: float,
           epsilon_state: float, epsilon_release: float, cells: int | None = None,
           unit: str = "distinct") -> str:
    """What would make a noise-dominated estimate usable, in one clause (``""`` if it is not
    noise-dominated).

    The interval's half-width combines the table's part (``state_half``, the half-width from the
    table's randomness alone) and the release's (``release_half``), roughly in quadrature. The
    interval is no wider than the value once its half-width is at most ``|estimate| / 2``; the
    levers, each with the number that reaches that width (or says it cannot):

    * the release's noise falls as ``1 / epsilon_release``: the release epsilon that would do;
    * the table's noise (a bit table's count) grows as ``sqrt(cells)`` and falls as
      ``1 / sinh(epsilon_state / 2)`` (randomized response): the universe size, or the state
      epsilon, that would do (``cells=None``, a sketch: only the state epsilon, roughly);
    * a longer window (or larger buckets) puts more items in one estimate for the same noise.

    >>> a = advice(193.0, -40.0, 408.0, state_half=220.0, release_half=40.0, epsilon_state=1.0,
    ...            epsilon_release=0.5, cells=65_536)
    >>> "universe of at most" in a and "longer window" in a
    True
    >>> print(a.split(":")[0])
    distinct counts below about 448 cannot be told from noise; to tell a count of about 204
    """
    if not noise_dominated(estimate, low, high):
        return ""
    # The count to tell from noise: the estimate, or half the upper bound when the estimate is
    # smaller (a count near 0 may be anything up to the upper bound).
    ref = max(abs(float(estimate)), max(float(high), 0.0) / 2)
    target = ref / 2
    half = (float(high) - float(low)) / 2
    tell = (f"{unit} counts below about {2 * half:,.0f} cannot be told from noise"
            if unit else f"values below about {2 * half:.3g} cannot be told from noise")
    levers: list[str] = []
    if target <= 0:
        return f"{tell}; a larger epsilon, a smaller universe or a longer window narrows it"
    tell += f"; to tell a count of about {ref:,.0f}" if unit else f"; to tell about {ref:.3g}"
    if release_half > 0:
        room = target * target - state_half * state_half
        if room > 0:
            need = epsilon_release * release_half / math.sqrt(room)
            if need > epsilon_release:
                levers.append(f"a release epsilon of about {need:.3g} (now {epsilon_release:g})")
    if state_half > 0 and state_half > target * 0.5:
        goal = target / math.sqrt(2) if release_half > 0 else target
        factor = state_half / goal
        if cells is not None and factor > 1:
            fewer = int(cells / (factor * factor))
            if fewer >= 4 * ref:  # a table must hold the count with room to spare
                levers.append(f"a universe of at most {fewer:,} cells (now {cells:,}: the "
                              "table's noise grows as its square root)")
        if factor > 1:
            eps = _rr_state_epsilon(epsilon_state, factor)
            if math.isfinite(eps) and eps < 20:
                levers.append(f"a state epsilon of about {eps:.3g} (now {epsilon_state:.3g})")
    levers.append("a longer window or larger buckets (more items per estimate, same noise)")
    return f"{tell}: " + ", or ".join(levers)


def flag_line(estimate: float, low: float, high: float, confidence: float, hint: str,
              indent: str = "  ") -> str | None:
    """The warning line a printout adds under a noise-dominated estimate (``None`` otherwise)."""
    if not noise_dominated(estimate, low, high):
        return None
    pct = f"{100 * confidence:g} %"
    return (f"{indent}{NOISE_FLAG}: the {pct} interval is wider than the estimate itself"
            + (f"; {hint}" if hint else ""))


def fdr_rule(fdr: float) -> str:
    """A map's rule for colouring a bucket, in words (for a caption, a legend or a printout).

    >>> fdr_rule(0.05)[:52]
    'coloured = told from empty at a 5 % false-discovery '
    """
    pct = f"{100 * fdr:g} %"
    return (f"coloured = told from empty at a {pct} false-discovery rate over the whole map "
            f"(Benjamini-Hochberg on exact p-values): with no signal at all, the chance that any "
            f"bucket is coloured is at most {pct}")
