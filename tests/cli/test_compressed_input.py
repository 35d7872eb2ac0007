"""Compressed input anywhere (issue 20): gzip, bzip2 and xz are recognised by their first bytes on
standard input and in files whatever their name, several gzip members laid end to end are read
whole, a UTF-8 byte-order mark does not cost the first line, and ``-`` names standard input.

Before: ``cat access.log.gz | panstream ingest`` parsed the compressed bytes as text (20,012
"accepted" for a truth of 43,540) and a BOM made the first line malformed.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import shutil
import subprocess
from pathlib import Path

import pytest

from panstream.errors import SourceError
from panstream.sources import ChunkReader
from panstream.sources.files import BOM, sniff

U = "ipv4:10.0.0.0/16"


def _log(n: int = 20_000) -> bytes:
    """A combined-format log of ``n`` lines over ``n // 4`` clients of 10.0.0.0/16."""
    return b"".join(b'10.0.%d.%d - - [01/Jan/2024:00:00:00 +0000] "GET / HTTP/1.1" 200 512 "-" '
                    b'"curl/8.5"\n' % ((i % (n // 4)) // 256, (i % (n // 4)) % 256)
                    for i in range(n))


def _read(data: bytes, readinto=None) -> tuple[bytes, str | None]:
    r = ChunkReader(readinto or io.BytesIO(data).readinto, chunk_size=1 << 16, max_line=4096,
                    decompress=True)
    return b"".join(bytes(c) for c in r), r.codec


class _Trickle:
    """A pipe that delivers one byte per read (the worst case for recognising a magic number)."""

    def __init__(self, data: bytes) -> None:
        self._b = io.BytesIO(data)

    def readinto(self, view) -> int:
        return self._b.readinto(memoryview(view)[:1])


@pytest.mark.parametrize(("codec", "compress"), [
    ("gzip", gzip.compress), ("bzip2", bz2.compress), ("xz", lzma.compress)])
def test_each_codec_is_recognised_by_its_magic_bytes_and_read_whole(codec, compress) -> None:
    data = _log(5_000)
    assert _read(compress(data)) == (data, codec)


def test_concatenated_gzip_members_are_all_read() -> None:
    data = _log(6_000)
    parts = [gzip.compress(data[:100_000]), gzip.compress(data[100_000:400_000]),
             gzip.compress(data[400_000:])]
    assert _read(b"".join(parts)) == (data, "gzip")


def test_a_trickling_pipe_is_still_recognised_and_a_bom_dropped() -> None:
    assert _read(b"", _Trickle(gzip.compress(b"10.0.0.1\n10.0.0.2\n")).readinto) == (
        b"10.0.0.1\n10.0.0.2\n", "gzip")
    assert _read(b"", _Trickle(BOM + b"10.0.0.1\n").readinto) == (b"10.0.0.1\n", None)


def test_plain_text_is_never_taken_for_compressed_data() -> None:
    # "BZh" alone is not bzip2 (a block magic must follow); a lone BOM fragment is data.
    for text in (b"BZh91 is a host name\n", b"\xef\xbbx\n", b"10.0.0.1\n"):
        assert sniff(text) is None
        assert _read(text) == (text, None)


def _ingest(run_cli, how: str, tmp_path: Path, name: str) -> dict:
    r = run_cli(f"{how} -u {U} -s {tmp_path}/{name}.pst --json --exact-counts", shell=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.decode().splitlines()[-1])["summary"]


def test_gzip_through_cat_and_under_any_name_counts_like_the_plain_log(tmp_path: Path,
                                                                       run_cli) -> None:
    data = _log(20_000)
    plain = tmp_path / "access.log"
    plain.write_bytes(data)
    gz = tmp_path / "access.log.1"  # logrotate's delaycompress names: no .gz
    gz.write_bytes(gzip.compress(data[:300_000]) + gzip.compress(data[300_000:]))
    xz = tmp_path / "access.log.xz"
    xz.write_bytes(lzma.compress(data))
    base = _ingest(run_cli, f"panstream ingest {plain}", tmp_path, "plain")
    assert base["lines"] == 20_000 and base["accepted"] == 20_000 and base["malformed"] == 0
    for name, how in (("cat", f"cat {gz} | panstream ingest"),
                      ("dash", f"cat {gz} | panstream ingest -"),
                      ("noext", f"panstream ingest {gz}"),
                      ("xz", f"panstream ingest - < {xz}")):
        s = _ingest(run_cli, how, tmp_path, name)
        assert (s["lines"], s["accepted"], s["malformed"]) == (20_000, 20_000, 0), name


def test_dash_reads_stdin_between_files_and_a_bom_costs_no_line(tmp_path: Path, run_cli) -> None:
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_bytes(BOM + b"10.0.0.1\r\n10.0.0.2\r\n")  # Windows-made: BOM and CRLF
    b.write_bytes(b"10.0.0.3\n")
    r = run_cli(["ingest", "-u", U, "-f", "plain", "--json", "--exact-counts", str(a), "-",
                 str(b)], stdin=gzip.compress(BOM + b"10.0.0.4\n10.0.0.5\n"))
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout.decode().splitlines()[-1])["summary"]
    assert (s["lines"], s["accepted"], s["malformed"]) == (5, 5, 0)


def test_a_truncated_gzip_on_stdin_fails_in_one_line(tmp_path: Path, run_cli) -> None:
    whole = gzip.compress(_log(20_000))
    r = run_cli(["ingest", "-u", U], stdin=whole[: len(whole) // 2])
    notice, err = r.stderr.decode().split("\n", 1)  # the run's one notice: no -s (issue 37)
    assert notice.startswith("panstream: no --state given: the table is discarded at exit")
    assert r.returncode == 1 and err.count("\n") == 1 and err.startswith("panstream: error:"), err
    assert "cannot read standard input: not a complete, valid gzip file" in err


def test_a_corrupt_bzip2_file_is_named_as_such(tmp_path: Path, run_cli) -> None:
    bad = bytearray(bz2.compress(_log(20_000)))
    bad[len(bad) // 2:len(bad) // 2 + 64] = bytes(64)
    p = tmp_path / "a.log"
    p.write_bytes(bytes(bad))
    r = run_cli(["ingest", "-u", U, str(p)])
    assert r.returncode == 1 and "not a complete, valid bzip2 file" in r.stderr.decode()


@pytest.mark.skipif(shutil.which("zstd") is None, reason="needs the zstd command to make a sample")
def test_zstd_is_read_or_refused_with_the_way_around(tmp_path: Path, run_cli) -> None:
    data = _log(4_000)
    z = tmp_path / "a.log.zst"
    z.write_bytes(subprocess.run(["zstd", "-c"], input=data, capture_output=True,
                                 check=True).stdout)
    r = run_cli(["ingest", "-u", U, "-s", str(tmp_path / "z.pst"), "--json", "--exact-counts",
                 str(z)])
    try:
        import zstandard  # noqa: F401
    except ImportError:
        err = r.stderr.decode().splitlines()[-1]  # after the --exact-counts warning
        assert r.returncode == 2 and err.startswith("panstream: error:") and "zstd -dc" in err
        assert not (tmp_path / "z.pst").exists()  # refused before a state is created
        return
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.decode().splitlines()[-1])["summary"]["accepted"] == 4_000


@pytest.mark.skipif(shutil.which("zstd") is None, reason="needs the zstd command to make a sample")
def test_zstd_frames_are_all_read_and_a_truncated_one_fails_loudly() -> None:
    pytest.importorskip("zstandard")  # optional: without it zstd input is refused (test above)
    data = _log(8_000)

    def zstd(b: bytes) -> bytes:
        return subprocess.run(["zstd", "-c"], input=b, capture_output=True, check=True).stdout

    whole = zstd(data[:300_000]) + zstd(data[300_000:])
    assert _read(whole) == (data, "zstd")
    with pytest.raises(SourceError, match="not a complete, valid zstd file"):
        _read(whole[:-3])  # its stream_reader would end silently here
