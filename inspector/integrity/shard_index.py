"""Sharded checkpoints as one: read a `*.index.json`, check its shards cover it, write one.

The index is the one transformers writes beside its shards: `{"metadata": {"total_size": N},
"weight_map": {key: shard file}}`, named after the single file it stands for
(`model.safetensors.index.json` for `model-00001-of-00003.safetensors`, ...). Coverage: every
key in exactly one shard, every shard the index names present, no file in the folder that
looks like a shard of the set but is not named, and `total_size` equal to the bytes of tensor
data once the tensors are known. Torch-free: safetensors shards are read from their headers.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inspector.core.atomic import write_text_atomic
from inspector.formats.safetensors_header import read_header

INDEX_SUFFIX = ".index.json"
ORPHAN_NOTE = "looks like a shard of this set but the index does not name it"
SHARD_NAME = "{stem}-{number:05d}-of-{count:05d}{suffix}"


class ShardError(ValueError):
    """An index that cannot be read; the message names the file."""


@dataclass
class Problem:
    """One way the shards and their index disagree; `fatal` unless it is only bookkeeping."""

    code: str
    message: str
    fatal: bool = True

    def to_json(self) -> dict[str, Any]:
        """The `problems` record of the convert contract."""
        return dict(self.__dict__)


@dataclass
class ShardIndex:
    """A parsed index: where it is, its key-to-shard map and its metadata."""

    path: Path
    weight_map: dict[str, str]
    metadata: dict[str, Any] = field(default_factory=dict)
    duplicates: dict[str, list[str]] = field(default_factory=dict)

    @property
    def folder(self) -> Path:
        """The folder the shard names are relative to."""
        return self.path.parent

    @property
    def single_name(self) -> str:
        """The file the index stands for: `model.safetensors` for `model.safetensors.index.json`."""
        return self.path.name.removesuffix(INDEX_SUFFIX)

    @property
    def total_size(self) -> int | None:
        """`metadata.total_size`, when the index records one."""
        value = self.metadata.get("total_size")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def shards(self) -> list[str]:
        """The shard files the index names, in name order."""
        return sorted(set(self.weight_map.values()))

    def keys_of(self, shard: str) -> list[str]:
        """The keys the index places in one shard."""
        return [k for k, s in self.weight_map.items() if s == shard]


def is_index(path: Path) -> bool:
    """True for a file named like a sharded checkpoint's index."""
    return path.name.endswith(INDEX_SUFFIX)


def has_one_sha256(path: Path) -> bool:
    """False for a folder (shards, or torch.distributed.checkpoint) or a shard index: each of
    their files has its own SHA-256, and an index's would name only the index."""
    return not (path.is_dir() or is_index(path))


def read_index(path: Path) -> ShardIndex:
    """Read an index, keeping track of a key listed twice (JSON objects may repeat keys)."""
    # repeats by the object they occur in (kept alive so ids stay unique): only the weight_map's
    # are shard names; a repeat at any other depth is read as json (and transformers) reads it
    repeats: list[tuple[dict, dict[str, list[Any]]]] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        seen: dict[str, list[Any]] = {}
        for key, value in items:
            if key in out and out[key] != value:
                seen.setdefault(key, [out[key]]).append(value)
            out[key] = value
        repeats.append((out, seen))
        return out

    try:
        doc = json.loads(path.read_bytes(), object_pairs_hook=pairs)
    except OSError as exc:
        raise ShardError(f"{path}: cannot read the index: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise ShardError(f"{path}: the index is not valid JSON: {exc}") from exc
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict) or not all(
        isinstance(v, str) and v and "/" not in v and "\\" not in v and v not in (".", "..")
        for v in weight_map.values()
    ):
        raise ShardError(f"{path}: 'weight_map' must map each key to a file name in its folder")
    metadata = doc.get("metadata")
    duplicates = next((seen for obj, seen in repeats if obj is weight_map), {})
    return ShardIndex(
        path=path,
        weight_map=weight_map,
        metadata=metadata if isinstance(metadata, dict) else {},
        duplicates=duplicates,
    )


def shard_name(single_name: str, number: int, count: int) -> str:
    """transformers' name for shard `number` of `count` of a file such as `model.safetensors`."""
    stem, dot, suffix = single_name.rpartition(".")
    return SHARD_NAME.format(stem=stem, number=number, count=count, suffix=dot + suffix)


def check_files(index: ShardIndex) -> list[Problem]:
    """What can be told before reading a shard: repeated keys, missing and orphan shards."""
    problems = [
        Problem("key-in-two-shards", f"{key}: listed for {', '.join(map(str, shards))}")
        for key, shards in index.duplicates.items()
    ]
    problems += [
        Problem("missing-shard", f"{shard}: named by the index but not in {index.folder}")
        for shard in index.shards()
        if not (index.folder / shard).is_file()
    ]
    problems += [
        Problem("orphan-shard", f"{name}: {ORPHAN_NOTE}") for name in orphan_shards(index)
    ]
    return problems


def orphan_shards(index: ShardIndex) -> list[str]:
    """Files beside the index named like its shards (`stem-N-of-M.ext`) that it does not name."""
    stem, dot, suffix = index.single_name.rpartition(".")
    pattern = re.compile(rf"{re.escape(stem)}-\d+-of-\d+{re.escape(dot + suffix)}")
    named = set(index.weight_map.values())
    return [
        item.name
        for item in sorted(index.folder.iterdir())
        if pattern.fullmatch(item.name) and item.name not in named
    ]


def check_contents(
    index: ShardIndex, found: Mapping[str, Iterable[str]], data_bytes: int | None = None
) -> list[Problem]:
    """Compare the keys found in each shard with the index, and `total_size` with the data."""
    problems: list[Problem] = []
    seen: dict[str, str] = {}
    for shard, keys in found.items():
        for key in keys:
            if key in seen:
                problems.append(
                    Problem("key-in-two-shards", f"{key}: stored in {seen[key]} and {shard}")
                )
                continue
            seen[key] = shard
            listed = index.weight_map.get(key)
            if listed is None:
                problems.append(
                    Problem("key-not-in-index", f"{key}: in {shard} but not in the index")
                )
            elif listed != shard:
                problems.append(
                    Problem("key-in-wrong-shard", f"{key}: in {shard}, the index says {listed}")
                )
    problems += [
        Problem("key-not-in-shard", f"{key}: the index says {shard}, which does not hold it")
        for key, shard in index.weight_map.items()
        if shard in found and key not in seen
    ]
    if data_bytes is not None and index.total_size != data_bytes:
        problems.append(
            Problem(
                "total-size",
                f"metadata.total_size is {index.total_size}, the tensors hold {data_bytes} bytes",
                fatal=False,
            )
        )
    return problems


def safetensors_contents(path: Path) -> tuple[list[str], int]:
    """The tensor keys of a safetensors file and the bytes of tensor data, from its header."""
    with open(path, "rb") as fh:
        header = read_header(fh, os.fstat(fh.fileno()).st_size)
    refusal = header.refusal()
    if refusal is not None:
        raise ShardError(f"{path}: {refusal}")
    return [e.key for e in header.entries], sum(e.end - e.begin for e in header.entries)


def write_index(
    path: Path,
    weight_map: Mapping[str, str],
    total_size: int,
    metadata: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> None:
    """Write an index as transformers does: metadata with `total_size`, then the sorted map."""
    doc = {
        "metadata": {**(metadata or {}), "total_size": total_size},
        "weight_map": dict(sorted(weight_map.items())),
    }
    write_text_atomic(path, json.dumps(doc, indent=2) + "\n", overwrite=overwrite)
