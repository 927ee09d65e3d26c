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
    export_code: int | None = None
    """Its number in torch.export's serialised schema (`ScalarType`), where it has one."""
    gguf: str | None = None
    """Its GGUF type name, for the dense types GGUF stores unquantized."""
    close: tuple[float, float] | None = None
    """`torch.testing.assert_close`'s default (rtol, atol) for it; None: compared exactly."""

    @property
    def itemsize(self) -> int:
        """Bytes per element (packed sub-byte types round up to one byte)."""
        return max(1, self.bits // 8)


def _float(name: str, bits: int, st: str | None, exp: int, man: int, numpy: str | None = None,
           storage: str | None = None, sign: int = 1, **more: Any) -> DType:
    return DType(name, bits, st, numpy, (sign, exp, man), storage, **more)


REGISTRY: tuple[DType, ...] = (
    _float("float64", 64, "F64", 11, 52, "<f8", "DoubleStorage", export_code=8, gguf="F64",
           close=(1e-7, 1e-7)),
    _float("float32", 32, "F32", 8, 23, "<f4", "FloatStorage", export_code=7, gguf="F32",
           close=(1.3e-6, 1e-5)),
    _float("float16", 16, "F16", 5, 10, "<f2", "HalfStorage", export_code=6, gguf="F16",
           close=(1e-3, 1e-5)),
    _float("bfloat16", 16, "BF16", 8, 7, None, "BFloat16Storage", export_code=13, gguf="BF16",
           close=(1.6e-2, 1e-5)),
    _float("float8_e4m3fn", 8, "F8_E4M3", 4, 3, export_code=29),
    _float("float8_e4m3fnuz", 8, "F8_E4M3FNUZ", 4, 3, export_code=31),
    _float("float8_e5m2", 8, "F8_E5M2", 5, 2, export_code=30),
    _float("float8_e5m2fnuz", 8, "F8_E5M2FNUZ", 5, 2, export_code=32),
    _float("float8_e8m0fnu", 8, "F8_E8M0", 8, 0, sign=0, export_code=33),
    # torch packs two e2m1 values per element; safetensors' F4 counts single values, so the
    # shapes differ and a conversion would need a reshape: not converted.
    DType("float4_e2m1fn_x2", 8, None, None, (1, 2, 1), None, kind="packed"),
    DType("float4_e2m1fn", 4, "F4", None, (1, 2, 1), None, in_torch=False),
    DType("float6_e2m3fn", 6, "F6_E2M3", None, (1, 2, 3), None, in_torch=False),
    DType("float6_e3m2fn", 6, "F6_E3M2", None, (1, 3, 2), None, in_torch=False),
    DType("complex128", 128, None, "<c16", (1, 11, 52), "ComplexDoubleStorage", kind="complex",
          export_code=11, close=(1e-7, 1e-7)),
    DType("complex64", 64, "C64", "<c8", (1, 8, 23), "ComplexFloatStorage", kind="complex",
          export_code=10, close=(1.3e-6, 1e-5)),
    DType("complex32", 32, None, None, (1, 5, 10), None, kind="complex", export_code=9,
          close=(1e-3, 1e-5)),
    DType("int64", 64, "I64", "<i8", None, "LongStorage", kind="int", export_code=5, gguf="I64"),
    DType("int32", 32, "I32", "<i4", None, "IntStorage", kind="int", export_code=4, gguf="I32"),
    DType("int16", 16, "I16", "<i2", None, "ShortStorage", kind="int", export_code=3, gguf="I16"),
    DType("int8", 8, "I8", "<i1", None, "CharStorage", kind="int", export_code=2, gguf="I8"),
    DType("uint64", 64, "U64", "<u8", None, None, kind="uint", export_code=35),
    DType("uint32", 32, "U32", "<u4", None, None, kind="uint", export_code=34),
    DType("uint16", 16, "U16", "<u2", None, None, kind="uint", export_code=28),
    DType("uint8", 8, "U8", "<u1", None, "ByteStorage", kind="uint", export_code=1),
    DType("bool", 8, "BOOL", "?", None, "BoolStorage", kind="bool", export_code=12),
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
EXPORT_CODES = {d.export_code: d.name for d in REGISTRY if d.export_code is not None}
"""torch.export's `ScalarType` number -> the dtype's name."""
GGUF_DENSE = {d.gguf: d.name for d in REGISTRY if d.gguf}
"""GGUF's name of a dense (unquantized) type -> the dtype's name."""


def canonical_dtype(dtype: Any) -> str:
    """Torch-style name of a dtype given as torch.dtype, 'torch.x', 'x' or a safetensors code."""
    name = str(dtype).removeprefix("torch.")
    return SAFETENSORS_NAMES.get(name, name)


def lookup(dtype: Any) -> DType | None:
    """The registry record of a dtype in any spelling canonical_dtype accepts."""
    return BY_NAME.get(canonical_dtype(dtype))
