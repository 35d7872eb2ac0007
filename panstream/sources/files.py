"""Chunked readers over files and pipes (plain or compressed) and any ``readinto`` callable.

Compressed input is recognised by its first bytes, whatever the file is called and whether it comes
from a file or a pipe (``cat access.log.gz | panstream ingest``): gzip (also several members laid
end to end, as ``cat a.gz b.gz`` or a rotated log appended to makes), bzip2 and xz through the
standard library, and zstd when the ``zstandard`` package (or Python 3.14's ``compression.zstd``)
is installed. A UTF-8 byte-order mark at the start of an input is dropped.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import lzma
import os
import select
import stat
import zlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from panstream.errors import ConfigurationError, PanstreamError, SourceError

#: Default chunk size: large enough to amortize NumPy's per-call cost, small enough to stay in cache.
CHUNK_SIZE = 1 << 21
#: Lines longer than this are cut to their head (the first ``MAX_LINE + 1`` bytes) when they span
#: chunks; the parser looks only at the first ``MAX_LINE`` bytes of any line (see panstream.inputs.parser).
MAX_LINE = 4096

#: The UTF-8 byte-order mark some Windows tools write at the start of a text file.
BOM = b"\xef\xbb\xbf"

#: Magic numbers of the compressed formats recognised, and their names.
#: bzip2 is "BZh", a block size digit, then a block or end-of-stream magic: text starting with
#: "BZh" is not mistaken for it.
MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "gzip"),
    *((b"BZh" + bytes([d]) + m, "bzip2") for d in b"123456789"
      for m in (b"\x31\x41\x59\x26\x53\x59", b"\x17\x72\x45\x38\x50\x90")),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
)
_MAGIC_LEN = max(len(m) for m, _ in MAGIC)
#: Errors a decompressor raises on truncated or corrupt data.
_CODEC_ERRORS: tuple[type[BaseException], ...] = (EOFError, gzip.BadGzipFile, zlib.error,
                                                  lzma.LZMAError)


def sniff(head: bytes) -> str | None:
    """The compressed format whose magic number ``head`` starts with, or ``None`` (plain text).

    >>> sniff(bytes([0x1f, 0x8b, 8, 0])), sniff(b"10.0.0.1")
    ('gzip', None)
    """
    for magic, name in MAGIC:
        if head.startswith(magic):
            return name
    return None


def _maybe_magic(head: bytes) -> bool:
    """Whether ``head`` (shorter than every magic number) could still be the start of one."""
    return any(m.startswith(head) for m, _ in MAGIC)


class _PrefixedRaw(io.RawIOBase):
    """A raw stream that returns ``prefix`` first, then what ``readinto`` reads (a file or a pipe
    whose first bytes were read to recognise its format). The prefix is wiped once handed over."""

    def __init__(self, prefix: bytearray, readinto: Callable[[Any], int | None]) -> None:
        super().__init__()
        self._prefix = prefix
        self._at = 0
        self._readinto = readinto

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int | None:
        left = len(self._prefix) - self._at
        if left > 0:
            n = min(left, len(b))
            b[:n] = self._prefix[self._at:self._at + n]
            self._at += n
            if self._at == len(self._prefix):
                self._prefix[:] = bytes(len(self._prefix))
            return n
        return self._readinto(b)


def _zstd_module() -> Any:
    """The zstd implementation available (Python 3.14's, or the ``zstandard`` package), or None."""
    try:
        from compression import zstd
    except ImportError:
        pass
    else:
        return zstd
    try:
        import zstandard
    except ImportError:
        return None
    return zstandard


def require_codec(codec: str | None, name: str) -> None:
    """Raise if input ``name``, compressed as ``codec``, cannot be decompressed here (zstd without
    a zstd module): call it before anything is created for a run that could not read its input.

    Raises:
        ConfigurationError: zstd input and no zstd module.
    """
    if codec == "zstd" and _zstd_module() is None:
        msg = (f"{name} is zstd-compressed, which needs the 'zstandard' package (pip install "
               f"zstandard): install it, or decompress on the way in, e.g. zstd -dc FILE | "
               f"panstream ingest ...")
        raise ConfigurationError(msg)


def _decompressor(codec: str, raw: Any, name: str) -> Any:
    """A binary file object decompressing ``raw`` (concatenated members/streams included)."""
    if codec == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if codec == "bzip2":
        return bz2.BZ2File(raw, "rb")
    if codec == "xz":
        return lzma.LZMAFile(raw, "rb")
    require_codec(codec, name)  # zstd: not in the standard library before Python 3.14
    mod = _zstd_module()
    if mod.__name__ != "zstandard":
        return mod.ZstdFile(raw, "rb")
    return io.BufferedReader(_ZstdFrames(raw, mod.ZstdDecompressor()))


class _ZstdFrames(io.RawIOBase):
    """zstd frames laid end to end, decoded with the ``zstandard`` package; unlike its
    ``stream_reader``, an input that ends inside a frame raises :class:`EOFError` (a truncated
    ``.zst`` must fail loudly, as a truncated ``.gz`` does). Decoded bytes wait in a buffer that is
    wiped before it is refilled."""

    def __init__(self, raw: Any, dctx: Any) -> None:
        super().__init__()
        self._raw = raw
        self._dctx = dctx
        self._obj: Any = None  # the decompressor of the current frame
        self._out = bytearray()
        self._at = 0
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while self._at >= len(self._out):
            if self._done:
                return 0
            self._out[:] = bytes(len(self._out))
            self._out.clear()
            self._at = 0
            data = self._raw.read(1 << 17)
            if not data:
                self._done = True
                if self._obj is not None:
                    raise EOFError("zstd input ends inside a frame")
                return 0
            while data:
                if self._obj is None:
                    self._obj = self._dctx.decompressobj()
                self._out += self._obj.decompress(data)
                if not self._obj.eof:
                    break
                data = self._obj.unused_data
                self._obj = None
        n = min(len(b), len(self._out) - self._at)
        b[:n] = self._out[self._at:self._at + n]
        self._at += n
        return n


class ChunkReader:
    """Yield buffers of complete lines read through ``readinto``.

    Args:
        readinto: ``f(memoryview) -> int`` reading at most ``len(view)`` bytes, 0 at end of input.
        fd: a file descriptor to poll for readiness (pipes, terminals), or ``None`` for files.
        chunk_size: target bytes per chunk.
        max_line: a line longer than this many bytes that spans chunks is cut to its first
            ``max_line + 1`` bytes (still longer than ``max_line``, so the parser knows it is
            over-long): the buffer stays bounded and the parser can still find a leading field.
        idle: seconds to wait for data on ``fd`` before yielding an empty chunk.
        name: how errors name the input.
        position: ``f() -> (done, total)`` in bytes of the underlying file, for error messages
            (e.g. the compressed bytes of a ``.gz`` read so far and its size); ``None``: unknown.
        decompress: recognise compressed input by its first bytes (:data:`MAGIC`) and
            decompress it on the fly. A compressed pipe is then read with blocking reads (its
            decompressor may hold decoded data the pipe's readiness does not show): no idle ticks.

    A UTF-8 byte-order mark at the very start of the input is dropped (it would otherwise make
    the first line malformed).

    The reader keeps no count of lines or bytes across chunks: such counts describe the data, and
    nothing exact about it may outlive a batch (see :mod:`panstream.release.telemetry`).

    Read errors: when the input fails (a truncated or corrupt ``.gz``, an I/O error), the complete
    lines read before the failure are still yielded (so they reach the table and its checkpoint),
    the incomplete line at the failure is dropped, and then :class:`SourceError` is raised naming
    what was and was not read.
    """

    def __init__(self, readinto: Callable[[Any], int | None], fd: int | None = None, *,
                 chunk_size: int = CHUNK_SIZE, max_line: int = MAX_LINE, idle: float = 0.2,
                 name: str = "input", position: Callable[[], tuple[int, int]] | None = None,
                 decompress: bool = False) -> None:
        if chunk_size < 2 * max_line:
            msg = f"chunk_size {chunk_size} must be at least twice max_line {max_line}"
            raise ValueError(msg)
        self._readinto = readinto
        self._fd = fd
        self._chunk = chunk_size
        self._max_line = max_line
        self._idle = idle
        self.name = name
        self._position = position
        self._gzip_failed = False
        #: The compressed format detected ("gzip", ...), or None; set by the first read.
        self.codec: str | None = None
        self._sniff = decompress
        self._stream: Any = None  # the decompressor, closed with the reader
        self._poll: select.poll | None = None
        if fd is not None:
            self._poll = select.poll()
            self._poll.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)

    def set_idle(self, seconds: float) -> None:
        """Wait at most ``seconds`` for data before the next idle tick (the ingest loop sets it to
        the time left until its next scheduled event, so that event runs on time; see
        :mod:`panstream.schedule`)."""
        self._idle = max(0.0, seconds)

    def _ready(self, timeout: float) -> bool:
        if self._poll is None:
            return True
        return bool(self._poll.poll(int(timeout * 1000)))

    def _where(self) -> str:
        """How far into the underlying file the failure happened (public: a file offset)."""
        if self._position is None:
            return ""
        try:
            done, total = self._position()
        except (OSError, ValueError):
            return ""
        return f" after {done:,} of its {total:,} bytes"

    def _detect(self, view: memoryview) -> int:
        """The first read: read raw bytes into ``view``; if they start with a compression magic
        number, hand them to a decompressor and read decoded bytes instead."""
        self._sniff = False
        n = self._readinto(view)
        if n is None:  # nothing ready yet: decide on the next read
            self._sniff = True
            return -1
        if n == 0:  # empty input
            return 0
        while n < _MAGIC_LEN and _maybe_magic(bytes(view[:n])):  # a pipe may deliver 1 byte
            more = self._readinto(view[n:_MAGIC_LEN])
            if not more:
                break
            n += more
        codec = sniff(bytes(view[:min(n, _MAGIC_LEN)]))
        if codec is None:
            return n
        prefix = bytearray(view[:n])
        view[:n] = bytes(n)
        self._stream = _decompressor(codec, _PrefixedRaw(prefix, self._readinto), self.name)
        self.codec = codec
        # readinto1: at most one read of the compressed input per call, so a truncated or corrupt
        # file fails with everything decoded before the damage already handed over (readinto
        # would drop the part of its 2 MiB request decoded before the error).
        self._readinto = self._stream.readinto1
        self._poll = None  # decoded data may be buffered: read on, blocking (see the class doc)
        return self._readinto(view) or 0

    def _read(self, view: memoryview) -> int:
        try:
            n = self._detect(view) if self._sniff else self._readinto(view)
        except BlockingIOError:
            return -1
        except PanstreamError:
            raise
        except _CODEC_ERRORS:
            # A decompressor's own message may quote bytes of the file: say what is wrong without.
            self._gzip_failed = self.codec in (None, "gzip")
            msg = (f"cannot read {self.name}: not a complete, valid {self.codec or 'gzip'} file "
                   f"(truncated or corrupt){self._where()}")
            raise SourceError(msg) from None
        except OSError as exc:
            if self.codec is not None and not exc.errno:  # bz2's "Invalid data stream"
                msg = (f"cannot read {self.name}: not a complete, valid {self.codec} file "
                       f"(truncated or corrupt){self._where()}")
            else:
                msg = f"cannot read {self.name}: {exc.strerror or exc}{self._where()}"
            raise SourceError(msg) from None
        except Exception as exc:  # zstandard's ZstdError: no common base to name
            if self.codec != "zstd":
                raise
            msg = (f"cannot read {self.name}: not a complete, valid zstd file (truncated or "
                   f"corrupt: {type(exc).__name__}){self._where()}")
            raise SourceError(msg) from None
        return -1 if n is None else n

    def close(self) -> None:
        """Close the decompressor, if any (the underlying file is its opener's to close)."""
        if self._stream is not None:
            with contextlib.suppress(Exception):
                self._stream.close()
            self._stream = None

    def _failed(self, exc: SourceError) -> SourceError:
        note = (" (gzip verifies its checksum only at the end of the data, so lines decoded from a "
                "corrupt part before that point may have been applied)" if self._gzip_failed else "")
        return SourceError(f"{exc}: every complete line before the damage was applied, the "
                           f"damaged line and anything after it were not read{note}")

    def _truncate(self, arr: np.ndarray, fill: int) -> int:
        """Keep the head (``max_line + 1`` bytes) of the over-long line filling ``arr[:fill]``;
        zero the rest. The parser sees a line longer than ``max_line`` and looks only at its head."""
        keep = self._max_line + 1
        arr[keep:fill] = 0
        return keep

    def __iter__(self) -> Iterator[memoryview]:
        cap = self._chunk + self._max_line + 1
        buf = bytearray(cap)
        view = memoryview(buf)
        arr = np.frombuffer(buf, dtype=np.uint8)  # for memset/memmove without temporaries
        fill = 0  # valid bytes at the start of buf
        skipping = False  # past the head of an over-long line: drop bytes up to its newline
        at_start = True  # a byte-order mark may still be at the start of buf
        eof = False
        failed: SourceError | None = None
        try:
            while not eof:
                # Read until the chunk is full, the input is exhausted, or no more data is ready.
                got_any = False
                while fill < self._chunk:
                    if self._poll is not None and not self._ready(0 if got_any else self._idle):
                        break
                    try:
                        n = self._read(view[fill:self._chunk])
                    except SourceError as exc:
                        # Yield the complete lines read so far, drop the damaged last line.
                        failed = self._failed(exc)
                        j = buf.rfind(b"\n", 0, fill) if fill and not skipping else -1
                        arr[j + 1:fill] = 0
                        fill = j + 1
                        eof = True
                        break
                    if n == 0:
                        eof = True
                        break
                    if n < 0:
                        break
                    got_any = True
                    if skipping:
                        j = buf.find(b"\n", fill, fill + n)
                        if j < 0:
                            arr[fill:fill + n] = 0
                            continue
                        # The newline ends the kept head; what follows it is new lines.
                        skipping = False
                        rest = fill + n - j
                        arr[fill:fill + rest] = arr[j:fill + n]
                        arr[fill + rest:fill + n] = 0
                        n = rest
                    fill += n
                    if at_start and (fill >= len(BOM) or not BOM.startswith(bytes(buf[:fill]))):
                        at_start = False
                        if buf.startswith(BOM):
                            arr[:fill - 3] = arr[3:fill]
                            arr[fill - 3:fill] = 0
                            fill -= 3
                if eof and failed is None and fill and buf[fill - 1] != 10:
                    buf[fill] = 10  # a last line (or over-long line's head) without newline
                    fill += 1
                    skipping = False
                j = buf.rfind(b"\n", 0, fill) if fill else -1
                if j < 0:
                    if fill > self._max_line and not skipping:
                        fill = self._truncate(arr, fill)
                        skipping = True
                    if not got_any and not eof:
                        yield view[:0]  # idle tick
                    continue
                yield view[:j + 1]
                rest = fill - (j + 1)
                arr[:rest] = arr[j + 1:fill]
                arr[rest:fill] = 0
                fill = rest
                if fill > self._max_line:
                    fill = self._truncate(arr, fill)
                    skipping = True
            if failed is not None:
                raise failed
        finally:
            arr.fill(0)
            del arr
            view.release()
            self.close()


