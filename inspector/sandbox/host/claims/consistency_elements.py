"""The elements a consistency reply names (a device copy's or a round trip's changed elements,
a repeat's first mismatch), checked here: each index inside its tensor, its position the index
unravelled, its bits and their kinds the ones `expected` and `actual` differ in, and where the
element is the file's, `expected` the file's own value read from its bytes."""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from inspector.core.dtypes import BY_NAME
from inspector.core.termtext import escape
from inspector.rawtensors.readers import RawTensor

COMPUTED = ("float16", "bfloat16", "float32", "float64")
"""Dtypes the probe multiplies in as they are; any other floating weight in float32 (as
`weights_probe._COMPUTE`, which imports torch)."""
PROBE_COLUMNS = 8
"""Columns of the probe's input, so of each output (`weights_probe.PROBE_COLUMNS`)."""
_PACKED = {"float16": "<e", "float32": "<f", "float64": "<d"}
_HALVES = {"complex32": "float16", "complex64": "float32", "complex128": "float64"}
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
"""The worker's words for the floats JSON cannot hold (`bitcheck.json_safe`)."""


@dataclass(frozen=True)
class Grid:
    """What a reply's element records are of: the dtype their bits and values are in, the
    shape their positions unravel in, and each element's bytes before it changed (`before`,
    read from the file), or None where only the record's own `expected` gives them."""

    dtype: str
    shape: tuple[int, ...]
    before: dict[int, bytes] | None = None


def compute_dtype(dtype: str) -> str:
    """The dtype the probe multiplies a weight of `dtype` in."""
    return dtype if dtype in COMPUTED else "float32"


def file_elements(t: RawTensor, indices: Iterable[int]) -> dict[int, bytes]:
    """The stored bytes of the tensor's elements at `indices` (those inside it), read from the
    file in one pass."""
    wanted, found, seen = sorted(set(indices)), {}, 0
    if not wanted or t.dtype not in BY_NAME:  # GGUF blocks: no elements of their own here
        return found
    size = BY_NAME[t.dtype].itemsize
    for chunk in t.read():
        count = len(chunk) // size
        for index in wanted:
            if seen <= index < seen + count:
                found[index] = bytes(chunk[(index - seen) * size:(index - seen + 1) * size])
        seen += count
        if seen > wanted[-1]:
            break
    return found


def as_computed(t: RawTensor, stored: dict[int, bytes]) -> dict[int, bytes]:
    """The elements' bytes once the probe converts them to its compute dtype (float32 for a
    dtype it does not multiply in; a converted NaN's bits are torch's choice, so left out)."""
    if t.dtype in COMPUTED:
        return stored
    values = {i: decode(t.dtype, raw) for i, raw in stored.items()}
    return {i: struct.pack("<f", v) for i, v in values.items()
            if isinstance(v, float) and not math.isnan(v)}


def decode(dtype: str, raw: bytes) -> float | int | bool | str | None:
    """One element's value as the worker's `item()` states it (a complex one as its text),
    None for a dtype not decoded here."""
    from inspector.rawtensors.orders import VALUES  # NumPy's import, on the checking thread

    kind = BY_NAME[dtype].kind if dtype in BY_NAME else None
    if kind == "float" and dtype in VALUES:
        return float(VALUES[dtype](memoryview(raw))[0].item())
    if kind in ("int", "uint"):
        return int.from_bytes(raw, "little", signed=kind == "int")
    if kind == "bool":
        return raw != b"\x00"
    if dtype in _HALVES:
        real, imag = VALUES[_HALVES[dtype]](memoryview(raw)).tolist()
        return str(complex(real, imag))
    return None


def _encode(dtype: str, value: object) -> bytes | None:
    """A computed float's bytes from a record's own value; None for a value that dtype does
    not hold exactly (or no number at all)."""
    value = _NONFINITE.get(value, value) if isinstance(value, str) else value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        raw = (struct.pack("<f", value)[2:] if dtype == "bfloat16"
               else struct.pack(_PACKED[dtype], value))
    except (KeyError, OverflowError, struct.error):
        return None
    return raw if same(decode(dtype, raw), value) else None


