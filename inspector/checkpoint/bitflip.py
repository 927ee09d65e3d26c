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

from inspector.core.dtypes import BY_NAME, REGISTRY, canonical_dtype

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
    """One layout per byte-sized dtype of the registry (sub-byte safetensors types have none)."""
    layouts = {}
    for d in REGISTRY:
        if not d.in_torch:
            continue
        if d.kind == "float":
            sign, exp, man = d.fields
            layouts[d.name] = _layout(d.name, (_fields(exp, man, signed=bool(sign)), None))
        elif d.kind == "packed":
            # one torch element packs two values; name the nibble rather than guess an order
            half = _fields(*d.fields[1:])
            layouts[d.name] = _layout(d.name, (half, "low nibble"), (half, "high nibble"))
        elif d.kind == "complex":
            half = _fields(*d.fields[1:])
            layouts[d.name] = _layout(d.name, (half, "real"), (half, "imag"))
        elif d.kind in ("int", "uint"):
            layouts[d.name] = _layout(d.name, (_integer(d.bits, d.kind == "int"), None))
        elif d.kind == "bool":
            layouts[d.name] = _layout(d.name, (["value"] + ["padding"] * 7, None))
    # quantized tensors are compared on their integer representation
    for d in REGISTRY:
        if d.kind == "quantized":
            layouts[d.name] = (layouts[d.int_repr] if d.bits == BY_NAME[d.int_repr].bits
                               else _layout(d.name, (["value"] * d.bits, None)))
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
    before: np.ndarray | None = None
    """The chunk's elements in A as rows of raw bytes (a view, no copy)."""
    after: np.ndarray | None = None
    """The same elements in B."""

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
    changed, bits = (_wide_bits if n in (1, 2, 4, 8) else _row_bits)(a8, b8, n)
    return ChunkDiff(changed=changed, bits=bits, before=a8.reshape(-1, n),
                     after=b8.reshape(-1, n))


