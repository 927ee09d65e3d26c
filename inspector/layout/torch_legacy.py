"""Where every tensor of a legacy `torch.save` stream lies (before torch 1.6, or
`_use_new_zipfile_serialization=False`), read without torch or unpickling.

The stream is five pickles, as torch's legacy loader reads them: the magic number, the protocol
version (1001), the system info (`little_endian` must be true), the object, and the list of
storage keys; then each storage in that list's order, as its element count (int64,
little-endian) followed by its bytes. The object is walked as `torch_save.walk_pickle` walks
an archive's data.pkl (a legacy storage id has a sixth field, a view into another storage,
which must be None), so the tensor keys and layouts are the ones torch.load builds. Anything
else (another pickle, a storage view, a stream that ends early or goes on) is NotCovered.
"""

from __future__ import annotations

import pickletools
import struct
from dataclasses import dataclass

from inspector.core.flatten import flatten, unique_keys
from inspector.layout.torch_save import (
    MAX_PICKLE_BYTES,
    NotCovered,
    TensorLayout,
    tensor_layouts,
    walk_pickle,
)

MAGIC = 0x1950A86A20F9469CFC6C
PROTOCOL_VERSION = 1001


@dataclass(frozen=True)
class _Record:
    """Where one storage's bytes lie in the stream."""

    data_offset: int
    size: int


def describe_legacy(buf, plain_leaves: bool = False) -> list[TensorLayout]:
    """Every tensor of the legacy stream in `buf` (an mmap), keyed as torch flattens it;
    `plain_leaves` as `torch_save.describe_archive`. NotCovered for anything else."""
    pickles, end = [], 0
    for _ in range(5):
        data, end = _next_pickle(buf, end)
        pickles.append(data)
    magic, version, info = (walk_pickle(p)[0] for p in pickles[:3])
    if magic != MAGIC or version != PROTOCOL_VERSION:
        raise NotCovered("not a legacy torch stream (magic number or protocol version)")
    if type(info) is not dict or info.get("little_endian") is not True:
        raise NotCovered("a legacy stream that is not little-endian")
    root, storages = walk_pickle(pickles[3], floats=plain_leaves, legacy=True,
                                 int_keys=plain_leaves)
    keys = walk_pickle(pickles[4])[0]
    if type(keys) is not list or sorted(keys) != sorted(storages) or len(set(keys)) != len(keys):
        raise NotCovered("the storage key list does not name each storage once")
    records = {}
    for key in keys:
        if end + 8 > len(buf):
            raise NotCovered(f"storage {key!r} lies past the end of the stream")
        (count,) = struct.unpack_from("<q", buf, end)
        nbytes = storages[key].nbytes
        itemsize = nbytes // count if count else 0
        if count < 0 or count * itemsize != nbytes or end + 8 + nbytes > len(buf):
            raise NotCovered(f"storage {key!r} is not the size its id declares")
        records[key] = _Record(end + 8, nbytes)
        end += 8 + nbytes
    if end != len(buf):
        raise NotCovered("bytes follow the last storage")
    return tensor_layouts(unique_keys(flatten(root)), storages, records, "", plain_leaves)


def _next_pickle(buf, start: int) -> tuple[bytes, int]:
    """The bytes of the pickle that starts at `start`, and where it ends (after STOP)."""
    stream = _Window(buf, start, min(len(buf), start + MAX_PICKLE_BYTES))
    try:
        for op, _arg, pos in pickletools.genops(stream):
            if op.name == "STOP":
                return bytes(buf[start:start + pos + 1]), start + pos + 1
    except (ValueError, IndexError, struct.error, EOFError) as exc:
        raise NotCovered(f"a legacy stream pickle not understood: {exc}") from None
    raise NotCovered("a legacy stream pickle without STOP")


class _Window:
    """A read-only file over `buf[start:end]` for `pickletools.genops`: a length past the
    window is refused before anything is copied (a crafted length cannot make a huge read)."""

    def __init__(self, buf, start: int, end: int) -> None:
        self._buf, self._start, self._pos, self._end = buf, start, start, end

    def tell(self) -> int:
        """Bytes read so far."""
        return self._pos - self._start

    def read(self, n: int) -> bytes:
        """The next `n` bytes; ValueError past the window."""
        if n < 0 or self._pos + n > self._end:
            raise ValueError("a length past the end of the pickle's window")
        self._pos += n
        return bytes(self._buf[self._pos - n:self._pos])

    def readline(self) -> bytes:
        """The bytes up to and with the next newline, inside the window."""
        stop = self._buf.find(b"\n", self._pos, self._end)
        if stop < 0:
            raise ValueError("a line past the end of the pickle's window")
        line = bytes(self._buf[self._pos:stop + 1])
        self._pos = stop + 1
        return line
