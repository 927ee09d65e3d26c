"""Extra files a loader reads: a file the manifest (or signature) does not list is tolerated, as
with `sha256sum -c`, only when no loader would take it for the checkpoint.

An orphan (a file named like a shard of an index manifest that the index does not name) is a
fault; a shard that a listed `*.index.json` names is loaded with it; a file whose bytes are a
checkpoint format the jailed worker loads (`formats.loadable`, recognised from the bytes as the
scan recognises them, never from the name) is a loader's pick too: transformers reads an
unlisted `model.safetensors` before the listed `pytorch_model.bin`, when it lies in a folder
beside a listed file (a model's folder: a loader picks among the files there; a checkpoint in a
folder the record lists nothing from is another model, a plain extra). Each is `unchecked` (or
`orphan`) with a note saying why, whether or not the check is strict. So is a hidden file a
loader reads (`folder_walk.LOADED_HIDDEN`: a DCP folder's `.metadata`, its map of every tensor
to its bytes) beside a listed file, and a file whose name is one a loader reads from a model's
folder when present (`loader_names.LOADER_NAMES`: a chat template, tokenizer files, configs,
processor configs, code a config's auto_map names), matched by name from a folder holding a
listed file, against a record of the folder (a manifest or a signature; an index records its
shards alone, so a config beside them is outside what it can vouch for, as before).
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from inspector import formats
from inspector.core.vocabulary import FileStatus
from inspector.formats.archives.zipread import read_zip
from inspector.integrity.folder_walk import LOADED_HIDDEN
from inspector.integrity.loader_names import loader_read
from inspector.integrity.manifest import Manifest
from inspector.integrity.regular_file import open_regular
from inspector.integrity.shard_index import (
    ORPHAN_NOTE,
    ShardError,
    ShardIndex,
    is_index,
    orphan_shards,
    read_index,
)

UNLISTED_SHARD_NOTE = ("a shard that an index the manifest lists names, so the model loads it, "
                       "but the manifest does not list it: it was not verified")
WEIGHTS_NOTE = ("its bytes are a {} checkpoint, which a loader may read as the model's weights "
                "(a folder's loader picks its own file among several), but nothing on record "
                "lists it: it was not verified")
LOADED_HIDDEN_NOTE = ("a file the loader reads (a torch.distributed.checkpoint folder's map of "
                      "its tensors to their bytes), but nothing on record lists it: it was not "
                      "verified")
LOADER_NAME_NOTE = ("a file a model's loader reads from its folder when present ({}), "
                    "but nothing on record lists it: it was not verified")
WEIGHT_FORMATS = frozenset(formats.loadable())
"""What an unlisted file's bytes must not be (the formats the jailed worker loads)."""


class ExtraRecord(Protocol):
    """A file verdict (`verify.FileCheck`): an extra's path is where it was found."""

    path: str
    status: str
    note: str | None


@dataclass(frozen=True)
class LoadedExtras:
    """The extra files an index picks, found over every pair planned, by absolute path, with
    the status and note each gets; any other extra in one of `folders` (those holding a listed
    file, absolute) is judged by its name, then its own bytes (`mark`)."""

    picked: dict[str, tuple[FileStatus, str]] = field(default_factory=dict)
    folders: frozenset[str] = frozenset()
    by_name: bool = True
    """Judge extras by `loader_names` too: a record of the folder (a manifest, a signature),
    not an index, which records the weights' shards and no other file by design."""

    def mark(self, files: Iterable[ExtraRecord]) -> None:
        """Each extra that a loader reads becomes no tolerated extra: an index's pick, a
        hidden file a loader reads, a file named as one a loader reads, or a file whose bytes
        are a checkpoint format."""
        for record in files:
            if record.status == FileStatus.EXTRA:
                record.status, record.note = self._verdict(record)

    def _verdict(self, record: ExtraRecord) -> tuple[str, str | None]:
        where = os.path.abspath(record.path)
        picked = self.picked.get(where)
        if picked is not None:
            return picked
        # before the folder test: a name may sit in a subfolder of the model's folder
        named = loader_read(where, self.folders) if self.by_name else None
        if named is not None:
            return FileStatus.UNCHECKED, LOADER_NAME_NOTE.format(named.changes)
        if os.path.dirname(where) not in self.folders:
            return record.status, record.note
        if os.path.basename(record.path) in LOADED_HIDDEN:
            return FileStatus.UNCHECKED, LOADED_HIDDEN_NOTE
        fmt = weights_format(Path(record.path))
        if fmt is not None:
            return FileStatus.UNCHECKED, WEIGHTS_NOTE.format(fmt)
        return record.status, record.note


def loaded_extras(manifest: Manifest, pairs: Iterable[tuple[object, Path]]) -> LoadedExtras:
    """What the indexes pick among the files `pairs` plans (a batch finds them once over every
    pair, then marks each file's result before it is kept): against an index manifest, the
    orphans of its set; against any, the shards a listed `*.index.json` names."""
    picked: dict[str, tuple[FileStatus, str]] = {}
    pairs = list(pairs)
    listed = [location for entry, location in pairs if entry is not None and is_index(location)]
    if manifest.dialect == "index" and manifest.source is not None:
        _pick(picked, [manifest.source], orphan_shards, FileStatus.ORPHAN, ORPHAN_NOTE)
    _pick(picked, listed, ShardIndex.shards, FileStatus.UNCHECKED, UNLISTED_SHARD_NOTE)
    return LoadedExtras(picked, model_folders(location for entry, location in pairs
                                              if entry is not None),
                        by_name=manifest.dialect != "index")


def model_folders(listed: Iterable[str | os.PathLike[str]]) -> frozenset[str]:
    """The folders (absolute) that hold a listed file: where a loader picks among files."""
    return frozenset(os.path.dirname(os.path.abspath(path)) for path in listed)


def _pick(picked: dict[str, tuple[FileStatus, str]], indexes: list[Path],
          names: Callable[[ShardIndex], Iterable[str]], status: FileStatus, note: str) -> None:
    """The files `names` of each readable index picks (an earlier pick stays)."""
    for index_path in indexes:
        try:
            found = names(read_index(index_path))
        except (ShardError, OSError):
            continue
        for name in found:
            picked.setdefault(os.path.abspath(index_path.parent / name), (status, note))


def weights_format(path: Path) -> str | None:
    """The checkpoint format a loader would read `path`'s bytes as (of `WEIGHT_FORMATS`), or
    None: a regular file only (a link is never read through), recognised from its first bytes
    as the scan does (a zip by its member names: torch's, TorchScript's, torch.export's)."""
    if path.is_symlink():
        return None
    try:
        handle, st = open_regular(path, "not read")
    except OSError:
        return None
    with handle:
        head = handle.read(formats.HEAD_BYTES)
        spec = formats.detect(head, st.st_size)
        kind = spec.format if spec is not None else formats.sniff(head, st.st_size)
        if kind == "zip":
            kind = _zip_kind(handle)
    return kind if kind in WEIGHT_FORMATS else None


def _zip_kind(handle) -> str:
    """What kind of zip an open file is, from its central directory's names (`zip_kind`)."""
    try:
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
            names = [m.name for m in read_zip(view).members]
    except Exception:  # no central directory a reader could use: no archive a loader reads
        return "zip"
    return formats.zip_kind(names)
