"""`ckpt-inspector verify`: files and tensors against a manifest, a Hugging Face cache against
its own blob names, or one file against a SHA-256 pasted from the Hub."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from inspector.cli.common import (
    EXIT_MANIFEST,
    add_batch_arguments,
    add_jobs_argument,
    add_keyless_arguments,
    add_loader_arguments,
    keyless_trust,
    open_batch,
    print_verify_result,
    say_unauthenticated,
    stderr_progress,
    warm_workers,
    worker_digests,
)
from inspector.cli.remote import (
    batch_command,
    checked_nothing,
    path_or_url,
    verify_options,
    verify_remote,
)
from inspector.core.progress import CancelToken
from inspector.core.termtext import counted, escape
from inspector.core.vocabulary import TensorCheckStatus
from inspector.integrity.hashing import is_sha256_hex
from inspector.integrity.manifest import Manifest, ManifestError, TensorEntry, read_manifest
from inspector.integrity.verify import (
    TensorDigestFn,
    VerifyResult,
    header_listing,
    plan,
    tensor_targets,
    verify,
    verify_sha256,
    verify_tensors_only,
)
from inspector.integrity.verify_batch import VERIFY_KIND, pending, verify_each

if TYPE_CHECKING:
    from inspector.run.checkpoints import RunLedger, SaveRecord

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_UNCHECKED = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `verify`."""
    parser.add_argument(
        "paths",
        nargs="*",
        type=path_or_url,
        metavar="PATH",
        help="files or folders (or s3://… objects and prefixes) to verify (default: the "
        "manifest's folder); without "
        "--manifest, Hugging Face cache folders, repositories or snapshots",
    )
    parser.add_argument(
        "--manifest",
        "-m",
        type=Path,
        help="manifest to verify against (not needed for a Hugging Face cache or --sha256)",
    )
    parser.add_argument(
        "--sha256",
        metavar="HEX",
        help="check the one PATH against this SHA-256 (e.g. from the Hub's file page)",
    )
    parser.add_argument(
        "--strict", action="store_true", help="files the manifest does not list fail the check"
    )
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
    parser.add_argument(
        "--signature",
        type=Path,
        metavar="SIG",
        help="check the folder PATH against this OpenSSF Model Signing signature (default: "
        "the folder's model.sig when --public-key or --certificate is given)",
    )
    parser.add_argument(
        "--public-key", type=Path, metavar="KEY.pub",
        help="the signer's public key (PEM, ECDSA P-256/384/521), for a key signature",
    )
    parser.add_argument(
        "--certificate", type=Path, action="append", metavar="CHAIN.pem",
        help="certificates to trust (PEM; repeatable), for a certificate signature",
    )
    add_keyless_arguments(parser)
    add_loader_arguments(parser)
    add_jobs_argument(parser)
    add_batch_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Verify and print the result; the exit status says whether everything is ok."""
    if args.signature or args.public_key or args.certificate or args.trust_root or \
            _signed_folder(args):
        return _run_signed(args)
    if args.manifest is None:
        return _run_without_manifest(args)
    try:
        manifest = read_manifest(args.manifest)
    except ManifestError as exc:
        return _usage(escape(str(exc)))
    if args.sha256:
        return _usage("--sha256 checks one file without a manifest; drop --manifest")
    if manifest.dialect == "git-lfs" and not args.paths:
        return _usage(
            f"{args.manifest} is a Git LFS pointer; name the downloaded file to check against it"
        )
    if any(isinstance(p, str) for p in args.paths):  # object-store URLs
        try:
            remote = verify_remote(args, manifest)
        except ManifestError as exc:
            return _usage(escape(f"{args.manifest}: {exc}"))
        return _finish(args, remote, str(args.manifest), manifest.dialect)
    if args.tensors_only:
        if not args.paths:
            return _usage("--tensors-only needs the files to check")
        files = list(args.paths)
        with warm_workers(len(files)), _digests_ahead(args, files) as digests:
            result = verify_tensors_only(manifest, args.paths, digests)
    else:
        try:
            result = _verify_against(args, manifest, args.paths, args.strict)
        except ManifestError as exc:
            return _usage(escape(f"{args.manifest}: {exc}"))
    return _finish(args, result, str(args.manifest), manifest.dialect)


def _verify_against(args: argparse.Namespace, manifest: Manifest, paths: list[Path],
                    strict: bool, anchored: bool = False) -> VerifyResult:
    """Files, then their tensors (digested `--jobs` at a time), against the manifest (with
    `strict`, a file it does not list fails; `anchored`: its names are read only where they
    were recorded); with --shard or --results one file at a time, each kept as it finishes."""
    pairs = plan(manifest, paths, hidden=strict, anchored=anchored)
    batch = open_batch(args, VERIFY_KIND, batch_command(args), manifest, verify_options(args)
                       ) if args.shard or args.results else None
    todo = pending(pairs, batch) if batch else pairs
    files = [] if args.no_tensors else tensor_targets(todo)
    # no file for the worker (a SHA256SUMS, or an index, whose shards' headers list their
    # keys here): no worker, nor its client's import
    listing = None if args.no_tensors else header_listing
    ahead = contextlib.nullcontext(listing) if not files else _digests_ahead(args, files)
    with stderr_progress("verifying", args.quiet) as progress, \
            warm_workers(len(files)), ahead as digests:
        if batch:
            batch.begin()
            result = verify_each(manifest, pairs, batch, digests, strict, progress=progress)
            # no file's result holds it: the completion line does, and a merge fails on it
            whole = checked_nothing(args, manifest, result, batch.shard)
            result.errors += whole
            batch.end(whole)  # every file of this shard is done: the completion line
            return result
        return verify(manifest, paths, tensor_digests=digests, progress=progress,
                      strict=strict, pairs=pairs)


@contextlib.contextmanager
def _digests_ahead(args: argparse.Namespace, files: list[Path]) -> Iterator[TensorDigestFn]:
    """Tensor digests of `files`, `--jobs` workers at a time, computed ahead while verify
    hashes each file in turn and asks for them in its own order (so output never changes)."""
    from inspector.sandbox.host.parallel import Prefetch

    compute = worker_digests(args)
    with Prefetch(lambda path, cancel: compute(path, cancel=cancel), files,
                  args.jobs) as ahead:

        def digests(path: Path, *, cancel: CancelToken | None = None) -> list[TensorEntry]:
            return ahead.get(path, cancel) if path in ahead else compute(path, cancel=cancel)

        yield digests


def _signed_folder(args: argparse.Namespace) -> bool:
    """One folder, no manifest, holding the signature the reference tool writes."""
    from inspector.signing.bundle import DEFAULT_NAME

    return (args.manifest is None and not args.sha256 and len(args.paths) == 1
            and isinstance(args.paths[0], Path) and (args.paths[0] / DEFAULT_NAME).is_file())


def _run_signed(args: argparse.Namespace) -> int:
    """A folder against its OpenSSF Model Signing signature: the signature first (exit 1 when
    it does not hold, 3 when it cannot be checked here, 2 for bad input), then every file."""
    from inspector.core.vocabulary import SignatureState
    from inspector.run.record_check import check_record
    from inspector.signing.bundle import DEFAULT_NAME
    from inspector.signing.folder import check_folder, check_signed_file
    from inspector.signing.ledger_binding import combined, record_problems
    from inspector.signing.locate import covering_signature
    from inspector.signing.statement import DIALECT, beside

    if args.manifest or args.sha256 or args.tensors_only or args.shard or args.results:
        return _usage("a signature is checked alone: drop --manifest, --sha256, "
                      "--tensors-only, --shard and --results")
    if len(args.paths) != 1 or not isinstance(args.paths[0], Path) or \
            not args.paths[0].exists():
        return _usage("a signature covers one folder or file: name it (verify DIR --signature "
                      "model.sig --public-key key.pub)")
    folder = args.paths[0]
    # the signature the app and the report find for it (a folder's model.sig, else the
    # ledger's NAME.sig beside it), when it signs the path named
    found = covering_signature(folder)
    signature = args.signature or (found[1] if found is not None and found[0] == folder else
                                   folder / DEFAULT_NAME if folder.is_dir() else beside(folder))
    if not args.signature and not signature.is_file():
        return _usage(f"{folder}: no {signature.name} found; pass --signature SIG")
    def digests(path: Path, *, cancel: CancelToken | None = None) -> list[TensorEntry]:
        # the worker's client is imported only for a changed file whose tensors are signed
        return worker_digests(args)(path, cancel=cancel)

    keyless = keyless_trust(args)
    # the path's save record, where a journal above it keeps one, holds the signature to it
    # (`signing.ledger_binding`): a folder save is its whole listing, as `run verify` reads it
    record = check_record(folder)
    strict = args.strict or bool(record and record.check and record.check.record.strict)
    with stderr_progress("verifying", args.quiet) as progress:
        checked = check_folder(folder, signature, args.public_key, args.certificate or (),
                               keyless=keyless,
                               tensor_digests=None if args.no_tensors else digests,
                               strict=strict, progress=progress) if folder.is_dir() \
            else check_signed_file(folder, signature, args.public_key, args.certificate or (),
                                   keyless=keyless, strict=strict)
    result, error = checked.result, checked.error
    if error is not None and not error.invalid and error.code != "keyless-offline":
        return _usage(escape(error.message))
    problems = record_problems(record, args.public_key, args.certificate or (), signature) \
        if record is not None else []
    verdict = combined(checked.verdict, problems)
    failed = EXIT_FAILED if verdict.state in (SignatureState.INVALID, SignatureState.CHANGED) \
        else EXIT_UNCHECKED
    if result is None:
        result = VerifyResult(errors=[verdict.reason or ""],
                              extra={"signature": verdict.to_json()})
        if args.json:
            _finish(args, result, str(signature), DIALECT)
        else:
            print(escape(f"{verdict.state.upper():<14} {verdict.reason}"))
        return failed
    result.errors += [why for _, why in problems]
    result.extra["signature"] = verdict.to_json()
    if args.json:
        _finish(args, result, str(signature), DIALECT)
    else:
        print(escape(f"{'SIGNED':<14} by {verdict.signer} ({signature}, "
                     f"{counted(verdict.files_signed, 'file')} signed): {verdict.state}"))
        print_verify_result(result)
        if any(t.status != TensorCheckStatus.OK for t in result.tensors):
            print("which bits of a changed tensor flipped: `ckpt-inspector diff` the file "
                  "against a copy you trust")
    if not problems:
        return exit_status(result)
    # the record's failure stands whatever the files against the signature say
    return max(failed, exit_status(result), key=(EXIT_OK, EXIT_UNCHECKED, EXIT_FAILED).index)


def _run_without_manifest(args: argparse.Namespace) -> int:
    """`--sha256 HEX FILE`, or Hugging Face cache paths checked against their blob names."""
    if args.sha256:
        if len(args.paths) != 1 or not is_sha256_hex(args.sha256):
            return _usage("--sha256 takes 64 hexadecimal digits and exactly one PATH")
        with stderr_progress("verifying", args.quiet) as progress:
            result = (verify_remote(args, None) if isinstance(args.paths[0], str)
                      else verify_sha256(args.paths[0], args.sha256, progress=progress))
        return _finish(args, result, None, "sha256")
    # imported here: a verify against a manifest (the batch case) needs neither
    from inspector.integrity.hfcache import is_cache_path, verify_cache
    from inspector.run.checkpoints import LedgerError
    from inspector.run.record_lookup import find_record

    not_cache = [p for p in args.paths if not is_cache_path(p)]
    try:
        found = find_record(args.paths[0]) if len(args.paths) == 1 and not_cache else None
    except LedgerError as exc:  # journals above it disagree: none is taken as its record
        print(escape(f"ckpt-inspector verify: {exc.message}"), file=sys.stderr)
        return EXIT_FAILED
    if found:
        return _run_against_ledger(args, *found)
    if not args.paths or not_cache:
        named = f"{not_cache[0]} is not in a Hugging Face cache; " if not_cache else ""
        return _usage(f"{named}pass --manifest (or --sha256 HEX for one file)")
    result = VerifyResult(strict=True)
    with stderr_progress("verifying", args.quiet) as progress:
        for path in args.paths:
            part = verify_cache(path, progress=progress)
            result.files += part.files
            result.errors += part.errors
    return _finish(args, result, None, "hf-cache")


def _run_against_ledger(args: argparse.Namespace, ledger: RunLedger, record: SaveRecord) -> int:
    """A ledgered checkpoint with no manifest given: its save record is the manifest."""
    print(f"ckpt-inspector verify: no manifest given; using the ledger record at "
          f"{ledger.path}:{record.line} ({record.label}, saved {record.time}, {record.outcome} "
          "then)", file=sys.stderr)
    say_unauthenticated("verify", ledger, keyed=False)
    from inspector.core.vocabulary import SaveOutcome
    from inspector.run.checkpoints import unwritten

    manifest = record.manifest(ledger.run_dir, source=ledger.path)
    # a folder save lists the whole folder: a file added since fails, as `run verify` says
    # (`unwritten`, whatever the folder walk leaves out: Git's files, a name another took)
    added = [ledger.run_dir / name for name in unwritten(ledger, record)]
    # the record's names are the run folder's: never re-read against the folder named
    result = _verify_against(args, manifest, [ledger.resolve(record), *added],
                             args.strict or record.strict, anchored=True)
    if record.outcome != SaveOutcome.VERIFIED:
        # bytes as recorded are bytes as written, not a state proven: no ok rests on it
        result.errors.append(f"its save record's outcome is {record.outcome}, not verified "
                             f"({record.detail or 'not proven at save'}): matching it shows "
                             "only that the bytes are what was written then; `run latest` "
                             "passes over it")
    code = _finish(args, result, f"{ledger.path}:{record.line}", manifest.dialect)
    return code if record.outcome == SaveOutcome.VERIFIED else EXIT_FAILED


def _finish(args: argparse.Namespace, result: VerifyResult, manifest: str | None,
            dialect: str) -> int:
    if args.json:
        doc = {"manifest": manifest, "dialect": dialect, **result.to_json()}
        print(json.dumps(doc, indent=1))
    else:
        print_verify_result(result)
    return exit_status(result)


def _usage(message: str) -> int:
    print(f"ckpt-inspector verify: {message}", file=sys.stderr)
    return EXIT_MANIFEST


def exit_status(result: VerifyResult) -> int:
    """0 all ok, 1 something differs, 3 only errors or unchecked files stand in the way."""
    if result.ok:
        return EXIT_OK
    return EXIT_FAILED if result.differs else EXIT_UNCHECKED
