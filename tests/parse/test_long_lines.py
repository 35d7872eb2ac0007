"""A long log line keeps its client: only the bytes needed to find the address are bounded.

Real access logs carry long URLs and user agents. A request line over 4096 bytes used to be counted
as malformed, so every such client was silently missing from the count. Now the reader keeps the
head of an over-long line (its first ``MAX_LINE + 1`` bytes; memory stays bounded) and the parser
reads the address from that head in ``clf`` and ``field:N``. A ``plain`` line is the item itself, so
a ``plain`` line over the limit stays malformed.

Each test runs the same bytes both ways: inside one chunk (the parser sees the whole line) and
spanning chunks (the reader cuts the line to its head), and checks that both agree.
"""

from __future__ import annotations

import io

import pytest

from panstream.inputs.parser import MAX_LINE, LineParser
from panstream.sources.files import ChunkReader
from panstream.universe import Universe

LONG_URL = b"/search?q=" + b"a" * 20_000
CLF = b'10.0.0.7 - - [10/Oct/2024:13:55:36 +0000] "GET ' + LONG_URL + b' HTTP/1.1" 200 512'


def _through_reader(data: bytes, parser: LineParser, chunk_size: int) -> tuple[list[int], int, int,
                                                                                int, int]:
    reader = ChunkReader(io.BytesIO(data).readinto, chunk_size=chunk_size, max_line=MAX_LINE)
    idx: list[int] = []
    lines = empty = malformed = outside = 0
    for chunk in reader:
        r = parser.parse(chunk)
        idx += r.indices.tolist()
        lines += r.lines
        empty += r.empty
        malformed += r.malformed
        outside += r.outside
    return idx, lines, empty, malformed, outside


def _both_ways(data: bytes, spec: str, fmt: str) -> tuple[list[int], int, int, int, int]:
    parser = LineParser(Universe.parse(spec), fmt)
    small = _through_reader(data, parser, chunk_size=2 * MAX_LINE)  # the long line spans chunks
    big = _through_reader(data, parser, chunk_size=1 << 20)  # the long line fits one chunk
    assert small == big
    return big


@pytest.mark.parametrize("spec", ["ipv4:10.0.0.0/24", "hashed:4096"])
def test_clf_line_with_a_long_url_keeps_its_client(spec: str) -> None:
    data = b"10.0.0.1 - - [x] \"GET /\" 200 1\n" + CLF + b"\n10.0.0.9 - - [x] \"GET /\" 200 1\n"
    idx, lines, empty, malformed, outside = _both_ways(data, spec, "clf")
    assert (lines, empty, malformed, outside) == (3, 0, 0, 0)
    if spec.startswith("ipv4"):
        assert idx == [1, 7, 9]


def test_field_n_finds_its_field_in_the_head_of_a_long_line() -> None:
    line = b"2024-10-10T13:55:36Z 10.0.0.7 GET " + LONG_URL
    idx, lines, _, malformed, _ = _both_ways(line + b"\n", "ipv4:10.0.0.0/24", "field:2")
    assert (idx, lines, malformed) == ([7], 1, 0)


def test_a_field_beyond_the_head_is_malformed_not_guessed() -> None:
    """field:3 starts after 5000 bytes: it is not in the head, so the line is malformed (never a
    truncated token counted as an item)."""
    line = b"10.0.0.1 " + b"b" * 5000 + b" 10.0.0.3"
    idx, lines, _, malformed, _ = _both_ways(line + b"\n", "ipv4:10.0.0.0/24", "field:3")
    assert (idx, lines, malformed) == ([], 1, 1)


def test_a_first_field_cut_by_the_limit_is_malformed_in_clf() -> None:
    """A hashed clf universe takes any first field: one cut by the limit must not be hashed."""
    line = b"u" * 6000 + b" rest"
    idx, lines, _, malformed, _ = _both_ways(line + b"\n", "hashed:4096", "clf")
    assert (idx, lines, malformed) == ([], 1, 1)


def test_a_long_plain_line_is_still_malformed() -> None:
    idx, lines, _, malformed, _ = _both_ways(b"10.0.0.1" + b" " * 5000 + b"x\n", "ipv4:10.0.0.0/24",
                                             "plain")
    assert (idx, lines, malformed) == ([], 1, 1)


def test_the_reader_buffer_stays_bounded() -> None:
    """A 50 MB line without a newline never grows the reader's buffer: every chunk it yields is at
    most chunk_size + max_line + 1 bytes, and the long line arrives as its head only."""
    data = b"10.0.0.1 " + b"z" * 50_000_000 + b"\n10.0.0.2 - x\n"
    reader = ChunkReader(io.BytesIO(data).readinto, chunk_size=1 << 16, max_line=MAX_LINE)
    sizes = [len(c) for c in reader]
    assert max(sizes) <= (1 << 16) + MAX_LINE + 1
    assert sum(sizes) == MAX_LINE + 2 + len(b"10.0.0.2 - x\n")


def test_long_line_at_end_of_input_without_newline() -> None:
    idx, lines, _, malformed, _ = _both_ways(CLF, "ipv4:10.0.0.0/24", "clf")
    assert (idx, lines, malformed) == ([7], 1, 0)
