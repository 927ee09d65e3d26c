"""A checkpoint named by a file, a folder or a `*.index.json`, as the files that hold its tensors.

A folder is the checkpoint its index names (a safetensors index first: that is what
transformers loads when a folder holds both), else its one checkpoint file
(`model.safetensors`, `pytorch_model.bin`, or the only `.safetensors/.bin/.pt/.pth/.ckpt`).
An index set must be whole before anything is read: a missing shard, a file named like a
shard the index does not name, or a key listed for two shards is an error (`ShardError`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from inspector.core.shards import (
    INDEX_SUFFIX,
    ShardError,
    ShardIndex,
    check_files,
    is_index,
    read_index,
)

CHECKPOINT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")
PREFERRED_FILES = ("model.safetensors", "pytorch_model.bin")


@dataclass
class ShardSet:
    """What the user named (absolute, links kept), its shard files in order, and its index."""

    path: Path
    files: list[Path]
    index: ShardIndex | None = None


def resolve(path: str | os.PathLike[str], strict: bool = True) -> ShardSet:
    """The files of the checkpoint at `path`; ShardError if they are unclear or, when `strict`,
    not whole (`inspect` lists those problems itself, so it passes strict=False)."""
    given = Path(os.path.abspath(path))
    if given.is_dir():
        found = _in_folder(given)
    elif is_index(given):
        found = given
    else:
        return ShardSet(given, [given])
    if not is_index(found):
        return ShardSet(given, [found])
    index = read_index(found)
    problems = [p for p in check_files(index) if p.fatal]
    if problems and strict:
        raise ShardError(f"{found}: the shards do not match their index: "
                         + "; ".join(p.message for p in problems))
    return ShardSet(given, [index.folder / shard for shard in index.shards()], index)


def _in_folder(folder: Path) -> Path:
    """The index (safetensors first) or the single checkpoint file a folder holds."""
    indexes = sorted(p for p in folder.iterdir() if is_index(p) and p.is_file())
    for kind in (".safetensors" + INDEX_SUFFIX, INDEX_SUFFIX):
        picked = [p for p in indexes if p.name.endswith(kind)]
        if len(picked) > 1:
            names = ", ".join(p.name for p in picked)
            raise ShardError(f"{folder} holds several indexes ({names}); name one")
        if picked:
            return picked[0]
    for name in PREFERRED_FILES:
        if (folder / name).is_file():
            return folder / name
    files = sorted(
        p for p in folder.iterdir()
        if p.suffix in CHECKPOINT_SUFFIXES and not p.name.startswith(".") and p.is_file()
    )
    if len(files) == 1:
        return files[0]
    found = ", ".join(p.name for p in files) if files else "none"
    raise ShardError(f"{folder}: no index and not exactly one checkpoint file "
                     f"({'/'.join(CHECKPOINT_SUFFIXES)}: {found})")
