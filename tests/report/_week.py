"""The published files of a small deployment, made by panstream's own commands from synthetic
access logs: a week of daily windows (``ingest --window 1d``, each day its own table, released
once) and one /24 map of the week (``ingest`` into a state, then ``release --by /24 --json``).

Shared by the report tests and by docs/report.png::

    python3 tests/report/_week.py DIR      # writes the logs, week.jsonl and map.json into DIR
    panstream report --series DIR/week.jsonl --map DIR/map.json --horizon 7d -o report.html
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

UNIVERSE = "ipv4:10.0.0.0/16"
DAY = 86400
#: 2026-11-16 00:00 UTC, a Monday.
START = 1_794_787_200
#: Distinct clients per day: busy weekdays, a quiet Saturday, and a Sunday outage whose estimate
#: is noise-dominated. (The truth stays in the generator: nothing of it is written.)
DAILY = (5200, 5600, 5400, 5900, 4800, 2100, 60)
#: Share of each /20 of the /16 that is in use: busy, medium, sparse and unused blocks.
LEVELS = (0.9, 0.05, 0.6, 0.0, 0.3, 0.75, 0.0, 0.45, 0.15, 0.0, 0.85, 0.5, 0.0, 0.25, 0.7, 0.35)


def population(rng: np.random.Generator) -> np.ndarray:
    """The week's clients (host numbers in the /16): each /24 filled to about its /20's level."""
    level = np.repeat(LEVELS, 16)
    dens = np.clip(level + rng.normal(0, 0.04, 256) * (level > 0), 0, 1)
    return np.concatenate([b * 256 + rng.choice(256, size=int(round(d * 256)), replace=False)
                           for b, d in enumerate(dens)])


def write_logs(out: Path) -> list[Path]:
    """Seven daily Apache combined logs (``access.log-20261116`` ...), each line at its time."""
    rng = np.random.default_rng(2026)  # test data only; panstream draws from the OS CSPRNG
    clients = population(rng)
    paths = []
    for day, n in enumerate(DAILY):
        who = rng.choice(clients, size=n, replace=False)
        visits = np.repeat(who, rng.integers(1, 4, size=n))
        times = np.sort(START + day * DAY + rng.integers(0, DAY, size=visits.size))
        rng.shuffle(visits)
        stamp = time.strftime("%Y%m%d", time.gmtime(START + day * DAY))
        path = out / f"access.log-{stamp}"
        with open(path, "w", encoding="ascii") as f:
            for host, t in zip(visits, times, strict=True):
                when = time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(int(t)))
                f.write(f'10.0.{host >> 8}.{host & 255} - - [{when}] "GET / HTTP/1.1" 200 512 '
                        f'"-" "Mozilla/5.0"\n')
        paths.append(path)
    return paths


#: The commands that publish the week (run in the output directory; ``LOGS`` = the seven logs).
COMMANDS = (
    ["ingest", "-u", UNIVERSE, "-f", "clf", "--window", "1d", "--from", "2026-11-16", "--to", "2026-11-23", "--epsilon", "1",
     "--release-epsilon", "0.5", "--series", "week.jsonl", "-s", "day.pst", "LOGS"],
    ["ingest", "-u", UNIVERSE, "-f", "clf", "--epsilon", "1", "-s", "week.pst", "LOGS"],
    ["release", "-s", "week.pst", "--epsilon", "1", "--by", "/24", "--json"],
)


def write_week(out: Path) -> tuple[Path, Path]:
    """Write the logs, then ``week.jsonl`` and ``map.json`` with panstream's commands."""
    out.mkdir(parents=True, exist_ok=True)
    for name in ("week.jsonl", "map.json", "day.pst", "week.pst"):
        (out / name).unlink(missing_ok=True)
    logs = [p.name for p in write_logs(out)]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    env = {k: v for k, v in env.items() if not k.startswith("PANSTREAM_")}
    for cmd in COMMANDS:
        args = [a for c in cmd for a in (logs if c == "LOGS" else [c])]
        res = subprocess.run([sys.executable, "-m", "panstream", *args], cwd=out, env=env,
                             capture_output=True, text=True, timeout=300, check=False)
        if res.returncode != 0:
            raise RuntimeError(f"panstream {' '.join(cmd)}: {res.stderr}")
        if "--json" in cmd:
            (out / "map.json").write_text(res.stdout)
    return out / "week.jsonl", out / "map.json"


if __name__ == "__main__":
    print(*write_week(Path(sys.argv[1])))
