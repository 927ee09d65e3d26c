"""Verify one file at a time for a batch job (`--shard`, `--results`), and objects in storage.

`verify_each` runs `integrity.verify` on each planned pair this process owns, keeps each file's
verify JSON in the results file as it finishes (kind `verify.result`, which `merge` joins by
path into a report) and takes the ones an earlier run kept; an extra file a loader reads
(`extras`: found over every pair first) is marked so before its result is kept, so the results
file says what the plain `verify` would. `verify_objects` checks the
objects under a URL against a manifest: the listed size first (a size mismatch downloads
nothing), then the SHA-256 as the object streams; tensors, when the manifest records them, are
read by the digest function from a private local copy made by the same stream.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from inspector.core.progress import CancelToken, ProgressFn, check
from inspector.core.termtext import counted
from inspector.fleet import objstore
from inspector.fleet.jobs import Where
from inspector.fleet.objstore import RemoteObject
from inspector.formats.safetensors_header import read_buffer
from inspector.integrity.extras import loaded_extras
from inspector.integrity.hashing import ByteProgress, HashAhead
from inspector.integrity.manifest import FileEntry, Manifest
from inspector.integrity.verify import (
    EXTRA,
    MISMATCH,
    MISSING,
    OK,
    SIZE_MISMATCH,
    FileCheck,
    Plan,
    TensorCheck,
    TensorDigestFn,
    VerifyResult,
    _checks_tensors,
    compare_tensors,
    from_header,
    hash_targets,
    header_tensors,
    verify,
)

if TYPE_CHECKING:
    from concurrent.futures import Future

VERIFY_KIND = "verify.result"


class Keeper(Protocol):
    """The share of a batch this process runs, and its kept results (`cli.common.Batch`)."""

    def owns(self, key: str) -> bool: ...

    def finished(self, key: str, path: Where) -> Mapping[str, Any] | None: ...

    def record(self, key: str, path: Where, result: Mapping[str, Any]) -> None: ...


def pending(pairs: Plan, keeper: Keeper) -> Plan:
    """The pairs this process owns whose result is not kept yet (what tensor digests run on)."""
    return [p for p in pairs if keeper.owns(str(p[1])) and keeper.finished(str(p[1]), p[1])
            is None]


def verify_each(manifest: Manifest, pairs: Plan, keeper: Keeper,
                tensor_digests: TensorDigestFn | None = None, strict: bool = False,
                cancel: CancelToken | None = None,
                progress: ProgressFn | None = None) -> VerifyResult:
    """`verify` of the owned pairs one file at a time, each kept as it finishes, with the
    extras a loader reads marked first (what the indexes among all the pairs pick is found
    once); the files still to do are hashed a core each at once, ahead of their turn."""
    targets = hash_targets(pending(pairs, keeper))
    track = ByteProgress(progress, sum(p.stat().st_size for p in targets))
    loaded = loaded_extras(manifest, pairs)
    with HashAhead(targets, track, cancel) as hashes:
        jobs = [(str(location), location, _one(manifest, (entry, location), tensor_digests,
                                                strict, cancel, hashes))
                for entry, location in pairs]
        return _each(jobs, keeper, manifest, strict, cancel, loaded.mark)


def _one(manifest: Manifest, pair: tuple[FileEntry | None, Path],
         digests: TensorDigestFn | None, strict: bool, cancel: CancelToken | None,
         hashes: HashAhead) -> Callable[[], VerifyResult]:
    return lambda: verify(manifest, pairs=[pair], tensor_digests=digests, strict=strict,
                          cancel=cancel, whole=False, hashes=hashes)


def _each(jobs: list[tuple[str, Where, Callable[[], VerifyResult]]], keeper: Keeper,
          manifest: Manifest, strict: bool, cancel: CancelToken | None,
          mark: Callable[[list[FileCheck]], None] | None = None) -> VerifyResult:
    """Each owned job's result, kept or run; `mark` judges a part's extras before it is kept
    (a kept one again: a results file is not trusted to have)."""
    result = VerifyResult(strict=strict)
    for key, where, job in jobs:
        check(cancel)
        if not keeper.owns(key):
            continue
        kept = keeper.finished(key, where)
        part = VerifyResult.from_json(dict(kept)) if kept is not None else job()
        if mark is not None:
            mark(part.files)
        if kept is None:
            source = str(manifest.source) if manifest.source is not None else None
            keeper.record(key, where, {"manifest": source, "dialect": manifest.dialect,
                                       **part.to_json()})
        result.files += part.files
        result.tensors += part.tensors
        result.errors += part.errors
    return result


def compared_nothing(result: VerifyResult) -> bool:
    """Whether a verify compared no file or tensor with the record (extras only, or none)."""
    return not result.tensors and all(f.status == EXTRA for f in result.files)


def nothing_checked_part(manifest: Manifest, shard: str, where: str) -> str:
    """Why one shard of a batch that compared nothing is no pass either."""
    return (f"nothing was checked by shard {shard}: it owns none of the "
            f"{counted(len(manifest.files), 'file')} the manifest lists found under {where} (the "
            "other shards may own them all; a shard that checks nothing fails so that no "
            "gate passes on it): run no more shards than there are files, and give every "
            "shard the same paths")


class Unbatched:
    """No batch (no --shard, no --results): every file is this process's, nothing is kept."""

    def owns(self, key: str) -> bool:
        """Every file."""
        return True

    def finished(self, key: str, path: Where) -> None:
        """Nothing was kept."""
        return None

    def record(self, key: str, path: Where, result: Mapping[str, Any]) -> None:
        """Nothing is kept."""
        return None


