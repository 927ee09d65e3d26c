"""`ckpt-inspector manifest create PATH… -o MANIFEST`: sha256sum, TSV or JSON with tensors."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

from inspector import __version__, formats
from inspector.cli.common import (
    add_jobs_argument,
    add_loader_arguments,
    stderr_progress,
    warm_workers,
    worker_digests,
)
from inspector.cli.reference import epilog
from inspector.core.atomic import OutputExistsError
from inspector.core.progress import CancelToken
from inspector.core.termtext import counted, escape
from inspector.core.vocabulary import Format
from inspector.integrity.folder_walk import FolderWalk, unread_note, walk_folder
from inspector.integrity.manifest import (
    FileEntry,
    ManifestError,
    dialect_for_path,
    format_json,
    relative_path,
)
from inspector.integrity.manifest import write_manifest as write
from inspector.integrity.verify import TensorDigestFn, loader_word, measure_file

# TorchScript and torch.export weights are digested from their records (code never runs)
CHECKPOINT_FORMATS = frozenset(formats.loadable()) - {Format.DCP}  # a DCP input is a folder

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_TENSORS = 3
EXIT_OUTPUT = 4


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `manifest`."""
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = sub.add_parser(
        "create",
        help="hash files (and, for .json, every tensor) into a manifest",
        epilog=epilog("manifest"), formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Format from the extension: .sha256/.txt (or the name SHA256SUMS) "
        "sha256sum, .tsv TSV, .json this project's manifest with per-tensor digests "
        "computed in the jailed worker.",
    )
    create.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="files or folders")
    create.add_argument(
        "-o",
        "--output",
        required=True,
        type=Path,
        help="manifest to write; - prints a JSON manifest to stdout",
    )
    create.add_argument("--force", action="store_true", help="overwrite an existing manifest")
    create.add_argument(
        "--no-tensors", action="store_true", help="JSON manifest without per-tensor digests"
    )
    create.add_argument(
        "--signature", type=Path, metavar="SIG",
        help="write the files (and signed tensors) an OpenSSF Model Signing signature over the "
        "one folder PATH records, once it verifies with --public-key or --certificate; "
        "nothing is hashed",
    )
    create.add_argument("--public-key", type=Path, metavar="KEY.pub",
                        help="with --signature: the signer's public key")
    create.add_argument("--certificate", type=Path, action="append", metavar="CHAIN.pem",
                        help="with --signature: certificates to trust (repeatable)")
    add_loader_arguments(create)
    add_jobs_argument(create)


def run(args: argparse.Namespace) -> int:
    """Create the manifest; exit 0 when written."""
    out: Path = args.output
    to_stdout = str(out) == "-"
    try:
        dialect = "json" if to_stdout else dialect_for_path(out)
    except ManifestError as exc:
        return _fail(str(exc), EXIT_USAGE)
    if not to_stdout and out.exists() and not args.force:
        return _fail(f"{out} exists; pass --force to overwrite it", EXIT_OUTPUT)
    absent = [p for p in args.paths if not p.exists()]
    if absent:
        return _fail(_absent(absent[0]), EXIT_USAGE)
    if args.signature:
        return _from_signature(args, out, dialect, to_stdout)
    # on stdout, paths are relative to where the command runs, as sha256sum's are
    base = Path.cwd() if to_stdout else out.parent
    try:
        files = collect_files(args.paths, skip=out, base=base)
    except ManifestError as exc:
        return _fail(str(exc), EXIT_USAGE)
    if not files:
        return _fail("no files to put in the manifest", EXIT_USAGE)
    want_tensors = dialect == "json" and not args.no_tensors
    try:
        digests = worker_digests(args) if want_tensors else None
        entries = _entries(files, base, dialect, digests, args)
        say_loader_word(entries)
        created_by = f"ckpt-inspector {__version__}"
        if to_stdout:
            sys.stdout.write(format_json(entries, created_by=created_by))
            return EXIT_OK
        write(out, entries, dialect, overwrite=args.force, created_by=created_by)
    except _TensorsFailed as exc:
        return _fail(f"{exc}; pass --no-tensors to record file hashes only", EXIT_TENSORS)
    except (OutputExistsError, ManifestError) as exc:
        return _fail(str(exc), EXIT_OUTPUT)
    except BrokenPipeError:
        raise  # `-o -` read by a pipe that closed: the entry point ends quietly
    except OSError as exc:
        return _fail(f"{exc.filename or out}: {exc.strerror or exc}", EXIT_OUTPUT)
    tensors = sum(len(e.tensors or []) for e in entries)
    unchecked = sum(t.unchecked is not None for e in entries for t in e.tensors or [])
    detail = f", {counted(tensors, 'tensor')}" if want_tensors else ""
    if unchecked:
        detail += (f" ({unchecked} of their digests as reported by the jailed loader: not "
                   "checked here)")
    print(f"wrote {out} ({dialect}): {counted(len(entries), 'file')}{detail}")
    return EXIT_OK


def say_loader_word(entries: list[FileEntry]) -> None:
    """On stderr, each file whose tensor digests go on record on the jailed loader's word
    alone (its bytes could not check them here): how many, and why. The manifest itself
    records digests only; a later `verify` of such a file says the same of its verdicts."""
    for entry in entries:
        unchecked = [t for t in entry.tensors or [] if t.unchecked is not None]
        if unchecked:
            print(escape(f"ckpt-inspector manifest: {entry.path}: "
                         f"{counted(len(unchecked), 'tensor digest')} recorded "
                         f"{loader_word(unchecked[0].unchecked or '')}"), file=sys.stderr)


