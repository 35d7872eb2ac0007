"""What several benchmark scripts share: their synthetic items, the machine line of a report, and
the argument parser. Not a benchmark; the scripts import it from their own folder (``python3
bench/bench_x.py`` puts ``bench/`` first on the path).

Synthetic items come from NumPy's seeded generator: they are test data, never a privacy draw.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import subprocess
from pathlib import Path
from types import ModuleType

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
#: Exponent of the Zipf-distributed items ("zipf" streams: a few heavy items, a long tail).
ZIPF_A = 1.2


def make_items(size: int, dist: str, n: int, seed: int) -> np.ndarray:
    """``n`` cell indices in ``0..size-1``: uniform, or Zipf(``ZIPF_A``) spread over the cells by an
    odd multiplier (``dist`` is ``"uniform"`` or ``"zipf"``). The same ``seed`` gives the same items."""
    rng = np.random.default_rng([seed, size, 0 if dist == "uniform" else 1])
    if dist == "uniform":
        return rng.integers(0, size, size=n, dtype=np.intp)
    z = rng.zipf(ZIPF_A, size=n).astype(np.uint64)
    z %= np.uint64(size)
    z *= np.uint64(0x9E3779B97F4A7C15)  # odd: a bijection modulo any power of two
    z %= np.uint64(size)
    return z.astype(np.intp)


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (``"unknown"`` elsewhere)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def loadavg() -> str:
    """The 1-minute load average (``"unknown"`` elsewhere): above ~0.2 on a 2-CPU machine, other
    work shares the cores."""
    with contextlib.suppress(OSError):
        return Path("/proc/loadavg").read_text().split()[0]
    return "unknown"


def git_commit() -> str:
    """The checkout's short commit (``"unknown"`` outside git)."""
    with contextlib.suppress(Exception):
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    return "unknown"


def parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser described by the first line of a script's docstring."""
    return argparse.ArgumentParser(description=(doc or "").partition("\n")[0])


def audit_args(doc: str | None, results: str) -> argparse.Namespace:
    """The options of an audit benchmark: ``--trials`` (runs per world), ``--alpha`` (each bound's
    false-failure rate) and ``--out`` (default ``bench/results/RESULTS``)."""
    ap = parser(doc)
    ap.add_argument("--trials", type=int, default=10_000)
    ap.add_argument("--alpha", type=float, default=1e-6)
    ap.add_argument("--out", default=str(ROOT / "bench/results" / results))
    return ap.parse_args()


def test_module(name: str, path: str) -> ModuleType:
    """The test-tree module at ``path`` (relative to the checkout), loaded by file: the tests are not
    a package on the path (e.g. the broken-on-purpose designs an audit benchmark measures)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
