"""The one reader of a safetensors header: every consumer (scan, load, digests, diff, shards)
sees the same entries and the same problems.

A safetensors file is a little-endian u64 header length, that many bytes of UTF-8 JSON (an
object: `__metadata__` and one entry per tensor, `dtype`, `shape`, `data_offsets` relative to
the data buffer), then the data buffer. Two readers that disagree about a crafted header are
an attacker's tool (one checks a tensor, the other loads a different one), so the checks live
here once: `error` when the header cannot be read at all, `problems` (severity, code, message)
for what it holds. A consumer that loads tensors refuses every problem but `info`.

`__metadata__` is free text. A converter that stores tied weights once also names each dropped
key there (`{removed: kept}`, safetensors' own convention); only the names listed under
`ALIASES_KEY`, which this project's `convert` writes, are read as aliases (`recorded_aliases`),
so a note whose value happens to name a tensor is never taken for one.
"""

from __future__ import annotations

import json
import math
import mmap
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import BinaryIO

from inspector.core.dtypes import BY_SAFETENSORS, DType
from inspector.core.vocabulary import Severity

ENCODED_KEY = "ckpt-inspector.encoded"
"""`__metadata__` entry: JSON {key: rebuild spec} of the quantized and sparse tensors a
conversion wrote as parts (`tensors.encoded`)."""
ALIASES_KEY = "ckpt-inspector.aliases"
"""`__metadata__` entry: JSON {removed: kept} of the aliases a conversion recorded."""
MAX_HEADER = 100_000_000
"""Header bytes read at most (what the safetensors library accepts)."""
MAX_DEPTH = 64
"""Containers nested deeper than this are refused before the JSON is parsed (a header needs
3: the object, an entry, its shape; Python's parser recurses once per level and the library's
stops at 128)."""
_MAX_DIM = (1 << 63) - 1  # torch's sizes are int64; a larger dimension is no tensor
INFO, SUSPICIOUS = Severity.INFO, Severity.SUSPICIOUS


@dataclass(slots=True)
class Entry:
    """One tensor of the header, its offsets absolute in the file."""

    key: str
    dtype: DType
    shape: list[int]
    begin: int
    end: int


@dataclass(frozen=True)
class Problem:
    """Something wrong with the header that still let it be read."""

    severity: Severity
    code: str
    message: str


@dataclass
class SafetensorsHeader:
    """What a safetensors header says, and what is wrong with it."""

    size: int
    """Bytes in the file."""
    length: int = 0
    """Bytes of JSON after the 8-byte length."""
    spans: list[tuple[int, int, str, DType, list[int]]] = field(default_factory=list, repr=False)
    """(begin, end, key, dtype, shape) of each entry, offsets in the data buffer: tuples, as
    a scan of 5,000 tensors needs only the checks (an `Entry` each costs 20% more)."""
    metadata: dict[str, str] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    error: str | None = None
    """Why the header could not be read (then there are no entries)."""

    @property
    def base(self) -> int:
        """Where the data buffer starts in the file."""
        return 8 + self.length

    @property
    def entries(self) -> list[Entry]:
        """Tensors whose dtype, shape and offsets are readable and in bounds, in header order."""
        base = self.base
        return [Entry(key, dtype, shape, base + begin, base + end)
                for begin, end, key, dtype, shape in self.spans]

    def refusal(self) -> str | None:
        """Why a loader must not read this file's tensors (None when it may)."""
        if self.error is not None:
            return self.error
        return next((p.message for p in self.problems if p.severity != INFO), None)

    def add(self, severity: Severity, code: str, message: str) -> None:
        """Record one problem."""
        self.problems.append(Problem(severity, code, message))


def length_error(length: int, size: int) -> str | None:
    """Why a header length cannot be right for a file of `size` bytes (None when it can)."""
    if length > MAX_HEADER:
        return f"header length {length} exceeds the {MAX_HEADER}-byte limit"
    if length > size - 8:
        return f"header length {length} exceeds the file"
    return None


