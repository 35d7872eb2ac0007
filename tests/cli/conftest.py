"""Factories for CLI tests: synthetic logs and a runner of the real ``panstream`` executable."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from panstream.demo import format_plain


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PANSTREAM_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture
def log_factory(tmp_path: Path) -> Callable[..., Path]:
    """Write a synthetic log (``plain`` or ``clf``) of ``lines`` addresses in 10.0.0.0/16 and 5 %
    outside; returns its path. Synthetic data only (NumPy PCG64 is fine for that)."""

    def make(lines: int = 10_000, fmt: str = "plain", name: str = "a.log", seed: int = 1,
             distinct: int = 1000) -> Path:
        rng = np.random.default_rng(seed)
        pool = (10 << 24) + rng.choice(1 << 16, size=distinct, replace=False)
        a = pool[rng.integers(0, distinct, size=lines)]
        out = rng.random(lines) < 0.05
        a[out] = (11 << 24) + rng.integers(0, 1 << 16, size=int(out.sum()))
        text = format_plain(a.astype(np.uint32))
        if fmt == "clf":
            text = b"".join(ln + b' - - [01/Jan/2024:00:00:00 +0000] "GET / HTTP/1.1" 200 512\n'
                            for ln in text.splitlines())
        p = tmp_path / name
        p.write_bytes(text)
        return p

    return make


@pytest.fixture
def run_cli() -> Callable[..., subprocess.CompletedProcess[bytes]]:
    """Run ``python -m panstream ARGS`` as a real process (optionally with stdin bytes or a shell
    pipeline via ``shell=True``)."""

    def run(args: list[str] | str, stdin: bytes | None = None, shell: bool = False,
            timeout: float = 60, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[bytes]:
        e = _clean_env()
        e.update(env or {})
        if shell:
            assert isinstance(args, str)
            cmd: list[str] | str = args.replace("panstream ", f"{sys.executable} -m panstream ")
        else:
            cmd = [sys.executable, "-m", "panstream", *args]
        return subprocess.run(cmd, input=stdin, capture_output=True, shell=shell, timeout=timeout,
                              env=e, check=False)

    return run


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in list(os.environ):
        if k.startswith("PANSTREAM_"):
            monkeypatch.delenv(k)
