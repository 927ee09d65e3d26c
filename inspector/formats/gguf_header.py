"""The GGUF container (llama.cpp, ggml) as its own readers read it: magic, version, counts, the
key-value pairs, the tensor infos, the alignment and where each tensor's data lies.

Every read is checked against the bytes that are left, before any loop runs, so a hostile header
costs work in proportion to its size, never to the counts it declares; a header llama.cpp would
refuse (or that overflowed its parser's older releases) becomes a `Problem`, never an exception.
"""

from __future__ import annotations

import math
import struct
from array import array
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from inspector.core.vocabulary import Severity

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS: llama.cpp's tensor info holds four dimensions
MAX_NAME = 63  # GGML_MAX_NAME - 1: longer tensor names are refused by llama.cpp

# GGUF value types: code -> (name, struct format, size); STRING (8) and ARRAY (9) have no size
VALUE_TYPES: dict[int, tuple[str, str, int]] = {
    0: ("UINT8", "B", 1), 1: ("INT8", "b", 1), 2: ("UINT16", "H", 2), 3: ("INT16", "h", 2),
    4: ("UINT32", "I", 4), 5: ("INT32", "i", 4), 6: ("FLOAT32", "f", 4), 7: ("BOOL", "?", 1),
    8: ("STRING", "", 0), 9: ("ARRAY", "", 0), 10: ("UINT64", "Q", 8), 11: ("INT64", "q", 8),
    12: ("FLOAT64", "d", 8),
}
STRING, ARRAY = 8, 9
_ARRAY_CODES = {"B": "B", "b": "b", "H": "H", "h": "h", "I": "I", "i": "i", "f": "f",
                "Q": "Q", "q": "q", "d": "d"}

# ggml tensor types: code -> (name, elements per block, bytes per block), from ggml.h's table
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17),
    40: ("NVFP4", 64, 36), 41: ("Q1_0", 128, 18),
}
DENSE_TYPES = frozenset({"F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64"})

ADVISORIES = ("llama.cpp's GGUF parser overflowed its heap on such headers before the fixes "
              "of CVE-2024-21802, CVE-2024-21825, CVE-2024-21836, CVE-2024-23496 and "
              "CVE-2024-23605")


@dataclass(frozen=True)
class Problem:
    """One thing in the header that a GGUF reader refuses or that marks a crafted file."""

    severity: str
    code: str
    message: str


@dataclass(frozen=True)
class TensorInfo:
    """One tensor info record and where its data lies."""

    name: str
    dims: tuple[int, ...]
    """As stored: ne[0] (the fastest-moving) first, as `gguf.GGUFReader`'s `shape` is."""
    type_code: int
    offset: int
    """Relative to the start of the data section, as stored."""
    data_offset: int
    """Absolute, in the file."""

    @cached_property
    def type_name(self) -> str:
        """The ggml type's name ("Q4_K"), or "type N" for a code this table does not know."""
        known = GGML_TYPES.get(self.type_code)
        return known[0] if known else f"type {self.type_code}"

    @cached_property
    def shape(self) -> tuple[int, ...]:
        """Row-major, as torch and NumPy spell it (the stored dims reversed)."""
        return tuple(reversed(self.dims))

    @property
    def n_elements(self) -> int:
        """Number of elements."""
        return math.prod(self.dims)

    @cached_property
    def n_bytes(self) -> int | None:
        """Bytes of its data, or None for an unknown type."""
        known = GGML_TYPES.get(self.type_code)
        return None if known is None else self.n_elements * known[2] // known[1]


@dataclass
class GGUFFile:
    """What a GGUF file's header says, and what is wrong with it."""

    size: int
    version: int = 0
    big_endian: bool = False
    tensor_count: int = 0
    kv_count: int = 0
    kv: dict[str, Any] = field(default_factory=dict)
    """Key -> value: int, float, bool, str, or a list (numeric arrays as `array.array`)."""
    kv_types: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """Key -> (value type, item type...) as `gguf.ReaderField.types` lists them."""
    tensors: list[TensorInfo] = field(default_factory=list)
    alignment: int = DEFAULT_ALIGNMENT
    data_start: int = 0
    complete: bool = False
    """The whole header was read (the tensors' layout is then checked too)."""
    problems: list[Problem] = field(default_factory=list)

    def problem(self, severity: str, code: str, message: str) -> None:
        """Record one problem (bounded: a crafted header repeats them)."""
        if len(self.problems) < 200:
            self.problems.append(Problem(severity, code, message))


