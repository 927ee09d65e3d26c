"""A tensor's finite non-zero values by binary order, floor(log2|x|), from raw bytes.

Health judges a flipped exponent bit from these orders (`checkpoint.health`), so the user's
process reads them itself rather than take the worker's `exponents`. Each value is placed as
the worker places it (`tensors.stats`): read as a float32 (bfloat16, float16 and float8_e5m2
widen to it exactly; float64 rounds to it, a value beyond its range placed by its own exponent,
one below it dropped), its exponent field counted, a float32 subnormal as 2**-127. Zeros, NaN
and Inf are not counted. Every float8 type widens to float32 exactly (a table of its 256
values); a complex tensor is read, as the worker judges it, as its magnitudes (`ROUNDED`).

Two readings. `Tops`, beside the digest in one pass: each chunk's top order and how many of its
values lie within `gap` orders of it, which proves most tensors free of outliers for two cheap
reductions a chunk. `Orders`, the exact counts the worker writes, is read again only for a
tensor `Tops` cannot clear (a full count costs as much as the SHA-256).
"""

from __future__ import annotations

import math
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

_HIGH = 1 if sys.byteorder == "little" else 0
_WIDE = 2.0**128
"""Where float32's range ends: a float64 value at or above it is placed apart."""
_LOWEST = -126
"""Below this order a chunk's threshold would fall among float32 subnormals (which the worker
places at 2**-127 whatever their value): such a tensor is counted exactly."""


def _float32(chunk: memoryview) -> np.ndarray:
    return np.frombuffer(chunk, dtype="<f4")


def _bfloat16(chunk: memoryview) -> np.ndarray:
    return (np.frombuffer(chunk, dtype="<u2").astype("<u4") << 16).view("<f4")


def _float16(chunk: memoryview) -> np.ndarray:
    return np.frombuffer(chunk, dtype="<f2").astype(np.float32)


def _float8_e5m2(chunk: memoryview) -> np.ndarray:
    # the high byte of a float16: the same sign, exponent and two top mantissa bits
    half = (np.frombuffer(chunk, dtype=np.uint8).astype("<u2") << 8).view("<f2")
    return half.astype(np.float32)


def _float64(chunk: memoryview) -> np.ndarray:
    return np.frombuffer(chunk, dtype="<f8")


def float8_table(exponent: int, mantissa: int, bias: int, nan: Callable[[int], bool],
                 signed: bool = True) -> np.ndarray:
    """The float32 value of each of an 8-bit float's 256 patterns (none has an Inf; an
    exponent field of 0 is subnormal where the format has a sign, as in every float8 type but
    e8m0, whose 0 is 2**-127)."""
    values = np.empty(256, dtype=np.float32)
    for bits in range(256):
        sign = -1.0 if signed and bits >> 7 else 1.0
        field, fraction = (bits >> mantissa) & ((1 << exponent) - 1), bits & ((1 << mantissa) - 1)
        if nan(bits):
            values[bits] = np.nan
        elif field == 0 and signed:
            values[bits] = sign * math.ldexp(fraction, 1 - bias - mantissa)
        else:
            values[bits] = sign * math.ldexp((1 << mantissa) + fraction, field - bias - mantissa)
    return values


def _tabled(table: np.ndarray) -> Callable[[memoryview], np.ndarray]:
    def values(chunk: memoryview) -> np.ndarray:
        return table[np.frombuffer(chunk, dtype=np.uint8)]

    return values


_FNUZ_NAN = 0x80  # the fnuz types' one NaN, where negative zero would be; no Inf
FLOAT8_TABLES = {
    "float8_e4m3fn": float8_table(4, 3, 7, lambda b: b & 0x7F == 0x7F),
    "float8_e4m3fnuz": float8_table(4, 3, 8, lambda b: b == _FNUZ_NAN),
    "float8_e5m2fnuz": float8_table(5, 2, 16, lambda b: b == _FNUZ_NAN),
    "float8_e8m0fnu": float8_table(8, 0, 127, lambda b: b == 0xFF, signed=False),
}
"""The float8 types NumPy has no cheaper reading of (e5m2 is a float16's high byte)."""


def _magnitudes(half: str) -> Callable[[memoryview], np.ndarray]:
    """A complex chunk's magnitudes as the worker takes them (`abs` of complex64, or of
    complex128): hypot in float64, rounded to float32 for the narrower halves."""
    def values(chunk: memoryview) -> np.ndarray:
        parts = np.frombuffer(chunk, dtype=half).reshape(-1, 2).astype(np.float64)
        magnitude = np.hypot(parts[:, 0], parts[:, 1])
        if half == "<f8":
            return magnitude
        with np.errstate(over="ignore"):  # beyond float32's range: Inf, as the worker's
            return magnitude.astype(np.float32)

    return values


