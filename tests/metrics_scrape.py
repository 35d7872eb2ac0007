"""Read a ``/metrics`` endpoint in tests (importable as ``metrics_scrape``: pytest puts ``tests/``
on the path): the Prometheus text format's samples, and the port a command announces."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from typing import IO

_SAMPLE = re.compile(r"^(\w+)(?:\{(.*)\})? (\S+)$")


def samples(port: int) -> list[tuple[str, dict[str, str], float]]:
    """Every sample served on ``127.0.0.1:port/metrics``: ``(name, labels, value)``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m:
            out.append((m.group(1), dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or "")),
                        float(m.group(3))))
    return out


def by_name(port: int) -> dict[str, tuple[dict[str, str], float]]:
    """``{name: (labels, value)}`` (the last sample of each name)."""
    return {name: (labels, value) for name, labels, value in samples(port)}


def announced_port(stderr: IO[str], lines: int = 10) -> int | None:
    """The port of the ``http://127.0.0.1:PORT/metrics`` a command prints on stderr at start."""
    for _ in range(lines):
        m = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", stderr.readline())
        if m:
            return int(m.group(1))
    return None


@contextlib.contextmanager
def ingest_serving(*args: str, stdout: int | None = subprocess.DEVNULL
                   ) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """``panstream ingest ARGS --metrics-port 0`` reading a pipe (text mode, no PANSTREAM_
    variables): the process and the port it announced; killed at the end if still running."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PANSTREAM_")}
    proc = subprocess.Popen([sys.executable, "-m", "panstream", "ingest", *args,
                             "--metrics-port", "0"], stdin=subprocess.PIPE, stdout=stdout,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stderr is not None
        port = announced_port(proc.stderr)
        assert port is not None, "no metrics port announced"
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
