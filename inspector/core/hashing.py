"""Streaming SHA-256 of files with progress and cancellation."""

from __future__ import annotations

import contextlib
import hashlib
import os

from inspector.core.progress import CancelToken, ProgressFn, check

CHUNK_BYTES = 4 * 1024 * 1024
"""Large reads amortise syscalls; hashlib releases the GIL on buffers this size."""


def sha256_file(
    path: str | os.PathLike[str],
    progress: ProgressFn | None = None,
    cancel: CancelToken | None = None,
    chunk_bytes: int = CHUNK_BYTES,
) -> str:
    """Return the hex SHA-256 of a file, reading it once in large chunks."""
    digest = hashlib.sha256()
    total = os.path.getsize(path)
    buf = bytearray(chunk_bytes)
    view = memoryview(buf)
    done = 0
    with open(path, "rb", buffering=0) as fh:
        _advise_sequential(fh.fileno())
        while True:
            check(cancel)
            n = fh.readinto(buf)
            if not n:
                break
            digest.update(view[:n])
            done += n
            if progress is not None:
                progress(done, total)
    return digest.hexdigest()


def sha256_bytes(data: bytes | memoryview) -> str:
    """Return the hex SHA-256 of an in-memory buffer."""
    return hashlib.sha256(data).hexdigest()


def _advise_sequential(fd: int) -> None:
    """Tell the kernel we read front to back so it reads ahead aggressively."""
    if hasattr(os, "posix_fadvise"):
        with contextlib.suppress(OSError):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)


def is_sha256_hex(text: str) -> bool:
    """True when text is 64 hexadecimal characters."""
    return len(text) == 64 and all(c in "0123456789abcdefABCDEF" for c in text)

