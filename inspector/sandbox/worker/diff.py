"""Tensor-level diff of two checkpoints with bit-flip forensics; runs inside the jailed worker.

Tensors are compared as raw bytes (row-major, as stored) in bounded chunks; only the elements
that differ are decoded to numbers (with numpy; torch only for bfloat16 and float8, which numpy
lacks), so memory stays flat whatever the tensor size and two safetensors files are compared
without importing torch.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from inspector.checkpoint.bitflip import FlipTally, compare_raw, layout_for
from inspector.checkpoint.drift import Drift, decoded, fold, widened
from inspector.checkpoint.tensor_pairs import Stored, object_changes, pair_keys
from inspector.core.dtypes import canonical_dtype
from inspector.core.progress import CancelToken, check
from inspector.core.vocabulary import TensorStatus
from inspector.tensors.sources import (
    Checkpoint,
    SourceError,
    TensorSource,
    digest,
    open_checkpoint,
)

Chunk = memoryview | bytes | bytearray | np.ndarray
"""Raw little-endian element bytes, e.g. from `stats.byte_chunks`."""

IDENTICAL, CHANGED = TensorStatus.IDENTICAL, TensorStatus.CHANGED
ONLY_IN_A, ONLY_IN_B = TensorStatus.ONLY_IN_A, TensorStatus.ONLY_IN_B
DTYPE_OR_SHAPE_CHANGED = TensorStatus.DTYPE_OR_SHAPE_CHANGED
NOT_COMPARED = TensorStatus.NOT_COMPARED
TIED = "tied"
"""An alias the comparison inferred: the side keeps the key in the same bytes as its twin."""
ALIAS = "alias"
"""An alias the file records (a converter's `__metadata__`)."""


@dataclass
class TensorDiff:
    """The comparison of one key present in both checkpoints."""

    key: str
    status: str
    dtype_a: str | None = None
    dtype_b: str | None = None
    shape_a: list[int] | None = None
    shape_b: list[int] | None = None
    changed_elements: int = 0
    drift: Drift = field(default_factory=Drift)
    """The changed elements' NaN / Inf count and largest differences."""
    note: str | None = None
    tally: FlipTally | None = field(default=None, repr=False)
    offset_a: int | None = None
    """Where the tensor's bytes start in file A (None: not stored contiguously there)."""
    offset_b: int | None = None
    file_a: str | None = None
    """The file of a folder (a DCP data file) offset_a is in; None for the checkpoint file."""
    file_b: str | None = None

    def summary(self) -> str:
        """One sentence for a key that is not identical; empty when it is."""
        if self.status == CHANGED:
            return (
                self.tally.summary(self.key, self.drift.nonfinite)
                if self.tally
                else f"`{self.key}` differs ({self.note})"
            )
        sentences = {
            DTYPE_OR_SHAPE_CHANGED: f"`{self.key}` changed from {self.dtype_a}{self.shape_a} "
            f"to {self.dtype_b}{self.shape_b}",
            ONLY_IN_A: f"`{self.key}` is only in A",
            ONLY_IN_B: f"`{self.key}` is only in B",
            NOT_COMPARED: f"`{self.key}` has no dense data to compare",
        }
        return sentences.get(self.status, "")

    def to_json(self) -> dict[str, Any]:
        """The `tensors` record of the diff contract."""
        record: dict[str, Any] = {
            "key": self.key,
            "status": self.status,
            "dtype_a": self.dtype_a,
            "dtype_b": self.dtype_b,
            "shape_a": self.shape_a,
            "shape_b": self.shape_b,
            "changed_elements": self.changed_elements,
            "max_abs_diff": self.drift.max_abs,
            "max_rel_diff": self.drift.max_rel,
            "nonfinite_changes": self.drift.nonfinite,
            "offset_a": self.offset_a,
            "offset_b": self.offset_b,
            "single_bit_flips": self.tally.single_bit if self.tally else 0,
            "multi_bit_elements": self.tally.multi_bit if self.tally else 0,
            "bitflips": [],
            "summary": self.summary(),
        }
        if self.tally is not None:
            shape = tuple(self.shape_a or ())
            itemsize = self.tally.layout.itemsize
            for flip in self.tally.flips:
                item = flip.to_json(shape)
                if self.offset_a is not None:
                    item["file_offset_a"] = self.offset_a + flip.index * itemsize + flip.bit // 8
                if self.offset_b is not None:
                    item["file_offset_b"] = self.offset_b + flip.index * itemsize + flip.bit // 8
                item.update({f"file_{side}": name for side, name in
                             (("a", self.file_a), ("b", self.file_b)) if name is not None})
                record["bitflips"].append(item)
        return record


def _aligned(
    chunks_a: Iterable[Chunk], chunks_b: Iterable[Chunk]
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Pair two byte streams whose chunk boundaries may differ (a view against a copy)."""
    it_a = (np.frombuffer(c, dtype=np.uint8) for c in chunks_a)
    it_b = (np.frombuffer(c, dtype=np.uint8) for c in chunks_b)
    a = b = np.empty(0, dtype=np.uint8)
    while True:
        while a is not None and not a.size:
            a = next(it_a, None)
        while b is not None and not b.size:
            b = next(it_b, None)
        if a is None or b is None:
            if a is not None or b is not None:
                raise ValueError("tensor data lengths differ although dtype and shape match")
            return
        n = min(a.size, b.size)
        yield a[:n], b[:n]
        a, b = a[n:], b[n:]


def diff_raw(
    key: str,
    dtype: Any,
    shape: Iterable[int],
    chunks_a: Iterable[Chunk],
    chunks_b: Iterable[Chunk],
    cancel: CancelToken | None = None,
) -> TensorDiff:
    """Compare two tensors of one dtype and shape given as raw byte chunks of any sizes."""
    name = canonical_dtype(dtype)
    layout = layout_for(name)
    shape = [int(d) for d in shape]
    result = TensorDiff(key, IDENTICAL, name, name, shape, shape, tally=FlipTally(layout))
    start = 0
    for a, b in _aligned(chunks_a, chunks_b):
        check(cancel)
        chunk = compare_raw(a, b, layout)
        if chunk.changed.size:
            result.tally.add(chunk, start)
            fold(result.drift, chunk, lambda rows: _decode(rows, name))
        start += a.size // layout.itemsize
    result.changed_elements = result.tally.changed
    if result.changed_elements:
        result.status = CHANGED
    else:
        result.drift = Drift(0, 0.0, 0.0)
    return result


def _decode(rows: np.ndarray, name: str) -> np.ndarray | None:
    """Changed elements (rows of raw bytes) as float64 or complex128; torch for the float8
    formats and complex32, which NumPy lacks; None where torch has no arithmetic either."""
    values = decoded(rows, name)
    if values is not None:
        return values
    import torch

    tensor = torch.from_numpy(np.ascontiguousarray(rows).reshape(-1)).view(getattr(torch, name))
    try:
        wide = torch.complex128 if tensor.is_complex() else torch.float64
        return widened(tensor.to(wide).numpy())
    except (RuntimeError, TypeError):  # packed float4 has no arithmetic in torch
        return None


def compare_sources(
    a: TensorSource, b: TensorSource, cancel: CancelToken | None = None
) -> TensorDiff:
    """Compare one key of two checkpoints."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return TensorDiff(a.key, DTYPE_OR_SHAPE_CHANGED, a.dtype, b.dtype, a.shape, b.shape)
    if a.read is None or b.read is None:
        return TensorDiff(a.key, NOT_COMPARED, a.dtype, b.dtype, a.shape, b.shape)
    try:
        layout_for(a.dtype)
    except ValueError:  # e.g. safetensors' sub-byte F4/F6: equal or not, without forensics
        same = digest(a, cancel) == digest(b, cancel)
        result = TensorDiff(
            a.key, IDENTICAL if same else CHANGED, a.dtype, b.dtype, a.shape, b.shape
        )
        result.note = None if same else f"no bit layout for {a.dtype}: only byte equality compared"
        return result
    result = diff_raw(a.key, a.dtype, a.shape, a.read(), b.read(), cancel)
    result.offset_a, result.offset_b = a.offset, b.offset
    result.file_a, result.file_b = a.file, b.file
    return result


@dataclass
class Side:
    """One checkpoint as its files (shards, or one file), each opened only when needed."""

    path: str
    names: list[str]
    """The files' names as the user knows them (a link's, not its target's)."""
    open: Callable[[int], Checkpoint]
    """Opens file number i; a shard is dropped before the next one of its side is opened."""


@dataclass
class _Inventory:
    """What a side stores, read shard by shard and kept without any tensor's bytes."""

    stored: list[Stored]
    objects: list[dict[str, Any]]
    formats: list[str]
    counts: list[int]


class _OpenShard:
    """The one file of a side that is open now (the inventory's last one is reused)."""

    def __init__(self, side: Side) -> None:
        self.side = side
        self._number: int | None = None
        self._checkpoint: Checkpoint | None = None
        self._by_key: dict[str, TensorSource] = {}

    def open(self, number: int) -> Checkpoint:
        if number != self._number:
            # let the previous file's mapping go before mapping the next
            self._checkpoint, self._by_key = None, {}
            self._checkpoint = self.side.open(number)
            self._by_key = {s.key: s for s in self._checkpoint.tensors}
            self._number = number
        return self._checkpoint

    def source(self, stored: Stored) -> TensorSource:
        self.open(stored.shard)
        return self._by_key[stored.key]


def _inventory(opened: _OpenShard, emit: Callable[[dict], None] | None,
               cancel: CancelToken | None) -> _Inventory:
    side = opened.side
    stored, objects, formats, counts = [], {}, [], []
    where: dict[str, str] = {}
    for number, name in enumerate(side.names):
        check(cancel)
        ckpt = opened.open(number)
        for s in ckpt.tensors:
            if s.key in where:
                raise SourceError("key_in_two_shards",
                                  f"{side.path}: {s.key} is stored in {where[s.key]} and {name}")
            where[s.key] = name
            stored.append(Stored(s.key, number, s.dtype, tuple(s.shape), s.storage, s.alias_of))
        for obj in ckpt.objects:
            objects.setdefault(obj["key"], obj)  # shards repeat their metadata
        formats.append(ckpt.format)
        counts.append(len(ckpt.tensors))
        del ckpt  # else it would stay mapped while the next file is opened
        if emit is not None:
            emit({"type": "progress", "stage": "shards", "done": number + 1,
                  "total": len(side.names)})
    return _Inventory(stored, list(objects.values()), formats, counts)


def diff_sides(
    a: Side,
    b: Side,
    emit: Callable[[dict], None] | None = None,
    cancel: CancelToken | None = None,
) -> dict[str, Any]:
    """Every key of two (sharded) checkpoints compared, with one shard per side open at a time.

    The `diff` contract; records add `shard_a`/`shard_b` (the file each side keeps the key in)
    and `stored_as_a`/`stored_as_b` (the key whose bytes were read when a side keeps this one
    only as an alias or tied weight, listed in `aliases`).
    """
    open_a, open_b = _OpenShard(a), _OpenShard(b)
    inv_a, inv_b = _inventory(open_a, emit, cancel), _inventory(open_b, emit, cancel)
    pairs = pair_keys(inv_a.stored, inv_b.stored)
    records, aliases = [], []
    for done, pair in enumerate(pairs, 1):
        check(cancel)
        if pair.b is None:
            result = TensorDiff(pair.key, ONLY_IN_A, dtype_a=pair.a.dtype, shape_a=[*pair.a.shape])
        elif pair.a is None:
            result = TensorDiff(pair.key, ONLY_IN_B, dtype_b=pair.b.dtype, shape_b=[*pair.b.shape])
        else:
            result = compare_sources(open_a.source(pair.a), open_b.source(pair.b), cancel)
            result.key = pair.key
        record = result.to_json()
        for letter, side, stored in (("a", a, pair.a), ("b", b, pair.b)):
            record[f"shard_{letter}"] = side.names[stored.shard] if stored else None
            stored_as = stored.key if pair.tied == letter else stored.alias_of if stored else None
            record[f"stored_as_{letter}"] = stored_as
            if stored_as is not None:
                aliases.append({"key": pair.key, "side": letter, "stored_as": stored_as,
                                "how": TIED if pair.tied == letter else ALIAS})
        records.append(record)
        if emit is not None:
            emit({"type": "tensor", **record})
            emit({"type": "progress", "stage": "diff", "done": done, "total": len(pairs)})
    counts = Counter(r["status"] for r in records)
    return {
        "a": _side_json(a, inv_a),
        "b": _side_json(b, inv_b),
        "identical": all(r["status"] == IDENTICAL for r in records),
        "counts": dict(counts),
        "tensors": records,
        "aliases": aliases,
        "objects": object_changes(inv_a.objects, inv_b.objects),
        "summary": [r["summary"] for r in records if r["summary"]],
    }


def _side_json(side: Side, inv: _Inventory) -> dict[str, Any]:
    """The `a`/`b` record: the path, its format(s), and every file with its tensor count."""
    return {
        "path": side.path,
        "format": "+".join(dict.fromkeys(inv.formats)),
        "shards": [{"file": name, "format": fmt, "tensors": n}
                   for name, fmt, n in zip(side.names, inv.formats, inv.counts, strict=True)],
    }


def diff_checkpoints(
    a: Checkpoint,
    b: Checkpoint,
    emit: Callable[[dict], None] | None = None,
    cancel: CancelToken | None = None,
) -> dict[str, Any]:
    """Every key of two open checkpoints compared; the `diff` contract without file details."""
    result = diff_sides(Side("A", ["A"], lambda _n: a), Side("B", ["B"], lambda _n: b),
                        emit, cancel)
    del result["a"], result["b"]
    return result


def diff(request: dict, emit: Callable[[dict], None], cancel: CancelToken) -> dict:
    """Worker op `diff`: request `paths` [A, B], or `sides` [{path, files, names}] (every file
    also in `paths`, for the jail; `names` as the user knows them) for sharded checkpoints;
    one `tensor` event per key."""
    allow = request.get("allow_globals", ())
    sides = request.get("sides") or [{"path": p, "files": [p]} for p in request["paths"]]

    def side(spec: dict) -> Side:
        files = list(spec["files"])
        names = spec.get("names") or [os.path.basename(f) for f in files]
        return Side(spec["path"], names,
                    lambda n: open_checkpoint(files[n], allow, request.get("_maps_fd")))

    return diff_sides(side(sides[0]), side(sides[1]), emit, cancel)
