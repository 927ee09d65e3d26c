"""TorchScript and torch.export archives' weights as tensors, read statically in the worker.

`layout.torchscript` describes the records (no torch, no unpickling, no code run); each
tensor here is a view of one private read-only mapping of the file, so nothing is copied and
`torch.jit.load` / `torch.export.load` are never called. Pure parsing, but of untrusted
bytes, so it runs only in the jailed worker.
"""

from __future__ import annotations

import mmap
import os

import torch

from inspector.core.errors import CodedError
from inspector.layout.torchscript import ArchiveLayout, NotCovered, describe_code_archive


def describe(path: str, kind: str) -> ArchiveLayout:
    """The archive's static layout; CodedError `not_covered` when any part is not understood."""
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        try:
            return describe_code_archive(mm, kind)
        except NotCovered as exc:
            raise CodedError("not_covered", f"{kind} archive not read (its code is never run, "
                             f"so its weights are read only from records fully understood): "
                             f"{exc}") from None


def load_weights(path: str, kind: str) -> dict[str, torch.Tensor]:
    """Every weight of the archive, keyed as `state_dict()` names it, as views of the file."""
    layout = describe(path, kind)
    mapped = torch.UntypedStorage.from_file(path, shared=False, nbytes=os.path.getsize(path))
    out = {}
    for t in layout.tensors:
        dtype = getattr(torch, t.dtype)
        if not all(t.shape):
            out[t.key] = torch.empty(t.shape, dtype=dtype)
            continue
        span = (1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride, strict=True))) * t.itemsize
        # inside its record: describe_code_archive checked the view's extent
        out[t.key] = torch.empty(0, dtype=dtype).set_(
            mapped[t.data_offset : t.data_offset + span], 0, t.shape, t.stride)
    return out