class _TensorsFailed(Exception):
    """A checkpoint whose tensors the worker could not read."""


def collect_files(paths: list[Path], skip: Path, base: Path) -> list[Path]:
    """Files named directly, and every non-hidden file under folders, without the output; a
    hidden file a loader reads too, at any depth (`walk_folder`: a torch.distributed.checkpoint
    folder's `.metadata`, its map of every tensor to its bytes). ManifestError for a folder
    holding a link that no manifest in `base` can record."""
    skipped = os.path.abspath(skip)
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            walk = walk_folder(path)
            if refused := unrecordable_link(path, walk, base):
                raise ManifestError(refused)
            items = walk.files
        else:
            items = [path]
        for item in items:
            if os.path.abspath(item) != skipped and item not in found:
                found.append(item)
    return found


def unrecordable_link(folder: Path, walk: FolderWalk, base: Path) -> str | None:
    """Why `folder` (as `walk` found it) holds a link no manifest of it can record, or None: a
    link to a folder (never followed, so its files would go unrecorded), or a linked file that
    lies outside both that folder and the manifest's, `base` (`verify` refuses to read it)."""
    if walk.folder_links:
        link = walk.folder_links[0]
        return (f"{link}: a link to a folder ({os.readlink(link)}), which a manifest does not "
                "follow; name the folder it points to instead, or remove the link")
    real_roots = (os.path.realpath(folder), os.path.realpath(base))
    for item in walk.files:
        if not item.exists():
            return _absent(item)
        real = os.path.realpath(item)
        if all(os.path.commonpath([real, r]) != r for r in real_roots):
            return (f"{item}: a link to {real}, outside {folder}; `verify` reads only files "
                    "inside the folder a manifest checks: copy the file in, or remove the link")
    return None


def _absent(path: Path) -> str:
    """Why `path` cannot be hashed: nothing there, or a link whose target is gone."""
    if path.is_symlink():
        return f"{path}: {unread_note(path)}; restore its target or remove the link"
    return f"{path}: no such file or folder"


def _entries(
    files: list[Path], base: Path, dialect: str, digests: TensorDigestFn | None,
    args: argparse.Namespace,
) -> list[FileEntry]:
    """`--jobs` files at once when tensors are digested in the jail (hashing alone is bound by
    the disk, so it stays one file at a time); the first failure stops the rest."""
    from functools import partial

    from inspector.sandbox.host.parallel import run_parallel

    jobs = min(args.jobs, len(files)) if digests else 1
    one = partial(_entry, manifest_dir=base, dialect=dialect, digests=digests,
                  quiet=args.quiet or jobs > 1)  # one file's percentage only when alone
    with warm_workers(len(files) if digests else 0), \
            stderr_progress("hashing files", args.quiet or jobs == 1) as show:
        return run_parallel(one, files, jobs, progress=show)


def _entry(
    path: Path, cancel: CancelToken, manifest_dir: Path, dialect: str,
    digests: TensorDigestFn | None, quiet: bool
) -> FileEntry:
    fmt = None if dialect == "sha256sum" else file_format(path)
    size = path.stat().st_size
    with stderr_progress(f"hashing {path.name}", quiet) as progress:
        measured = measure_file(
            path,
            tensor_digests=digests if fmt in CHECKPOINT_FORMATS else None,
            progress=progress,
            cancel=cancel,
        )
    if measured.error:
        raise _TensorsFailed(measured.error)
    return FileEntry(
        path=relative_path(path, manifest_dir),
        sha256=measured.sha256,
        size=size,
        format=fmt,
        tensors=measured.tensors,
    )


def file_format(path: Path) -> str:
    """The format the static scan detects from the file's bytes (no code runs); a DCP data
    file's scan reads the archives its `.metadata` lists, not every page."""
    from inspector.layout.dcp_items import listed_archives
    from inspector.scan.engine import scan_file

    return scan_file(path, listed_archives(path)).format


def _from_signature(args: argparse.Namespace, out: Path, dialect: str, to_stdout: bool) -> int:
    """The signed statement as a manifest (after the signature verifies): what `verify -m`
    and `sha256sum -c` then check."""
    from inspector.signing.bundle import read_bundle
    from inspector.signing.check import check_signature
    from inspector.signing.errors import SignatureError
    from inspector.signing.statement import to_entries

    if len(args.paths) != 1 or not args.paths[0].is_dir():
        return _fail("--signature records one folder: name it", EXIT_USAGE)
    base = Path.cwd() if to_stdout else out.parent
    try:
        checked = check_signature(read_bundle(args.signature), args.public_key,
                                  args.certificate or ())
        entries = to_entries(checked.statement, args.paths[0], base, args.signature)
    except SignatureError as exc:
        return _fail(escape(exc.message), EXIT_USAGE)
    if dialect != "json" or args.no_tensors:
        entries = [dataclasses.replace(e, tensors=None) for e in entries]
    created_by = f"ckpt-inspector {__version__} from {args.signature} ({checked.signer})"
    if to_stdout:
        sys.stdout.write(format_json(entries, created_by=created_by))
        return EXIT_OK
    try:
        write(out, entries, dialect, overwrite=args.force, created_by=created_by)
    except (OutputExistsError, ManifestError) as exc:
        return _fail(str(exc), EXIT_OUTPUT)
    print(escape(f"wrote {out} ({dialect}): {counted(len(entries), 'file')} signed by "
                 f"{checked.signer}"))
    return EXIT_OK


def _fail(message: str, code: int) -> int:
    print(f"ckpt-inspector manifest: {message}", file=sys.stderr)
    return code
