"""Review regression: the Kafka decoder parses message values from a buffer it owns and wipes.

The joined batch is built as a ``bytearray`` directly (no immutable ``bytes`` copy of the items left
in freed memory, no reallocation when the final newline is appended) and zeroed after parsing.
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
        assert isinstance(buf, bytearray)
        assert content == b"10.0.0.1\n10.0.0.2\njunk\n192.168.0.1\n"
        assert not any(buf)  # wiped after parsing
