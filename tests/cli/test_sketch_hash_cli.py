"""``--sketch-hash`` on the command line: recorded in the state and beside exports, and
``merge-sketches`` refuses sketches whose items were hashed differently (one line, exit 1)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from schema_check import validate


def _log(path: Path, start: int, n: int) -> Path:
    path.write_text("".join(f"10.{i >> 16}.{i >> 8 & 255}.{i & 255}\n"
                            for i in range(start, start + n)))
    return path


def test_exports_record_their_hash_and_merge_refuses_a_mix(tmp_path: Path,
                                                           run_cli: Callable[..., Any]) -> None:
    a = _log(tmp_path / "a.log", 0, 20_000)
    b = _log(tmp_path / "b.log", 10_000, 20_000)
    for name, log, how in (("a", a, ["--sketch-hash", "presto-sql"]),
                           ("b", b, ["--sketch-hash", "presto-sql"]), ("m", b, [])):
        st = tmp_path / f"{name}.pst"
        r = run_cli(["ingest", "--estimator", "sketch", "--epsilon", "3", "-s", str(st), *how,
                     str(log)])
        assert r.returncode == 0, r.stderr
        assert run_cli(["rotate", "-s", str(st), "--export-presto",
                        str(tmp_path / f"{name}.sfm")]).returncode == 0
    side = json.loads((tmp_path / "a.sfm.params.json").read_text())
    assert (side["hash"], side["sql_type"]) == ("xxhash64-varchar", "VARCHAR")
    assert json.loads((tmp_path / "m.sfm.params.json").read_text())["hash"] == "murmur3"

    out = tmp_path / "ab.sfm"
    r = run_cli(["merge-sketches", str(tmp_path / "a.sfm"), str(tmp_path / "b.sfm"), "-o",
                 str(out), "--json"])
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["hash"] == "xxhash64-varchar" and abs(d["cardinality"] - 30_000) < 6 * d["stderr"]
    assert json.loads((tmp_path / "ab.sfm.params.json").read_text())["hash"] == "xxhash64-varchar"

    r = run_cli(["merge-sketches", str(tmp_path / "a.sfm"), str(tmp_path / "m.sfm"), "-o",
                 str(tmp_path / "bad.sfm")])
    assert r.returncode == 1 and b"hashed differently" in r.stderr
    assert r.stderr.count(b"\n") == 1 and not (tmp_path / "bad.sfm").exists()

    # a sketch that records no hash (as Presto SQL returns it): --assume-hash declares it
    (tmp_path / "sql.sfm").write_bytes((tmp_path / "b.sfm").read_bytes())
    r = run_cli(["merge-sketches", str(tmp_path / "m.sfm"), str(tmp_path / "sql.sfm"),
                 "--assume-hash", "presto-sql", "-o", str(tmp_path / "bad2.sfm")])
    assert r.returncode == 1 and b"hashed differently" in r.stderr


def test_a_state_keeps_the_hash_it_was_built_with(tmp_path: Path,
                                                  run_cli: Callable[..., Any]) -> None:
    log = _log(tmp_path / "a.log", 0, 1000)
    st = tmp_path / "a.pst"
    base = ["ingest", "--estimator", "sketch", "--epsilon", "1", "-s", str(st)]
    assert run_cli([*base, "--sketch-hash", "presto-sql", str(log)]).returncode == 0
    r = run_cli(["inspect", "-s", str(st), "--json"])
    assert b"sketch:4096x24:ip:xxhash64-varchar" in r.stdout
    assert run_cli([*base, str(log)]).returncode == 0  # resuming without the option keeps it
    r = run_cli([*base, "--sketch-hash", "murmur3", str(log)])
    assert r.returncode == 1 and b"cannot mix two hashes" in r.stderr
    r = run_cli(["ingest", "--estimator", "sketch", "-u", "sketch:4096x20:ip", "--sketch-hash",
                 "presto-sql", "-s", str(tmp_path / "b.pst"), str(log)])
    assert r.returncode == 2 and b"multiple of 8" in r.stderr
    r = run_cli(["ingest", "-u", "ipv4:10.0.0.0/16", "--sketch-hash", "presto-sql", "-s",
                 str(tmp_path / "c.pst"), str(log)])
    assert r.returncode == 2 and b"--estimator sketch" in r.stderr


def test_release_by_country_from_the_command_line(tmp_path: Path,
                                                  run_cli: Callable[..., Any]) -> None:
    """``ingest -u sketch:256x8:ip-country`` then ``release --by country``: every country slot
    once, one ledger charge, the JSON total within 6 standard errors of the truth (false failure
    < 2e-9); a plain sketch refuses --by country in one line."""
    log = _log(tmp_path / "a.log", 0, 3000)  # 10.x: no country (slot ZZ), plus public ones
    with log.open("a") as f:
        f.write("".join(f"{8 + i % 5}.{i >> 8 & 255}.{i & 255}.1\n" for i in range(2000)))
    st = tmp_path / "c.pst"
    assert run_cli(["ingest", "--estimator", "sketch", "-u", "sketch:256x8:ip-country",
                    "--epsilon", "2", "-s", str(st), str(log)]).returncode == 0
    r = run_cli(["release", "-s", str(st), "--epsilon", "1", "--by", "country", "--json"])
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert len(d["rows"]) == 253 and abs(d["distinct"] - 5000) < 6 * d["stderr"]
    _released_unclamped(d)
    zz = next(row for row in d["rows"] if row["country"] == "ZZ")
    assert abs(zz["estimate"] - 3000) < 6 * zz["stderr"]  # private addresses have no country
    assert d["epsilon"]["release"] == 1 and d["budget_remaining"] == 0  # one charge for all 253
    r = run_cli(["release", "-s", str(st), "--epsilon", "1", "--by", "country"])
    assert r.returncode != 0 and b"budget" in r.stderr  # the budget of 1 is spent: once
    plain = tmp_path / "p.pst"
    assert run_cli(["ingest", "--estimator", "sketch", "-s", str(plain), str(log)]).returncode == 0
    r = run_cli(["release", "-s", str(plain), "--epsilon", "1", "--by", "country"])
    assert r.returncode == 2 and b"ip-country" in r.stderr and r.stderr.count(b"\n") == 1


def test_release_by_country_of_a_hashed_ip_table(tmp_path: Path,
                                                 run_cli: Callable[..., Any]) -> None:
    """``-u hashed-ip-country:4096``: a density table with a block per country; release --by
    country (and plain release) give every slot for one charge; maps are refused."""
    log = tmp_path / "a.log"
    log.write_text("".join(f"{8 + i % 5}.{i >> 8 & 255}.{i & 255}.1\n" for i in range(4000)))
    st = tmp_path / "h.pst"
    assert run_cli(["ingest", "-u", "hashed-ip-country:4096", "--epsilon", "2", "-s", str(st),
                    str(log)]).returncode == 0
    r = run_cli(["release", "-s", str(st), "--epsilon", "0.5", "--by", "country", "--json"])
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert len(d["rows"]) == 253 and abs(d["distinct"] - 4000) < 6 * d["stderr"]
    _released_unclamped(d)
    assert d["budget_remaining"] == 0.5
    r = run_cli(["release", "-s", str(st), "--epsilon", "0.5", "--by", "/24"])
    assert r.returncode == 2 and b"by country" in r.stderr
    r = run_cli(["release", "-s", str(st), "--epsilon", "0.5"])
    assert r.returncode == 0 and b"country slots" in r.stdout
    assert re.findall(rb"(?<![\w.])-\d", r.stdout) == []  # shown clamped at 0


def _released_unclamped(d: dict[str, Any]) -> None:
    """A by-country ``--json``: the common shape (schema), the rows under ``extras`` unclamped
    (about half of the ~248 empty slots below 0: none is below 0 with probability ~2^-248), and
    the total the sum of the rows (JSON keeps 12 significant digits)."""
    validate(d, "estimate")
    assert d["extras"]["rows"] == d["rows"] and d["extras"]["by"] == "country"
    assert any(row["estimate"] < 0 for row in d["rows"])
    assert d["estimate"] == d["distinct"]
    assert d["estimate"] == pytest.approx(math.fsum(row["estimate"] for row in d["rows"]),
                                          rel=1e-9, abs=1e-6)
