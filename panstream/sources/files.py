"""Chunked readers over files (plain or ``.gz``) and any ``readinto`` callable."""

from __future__ import annotations

import gzip
import os
import select
import zlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from panstream.errors import SourceError

#: Default chunk size: large enough to amortize NumPy's per-call cost, small enough to stay in cache.
CHUNK_SIZE = 1 << 21
#: Lines longer than this are cut to their head (the first ``MAX_LINE + 1`` bytes) when they span
#: chunks; the parser looks only at the first ``MAX_LINE`` bytes of any line (see panstream.parse).
MAX_LINE = 4096


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

    The reader keeps no count of lines or bytes across chunks: such counts describe the data, and
    nothing exact about it may outlive a batch (see :mod:`panstream.telemetry`).

    Read errors: when the input fails (a truncated or corrupt ``.gz``, an I/O error), the complete
    lines read before the failure are still yielded (so they reach the table and its checkpoint),
    the incomplete line at the failure is dropped, and then :class:`SourceError` is raised naming
    what was and was not read.
    """

    def __init__(self, readinto: Callable[[Any], int | None], fd: int | None = None, *,
                 chunk_size: int = CHUNK_SIZE, max_line: int = MAX_LINE, idle: float = 0.2,
                 name: str = "input", position: Callable[[], tuple[int, int]] | None = None) -> None:
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

    def _read(self, view: memoryview) -> int:
        try:
            n = self._readinto(view)
        except BlockingIOError:
            return -1
        except (EOFError, gzip.BadGzipFile, zlib.error):
            # gzip's own message may quote bytes of the file: say what is wrong without them.
            msg = (f"cannot read {self.name}: not a complete, valid gzip file (truncated or "
                   f"corrupt){self._where()}")
            self._gzip_failed = True
            raise SourceError(msg) from None
        except OSError as exc:
            msg = f"cannot read {self.name}: {exc.strerror or exc}{self._where()}"
            raise SourceError(msg) from None
        return -1 if n is None else n

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


class _Input(AbstractContextManager["_Input"]):
    """An opened input file and its reader; closes the file on exit."""

    def __init__(self, path: str, chunk_size: int, max_line: int) -> None:
        self.path = path
        try:
            if path.endswith(".gz"):
                self._f: Any = gzip.open(path, "rb")  # noqa: SIM115 - closed in __exit__
            else:
                self._f = open(path, "rb", buffering=0)  # noqa: SIM115 - closed in __exit__
        except OSError as exc:
            msg = f"cannot open {path}: {exc.strerror or exc}; check the path and permissions"
            raise SourceError(msg) from None
        fd: int | None = None
        readinto = self._f.readinto
        position = None
        if path.endswith(".gz"):
            # readinto1: at most one read of the compressed file per call, so a truncated or
            # corrupt file fails with everything decoded before the damage already handed over
            # (readinto would drop the part of its 2 MiB request decoded before the error).
            readinto = self._f.readinto1
            raw = self._f.fileobj
            size = os.fstat(raw.fileno()).st_size
            position = lambda: (raw.tell(), size)  # noqa: E731 - compressed bytes read, file size
        else:
            st = os.fstat(self._f.fileno())
            import stat

            if not stat.S_ISREG(st.st_mode):  # a FIFO or device: poll it
                fd = self._f.fileno()
        self.reader = ChunkReader(readinto, fd, chunk_size=chunk_size, max_line=max_line,
                                  name=path, position=position)

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
        self._f.close()


def open_input(path: str, chunk_size: int = CHUNK_SIZE, max_line: int = MAX_LINE) -> _Input:
    """Open a log file (``.gz`` decompressed on the fly) for chunked reading.

    Use as a context manager; its ``reader`` attribute is a :class:`ChunkReader`.

    Raises:
        SourceError: the file cannot be opened.
    """
    return _Input(path, chunk_size, max_line)