def verify_objects(manifest: Manifest, url: str, keeper: Keeper | None = None,
                   tensor_digests: TensorDigestFn | None = None, strict: bool = False,
                   cancel: CancelToken | None = None) -> VerifyResult:
    """The objects under `url` (an object, or a prefix standing for the manifest's folder)
    against the manifest; each check's path is the object's URL."""
    objects = objstore.list_objects(url)
    single = len(objects) == 1 and objstore.relative_key(objects[0], url) == ""
    by_key = {objstore.relative_key(o, url): o for o in objects}
    if manifest.source is not None:  # the manifest uploaded beside the files is not one
        by_key.pop(manifest.source.name, None)
    if single:
        entry = _entry_for_name(manifest, objects[0].url.rsplit("/", 1)[-1])
        checks = [(entry, objects[0], objects[0].url)]
    else:
        checks = [(entry, by_key.pop(entry.path, None), f"{url.rstrip('/')}/{entry.path}")
                  for entry in manifest.files]
        checks += [(None, obj, obj.url) for obj in by_key.values()]
    keeper = keeper or Unbatched()
    # imported here: concurrent.futures pulls in logging (see integrity.verify.measure_file)
    from concurrent.futures import ThreadPoolExecutor

    # a few objects stream at once: one stream is bound by the round trip per chunk, not the
    # link (memory stays HASH_STREAMS chunks); results still come out in the manifest's order
    pool = ThreadPoolExecutor(max_workers=HASH_STREAMS, thread_name_prefix="object-hash")
    try:
        ahead = {obj.url: pool.submit(objstore.sha256_object, obj, None, cancel)
                 for entry, obj, where in checks
                 if _streams_hash(entry, obj, tensor_digests) and keeper.owns(where)
                 and keeper.finished(where, obj) is None}
        jobs = [_object_job(entry, obj, where, tensor_digests, strict, cancel, ahead)
                for entry, obj, where in checks]
        return _each(jobs, keeper, manifest, strict, cancel)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


HASH_STREAMS = 4
"""Objects hashed at once by `verify_objects`."""


def _streams_hash(entry: FileEntry | None, obj: RemoteObject | None,
                  digests: TensorDigestFn | None) -> bool:
    """Whether checking `obj` against `entry` is a plain streamed hash (no tensors)."""
    return (entry is not None and obj is not None and bool(entry.sha256)
            and entry.size in (None, obj.size)
            and not (digests is not None and _checks_tensors(entry, obj.size)
                     and not from_header(entry)))


def _header_checks(entry: FileEntry, obj: RemoteObject, where: str,
                   result: VerifyResult) -> list[TensorCheck]:
    """The record's tensor listing against the object's safetensors header, read with range
    requests: the tensors' data is never downloaded."""
    header = read_buffer(objstore.safetensors_header_bytes(obj), obj.size)
    try:
        tensors = header_tensors(header)
    except ValueError as exc:
        result.errors.append(f"{where}: tensors not checked: {exc}")
        return []
    return compare_tensors(entry.tensors or [], tensors, where)


def _entry_for_name(manifest: Manifest, name: str) -> FileEntry | None:
    if manifest.dialect == "git-lfs":
        return manifest.files[0]
    named = [e for e in manifest.files if e.path.rsplit("/", 1)[-1] == name]
    return named[0] if len(named) == 1 else None


def _object_job(entry: FileEntry | None, obj: RemoteObject | None, where: str,
                digests: TensorDigestFn | None, strict: bool, cancel: CancelToken | None,
                ahead: dict[str, Future[str]]) -> tuple[str, Where, Callable[[], VerifyResult]]:
    return where, obj or where, lambda: _check_object(entry, obj, where, digests, strict,
                                                     cancel, ahead)


def _check_object(entry: FileEntry | None, obj: RemoteObject | None, where: str,
                  digests: TensorDigestFn | None, strict: bool, cancel: CancelToken | None,
                  ahead: dict[str, Future[str]]) -> VerifyResult:
    result = VerifyResult(strict=strict)
    size = obj.size if obj is not None else None
    if entry is None:
        result.files.append(FileCheck(path=where, status=EXTRA, actual_size=size))
        return result
    record = FileCheck(path=where, status=OK, expected=entry.sha256,
                       expected_size=entry.size, actual_size=size)
    result.files.append(record)
    if obj is None:
        record.status = MISSING
    elif entry.size is not None and entry.size != obj.size:
        record.status = SIZE_MISMATCH  # the listing says so: nothing is downloaded
    elif digests is not None and _checks_tensors(entry, obj.size) and not from_header(entry):
        with objstore.temp_folder() as root:
            local = root / (where.rsplit("/", 1)[-1] or "object")
            record.actual = objstore.fetch(obj, local, cancel)
            try:
                tensors = digests(local, cancel=cancel)
            except Exception as exc:  # the worker's failure is a verdict on this object
                why = str(exc).replace(str(local), where)
                result.errors.append(f"{where}: tensors not checked: {why}")
            else:
                result.tensors += compare_tensors(entry.tensors or [], tensors, where)
    else:
        if digests is not None and _checks_tensors(entry, obj.size):  # from_header
            result.tensors += _header_checks(entry, obj, where, result)
        if entry.sha256:
            started = ahead.get(obj.url)
            record.actual = (started.result() if started is not None
                             else objstore.sha256_object(obj, cancel=cancel))
    if record.status == OK and entry.sha256 and record.actual != entry.sha256:
        record.status = MISMATCH
    return result
