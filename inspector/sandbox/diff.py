"""Tensor-level diff of two checkpoints with bit-flip forensics; runs inside the jailed worker.

Tensors are compared as raw bytes (row-major, as stored) in bounded chunks; only the elements
that differ are decoded to numbers, so memory stays flat whatever the tensor size.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from inspector.core.bitflip import FlipTally, compare_raw, layout_for
from inspector.core.dtypes import canonical_dtype

Chunk = memoryview | bytes | bytearray | np.ndarray
"""Raw little-endian element bytes, e.g. from `stats.byte_chunks`."""

IDENTICAL = "identical"
CHANGED = "changed"
ONLY_IN_A = "only_in_a"
ONLY_IN_B = "only_in_b"
DTYPE_OR_SHAPE_CHANGED = "dtype_or_shape_changed"

# quantized tensors are compared on their integer representation
_INT_REPR = {
    "qint8": torch.int8,
    "quint8": torch.uint8,
    "qint32": torch.int32,
    "quint4x2": torch.uint8,
    "quint2x4": torch.uint8,
}


@dataclass
class TensorDiff:
    """The comparison of one key present in both checkpoints."""

    key: str
    status: str
    dtype_a: str | None = None
    dtype_b: str | None = None
    shape_a: list[int] | None = None
    shape_b: list[int] | None = None
    changed_elements: int = 0
    max_abs_diff: float | None = None
    max_rel_diff: float | None = None
    nonfinite_changes: int = 0
    tally: FlipTally | None = field(default=None, repr=False)

    def to_json(self) -> dict[str, Any]:
        """The `tensors` record of the diff contract."""
        record: dict[str, Any] = {
            "key": self.key,
            "status": self.status,
            "dtype_a": self.dtype_a,
            "dtype_b": self.dtype_b,
            "shape_a": self.shape_a,
            "shape_b": self.shape_b,
            "changed_elements": self.changed_elements,
            "max_abs_diff": self.max_abs_diff,
            "max_rel_diff": self.max_rel_diff,
            "nonfinite_changes": self.nonfinite_changes,
            "single_bit_flips": self.tally.single_bit if self.tally else 0,
            "multi_bit_elements": self.tally.multi_bit if self.tally else 0,
            "bitflips": [],
            "summary": self.tally.summary(self.key) if self.tally and self.changed_elements else "",
        }
        if self.tally is not None:
            shape = tuple(self.shape_a or ())
            for flip in self.tally.flips:
                item = flip.to_json()
                item["position"] = [int(i) for i in np.unravel_index(flip.index, shape)]
                record["bitflips"].append(item)
        return record


def _aligned(
    chunks_a: Iterable[Chunk], chunks_b: Iterable[Chunk]
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Pair two byte streams whose chunk boundaries may differ (a view against a copy)."""
    it_a = (np.frombuffer(c, dtype=np.uint8) for c in chunks_a)
    it_b = (np.frombuffer(c, dtype=np.uint8) for c in chunks_b)
    a = b = np.empty(0, dtype=np.uint8)
    while True:
        while a is not None and not a.size:
            a = next(it_a, None)
        while b is not None and not b.size:
            b = next(it_b, None)
        if a is None or b is None:
            if a is not None or b is not None:
                raise ValueError("tensor data lengths differ although dtype and shape match")
            return
        n = min(a.size, b.size)
        yield a[:n], b[:n]
        a, b = a[n:], b[n:]


def diff_raw(
    key: str,
    dtype: Any,
    shape: Iterable[int],
    chunks_a: Iterable[Chunk],
    chunks_b: Iterable[Chunk],
) -> TensorDiff:
    """Compare two tensors of one dtype and shape given as raw byte chunks of any sizes."""
    name = canonical_dtype(dtype)
    layout = layout_for(name)
    shape = [int(d) for d in shape]
    result = TensorDiff(key, IDENTICAL, name, name, shape, shape, tally=FlipTally(layout))
    start = 0
    for a, b in _aligned(chunks_a, chunks_b):
        chunk = compare_raw(a, b, layout)
        if chunk.changed.size:
            result.tally.add(chunk, start)
            _numeric(result, name, layout.itemsize, a, b, chunk.changed)
        start += a.size // layout.itemsize
    result.changed_elements = result.tally.changed
    if result.changed_elements:
        result.status = CHANGED
    return result


def _decode(raw: np.ndarray, name: str, itemsize: int, idx: np.ndarray) -> torch.Tensor | None:
    """The numeric values of selected elements, as float64 or complex128."""
    picked = np.ascontiguousarray(raw.reshape(-1, itemsize)[idx]).reshape(-1)
    values = torch.from_numpy(picked).view(_INT_REPR.get(name) or getattr(torch, name))
    if values.is_complex():
        return values.to(torch.complex128)
    try:
        return values.to(torch.float64)
    except (RuntimeError, TypeError):  # packed float4 has no arithmetic in torch
        return None


def _numeric(
    result: TensorDiff, name: str, itemsize: int, a: np.ndarray, b: np.ndarray, idx: np.ndarray
) -> None:
    """Fold the changed elements' absolute and relative differences into the result."""
    va, vb = _decode(a, name, itemsize, idx), _decode(b, name, itemsize, idx)
    if va is None or vb is None:
        return
    finite = torch.isfinite(va) & torch.isfinite(vb)
    result.nonfinite_changes += int((~finite).sum())
    if not bool(finite.any()):
        return
    va, vb = va[finite], vb[finite]
    absdiff = (va - vb).abs()
    # relative to the larger magnitude: defined even where one side is zero, at most 2
    scale = torch.maximum(va.abs(), vb.abs())
    rel = torch.where(scale > 0, absdiff / scale.clamp_min(torch.finfo(torch.float64).tiny), 0.0)
    result.max_abs_diff = max(result.max_abs_diff or 0.0, float(absdiff.max()))
    result.max_rel_diff = max(result.max_rel_diff or 0.0, float(rel.max()))
