"""The one way a folder becomes a list of files to scan, and a line for every entry of it.

Every file is listed, hidden ones included (a payload can hide behind a dot), and whatever its
name: the scanner decides what a file is from its bytes. Symbolic links are followed, as a
loader given the folder follows them: a file link to its target, a folder link into its
folder, with two protections. Loops: a folder is walked once (by device and inode); a link to
a folder walked already, or to a folder that holds the scanned one (walking it would walk the
scan again), is not followed and gets a line saying so. The root: a link that leads outside
the scanned folder is followed, and each file reached through it says where it lies, but a
link inside such a folder that leads out of that folder too is not followed again (a chain of
links cannot wander the disk). A folder that cannot be read gets a line with its error. A file
reached twice, such as a Hugging Face cache's `blobs/<sha256>` and the `snapshots/<rev>/<name>`
link to it, gets one line, under the link's name (the name a user and a loader know it by; for
hard links, the first name in sort order), and that line carries every other name of the file
(`Found.also`): a loader opens files by name, so the scan judges the file under each of them too
(a `config.json` hard-linked to `notes.txt` is a `config.json` to `from_pretrained`; its bytes
are read again only for a name in another folder or with another suffix, `scan.engine`) and the
line names each of them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from inspector.core.vocabulary import Verdict
from inspector.layout.dcp_items import listed_files


@dataclass(frozen=True)
class Unwalked:
    """Why a folder entry was not walked, and the verdict its line takes."""

    why: str
    verdict: Verdict


@dataclass(frozen=True)
class Found:
    """A file to scan; `in_folder` when it came from walking a folder, not named directly.
    `outside`: where the file really lies when a link led outside the scanned folder.
    `unwalked`: set for a folder entry that was not walked (not a file to scan).
    `also`: the file's other names in the walk (hard links, links to it), judged with it."""

    path: Path
    in_folder: bool
    outside: str | None = None
    unwalked: Unwalked | None = None
    also: tuple[Path, ...] = ()


def _identity(path: Path | str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None  # a broken link or a file that vanished: listed, the scan says why
    return st.st_dev, st.st_ino


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


@dataclass(frozen=True)
class _Folder:
    """A folder to walk: where it is named, and the real folder links in it may lead within."""

    path: Path
    bound: str  # the real path links inside it may lead within (the root, or a link's target)
    outside: str | None  # its real path where a link led outside the root


def _walk(root: Path) -> Iterator[Found]:
    """Every entry under `root`, folder links followed as the module docstring says: the real
    folders first, so that a link to one of them is the entry refused as walked already."""
    root_real = os.path.realpath(root)
    walked = {_identity(root)}
    stack = [_Folder(root, root_real, None)]
    links: list[tuple[Path, str, _Folder]] = []  # folder links, followed once no folder is left
    while stack or links:
        if not stack:
            path, real, parent = links.pop(0)
            where = _where(real, root_real, parent, path.name)
            unwalked = _refusal(path, real, root_real, parent, walked)
            if unwalked is not None:
                yield Found(path, True, where, unwalked)
                continue
            walked.add(_identity(path))
            bound = parent.bound if _within(real, parent.bound) else real
            stack.append(_Folder(path, bound, where))
        folder = stack.pop()
        try:
            with os.scandir(folder.path) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            yield Found(folder.path, True, folder.outside, Unwalked(
                f"folder not read: {exc.strerror or exc}", Verdict.ERROR))
            continue
        below = []
        for entry in entries:
            path = Path(entry.path)
            try:
                is_dir = entry.is_dir()  # a link's target decides
            except OSError:
                is_dir = False
            real = os.path.realpath(path) if entry.is_symlink() else None
            if real is not None and is_dir:
                links.append((path, real, folder))
            elif not is_dir:
                yield Found(path, True, _where(real, root_real, folder, entry.name))
            elif _identity(path) not in walked:
                walked.add(_identity(path))
                below.append(_Folder(path, folder.bound, _where(None, root_real, folder,
                                                                entry.name)))
        stack.extend(reversed(below))


def _where(real: str | None, root_real: str, folder: _Folder, name: str) -> str | None:
    """Where an entry really lies when that is outside the scanned folder, else None."""
    if real is not None:
        return None if _within(real, root_real) else real
    return os.path.join(folder.outside, name) if folder.outside else None


def _refusal(path: Path, real: str, root_real: str, folder: _Folder,
             walked: set) -> Unwalked | None:
    """Why a folder entry is not walked (a loop, a second link out of a linked folder), or
    None: it is walked."""
    if _within(root_real, real):
        return Unwalked(f"a link to {real}, which holds the scanned folder: not followed (a "
                        "loop: this scan walks its files already)", Verdict.SKIPPED)
    if _identity(path) in walked:
        return Unwalked(f"a link to {real}, a folder this scan walks already: not followed "
                        "again", Verdict.SKIPPED)
    if folder.outside is not None and not _within(real, folder.bound):
        return Unwalked(f"a link to {real}, out of a folder that is itself outside the scanned "
                        "one: not followed (scan it by its own name)", Verdict.SUSPICIOUS)
    return None


def discover_entries(paths: Iterable[str | os.PathLike]) -> Iterator[Found]:
    """Every entry under `paths` that gets a line: each real file once (folders recursed,
    sorted) with its other names in `also`, and each folder entry that was not walked, with its
    reason."""
    for raw in paths:
        root = Path(raw)
        if not root.is_dir():
            yield Found(root, False)
            continue
        chosen: dict[tuple[int, int] | Path, Found] = {}
        names: dict[tuple[int, int] | Path, list[Path]] = {}
        for found in _walk(root):
            key = (_identity(found.path) if found.unwalked is None else None) or found.path
            names.setdefault(key, []).append(found.path)
            kept = chosen.get(key)
            if kept is None or (found.path.is_symlink() and not kept.path.is_symlink()):
                chosen[key] = found
        lines = []
        for key, found in chosen.items():
            also = sorted({p for p in names[key] if p != found.path},
                          key=lambda p: p.relative_to(root).parts)
            lines.append(replace(found, also=tuple(also)) if also else found)
        yield from sorted(lines, key=lambda f: f.path.relative_to(root).parts)


def discover(paths: Iterable[str | os.PathLike]) -> Iterator[Found]:
    """Files under `paths` (folders recursed, sorted), each real file once."""
    return (f for f in discover_entries(paths) if f.unwalked is None)


def outside_items(path: str | os.PathLike[str]) -> list[str]:
    """The data file names a DCP `.metadata` lists that open no file its folder's walk reaches:
    DCP loads items from them, a scan of the folder never reads them ([] for any other file)."""
    opened = listed_files(path)
    if not opened:
        return []
    inside = {_identity(found.path) for found in discover([os.path.dirname(path)])}
    return [name for name, key in opened if key not in inside]
