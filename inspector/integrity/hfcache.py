"""The Hugging Face hub cache, checked offline: every blob against the hash that is its name.

Layout (`~/.cache/huggingface/hub`): one folder per repository, `models--org--name` (or
`datasets--`, `spaces--`), holding `blobs/<hash>` and `snapshots/<revision>/<path>`, where each
file of a revision is a link to its blob. A blob's name is the file's ETag on the Hub: the
SHA-256 of its content for a Git LFS file (every weight file), the Git blob SHA-1 (SHA-1 of
`blob <size>\\0` + content) for a small file kept in Git (config, tokenizer). Both are
recomputed here, so a cache is verified without a network. A blob named otherwise, a snapshot
file that is a copy rather than a link (caches made without symlink support) and an unfinished
`.incomplete` download have nothing offline to check against and are reported as unchecked.
A snapshot link is checked against the blob it names, which must be a file in the repository's
own blobs: a blob that is itself a link (its name one hash, the bytes a loader reads another
file's) is reported unchecked and never read.

Paths in results are the user's: the snapshot link as reached from the folder given, never
the blob it points to (a blob appears under its own name only when no snapshot links to it).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from inspector.core.progress import CancelToken, ProgressFn, check
from inspector.integrity.folder_walk import unread_note
from inspector.integrity.hashing import CHUNK_BYTES, ByteProgress, sha256_file
from inspector.integrity.verify import (
    MISMATCH,
    MISSING,
    OK,
    UNCHECKED,
    FileCheck,
    VerifyResult,
)

REPO_PREFIXES = ("models--", "datasets--", "spaces--")
SHA256 = "sha256"
GIT_SHA1 = "git-sha1"


@dataclass
class BlobUse:
    """One blob and the user's paths (snapshot links) that lead to it."""

    blob: Path
    links: list[Path] = field(default_factory=list)


@dataclass
class CacheScope:
    """What a verify of one path covers: blobs to hash, dangling links, unlinked copies."""

    blobs: dict[str, BlobUse] = field(default_factory=dict)
    dangling: list[Path] = field(default_factory=list)
    copies: list[Path] = field(default_factory=list)
    unread: list[tuple[Path, str]] = field(default_factory=list)
    """Links not read through, each with why: to a folder, or to a file outside the
    repository's own blobs (a blob that matches its own name anywhere proves nothing here)."""


def blob_algorithm(name: str) -> str | None:
    """The hash a blob's name is: sha256 (64 hex), git-sha1 (40 hex) or None."""
    if all(c in "0123456789abcdef" for c in name):
        return {64: SHA256, 40: GIT_SHA1}.get(len(name))
    return None


def git_blob_sha1(
    path: str | os.PathLike[str],
    progress: ProgressFn | None = None,
    cancel: CancelToken | None = None,
) -> str:
    """The Git blob id of a file: SHA-1 over `blob <size>\\0` and the content."""
    size = os.path.getsize(path)
    digest = hashlib.sha1(b"blob %d\0" % size, usedforsecurity=False)
    done = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK_BYTES):
            check(cancel)
            digest.update(chunk)
            done += len(chunk)
            if progress is not None:
                progress(done, size)
    return digest.hexdigest()


def repo_folder(path: Path) -> Path | None:
    """The `models--org--name` folder a path lies in (or is), judged without following links."""
    here = Path(os.path.abspath(path))
    for folder in (here, *here.parents):
        if folder.name.startswith(REPO_PREFIXES) and (folder / "snapshots").is_dir():
            return folder
    return None


def cache_repos(path: Path) -> list[Path]:
    """The repository folders of a cache folder, or of its `hub/` (`~/.cache/huggingface`)."""
    for folder in (path, path / "hub"):
        if folder.is_dir():
            repos = sorted(
                child
                for child in folder.iterdir()
                if child.name.startswith(REPO_PREFIXES) and (child / "snapshots").is_dir()
            )
            if repos:
                return repos
    return []


def is_cache_path(path: Path) -> bool:
    """True for a cache folder, a repository folder, or anything under a repository folder."""
    return repo_folder(path) is not None or bool(cache_repos(path))


def scope(path: Path) -> CacheScope:
    """Blobs, dangling links and copies that verifying `path` covers."""
    out = CacheScope()
    repo = repo_folder(path)
    if repo is None:
        for child in cache_repos(path):
            _add_repo(out, child, Path(path) / child.relative_to(path))
    elif Path(os.path.abspath(path)) == repo:
        _add_repo(out, repo, Path(path))
    else:
        _add_links(out, repo, Path(path))
    return out


