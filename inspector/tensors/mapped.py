"""Give back the pages of a memory-mapped checkpoint once they have been read.

`torch.load(mmap=True)` maps the file privately; every page read stays resident and counts
towards the worker's RSS, so a 10 GB checkpoint would otherwise cost 10 GB of RSS. Dropping
the pages of an unmodified private file mapping (MADV_DONTNEED) is lossless: a later access
reads them from the file again. Anonymous memory is never touched, because dropping it would
zero it; only ranges inside a mapping of the checkpoint file itself are released.
"""

from __future__ import annotations

import bisect
import ctypes
import os
import sys

_MADV_DONTNEED = 4
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def open_maps() -> int | None:
    """Open /proc/self/maps before the jail closes /proc; None where there is no such file."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return os.open("/proc/self/maps", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


class PageReleaser:
    """release(address, nbytes) drops whole pages of the checkpoint's private file mappings
    (for a folder, such as a torch.distributed.checkpoint one, those of the files in it; for
    an open descriptor, those of its file: a conversion's output as it is verified)."""

    def __init__(self, maps_fd: int | None, path: str | int) -> None:
        self._maps_fd = maps_fd
        paths: list[str | int] = [path]
        if isinstance(path, str) and os.path.isdir(path):
            paths = [os.path.join(path, n) for n in os.listdir(path)]
        self._files = set()
        for name in paths:
            st = os.stat(name)
            self._files.add((f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}", st.st_ino))
        self._ranges: list[tuple[int, int]] = []
        self._starts: list[int] = []
        libc = ctypes.CDLL(None, use_errno=True) if maps_fd is not None else None
        self._madvise = libc.madvise if libc is not None else None

    def refresh(self) -> None:
        """Re-read the mappings (call after the checkpoint has been loaded)."""
        if self._maps_fd is None:
            return
        chunks, offset = [], 0
        while block := os.pread(self._maps_fd, 1 << 20, offset):
            chunks.append(block)
            offset += len(block)
        ranges = []
        for line in b"".join(chunks).decode("utf-8", "replace").splitlines():
            fields = line.split(None, 5)
            if (len(fields) < 6 or not fields[1].endswith("p")
                    or (fields[3], int(fields[4])) not in self._files):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            ranges.append((start, end))
        ranges.sort()
        self._ranges = ranges
        self._starts = [r[0] for r in ranges]

    def __call__(self, address: int, nbytes: int) -> None:
        if self._madvise is None or nbytes <= 0:
            return
        first = -(-address // _PAGE) * _PAGE
        last = (address + nbytes) // _PAGE * _PAGE
        if last <= first:
            return
        i = bisect.bisect_right(self._starts, first) - 1
        if i < 0 or last > self._ranges[i][1]:
            return
        self._madvise(ctypes.c_void_p(first), ctypes.c_size_t(last - first), _MADV_DONTNEED)
