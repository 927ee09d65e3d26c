"""Bit-flip forensics: which bit of which element changed, and what that bit is for.

A single differing bit in an element is the signature of memory or storage corruption;
training or quantisation drift changes many bits in many elements. Everything here works on
raw little-endian bytes (numpy views, no torch), one chunk at a time, so a caller can stream
tensors of any size through it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from inspector.core.dtypes import canonical_dtype

MAX_REPORTED_FLIPS = 1000
"""Flips listed individually per tensor; counts beyond this stay exact."""


@dataclass(frozen=True)
class BitLayout:
    """What each bit of one element is for; bit 0 is the least significant."""

    dtype: str
    itemsize: int
    kinds: tuple[str, ...]
    parts: tuple[str | None, ...]

    def describe(self, bit: int) -> tuple[str, str | None]:
        """(kind, part) of a bit: kind is sign/exponent/mantissa/value/padding."""
        return self.kinds[bit], self.parts[bit]


def _fields(exponent: int, mantissa: int, signed: bool = True) -> list[str]:
    """Kinds of an IEEE-style float's bits from least to most significant."""
    return ["mantissa"] * mantissa + ["exponent"] * exponent + (["sign"] if signed else [])


def _integer(bits: int, signed: bool) -> list[str]:
    return ["value"] * (bits - 1) + (["sign"] if signed else ["value"])


