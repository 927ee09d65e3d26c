"""A safetensors or GGUF file of small tensors described without torch, for the worker's
`inspect`.

Importing torch is most of a cold worker's start (1.1-1.3 s of a 12,000-tensor `inspect`).
Where the header lists only tensors the torch path would describe on its calling thread
(`tensors.describe.INLINE_BYTES` bytes at most each) and this module reads exactly, they are
described here from the header and the file's bytes, with the records
`describe.describe_tensors` gives: the same layout fields (every tensor a view of one mapping
of the whole file, its `storage_offset` counted in elements from the file's start),
statistics and digests from `segments.describe_joined`, a GGUF file's block-quantized tensors
as their raw `bits8` blocks (a digest, no statistics) beside the `KEY::ggml` leaf `gguf_load`
makes, and the same `unique_storage`. `describe_file` answers None, before anything is sent,
wherever the torch path is needed: a header the torch readers refuse (theirs is the error
reported), a dtype outside `VALUES`, a tensor over the bound, empty, unaligned or overlapping
another, and a tensor `describe_joined` leaves to `stats.tensor_stats` (NaN, Inf, outliers to
count).
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from inspector.core.dtypes import GGUF_DENSE
from inspector.core.flatten import flatten, unique_keys
from inspector.formats.safetensors_header import read_header
from inspector.layout.spans import overlapping, reached
from inspector.tensors.gguf_load import QuantizedTensor, refusal, rows
from inspector.tensors.gguf_load import read_header as read_gguf_header
from inspector.tensors.plain.leaves import describe_object
from inspector.tensors.plain.segments import describe_joined, refused_dtype

FORMATS = ("safetensors", "gguf")
MAX_BYTES = 256 * 1024
"""A tensor's bytes at most (`tensors.describe.INLINE_BYTES`: larger ones go to the torch
path's pool of threads)."""
BATCH_BYTES = 4 << 20
"""Bytes of one dtype read and described together at most."""
RAW = "bits8"
"""The dtype of a block-quantized GGUF tensor's raw blocks."""

VALUES: dict[str, tuple[str, bool]] = {
    "float32": ("<f4", False), "float16": ("<f2", False), "bfloat16": ("<u2", False),
    "int8": ("i1", True), "uint8": ("u1", True), "int16": ("<i2", True),
    "uint16": ("<u2", True),
}
"""dtype name -> (NumPy type of its stored elements, integral): those float32 holds exactly,
read here as `small_stats` reads them (bool is left to torch, which reads any non-zero byte)."""


class PlainTensor(NamedTuple):
    """A tensor as its header places it in the file (a tuple: a file may list 12,000)."""

    dtype: str
    shape: tuple[int, ...]
    begin: int
    itemsize: int
    numel: int

    @classmethod
    def at(cls, dtype: str, shape: tuple[int, ...], begin: int, itemsize: int) -> PlainTensor:
        """The tensor of `dtype` and `shape` whose bytes begin at `begin`."""
        return cls(dtype, shape, begin, itemsize, math.prod(shape))

    @property
    def end(self) -> int:
        """The end of its bytes in the file."""
        return self.begin + self.numel * self.itemsize


@dataclass(frozen=True)
class Described:
    """What `inspect` reports of the file: object leaves, tensor records in file order, and
    the bytes the tensors reach."""

    objects: list[dict]
    records: list[dict]
    unique_storage: dict


def describe_file(path: str, fmt: str) -> Described | None:
    """The file's records made without torch, or None where the torch path must make them."""
    leaves = _leaves(path, fmt)
    if leaves is None:
        return None
    tensors = [(k, v) for k, v in leaves if isinstance(v, PlainTensor)]
    if not tensors or any(not _readable(t) for _, t in tensors):
        return None
    spans = {"file": [(t.begin, t.end, k) for k, t in tensors]}
    if overlapping(spans):
        return None
    values = _values(path, tensors)
    if values is None:
        return None
    records = [{**_layout(k, t), **v} for (k, t), v in zip(tensors, values, strict=True)]
    numel, nbytes = reached(spans, {k: t.itemsize for k, t in tensors})
    return Described([describe_object(k, v) for k, v in leaves
                      if not isinstance(v, PlainTensor)],
                     records, {"storages": 1, "numel": numel, "nbytes": nbytes})


def _leaves(path: str, fmt: str) -> list[tuple[str, object]] | None:
    """The loaded object's leaves as the torch readers key them (`load.split_leaves`)."""
    if fmt == "safetensors":
        loaded = _safetensors(path)
    elif fmt == "gguf":
        loaded = _gguf(path)
    else:
        return None
    return None if loaded is None else unique_keys(flatten(loaded))