class _Short(Exception):
    """The header ends before a declared length; `crafted` when no file of this size fits it."""

    def __init__(self, what: str, need: int, crafted: bool) -> None:
        super().__init__(what)
        self.what, self.need, self.crafted = what, need, crafted


class _Cursor:
    def __init__(self, buf, size: int, order: str) -> None:
        self.buf, self.size, self.pos, self.order = buf, size, 0, order
        self.not_utf8 = 0

    def need(self, n: int, what: str) -> None:
        if n > self.size - self.pos:
            raise _Short(what, n, crafted=n > self.size)

    def take(self, n: int, what: str) -> bytes:
        self.need(n, what)
        out = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return out

    def scalar(self, fmt: str, what: str) -> Any:
        size = struct.calcsize(fmt)
        self.need(size, what)
        (value,) = struct.unpack_from(self.order + fmt, self.buf, self.pos)
        self.pos += size
        return value

    def string(self, what: str) -> str:
        n = self.scalar("Q", what + " length")
        return self.decode(self.take(n, what))

    def decode(self, raw: bytes) -> str:
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError:
            self.not_utf8 += 1  # llama.cpp takes the bytes; gguf.GGUFReader refuses them
            return str(raw, "utf-8", "replace")

    def strings(self, count: int, what: str) -> list[str]:
        """`count` strings one after the other (a vocabulary: the hot loop of a real header)."""
        buf, pos, size = self.buf, self.pos, self.size
        unpack = struct.Struct(self.order + "Q").unpack_from
        out = []
        for _ in range(count):
            if pos + 8 > size:
                raise _Short(what + " length", 8, crafted=False)
            (n,) = unpack(buf, pos)
            pos += 8
            if n > size - pos:
                raise _Short(what, n, crafted=n > size)
            out.append(self.decode(buf[pos:pos + n]))
            pos += n
        self.pos = pos
        return out

    def numbers(self, fmt: str, count: int, what: str) -> array:
        width = struct.calcsize(fmt)
        self.need(count * width, what)
        out = array(_ARRAY_CODES[fmt])
        out.frombytes(self.buf[self.pos:self.pos + count * width])
        if self.order == ">":
            out.byteswap()
        self.pos += count * width
        return out


def sniff(head: bytes, size: int) -> bool:
    """A GGUF file starts with its magic; what follows is checked by `read`."""
    return head[:4] == MAGIC


def read(buf, size: int | None = None) -> GGUFFile:
    """The header of a GGUF file (bytes or a mapping); never raises for bad content."""
    size = len(buf) if size is None else size
    out = GGUFFile(size)
    if bytes(buf[:4]) != MAGIC or size < 8:
        out.problem(Severity.SUSPICIOUS, "gguf-truncated", "the file ends inside the GGUF magic")
        return out
    le, be = struct.unpack_from("<I", buf, 4)[0], struct.unpack_from(">I", buf, 4)[0]
    # a big-endian file's version reads byte-swapped (gguf.GGUFReader tells them apart so)
    out.big_endian = not (le & 0xFFFF) and bool(be & 0xFFFF)
    cur = _Cursor(buf, size, ">" if out.big_endian else "<")
    cur.pos = 4
    out.version = cur.scalar("I", "version")
    if out.version not in (2, 3):
        why = ("GGUF version 1 (32-bit counts) is no longer read by llama.cpp"
               if out.version == 1 else f"GGUF version {out.version} is not one llama.cpp reads")
        out.problem(Severity.SUSPICIOUS, "gguf-version", why)
        return out
    try:
        out.complete = _read_header(cur, out)
    except _Short as short:
        _short(out, short)
        return out
    finally:
        if cur.not_utf8:
            out.problem(Severity.INFO, "gguf-not-utf8",
                        f"{cur.not_utf8} strings of the header are not UTF-8: llama.cpp reads "
                        "their bytes, gguf.GGUFReader refuses the file")
    if out.complete:
        _check_layout(out)
    return out


def _short(out: GGUFFile, short: _Short) -> None:
    if short.crafted:
        out.problem(Severity.DANGEROUS, "gguf-header-bounds",
                    f"the {short.what} declares {short.need} bytes, more than the whole file "
                    f"({out.size} bytes): a crafted header; {ADVISORIES}")
    else:
        out.problem(Severity.SUSPICIOUS, "gguf-truncated",
                    f"the file ends inside the {short.what} ({short.need} bytes declared): it "
                    "was cut short (a partial download) or crafted; llama.cpp refuses it")


