"""What differs between two tensors of one dtype and shape, counted here from their bytes: the
changed elements, single-bit flips by bit (the first ones with their bits), how many changed
elements are NaN or Inf on either side, and how far the others moved. A diff row's numbers are
held against it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from inspector.rawtensors.readers import RawTensor
from inspector.sandbox.host.claims.bytes_equal import equal, in_step, same_bytes

if TYPE_CHECKING:
    import numpy as np

    from inspector.checkpoint.bitflip import FlipTally
    from inspector.checkpoint.drift import Drift
    from inspector.rawtensors.values import Flags


@dataclass(frozen=True)
class Changes:
    """Two tensors' differences; `tally` None where the dtype has no bit layout (equality
    only), `nonfinite` None where its NaN and Inf are not told here, `drift` None where its
    values are not decoded here (the float8 formats)."""

    same: bool
    tally: FlipTally | None = None
    nonfinite: int | None = None
    drift: Drift | None = None


def changes(a: RawTensor, b: RawTensor) -> Changes:
    """Compare two tensors of one dtype and shape, read in step: equal pieces by memcmp, the
    others element by element (`bitflip.compare_raw`, `drift.fold`, as the diff's own
    engine)."""
    # NumPy's import, here on the comparing thread, not on the way to the worker's start
    from inspector.checkpoint.bitflip import FlipTally, compare_raw, layout_for
    from inspector.checkpoint.drift import Drift, decodable, decoded, fold
    from inspector.rawtensors.values import FLAGS

    try:
        tally = FlipTally(layout_for(a.dtype))
    except ValueError:  # a packed dtype: equal or not, with no forensics
        return Changes(same_bytes(a, b))
    # decoded values count their own NaN / Inf (`Drift`); the float8 formats' bit patterns
    drift = Drift() if decodable(a.dtype) else None
    flags = FLAGS.get(a.dtype) if drift is None else None
    patterned, start = 0, 0
    for x, y in in_step(a, b):
        if not equal(x, y):
            chunk = compare_raw(x, y, tally.layout)
            tally.add(chunk, start)
            if drift is not None:
                fold(drift, chunk, lambda rows: decoded(rows, a.dtype))
            elif flags is not None:
                patterned += _nonfinite(flags, x, y, chunk.changed)
        start += x.size // tally.layout.itemsize
    nonfinite = drift.nonfinite if drift is not None else patterned if flags is not None else None
    if not tally.changed:
        drift = Drift(0, 0.0, 0.0)  # the engine's numbers for a tensor that did not change
    return Changes(not tally.changed, tally, nonfinite, drift)


def _nonfinite(flags: Flags, x: np.ndarray, y: np.ndarray, changed: np.ndarray) -> int:
    """Changed elements NaN or Inf on either side of a pair of pieces."""
    found = [f for f in (flags(x.data), flags(y.data)) if f is not None]
    if not found:  # the usual case: both pieces finite, found in one pass each
        return 0
    hit = found[0][0] | found[0][1]
    for nan, inf in found[1:]:
        hit |= nan | inf
    return int(hit[changed].sum())
