"""Issue 28, as a user meets it: logs whose clients carry a port, through the public-client paths.

Before, ``hashed-ip:M`` and ``--estimator sketch`` counted every ``addr:port`` as malformed: the
real AWS ALB sample had 0 of its 9 requests accepted (exit 0, a release of noise), and 20,000 ALB
lines stopped with exit 1 ("no address in field 4 (client:port)") while ``-f alb`` was right. Now
every universe kind reads the port's address (one normalization, ``panstream.normalize``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.logsamples import generate

ALB_SAMPLE = Path("/work/shared/reallogs/beats_aws_example-alb-http.log")
SPECS = [["-u", "hashed-ip:65536"], ["--estimator", "sketch"], ["-u", "ipv4:192.168.0.0/16"]]


def summary(r: object) -> dict:
    assert r.returncode == 0, r.stderr.decode()  # type: ignore[attr-defined]
    return json.loads(r.stdout.decode().splitlines()[-1])["summary"]  # type: ignore[attr-defined]


@pytest.mark.parametrize("spec", SPECS[:2])
def test_twenty_thousand_alb_lines_are_counted(spec: list[str], tmp_path: Path,
                                               run_cli: Callable) -> None:
    log = tmp_path / "alb.log"
    log.write_bytes(generate("alb", lines=20_000, distinct=2_000, seed=9).data)
    s = summary(run_cli(["ingest", *spec, "-s", str(tmp_path / "s.pst"), "-f", "alb", "--json",
                         "--exact-counts", str(log)], timeout=120))
    assert (s["lines"], s["accepted"], s["malformed"]) == (20_000, 20_000, 0)


@pytest.mark.skipif(not ALB_SAMPLE.exists(), reason="../shared/reallogs is not here")
@pytest.mark.parametrize("spec", SPECS)
def test_the_real_alb_sample_is_counted(spec: list[str], tmp_path: Path, run_cli: Callable) -> None:
    """elastic/beats' ALB test lines: 9 requests (3 clients) and one line without its client."""
    s = summary(run_cli(["ingest", *spec, "-s", str(tmp_path / "s.pst"), "-f", "alb", "--json",
                         "--exact-counts", "--keep-going", str(ALB_SAMPLE)]))
    accepted = 6 if "ipv4:192.168.0.0/16" in spec else 9  # 3 are from 10.0.0.0/8: outside
    assert (s["lines"], s["accepted"], s["outside"]) == (10, accepted, 9 - accepted)
