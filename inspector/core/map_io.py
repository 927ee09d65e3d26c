"""A read-only file object over bytes or a memory map: readers that want a file (pickle's,
zipfile) read a mapped checkpoint, or a slice of one, without a copy of it."""

from __future__ import annotations

import io


class MapIO(io.RawIOBase):
    """A read-only file over a slice of bytes or a mapping, copying nothing up front."""

    def __init__(self, data, start: int = 0) -> None:
        self._view = memoryview(data)
        self._pos = start

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = 0) -> int:
        base = (0, self._pos, len(self._view))[whence]
        self._pos = max(0, base + pos)
        return self._pos

    def readinto(self, buffer) -> int:
        chunk = self._view[self._pos:self._pos + len(buffer)]
        n = len(chunk)
        buffer[:n] = chunk
        self._pos += n
        return n

    def close(self) -> None:
        self._view.release()
        super().close()
