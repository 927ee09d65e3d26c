"""Room for a checkpoint before a byte of it is written, and a full disk told apart after."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from inspector.run.checkpoints import LedgerError

MARGIN_FRACTION = 0.05
"""Headroom over the expected size: pickle framing, zip records, a safetensors header."""
MIN_MARGIN = 64 * 1024


def check_space(folder: Path, need_bytes: int, need_inodes: int = 1) -> None:
    """Refuse (LedgerError `no_space`) when `folder`'s file system cannot hold the checkpoint."""
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    want = need_bytes + max(MIN_MARGIN, int(need_bytes * MARGIN_FRACTION))
    if free < want:
        raise LedgerError("no_space", f"{folder}: {_size(free)} free, the checkpoint needs about "
                          f"{_size(want)}; nothing was written and the previous checkpoint is "
                          "kept: free space or save to another disk")
    # file systems without an inode limit report 0 of 0
    if st.f_files and st.f_favail < need_inodes + 1:
        raise LedgerError("no_inodes", f"{folder}: {st.f_favail} free inodes, the checkpoint "
                          f"needs {need_inodes}; nothing was written and the previous checkpoint "
                          "is kept: delete files on that disk or save to another one")


def disk_full(exc: BaseException, folder: Path) -> LedgerError | None:
    """The LedgerError for a write that failed because the disk filled, else None.

    torch.save reports ENOSPC as a RuntimeError of its zip writer and safetensors as its own
    error, so besides the errno the file system is asked whether it is (nearly) full."""
    full = isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
    if not full:
        st = os.statvfs(folder)
        full = st.f_bavail * st.f_frsize < MIN_MARGIN or (st.f_files and st.f_favail == 0)
    if not full:
        return None
    return LedgerError("disk_full", f"{folder}: the disk filled while the checkpoint was "
                       "written; the partial file was removed and the previous checkpoint is "
                       "kept: free space or save to another disk")


def _size(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"
