"""The one dtype registry: every fact about an element type, written once.

One `DType` record per dtype (torch's spelling is the canonical name everywhere). The
safetensors code table, the legacy storage-class table of `torch.save`, the bit layouts of
`checkpoint.bitflip` and the NumPy view types of the diff all derive from `REGISTRY`; adding a dtype
is adding one record here. No numpy or torch import, so the CLI starts fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DType:
    """What one element type is, in torch, safetensors, NumPy and bits."""

    name: str
    """torch's name ('float32'); safetensors-only types get a name in torch's style."""
    bits: int
    """Bits per element as the file counts them (torch's packed float4 holds two: 8)."""
    safetensors: str | None = None
    """The safetensors dtype code, None when a converted file cannot hold the type."""
    numpy: str | None = None
    """NumPy type that reads one element's little-endian bytes as its value (None: no NumPy
    type; bfloat16 and float8 are decoded through torch)."""
    fields: tuple[int, int, int] | None = None
    """(sign, exponent, mantissa) bits of a float (for complex: of each half)."""
    storage: str | None = None
    """Legacy `torch.save` storage class without the module ('FloatStorage')."""
    in_torch: bool = True
    kind: str = "float"
    """float, complex, int, uint, bool, quantized or packed."""
    int_repr: str | None = None
    """Quantized types: the integer type of their representation."""

    @property
    def itemsize(self) -> int:
        """Bytes per element (packed sub-byte types round up to one byte)."""
        return max(1, self.bits // 8)


def _float(name: str, bits: int, st: str | None, exp: int, man: int, numpy: str | None = None,
           storage: str | None = None, sign: int = 1) -> DType:
    return DType(name, bits, st, numpy, (sign, exp, man), storage)


REGISTRY: tuple[DType, ...] = (
    _float("float64", 64, "F64", 11, 52, "<f8", "DoubleStorage"),
    _float("float32", 32, "F32", 8, 23, "<f4", "FloatStorage"),
    _float("float16", 16, "F16", 5, 10, "<f2", "HalfStorage"),
    _float("bfloat16", 16, "BF16", 8, 7, None, "BFloat16Storage"),
    _float("float8_e4m3fn", 8, "F8_E4M3", 4, 3),
    _float("float8_e4m3fnuz", 8, "F8_E4M3FNUZ", 4, 3),
    _float("float8_e5m2", 8, "F8_E5M2", 5, 2),
    _float("float8_e5m2fnuz", 8, "F8_E5M2FNUZ", 5, 2),
    _float("float8_e8m0fnu", 8, "F8_E8M0", 8, 0, sign=0),
    # torch packs two e2m1 values per element; safetensors' F4 counts single values, so the
    # shapes differ and a conversion would need a reshape: not converted.
    DType("float4_e2m1fn_x2", 8, None, None, (1, 2, 1), None, kind="packed"),
    DType("float4_e2m1fn", 4, "F4", None, (1, 2, 1), None, in_torch=False),
    DType("float6_e2m3fn", 6, "F6_E2M3", None, (1, 2, 3), None, in_torch=False),
    DType("float6_e3m2fn", 6, "F6_E3M2", None, (1, 3, 2), None, in_torch=False),
    DType("complex128", 128, None, "<c16", (1, 11, 52), "ComplexDoubleStorage", kind="complex"),
    DType("complex64", 64, "C64", "<c8", (1, 8, 23), "ComplexFloatStorage", kind="complex"),
    DType("complex32", 32, None, None, (1, 5, 10), None, kind="complex"),
    DType("int64", 64, "I64", "<i8", None, "LongStorage", kind="int"),
    DType("int32", 32, "I32", "<i4", None, "IntStorage", kind="int"),
    DType("int16", 16, "I16", "<i2", None, "ShortStorage", kind="int"),
    DType("int8", 8, "I8", "<i1", None, "CharStorage", kind="int"),
    DType("uint64", 64, "U64", "<u8", None, None, kind="uint"),
    DType("uint32", 32, "U32", "<u4", None, None, kind="uint"),
    DType("uint16", 16, "U16", "<u2", None, None, kind="uint"),
    DType("uint8", 8, "U8", "<u1", None, "ByteStorage", kind="uint"),
    DType("bool", 8, "BOOL", "?", None, "BoolStorage", kind="bool"),
    DType("qint8", 8, None, None, None, "QInt8Storage", kind="quantized", int_repr="int8"),
    DType("quint8", 8, None, None, None, "QUInt8Storage", kind="quantized", int_repr="uint8"),
    DType("qint32", 32, None, None, None, "QInt32Storage", kind="quantized", int_repr="int32"),
    DType("quint4x2", 8, None, None, None, "QUInt4x2Storage", kind="quantized",
          int_repr="uint8"),
    DType("quint2x4", 8, None, None, None, "QUInt2x4Storage", kind="quantized",
          int_repr="uint8"),
)

BY_NAME = {d.name: d for d in REGISTRY}
BY_SAFETENSORS = {d.safetensors: d for d in REGISTRY if d.safetensors}
SAFETENSORS_NAMES = {code: d.name for code, d in BY_SAFETENSORS.items() if d.in_torch}
"""safetensors code -> torch name (codes torch has no dtype for, such as F4, keep the code)."""
STORAGE_CLASSES = {d.storage: d for d in REGISTRY if d.storage}
"""Legacy storage class name ('FloatStorage') -> its dtype."""


def canonical_dtype(dtype: Any) -> str:
    """Torch-style name of a dtype given as torch.dtype, 'torch.x', 'x' or a safetensors code."""
    name = str(dtype).removeprefix("torch.")
    return SAFETENSORS_NAMES.get(name, name)


def lookup(dtype: Any) -> DType | None:
    """The registry record of a dtype in any spelling canonical_dtype accepts."""
    return BY_NAME.get(canonical_dtype(dtype))
