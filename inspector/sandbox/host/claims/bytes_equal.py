"""Byte equality of tensors and buffers, read in step with libc's memcmp."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from typing import TYPE_CHECKING

from inspector.rawtensors.readers import RawTensor

if TYPE_CHECKING:
    import numpy as np

_LIBC = ctypes.CDLL(None)
_LIBC.memcmp.restype = ctypes.c_int
_LIBC.memcmp.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]


class Uneven(ValueError):
    """One tensor's bytes ended before the other's."""

    def __init__(self) -> None:
        super().__init__("one side's bytes end before the other's")


def equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two byte arrays of one length are equal: libc's memcmp, about twice
    `np.array_equal`'s speed (no temporary array), which keeps the check of a 1 GB
    conversion's output well inside a tenth of its time."""
    return len(a) == len(b) and (
        len(a) == 0 or _LIBC.memcmp(a.ctypes.data, b.ctypes.data, len(a)) == 0)


def in_step(a: RawTensor, b: RawTensor) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Both tensors' bytes in element order, as pairs of pieces of one length (the readers
    of two formats cut a tensor at different places); `Uneven` where one side ends first."""
    import numpy as np

    left, rest = memoryview(b""), b.read()
    for chunk in a.read():
        view = memoryview(chunk).cast("B")
        while len(view):
            while not len(left):
                following = next(rest, None)
                if following is None:
                    raise Uneven
                left = memoryview(following).cast("B")
            n = min(len(view), len(left))
            yield np.frombuffer(view[:n], np.uint8), np.frombuffer(left[:n], np.uint8)
            view, left = view[n:], left[n:]
    if len(left) or any(len(memoryview(c).cast("B")) for c in rest):
        raise Uneven


def same_bytes(a: RawTensor, b: RawTensor) -> bool:
    """Whether two tensors hold the same bytes, in element order, read in step (memcmp)."""
    try:
        return all(equal(x, y) for x, y in in_step(a, b))
    except Uneven:
        return False
