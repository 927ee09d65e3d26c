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
from typing import TYPE_CHECKING, Any

from inspector.core.progress import CancelToken, ProgressFn
from inspector.core.termtext import counted
from inspector.core.vocabulary import FileStatus
from inspector.integrity.extras import LoadedExtras, model_folders
from inspector.integrity.folder_walk import walk_folder
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
from inspector.signing.statement import (
    SignedStatement,
    name_inside,
    refuse_one_file,
    to_manifest,
)

if TYPE_CHECKING:
    from inspector.core.vocabulary import SignerKind
    from inspector.signing.check import Checked, SignatureVerdict

IGNORED_NOTE = "the signature's ignore list leaves it out: not signed"
LINK_NOTE = "a symbolic link, and the signature was made over a folder without links"
CHANGED = {FileStatus.MISMATCH, FileStatus.SIZE_MISMATCH}


def verify_folder(folder: Path, statement: SignedStatement, signature: Path | None,
                  tensor_digests: TensorDigestFn | None = None, strict: bool = False,
                  progress: ProgressFn | None = None,
                  cancel: CancelToken | None = None) -> VerifyResult:
    """Every file of `folder` against the statement (ManifestError for a signed name that leaves
    the folder); `strict`: files the signature does not cover fail."""
    refuse_one_file(statement, signature)
    if not statement.plain_sha256:
        return _verify_by_library(folder, statement, signature, strict)
    manifest = to_manifest(statement, folder, signature)
    pairs = plan(manifest, [folder], hidden=True)  # the signature itself is its `source`
    result = verify(manifest, [folder], strict=strict, pairs=pairs, progress=progress,
                    cancel=cancel)
    _mark(result, folder, statement)
    if tensor_digests is not None:
        _tensor_forensics(result, folder, statement, tensor_digests, cancel)
    # the signed files only: an unsigned one a loader reads is `unchecked`, yet not signed
    signed = {r.name for r in statement.resources}
    listed = [f for f in result.files if f.path in signed]
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
              and (link := _linked_part(folder, record.path)) is not None):
            record.status = FileStatus.MISMATCH
            record.note = LINK_NOTE if link == record.path else \
                f"reached through {link}, {LINK_NOTE}"


def _linked_part(folder: Path, name: str) -> str | None:
    """The first part of the signed `name` below `folder` that is a symbolic link (the file
    or a folder on its way: the reference tool refuses either where the signer allowed no
    links); None when there is none."""
    parts = Path(name).parts
    for depth in range(1, len(parts) + 1):
        if folder.joinpath(*parts[:depth]).is_symlink():
            return Path(*parts[:depth]).as_posix()
    return None


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


LIBRARY_HASHES = {"sha256": "sha256", "blake2b": "blake2", "blake2": "blake2",
                  "blake3": "blake3"}
"""A statement's hash type, as the library records it (BLAKE2 as `blake2b`), to the name its
hashing config takes."""

PAST_SIGNED_NOTE = ("a part of {} the signature does not cover: the file's size changed after "
                    "signing (bytes appended, or cut)")


def _verify_by_library(folder: Path, statement: SignedStatement, signature: Path | None,
                       strict: bool) -> VerifyResult:
    """Statements hashed otherwise (BLAKE2, BLAKE3, file shards): the reference library hashes
    the folder as the signer did, and each item is compared here; every file it does not
    list (ignore-listed ones too) is an extra judged by its bytes, as for plain statements."""
    config = _library_config(folder, statement, signature)
    result = VerifyResult(strict=strict)
    try:
        actual = {rd.identifier: rd.digest.digest_hex
                  for rd in config.hash(folder).resource_descriptors()}
    except ValueError as exc:
        result.errors.append(f"{folder}: cannot be hashed as it was signed: {exc}")
        return result
    hashed = {_file_of(name, statement) for name in actual}
    for resource in statement.resources:
        got = actual.pop(resource.name, None)
        status = FileStatus.MISSING if got is None else \
            FileStatus.OK if got == resource.digest else FileStatus.MISMATCH
        result.files.append(FileCheck(path=resource.name, status=status,
                                      expected=resource.digest, actual=got,
                                      algorithm=statement.hash_type))
    result.files += _unsigned_parts(folder, statement, actual)
    result.files += _unhashed(folder, statement, signature, hashed)
    # an unsigned file a loader reads beside a signed one is no harmless extra
    LoadedExtras(folders=model_folders(folder / _file_of(r.name, statement)
                                       for r in statement.resources)).mark(result.files)
    _mark(result, folder, statement)
    return result