class _Input(AbstractContextManager["_Input"]):
    """An opened input file and its reader; closes the file on exit."""

    def __init__(self, path: str, chunk_size: int, max_line: int) -> None:
        self.path = path
        try:
            self._f: Any = open(path, "rb", buffering=0)  # noqa: SIM115 - closed in __exit__
        except OSError as exc:
            msg = f"cannot open {path}: {exc.strerror or exc}; check the path and permissions"
            raise SourceError(msg) from None
        st = os.fstat(self._f.fileno())
        fd: int | None = None
        position = None
        if stat.S_ISREG(st.st_mode):
            raw, size = self._f, st.st_size
            position = lambda: (raw.tell(), size)  # noqa: E731 - (compressed) bytes read, size
        else:  # a FIFO or device: poll it
            fd = self._f.fileno()
        self.reader = ChunkReader(self._f.readinto, fd, chunk_size=chunk_size, max_line=max_line,
                                  name=path, position=position, decompress=True)

    def position(self) -> tuple[int, int] | None:
        """``(bytes of the file read so far, its size)``: the compressed bytes of a ``.gz``;
        ``None`` for a FIFO or device. A file offset, which anyone who can read the file sees
        anyway (progress lines show it; see docs/threat-model.md)."""
        try:
            raw = self._f.fileobj if self.path.endswith(".gz") else self._f
            st = os.fstat(raw.fileno())
            import stat

            if not stat.S_ISREG(st.st_mode):
                return None
            return raw.tell(), st.st_size
        except (OSError, ValueError, AttributeError):
            return None

    def __exit__(self, *exc: object) -> None:
        self.reader.close()
        self._f.close()


def open_input(path: str, chunk_size: int = CHUNK_SIZE, max_line: int = MAX_LINE) -> _Input:
    """Open a log file for chunked reading; gzip, bzip2, xz (and zstd, see the module docstring)
    are recognised by their first bytes, whatever the file's name, and decompressed on the fly.

    Use as a context manager; its ``reader`` attribute is a :class:`ChunkReader`.

    Raises:
        SourceError: the file cannot be opened.
    """
    return _Input(path, chunk_size, max_line)