def _layout(dtype: str, *pieces: tuple[list[str], str | None]) -> BitLayout:
    kinds: list[str] = []
    parts: list[str | None] = []
    for piece_kinds, part in pieces:
        kinds += piece_kinds
        parts += [part] * len(piece_kinds)
    return BitLayout(dtype, len(kinds) // 8, tuple(kinds), tuple(parts))


def _build_layouts() -> dict[str, BitLayout]:
    floats = {
        "float64": (11, 52),
        "float32": (8, 23),
        "float16": (5, 10),
        "bfloat16": (8, 7),
        "float8_e4m3fn": (4, 3),
        "float8_e4m3fnuz": (4, 3),
        "float8_e5m2": (5, 2),
        "float8_e5m2fnuz": (5, 2),
    }
    layouts = {name: _layout(name, (_fields(e, m), None)) for name, (e, m) in floats.items()}
    layouts["float8_e8m0fnu"] = _layout("float8_e8m0fnu", (_fields(8, 0, signed=False), None))
    # one torch element packs two e2m1 values; name the nibble rather than guess an order
    layouts["float4_e2m1fn_x2"] = _layout(
        "float4_e2m1fn_x2", (_fields(2, 1), "low nibble"), (_fields(2, 1), "high nibble")
    )
    for name, half in (("complex128", (11, 52)), ("complex64", (8, 23)), ("complex32", (5, 10))):
        layouts[name] = _layout(name, (_fields(*half), "real"), (_fields(*half), "imag"))
    for bits in (8, 16, 32, 64):
        layouts[f"int{bits}"] = _layout(f"int{bits}", (_integer(bits, True), None))
        layouts[f"uint{bits}"] = _layout(f"uint{bits}", (_integer(bits, False), None))
    layouts["bool"] = _layout("bool", (["value"] + ["padding"] * 7, None))
    # quantized tensors are compared on their integer representation
    layouts["qint8"] = layouts["int8"]
    layouts["quint8"] = layouts["uint8"]
    layouts["qint32"] = layouts["int32"]
    layouts["quint4x2"] = _layout("quint4x2", (["value"] * 8, None))
    layouts["quint2x4"] = _layout("quint2x4", (["value"] * 8, None))
    return layouts


LAYOUTS = _build_layouts()


def layout_for(dtype: Any) -> BitLayout:
    """The bit layout of a dtype; ValueError for one this module does not know."""
    name = canonical_dtype(dtype)
    try:
        return LAYOUTS[name]
    except KeyError:
        raise ValueError(f"no bit layout known for dtype {name!r}") from None


_LOG2 = np.full(256, -1, dtype=np.int64)
_LOG2[[1 << k for k in range(8)]] = np.arange(8)


@dataclass
class ChunkDiff:
    """Differences between two equal-length chunks of raw elements."""

    changed: np.ndarray
    """Element indices (within the chunk) whose bytes differ."""
    bits: np.ndarray
    """For each changed element: the one differing bit, or -1 when several bits differ."""

    @property
    def single(self) -> np.ndarray:
        """Mask over `changed`: elements that differ in exactly one bit."""
        return self.bits >= 0


def compare_raw(a: Any, b: Any, layout: BitLayout) -> ChunkDiff:
    """Compare two buffers of raw elements bit by bit (vectorised; no Python loop per element)."""
    a8 = np.frombuffer(a, dtype=np.uint8)
    b8 = np.frombuffer(b, dtype=np.uint8)
    n = layout.itemsize
    if a8.size != b8.size or a8.size % n:
        raise ValueError(
            f"chunks of {a8.size} and {b8.size} bytes are not equal whole {layout.dtype} elements"
        )
    if n in (1, 2, 4, 8):
        wide = np.dtype(f"<u{n}")
        changed = np.flatnonzero(a8.view(wide) != b8.view(wide))
    else:
        changed = np.flatnonzero((a8.reshape(-1, n) != b8.reshape(-1, n)).any(axis=1))
    x = a8.reshape(-1, n)[changed] ^ b8.reshape(-1, n)[changed]
    counts = np.bitwise_count(x).sum(axis=1, dtype=np.int64)
    bits = np.full(changed.size, -1, dtype=np.int64)
    one = np.flatnonzero(counts == 1)
    if one.size:
        rows = x[one]
        byte = np.argmax(rows != 0, axis=1)
        value = rows[np.arange(one.size), byte]
        bits[one] = byte * 8 + _LOG2[value]
    return ChunkDiff(changed=changed.astype(np.int64), bits=bits)


@dataclass
class BitFlip:
    """One element that differs in exactly one bit."""

    index: int
    bit: int
    kind: str
    part: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The `bitflips` record of the diff contract."""
        record: dict[str, Any] = {"index": self.index, "bit": self.bit, "kind": self.kind}
        if self.part is not None:
            record["part"] = self.part
        return record

    @property
    def label(self) -> str:
        """Kind with its part, e.g. 'exponent' or 'imag exponent'."""
        return f"{self.part} {self.kind}" if self.part else self.kind


@dataclass
class FlipTally:
    """Accumulates chunk comparisons of one tensor into counts and a bounded list of flips."""

    layout: BitLayout
    changed: int = 0
    single_bit: int = 0
    by_kind: Counter[str] = field(default_factory=Counter)
    flips: list[BitFlip] = field(default_factory=list)
    limit: int = MAX_REPORTED_FLIPS

    @property
    def multi_bit(self) -> int:
        """Changed elements that differ in more than one bit."""
        return self.changed - self.single_bit

    def add(self, chunk: ChunkDiff, start: int) -> None:
        """Add one chunk's differences; `start` is the chunk's first element index."""
        self.changed += int(chunk.changed.size)
        one = chunk.single
        self.single_bit += int(one.sum())
        for index, bit in zip(chunk.changed[one].tolist(), chunk.bits[one].tolist(), strict=True):
            kind, part = self.layout.describe(bit)
            flip = BitFlip(index=start + index, bit=bit, kind=kind, part=part)
            self.by_kind[flip.label] += 1
            if len(self.flips) < self.limit:
                self.flips.append(flip)

    def summary(self, key: str) -> str:
        """One sentence a person reads, e.g. '3 single-bit flips in `w`, all in exponent bits'."""
        if not self.changed:
            return f"`{key}` is bit-identical"
        parts = []
        if self.single_bit:
            noun = "flip" if self.single_bit == 1 else "flips"
            head = f"{self.single_bit} single-bit {noun} in `{key}`"
            if len(self.by_kind) == 1:
                (label,) = self.by_kind
                where = (
                    f"in {_bits(label, 1)}" if self.single_bit == 1 else f"all in {_bits(label, 2)}"
                )
                parts.append(f"{head}, {where}")
            else:
                detail = ", ".join(
                    f"{n} in {_bits(label, n)}" for label, n in self.by_kind.most_common()
                )
                parts.append(f"{head}: {detail}")
        if self.multi_bit:
            noun = "element differs" if self.multi_bit == 1 else "elements differ"
            where = "" if self.single_bit else f" in `{key}`"
            parts.append(f"{self.multi_bit} {noun} in several bits{where} (drift, not a flip)")
        return "; ".join(parts)


def _bits(label: str, n: int) -> str:
    if n > 1:
        return f"{label} bits"
    return f"{'an' if label[0] in 'aeiou' else 'a'} {label} bit"
