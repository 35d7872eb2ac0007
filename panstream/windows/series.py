"""The released series: one durable record per closed window, its picture and its metrics.

A windowed ``ingest`` (:mod:`panstream.windows`) releases each window's table once when the window
closes and appends the result here. The series file is the record of which windows were released:
a window whose record is in the file was released, and is never released again (a second release
of the same table would spend its budget twice).

* :class:`Series` appends records durably (one ``write`` of a whole line, then ``fsync``; the
  directory is synced when the file is created) to a JSON-lines file, or to CSV when the name ends
  in ``.csv``. A line torn by a crash mid-write (no final newline) was never complete, hence never
  published: it is cut off when the file is opened again, and the window is released afresh.
* :func:`record` builds a record from a release of any family (:func:`headline` picks the figure
  a dashboard shows: the distinct count of a density table, the present cells of a frequency
  table, or ``estimate``/``low``/``high`` of a family that names them so).
* :func:`read` reads a series back (either format); :func:`plot_series` draws it (matplotlib, the
  ``plot`` extra); :class:`SeriesMetrics` serves the last record as Prometheus gauges.

Everything in a record is the release (noisy, computed from the table and public parameters), the
window's public bounds and epsilons, and optionally the late-record counts under an explicit
telemetry opt-in (noisy, or exact): nothing exact about arrivals by default.

>>> import os, tempfile
>>> s = Series(os.path.join(tempfile.mkdtemp(), "daily.jsonl"))
>>> s.append({"window": "2026-11-24T00:00:00Z", "estimate": 812.5})
>>> sorted(Series(s.path).released()), read(s.path)[0]["estimate"]
(['2026-11-24T00:00:00Z'], 812.5)
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from statistics import NormalDist
from typing import Any

import numpy as np

from panstream.errors import ConfigurationError, StateError
from panstream.release.honesty import noise_dominated

__all__ = ["CSV_FIELDS", "ReleaseMetrics", "Series", "SeriesMetrics", "complete", "dropped_text",
           "headline", "plot_series", "read", "record"]

#: Columns of a CSV series (a JSON-lines series also keeps the whole release under ``release``).
CSV_FIELDS = ("window", "start", "end", "family", "statistic", "estimate", "low", "high",
              "confidence", "epsilon_state", "epsilon_release", "epsilon_window", "mechanism",
              "universe", "late_records", "untimed_records", "late_sd", "released_at", "stderr",
              "noise_dominated", "early_records")

_NUMERIC = {"start", "end", "estimate", "low", "high", "confidence", "epsilon_state",
            "epsilon_release", "epsilon_window", "late_records", "untimed_records", "late_sd",
            "early_records",
            "released_at", "stderr"}


def headline(rel: Mapping[str, Any]) -> tuple[str, float, float, float]:
    """``(statistic, estimate, low, high)`` of a release's ``to_dict()``, for any family.

    Density: the distinct count and its interval (``distinct_low``/``distinct_high``); sketch:
    ``distinct`` and its ``low``/``high``; frequency: the present cells (``stats.present``);
    another family: its ``distinct``/``distinct_low``/``distinct_high`` or
    ``estimate``/``low``/``high`` fields.

    Raises:
        ConfigurationError: the release names none of these.
    """
    if "estimate" in rel and "statistic" in rel:  # the common shape (panstream.release.schema)
        return str(rel["statistic"]), float(rel["estimate"]), float(rel["low"]), \
            float(rel["high"])
    if "distinct" in rel and "distinct_low" in rel:
        return "distinct", float(rel["distinct"]), float(rel["distinct_low"]), \
            float(rel["distinct_high"])
    if "distinct" in rel and "low" in rel:  # a sketch's release (SketchRelease)
        return "distinct", float(rel["distinct"]), float(rel["low"]), float(rel["high"])
    stats = rel.get("stats")
    if isinstance(stats, Mapping) and isinstance(stats.get("present"), Mapping):
        v = stats["present"]
        return "present", float(v["value"]), float(v["low"]), float(v["high"])
    if "estimate" in rel:
        return str(rel.get("statistic", "estimate")), float(rel["estimate"]), \
            float(rel["low"]), float(rel["high"])
    msg = ("this release has no headline figure (distinct, stats.present, or estimate/low/high): "
           "a windowed series cannot show it")
    raise ConfigurationError(msg)


def record(window: str, start: int, end: int, family: str, rel: Mapping[str, Any], *,
           epsilon_state: float, late: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The series record of one closed window.

    Args:
        window: the window's id (its start, ISO 8601 UTC).
        start, end: its bounds in UNIX seconds (end exclusive).
        family: the estimator family.
        rel: the release's ``to_dict()``.
        epsilon_state: the window table's realized state epsilon.
        late: ``{"early_records", "late_records", "untimed_records", "late_sd"}`` under a
            telemetry opt-in, else ``None`` (the fields are then ``None``: not counted). Early:
            stamped before the declared range or for a window not yet begun; late: after the
            range, or for a window closed or released (issue 37: both used to be "late").
    """
    stat, est, lo, hi = headline(rel)
    eps = rel["epsilon"]
    eps_rel = float(eps["release"] if isinstance(eps, Mapping) else eps)
    late = late or {}
    conf = float(rel.get("confidence", math.nan))
    se = rel.get("stderr")
    if se is None:  # an older release: the interval's half-width over z
        z = NormalDist().inv_cdf(0.5 + conf / 2) if 0 < conf < 1 else 1.959963984540054
        se = (hi - lo) / (2 * z)
    window_eps = float(epsilon_state) + eps_rel
    return {
        "window": window, "start": int(start), "end": int(end), "family": family,
        "statistic": stat, "estimate": est, "low": lo, "high": hi, "stderr": float(se),
        "confidence": conf, "noise_dominated": noise_dominated(est, lo, hi),
        "epsilon": {"state": float(epsilon_state), "release": eps_rel, "total": window_eps},
        "epsilon_state": float(epsilon_state), "epsilon_release": eps_rel,
        "epsilon_window": window_eps,
        "mechanism": rel.get("mechanism"), "universe": rel.get("universe"),
        "early_records": late.get("early_records"), "late_records": late.get("late_records"),
        "untimed_records": late.get("untimed_records"),
        "late_sd": late.get("late_sd"), "released_at": float(rel.get("time", math.nan)),
        "release": dict(rel),
    }


