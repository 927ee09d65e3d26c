"""Reading the small files a signature check takes (signatures, keys, certificates, trust
roots): regular files only, never more than a stated size, one-line errors."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from inspector.signing.errors import SignatureError


def read_small(source: Path, what: str, limit: int, *, unreadable: str = "unreadable",
               too_big: str = "unreadable") -> bytes:
    """The bytes of `source` when it is a regular file of at most `limit` bytes."""
    try:
        # O_NONBLOCK: opening a FIFO named as a key or a signature must not wait for a writer
        fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise SignatureError(unreadable, f"{source}: cannot read the {what}: "
                             f"{exc.strerror or exc}") from exc
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SignatureError(unreadable, f"{source}: a {what} must be a regular file")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise SignatureError(too_big, f"{source}: more than {limit >> 20} MiB is no {what}")
    return data
