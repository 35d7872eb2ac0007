"""The ingest loop stops a stream that parses to (almost) nothing, early, on released counts only.

A fake clock advances one second per loop turn, so every chunk closes a telemetry window: the loop
must stop at the first window whose released totals cover 200 non-empty lines, long before the
input ends, write its final checkpoint, and raise the one-line InputFormatError.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from logsamples import generate

from panstream.errors import InputFormatError
from panstream.estimators.density import DensityEstimator
from panstream.ingest import Ingestor, Input
from panstream.parse import Format, parse_format
from panstream.sources import ChunkReader
from panstream.telemetry import TelemetryPolicy


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


class Counting(ChunkReader):
    """A reader that counts how many chunks the loop asked for (test bookkeeping only)."""

    def __init__(self, data: bytes, chunk: int = 8192) -> None:
        super().__init__(io.BytesIO(data).readinto, chunk_size=chunk, max_line=1024)
        self.chunks = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        for c in super().__iter__():
            self.chunks += 1
            yield c


#: A Caddy-like JSON log: 400,000 lines of 69 bytes, ~7,600 per 512 KiB chunk (55 chunks).
CADDY = b'{"request":{"remote_ip":"10.0.0.7","proto":"HTTP/2.0"},"status":200}\n' * 400_000


@pytest.mark.parametrize("telemetry", [TelemetryPolicy.exact_counts(), TelemetryPolicy()])
def test_a_json_stream_read_as_clf_stops_after_its_first_sample(tmp_path: Path,
                                                                telemetry: TelemetryPolicy) -> None:
    """Whatever the telemetry (nothing counted, the default, or exact counts), the input is judged
    on the exact counts of its first 1,000 non-empty lines, which the first chunk holds: the run
    stops after that chunk, not at the end of the input (55 chunks)."""
    reader = Counting(CADDY, chunk=1 << 19)
    state = tmp_path / "s.pst"
    ing = Ingestor(DensityEstimator("ipv4:10.0.0.0/16"), Format("clf"), state_path=str(state),
                   clock=Clock(), telemetry=telemetry)
    with pytest.raises(InputFormatError, match=r"malformed .* \(-f clf, given\): .*json:PATH"):
        ing.run([Input("caddy.log", reader)])
    assert reader.chunks == 1  # stopped early, not at the end of the input (55 chunks)
    assert state.exists() and ing.stats.checkpoints == 1 and not ing.stats.interrupted


def test_auto_names_its_choice_and_keep_going_never_stops(tmp_path: Path) -> None:
    data = generate("alb", lines=3000, distinct=500).data
    notices: list[str] = []
    ing = Ingestor(DensityEstimator("ipv4:192.168.0.0/16"), parse_format("auto"), clock=Clock(),
                   telemetry=TelemetryPolicy.exact_counts(), on_notice=notices.append, check=False)
    s = ing.run([Input("alb.log", Counting(data), position=lambda: (0, len(data)))])  # a file
    assert notices == ["alb.log: format AWS ALB log detected (-f alb)"]
    assert s.accepted == 0 and s.outside > 2800  # all outside, but --keep-going: no error


def test_a_short_input_is_not_judged(tmp_path: Path) -> None:
    ing = Ingestor(DensityEstimator("ipv4:10.0.0.0/16"), Format("plain"), clock=Clock(),
                   telemetry=TelemetryPolicy.exact_counts())
    s = ing.run([Input("a", Counting(b"junk\n" * 150))])
    assert s.malformed == 150
