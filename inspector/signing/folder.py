"""A folder checked against a verified statement: every signed file hashed (the project's own
verify, a core each), every file the statement does not cover reported (hidden ones too: the
reference tool signs them; one a loader reads, such as an unsigned checkpoint, fails and the
signature's verdict is `changed`), links where the signer allowed none marked, and for a
changed file whose tensors the statement records, the tensors that changed named."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from inspector.core.progress import CancelToken, ProgressFn
from inspector.core.termtext import counted
from inspector.core.vocabulary import FileStatus
from inspector.integrity.extras import LoadedExtras, model_folders
from inspector.integrity.hashing import sha256_file
from inspector.integrity.manifest import ManifestError
from inspector.integrity.verify import (
    FileCheck,
    TensorDigestFn,
    VerifyResult,
    compare_tensors,
    plan,
    verify,
)
from inspector.signing.bundle import read_bundle
from inspector.signing.errors import SignatureError
from inspector.signing.keyless import KeylessTrust
from inspector.signing.library import reference
from inspector.signing.statement import SignedStatement, to_manifest

if TYPE_CHECKING:
    from inspector.signing.check import SignatureVerdict

IGNORED_NOTE = "the signature's ignore list leaves it out: not signed"
LINK_NOTE = "a symbolic link, and the signature was made over a folder without links"
CHANGED = {FileStatus.MISMATCH, FileStatus.SIZE_MISMATCH}


def verify_folder(folder: Path, statement: SignedStatement, signature: Path | None,
                  tensor_digests: TensorDigestFn | None = None, strict: bool = False,
                  progress: ProgressFn | None = None,
                  cancel: CancelToken | None = None) -> VerifyResult:
    """Every file of `folder` against the statement (ManifestError for a signed name that leaves
    the folder); `strict`: files the signature does not cover fail."""
    if not statement.plain_sha256:
        return _verify_by_library(folder, statement, signature, strict)
    manifest = to_manifest(statement, folder, signature)
    pairs = plan(manifest, [folder], hidden=True)  # the signature itself is its `source`
    result = verify(manifest, [folder], strict=strict, pairs=pairs, progress=progress,
                    cancel=cancel)
    _mark(result, folder, statement)
    if tensor_digests is not None:
        _tensor_forensics(result, folder, statement, tensor_digests, cancel)
    listed = [f for f in result.files if f.status != FileStatus.EXTRA]
    if listed and all(f.status == FileStatus.MISSING for f in listed):
        result.errors.append(another_folder(folder, statement))
    return result


def another_folder(folder: Path, statement: SignedStatement) -> str:
    """Why a signature none of whose files is present is likely another folder's."""
    names = ", ".join(r.name for r in statement.resources[:3])
    more = f" and {len(statement.resources) - 3} more" if len(statement.resources) > 3 else ""
    return (f"none of the {counted(len(statement.resources), 'file')} the signature covers ({names}"
            f"{more}) is in {folder}: it is the signature of another folder (signed as "
            f"{statement.model_name!r}), or of this one before its files were moved")


def _under(rel: str, ignored: list[str]) -> bool:
    return any(rel == p or rel.startswith(p.rstrip("/") + "/") for p in ignored)


def _mark(result: VerifyResult, folder: Path, statement: SignedStatement) -> None:
    """Notes on extras the signer chose to leave out, and links where none were signed."""
    for record in result.files:
        location = Path(record.path) if record.status == FileStatus.EXTRA else \
            folder / record.path
        rel = os.path.relpath(location, folder).replace(os.sep, "/")
        if record.status == FileStatus.EXTRA and _under(rel, statement.ignore_paths):
            record.note = IGNORED_NOTE
        elif (not statement.allow_symlinks and record.status == FileStatus.OK
              and location.is_symlink()):
            record.status, record.note = FileStatus.MISMATCH, LINK_NOTE


def _tensor_forensics(result: VerifyResult, folder: Path, statement: SignedStatement,
                      tensor_digests: TensorDigestFn, cancel: CancelToken | None) -> None:
    """For each changed file whose tensors are signed: which tensors changed."""
    for record in result.files:
        expected = statement.tensors.get(record.path)
        if record.status not in CHANGED or not expected:
            continue
        try:
            actual = tensor_digests(folder / record.path, cancel=cancel)
        except Exception as exc:  # the worker's refusal is a line of the verdict, not a crash
            result.errors.append(f"{record.path}: tensors not checked: {exc}")
            continue
        result.tensors += compare_tensors(expected, actual, record.path)


