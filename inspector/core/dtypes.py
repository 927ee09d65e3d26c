"""Dtype names across torch and safetensors; no numpy or torch import, so the CLI starts fast."""

from __future__ import annotations

from typing import Any

SAFETENSORS_NAMES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "F8_E8M0": "float8_e8m0fnu",
    "C64": "complex64",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U64": "uint64",
    "U32": "uint32",
    "U16": "uint16",
    "U8": "uint8",
    "BOOL": "bool",
}


def canonical_dtype(dtype: Any) -> str:
    """Torch-style name of a dtype given as torch.dtype, 'torch.x', 'x' or a safetensors code."""
    name = str(dtype).removeprefix("torch.")
    return SAFETENSORS_NAMES.get(name, name)
