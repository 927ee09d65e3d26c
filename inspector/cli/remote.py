"""Object-store URLs on the command line: what `scan`, `verify`, `inspect` and `report` do with
an `s3://…` (or other fsspec) path beside local ones.

`scan` copies one object at a time into a private temp file, scans it there and names the
URL; `verify` checks listed sizes and streams hashes (`integrity.verify_batch.verify_objects`);
`inspect` and `report` run on a private local copy of the object or prefix (a sharded model
needs its shards side by side) and every line they print, and every path in the report,
names the URL. The temp folder is gone when the command ends.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shlex
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from inspector.core.termtext import escape
from inspector.core.vocabulary import Verdict
from inspector.fleet.urls import is_url

if TYPE_CHECKING:  # the store's and verify's modules load only when a URL is given
    from inspector.fleet.jobs import JobSlice, Where
    from inspector.fleet.objstore import RemoteObject
    from inspector.integrity.manifest import Manifest
    from inspector.integrity.verify import VerifyResult


def path_or_url(text: str) -> Path | str:
    """argparse type: a URL stays a string (Path would fold its `//`), anything else a Path."""
    return text if is_url(text) else Path(text)


def url_refusal(command: str, argv: list[str], readers: list[str]) -> str | None:
    """The one line that refuses an object-store URL given to a command that reads local
    files only (an http(s) URL is left to the command: `telemetry --from-prometheus`)."""
    url = next((a for a in argv if is_url(a) and not a.startswith(("http://",
                                                                            "https://"))), None)
    if url is None:
        return None
    copy = f"aws s3 cp{' --recursive' if url.endswith('/') else ''} {escape(url)} ."
    return (f"ckpt-inspector {command}: {escape(url)}: {command} reads local files only; copy "
            f"the object first (e.g. {copy}), or use "
            f"{', '.join(readers[:-1])} or {readers[-1]}, which read object-store URLs")


def batch_command(args: argparse.Namespace) -> str:
    """The verify command line a results file notes for a merge."""
    words = ["ckpt-inspector", "verify", *map(str, args.paths)]
    return shlex.join(words + (["-m", str(args.manifest)] if args.manifest else []))


def verify_options(args: argparse.Namespace) -> dict[str, bool]:
    """The verify options that change a result and are not in `batch_command`."""
    return {"strict": bool(args.strict), "no_tensors": bool(args.no_tensors)}


def verify_remote(args: argparse.Namespace, manifest: Manifest | None) -> VerifyResult:
    """`verify -m M` over paths where some are URLs (or, without M, `--sha256 HEX URL`); a
    URL that cannot be listed is an error line of the result (exit 3), the others are still
    checked."""
    from inspector.cli.common import open_batch, worker_digests
    from inspector.fleet.objstore import ObjectStoreError
    from inspector.integrity.manifest import FileEntry, Manifest
    from inspector.integrity.verify import VerifyResult, plan
    from inspector.integrity.verify_batch import (
        VERIFY_KIND,
        Unbatched,
        verify_each,
        verify_objects,
    )

    if manifest is None:  # one object against a hash given by hand: a one-line manifest
        name = str(args.paths[0]).rstrip("/").rsplit("/", 1)[-1]
        manifest = Manifest("sha256", [FileEntry(name, sha256=args.sha256.lower())])
    batch = open_batch(args, VERIFY_KIND, batch_command(args), manifest,
                       verify_options(args)) if args.shard or args.results else None
    if batch is not None:
        batch.begin()
    result = VerifyResult(strict=args.strict)
    if args.tensors_only:
        result.errors.append("--tensors-only compares local files; copy the objects first")
        return result
    digests = None if args.no_tensors else worker_digests(args)
    local = [p for p in args.paths if not isinstance(p, str)]
    parts = []
    if local:
        pairs = plan(manifest, local, hidden=args.strict)
        keeper = batch or Unbatched()
        parts.append(lambda: verify_each(manifest, pairs, keeper, digests, args.strict))
    for url in (p for p in args.paths if isinstance(p, str)):
        parts.append(lambda url=url: verify_objects(manifest, url, batch, digests, args.strict))
    unlisted = False
    for part in parts:
        try:
            got = part()
        except ObjectStoreError as exc:
            result.errors.append(exc.message)
            unlisted = True  # this shard's share is not all done: no completion line
            continue
        result.files += got.files
        result.tensors += got.tensors
        result.errors += got.errors
    whole = checked_nothing(args, manifest, result, batch.shard if batch else None)
    result.errors += whole
    if batch is not None and not unlisted:
        batch.end(whole)  # every file of this shard is done: the completion line, its errors
    return result


def checked_nothing(args: argparse.Namespace, manifest: Manifest, result: VerifyResult,
                    shard: JobSlice | None) -> list[str]:
    """The error of a verify (or one shard of a batch's) that compared no file of a manifest
    that lists some: the whole run's reason when it is the only shard, else the shard's; none
    when a file was compared."""
    from inspector.integrity.verify import nothing_checked
    from inspector.integrity.verify_batch import compared_nothing, nothing_checked_part

    if not manifest.files or not compared_nothing(result):
        return []
    if shard is None or shard.count == 1:
        return [nothing_checked(manifest, args.paths)]
    where = ", ".join(map(str, args.paths)) or str(manifest.base_dir)
    return [nothing_checked_part(manifest, shard.label, where)]


@dataclass
class Source:
    """One thing to scan: its key (the path or URL a user and a results file name it by)."""

    key: str
    where: Where
    scan: Callable[[], object]
    found: object = None  # a local file's `discover.Found`: scanned in batches (`scan_batch`)


def scan_sources(paths: list[str]) -> Iterator[Source]:
    """Every file to scan under local paths (`scan.discover`; a folder entry the walk did not
    enter is a line too) and URLs (one object each); an object is copied only when its scan
    runs."""
    from inspector.scan.discover import discover_entries
    from inspector.scan.result import ScanResult

    for raw in paths:
        if not is_url(raw):
            for found in discover_entries([raw]):
                yield Source(str(found.path), found.path,
                             lambda found=found: scan_local(found), found)
            continue
        from inspector.fleet import objstore

        try:
            objects = objstore.list_objects(raw)
        except objstore.ObjectStoreError as exc:
            why = exc.message.removeprefix(f"{raw}: ")  # the scan's line names the URL
            yield Source(raw, raw, lambda why=why, raw=raw: ScanResult(
                path=raw, verdict=Verdict.ERROR, error=why))
            continue
        in_folder = len(objects) > 1 or objstore.relative_key(objects[0], raw) != ""
        for obj in objects:
            yield Source(obj.url, obj,
                         lambda obj=obj, inner=in_folder: _scan_object(obj, inner))


def scan_local(found) -> object:
    """`scan.engine.scan_found` of a discovered file, the scan's modules (the formats: most of
    `scan`'s start-up) imported at the first file; a batch imports them in its walk's thread,
    while its jailed reader starts (`scan.readings.read_batch`)."""
    from inspector.scan.engine import scan_found

    return scan_found(found)


def _scan_object(obj: RemoteObject, in_folder: bool):
    from inspector.fleet import objstore
    from inspector.scan.discover import Found
    from inspector.scan.engine import ScanResult, scan_found

    try:
        with objstore.temp_folder() as root:
            local = objstore.place_copy(root, obj.url.rsplit("/", 1)[-1], obj.url)
            objstore.fetch(obj, local)
            res = scan_found(Found(local, in_folder))
            relabel = objstore.Relabel()
            relabel.add(local, obj.url)
            return ScanResult.from_json(relabel.json(res.to_json()))
    except objstore.ObjectStoreError as exc:
        return ScanResult(path=obj.url, verdict=Verdict.ERROR,
                          error=exc.message.removeprefix(f"{obj.url}: "))
    except OSError as exc:  # the local copy could not be made: this object only
        return ScanResult(path=obj.url, verdict=Verdict.ERROR,
                          error=f"its local copy could not be made ({exc.strerror or exc})")


def run_localized(args: argparse.Namespace, attr: str, run: Callable[[argparse.Namespace], int],
                  command: str) -> int:
    """Run `run` with the URLs in `args.<attr>` (one path or a list) replaced by private local
    copies, and everything it prints naming the URLs again; args.relabel says how,
    args.copies which object each local file holds."""
    from inspector.fleet import objstore

    value = getattr(args, attr)
    paths = value if isinstance(value, list) else [value]
    relabel, copies = objstore.Relabel(), {}
    with contextlib.ExitStack() as stack:
        local = []
        for raw in paths:
            if not is_url(str(raw)):
                local.append(raw)
                continue
            try:
                tree = stack.enter_context(objstore.local_tree(str(raw)))
            except objstore.ObjectStoreError as exc:
                print(f"ckpt-inspector {command}: {escape(exc.message)}", file=sys.stderr)
                return 3
            relabel.add(tree.path, str(raw))
            copies.update(tree.copies)
            local.append(str(tree.path) if isinstance(raw, str) else type(raw)(tree.path))
        setattr(args, attr, local if isinstance(value, list) else local[0])
        args.relabel, args.original_paths, args.copies = relabel, paths, copies
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = run(args)
        finally:
            sys.stdout.write(relabel.text(out.getvalue()))
            sys.stderr.write(relabel.text(err.getvalue()))
            sys.stdout.flush()
    return code


def has_url(value: object) -> bool:
    """Whether a command's path argument (one or a list) names an object store."""
    return any(is_url(str(v)) for v in (value if isinstance(value, list) else [value]))
