"""The one way a folder becomes a list of files to scan.

Every file is listed, hidden ones included (a payload can hide behind a dot), and whatever its
name: the scanner decides what a file is from its bytes. Symbolic links to files are followed
(a loader reads the target), links to folders are not (no loops). A file reached twice, such as
a Hugging Face cache's `blobs/<sha256>` and the `snapshots/<rev>/<name>` link to it, is listed
once, under the link's name: the name a user and a loader know it by.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Found:
    """A file to scan; `in_folder` when it came from walking a folder, not named directly."""

    path: Path
    in_folder: bool


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None  # a broken link or a file that vanished: listed, the scan says why
    return st.st_dev, st.st_ino


def _walk(root: Path) -> Iterator[Path]:
    for folder, dirs, files in os.walk(root, onerror=None):
        dirs.sort()
        for name in sorted(files):
            yield Path(folder) / name


def discover(paths: Iterable[str | os.PathLike]) -> Iterator[Found]:
    """Files under `paths` (folders recursed, sorted), each real file once."""
    for raw in paths:
        root = Path(raw)
        if not root.is_dir():
            yield Found(root, False)
            continue
        chosen: dict[tuple[int, int] | Path, Path] = {}
        for path in _walk(root):
            key = _identity(path) or path
            kept = chosen.get(key)
            if kept is None or (path.is_symlink() and not kept.is_symlink()):
                chosen[key] = path
        for path in sorted(chosen.values(), key=lambda p: p.relative_to(root).parts):
            yield Found(path, True)
