"""What joblib reads after a NumpyArrayWrapper, read the way joblib's own unpickler reads it.

joblib.dump pickles each NumPy array as a `NumpyArrayWrapper` (its subclass, shape, order and
dtype) and writes the array's raw bytes into the stream right after the wrapper's BUILD; from
joblib 1.2 on a padding byte and that many padding bytes come first
(`numpy_array_alignment_bytes`). `NumpyUnpickler.load_build` reads those bytes there, so they are
array data, not opcodes. An array of Python objects is written instead as a whole pickle of its
own, which joblib reads with a fresh unpickler. `layout` tells which, from the walked state.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

WRAPPER = "joblib.numpy_pickle.NumpyArrayWrapper"
NUMPY_DTYPE = "numpy.dtype"
# The subclasses joblib hands the read array back as; any other is rebuilt with
# numpy's _reconstruct(subclass, ...) and its __array_prepare__ called (numpy before 2).
PLAIN_SUBCLASSES = frozenset({"numpy.ndarray", "numpy.memmap"})
_CODE_RE = re.compile(r"[<>|=]?([a-zA-Z])(\d*)")
_HAS_OBJECT = 0x01  # NPY_ITEM_HASOBJECT in a dtype's pickled flags


@dataclass(frozen=True)
class JoblibArray:
    """What follows a wrapper's BUILD: `nbytes` of raw data (after a padding byte and its
    padding when `aligned`), or a nested pickle when `nbytes` is None (an object array)."""

    nbytes: int | None
    aligned: bool


def _item_size(dtype: object) -> tuple[int | None, bool] | str:
    """(bytes per element, whether elements are Python objects) of a walked numpy.dtype value
    (`_Obj.detail`: its arguments, or (arguments, BUILD state)), or why it cannot be told."""
    args, state = dtype if isinstance(dtype, tuple) and len(dtype) == 2 and isinstance(
        dtype[0], tuple) else (dtype, None)
    if not isinstance(args, tuple) or not args or not isinstance(args[0], str):
        return "its dtype was not a plain numpy.dtype(code)"
    match = _CODE_RE.fullmatch(args[0])
    if match is None:
        return f"its dtype code {args[0][:20]!r} is not one NumPy writes"
    kind, digits = match.groups()
    flags = state[7] if isinstance(state, tuple) and len(state) > 7 else 0
    if kind == "O" or (type(flags) is int and flags & _HAS_OBJECT):
        return None, True
    elsize = state[5] if isinstance(state, tuple) and len(state) > 5 else -1
    if type(elsize) is int and elsize > 0:
        return elsize, False
    if digits:
        return int(digits), False
    return f"its dtype {args[0]!r} has no element size"


def layout(state: object) -> JoblibArray | str:
    """What joblib reads after the wrapper whose BUILD state (a walked dict) is `state`, or why
    that cannot be told from the walk."""
    items = getattr(state, "items", None)
    if not isinstance(items, dict) or "dtype" not in items:
        return "the wrapper's state is not the dict joblib writes"
    return array_layout(items, getattr(items["dtype"], "detail", None))


def array_layout(items: dict, dtype: object) -> JoblibArray | str:
    """What joblib reads after a wrapper whose state dict is `items` and whose dtype was built
    as `dtype` (numpy.dtype's arguments, or (arguments, BUILD state)), or why that cannot be
    told; the walker and the jailed dry run's joblib reading both ask it."""
    shape = items.get("shape")
    if not isinstance(shape, tuple) or not all(type(d) is int and d >= 0 for d in shape):
        return "its shape is not a tuple of sizes"
    size = _item_size(dtype)
    if isinstance(size, str):
        return size
    itemsize, has_object = size
    if has_object:
        return JoblibArray(None, False)
    aligned = items.get("numpy_array_alignment_bytes") is not None
    return JoblibArray(math.prod(shape) * itemsize, aligned)
