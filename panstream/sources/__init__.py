"""Input sources: chunked readers that yield byte buffers of complete lines.

Every reader yields ``memoryview`` chunks of its own reusable buffer, each ending with ``\\n``;
the buffer is overwritten with zeros as soon as the consumer asks for the next chunk, so raw log
lines do not linger in memory. A line longer than ``max_line`` bytes that does not fit a chunk is
cut to its head (its first ``max_line + 1`` bytes, all the parser looks at), so the
buffer stays bounded while the parser can still find a leading field such as a log's client
address. An empty chunk means "no data for a while" (an idle tick on a pipe or terminal), so that a
consumer can checkpoint or stop.

The package's modules, the drivers on top of the house (docs/architecture.md):

* :mod:`panstream.sources.files`, :mod:`panstream.sources.stdin`: the chunked readers;
* :mod:`panstream.sources.ingest`: the file driver of ``panstream ingest`` (``panstream.ingest``
  until issue 36, still an alias for one release);
* :mod:`panstream.sources.windowed`: the driver of ``panstream ingest --window``
  (``panstream.windows.ingestor`` until issue 36, still an alias), with
  :mod:`panstream.sources.window_lines` (where a line goes: the open window of its time, or
  nowhere; the refusals of a run that can place none) and :mod:`panstream.sources.window_files`
  (the open windows' state files);
* :mod:`panstream.sources.kafka`: the Kafka stages.

>>> import io
>>> r = ChunkReader(io.BytesIO(b"a\\nbb\\nccc").readinto, name="example")
>>> [bytes(c) for c in r]
[b'a\\nbb\\nccc\\n']
"""

from panstream.sources.files import ChunkReader, open_input
from panstream.sources.stdin import stdin_reader

__all__ = ["ChunkReader", "open_input", "stdin_reader"]
