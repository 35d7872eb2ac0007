"""Chunked reading of standard input (a pipe such as ``tail -F log | panstream ingest``)."""

from __future__ import annotations

import fcntl
import os
import stat
import sys
from typing import Any

from panstream.sources.files import CHUNK_SIZE, MAX_LINE, ChunkReader

_F_SETPIPE_SZ = 1031  # Linux
_PIPE_SIZE = 1 << 20


def stdin_reader(chunk_size: int = CHUNK_SIZE, max_line: int = MAX_LINE, idle: float = 0.2,
                 fd: int | None = None) -> ChunkReader:
    """A :class:`ChunkReader` over standard input (or ``fd``), reading with ``readv`` into its buffer.

    On Linux the pipe buffer is enlarged to 1 MiB when possible, so each read moves more data.
    Compressed input (``cat access.log.gz | panstream ingest``) is recognised by its first bytes
    and decompressed, as for files (see :mod:`panstream.sources.files`).
    """
    if fd is None:
        try:
            fd = sys.stdin.fileno()
        except (AttributeError, OSError, ValueError):  # replaced stdin (tests): no descriptor
            stream: Any = sys.stdin.buffer
            return ChunkReader(stream.readinto, None, chunk_size=chunk_size, max_line=max_line,
                               idle=idle, name="standard input", decompress=True)
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            fcntl.fcntl(fd, _F_SETPIPE_SZ, _PIPE_SIZE)
    except OSError:
        pass

    def readinto(view: memoryview) -> int:
        return os.readv(fd, [view])

    mode = os.fstat(fd).st_mode
    poll_fd = None if stat.S_ISREG(mode) else fd
    return ChunkReader(readinto, poll_fd, chunk_size=chunk_size, max_line=max_line, idle=idle,
                       name="standard input", decompress=True)
