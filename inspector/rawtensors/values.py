"""What the trusted side computes from a tensor's raw bytes: its digest and NaN / Inf counts.

The digest is the one the worker reports (SHA-256 of the bytes, contiguous and row-major, as
`tensors.stats` defines it). NaN and Inf are counted from the bit patterns of each float
format, as the worker's statistics count them: a complex value is counted on its magnitude
(Inf when either half is infinite, else NaN when either half is NaN); integers and bool hold
none. A dtype whose values are not decoded here (`bits8` blocks, packed floats) has counts of
None. With the counts come the finite values' exact range, zeros and first NaN or Inf
(`Span`; a complex tensor's on its magnitudes, to within `orders.ROUNDED`), from which health
judges a wiped or constant weight, and the values' binary orders (`orders`), from which it
judges a flipped exponent bit. Hashing may run on a
second thread beside the counting (hashlib and NumPy release the GIL).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from inspector.core.dtypes import BY_NAME
from inspector.rawtensors.orders import VALUES, Orders, Tops
from inspector.rawtensors.readers import RawTensor

Flags = Callable[[memoryview], "tuple[np.ndarray, np.ndarray] | None"]
"""The NaN and Inf masks over a chunk's whole elements; None when every one is finite (the
usual case, found in one pass)."""
Counter = Callable[[memoryview], tuple[int, int]]
"""(NaN, Inf) among a chunk's whole elements."""


@dataclass(frozen=True)
class Measured:
    """A tensor's digest and, where its dtype is decoded here, its NaN and Inf counts."""

    digest: str
    nan: int | None
    inf: int | None
    tops: Tops | None = None
    """Its values' top binary order and how many lie near it (`orders.Tops`), where its
    dtype is read here and a gap was asked for."""
    orders: list[list[int]] | None = None
    """Its values counted by binary order (`exact_orders`), where the caller asked for them."""
    span: Span | None = None
    """Its exact range and zeros, where its values are real numbers read here."""


@dataclass
class Span:
    """A real tensor's finite values as the worker's statistics state them exactly: the least
    and greatest, how many are zero, and the flat index of the first NaN or Inf."""

    low: float | None = None
    high: float | None = None
    zeros: int = 0
    first_nonfinite: int | None = None
    seen: int = 0

    def add(self, values: np.ndarray, nonfinite: bool) -> None:
        """Fold the next chunk's values (`nonfinite`: it holds NaN or Inf)."""
        count = len(values)
        if nonfinite:
            finite = np.isfinite(values)
            if self.first_nonfinite is None:
                self.first_nonfinite = self.seen + int(np.argmin(finite))
            values = values[finite]
        self.seen += count
        self.zeros += int(np.count_nonzero(values == 0))
        if values.size:
            low, high = values.min().item(), values.max().item()
            self.low = low if self.low is None else min(self.low, low)
            self.high = high if self.high is None else max(self.high, high)


def _integers(numpy_type: str) -> Callable[[memoryview], np.ndarray]:
    def values(chunk: memoryview) -> np.ndarray:
        return np.frombuffer(chunk, dtype=numpy_type)

    return values


REALS: dict[str, Callable[[memoryview], np.ndarray]] = {
    **VALUES, "bool": _integers("|u1"),
    **{d.name: _integers(d.numpy) for d in BY_NAME.values()
       if d.kind in ("int", "uint") and d.numpy},
}
"""dtype name -> its values as real numbers in the worker's domain (floats as float32, kept
float64; integers as they are; complex values as their magnitudes), each exact but the
magnitudes (`orders.ROUNDED`); a dtype not listed is not read so."""


def _ieee(numpy_type: str) -> Flags:
    def flags(chunk: memoryview) -> tuple[np.ndarray, np.ndarray] | None:
        values = np.frombuffer(chunk, dtype=numpy_type)
        if np.isfinite(values).all():
            return None
        return np.isnan(values), np.isinf(values)

    return flags


def _complex(name: str) -> Flags:
    """On the magnitude, as the worker counts: Inf where a half is, or where it overflows
    float32 (two halves near its largest value)."""
    magnitudes = VALUES[name]

    def flags(chunk: memoryview) -> tuple[np.ndarray, np.ndarray] | None:
        values = magnitudes(chunk)
        if np.isfinite(values).all():
            return None
        return np.isnan(values), np.isinf(values)

    return flags


