"""Reading the small files a signature check takes (signatures, keys, certificates, trust
roots): regular files only, never more than a stated size, one-line errors."""

from __future__ import annotations

import errno
from pathlib import Path

from inspector.integrity.regular_file import UnfitFile, read_regular
from inspector.signing.errors import SignatureError


def read_small(source: Path, what: str, limit: int, *, unreadable: str = "unreadable",
               too_big: str = "unreadable") -> bytes:
    """The bytes of `source` when it is a regular file of at most `limit` bytes."""
    try:
        return read_regular(source, what, limit)
    except UnfitFile as exc:
        raise SignatureError(too_big if exc.errno == errno.EFBIG else unreadable,
                             f"{source}: {exc.strerror}") from exc
    except OSError as exc:
        raise SignatureError(unreadable, f"{source}: cannot read the {what}: "
                             f"{exc.strerror or exc}") from exc
