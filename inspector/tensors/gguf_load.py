"""A GGUF file's tensors for the worker (`formats.gguf` names `load_gguf` as its reader).

Dense ggml types (F32, F16, BF16, F64, I8, I16, I32, I64) come back as torch tensors that view a
private mapping of the file, as `load.load_safetensors` does, so statistics and digests read
the bytes in place. Block-quantized types (Q4_K, IQ2_XS, ...) are not decoded: each comes back
as its raw blocks, a `bits8` view (rows x bytes per row) that has a digest, so `diff` and
`verify` see a flipped bit in it, and no statistics (torch has none for bits8, and the record
says so), beside a `KEY::ggml` leaf (`QuantizedTensor`) that names its type and logical shape.

Importing this module costs no torch (`load_gguf` imports it): the worker's torch-free reader
(`tensors.plain`) makes the same leaves and refuses the same headers.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inspector.core.dtypes import GGUF_DENSE
from inspector.core.vocabulary import Severity
from inspector.formats import gguf_header

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class QuantizedTensor:
    """A tensor of a block-quantized ggml type, listed without statistics."""

    ggml_type: str
    shape: tuple[int, ...]
    nbytes: int | None
    offset: int

    def __repr__(self) -> str:
        size = "unknown size" if self.nbytes is None else f"{self.nbytes} bytes"
        return (f"{self.ggml_type} tensor, shape {list(self.shape)}, {size} at offset "
                f"{self.offset}; no statistics: {self.ggml_type} is a block-quantized ggml "
                "type whose values are not decoded here")


def read_header(path: str) -> gguf_header.GGUFFile:
    """The GGUF file's header, read through a mapping of the file."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return gguf_header.read(mm, size)


def load_gguf(path: str) -> dict[str, torch.Tensor | QuantizedTensor]:
    """Every tensor of a GGUF file by name: dense ones as views, quantized ones listed."""
    import torch

    from inspector.tensors.load import LoadError

    header = read_header(path)
    size = header.size
    why = refusal(header)
    if why is not None:
        raise LoadError("load_failed", f"bad GGUF file: {why}")
    storage = torch.UntypedStorage.from_file(path, shared=False, nbytes=size)
    out: dict[str, torch.Tensor | QuantizedTensor] = {}
    for t in header.tensors:
        name = GGUF_DENSE.get(t.type_name)
        dtype = None if name is None else getattr(torch, name)
        if dtype is None:
            out[t.name] = torch.empty(0, dtype=torch.bits8).set_(
                storage, t.data_offset, [*t.shape[:-1], t.n_bytes // max(1, rows(t))])
            out[t.name + "::ggml"] = QuantizedTensor(t.type_name, t.shape, t.n_bytes,
                                                     t.data_offset)
        elif t.data_offset % dtype.itemsize == 0:
            out[t.name] = torch.empty(0, dtype=dtype).set_(
                storage, t.data_offset // dtype.itemsize, t.shape)
        else:  # an unaligned tensor cannot be viewed in place; copy just this one
            raw = torch.empty(0, dtype=torch.uint8).set_(storage, t.data_offset, [t.n_bytes])
            out[t.name] = raw.clone().view(dtype).reshape(t.shape)
    return out


def rows(t: gguf_header.TensorInfo) -> int:
    """Rows of a tensor: every dimension but the fastest-moving one."""
    n = 1
    for d in t.shape[:-1]:
        n *= d
    return n


def refusal(header: gguf_header.GGUFFile) -> str | None:
    """Why the tensors cannot be read safely, or None."""
    if not header.complete:
        return header.problems[0].message if header.problems else "incomplete header"
    if header.big_endian:
        return "a big-endian GGUF file; its tensors are not read here"
    worst = next((p for p in header.problems if p.severity == Severity.DANGEROUS), None)
    if worst is not None:
        return worst.message
    past = next((t for t in header.tensors if t.n_bytes is not None
                 and t.data_offset + t.n_bytes > header.size), None)
    if past is not None:
        return f"tensor {past.name!r} ends past the end of the file"
    unknown = next((t for t in header.tensors if t.n_bytes is None), None)
    return None if unknown is None else f"tensor {unknown.name!r} has unknown {unknown.type_name}"