def _add_repo(out: CacheScope, repo: Path, shown: Path) -> None:
    """A whole repository: every snapshot, then every blob no snapshot links to."""
    _add_links(out, repo, shown / "snapshots")
    blobs = repo / "blobs"
    for blob in sorted(blobs.iterdir()) if blobs.is_dir() else []:
        user = shown / "blobs" / blob.name
        if blob.is_symlink():
            out.unread.append((user, _blob_link("a blob", blob)))
        elif os.path.realpath(blob) not in out.blobs and blob.is_file():
            out.blobs[os.path.realpath(blob)] = BlobUse(blob=blob, links=[user])


def _blob_link(what: str, blob: Path) -> str:
    """Why a blob that is a link is not read: `what` ("a blob", "its blob NAME") says which."""
    return (f"{what} is a link (to {os.readlink(blob)}): the cache writes each blob as a file "
            "named by its hash, and a link's name says nothing of the bytes it leads to; not "
            "read")


def _add_links(out: CacheScope, repo: Path, shown: Path) -> None:
    """Snapshot files under `shown` (a folder or one file), by the path the user gave; blobs
    named directly are checked as themselves. A snapshot link is checked against the blob it
    names (the last name in its target): that blob must be a file in the repository's blobs,
    never a link, so the hash its name is is the hash of the bytes a loader reads."""
    blobs = repo / "blobs"
    real_blobs = os.path.realpath(blobs)
    for link in _walk(shown):
        in_blobs = Path(os.path.abspath(link)).parent == blobs
        if not link.is_symlink():
            if in_blobs:
                out.blobs.setdefault(os.path.realpath(link), BlobUse(blob=link)).links.append(link)
            else:
                out.copies.append(link)
            continue
        blob = _named_blob(link)
        if in_blobs or blob.is_symlink():
            out.unread.append((link, _blob_link("a blob", link) if in_blobs
                               else _blob_link(f"its blob {blob.name}", blob)))
        elif blob.is_dir():
            out.unread.append((link, unread_note(link) or ""))
        elif not blob.is_file():
            out.dangling.append(link)
        elif str(blob.parent) != real_blobs:
            out.unread.append((link, f"a link to {blob}, outside {blobs}: not read"))
        else:
            out.blobs.setdefault(str(blob), BlobUse(blob=blob)).links.append(link)


def _named_blob(link: Path) -> Path:
    """The file a link names: its target's folders resolved, its last name kept as written
    (a link to a link is not followed past the name the link gives)."""
    pointed = link.parent / os.readlink(link)
    if pointed.name in ("", ".", ".."):  # names a folder, never a blob
        return Path(os.path.realpath(pointed))
    return Path(os.path.realpath(pointed.parent)) / pointed.name


def _walk(root: Path) -> list[Path]:
    """Files and links under root (snapshot folders are real folders; a link to a folder is
    listed, never followed), or root itself."""
    if not root.is_dir() or root.is_symlink():
        return [root]
    found = []
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        found += [Path(folder, n) for n in sorted(names)]
        found += [Path(folder, d) for d in dirs if os.path.islink(os.path.join(folder, d))]
    return found


def verify_cache(
    path: Path, progress: ProgressFn | None = None, cancel: CancelToken | None = None
) -> VerifyResult:
    """Check every blob `path` reaches against its own name; no manifest, no network."""
    covered = scope(path)
    plan = [(use, blob_algorithm(use.blob.name)) for use in covered.blobs.values()]
    track = ByteProgress(progress, sum(use.blob.stat().st_size for use, algo in plan if algo))
    result = VerifyResult(strict=True)
    for use, algorithm in plan:
        check(cancel)
        size = use.blob.stat().st_size
        actual = None
        if algorithm is not None:
            hasher = sha256_file if algorithm == SHA256 else git_blob_sha1
            actual = hasher(use.blob, track.for_file(), cancel)
        for link in use.links:
            record = FileCheck(
                path=str(link), status=OK, actual_size=size, algorithm=algorithm
            )
            if algorithm is None:
                record.status = UNCHECKED
                record.note = (
                    "an unfinished download"
                    if use.blob.name.endswith(".incomplete")
                    else f"blob {use.blob.name!r} is not named by a SHA-256 or Git SHA-1, so "
                    "nothing offline says what it should hold"
                )
            else:
                record.expected, record.actual = use.blob.name, actual
                record.status = OK if actual == use.blob.name else MISMATCH
            result.files.append(record)
    for link in covered.dangling:
        result.files.append(
            FileCheck(path=str(link), status=MISSING, note="the link's blob is not in the cache")
        )
    for link, why in covered.unread:
        result.files.append(FileCheck(path=str(link), status=UNCHECKED, note=why))
    for copy in covered.copies:
        note = "a copy, not a link to a blob, so its hash is not known offline"
        result.files.append(
            FileCheck(path=str(copy), status=UNCHECKED, actual_size=_size(copy), note=note)
        )
    if not result.files:
        result.errors.append(f"{path}: no cached files found")
    return result


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None