def _is_nan(value: object) -> bool:
    return value == "nan" or (isinstance(value, float) and math.isnan(value))


def same(here: object, told: object) -> bool:
    """Whether a value read here is the one a record states (NaN and Inf as the worker's
    words for them, a bool as a bool, a number as a number)."""
    if isinstance(here, float):
        told = _NONFINITE.get(told, told) if isinstance(told, str) else told
        if isinstance(told, bool) or not isinstance(told, (int, float)):
            return False
        return math.isnan(told) if math.isnan(here) else told == here
    if isinstance(here, bool) or isinstance(told, bool):
        return here is told
    return type(here) is type(told) and here == told


def probeable(t: RawTensor) -> bool:
    """Whether the worker probes the tensor: floating point, 2+ dimensions, elements."""
    dtype = BY_NAME.get(t.dtype)
    return (dtype is not None and dtype.kind in ("float", "packed") and len(t.shape) >= 2
            and all(t.shape))


def reply_element_problems(located: dict[str, RawTensor], rows: list[dict],
                           resident: list[object], repeats: int) -> list[str]:
    """How the elements a probe's reply names disagree with the file's tensors: each device
    copy that differs (a probed weight's, listed once, its `expected` the file's value in the
    compute dtype), each round trip that changed bytes (its `expected` the file's stored
    value) and each row's first mismatch (an output element of that row in runs 2 to
    `repeats`)."""
    keys = [str(r.get("key")) if isinstance(r, dict) else "" for r in resident]
    problems = ["a tensor's device copy is listed twice"] if len(set(keys)) < len(keys) else []
    for key, record in zip(keys, resident, strict=True):
        t = located.get(key)
        if t is None or not probeable(t):
            problems.append(f"{escape(key)} is no probed weight of the file, reported as a "
                            "device copy that differs")
            continue
        stored = file_elements(t, _indices(record))
        grid = Grid(compute_dtype(t.dtype), t.shape, as_computed(t, stored))
        problems += mismatch_problems(f"the device copy of {escape(key)}", record, key, grid)
    for row in rows:
        t = located.get(str(row.get("key")))
        if t is not None:
            problems += _row_element_problems(t, row, repeats)
    return problems


def _row_element_problems(t: RawTensor, row: dict, repeats: int) -> list[str]:
    """A row's round-trip differences (of the stored dtype) and its first mismatch (of the
    probe's output, `PROBE_COLUMNS` columns a weight row)."""
    key, problems = escape(t.key), []
    record = row.get("roundtrip_mismatch")
    if record is not None:
        grid = Grid(t.dtype, t.shape, file_elements(t, _indices(record)))
        problems += mismatch_problems(f"{key}'s round trip", record, t.key, grid)
    first = row.get("first_mismatch")
    if first is None:
        return problems
    where = f"{key}'s first mismatch"
    if not (probeable(t) and isinstance(first, dict) and first.get("key") == t.key
            and _count(first.get("iteration")) and 2 <= first["iteration"] <= repeats):
        return [*problems, f"{where} is no output of {key} in runs 2 to {repeats}"]
    if "bits" not in first:  # a result of another shape: nothing of it is shown
        return problems
    grid = Grid(compute_dtype(t.dtype), (t.shape[0], PROBE_COLUMNS))
    return problems + element_problems(where, first, grid)