VALUES: dict[str, Callable[[memoryview], np.ndarray]] = {
    "float32": _float32, "bfloat16": _bfloat16, "float16": _float16,
    "float8_e5m2": _float8_e5m2, "float64": _float64,
    **{name: _tabled(table) for name, table in FLOAT8_TABLES.items()},
    "complex32": _magnitudes("<f2"), "complex64": _magnitudes("<f4"),
    "complex128": _magnitudes("<f8"),
}
"""dtype name -> a chunk's values as float32 (float64 kept; a complex one's magnitudes); a
dtype not listed is not read."""

ROUNDED = frozenset({"complex32", "complex64", "complex128"})
"""Dtypes whose values here are computed, not read: a complex value's magnitude, which the
worker's hypot (torch's vectorised one) may round one unit in the last place apart from this
one (measured: for results below float32's normal range, or in about 0.5% of float64 ones)."""


def order_of(value: float) -> int:
    """floor(log2|value|) as the counts place a non-zero finite value (via float32)."""
    value = abs(value)
    if value >= _WIDE:
        return math.frexp(value)[1] - 1
    try:
        bits = struct.unpack("<I", struct.pack("<f", value))[0]
    except OverflowError:  # rounds to float32's Inf, placed at 2**128
        return 128
    return ((bits >> 23) & 0xFF) - 127


@dataclass
class Tops:
    """Each chunk's top order and how many of its values lie within `gap` orders of it."""

    gap: int
    values: int = 0
    """Every value read, NaN, Inf and zeros included."""
    chunks: list[tuple[int, int]] = field(default_factory=list)
    exact_only: bool = False
    """A chunk whose threshold fell below float32's normal range: only a full count decides."""

    def add(self, values: np.ndarray) -> None:
        """Read one chunk's values."""
        self.values += values.size
        if not values.size:
            return
        hi, lo = float(values.max()), float(values.min())
        if not (math.isfinite(hi) and math.isfinite(lo)):
            values = values[np.isfinite(values)]
            if not values.size:
                return
            hi, lo = float(values.max()), float(values.min())
        largest = max(abs(hi), abs(lo))
        if largest == 0:
            return
        top = order_of(largest)
        if top - self.gap < _LOWEST:
            self.exact_only = True
            return
        edge = 2.0 ** (top - self.gap)
        self.chunks.append((top, int(np.count_nonzero(values >= edge))
                            + int(np.count_nonzero(values <= -edge))))

    @property
    def top(self) -> int | None:
        """The largest order of the tensor (None: no finite non-zero value)."""
        return max((t for t, _ in self.chunks), default=None)

    @property
    def near(self) -> int:
        """At least how many values lie within `gap` orders of the top: those of the chunks
        whose own top it is (another chunk's threshold was lower, so its count is not one)."""
        top = self.top
        return sum(n for t, n in self.chunks if t == top)


class Orders:
    """The exact counts by float32 exponent field, orders beyond float32's range apart."""

    def __init__(self) -> None:
        self.fields = np.zeros(256, dtype=np.int64)
        self.wide: dict[int, int] = {}

    def add(self, values: np.ndarray) -> None:
        """Count one chunk's values (float32, or float64)."""
        if values.dtype == np.float64:
            values = self._narrowed(values)
        high = values.view(np.uint16)[_HIGH::2]
        self.fields += np.bincount((high >> 7).astype(np.uint8), minlength=256)
        self.fields[0] -= np.count_nonzero(values == 0)

    def _narrowed(self, values: np.ndarray) -> np.ndarray:
        finite = values[np.isfinite(values)]
        big = np.abs(finite) >= _WIDE
        if big.any():
            for e in (np.frexp(finite[big])[1] - 1).tolist():
                self.wide[e] = self.wide.get(e, 0) + 1
            finite = finite[~big]
        with np.errstate(over="ignore"):
            narrow = finite.astype(np.float32)
        # a value just below 2**128 rounds to float32's Inf: the worker places it at 2**128
        if rounded := int(np.count_nonzero(np.isinf(narrow))):
            self.wide[128] = self.wide.get(128, 0) + rounded
        return narrow

    def pairs(self) -> list[list[int]]:
        """[[order, count], ...] in increasing order, non-zero counts only (the worker's form;
        NaN and Inf, field 255, left out)."""
        out = {e - 127: int(c) for e, c in enumerate(self.fields[:255].tolist()) if c}
        for e, c in self.wide.items():
            out[e] = out.get(e, 0) + c
        return [[e, out[e]] for e in sorted(out)]
