"""What a folder holds, as a manifest names it: its files (hidden names skipped, but never one a
loader reads) and the links to folders in it (never followed, each reported), and what a path
that is no plain file is."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from inspector.integrity.regular_file import kind_of
from inspector.layout.dcp_items import METADATA_NAME

LOADED_HIDDEN = frozenset({METADATA_NAME})
"""Hidden names a loader reads, kept in every walk: a torch.distributed.checkpoint folder's
`.metadata` (at any depth), which maps each tensor to its bytes in the data files."""
GIT_PATHS = (".git", ".github", ".gitattributes", ".gitignore")
"""Git's own files at a folder's top: left out of a walk that sees hidden names, as the
reference signer leaves them out of every signature unless told otherwise."""


def entry_location(path: Path) -> Path:
    """Where a folder entry lies: the links above it resolved, its own name kept (a file reached
    through a linked folder is the same entry; a name that is itself a link stays that link)."""
    path = Path(path)
    return Path(os.path.realpath(path.parent), path.name)


@dataclass(frozen=True)
class FolderWalk:
    """What a folder holds: its files, and the links to folders in it, which are never
    followed (a manifest's names are read inside one folder) but each reported."""

    files: list[Path]
    folder_links: list[Path]


def walk_folder(root: Path, hidden: bool = False) -> FolderWalk:
    """Every file under a folder and every link to a folder in it. Hidden names (editors' and
    our temp files) are skipped unless `hidden` (what `verify --strict` sees), but never one a
    loader reads (`LOADED_HIDDEN`); Git's own files at the top are always left out."""
    files: list[Path] = []
    links: list[Path] = []
    top = os.fspath(root)
    for folder, dirs, names in os.walk(root):
        skip = GIT_PATHS if folder == top else ()
        dirs[:] = sorted(d for d in dirs if d not in skip and (hidden or not d.startswith(".")))
        links += [Path(folder, d) for d in dirs if os.path.islink(os.path.join(folder, d))]
        files += [Path(folder, n) for n in sorted(names) if n not in skip and (
            hidden or not n.startswith(".") or n in LOADED_HIDDEN)]
    return FolderWalk(files, links)


def list_files(root: Path) -> list[Path]:
    """Every file under a folder, hidden names skipped but those a loader reads (`walk_folder`)."""
    return walk_folder(root).files


def unread_note(path: Path) -> str | None:
    """What a path that is no plain file is, said beside it: a link (never read through: a
    linked folder is not followed, a linked file's bytes are not the folder's), or a FIFO or
    a device (never read); None for a plain file or nothing at all."""
    if path.is_symlink():
        target = os.readlink(path)
        if path.is_dir():
            return f"a link to a folder ({target}): not followed, nothing in it was checked"
        return f"a link to {target}" + ("" if path.exists() else ", which does not exist")
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) else f"{kind_of(mode)}, not a regular file: not read"
