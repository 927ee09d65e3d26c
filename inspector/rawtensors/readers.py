"""Each tensor of a file as raw row-major bytes, located by reading headers and layouts only.

Safetensors (`formats.safetensors_header`), a plain torch zip archive (`layout.torch_save`, a
static walk of data.pkl that builds values itself and imports nothing), a legacy torch stream
(`layout.torch_legacy`, the same walk), a TorchScript or torch.export archive's weights
(`layout.torchscript`, the parser the worker reads them with) and GGUF
(`formats.gguf_header`; a block-quantized tensor is its raw blocks, dtype `bits8`, as the
worker lists it). Anything else, or anything these readers do not fully
cover, is `NotReadable` with the reason: the caller then knows its claim about that file can
only be taken from the jailed loader. Bytes are read from one read-only mapping per file in
bounded chunks, each chunk's pages given back once read.
"""

from __future__ import annotations

import mmap
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from inspector.core.dtypes import BY_NAME, GGUF_DENSE, canonical_dtype
from inspector.formats import HEAD_BYTES, gguf_header, sniff
from inspector.formats.safetensors_header import read_header
from inspector.layout.torch_legacy import describe_legacy
from inspector.layout.torch_save import NotCovered, TensorLayout, describe_archive
from inspector.layout.torchscript import code_archive_kind, describe_code_archive

CHUNK_BYTES = 16 * 1024 * 1024
"""Bytes read at a time; bounds memory whatever the tensor size."""

Reader = Callable[[], Iterator[memoryview]]
"""Yields the tensor's bytes, contiguous and row-major, in pieces of at most CHUNK_BYTES."""

class NotReadable(Exception):
    """The file's tensors cannot all be located without running a loader: `reason` says why."""


class Placed(NamedTuple):
    """Where the worker's loader puts a tensor in its storage: what torch's `stride()`,
    `storage_offset()` and `is_contiguous()` give for it once loaded."""

    stride: tuple[int, ...]
    storage_offset: int
    contiguous: bool


@dataclass(frozen=True)
class RawTensor:
    """One tensor: its key, dtype (torch's name), shape, and a reader of its bytes."""

    key: str
    dtype: str
    shape: tuple[int, ...]
    read: Reader
    view: tuple[Any, ...]
    """Where it lies (offset, stride): equal for the same view of the same bytes."""
    reach: tuple[int, int]
    """The file's bytes [begin, end) its elements lie in (begin == end when it has none):
    tensors whose reaches overlap share bytes."""
    placed: Placed


@dataclass(frozen=True)
class RawFile:
    """A file whose every tensor was located: its format and tensors, in file order."""

    format: str
    tensors: list[RawTensor]
    metadata: dict[str, str]
    """A safetensors header's `__metadata__` (free text; empty for other formats)."""
    plain: tuple[tuple[str, object], ...] = ()
    """A torch zip archive's or legacy stream's plain values (key, value), walked with its
    tensors (`layout.torch_save.Layouts.plain`); none for other formats."""


def open_raw(path: str | os.PathLike[str]) -> RawFile:
    """Every tensor of the file at `path`, located without torch; NotReadable otherwise."""
    if os.path.isdir(path):
        raise NotReadable("a folder's tensors are read by the jailed loader")
    if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would block the open
        raise NotReadable("not a regular file")
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        head = fh.read(HEAD_BYTES)
        if size == 0:
            raise NotReadable("the file is empty")
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    view = memoryview(mm)
    if gguf_header.sniff(head, size):
        return _gguf(mm, view, size)
    kind = sniff(head, size)
    if kind == "safetensors":
        return _safetensors(path, view, size)
    if kind == "zip":
        return _torch_zip(mm, view)
    if kind == "pytorch-legacy":
        try:
            layouts = describe_legacy(mm, plain_leaves=True)
        except NotCovered as exc:
            raise NotReadable(f"the legacy stream holds more than tensors and plain values "
                              f"({exc})") from None
        return RawFile("pytorch-legacy", [_layout_tensor(view, t) for t in layouts], {},
                       tuple(layouts.plain))
    raise NotReadable(f"a {kind} file's tensors are located only by loading it")


def _safetensors(path: str | os.PathLike[str], view: memoryview, size: int) -> RawFile:
    with open(path, "rb") as fh:
        header = read_header(fh, size)
    refusal = header.refusal()
    if refusal is not None:
        raise NotReadable(f"bad safetensors header: {refusal}")
    tensors = [RawTensor(e.key, canonical_dtype(e.dtype.name), tuple(e.shape),
                         range_reader(view, e.begin, e.end), (e.begin, e.end), (e.begin, e.end),
                         _mapped(canonical_dtype(e.dtype.name), e.shape, e.begin))
               for e in header.entries]
    return RawFile("safetensors", tensors, dict(header.metadata))


def _torch_zip(mm: mmap.mmap, view: memoryview) -> RawFile:
    kind = code_archive_kind(mm)
    if kind is not None:
        return _code_archive(mm, view, kind)
    try:
        layouts = describe_archive(mm, plain_leaves=True)
    except NotCovered as exc:
        raise NotReadable(f"the archive holds more than tensors and plain values ({exc})"
                          ) from None
    return RawFile("pytorch-zip", [_layout_tensor(view, t) for t in layouts], {},
                   tuple(layouts.plain))