def _verify_by_library(folder: Path, statement: SignedStatement, signature: Path | None,
                       strict: bool) -> VerifyResult:
    """Statements hashed otherwise (BLAKE2, BLAKE3, file shards): the reference library hashes
    the folder as the signer did, and each item is compared here."""
    hashing = reference("hashing")
    ignored = list(statement.ignore_paths)
    if signature is not None and Path(os.path.abspath(signature)).is_relative_to(
            os.path.abspath(folder)):
        ignored.append(os.path.relpath(signature, folder))
    config = hashing.Config().set_ignored_paths(paths=ignored, ignore_git_paths=True)
    if statement.method == "shards":
        config.use_shard_serialization(hashing_algorithm=statement.hash_type,
                                       shard_size=statement.shard_size or 0,
                                       allow_symlinks=statement.allow_symlinks)
    else:
        config.use_file_serialization(hashing_algorithm=statement.hash_type,
                                      allow_symlinks=statement.allow_symlinks)
    result = VerifyResult(strict=strict)
    try:
        actual = {rd.identifier: rd.digest.digest_hex
                  for rd in config.hash(folder).resource_descriptors()}
    except ValueError as exc:
        result.errors.append(f"{folder}: cannot be hashed as it was signed: {exc}")
        return result
    for resource in statement.resources:
        got = actual.pop(resource.name, None)
        status = FileStatus.MISSING if got is None else \
            FileStatus.OK if got == resource.digest else FileStatus.MISMATCH
        result.files.append(FileCheck(path=resource.name, status=status,
                                      expected=resource.digest, actual=got,
                                      algorithm=statement.hash_type))
    result.files += [FileCheck(path=str(folder / name), status=FileStatus.EXTRA, actual=digest,
                               algorithm=statement.hash_type)
                     for name, digest in sorted(actual.items())]
    # an unsigned file a loader reads beside a signed one is no harmless extra
    LoadedExtras(folders=model_folders(folder / r.name for r in statement.resources)).mark(
        result.files)
    return result


@dataclass(frozen=True)
class SignedCheck:
    """A folder against its signature: the verdict, the files' result when the signature held,
    and the error when it did not (its code tells bad input from an invalid signature)."""

    verdict: SignatureVerdict
    result: VerifyResult | None = None
    error: SignatureError | None = None


def check_folder(folder: Path, signature: Path, public_key: Path | None = None,
                 certificate_chain: Sequence[Path] = (), *,
                 keyless: KeylessTrust | None = None,
                 tensor_digests: TensorDigestFn | None = None, strict: bool = False,
                 progress: ProgressFn | None = None,
                 cancel: CancelToken | None = None) -> SignedCheck:
    """The signature, then every file: what `verify --signature`, the report and the app
    show."""
    # Not hashed while the signature is checked: the reference library's import (pydantic
    # models) holds the GIL, which the hashing threads take back after every 64 KiB read, and
    # overlapping the two cost more CPU and wall time at 1 GB than one after the other.
    from inspector.signing.check import check_signature, verdict_for

    kind = None
    try:
        bundle = read_bundle(signature)
        kind = bundle.kind
        checked = check_signature(bundle, public_key, certificate_chain, keyless)
        digests = tensor_digests if checked.statement.tensors else None
        result = verify_folder(folder, checked.statement, signature, digests, strict=strict,
                               progress=progress, cancel=cancel)
    except SignatureError as exc:
        return SignedCheck(verdict_for(signature, error=exc, kind=kind), error=exc)
    except ManifestError as exc:  # a signed name that leaves the folder
        error = SignatureError("outside-folder", f"{signature}: {exc}")
        return SignedCheck(verdict_for(signature, error=error, kind=kind), error=error)
    loaded = [f for f in result.failed_files if f.status == FileStatus.UNCHECKED]
    verdict = verdict_for(signature, checked=checked, kind=kind,
                          changed=result.differs or bool(loaded))
    if loaded and not result.differs:  # the signed files are intact, the folder is not
        verdict.reason = (f"an unsigned file a loader reads: {loaded[0].path}: {loaded[0].note}"
                          + (f"; and {counted(len(loaded) - 1, 'more file')}"
                             if len(loaded) > 1 else ""))
    result.extra["signature"] = verdict.to_json()
    return SignedCheck(verdict, result)


def check_signed_file(path: Path, signature: Path, public_key: Path | None = None,
                      certificate_chain: Sequence[Path] = (), *,
                      keyless: KeylessTrust | None = None, strict: bool = False,
                      cancel: CancelToken | None = None) -> SignedCheck:
    """One file against a signature over it alone: its statement's one item is `.`, as the
    ledger and `model_signing sign key FILE` write it."""
    from inspector.signing.check import check_signature, verdict_for

    kind = None
    try:
        bundle = read_bundle(signature)
        kind = bundle.kind
        checked = check_signature(bundle, public_key, certificate_chain, keyless)
        names = [r.name for r in checked.statement.resources]
        if not checked.statement.plain_sha256 or names != ["."]:
            raise SignatureError("not-this-file", f"{signature}: signs a folder "
                                 f"({counted(len(names), 'item')}), not one file: name the "
                                 "folder it signs")
    except SignatureError as exc:
        return SignedCheck(verdict_for(signature, error=exc, kind=kind), error=exc)
    expected = checked.statement.resources[0].digest
    record = FileCheck(path=str(path), status=FileStatus.MISSING, expected=expected)
    if path.is_file():
        record.actual = sha256_file(path, cancel=cancel)
        record.status = FileStatus.OK if record.actual == expected else FileStatus.MISMATCH
    result = VerifyResult(files=[record], strict=strict)
    verdict = verdict_for(signature, checked=checked, kind=kind, changed=result.differs)
    result.extra["signature"] = verdict.to_json()
    return SignedCheck(verdict, result)