def dropped_text(rec: Mapping[str, Any]) -> str:
    """The dropped lines of a record (a counting opt-in) in words: early (before the declared
    range, or for a window the clock has not begun), late (after it, or for a window closed or
    released), untimed (no readable time). An older record has no early count.

    >>> dropped_text({"early_records": 5, "late_records": 0, "untimed_records": 2, "late_sd": 0.0})
    'dropped lines: early ~5, late ~0, untimed ~2 (sd 0.0)'
    """
    def n(key: str) -> str:
        return f"~{max(float(rec.get(key) or 0), 0):,.0f}"

    early = f"early {n('early_records')}, " if rec.get("early_records") is not None else ""
    return (f"dropped lines: {early}late {n('late_records')}, untimed {n('untimed_records')} "
            f"(sd {float(rec.get('late_sd') or 0):.1f})")


class Series:
    """A series file: JSON lines (default) or CSV (a name ending in ``.csv``), append-only.

    Args:
        path: the file (created by the first :meth:`append`; its directory must exist).

    Raises:
        StateError: the file exists but cannot be read as a series.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.csv = self.path.lower().endswith(".csv")
        self._repair()
        #: The CSV columns written: those of the file's own header when it has one (a series
        #: begun before a column was added keeps its columns), else :data:`CSV_FIELDS`.
        self._columns = self._header() if self.csv else CSV_FIELDS
        recs = read(self.path) if os.path.exists(self.path) else []
        self._released = {str(r["window"]) for r in recs}
        #: Window lengths (seconds) of the records, to refuse mixing window sizes in one file.
        self.lengths = {int(float(r["end"]) - float(r["start"])) for r in recs
                        if r.get("start") is not None and r.get("end") is not None}

    def released(self) -> set[str]:
        """Ids of the windows released (their record is in the file)."""
        return set(self._released)

    def _repair(self) -> None:
        """Cut a final line torn by a crash (it was never complete, so never published)."""
        try:
            with open(self.path, "rb+") as f:
                data = f.read()
                if data and not data.endswith(b"\n"):
                    keep = data.rfind(b"\n") + 1
                    f.truncate(keep)
                    f.flush()
                    os.fsync(f.fileno())
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StateError(f"cannot open the series {self.path}: {exc.strerror}") from None

    def _header(self) -> tuple[str, ...]:
        try:
            with open(self.path, encoding="utf-8", newline="") as f:
                first = next(csv.reader(f), None)
        except FileNotFoundError:
            return CSV_FIELDS
        except OSError as exc:
            raise StateError(f"cannot open the series {self.path}: {exc.strerror}") from None
        return tuple(first) if first else CSV_FIELDS

    def _encode(self, rec: Mapping[str, Any], header: bool) -> bytes:
        if not self.csv:
            clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                     for k, v in rec.items()}
            return (json.dumps(clean, sort_keys=True, allow_nan=False, default=str) + "\n").encode()
        out = io.StringIO()
        cols = CSV_FIELDS if header else self._columns
        w = csv.DictWriter(out, cols, extrasaction="ignore", lineterminator="\n")
        if header:
            w.writeheader()
        w.writerow({k: ("" if rec.get(k) is None else rec.get(k)) for k in cols})
        return out.getvalue().encode()

    def append(self, rec: Mapping[str, Any]) -> None:
        """Append ``rec`` durably: one write of the whole line, ``fsync``, and on creation the
        directory's ``fsync``. When this returns the window counts as released.

        Raises:
            StateError: the record could not be made durable (the window is then not released).
        """
        new = not os.path.exists(self.path) or os.path.getsize(self.path) == 0
        data = self._encode(rec, header=new)
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            if new:
                dfd = os.open(os.path.dirname(os.path.abspath(self.path)), os.O_RDONLY)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)
        except OSError as exc:
            msg = (f"cannot append to the series {self.path}: {exc.strerror}; free disk space or "
                   "fix permissions: the window stays open and is released at the next run")
            raise StateError(msg) from None
        self._released.add(str(rec["window"]))


def complete(rec: dict[str, Any]) -> dict[str, Any]:
    """Fill the common fields an older record (or a CSV line) lacks, in place: the ``epsilon``
    object from its ``epsilon_*`` columns, ``stderr`` from the interval, ``noise_dominated``."""
    if not isinstance(rec.get("epsilon"), Mapping) and rec.get("epsilon_state") is not None:
        st = float(rec["epsilon_state"])
        rl = float(rec.get("epsilon_release") or 0.0)
        rec["epsilon"] = {"state": st, "release": rl,
                          "total": float(rec.get("epsilon_window") or st + rl)}
    vals = [rec.get(k) for k in ("estimate", "low", "high")]
    if None not in vals:
        est, lo, hi = (float(v) for v in vals)  # type: ignore[arg-type]
        if rec.get("noise_dominated") is None:
            rec["noise_dominated"] = noise_dominated(est, lo, hi)
        if rec.get("stderr") is None:
            conf = rec.get("confidence")
            c = float(conf) if conf is not None and 0 < float(conf) < 1 else 0.95
            rec["stderr"] = (hi - lo) / (2 * NormalDist().inv_cdf(0.5 + c / 2))
    return rec


def read(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of a series file (JSON lines, or CSV by its name), oldest first; a torn final
    line is ignored.

    Raises:
        StateError: missing file or a line that is not a series record.
    """
    p = os.fspath(path)
    try:
        with open(p, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise StateError(f"cannot read the series {p}: {exc.strerror}") from None
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    out: list[dict[str, Any]] = []
    if p.lower().endswith(".csv"):
        for n, row in enumerate(csv.DictReader(io.StringIO(text)), start=2):
            if "window" not in row or not row["window"]:
                raise StateError(f"{p}, line {n}: not a series record (no window column)")
            rec: dict[str, Any] = {}
            for k, v in row.items():
                if k in _NUMERIC:
                    rec[k] = None if v in ("", None) else float(v)
                elif k == "noise_dominated":
                    rec[k] = None if v in ("", None) else v == "True"
                else:
                    rec[k] = v
            out.append(complete(rec))
        return out
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except ValueError:
            d = None
        if not isinstance(d, dict) or "window" not in d:
            raise StateError(f"{p}, line {n}: not a series record (JSON with a 'window' field)")
        out.append(complete(d))
    return out


def plot_series(records: Sequence[Mapping[str, Any]], path: str | os.PathLike[str],
                title: str | None = None) -> Any:
    """Draw each window's estimate (a point at the window's middle) with its interval (an error
    bar) over time, and write a PNG to ``path``.

    Returns:
        The matplotlib ``Figure`` (its first axes' first line holds the points drawn).

    Raises:
        ConfigurationError: matplotlib is missing (the ``plot`` extra), or no records.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        msg = ("plotting a series needs matplotlib: install the plot extra, "
               "pip install 'panstream[plot]'")
        raise ConfigurationError(msg) from None
    if not records:
        raise ConfigurationError("the series has no records to plot")
    recs = sorted(records, key=lambda r: float(r["start"]))
    x = np.array([int((float(r["start"]) + float(r["end"])) // 2) for r in recs],
                 dtype="datetime64[s]")
    # Drawn clamped at 0 (a count is never negative; the file keeps the unbiased values).
    y = [max(0.0, float(r["estimate"])) for r in recs]
    lo = [max(0.0, yi - max(0.0, float(r["low"]))) for yi, r in zip(y, recs, strict=True)]
    hi = [max(0.0, max(0.0, float(r["high"])) - yi) for yi, r in zip(y, recs, strict=True)]
    noisy = [bool(complete(dict(r)).get("noise_dominated")) for r in recs]
    fig = Figure(figsize=(9, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(x, y, marker="o", linestyle="-", color="C0", label="estimate")
    if any(noisy):
        xs = x[np.array(noisy)]
        ax.plot(xs, [yi for yi, n in zip(y, noisy, strict=True) if n], marker="o",
                linestyle="none", markerfacecolor="white", color="C3",
                label="noise-dominated (interval wider than the value)")
    ax.errorbar(x, y, yerr=[lo, hi], fmt="none", ecolor="C0", alpha=0.5, capsize=3,
                label=f"{100 * float(recs[0].get('confidence') or 0.95):g} % interval")
    stat = recs[0].get("statistic", "estimate")
    ax.set_ylabel(f"{stat} per window")
    ax.set_xlabel("window (UTC)")
    ew = recs[-1].get("epsilon_window")
    note = (f"\n{sum(noisy)} of {len(recs)} window(s) noise-dominated: "
            + ("read them as 'small', not as values" if sum(noisy) < len(recs) else
               "the series is mostly noise (a larger epsilon, a smaller universe or longer "
               "windows would help)") if any(noisy) else "")
    ax.set_title((title or (f"{stat} per window, {recs[0].get('universe', '')}; "
                            f"epsilon {float(ew):.3g} per window" if ew is not None else stat))
                 + note, fontsize=9 if note else None)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(os.fspath(path), format="png")
    return fig


def _prometheus() -> Any:
    try:
        import prometheus_client
    except ImportError:  # pragma: no cover - a declared dependency
        raise ConfigurationError("--metrics-port needs prometheus-client: pip install "
                                 "prometheus-client") from None
    return prometheus_client


class _Served:
    """A registry served on ``host:port`` (``/metrics``); :meth:`close` stops serving."""

    def __init__(self, port: int, host: str) -> None:
        self.registry = _prometheus().CollectorRegistry()
        self._port, self._host = port, host

    def _serve(self) -> None:
        try:
            self.server, _ = _prometheus().start_http_server(self._port, addr=self._host,
                                                             registry=self.registry)
        except OSError as exc:
            msg = (f"cannot serve metrics on {self._host}:{self._port}: {exc.strerror}; pick a "
                   "free port")
            raise ConfigurationError(msg) from None

    @property
    def port(self) -> int:
        """The port actually bound."""
        return int(self.server.server_port)

    def close(self) -> None:
        """Stop serving."""
        with contextlib.suppress(Exception):
            self.server.shutdown()
            self.server.server_close()

    def _release_gauges(self, prefix: str, what: str) -> None:
        """``{prefix}_estimate``, ``_low``, ``_high``, ``_epsilon`` (labels statistic, family)."""
        g, r, labels = _prometheus().Gauge, self.registry, ["statistic", "family"]
        self.estimate = g(f"{prefix}_estimate", f"Released estimate of {what} (noisy, unclamped: "
                          "may be below 0)", labels, registry=r)
        self.low = g(f"{prefix}_low", "Lower bound of its interval", labels, registry=r)
        self.high = g(f"{prefix}_high", "Upper bound of its interval", labels, registry=r)
        self._gauges = (self.estimate, self.low, self.high)

    def _show_release(self, rel: Mapping[str, Any], family: str) -> None:
        stat, est, lo, hi = headline(rel)
        for gauge in (*self._gauges, self.epsilon):
            gauge.clear()
        lab = {"statistic": stat, "family": family}
        self.estimate.labels(**lab).set(est)
        self.low.labels(**lab).set(lo)
        self.high.labels(**lab).set(hi)


class SeriesMetrics(_Served):
    """Prometheus gauges of the last closed window's release, served on ``host:port``.

    Gauges (labels ``statistic`` and ``family``, fixed for a run; only the last window is kept):
    ``panstream_window_estimate``, ``panstream_window_low``, ``panstream_window_high``,
    ``panstream_window_epsilon`` (the window's state + release epsilon), and the window itself as
    values, ``panstream_window_start_seconds`` and ``panstream_window_end_seconds`` (Unix time);
    the counter ``panstream_windows_released_total`` (how many windows this run released: the
    clock's doing, not the data's). Nothing about arrivals. (Until issue 37 the window's start
    and end were labels, a new series per window, and the count a gauge without ``_total``.)

    Args:
        port: TCP port (0: any free port, see :attr:`port`).
        host: address to bind (default loopback).

    Raises:
        ConfigurationError: prometheus-client missing, or the port cannot be bound.
    """

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        super().__init__(port, host)
        pc, r = _prometheus(), self.registry
        self._release_gauges("panstream_window", "the last closed window")
        self.epsilon = pc.Gauge("panstream_window_epsilon", "Epsilon of one window (state + "
                                "release): a person seen in W windows is covered at W x this",
                                ["statistic", "family"], registry=r)
        self.start = pc.Gauge("panstream_window_start_seconds", "Start of the last closed window "
                              "(Unix time)", registry=r)
        self.end = pc.Gauge("panstream_window_end_seconds", "End of the last closed window "
                            "(Unix time)", registry=r)
        self.released = pc.Counter("panstream_windows_released", "Windows released by this run",
                                   registry=r)
        self.count = 0
        self._serve()

    def show(self, rec: Mapping[str, Any], *, count: bool = True) -> None:
        """Make ``rec`` (a series record) the one served; ``count``: it was released by this run."""
        self._show_release(rec, str(rec.get("family", "")))
        self.epsilon.labels(statistic=str(rec.get("statistic", "estimate")),
                            family=str(rec.get("family", ""))).set(float(rec["epsilon_window"]))
        self.start.set(float(rec["start"]))
        self.end.set(float(rec["end"]))
        if count:
            self.count += 1
            self.released.inc()


class ReleaseMetrics(_Served):
    """Prometheus metrics of an unwindowed ``ingest`` run (issue 37: it had none), served on
    ``host:port``: the last periodic release (``--release-every``) as
    ``panstream_release_estimate``, ``_low``, ``_high`` and ``panstream_release_epsilon`` (labels
    ``statistic`` and ``family``), and liveness: ``panstream_ingest_uptime_seconds`` and the
    counters ``panstream_ingest_checkpoints_total`` and ``panstream_releases_total``, read from
    the run's statistics at each scrape. Checkpoints and releases run on fixed clocks from the
    start, and a release is what stdout prints anyway: nothing here counts arrivals.

    Args:
        port, host: where to serve (0: any free port).
        stats: the run's statistics (:class:`panstream.ingest.IngestStats`, read at each scrape).
        clock: monotonic clock (uptime).
    """

    def __init__(self, port: int, host: str, stats: Callable[[], Any],
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(port, host)
        pc, r = _prometheus(), self.registry
        self._release_gauges("panstream_release", "the last periodic release")
        self.epsilon = pc.Gauge("panstream_release_epsilon", "Output epsilon of that release",
                                ["statistic", "family"], registry=r)
        start = clock()
        uptime = pc.Gauge("panstream_ingest_uptime_seconds", "Seconds since the run started "
                          "(liveness)", registry=r)
        uptime.set_function(lambda: clock() - start)
        r.register(_StatsCounters(stats))
        self._serve()

    def show(self, rel: Mapping[str, Any], family: str) -> None:
        """Serve ``rel`` (a periodic release's ``to_dict()``) as the last release."""
        self._show_release(rel, family)
        eps = rel["epsilon"]
        stat = headline(rel)[0]
        self.epsilon.labels(statistic=stat, family=family).set(
            float(eps["release"] if isinstance(eps, Mapping) else eps))


class _StatsCounters:
    """``panstream_ingest_checkpoints_total`` and ``panstream_releases_total`` of a run's
    statistics, read at each scrape (a custom collector)."""

    def __init__(self, stats: Callable[[], Any]) -> None:
        self._stats = stats

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily

        s = self._stats()
        yield CounterMetricFamily("panstream_ingest_checkpoints", "Checkpoints written by this "
                                  "run (on the clock)", value=s.checkpoints)
        yield CounterMetricFamily("panstream_releases", "Periodic releases made by this run (on "
                                  "the clock)", value=s.releases)