def read_header(fh: BinaryIO, size: int) -> SafetensorsHeader:
    """Read and check the header of a safetensors file open at its start, `size` bytes long."""
    out = SafetensorsHeader(size)
    head = fh.read(8)
    if len(head) < 8:
        out.error = f"{size} bytes is too short for a safetensors header length"
        return out
    (length,) = struct.unpack("<Q", head)
    out.error = length_error(length, size)
    if out.error is None:
        out.length = length
        _parse(out, fh.read(length))
    return out


def read_buffer(buf: bytes | mmap.mmap, size: int) -> SafetensorsHeader:
    """`read_header` over a file's bytes already in memory (bytes or a mapping of the file)."""
    return read_header(_Reader(buf), size)


class _Reader:
    """Reads a buffer as a file, without moving a mapping's own position."""

    def __init__(self, buf: bytes | mmap.mmap) -> None:
        self.buf, self.pos = buf, 0

    def read(self, n: int) -> bytes:
        out = bytes(self.buf[self.pos:self.pos + n])
        self.pos += len(out)
        return out


def _parse(out: SafetensorsHeader, raw: bytes) -> None:
    if raw[:1] != b"{":  # then a valid JSON header is an object
        out.error = "safetensors header is not a JSON object (it must start with '{')"
        return
    try:
        # decoded first: json.loads would take UTF-16 or UTF-32 bytes, the library does not
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        out.error = f"safetensors header is not valid UTF-8: {exc}"
        return
    if _nests_deeper(raw, MAX_DEPTH):
        out.error = (f"safetensors header nests deeper than {MAX_DEPTH} levels (a header needs "
                     "3): not read")
        return
    repeated: list[str] = []
    try:
        header = json.loads(text, object_pairs_hook=_keep_repeats(repeated),
                            parse_constant=_no_constant)
    except ValueError as exc:
        out.error = f"safetensors header is not valid JSON: {exc}"
        return
    if repeated:
        names = ", ".join(repr(k) for k in sorted(set(repeated))[:5])
        out.add(SUSPICIOUS, "safetensors-duplicate-key",
                f"the header names a key more than once ({names}): readers may disagree")
    meta = header.pop("__metadata__", None)
    if meta is not None:
        if isinstance(meta, dict) and all(type(v) is str for v in meta.values()):
            out.metadata = meta
        else:
            out.add(SUSPICIOUS, "safetensors-metadata", "__metadata__ must map text to text")
    _check_entries(out, header)


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKETS = bytes.maketrans(b"[{]}", b"(())")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def _nests_deeper(raw: bytes, limit: int) -> bool:
    """Whether the JSON text `raw` nests containers more than `limit` deep, counted without
    parsing or recursing: strings are dropped, brackets kept, and each round removes the
    innermost empty pairs; pairs left after `limit` rounds, or more than `limit` unclosed
    openings, are too deep."""
    skeleton = _JSON_STRING.sub(b"", raw).translate(_BRACKETS, _NOT_BRACKETS)
    for _ in range(limit):
        if b"()" not in skeleton:
            break
        skeleton = skeleton.replace(b"()", b"")
    return b"()" in skeleton or skeleton.count(b"(") > limit


