"""Tumbling windows: a fresh table per window, released once on a public schedule, into a series.

The package's files are its parts, in the order a line meets them:

* :mod:`panstream.windows.eventtime`: the time each log line carries (vectorized), durations,
  window arithmetic;
* :mod:`panstream.windows.series`: the released series (one durable record per window), its
  picture and its metrics;
* :mod:`panstream.windows.ingestor`: the driver of ``panstream ingest --window`` over files and
  standard input (:class:`WindowedIngestor`: the commit order of a closing window).

The Kafka driver (``panstream kafka --window``) is Kafka I/O and lives with the other Kafka stages
in :mod:`panstream.sources.kafka.windows`; the command line in :mod:`panstream.cli.window_options`
and :mod:`panstream.cli.kafka_windows`.
"""

from panstream.windows.ingestor import (
    MAX_GAP,
    WindowedIngestor,
    WindowStats,
    duration_text,
    horizon_line,
    window_files,
    window_path,
    window_stem,
    windows_in,
)

__all__ = ["MAX_GAP", "WindowStats", "WindowedIngestor", "duration_text", "horizon_line",
           "window_files", "window_path", "window_stem", "windows_in"]
