"""What a folder holds, as a manifest names it: its files (hidden names skipped) and the links
to folders in it (never followed, each reported), and what a path that is no plain file is."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from inspector.integrity.regular_file import kind_of


@dataclass(frozen=True)
class FolderWalk:
    """What a folder holds: its files, and the links to folders in it, which are never
    followed (a manifest's names are read inside one folder) but each reported."""

    files: list[Path]
    folder_links: list[Path]


def walk_folder(root: Path) -> FolderWalk:
    """Every file under a folder and every link to a folder in it, skipping hidden names
    (.git, editors' and our temp files)."""
    files: list[Path] = []
    links: list[Path] = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        links += [Path(folder, d) for d in dirs if os.path.islink(os.path.join(folder, d))]
        files += [Path(folder, n) for n in sorted(names) if not n.startswith(".")]
    return FolderWalk(files, links)


def list_files(root: Path) -> list[Path]:
    """Every file under a folder, skipping hidden names (.git, editors' and our temp files)."""
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
