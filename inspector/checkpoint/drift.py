"""How far a tensor's changed elements moved: the largest absolute and relative differences.

The diff's engine (in the jailed worker) and the user's process, which checks the engine's
numbers (`sandbox.host.claims.changes`), decode and fold the same elements with this one
piece, so an honest reply's numbers match the check's exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from inspector.core.dtypes import REGISTRY
from inspector.rawtensors.orders import VALUES

if TYPE_CHECKING:
    from inspector.checkpoint.bitflip import ChunkDiff

_FLOAT_MAX = float(np.finfo(np.float64).max)
_NUMPY_TYPES = {d.name: np.dtype(d.numpy) for d in REGISTRY if d.numpy}
# quantized tensors are compared on their integer representation
_INT_REPR = {d.name: d.int_repr for d in REGISTRY if d.int_repr}


def _reader(name: str) -> Callable[[np.ndarray], np.ndarray] | None:
    """How a dtype's raw bytes read as its values here; None for a dtype NumPy has no type
    for, except bfloat16 (the top half of a float32, so read exactly)."""
    name = _INT_REPR.get(name, name)
    if name in _NUMPY_TYPES:
        return lambda flat: flat.view(_NUMPY_TYPES[name])
    if name == "bfloat16":
        return lambda flat: VALUES[name](flat.data)
    return None


def decodable(name: str) -> bool:
    """Whether `decoded` reads this dtype's values."""
    return _reader(name) is not None


def decoded(rows: np.ndarray, name: str) -> np.ndarray | None:
    """Elements given as rows of their raw bytes, as float64 or complex128; None where the
    dtype is not `decodable`."""
    read = _reader(name)
    return None if read is None else widened(read(np.ascontiguousarray(rows).reshape(-1)))


def fold(drift: Drift, chunk: ChunkDiff, decode: Callable[[np.ndarray], np.ndarray | None]
         ) -> None:
    """Fold a chunk's changed elements into `drift`, where `decode` reads both sides."""
    if chunk.before is None or chunk.after is None:
        return
    va, vb = decode(chunk.before[chunk.changed]), decode(chunk.after[chunk.changed])
    if va is not None and vb is not None:
        drift.add(va, vb)


def widened(values: np.ndarray) -> np.ndarray:
    """Values as float64, or complex128 for complex ones."""
    with np.errstate(invalid="ignore"):  # widening a signalling NaN raises the flag
        return values.astype(np.complex128 if values.dtype.kind == "c" else np.float64)


@dataclass
class Drift:
    """The changed elements folded so far: how many are NaN or Inf on either side, and the
    largest absolute and relative differences of the others (None until one is folded)."""

    nonfinite: int = 0
    max_abs: float | None = None
    max_rel: float | None = None

    def add(self, va: np.ndarray, vb: np.ndarray) -> None:
        """Fold changed elements, decoded on both sides (`decoded`)."""
        finite = np.isfinite(va) & np.isfinite(vb)
        self.nonfinite += int((~finite).sum())
        if not finite.any():
            return
        va, vb = va[finite], vb[finite]
        with np.errstate(over="ignore"):
            absdiff = np.abs(va - vb)
        # relative to the larger magnitude: defined even where one side is zero, at most 2
        scale = np.maximum(np.abs(va), np.abs(vb))
        rel = np.divide(absdiff, scale, out=np.zeros_like(absdiff), where=scale > 0)
        # the difference of two huge finite float64 values can overflow; JSON holds no Inf
        largest = float(np.nan_to_num(absdiff.max(), posinf=_FLOAT_MAX))
        self.max_abs = max(self.max_abs or 0.0, largest)
        self.max_rel = max(self.max_rel or 0.0, float(np.nan_to_num(rel.max())))