def _library_config(folder: Path, statement: SignedStatement, signature: Path | None) -> Any:
    """The library's hashing config for the statement (SignatureError for a hash type or shard
    size it cannot hash with); Git's files and the signature itself left out."""
    algorithm = LIBRARY_HASHES.get(statement.hash_type)
    if algorithm is None or (statement.method == "shards" and not statement.shard_size):
        what = f"shards of {statement.shard_size} bytes" if algorithm else statement.hash_type
        raise SignatureError("unsupported-statement", f"{signature}: the statement's items are "
                             f"hashed as {what!r}, which the reference library cannot hash")
    own = name_inside(folder, signature) if signature is not None else None
    config = reference("hashing").Config().set_ignored_paths(
        paths=[*statement.ignore_paths, *([own] if own else [])], ignore_git_paths=True)
    if statement.method == "shards":
        return config.use_shard_serialization(hashing_algorithm=algorithm,
                                              shard_size=statement.shard_size,
                                              allow_symlinks=statement.allow_symlinks)
    return config.use_file_serialization(hashing_algorithm=algorithm,
                                         allow_symlinks=statement.allow_symlinks)


def _file_of(name: str, statement: SignedStatement) -> str:
    """The file an item names: a shard's `path:start:end` is part of `path`."""
    return name.rsplit(":", 2)[0] if statement.method == "shards" else name


def _unsigned_parts(folder: Path, statement: SignedStatement,
                    unsigned: dict[str, str]) -> list[FileCheck]:
    """The items the library hashed that the statement does not list: a shard of a signed
    file is that file changed (bytes past its signed end, or cut short: its signed size and
    its size now); any other file is one extra, named by its path so that its bytes can be
    judged."""
    ends: dict[str, int] = {}
    for resource in statement.resources:
        file = _file_of(resource.name, statement)
        ends[file] = max(ends.get(file, 0), _shard_end(resource.name, statement))
    changed, extras = [], {}
    for name, digest in sorted(unsigned.items()):
        file = _file_of(name, statement)
        if file in ends:
            changed.append(FileCheck(path=name, status=FileStatus.SIZE_MISMATCH, actual=digest,
                                     expected_size=ends[file],
                                     actual_size=(folder / file).stat().st_size,
                                     algorithm=statement.hash_type,
                                     note=PAST_SIGNED_NOTE.format(file)))
        else:
            extras.setdefault(file, digest if name == file else None)
    return changed + [FileCheck(path=str(folder / file), status=FileStatus.EXTRA,
                                actual=digest, algorithm=statement.hash_type)
                      for file, digest in extras.items()]


def _shard_end(name: str, statement: SignedStatement) -> int:
    """Where a signed shard ends (0 for a whole file: a file statement has no parts)."""
    return int(name.rsplit(":", 1)[1]) if statement.method == "shards" else 0


def _unhashed(folder: Path, statement: SignedStatement, signature: Path | None,
              hashed: set[str]) -> list[FileCheck]:
    """The files the library left unread for the statement's ignore list (never the signature
    or Git's own): extras, so that one a loader reads is judged as any other."""
    own = name_inside(folder, signature) if signature is not None else None
    found = (Path(os.path.relpath(p, folder)).as_posix()
             for p in walk_folder(folder, hidden=True).files)
    return [FileCheck(path=str(folder / name), status=FileStatus.EXTRA, actual=None,
                      algorithm=None)
            for name in found if name not in hashed and name != own]


@dataclass(frozen=True)
class SignedCheck:
    """A folder against its signature: the verdict, the files' result when the signature held,
    and the error when it did not (its code tells bad input from an invalid signature)."""

    verdict: SignatureVerdict
    result: VerifyResult | None = None
    error: SignatureError | None = None
    files: frozenset[str] = frozenset()
    """The files the signature covers, by their signed names (a single file's is `.`)."""


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
    misplaced = _bind_save(result, checked.statement, folder)
    verdict = _judged(signature, checked, kind, result, misplaced)
    return SignedCheck(verdict, result, files=frozenset(
        _file_of(r.name, checked.statement) for r in checked.statement.resources))


