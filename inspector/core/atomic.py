"""Atomic output files: write to a temp file beside the target, fsync, then rename.

The temp file `mkstemp` creates is mode 0600; before the rename it gets the mode a plain
`open()` would have given (0666 less the umask), so outputs are readable as users expect.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


class OutputExistsError(FileExistsError):
    """The output exists and the caller did not ask to overwrite it."""


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], overwrite: bool = False) -> Iterator[BinaryIO]:
    """Yield a binary file that replaces `path` only if the block finishes without error."""
    target = Path(path)
    if target.exists() and not overwrite:
        raise OutputExistsError(f"{target} exists; refusing to overwrite it")
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        if not overwrite and target.exists():
            raise OutputExistsError(f"{target} appeared while writing; refusing to overwrite it")
        os.replace(tmp_name, target)
        _fsync_dir(target.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


def current_umask() -> int:
    """The process umask, from /proc where it can be read without changing it."""
    with contextlib.suppress(OSError, ValueError, StopIteration):
        with open("/proc/self/status", encoding="ascii") as fh:
            line = next(ln for ln in fh if ln.startswith("Umask:"))
        return int(line.split()[1], 8)
    # Elsewhere reading it means setting it (briefly process-wide); it is set straight back.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes, overwrite: bool = False) -> None:
    """Write a whole file atomically."""
    with atomic_write(path, overwrite=overwrite) as fh:
        fh.write(data)


def write_text_atomic(path: str | os.PathLike[str], text: str, overwrite: bool = False) -> None:
    """Write a whole UTF-8 text file atomically."""
    write_bytes_atomic(path, text.encode("utf-8"), overwrite=overwrite)


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable, where the file system lets a folder be fsync'd."""
    with contextlib.suppress(OSError):
        fsync_path(folder)


def fsync_path(path: str | os.PathLike[str]) -> None:
    """fsync a file or a folder by its path (a folder's: the renames and creations in it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
