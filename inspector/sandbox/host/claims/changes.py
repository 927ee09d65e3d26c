"""What differs between two tensors of one dtype and shape, counted here from their bytes: the
changed elements, single-bit flips by bit (the first ones with their bits), how many changed
elements are NaN or Inf on either side, and how far the others moved. A dtype with no bit
layout (GGUF's `bits8` blocks, safetensors' sub-byte F4 / F6) is compared byte by byte: its
tally counts bytes (`bytewise`). A diff row's numbers are held against it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inspector.rawtensors.readers import RawTensor
from inspector.sandbox.host.claims.bytes_equal import equal, in_step

if TYPE_CHECKING:
    import numpy as np

    from inspector.checkpoint.bitflip import FlipTally
    from inspector.checkpoint.drift import Drift


@dataclass(frozen=True)
class Changes:
    """Two tensors' differences. `bytewise` where the dtype has no bit layout: `tally` then
    counts differing bytes (each bit of kind `value`), and `nonfinite` and `drift` are None;
    `drift` is None too for torch's packed float4 pairs, whose values neither side reads."""

    same: bool
    tally: FlipTally
    nonfinite: int | None = None
    drift: Drift | None = None
    bytewise: bool = False


def changes(a: RawTensor, b: RawTensor) -> Changes:
    """Compare two tensors of one dtype and shape, read in step: equal pieces by memcmp, the
    others element by element (`bitflip.compare_raw`, `drift.fold`, as the diff's own
    engine; float8 decoded by its exact tables, `orders.VALUES`)."""
    # NumPy's import, here on the comparing thread, not on the way to the worker's start
    from inspector.checkpoint.bitflip import FlipTally, compare_raw, layout_for
    from inspector.checkpoint.drift import Drift, fold

    try:
        tally, bytewise = FlipTally(layout_for(a.dtype)), False
    except ValueError:  # no bit layout (bits8 blocks, F4 / F6): its bytes are what is compared
        tally, bytewise = FlipTally(layout_for("uint8")), True
    decode = None if bytewise else _decoder(a.dtype)
    drift = None if decode is None else Drift()
    start = 0
    for x, y in in_step(a, b):
        if not equal(x, y):
            chunk = compare_raw(x, y, tally.layout)
            tally.add(chunk, start)
            if decode is not None and drift is not None:
                fold(drift, chunk, decode)
        start += x.size // tally.layout.itemsize
    if bytewise:
        return Changes(not tally.changed, tally, bytewise=True)
    # packed float4 (no decoder) holds no NaN or Inf: e2m1 has no pattern for either
    nonfinite = 0 if drift is None else drift.nonfinite
    if not tally.changed:
        drift = Drift(0, 0.0, 0.0)  # the engine's numbers for a tensor that did not change
    return Changes(not tally.changed, tally, nonfinite, drift)


def _decoder(dtype: str) -> Callable[[np.ndarray], np.ndarray] | None:
    """How changed elements (rows of raw bytes) read as float64 or complex128 here, exactly as
    the worker's engine reads them (NumPy; torch for float8, whose every value the tables of
    `orders.VALUES` hold, and complex32, two float16 halves); None where no value is read
    (packed float4, on which torch has no arithmetic either)."""
    import numpy as np

    from inspector.checkpoint.drift import decodable, decoded, widened
    from inspector.rawtensors.orders import ROUNDED, VALUES

    if decodable(dtype):
        return lambda rows: decoded(rows, dtype)
    if dtype == "complex32":
        return lambda rows: np.ascontiguousarray(rows).reshape(-1).view("<f2").astype(
            np.float64).view(np.complex128)
    if dtype in VALUES and dtype not in ROUNDED:
        return lambda rows: widened(VALUES[dtype](np.ascontiguousarray(rows).reshape(-1).data))
    return None