def check_signed_file(path: Path, signature: Path, public_key: Path | None = None,
                      certificate_chain: Sequence[Path] = (), *,
                      keyless: KeylessTrust | None = None, strict: bool = False,
                      cancel: CancelToken | None = None) -> SignedCheck:
    """One file against a signature over it alone: its statement's items are `.` (or its
    shards `.:start:end`), as the ledger and `model_signing sign key FILE` write it."""
    from inspector.signing.check import check_signature, verdict_for

    kind = None
    try:
        bundle = read_bundle(signature)
        kind = bundle.kind
        checked = check_signature(bundle, public_key, certificate_chain, keyless)
        statement = checked.statement
        names = {_file_of(r.name, statement) for r in statement.resources}
        if names != {"."}:
            raise SignatureError("not-this-file", f"{signature}: signs a folder "
                                 f"({counted(len(statement.resources), 'item')}), not one "
                                 "file: name the folder it signs")
        result = _one_file(path, statement, strict, cancel)
    except SignatureError as exc:
        return SignedCheck(verdict_for(signature, error=exc, kind=kind), error=exc)
    misplaced = _bind_save(result, statement, path)
    return SignedCheck(_judged(signature, checked, kind, result, misplaced), result,
                       files=frozenset({"."}))


def _judged(signature: Path, checked: Checked, kind: SignerKind | None, result: VerifyResult,
            misplaced: str | None) -> SignatureVerdict:
    """The verdict of a signature that holds, after its files: intact only when every signed
    file matched and nothing stopped the check (files the library could not hash as signed,
    a link or a special file among them, were 'intact' with no file checked), changed
    otherwise, and why; recorded in `result.extra`."""
    from inspector.signing.check import verdict_for

    loaded = [f for f in result.failed_files if f.status == FileStatus.UNCHECKED]
    verdict = verdict_for(signature, checked=checked, kind=kind,
                          changed=result.differs or bool(loaded) or bool(result.errors))
    if loaded and not result.differs:  # the signed files are intact, the folder is not
        verdict.reason = (f"an unsigned file a loader reads: {loaded[0].path}: {loaded[0].note}"
                          + (f"; and {counted(len(loaded) - 1, 'more file')}"
                             if len(loaded) > 1 else ""))
    elif result.errors and not result.differs:
        verdict.reason = result.errors[0]
    verdict.reason = misplaced or verdict.reason
    result.extra["signature"] = verdict.to_json()
    return verdict


def _one_file(path: Path, statement: SignedStatement, strict: bool,
              cancel: CancelToken | None) -> VerifyResult:
    """The file against a statement over it alone: its SHA-256 here, any other hashing (BLAKE2,
    BLAKE3, shards) by the library as the signer hashed it."""
    expected = statement.resources[0].digest
    if not path.is_file():
        return VerifyResult(files=[FileCheck(path=str(path), status=FileStatus.MISSING,
                                             expected=expected)], strict=strict)
    if not statement.plain_sha256:
        result = _verify_by_library(path, statement, None, strict)
        for record in result.files:  # `.` and `.:0:512` are this file and its parts
            record.path = str(path) + record.path[1:]
        return result
    actual = sha256_file(path, cancel=cancel)
    status = FileStatus.OK if actual == expected else FileStatus.MISMATCH
    # a link where the signer allowed none is not the file signed, whatever it reaches
    note = LINK_NOTE if status == FileStatus.OK and not statement.allow_symlinks and \
        path.is_symlink() else None
    return VerifyResult(files=[FileCheck(path=str(path), expected=expected, actual=actual,
                                         status=FileStatus.MISMATCH if note else status,
                                         note=note)], strict=strict)


def _bind_save(result: VerifyResult, statement: SignedStatement, target: Path) -> str | None:
    """A ledger's signature names the save it was made for: checked on `target` with no
    journal at hand, by its path, so a signed save copied over another save's name (a
    rollback) is not that save's signature (`run verify` checks step, line and run too): each
    signed file is then marked as not the one signed there. Why, or None when it is."""
    why = statement.save.misplaced(target) if statement.save is not None else None
    if why is not None:
        for record in result.files:
            if record.status == FileStatus.OK:
                record.status, record.note = FileStatus.MISMATCH, why
    return why
