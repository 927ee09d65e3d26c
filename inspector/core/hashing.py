"""Streaming SHA-256 of files with progress and cancellation."""

from __future__ import annotations

import contextlib
import hashlib
import os

from inspector.core.progress import CancelToken, ProgressFn, check

DIGEST_ALGORITHM = "sha256"
"""The hash of every tensor content digest, named in each output's `digest_algorithm`."""
CHUNK_BYTES = 64 * 1024
"""Reads this size stay in L2 between the kernel's copy and the hash: measured 1.0 s of CPU
per GB (as `openssl dgst -sha256`) against 1.3-1.4 s with 4 MiB reads. hashlib still releases
the GIL on buffers this size."""

PROGRESS_STEPS = 256
"""Progress is reported about this many times per file (at most every 16 MiB, at least every
read), so callbacks stay off the hot path while a bar still moves smoothly."""


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
    step = max(chunk_bytes, min(16 * 1024 * 1024, total // PROGRESS_STEPS))
    done = reported = 0
    with open(path, "rb", buffering=0) as fh:
        _advise_sequential(fh.fileno())
        while True:
            check(cancel)
            n = fh.readinto(buf)
            if not n:
                break
            digest.update(view[:n])
            done += n
            if progress is not None and (done - reported >= step or done == total):
                reported = done
                progress(done, total)
    return digest.hexdigest()


def _advise_sequential(fd: int) -> None:
    """Tell the kernel we read front to back so it reads ahead aggressively."""
    if hasattr(os, "posix_fadvise"):
        with contextlib.suppress(OSError):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)


def is_sha256_hex(text: str) -> bool:
    """True when text is 64 hexadecimal characters."""
    return len(text) == 64 and all(c in "0123456789abcdefABCDEF" for c in text)