def _keep_repeats(repeated: list[str]) -> Callable[[list[tuple[str, object]]], dict]:
    def pairs_to_dict(pairs: list[tuple[str, object]]) -> dict:
        obj = dict(pairs)
        if len(obj) != len(pairs):
            seen: set[str] = set()
            repeated.extend(k for k, _ in pairs if k in seen or seen.add(k))
        return obj

    return pairs_to_dict


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _check_entries(out: SafetensorsHeader, header: dict) -> None:
    data_len = out.size - out.base
    spans = out.spans
    for name, entry in header.items():
        if type(entry) is not dict:
            out.add(SUSPICIOUS, "safetensors-entry", f"tensor {name!r} entry is not an object")
            continue
        try:
            record = BY_SAFETENSORS[entry["dtype"]]
            shape = entry["shape"]
            begin, end = entry["data_offsets"]
        except (KeyError, TypeError, ValueError):  # missing, unhashable, not a pair
            record = None
        if (record is None or type(begin) is not int or type(end) is not int
                or type(shape) is not list or not _is_shape(shape)):
            out.add(SUSPICIOUS, "safetensors-entry",
                    f"tensor {name!r} has an invalid dtype, shape or data_offsets")
            continue
        if not 0 <= begin <= end <= data_len:
            out.add(SUSPICIOUS, "safetensors-bounds",
                    f"tensor {name!r} offsets [{begin}, {end}] outside the {data_len}-byte buffer")
            continue
        # sub-byte dtypes (F4, F6) pack their elements; the last byte may be partly used
        expected = (math.prod(shape) * record.bits + 7) // 8
        if end - begin != expected:
            out.add(SUSPICIOUS, "safetensors-size", f"tensor {name!r} spans {end - begin} bytes, "
                    f"{record.safetensors}{shape} needs {expected}")
        spans.append((begin, end, name, record, shape))
    reach, holder = 0, ""  # the furthest end so far, and whose it is
    for begin, end, name, _, _ in sorted(spans):
        if begin < reach:
            out.add(SUSPICIOUS, "safetensors-overlap", f"tensors {holder!r} and {name!r} overlap")
        elif begin > reach:
            # the safetensors library refuses it ("invalid offset"): unused bytes hide data
            where = f"after {holder!r}" if holder else "before the first tensor"
            out.add(SUSPICIOUS, "safetensors-gap",
                    f"{begin - reach} bytes {where} are not part of any tensor (the "
                    "safetensors library refuses the file)")
        if end > reach:
            reach, holder = end, name
    if reach < data_len:
        out.add(SUSPICIOUS, "safetensors-trailing",
                f"{data_len - reach} bytes after the last tensor are not part of any tensor "
                "(the safetensors library refuses the file: not fully covered)")


def _is_shape(shape: list) -> bool:
    for d in shape:  # noqa: SIM110 (a loop: twice as fast as all() over a generator)
        if type(d) is not int or not 0 <= d <= _MAX_DIM:
            return False
    return True


def recorded_aliases(metadata: dict[str, str]) -> dict[str, str]:
    """The aliases a converter recorded under `ALIASES_KEY` ({removed: kept}); {} for none or
    for an entry that is not a JSON object of names."""
    try:
        aliases = json.loads(metadata.get(ALIASES_KEY, "{}"))
    except ValueError:
        return {}
    if not isinstance(aliases, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in aliases.items()):
        return {}
    return aliases


def aliases_entry(aliases: dict[str, str]) -> dict[str, str]:
    """The `__metadata__` entries that record aliases: safetensors' own `{removed: kept}` and
    `ALIASES_KEY` (empty when there are none)."""
    return {**aliases, ALIASES_KEY: json.dumps(aliases, sort_keys=True)} if aliases else {}


def recorded_specs(metadata: dict[str, str]) -> dict[str, dict]:
    """The rebuild specs a converted file records (`ENCODED_KEY`); {} when there are none or
    the entry is not a JSON object of objects (free text, which then matches no original)."""
    try:
        specs = json.loads(metadata.get(ENCODED_KEY, "{}"))
    except ValueError:
        return {}
    ok = isinstance(specs, dict) and all(isinstance(v, dict) for v in specs.values())
    return specs if ok else {}


def spec_bytes(spec: dict) -> bytes:
    """An encoded tensor's rebuild spec as the bytes its `KEY::spec` part holds: canonical
    JSON, so the original and a converted file give the same digest."""
    return json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()


def metadata_objects(metadata: dict[str, str]) -> list[dict]:
    """The `__metadata__` entries as a diff's plain-value records (`__metadata__.KEY`, its
    type and bounded repr): what the jailed diff reports and the host's check makes alike."""
    return [{"key": f"__metadata__.{k}", "type": "builtins.str", "repr": repr(v)[:200]}
            for k, v in metadata.items()]
