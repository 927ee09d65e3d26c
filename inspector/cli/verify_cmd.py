"""`ckpt-inspector verify PATH… --manifest M [--json]`: files and tensors against a manifest."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from inspector.core.manifest import ManifestError, read_manifest
from inspector.core.progress import ProgressFn
from inspector.core.verify import TensorDigestFn, VerifyResult, verify, verify_tensors_only

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_MANIFEST = 2
EXIT_UNCHECKED = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `verify`."""
    parser.add_argument(
        "paths",
        nargs="*",
        type=Path,
        metavar="PATH",
        help="files or folders to verify (default: the manifest's folder)",
    )
    parser.add_argument("--manifest", "-m", required=True, type=Path, help="manifest to verify")
    parser.add_argument("--json", action="store_true", help="print the JSON verify contract")
    parser.add_argument(
        "--no-tensors", action="store_true", help="check files only, even if tensors are recorded"
    )
    parser.add_argument(
        "--tensors-only",
        action="store_true",
        help="compare the tensors of PATH (e.g. a safetensors conversion) with every tensor "
        "the manifest records, ignoring file names and hashes",
    )
    parser.epilog = (
        "exit status: 0 all ok, 1 something differs, 2 manifest unreadable, "
        "3 nothing differs but something could not be checked (see errors)"
    )


def run(args: argparse.Namespace) -> int:
    """Verify and print the result; the exit status says whether everything is ok."""
    try:
        manifest = read_manifest(args.manifest)
    except ManifestError as exc:
        print(f"ckpt-inspector verify: {exc}", file=sys.stderr)
        return EXIT_MANIFEST
    if manifest.dialect == "git-lfs" and not args.paths:
        print(
            f"ckpt-inspector verify: {args.manifest} is a Git LFS pointer; "
            "name the downloaded file to check against it",
            file=sys.stderr,
        )
        return EXIT_MANIFEST
    digests = None if args.no_tensors else worker_digests()
    if args.tensors_only:
        if not args.paths:
            print("ckpt-inspector verify: --tensors-only needs the files to check", file=sys.stderr)
            return EXIT_MANIFEST
        result = verify_tensors_only(manifest, args.paths, worker_digests())
    else:
        with stderr_progress("verifying") as progress:
            result = verify(manifest, args.paths, tensor_digests=digests, progress=progress)
    if args.json:
        doc = {"manifest": str(args.manifest), "dialect": manifest.dialect, **result.to_json()}
        print(json.dumps(doc, indent=1))
    else:
        print_human(result)
    return exit_status(result)


def exit_status(result: VerifyResult) -> int:
    """0 all ok, 1 something differs, 3 only errors (unreadable files) stand in the way."""
    if result.ok:
        return EXIT_OK
    differs = any(f.status != "ok" for f in result.files) or any(
        t.status != "ok" for t in result.tensors
    )
    return EXIT_FAILED if differs else EXIT_UNCHECKED


def print_human(result: VerifyResult) -> None:
    """One line per file that is not ok, tensors that are not ok under it, then totals."""
    for f in result.files:
        if f.status == "size_mismatch":
            detail = f"  size {f.actual_size}, expected {f.expected_size}"
        elif f.status == "mismatch":
            detail = f"  sha256 {f.actual}, expected {f.expected}"
        else:
            detail = ""
        print(f"{f.status.upper():<14} {f.path}{detail}")
    for t in result.tensors:
        if t.status == "ok":
            continue
        if t.status == "dtype_or_shape_changed":
            got, want = (t.actual_dtype, t.actual_shape), (t.expected_dtype, t.expected_shape)
            detail = f"  {got[0]}{got[1]}, expected {want[0]}{want[1]}"
        else:
            detail = ""
        print(f"  tensor {t.status.upper():<22} {t.key} ({t.file}){detail}")
    for error in result.errors:
        print(f"ERROR          {error}")
    totals = [_totals("file", result.files)]
    if result.tensors:
        totals.append(_totals("tensor", result.tensors))
    print("; ".join(totals))


def _totals(noun: str, records: list) -> str:
    counts = Counter(r.status for r in records)
    parts = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    return f"{len(records)} {noun}{'' if len(records) == 1 else 's'}" + (
        f": {parts}" if parts else ""
    )


def worker_digests() -> TensorDigestFn:
    """Tensor digests computed by the jailed worker (imported only when tensors are checked)."""
    from inspector.sandbox.client import tensor_digests

    return tensor_digests


@contextlib.contextmanager
def stderr_progress(label: str) -> Iterator[ProgressFn | None]:
    """A one-line percentage on stderr while a long job runs, only when stderr is a terminal."""
    if not sys.stderr.isatty():
        yield None
        return

    def show(done: int, total: int) -> None:
        if total:
            print(f"\r{label} {100 * done // total:3d}%", end="", file=sys.stderr, flush=True)

    try:
        yield show
    finally:
        print("\r" + " " * (len(label) + 5) + "\r", end="", file=sys.stderr, flush=True)
