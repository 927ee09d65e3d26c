"""The `numpy.dtypes` class of each NumPy dtype a pickle can rebuild.

NumPy 2 gives every dtype object a class of its own in numpy.dtypes; torch.load(weights_only=
True) checks the class of every object a BUILD sets state on, so a pickled numpy.dtype('f4')
also needs numpy.dtypes.Float32DType allowed. The numpy preset lists these classes and the scan
names the one a pickled dtype needs.
"""

from __future__ import annotations

import re

# Keyed by the kind letter and the item size that numpy.dtype.__reduce__ writes ('f4', 'i8',
# 'U3': size in characters, ignored).
_NUMPY_DTYPE_CLASSES = {
    "f": {2: "Float16DType", 4: "Float32DType", 8: "Float64DType", 16: "LongDoubleDType"},
    "c": {8: "Complex64DType", 16: "Complex128DType", 32: "CLongDoubleDType"},
    "i": {1: "Int8DType", 2: "Int16DType", 4: "Int32DType", 8: "Int64DType"},
    "u": {1: "UInt8DType", 2: "UInt16DType", 4: "UInt32DType", 8: "UInt64DType"},
    "b": {1: "BoolDType"},
    "O": {None: "ObjectDType"},
    "V": {None: "VoidDType"},
    "U": {None: "StrDType"},
    "S": {None: "BytesDType"},
    "M": {None: "DateTime64DType"},
    "m": {None: "TimeDelta64DType"},
}


def numpy_dtype_classes() -> list[str]:
    """Every `numpy.dtypes.X` class name that numpy_dtype_class can give."""
    return [f"numpy.dtypes.{name}" for sizes in _NUMPY_DTYPE_CLASSES.values()
            for name in sizes.values()]


def numpy_dtype_class(code: str) -> str | None:
    """`numpy.dtypes.X` that numpy.dtype(code) objects are instances of, or None if unknown."""
    match = re.fullmatch(r"[<>|=]?([a-zA-Z])(\d*)", code)
    if match is None:
        return None
    sizes = _NUMPY_DTYPE_CLASSES.get(match.group(1), {})
    name = sizes.get(int(match.group(2))) if match.group(2) else None
    name = name or sizes.get(None)
    return f"numpy.dtypes.{name}" if name else None
