"""A window's release on the routed layout: its R closed slices merged, charged once, appended
to the series (issue 35 moved it here from :mod:`panstream.sources.kafka.windows`, which drives
it; this module imports nothing of Kafka).

Whichever member finds all R closed slices of a window in the window store (at its checkpoints,
and its final one) takes the series lock and, unless the window is already in the series:

1. merges the slices (:func:`panstream.state.merge.merge_slices`);
2. charges the **window's own group ledger**: an append-only reservation log in
   ``STATE_DIR/windows/ledgers/<start>/`` whose budget is exactly one release at
   ``--release-epsilon`` (:func:`panstream.state.stores.group_ledger`);
3. draws the release and appends its record to the series (``fsync``: the commit point);
4. deletes the closed slices and wipes the merged table.

A window is therefore released at most once by any number of members on any hosts sharing the
state directory, and appears in the series exactly once (a crash between the ledger's reservation
and the series append, a few microseconds, drops that window with a notice instead of releasing
it twice).

The window store's keys (:func:`window_keys`): ``<group>-w<start>/<r>`` holds slice ``r`` of an
open window, ``<group>-w<start>-closed/<r>`` the same slice once the window closed.
"""

from __future__ import annotations

import calendar
import contextlib
import functools
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from panstream import estimators
from panstream.errors import BudgetExhaustedError, ConfigurationError, StateError
from panstream.estimators.base import Estimator, wipe_buffer
from panstream.state.files import state_lock
from panstream.state.slices import SliceLayout
from panstream.state.stores import DirectoryStore, group_ledger
from panstream.windows.eventtime import label
from panstream.windows.schedule import WindowSchedule
from panstream.windows.series import Series, record
from panstream.windows.zones import Zone, parse_zone

log = logging.getLogger("panstream.kafka")

__all__ = ["Family", "WindowSpec", "parse_key", "release_complete", "start_of_label",
           "window_keys"]


class Family(Protocol):
    """The table family's public parameters a window's slices were written with (the slice
    stage's configuration has them)."""

    estimator: str
    epsilon: float
    calibration: str
    modulus: int


@dataclass(frozen=True)
class WindowSpec:
    """The public window settings of a group: ``size`` and ``lateness`` in seconds, the one
    release of each window (``release_epsilon``, ``mechanism``), an optional declared range
    ``[first, stop)`` (``--from``/``--to``, on the window grid), and the zone of formats that
    write a local time (``time_zone``: ``--time-zone``; a year-less syslog time takes the year
    nearest to the wall clock)."""

    size: int
    lateness: int
    release_epsilon: float
    mechanism: str = "laplace"
    first: int | None = None
    stop: int | None = None
    time_zone: str | None = None

    def __post_init__(self) -> None:
        if self.size <= 0 or self.lateness < 0:
            msg = f"a window must last > 0 s and lateness >= 0 s (got {self.size}, {self.lateness})"
            raise ConfigurationError(msg)

    @functools.cached_property
    def zone(self) -> Zone | None:
        """The parsed ``time_zone`` (one object: its offset tables are computed once)."""
        return parse_zone(self.time_zone) if self.time_zone is not None else None

    @functools.cached_property
    def schedule(self) -> WindowSchedule:
        """The group's public schedule: live, on the wall clock."""
        return WindowSchedule.live(self.size, self.lateness, self.first, self.stop)


def _stamp(start: int) -> str:
    return label(start).replace("-", "").replace(":", "")


def _start_of(stamp: str) -> int:
    return calendar.timegm(time.strptime(stamp, "%Y%m%dT%H%M%SZ"))


def window_keys(group: str, start: int, r: int) -> tuple[str, str]:
    """``(open key, closed key)`` of slice ``r`` of the window at ``start`` in the window store.

    >>> window_keys("g", 1795478400, 3)
    ('g-w20261124T000000Z/3', 'g-w20261124T000000Z-closed/3')
    """
    base = f"{group}-w{_stamp(start)}"
    return f"{base}/{r}", f"{base}-closed/{r}"


def parse_key(group: str, key: str) -> tuple[int, bool, int] | None:
    """``(start, closed, r)`` of a window store key of ``group``, else ``None``.

    >>> parse_key("g", "g-w20261124T000000Z-closed/3")
    (1795478400, True, 3)
    """
    m = re.fullmatch(re.escape(group) + r"-w(\d{8}T\d{6}Z)(-closed)?/(\d+)", key)
    if m is None:
        return None
    return _start_of(m.group(1)), m.group(2) is not None, int(m.group(3))