def _read_header(cur: _Cursor, out: GGUFFile) -> bool:
    """Read counts, pairs and tensor infos; False where a value of unknown type stops it."""
    out.tensor_count = cur.scalar("Q", "tensor count")
    out.kv_count = cur.scalar("Q", "key-value count")
    # the least each record takes: a key-value pair 8+4+1 bytes, a tensor info 8+4+4+8
    cur.need(out.kv_count * 13 + out.tensor_count * 24, "key-value and tensor counts")
    for _ in range(out.kv_count):
        key = cur.string("key")
        vtype = cur.scalar("I", f"type of {key!r}")
        value, types = _value(cur, vtype, key, out)
        if types is None:
            return False
        if key in out.kv:
            out.problem(Severity.SUSPICIOUS, "gguf-duplicate-key",
                        f"the key {key!r} appears twice: llama.cpp refuses the file, other "
                        "readers keep either value")
        out.kv[key] = value
        out.kv_types[key] = types
    _alignment(out)
    names: set[str] = set()
    infos = []
    # the record after the name (n_dims, dims, type, offset) in one unpack where it fits
    whole = [struct.Struct(f"{cur.order}I{n}QIQ") for n in range(MAX_DIMS + 1)]
    count, length = struct.Struct(cur.order + "I"), struct.Struct(cur.order + "Q")
    try:
        for _ in range(out.tensor_count):
            n = length.unpack_from(cur.buf, cur.pos)[0] if cur.size - cur.pos >= 8 else None
            if n is not None and n <= cur.size - cur.pos - 8:
                name = cur.decode(bytes(cur.buf[cur.pos + 8:cur.pos + 8 + n]))
                cur.pos += 8 + n
            else:
                name = cur.string("tensor name")
            n_dims = count.unpack_from(cur.buf, cur.pos)[0] if cur.size - cur.pos >= 4 else None
            if (n_dims is not None and n_dims <= MAX_DIMS
                    and whole[n_dims].size <= cur.size - cur.pos):
                *dims, type_code, offset = whole[n_dims].unpack_from(cur.buf, cur.pos)[1:]
                cur.pos += whole[n_dims].size
                dims = tuple(dims)
            else:  # short, or too many dimensions: read field by field, naming what is missing
                dims, type_code, offset = _tensor_fields(cur, out, name)
            _check_info(out, name, dims, type_code, names)
            infos.append((name, dims, type_code, offset))
    except _Short:  # the infos read before the header ends, where their data lies unknown
        out.tensors = [TensorInfo(*info, 0) for info in infos]
        raise
    pad = -cur.pos % out.alignment
    out.data_start = cur.pos + pad
    out.tensors = [TensorInfo(name, dims, type_code, offset, out.data_start + offset)
                   for name, dims, type_code, offset in infos]
    return True


def _tensor_fields(cur: _Cursor, out: GGUFFile, name: str) -> tuple[tuple[int, ...], int, int]:
    """A tensor info's dimensions, type and offset, each read on its own."""
    n_dims = cur.scalar("I", f"dimension count of {name!r}")
    if n_dims > MAX_DIMS:
        # checked before reading: an n_dims of 2**32-1 must not cost a loop
        cur.need(n_dims * 8, f"dimensions of {name!r}")
        out.problem(Severity.DANGEROUS, "gguf-header-bounds",
                    f"tensor {name!r} has {n_dims} dimensions, more than ggml's "
                    f"{MAX_DIMS}: a crafted header; {ADVISORIES}")
    dims = tuple(cur.numbers("Q", n_dims, f"dimensions of {name!r}"))
    type_code = cur.scalar("I", f"type of {name!r}")
    offset = cur.scalar("Q", f"offset of {name!r}")
    return dims, type_code, offset


def _value(cur: _Cursor, vtype: int, key: str, out: GGUFFile) -> tuple[Any, tuple | None]:
    """One value and its type list, or (None, None) when its type is unknown (the rest of
    the header cannot be found then)."""
    if vtype == STRING:
        return cur.string(f"value of {key!r}"), (STRING,)
    if vtype == ARRAY:
        item = cur.scalar("I", f"item type of {key!r}")
        count = cur.scalar("Q", f"item count of {key!r}")
        if item == STRING:
            cur.need(count * 8, f"array {key!r}")
            return cur.strings(count, f"item of {key!r}"), (ARRAY, STRING)
        if item == ARRAY:
            out.problem(Severity.SUSPICIOUS, "gguf-nested-array",
                        f"{key!r} is an array of arrays, which llama.cpp refuses")
            return None, None
        known = VALUE_TYPES.get(item)
        if known is None:
            _unknown_type(out, key, item)
            return None, None
        fmt = known[1]
        if fmt == "?":
            return [bool(b) for b in cur.take(count, f"array {key!r}")], (ARRAY, item)
        return cur.numbers(fmt, count, f"array {key!r}"), (ARRAY, item)
    known = VALUE_TYPES.get(vtype)
    if known is None:
        _unknown_type(out, key, vtype)
        return None, None
    return cur.scalar(known[1], f"value of {key!r}"), (vtype,)


