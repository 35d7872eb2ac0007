"""Tumbling windows: a fresh table per window, released once on a public schedule, into a series.

The package's files are its parts, in the order a line meets them:

* :mod:`panstream.windows.schedule`: the public schedule (which windows exist, when each opens
  and is released: a function of the declared range and the clock, never of a line) and the
  horizon's arithmetic;
* :mod:`panstream.windows.eventtime`: durations, a window's start, the name of an instant (the
  time each log line carries is read in ``inputs/``, beside its address, since issue 36:
  :mod:`panstream.inputs.times`, the format's own rule, and :mod:`panstream.inputs.zones` for a
  local time; ``eventtime`` re-exports those names, and ``panstream.windows.zones`` is an alias,
  for one release);
* :mod:`panstream.windows.series`: the released series (one durable record per window), its
  picture and its metrics;
* :mod:`panstream.windows.release`: a window of the routed Kafka layout released once from its
  closed slices (merge, the window's own ledger, series append; issue 35) and the group's window
  settings (:class:`~panstream.windows.release.WindowSpec`).

The drivers are sources and sit above this package (issue 36): ``panstream ingest --window`` over
files and standard input is :mod:`panstream.sources.windowed` (:class:`WindowedIngestor`: the
commit order of a closing window; ``panstream.windows.ingestor`` still imports, as an alias, for
one release), ``panstream kafka --window`` is :mod:`panstream.sources.kafka.windows`; the command
line is :mod:`panstream.cli.window_options` and :mod:`panstream.cli.kafka_windows`.
"""

from panstream.windows.schedule import WindowSchedule, duration_text, horizon_line, windows_met

__all__ = ["WindowSchedule", "duration_text", "horizon_line", "windows_met"]