def _safetensors(path: str) -> dict[str, object] | None:
    """`load.load_safetensors`' tensors, in the order their bytes lie."""
    with open(path, "rb") as fh:
        header = read_header(fh, os.fstat(fh.fileno()).st_size)
    if header.refusal() is not None or any(e.dtype.name not in VALUES for e in header.entries):
        return None
    return {e.key: PlainTensor.at(e.dtype.name, tuple(e.shape), e.begin, e.dtype.bits // 8)
            for e in sorted(header.entries, key=lambda e: e.begin)}


def _gguf(path: str) -> dict[str, object] | None:
    """`gguf_load.load_gguf`'s tensors and leaves."""
    header = read_gguf_header(path)
    if refusal(header) is not None or len({t.name for t in header.tensors}) != len(
            header.tensors):
        return None
    out: dict[str, object] = {}
    for t in header.tensors:
        name = GGUF_DENSE.get(t.type_name)
        if name is None:
            per_row = t.n_bytes // max(1, rows(t))
            out[t.name] = PlainTensor.at(RAW, (*t.shape[:-1], per_row), t.data_offset, 1)
            out[t.name + "::ggml"] = QuantizedTensor(t.type_name, t.shape, t.n_bytes,
                                                     t.data_offset)
        elif name in VALUES:
            out[t.name] = PlainTensor.at(name, tuple(t.shape), t.data_offset,
                                         np.dtype(VALUES[name][0]).itemsize)
        else:
            return None
    return out


def _readable(t: PlainTensor) -> bool:
    """Whether the torch path would view `t` in place and describe it on its calling thread."""
    return (t.numel > 0 and t.numel * t.itemsize <= MAX_BYTES and t.begin % t.itemsize == 0
            and (t.dtype == RAW or t.dtype in VALUES))


def _layout(key: str, t: PlainTensor) -> dict:
    """`records.layout_record` of the tensor's view of the file."""
    stride, step = [], 1
    for n in reversed(t.shape):
        stride.append(step)
        step *= max(n, 1)
    return {"key": key, "dtype": t.dtype, "shape": list(t.shape), "numel": t.numel,
            "nbytes": t.numel * t.itemsize, "layout": "strided", "device": "cpu",
            "flags": [], "stride": stride[::-1], "storage_offset": t.begin // t.itemsize,
            "contiguous": True}


def _values(path: str, tensors: list[tuple[str, PlainTensor]]) -> list[dict] | None:
    """Each tensor's statistics and digest, or None when one is `tensor_stats`' to make."""
    out: list[dict] = [{} for _ in tensors]
    with open(path, "rb") as fh:
        fd = fh.fileno()
        for dtype, batch in _batches(tensors):
            sizes = [t.numel * t.itemsize for _, t in batch]
            raw = [os.pread(fd, n, t.begin) for n, (_, t) in zip(sizes, batch, strict=True)]
            if [len(blob) for blob in raw] != sizes:
                return None  # the file shrank since its header was read: torch's to report
            if dtype == RAW:
                found = [_blocks(blob) for blob in raw]
            else:
                found = _statistics(b"".join(raw), dtype, [t.numel for _, t in batch])
            for (i, _), rec in zip(batch, found, strict=True):
                if rec is None:
                    return None
                out[i] = rec
    return out


def _batches(tensors: list[tuple[str, PlainTensor]]
             ) -> Iterator[tuple[str, list[tuple[int, PlainTensor]]]]:
    """(dtype, [(index, tensor)]) groups of one dtype, BATCH_BYTES at most each."""
    by_dtype: dict[str, list[tuple[int, PlainTensor]]] = {}
    for i, (_, t) in enumerate(tensors):
        by_dtype.setdefault(t.dtype, []).append((i, t))
    for dtype, members in by_dtype.items():
        batch: list[tuple[int, PlainTensor]] = []
        size = 0
        for item in members:
            batch.append(item)
            size += item[1].numel * item[1].itemsize
            if size >= BATCH_BYTES:
                yield dtype, batch
                batch, size = [], 0
        if batch:
            yield dtype, batch


def _blocks(blob: bytes) -> dict:
    """A block-quantized tensor's raw blocks: a digest and the note `describe` gives bits8."""
    return {"stats_on": None, "note": f"no statistics: {refused_dtype(RAW)}",
            "digest": hashlib.sha256(blob).hexdigest()}


def _statistics(joined: bytes, dtype: str, counts: list[int]) -> list[dict | None]:
    """`describe_joined` over tensors of one dtype, their bytes end to end."""
    stored, integral = VALUES[dtype]
    raw = np.frombuffer(joined, dtype=np.uint8)
    elements = np.frombuffer(joined, dtype=stored)
    if dtype == "bfloat16":  # the high half of a float32, exactly as torch widens it
        values = (elements.astype(np.uint32) << 16).view(np.float32)
    else:
        values = elements.astype(np.float32)
    return describe_joined(raw, values, counts, dtype, integral)
