"""Checkpoints in object storage: `s3://…` and other fsspec URLs beside local paths.

Objects are listed under a URL (one object, or every object under a prefix), streamed in
bounded chunks (never whole in memory) and hashed while they stream. Nothing that parses or
loads a checkpoint ever sees a network client: a step that needs the bytes gets a private
local copy (`local_tree`: a 0700 temp folder that is deleted afterwards) and every output
names the URL, never the temp path (`Relabel`). Credentials and the endpoint come from the
usual environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL), read by
botocore. s3:// needs s3fs (the `s3` extra); a missing one is a one-line error naming it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inspector.core.errors import CodedError
from inspector.core.progress import CancelToken, ProgressFn, check

CHUNK = 8 << 20
"""Bytes read from the network at a time: memory stays bounded whatever the object's size."""
TEMP_PREFIX = "ckpt-inspector-obj-"
_EXTRAS = {"s3": "s3", "s3a": "s3"}


class ObjectStoreError(CodedError):
    """A URL that cannot be listed or read; the message is one line and names the next step."""


@dataclass(frozen=True)
class RemoteObject:
    """One object: its URL, listed size and ETag (changes when the object is written again)."""

    url: str
    size: int
    etag: str | None = None

    @property
    def identity(self) -> list[Any]:
        """What says the object changed since a result was kept (as a local file's size and
        modification time do)."""
        return [self.size, self.etag]


def _filesystem(url: str):
    """The fsspec filesystem for `url` and the path inside it."""
    import fsspec

    scheme = url.split("://", 1)[0].lower()
    try:
        return fsspec.core.url_to_fs(url)
    except ImportError:
        extra = _EXTRAS.get(scheme, scheme)
        raise ObjectStoreError(
            "objstore_missing_driver",
            f"{url}: reading {scheme}:// needs its fsspec driver; install it with "
            f"pip install 'checkpoint-inspector[{extra}]'") from None
    except ValueError as exc:
        raise ObjectStoreError("objstore_bad_url", f"{url}: {exc}") from None


def _failure(url: str, exc: BaseException) -> ObjectStoreError:
    """A network or storage failure as one line (botocore's own errors carry no errno)."""
    if isinstance(exc, FileNotFoundError):
        return ObjectStoreError("objstore_missing", f"{url}: no such bucket, object or prefix; "
                                "check the URL (and AWS_ENDPOINT_URL for a private server)")
    text = " ".join(str(exc).split()) or type(exc).__name__
    return ObjectStoreError("objstore_failed", f"{url}: cannot read from object storage: "
                            f"{text}; check the credentials (AWS_ACCESS_KEY_ID, "
                            "AWS_SECRET_ACCESS_KEY) and AWS_ENDPOINT_URL")


def list_objects(url: str) -> list[RemoteObject]:
    """The object `url` names, or every object under it as a prefix (sorted by key)."""
    fs, path = _filesystem(url)
    try:
        info = fs.info(path)
        if info.get("type") != "directory":
            return [_remote(fs, path, info)]
        found = fs.find(path, detail=True)
    except Exception as exc:  # a network boundary: every failure becomes one line
        raise _failure(url, exc) from None
    objects = [_remote(fs, key, meta) for key, meta in sorted(found.items())
               if meta.get("type") != "directory"]
    if not objects:
        raise ObjectStoreError("objstore_missing", f"{url}: the prefix holds no object")
    return objects


def _remote(fs, key: str, meta: dict[str, Any]) -> RemoteObject:
    etag = meta.get("ETag") or meta.get("etag")
    return RemoteObject(fs.unstrip_protocol(key), int(meta.get("size") or 0),
                        str(etag).strip('"') if etag else None)


def relative_key(obj: RemoteObject, base: str) -> str:
    """The object's key below the URL it was listed under ("" for that object itself)."""
    return obj.url[len(base.rstrip("/")):].lstrip("/")


def stream(obj: RemoteObject, cancel: CancelToken | None = None) -> Iterator[bytes]:
    """The object's bytes, CHUNK at a time."""
    fs, path = _filesystem(obj.url)
    try:
        with fs.open(path, "rb", block_size=CHUNK, cache_type="none") as fh:
            while True:
                check(cancel)
                data = fh.read(CHUNK)
                if not data:
                    return
                yield data
    except (ObjectStoreError, GeneratorExit):
        raise
    except Exception as exc:
        raise _failure(obj.url, exc) from None


def sha256_object(obj: RemoteObject, progress: ProgressFn | None = None,
                  cancel: CancelToken | None = None) -> str:
    """The object's SHA-256, hashed as it streams (nothing kept)."""
    return _copy(obj, None, progress, cancel)