def _code_archive(mm: mmap.mmap, view: memoryview, kind: str) -> RawFile:
    """A TorchScript or torch.export archive's weights, located by the static parser the
    worker's loader reads them with (`tensors.torchscript.load_weights`): each one a view of
    its record, which the worker sets on a slice of the mapping (storage offset 0), and one
    without elements a fresh row-major tensor."""
    try:
        layouts = describe_code_archive(mm, kind).tensors
    except NotCovered as exc:
        raise NotReadable(f"the {kind} archive's records are not all understood ({exc})"
                          ) from None
    tensors = []
    for t in layouts:
        located = _layout_tensor(view, t)
        placed = (Placed(t.stride, 0, t.contiguous) if t.numel
                  else _mapped(t.dtype, t.shape, 0))
        tensors.append(replace(located, placed=placed))
    return RawFile(kind, tensors, {})


def _layout_tensor(view: memoryview, t: TensorLayout) -> RawTensor:
    read = (range_reader(view, t.data_offset, t.data_offset + t.numel * t.itemsize)
            if t.contiguous else strided_reader(view, t))
    span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride, strict=True)) if t.numel else 0
    # torch counts every tensor without elements contiguous, whatever its strides
    placed = Placed(t.stride, t.storage_offset, t.contiguous or not t.numel)
    return RawTensor(t.key, t.dtype, t.shape, read, (t.data_offset, t.stride),
                     (t.data_offset, t.data_offset + span * t.itemsize), placed)


def _gguf(mm: mmap.mmap, view: memoryview, size: int) -> RawFile:
    header = gguf_header.read(mm, size)
    if not header.complete or header.big_endian:
        raise NotReadable("an incomplete or big-endian GGUF header")
    tensors = []
    for t in header.tensors:
        if t.n_bytes is None or t.data_offset + t.n_bytes > size:
            raise NotReadable(f"GGUF tensor {t.name!r} has an unknown type or lies past the end")
        dense = GGUF_DENSE.get(t.type_name)
        rows = 1
        for d in t.shape[:-1]:
            rows *= d
        shape = t.shape if dense else (*t.shape[:-1], t.n_bytes // max(1, rows))
        tensors.append(RawTensor(t.name, dense or "bits8", tuple(shape),
                                 range_reader(view, t.data_offset, t.data_offset + t.n_bytes),
                                 (t.data_offset,), (t.data_offset, t.data_offset + t.n_bytes),
                                 _mapped(dense or "bits8", shape, t.data_offset)))
    return RawFile("gguf", tensors, {})


def _mapped(dtype: str, shape: tuple[int, ...] | list[int], begin: int) -> Placed:
    """A safetensors or GGUF tensor as the worker's loaders place it: a row-major view of one
    mapping of the whole file (`tensors.load.load_safetensors`, `tensors.gguf_load`), or, where
    its bytes are not aligned to its elements, a copy of its own."""
    stride, step = [], 1
    for n in reversed(shape):
        stride.append(step)
        step *= max(n, 1)
    size = BY_NAME[dtype].itemsize if dtype in BY_NAME else 1
    return Placed(tuple(reversed(stride)), begin // size if begin % size == 0 else 0, True)


def range_reader(view: memoryview, begin: int, end: int) -> Reader:
    """A reader of bytes [begin, end) of a mapping, each chunk's pages dropped once read."""
    def read() -> Iterator[memoryview]:
        for start in range(begin, end, CHUNK_BYTES):
            stop = min(end, start + CHUNK_BYTES)
            yield view[start:stop]
            # pages of a read-only file mapping are dropped losslessly once read
            _drop(view.obj, start, stop)

    return read


def _drop(mm: mmap.mmap, start: int, stop: int) -> None:
    # the page holding `stop` is kept: the next tensor's bytes often begin in it (a file of
    # 12,000 tiny tensors made a call and a fault again per tensor), and its reader drops it
    first = start // mmap.PAGESIZE * mmap.PAGESIZE
    last = stop // mmap.PAGESIZE * mmap.PAGESIZE
    if last > first and hasattr(mmap, "MADV_DONTNEED"):
        mm.madvise(mmap.MADV_DONTNEED, first, last - first)


def strided_reader(view: memoryview, t: TensorLayout) -> Reader:
    """A reader of a strided view's elements in row-major order (bounds already checked by
    `describe_archive`: the view lies inside its stored record)."""
    def read() -> Iterator[memoryview]:
        import numpy as np

        first = np.frombuffer(view, dtype=np.uint8)[t.data_offset :]
        elements = np.lib.stride_tricks.as_strided(
            first,
            shape=(*t.shape, t.itemsize),
            strides=(*(s * t.itemsize for s in t.stride), 1),
            writeable=False,
        )
        yield from _row_major(elements)

    return read


def _row_major(arr: Any) -> Iterator[memoryview]:
    """Contiguous copies of a strided numpy array, in row-major order, each about CHUNK_BYTES."""
    import numpy as np

    if arr.nbytes <= CHUNK_BYTES or arr.ndim == 1:
        yield memoryview(np.ascontiguousarray(arr).reshape(-1))
        return
    row = arr[0].nbytes
    if row > CHUNK_BYTES:
        for sub in arr:
            yield from _row_major(sub)
        return
    step = CHUNK_BYTES // row
    for start in range(0, len(arr), step):
        yield memoryview(np.ascontiguousarray(arr[start : start + step]).reshape(-1))