def start_of_label(window: str) -> int:
    """The start of the window a series record labels ``window``.

    >>> start_of_label("2026-11-24T00:00:00Z")
    1795478400
    """
    return _start_of(window.replace("-", "").replace(":", ""))


def release_complete(wstore: DirectoryStore, group: str, layout: SliceLayout, config: Family,
                     spec: WindowSpec, series_path: str, *, wait: float = 0.0,
                     notice: Callable[[str], None] = log.info,
                     on_release: Callable[[dict[str, Any]], None] | None = None
                     ) -> list[dict[str, Any]]:
    """Release every window whose R closed slices are all in ``wstore``, once (module docstring).

    Order per window, under the series lock: already in the series -> only its closed slices are
    deleted; else merge, charge the window's ledger (refused -> dropped with a notice), release,
    append to the series (the commit point), delete the closed slices, wipe.

    Returns:
        The records appended by this call (empty if the series is locked by another member and
        ``wait`` is 0: it releases them, or this member does at its next checkpoint).

    Raises:
        StateError: a slice, the ledger or the series could not be read or written.
    """
    ready: dict[int, set[int]] = {}
    for key in list(wstore.keys()):
        got = parse_key(group, key)
        if got is not None and got[1]:
            ready.setdefault(got[0], set()).add(got[2])
    complete = sorted(s for s, rs in ready.items() if rs == set(range(layout.count)))
    if not ready:
        return []
    out: list[dict[str, Any]] = []
    held = contextlib.ExitStack()
    try:
        held.enter_context(state_lock(series_path, "kafka --window (its series)", wait=wait))
    except StateError:
        return []  # another member is releasing; it (or our next checkpoint) does these
    with held:
        ser = Series(series_path)
        done = ser.released()
        for start in sorted(set(ready) - set(complete)):
            if label(start) in done:  # a late slice of a released window (closed as fresh)
                for r in ready[start]:
                    wstore.delete(window_keys(group, start, r)[1])
        for start in complete:
            closed = [window_keys(group, start, r)[1] for r in range(layout.count)]
            if label(start) not in done:
                rec = _release_one(wstore, closed, group, layout, config, spec, start, notice)
                if rec is not None:
                    ser.append(rec)  # the commit point: from here on the window is released
                    out.append(rec)
            for key in closed:
                wstore.delete(key)
    for rec in out:
        if on_release is not None:
            on_release(rec)
    return out


def _release_one(wstore: DirectoryStore, closed: list[str], group: str, layout: SliceLayout,
                 config: Family, spec: WindowSpec, start: int,
                 notice: Callable[[str], None]) -> dict[str, Any] | None:
    from panstream.state.merge import merge_slices

    c = config
    parts: dict[int, Estimator] = {}
    try:
        for r, key in enumerate(closed):
            data = wstore.load(key)
            if data is None:
                return None  # deleted meanwhile by a member that released it
            try:
                expect = estimators.expect_of(c.estimator, layout.slice_universe(r), c.epsilon,
                                              c.calibration, c.modulus)
                parts[r] = estimators.restore(data, expect=expect, layout=layout.table_layout)
            finally:
                wipe_buffer(data)
        est = merge_slices(parts, layout)
    finally:
        for e in parts.values():
            e.wipe()
    try:
        ledgers = Path(wstore.directory) / "ledgers" / _stamp(start)
        lstore = DirectoryStore(ledgers)
        with lstore.ledger_lock():
            est.ledger = group_ledger(lstore, new_ledger=True, budget=spec.release_epsilon)
            rel = est.release(spec.release_epsilon, spec.mechanism)
        out = rel.to_dict()
        out["time"] = float(spec.schedule.close_at(start))  # released_at: the schedule's instant
        return record(label(start), start, start + spec.size, est.kind, out,
                      epsilon_state=est.epsilon_state)
    except BudgetExhaustedError:
        notice(f"window {label(start)}: its one release was already reserved in {ledgers} but "
               "its record is not in the series (a crash between the two): the window is dropped "
               "rather than released twice")
        return None
    finally:
        est.wipe()
