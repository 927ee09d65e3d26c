"""A checkpoint named by a file, a folder or a `*.index.json`, as the files that hold its tensors.

`folder_checkpoint` is the one place that decides what a folder's checkpoint is, for every
command (`convert DIR` too): a torch.distributed.checkpoint folder is itself (read whole),
else the first of `PREFERENCE` it holds, else its only `.safetensors/.bin/.pt/.pth/.ckpt`.
An index set must be whole before anything is read: a missing shard, a file named like a
shard the index does not name, or a key listed for two shards is an error (`ShardError`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from inspector import formats
from inspector.core.vocabulary import Format
from inspector.integrity.shard_index import (
    INDEX_SUFFIX,
    ShardError,
    ShardIndex,
    check_files,
    is_index,
    read_index,
)
from inspector.scan.dcp_folder import is_dcp_folder

CHECKPOINT_SUFFIXES = formats.suffixes(Format.SAFETENSORS, Format.PYTORCH_ZIP)
SAFETENSORS_INDEX = ".safetensors" + INDEX_SUFFIX
# What transformers loads when a folder holds several: safetensors before torch pickles, an
# index before a single file. Each entry is an index kind (by suffix) or a file name.
PREFERENCE = (SAFETENSORS_INDEX, INDEX_SUFFIX, "model.safetensors", "pytorch_model.bin")


class FolderChoiceError(ShardError):
    """A folder whose checkpoint cannot be told: `code` is `ambiguous` or `no_checkpoint`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


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
        found = folder_checkpoint(given)
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


def is_safetensors_choice(path: Path) -> bool:
    """True when `folder_checkpoint` chose safetensors weights (an index of them or a file)."""
    return path.name.endswith(SAFETENSORS_INDEX) or path.suffix == ".safetensors"


def folder_checkpoint(folder: Path) -> Path:
    """What a folder's checkpoint is: the folder itself for a torch.distributed.checkpoint
    one, its first `PREFERENCE`, or its only checkpoint file; FolderChoiceError otherwise."""
    if is_dcp_folder(folder):
        return folder
    indexes = sorted(p for p in folder.iterdir() if is_index(p) and p.is_file())
    for preferred in PREFERENCE:
        if preferred.endswith(INDEX_SUFFIX):
            picked = [p for p in indexes if p.name.endswith(preferred)]
            # a safetensors index also ends like any index: each kind is taken once, in order
            indexes = [p for p in indexes if p not in picked]
            if len(picked) > 1:
                names = ", ".join(p.name for p in picked)
                raise FolderChoiceError("ambiguous",
                                        f"{folder} holds several indexes ({names}); name one")
            if picked:
                return picked[0]
        elif (folder / preferred).is_file():
            return folder / preferred
    files = sorted(
        p for p in folder.iterdir()
        if p.suffix in CHECKPOINT_SUFFIXES and not p.name.startswith(".") and p.is_file()
    )
    if len(files) == 1:
        return files[0]
    found = ", ".join(p.name for p in files) if files else "none"
    raise FolderChoiceError("no_checkpoint", f"{folder}: no index and not exactly one "
                            f"checkpoint file ({'/'.join(CHECKPOINT_SUFFIXES)}: {found})")
