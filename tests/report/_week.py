"""The published files of a small deployment, made by panstream's own commands from synthetic
access logs: a week of daily windows (``ingest --window 1d``, each day its own table, released
once), one /24 map of the week (``ingest`` into a state, then ``release --by /24 --json``) and,
from a log of public clients, distinct clients per country (``ingest -u
sketch:1024x24:ip-country``, then ``release --by country --json``).

Shared by the report tests and by docs/report.png::

    python3 tests/report/_week.py DIR      # writes the logs, week.jsonl, map.json, countries.json
    panstream report --series DIR/week.jsonl --map DIR/map.json --release DIR/countries.json \
        --horizon 7d -o report.html
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
    ["ingest", "-u", UNIVERSE, "-f", "clf", "--window", "1d", "--from", "2026-11-16", "--to",
     "2026-11-23", "--epsilon", "1", "--release-epsilon", "0.5", "--series", "week.jsonl",
     "-s", "day.pst", "LOGS"],
    ["ingest", "-u", UNIVERSE, "-f", "clf", "--epsilon", "1", "-s", "week.pst", "LOGS"],
    ["release", "-s", "week.pst", "--epsilon", "1", "--by", "/24", "--json"],
)


def write_week(out: Path) -> tuple[Path, Path]:
    """Write the logs, then ``week.jsonl`` and ``map.json`` with panstream's commands."""
    out.mkdir(parents=True, exist_ok=True)
    for name in ("week.jsonl", "map.json", "day.pst", "week.pst"):
        (out / name).unlink(missing_ok=True)
    logs = [p.name for p in write_logs(out)]
    for cmd in COMMANDS:
        stdout = _panstream(out, [a for c in cmd for a in (logs if c == "LOGS" else [c])])
        if "--json" in cmd:
            (out / "map.json").write_text(stdout)
    return out / "week.jsonl", out / "map.json"


def _panstream(cwd: Path, args: list[str]) -> str:
    """Run this checkout's ``panstream *args`` in ``cwd`` (no ``PANSTREAM_*`` settings from the
    environment); its stdout.

    Raises:
        RuntimeError: the command failed (its stderr).
    """
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    env = {k: v for k, v in env.items() if not k.startswith("PANSTREAM_")}
    res = subprocess.run([sys.executable, "-m", "panstream", *args], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=300, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"panstream {' '.join(args)}: {res.stderr}")
    return res.stdout


#: Public client blocks of the country log (first octets) and their weights: a few large
#: countries and many small ones, as the registries assigned those blocks.
PUBLIC_BLOCKS = ((8, 30), (24, 5), (31, 8), (41, 6), (49, 4), (58, 9), (62, 5), (77, 6), (81, 5),
                 (91, 3), (101, 4), (110, 6), (119, 5), (133, 4), (151, 3), (177, 3), (185, 4),
                 (200, 2), (203, 2), (212, 3))


def write_public_log(path: Path, n: int = 20_000, seed: int = 7) -> Path:
    """An Apache combined log of ``n`` lines from public IPv4 clients in :data:`PUBLIC_BLOCKS`."""
    rng = np.random.default_rng(seed)  # test data only
    first = np.array([b for b, _ in PUBLIC_BLOCKS])
    w = np.array([x for _, x in PUBLIC_BLOCKS], float)
    a = rng.choice(first, size=n, p=w / w.sum())
    rest = rng.integers(0, 256, size=(n, 2))
    host = rng.integers(1, 255, size=n)
    with open(path, "w", encoding="ascii") as f:
        for x, (b, c), d in zip(a, rest, host, strict=True):
            f.write(f'{x}.{b}.{c}.{d} - - [16/Nov/2026:10:00:00 +0000] "GET / HTTP/1.1" 200 512 '
                    '"-" "Mozilla/5.0"\n')
    return path


#: The commands that publish the countries (``universe`` first: the sketch's or a hashed table's).
def country_commands(universe: str = "sketch:1024x24:ip-country") -> tuple[list[str], ...]:
    """``ingest`` of the public log into a by-country state, then ``release --by country``."""
    est = ["--estimator", "sketch"] if universe.startswith("sketch:") else []
    return (["ingest", *est, "-u", universe, "-f", "clf", "--epsilon", "1", "-s", "geo.pst",
             "public.log"],
            ["release", "-s", "geo.pst", "--epsilon", "1", "--by", "country", "--json"])


def write_countries(out: Path, universe: str = "sketch:1024x24:ip-country") -> Path:
    """Write ``public.log`` and ``countries.json`` (every country slot, one charge) into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "geo.pst").unlink(missing_ok=True)
    write_public_log(out / "public.log")
    for cmd in country_commands(universe):
        stdout = _panstream(out, cmd)
        if "--json" in cmd:
            (out / "countries.json").write_text(stdout)
    return out / "countries.json"


if __name__ == "__main__":
    print(*write_week(Path(sys.argv[1])), write_countries(Path(sys.argv[1])))
