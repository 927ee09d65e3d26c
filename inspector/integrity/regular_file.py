"""Opening an input a user names (a file to hash, a manifest, a journal, a key): a regular
file only, opened without waiting (a FIFO named in its place never blocks the reader), and
for a small one read whole, at most a stated size (a link to /dev/zero would otherwise be read
until memory runs out)."""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO


class UnfitFile(OSError):
    """A path that names no regular file, or one past the size limit (`errno` EFBIG)."""


def open_regular(path: str | os.PathLike[str], refusal: str,
                 buffering: int = -1) -> tuple[BinaryIO, os.stat_result]:
    """`path` opened for reading, with its status, when it is a regular file; else UnfitFile
    saying `refusal`, then what it is instead ("..., not a FIFO"); OSError when it cannot be
    opened. O_NONBLOCK: a FIFO in a file's place never blocks the open (a regular file's
    reads are unaffected)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UnfitFile(errno.EINVAL, f"{refusal}, not {kind_of(st.st_mode)}", os.fspath(path))
    return open(fd, "rb", buffering=buffering), st  # the caller closes it


def read_regular(path: str | os.PathLike[str], what: str, limit: int | None = None) -> bytes:
    """The bytes of `path` when it is a regular file of at most `limit` bytes (any size when
    None); UnfitFile when it is not, saying what it is instead; OSError when it cannot be
    opened."""
    handle, st = open_regular(path, f"a {what} must be a regular file")
    with handle:
        if limit is not None and st.st_size > limit:
            raise UnfitFile(errno.EFBIG, f"{st.st_size:,} bytes is no {what} (the limit is "
                            f"{limit >> 20} MiB)", os.fspath(path))
        data = handle.read() if limit is None else handle.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise UnfitFile(errno.EFBIG, f"grew past {limit >> 20} MiB while read", os.fspath(path))
    return data


def kind_of(mode: int) -> str:
    """What a file of this mode is, in words ("a FIFO", "a character device")."""
    for test, word in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a folder")):
        if test(mode):
            return word
    return "a special file"
