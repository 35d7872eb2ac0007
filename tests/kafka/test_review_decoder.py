"""Review regression: the Kafka decoder parses message values from a buffer it owns and wipes.

The joined batch is built in a ``bytearray`` directly (no immutable ``bytes`` copy of the items left
in freed memory, no reallocation when the final newline is appended) and zeroed after parsing. The
``lines`` format joins into one buffer the decoder keeps and reuses (issue 38: a fresh one per chunk
was page-faulted in each time); the parser sees a view of it, and all of it is zero between calls.
"""

from __future__ import annotations

from typing import Any

import pytest

from panstream.inputs.parser import LineParser
from panstream.sources.kafka import Decoder
from panstream.universe import Universe


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    bufs: list[Any] = []
    real = LineParser.parse

    def spy(self: LineParser, buf: Any, *a: Any, **kw: Any) -> Any:
        bufs.append((buf, bytes(buf)))
        return real(self, buf, *a, **kw)

    monkeypatch.setattr(LineParser, "parse", spy)
    return bufs


@pytest.mark.parametrize("fmt", ["item", "lines"])
def test_joined_buffer_is_owned_newline_terminated_and_wiped(seen: list[Any], fmt: str) -> None:
    u = Universe.parse("ipv4:10.0.0.0/16")
    values: list[bytes | None] = [b"10.0.0.1", b"10.0.0.2", b"junk", b"192.168.0.1"]
    dec = Decoder(u, fmt)(values)
    assert sorted(dec.indices.tolist()) == [1, 2]
    assert (dec.malformed, dec.outside) == (1, 1)
    assert seen, "the vectorized parser was not used"
    for buf, content in seen:
        owner = buf.obj if isinstance(buf, memoryview) else buf
        assert isinstance(owner, bytearray)  # a buffer the decoder owns and can wipe
        assert content == b"10.0.0.1\n10.0.0.2\njunk\n192.168.0.1\n"
        assert not any(owner)  # wiped after parsing, all of it


def test_lines_reuse_one_buffer_in_chunks_and_leave_it_zeroed(seen: list[Any]) -> None:
    """Values of more than one chunk (ingest's 2 MiB) are parsed chunk by chunk in the same
    buffer, each chunk whole values with a newline after each; the cells are all there."""
    u = Universe.parse("ipv4:10.0.0.0/16")
    line = b"10.0.%d.%d - - [24/Nov/2026:10:00:00 +0000] \"GET / HTTP/1.1\" 200 1 \"-\" \"-\""
    values: list[bytes | None] = [b"\n".join(line % (m % 256, k) for k in range(250))
                                  for m in range(400)]  # about 5 MiB
    d = Decoder(u, "lines", "clf")
    for _ in range(2):
        seen.clear()
        dec = d(values)
        assert dec.indices.size == 400 * 250 and (dec.malformed, dec.outside) == (0, 0)
        assert sorted(set(dec.indices.tolist())) == sorted({(m % 256) << 8 | k for m in range(400)
                                                            for k in range(250)})
        assert len(seen) >= 3 and len({id(b.obj) for b, _ in seen}) == 1  # one buffer, reused
        for _, content in seen:
            assert content.endswith(b"\n") and not content.startswith(b"\n")
        assert not any(d._joined)