def _unknown_type(out: GGUFFile, key: str, vtype: int) -> None:
    out.problem(Severity.SUSPICIOUS, "gguf-unknown-type",
                f"{key!r} has value type {vtype}, which no GGUF version defines: llama.cpp "
                "refuses the file, and the rest of the header was not read")


def _alignment(out: GGUFFile) -> None:
    if "general.alignment" not in out.kv:
        return
    value, types = out.kv["general.alignment"], out.kv_types["general.alignment"]
    if types != (4,) or value == 0 or value & (value - 1):
        out.problem(Severity.SUSPICIOUS, "gguf-alignment",
                    f"general.alignment is {value!r} (type {VALUE_TYPES[types[0]][0]}), not a "
                    "power of two in a UINT32: llama.cpp refuses the file")
        return
    out.alignment = value


def _check_info(out: GGUFFile, name: str, dims: tuple[int, ...], type_code: int,
                names: set[str]) -> None:
    if name in names:
        out.problem(Severity.SUSPICIOUS, "gguf-duplicate-tensor",
                    f"tensor {name!r} appears twice: llama.cpp refuses the file")
    names.add(name)
    if len(name.encode()) > MAX_NAME:
        out.problem(Severity.SUSPICIOUS, "gguf-name-length",
                    f"tensor name {name[:80]!r} is longer than ggml's {MAX_NAME} bytes: "
                    "llama.cpp refuses the file")
    if math.prod(dims) >= 1 << 63 or max(dims, default=0) >= 1 << 63:
        out.problem(Severity.DANGEROUS, "gguf-header-bounds",
                    f"tensor {name!r} has dimensions {list(dims)}, whose element count "
                    f"overflows a signed 64-bit integer: a crafted header; {ADVISORIES}")
    known = GGML_TYPES.get(type_code)
    if known is None:
        out.problem(Severity.SUSPICIOUS, "gguf-unknown-tensor-type",
                    f"tensor {name!r} has ggml type {type_code}, which this reader does not "
                    "know: its size, and so the layout after it, cannot be checked")
    elif dims and dims[0] % known[1]:
        out.problem(Severity.SUSPICIOUS, "gguf-block-size",
                    f"tensor {name!r} ({known[0]}) has {dims[0]} elements per row, not a "
                    f"multiple of the type's block of {known[1]}: llama.cpp refuses the file")


def _check_layout(out: GGUFFile) -> None:
    """Each tensor's data where llama.cpp expects it: inside the file, aligned, and one after
    the other without overlap or gaps (bytes between tensors are a place to hide data)."""
    expected = 0
    spans: list[tuple[int, int, str]] = []
    for t in out.tensors:
        nbytes = t.n_bytes
        if nbytes is None:
            return  # an unknown type: where its data ends is unknown
        if t.offset % out.alignment:
            out.problem(Severity.SUSPICIOUS, "gguf-misaligned",
                        f"tensor {t.name!r} starts at data offset {t.offset}, not a multiple "
                        f"of the alignment {out.alignment}: llama.cpp refuses the file")
        if t.data_offset + nbytes > out.size:
            out.problem(Severity.SUSPICIOUS, "gguf-data-truncated",
                        f"tensor {t.name!r} ({nbytes} bytes at {t.data_offset}) ends past the "
                        f"end of the file ({out.size} bytes): cut short or crafted; llama.cpp "
                        "refuses it")
        elif t.offset != expected:
            out.problem(Severity.SUSPICIOUS, "gguf-layout",
                        f"tensor {t.name!r} starts at data offset {t.offset}, where llama.cpp "
                        f"expects {expected} (the tensors one after the other): it refuses "
                        "the file; gaps and overlaps are places to hide data")
        spans.append((t.offset, t.offset + nbytes, t.name))
        expected += nbytes + (-nbytes % out.alignment)
    spans.sort()
    reach, holder = 0, ""
    for begin, end, name in spans:
        if begin < reach:
            out.problem(Severity.SUSPICIOUS, "gguf-overlap",
                        f"tensors {holder!r} and {name!r} share bytes: a file llama.cpp "
                        "refuses, and a change to one changes the other")
        if end > reach:
            reach, holder = end, name