def _wide_bits(a8: np.ndarray, b8: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Changed elements and their one differing bit (-1: several), by one XOR of whole
    elements: a single-bit difference is a power of two, whose exponent (exact in float64)
    is the bit's number in the little-endian element."""
    x = a8.view(f"<u{n}") ^ b8.view(f"<u{n}")
    changed = np.flatnonzero(x)
    x = x[changed]
    bits = np.full(changed.size, -1, dtype=np.int64)
    one = np.bitwise_count(x) == 1
    bits[one] = np.frexp(x[one].astype(np.float64))[1] - 1
    return changed.astype(np.int64), bits


def _row_bits(a8: np.ndarray, b8: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The same for elements of other widths (complex128), byte by byte."""
    rows_a, rows_b = a8.reshape(-1, n), b8.reshape(-1, n)
    changed = np.flatnonzero((rows_a != rows_b).any(axis=1))
    x = rows_a[changed] ^ rows_b[changed]
    bits = np.full(changed.size, -1, dtype=np.int64)
    one = np.bitwise_count(x).sum(axis=1, dtype=np.int64) == 1
    rows = x[one]
    byte = np.argmax(rows != 0, axis=1)
    bits[one] = byte * 8 + _LOG2[rows[np.arange(len(rows)), byte]]
    return changed.astype(np.int64), bits


@dataclass
class BitFlip:
    """One element that differs in exactly one bit."""

    index: int
    bit: int
    kind: str
    part: str | None = None
    before: int | None = None
    """The element's bits in A, as an unsigned integer of its little-endian bytes."""
    after: int | None = None
    dtype: str | None = None

    def to_json(self, shape: tuple[int, ...]) -> dict[str, Any]:
        """The `bitflips` record of the diff contract (values as text: JSON has no NaN), with
        the element's position in a tensor of `shape`."""
        record: dict[str, Any] = {"index": self.index, "bit": self.bit, "kind": self.kind}
        if self.part is not None:
            record["part"] = self.part
        if self.before is not None and self.after is not None and self.dtype is not None:
            digits = 2 * BY_NAME[self.dtype].itemsize if self.dtype in BY_NAME else 0
            record["before_bits"] = f"{self.before:0{digits}x}"
            record["after_bits"] = f"{self.after:0{digits}x}"
            record["before_value"] = decode_value(self.before, self.dtype)
            record["after_value"] = decode_value(self.after, self.dtype)
        record["position"] = [int(i) for i in np.unravel_index(self.index, shape)]
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
        indices, bits = chunk.changed[one], chunk.bits[one]
        self.single_bit += int(indices.size)
        # counted per bit in bulk (a fine-tune's diff flips millions), each label entered in
        # the order its first flip comes, as the summary's ties are
        found, first, counts = np.unique(bits, return_index=True, return_counts=True)
        for position in np.argsort(first, kind="stable").tolist():
            kind, part = self.layout.describe(int(found[position]))
            self.by_kind[BitFlip(0, 0, kind, part).label] += int(counts[position])
        room = max(self.limit - len(self.flips), 0)
        for index, bit in zip(indices[:room].tolist(), bits[:room].tolist(), strict=True):
            kind, part = self.layout.describe(bit)
            flip = BitFlip(index=start + index, bit=bit, kind=kind, part=part)
            if chunk.before is not None and chunk.after is not None:
                flip.before = int.from_bytes(chunk.before[index].tobytes(), "little")
                flip.after = int.from_bytes(chunk.after[index].tobytes(), "little")
                flip.dtype = self.layout.dtype
            self.flips.append(flip)

    def summary(self, key: str, nonfinite: int = 0) -> str:
        """One sentence a person reads, the worst change first: values that are or became NaN
        or Inf (`nonfinite` of the changed elements), then single-bit flips, then drift, e.g.
        '3 single-bit flips in `w`, all in exponent bits'."""
        if not self.changed:
            return f"`{key}` is bit-identical"
        parts = []
        # where every change is a single-bit flip, the flips are the news and NaN their effect
        flips_only = not self.multi_bit
        if nonfinite and not flips_only:
            noun = "element is" if nonfinite == 1 else "elements are"
            parts.append(f"{nonfinite} changed {noun} NaN or Inf on one side in `{key}` (damaged "
                         "data or diverged training)")
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
        if nonfinite and flips_only:
            parts[-1] += f" ({nonfinite} of them NaN or Inf on one side)"
        drift = self.multi_bit - min(nonfinite, self.multi_bit)
        if drift:
            noun = "element differs" if drift == 1 else "elements differ"
            where = "" if self.single_bit or nonfinite else f" in `{key}`"
            finite = " finite" if nonfinite else ""
            parts.append(f"{drift}{finite} {noun} in several bits{where} (drift, not a flip)")
        return "; ".join(parts)


def _bits(label: str, n: int) -> str:
    if n > 1:
        return f"{label} bits"
    return f"{'an' if label[0] in 'aeiou' else 'a'} {label} bit"


def decode_value(raw: int, dtype: str) -> str | None:
    """An element's value from its bits, as text ('nan', 'inf', '-1.5e+38'); None if unknown.

    Floats with a NumPy type are read by NumPy; bfloat16 is the top half of a float32. Other
    types (float8, quantized, packed) are shown by their bits alone.
    """
    record = BY_NAME.get(dtype)
    if record is None:
        return None
    if record.numpy is not None:
        value = np.frombuffer(raw.to_bytes(record.itemsize, "little"), dtype=record.numpy)[0]
    elif dtype == "bfloat16":
        value = np.frombuffer((raw << 16).to_bytes(4, "little"), dtype="<f4")[0]
    else:
        return None
    if record.kind == "bool":
        return str(bool(value))
    if record.kind in ("int", "uint"):
        return str(int(value))
    if not np.isfinite(value):
        return str(value).lower()
    # enough digits to tell any two values apart: 9 for float32 and narrower, 17 for float64
    half = record.itemsize // (2 if record.kind == "complex" else 1)
    return f"{value:.{17 if half >= 8 else 9}g}"