def _bits(word: str, exponent: int, mantissa: int) -> Flags:
    """IEEE-style formats NumPy has no type for (bfloat16, float8_e5m2): an all-ones exponent
    is Inf with a zero mantissa, NaN otherwise."""
    exp_mask, man_mask = ((1 << exponent) - 1) << mantissa, (1 << mantissa) - 1

    def flags(chunk: memoryview) -> tuple[np.ndarray, np.ndarray] | None:
        words = np.frombuffer(chunk, dtype=word)
        special = (words & exp_mask) == exp_mask
        if not special.any():
            return None
        inf = special & ((words & man_mask) == 0)
        return special & ~inf, inf

    return flags


def _nan_pattern(pattern: int, mask: int) -> Flags:
    """8-bit floats without Inf whose NaN is one pattern under `mask` (e4m3fn: S.1111.111;
    the fnuz formats: 0x80 only; e8m0: 0xFF)."""
    def flags(chunk: memoryview) -> tuple[np.ndarray, np.ndarray] | None:
        nan = (np.frombuffer(chunk, dtype=np.uint8) & mask) == pattern
        return (nan, np.zeros_like(nan)) if nan.any() else None

    return flags


def _none(chunk: memoryview) -> None:
    return None


FLAGS: dict[str, Flags] = {
    "float16": _ieee("<f2"), "float32": _ieee("<f4"), "float64": _ieee("<f8"),
    **{name: _complex(name) for name in ("complex32", "complex64", "complex128")},
    "bfloat16": _bits("<u2", 8, 7), "float8_e5m2": _bits("|u1", 5, 2),
    "float8_e4m3fn": _nan_pattern(0x7F, 0x7F), "float8_e4m3fnuz": _nan_pattern(0x80, 0xFF),
    "float8_e5m2fnuz": _nan_pattern(0x80, 0xFF), "float8_e8m0fnu": _nan_pattern(0xFF, 0xFF),
    **{d.name: _none for d in BY_NAME.values() if d.kind in ("int", "uint", "bool")},
}
"""dtype name -> its NaN / Inf masks; a dtype not listed is not decoded here."""


def _counted(flags: Flags) -> Counter:
    def count(chunk: memoryview) -> tuple[int, int]:
        found = flags(chunk)
        return (0, 0) if found is None else (int(found[0].sum()), int(found[1].sum()))

    return count


COUNTERS: dict[str, Counter] = {name: _counted(flags) for name, flags in FLAGS.items()}
"""dtype name -> its NaN / Inf counter; a dtype not listed is not decoded here."""


PIPED_BYTES = 1 << 20
"""A chunk this large is hashed on the pool; a smaller one inline (a hand-over costs more than
hashing a small tensor, and a file may hold 12,000 of them)."""


def measure(tensor: RawTensor, counts: bool = True,
            hashing: ThreadPoolExecutor | None = None, gap: int | None = None) -> Measured:
    """The tensor's digest and (with `counts`, where its dtype is decoded here) NaN / Inf
    counts, its exact range and zeros (`Span`) and (with a `gap`) its values' top orders, from
    one read of its bytes (the readers' chunks hold whole elements). With `hashing`, a large
    chunk is hashed on that pool while it is counted."""
    digest = hashlib.sha256()
    counter = COUNTERS.get(tensor.dtype) if counts else None
    reals = REALS.get(tensor.dtype) if counter is not None else None
    span = Span() if reals is not None else None
    tops = Tops(gap) if span is not None and gap is not None and tensor.dtype in VALUES else None
    nan = inf = 0
    for chunk in tensor.read():
        piped = hashing is not None and len(chunk) >= PIPED_BYTES
        hashed = hashing.submit(digest.update, chunk) if piped else None
        if hashed is None:
            digest.update(chunk)
        if counter is not None:
            n, i = counter(chunk)
            nan, inf = nan + n, inf + i
            if span is not None and reals is not None:
                decoded = reals(chunk)  # once, for the span and the orders (`VALUES` in `REALS`)
                span.add(decoded, bool(n or i))
                if tops is not None:
                    tops.add(decoded)
        if hashed is not None:
            hashed.result()  # before the reader gives the chunk's pages back
    if counter is None:
        return Measured(digest.hexdigest(), None, None)
    return Measured(digest.hexdigest(), nan, inf, tops, span=span)


def exact_orders(tensor: RawTensor) -> list[list[int]] | None:
    """The tensor's values counted by binary order, as the worker's `exponents` (a second
    read of its bytes); None where its dtype is not read here."""
    values = VALUES.get(tensor.dtype)
    if values is None:
        return None
    orders = Orders()
    for chunk in tensor.read():
        orders.add(values(chunk))
    return orders.pairs()