def _copy(obj: RemoteObject, dest: Path | None, progress: ProgressFn | None,
          cancel: CancelToken | None) -> str:
    digest, done = hashlib.sha256(), 0
    with open(dest, "xb") if dest is not None else contextlib.nullcontext() as out:
        for data in stream(obj, cancel):
            digest.update(data)
            if out is not None:
                out.write(data)
            done += len(data)
            if progress is not None:
                progress(done, obj.size)
    return digest.hexdigest()


def read_range(obj: RemoteObject, start: int, end: int) -> bytes:
    """Bytes [start, end) of the object, one range request."""
    fs, path = _filesystem(obj.url)
    try:
        return fs.cat_file(path, start=start, end=end)
    except Exception as exc:
        raise _failure(obj.url, exc) from None


def safetensors_header_bytes(obj: RemoteObject) -> bytes:
    """A safetensors object's length prefix and JSON header, read with two range requests
    (the tensors' data is never fetched)."""
    from inspector.formats.safetensors_header import MAX_HEADER

    prefix = read_range(obj, 0, 8)
    length = int.from_bytes(prefix, "little") if len(prefix) == 8 else 0
    return prefix + read_range(obj, 8, 8 + min(length, MAX_HEADER, max(obj.size - 8, 0)))


@dataclass
class Relabel:
    """Local copies' paths back to the URLs they came from, in any output (text or JSON)."""

    pairs: list[tuple[str, str]] = field(default_factory=list)

    def add(self, local: str | os.PathLike[str], url: str) -> None:
        """Name `local` (a file or folder, and everything under it) as `url`."""
        self.pairs.append((os.fspath(local), url.rstrip("/") if len(url) > 1 else url))
        self.pairs.sort(key=lambda p: -len(p[0]))  # the longest local path wins

    def text(self, value: str) -> str:
        """`value` with every local copy's path replaced by its URL."""
        for local, url in self.pairs:
            value = value.replace(local, url)
        return value

    def json(self, value: Any) -> Any:
        """A JSON value (dicts, lists, strings) with every path relabelled."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(k) if isinstance(k, str) else k: self.json(v)
                    for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.json(v) for v in value]
        return value


@dataclass
class LocalTree:
    """Private local copies of the objects under one URL, laid out by key below `root`."""

    url: str
    root: Path
    objects: list[RemoteObject]
    sha256: dict[str, str]
    """URL -> the SHA-256 computed while it streamed."""
    copies: dict[str, RemoteObject] = field(default_factory=dict)
    """Local copy's path -> the object it holds (what a batch keeps a result under)."""

    @property
    def path(self) -> Path:
        """The local path that stands for `url`: the copied object, or the prefix's folder."""
        if len(self.objects) == 1 and relative_key(self.objects[0], self.url) == "":
            return self.root / _name(self.objects[0].url)
        return self.root


def _name(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1] or "object"


@contextlib.contextmanager
def temp_folder() -> Iterator[Path]:
    """A 0700 folder of our own under the temp directory, removed with what it holds."""
    root = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def fetch(obj: RemoteObject, dest: Path, cancel: CancelToken | None = None) -> str:
    """Stream one object into the new local file `dest` (0600); its SHA-256."""
    dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    return _copy(obj, dest, None, cancel)


def place_copy(root: Path, rel: str, url: str) -> Path:
    """Where an object's copy goes under `root`: its key's own path when that is a plain file
    name free in the tree; else (a key of `..`, `.` or empty segments, or one that clashes
    with a folder another key needs) a name of its own, so one odd key never ends a scan."""
    parts = rel.split("/")
    dest = root.joinpath(*parts)
    plain = all(p not in ("", ".", "..") for p in parts)
    if plain and not dest.exists() and not any(p.is_file() for p in dest.parents):
        return dest
    tag = hashlib.sha256(url.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    name = parts[-1] if parts[-1] not in ("", ".", "..") else "object"
    return root / "~odd-keys" / tag / name


@contextlib.contextmanager
def local_tree(url: str, objects: list[RemoteObject] | None = None,
               cancel: CancelToken | None = None) -> Iterator[LocalTree]:
    """Every object under `url` (or those given) copied into a private temp folder, deleted
    when the block ends."""
    objects = list_objects(url) if objects is None else objects
    with temp_folder() as root:
        hashes, copies = {}, {}
        for obj in objects:
            rel = relative_key(obj, url) or _name(obj.url)
            dest = place_copy(root, rel, obj.url)
            hashes[obj.url] = fetch(obj, dest, cancel)
            copies[str(dest)] = obj
        yield LocalTree(url, root, objects, hashes, copies)