def _indices(record: object) -> list[int]:
    """The element indices a record of changed elements lists (those that are indices)."""
    elements = record.get("elements") if isinstance(record, dict) else None
    return [e["index"] for e in elements or () if isinstance(e, dict) and _count(e.get("index"))
            ] if isinstance(elements, list) else []


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def mismatch_problems(where: str, record: object, key: str, grid: Grid) -> list[str]:
    """A record of changed elements (`bitcheck.bit_differences`): of `key`, counting at least
    the elements it lists, listed once each in order, each as `element_problems` checks it."""
    if not isinstance(record, dict) or record.get("key") != key:
        return [f"{where} is not a record of {escape(key)}"]
    elements, changed = record.get("elements"), record.get("changed_elements")
    if not (isinstance(elements, list) and elements and _count(changed)
            and changed >= len(elements)):
        return [f"{where} lists {escape(str(elements))[:80]} of {escape(str(changed))} changed "
                "elements"]
    indices = [e.get("index") if isinstance(e, dict) else None for e in elements]
    if not all(_count(i) for i in indices) or indices != sorted(set(indices)):
        return [f"{where}'s elements are not listed once each, in order"]
    return [p for e in elements for p in element_problems(where, e, grid)][:1]


def unravel(index: int, shape: tuple[int, ...]) -> list[int]:
    """A flat row-major index's position in `shape` (a scalar's as one of shape (1,))."""
    position = []
    for n in reversed(shape or (1,)):
        index, rest = divmod(index, n)
        position.append(rest)
    return position[::-1]


def element_problems(where: str, e: object, grid: Grid) -> list[str]:
    """One changed element: its index inside the grid, its position the index unravelled,
    then its bits and values (`_bit_problems`)."""
    numel = math.prod(grid.shape)
    index = e.get("index") if isinstance(e, dict) else None
    name = f"{where} element {escape(str(index))}"
    if not (isinstance(e, dict) and _count(index) and index < numel):
        return [f"{name} lies outside its {numel} elements"]
    place = unravel(index, grid.shape)
    if e.get("position") != place:
        return [f"{name} is at {place}, reported at {escape(str(e.get('position')))}"]
    return _bit_problems(name, e, grid)


def _bit_problems(name: str, e: dict, grid: Grid) -> list[str]:
    """Its bits, each once, in order, of the grid's dtype, with their kinds; its `expected`
    the element's value before (the file's, where the grid read it), and its `actual` that
    value with those bits flipped. A NaN's bits are no value's, so a NaN `expected` not read
    from the file leaves the values unchecked, as does a dtype not decoded here."""
    from inspector.checkpoint.bitflip import LAYOUTS

    layout = LAYOUTS.get(grid.dtype)
    if layout is None:  # safetensors' own sub-byte floats: torch holds no element of them
        return []
    bits = e.get("bits")
    if not (isinstance(bits, list) and bits and all(_count(b) for b in bits)
            and bits == sorted(set(bits)) and bits[-1] < len(layout.kinds)):
        return [f"{name}'s bits {escape(str(bits))[:80]} are no bits of a {grid.dtype} element"]
    kinds = [layout.describe(b)[0] for b in bits]
    if e.get("kinds") != kinds:
        return [f"{name}'s bits {bits} are {kinds}, reported as {escape(str(e.get('kinds')))}"]
    if grid.before is None and _is_nan(e.get("expected")):
        return []
    before = (grid.before.get(e["index"]) if grid.before is not None
              else _encode(grid.dtype, e.get("expected")))
    if before is None and grid.before is None:
        return [f"{name}'s expected {escape(str(e.get('expected')))} is no {grid.dtype} value"]
    here = None if before is None else decode(grid.dtype, before)
    if here is None:
        return []
    if not same(here, e.get("expected")):
        return [f"{name} is {here!r}, reported as {escape(str(e.get('expected')))}"]
    flipped = (int.from_bytes(before, "little") ^ sum(1 << b for b in bits)).to_bytes(
        len(before), "little")
    there = decode(grid.dtype, flipped)
    if not same(there, e.get("actual")):
        return [f"{name} with bits {bits} flipped is {there!r}, reported as "
                f"{escape(str(e.get('actual')))}"]
    return []
