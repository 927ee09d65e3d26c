"""Verify files, and the tensors inside them, against a manifest.

File level: ok / mismatch / missing / size_mismatch / extra, the size compared first so a
truncated download is reported without hashing it. As with `sha256sum -c`, a file the manifest
does not list is reported as extra but fails the check only when the caller asks for strict,
unless a loader reads it (`extras`: an index's shard, a DCP `.metadata`, a checkpoint's bytes).
Tensor level (when the manifest has tensors): ok / mismatch / missing / extra /
dtype_or_shape_changed, and unchecked: a digest the jailed worker reported equal that the
user's process could not check against the file's bytes (`TensorEntry.unchecked`, e.g. a
pickle holding more than tensors) is no `ok` but the loader's word, and says so (`note`); a
mismatch on its word keeps its status and the same note. A file whose SHA-256 (computed
here) is the recorded one vouches for its tensors itself (`vouch_by_hash`). Tensor digests
come from a caller-supplied function (the CLI and GUI pass the jailed worker's), so this
module never deserialises anything; it hashes the file while that function runs, on a
second core.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from inspector.core.dtypes import canonical_dtype
from inspector.core.json_record import JsonRecord, typed_list
from inspector.core.progress import Cancelled, CancelToken, ProgressFn, check
from inspector.core.termtext import counted
from inspector.core.vocabulary import FileStatus, TensorCheckStatus
from inspector.formats.safetensors_header import SafetensorsHeader, read_header
from inspector.integrity.extras import loaded_extras
from inspector.integrity.folder_walk import entry_location, unread_note, walk_folder
from inspector.integrity.hashing import ByteProgress, HashAhead, sha256_file
from inspector.integrity.manifest import FileEntry, Manifest, ManifestError, TensorEntry

OK, MISMATCH, MISSING = FileStatus.OK, FileStatus.MISMATCH, FileStatus.MISSING
EXTRA, SIZE_MISMATCH = FileStatus.EXTRA, FileStatus.SIZE_MISMATCH
UNCHECKED = FileStatus.UNCHECKED
DTYPE_OR_SHAPE_CHANGED = TensorCheckStatus.DTYPE_OR_SHAPE_CHANGED


class TensorDigestFn(Protocol):
    """Returns the tensors of a checkpoint with their digests; raises on a file it cannot load."""

    def __call__(self, path: Path, *, cancel: CancelToken | None = None) -> list[TensorEntry]: ...


@dataclass
class FileCheck(JsonRecord):
    """The verdict on one file."""

    path: str
    status: str
    expected: str | None = None
    actual: str | None = None
    expected_size: int | None = None
    actual_size: int | None = None
    algorithm: str | None = "sha256"
    note: str | None = None


@dataclass
class TensorCheck(JsonRecord):
    """The verdict on one tensor."""

    key: str
    file: str
    status: str
    expected: str | None = None
    actual: str | None = None
    expected_dtype: str | None = None
    actual_dtype: str | None = None
    expected_shape: list[int] | None = None
    actual_shape: list[int] | None = None
    note: str | None = None
    """Set when the verdict rests on the jailed loader's word (`loader_word`)."""


LOADER_WORD = "as reported by the jailed loader: not checked here, "
"""How a tensor verdict that rests on the worker's word begins its note; the reason follows."""


def loader_word(reason: str) -> str:
    """The note of a tensor verdict whose digest the user's process could not check."""
    return LOADER_WORD + reason


@dataclass
class VerifyResult(JsonRecord):
    """Every file and tensor verdict, plus errors that stopped a tensor check."""

    files: list[FileCheck] = field(default_factory=list, metadata=typed_list(FileCheck))
    tensors: list[TensorCheck] = field(default_factory=list, metadata=typed_list(TensorCheck))
    errors: list[str] = field(default_factory=list)
    strict: bool = False

    @property
    def failed_files(self) -> list[FileCheck]:
        """Files that fail the check: not ok, and extras only when strict."""
        tolerated = {OK} if self.strict else {OK, EXTRA}
        return [f for f in self.files if f.status not in tolerated]

    @property
    def differs(self) -> bool:
        """True when a file or tensor differs from the record (not merely unchecked)."""
        return any(f.status != UNCHECKED for f in self.failed_files) or any(
            t.status not in (OK, UNCHECKED) for t in self.tensors
        )

    @property
    def unchecked_tensors(self) -> list[TensorCheck]:
        """Tensor verdicts that rest on the jailed loader's word, whatever their status."""
        return [t for t in self.tensors if t.note is not None]

    @property
    def ok(self) -> bool:
        """True when no file fails, every tensor is ok and nothing failed."""
        return (
            not self.errors
            and not self.failed_files
            and all(t.status == OK for t in self.tensors)
        )

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> VerifyResult:
        """Back from the verify contract; `ok` is recomputed, unknown keys kept (`extra`)."""
        return super().from_json({k: v for k, v in data.items() if k != "ok"})

    def to_json(self) -> dict[str, Any]:
        """The verify contract (README, "JSON contracts")."""
        return {
            "ok": self.ok,
            "strict": self.strict,
            "files": [f.to_json() for f in self.files],
            "tensors": [t.to_json() for t in self.tensors],
            "errors": self.errors,
            **self.extra,
        }


@dataclass
class Measured:
    """What was read from one file: its hash and, when asked, its tensors."""

    sha256: str | None
    tensors: list[TensorEntry] | None = None
    error: str | None = None


def measure_file(
    path: Path,
    hash_file: bool = True,
    tensor_digests: TensorDigestFn | None = None,
    progress: ProgressFn | None = None,
    cancel: CancelToken | None = None,
    hashes: HashAhead | None = None,
) -> Measured:
    """Hash a file and collect its tensor digests at the same time (the worker is a 2nd core);
    the hash comes from `hashes` when they hash it already."""
    def file_hash(token: CancelToken | None) -> str | None:
        if not hash_file:
            return None
        return hashes.get(path) if hashes is not None else sha256_file(path, progress, token)

    if tensor_digests is None:
        return Measured(sha256=file_hash(cancel))
    # imported here: concurrent.futures pulls in logging, ~30 ms off every file-level verify
    from concurrent.futures import ThreadPoolExecutor

    # a token of our own when the caller has none, so a failed hash still stops the worker
    token = cancel if cancel is not None else CancelToken()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tensor-digests") as pool:
        future = pool.submit(tensor_digests, path, cancel=token)
        try:
            sha = file_hash(token)
        except BaseException:
            token.cancel()
            raise
        try:
            return Measured(sha256=sha, tensors=future.result())
        except Cancelled:
            raise
        except Exception as exc:  # the worker's failure is a verdict on this file, not a crash
            return Measured(sha256=sha, error=f"{path}: tensors not checked: {exc}")


Plan = list[tuple[FileEntry | None, Path]]
"""Manifest entries paired with the files on disk (`plan`); None marks an extra file."""


def plan(manifest: Manifest, paths: Iterable[Path], hidden: bool = False,
         anchored: bool = False) -> Plan:
    """Pair manifest entries with files on disk; an entry with None is an extra file (hidden
    names among them only when `hidden`, as `strict` sees them: `walk_folder`).

    No paths: the manifest's folder. For a folder the user names, the manifest's names are read
    where they were recorded, the manifest's folder, whenever the named folder can hold them
    there (only the entries under the named folder are checked), else against the named
    folder (as `sha256sum -c` reads them from the folder it runs in: names written relative
    to it, or a copy of the manifest's folder, a download beside a manifest kept elsewhere;
    `_read_against`); `anchored` (a ledger record): always the manifest's folder. Every name must
    stay inside the folder it is read against: one that leaves it (`..`, or a link pointing
    out) is refused (ManifestError), and nothing outside is ever read. A file is matched by
    its path, or else by its name when only one entry has that name (a Git LFS pointer).
    """
    roots = list(paths) or [manifest.base_dir]
    # the manifest (or signature) itself, by where it lies, also reached through a linked folder
    skipped = {entry_location(manifest.source)} if manifest.source is not None else set()
    pairs: Plan = []
    claimed: set[int] = set()
    seen: set[str] = set()

    def add(entry: FileEntry | None, location: Path) -> None:
        key = os.path.abspath(location)
        if key in seen or (entry is not None and id(entry) in claimed):
            return
        seen.add(key)
        if entry is not None:
            claimed.add(id(entry))
        pairs.append((entry, location))

    base = Path(os.path.abspath(manifest.base_dir))
    for root in roots:
        root_abs = Path(os.path.abspath(root))
        if root_abs.is_dir():
            within = _read_against(manifest, root_abs, base, anchored)
            for entry in manifest.files:
                location = _recorded(within, entry)
                _refuse_outside(entry, location, within)
                if within != base or root_abs == location or root_abs in location.parents:
                    add(entry, location)
            walk = walk_folder(root_abs, hidden)
            for found in walk.files + walk.folder_links:
                if entry_location(found) not in skipped:
                    add(None, found)
        else:  # a file named whose entry another file took is not on record: an extra
            entry = _match_file(manifest, root_abs)
            add(None if entry is not None and id(entry) in claimed else entry, root_abs)
    return pairs


def _read_against(manifest: Manifest, root: Path, base: Path, anchored: bool) -> Path:
    """The folder the manifest's names are read against (and must stay inside) for a folder
    the user named: where the files were recorded (the manifest's folder) wherever the named
    folder can hold them there, since a copy beside them is no check of them.

    The manifest's folder when the manifest is `anchored` (a ledger record's names are the
    run folder's). For a folder inside it: the manifest's folder whenever a name recorded
    there lies in the named folder (decided by the names: whatever else exists there, anyone
    who can write the folder put it); else the named folder when a name is found there
    (names written relative to it, the manifest kept above), which hides no recorded file.
    For a folder holding it: the manifest's folder whenever a listed file is at its recorded
    place, else the named folder (names relative to it, `sha256sum -c` habits). Any other
    folder: the named one (a copy of the manifest's folder)."""
    if anchored or root == base:
        return base
    if base in root.parents:
        if any(root in _recorded(base, e).parents for e in manifest.files):
            return base
        return root if _holds_any(root, manifest) else base
    if root in base.parents:
        return base if _holds_any(base, manifest) else root
    return root  # a copy of the manifest's folder


def _holds_any(folder: Path, manifest: Manifest) -> bool:
    """Whether a name of the manifest, read against `folder`, is a file there."""
    return any(_recorded(folder, e).is_file() for e in manifest.files)


def _recorded(base: Path, entry: FileEntry) -> Path:
    """Where an entry's name puts its file when read against `base`."""
    return Path(os.path.normpath(base / Path(*entry.path.split("/"))))


def _refuse_outside(entry: FileEntry, location: Path, within: Path) -> None:
    """ManifestError when a name leaves the folder it is read against, by `..` or a link."""
    real_root = os.path.realpath(within)
    real = os.path.realpath(location)
    if (location != within and within not in location.parents) or (
            os.path.commonpath([real, real_root]) != real_root):
        raise ManifestError(f"the manifest names {entry.path!r}, which lies outside {within}; "
                            "a manifest may only name files inside the folder it checks")


def _match_file(manifest: Manifest, path: Path) -> FileEntry | None:
    if manifest.dialect == "git-lfs":
        # a pointer describes one file, usually saved under another name than the download
        return manifest.files[0]
    for entry in manifest.files:
        if Path(os.path.abspath(manifest.resolve(entry))) == path:
            return entry
    by_name = [e for e in manifest.files if e.path.rsplit("/", 1)[-1] == path.name]
    return by_name[0] if len(by_name) == 1 else None


def tensor_targets(pairs: Plan) -> list[Path]:
    """The files whose tensor digests `verify` asks the digest function for, in its order
    (a listing its header answers is not asked for)."""
    return [location for entry, location in pairs
            if _checks_tensors(entry, _size(location)) and not from_header(entry)]


def from_header(entry: FileEntry | None) -> bool:
    """Whether the record's tensors are checked from the file's safetensors header alone: it
    lists keys (dtypes, shapes) and no digest, as a sharded checkpoint's index does."""
    return (entry is not None and entry.tensors is not None
            and entry.path.endswith(".safetensors")
            and all(t.digest is None for t in entry.tensors))


def header_tensors(header: SafetensorsHeader) -> list[TensorEntry]:
    """The tensors a safetensors header lists (key, dtype, shape; no digest); ValueError with
    the header's refusal where a loader would refuse the file."""
    refusal = header.refusal()
    if refusal is not None:
        raise ValueError(refusal)
    return [TensorEntry(e.key, e.dtype.name, tuple(e.shape)) for e in header.entries]


def header_listing(path: Path, *, cancel: CancelToken | None = None) -> list[TensorEntry]:
    """`header_tensors` of a local file (a `TensorDigestFn` that reads the header only)."""
    with open(path, "rb") as fh:
        return header_tensors(read_header(fh, os.fstat(fh.fileno()).st_size))


def hash_targets(pairs: Plan) -> list[Path]:
    """The files of `pairs` that `verify` hashes: listed with a SHA-256, present, of the
    listed size (a file of another size fails without being read)."""
    return [location for entry, location in pairs if _hashes(entry, _size(location))]


def _hashes(entry: FileEntry | None, size: int | None) -> bool:
    return (entry is not None and bool(entry.sha256) and size is not None
            and (entry.size is None or entry.size == size))


def _checks_tensors(entry: FileEntry | None, size: int | None) -> bool:
    # listed with tensors and present: a file of another size still gets its tensor verdicts
    return entry is not None and entry.tensors is not None and size is not None


def verify(
    manifest: Manifest,
    paths: Iterable[Path] = (),
    tensor_digests: TensorDigestFn | None = None,
    progress: ProgressFn | None = None,
    cancel: CancelToken | None = None,
    strict: bool = False,
    pairs: Plan | None = None,
    whole: bool = True,
    hashes: HashAhead | None = None,
) -> VerifyResult:
    """Verify files (and their tensors, when the manifest has them and a digest fn is given);
    `pairs`, when the caller already planned `paths`, spares a second walk of the folders.
    Files are hashed a core each at once (`HashAhead`; `hashes` when the caller runs them
    across several calls), verdicts come in the plan's order. `whole` False is one part of a
    batch: the checks over every file (extras an index picks, nothing checked at all) are left
    to the caller."""
    pairs = plan(manifest, paths, hidden=strict) if pairs is None else pairs
    sizes = [_size(loc) for _e, loc in pairs]
    to_hash = {i for i, (entry, _loc) in enumerate(pairs) if _hashes(entry, sizes[i])}
    if hashes is not None:
        return _verify_pairs(manifest, pairs, sizes, to_hash, tensor_digests, cancel, strict,
                             whole, paths, hashes)
    track = ByteProgress(progress, sum(sizes[i] or 0 for i in to_hash))
    with HashAhead([pairs[i][1] for i in sorted(to_hash)], track, cancel) as ahead:
        return _verify_pairs(manifest, pairs, sizes, to_hash, tensor_digests, cancel, strict,
                             whole, paths, ahead)


def _verify_pairs(manifest: Manifest, pairs: Plan, sizes: list[int | None], to_hash: set[int],
                  tensor_digests: TensorDigestFn | None, cancel: CancelToken | None,
                  strict: bool, whole: bool, paths: Iterable[Path],
                  hashes: HashAhead) -> VerifyResult:
    result = VerifyResult(strict=strict)
    for i, (entry, location) in enumerate(pairs):
        check(cancel)
        size = sizes[i]
        if entry is None:
            note = unread_note(location)
            if size is None and note is None:
                result.errors.append(f"{location}: no such file, and the manifest does not "
                                     "list it")
            else:
                result.files.append(FileCheck(path=str(location), status=EXTRA,
                                              actual_size=size, note=note))
            continue
        record = FileCheck(
            path=entry.path,
            status=OK,
            expected=entry.sha256,
            expected_size=entry.size,
            actual_size=size,
        )
        result.files.append(record)
        if size is None:
            record.status, record.note = MISSING, unread_note(location)
            continue
        want_tensors = tensor_digests is not None and _checks_tensors(entry, size)
        digests = header_listing if from_header(entry) else tensor_digests
        if entry.size is not None and entry.size != size:
            record.status = SIZE_MISMATCH
            if not want_tensors:  # a file of another size fails without being read
                continue
        measured = measure_file(
            location,
            hash_file=i in to_hash,
            tensor_digests=digests if want_tensors else None,
            cancel=cancel,
            hashes=hashes,
        )
        record.actual = measured.sha256
        if entry.sha256 and i in to_hash and measured.sha256 != entry.sha256:
            record.status = MISMATCH
        if not entry.sha256 and record.status == OK:
            record.note = unhashed_note(entry, want_tensors)
        if measured.error:
            result.errors.append(measured.error)
        elif want_tensors:
            checks = compare_tensors(entry.tensors or [], measured.tensors or [], entry.path)
            if i in to_hash and record.status == OK:
                vouch_by_hash(checks)
            result.tensors += checks
    if whole:  # nothing compared is judged first: an extra a loader reads is still no check
        if manifest.files and all(f.status == EXTRA for f in result.files):
            result.errors.append(nothing_checked(manifest, paths))
        loaded_extras(manifest, pairs).mark(result.files)
    return result


def vouch_by_hash(checks: list[TensorCheck]) -> None:
    """A file whose SHA-256, computed here, is the one on record holds the recorded bytes: its
    tensors that the loader alone called equal are `ok` on that hash, not on its word."""
    for check_ in checks:
        if check_.status == UNCHECKED:
            check_.status, check_.note = OK, None


def unhashed_note(entry: FileEntry, tensors: bool) -> str:
    """What an `ok` meant for a file the manifest records no SHA-256 of: its bytes beyond
    what was compared (a pickle's code among them) are unchecked."""
    named = tensors and not any(t.digest for t in entry.tensors or ())
    compared = (["size"] if entry.size is not None else []) + (
        ["tensor names"] if named else ["tensors"] if tensors else [])
    if not compared:
        return "no SHA-256 recorded: found, its bytes not compared"
    return f"no SHA-256 recorded: only its {' and '.join(compared)} compared, not its other bytes"


def nothing_checked(manifest: Manifest, paths: Iterable[Path]) -> str:
    """Why a verification that compared no file is no pass: what was expected, and where."""
    expected = [e.path for e in manifest.files]
    shown = ", ".join(expected[:3]) + (f" and {len(expected) - 3} more" if len(expected) > 3
                                       else "")
    roots = [str(p) for p in paths] or [str(manifest.base_dir)]
    return (f"nothing was checked: none of the {counted(len(expected), 'file')} the manifest "
            "lists "
            f"({shown}) was found under {', '.join(roots)}; their paths are read relative to "
            f"{os.path.abspath(manifest.base_dir)} (the manifest's folder). Name the folder "
            "that holds them, or run verify from the manifest's folder")


def verify_sha256(
    path: Path,
    expected: str,
    progress: ProgressFn | None = None,
    cancel: CancelToken | None = None,
) -> VerifyResult:
    """Check one file against a SHA-256 given by hand (e.g. copied from the Hub's file page)."""
    size = _size(path)
    record = FileCheck(path=str(path), status=MISSING, expected=expected.lower(), actual_size=size)
    if size is not None:
        record.actual = sha256_file(path, progress, cancel)
        record.status = OK if record.actual == record.expected else MISMATCH
    return VerifyResult(files=[record], strict=True)


def verify_tensors_only(
    manifest: Manifest,
    paths: Iterable[Path],
    tensor_digests: TensorDigestFn,
    cancel: CancelToken | None = None,
) -> VerifyResult:
    """Compare the tensors of files (e.g. a conversion) with every tensor the manifest records."""
    result = VerifyResult()
    paths = list(paths)
    expected = [t for f in manifest.files for t in (f.tensors or [])]
    if not manifest.has_tensors:
        result.errors.append(f"the {manifest.dialect} manifest records no tensors")
        return result
    actual: list[TensorEntry] = []
    for path in paths:
        measured = measure_file(
            Path(path), hash_file=False, tensor_digests=tensor_digests, cancel=cancel
        )
        if measured.error:
            result.errors.append(measured.error)
        actual += measured.tensors or []
    if not result.errors:  # a file that could not be read would make every tensor "missing"
        result.tensors = compare_tensors(expected, actual, ", ".join(str(p) for p in paths))
    return result


def compare_tensors(
    expected: list[TensorEntry], actual: list[TensorEntry], file: str
) -> list[TensorCheck]:
    """Match tensors by key and compare dtype, shape and digest; an `ok` whose digest the
    user's process could not check (`TensorEntry.unchecked`) is `unchecked`, and every verdict
    on such a digest carries the note why (`loader_word`)."""
    have = {t.key: t for t in actual}
    checks = []
    for want in expected:
        got = have.pop(want.key, None)
        check_ = TensorCheck(
            key=want.key,
            file=file,
            status=OK,
            expected=want.digest,
            expected_dtype=want.dtype,
            expected_shape=_shape(want.shape),
        )
        checks.append(check_)
        if got is None:
            check_.status = MISSING
            continue
        check_.actual = got.digest
        check_.actual_dtype = got.dtype
        check_.actual_shape = _shape(got.shape)
        if got.unchecked is not None:
            check_.note = loader_word(got.unchecked)
        if (
            want.dtype is not None and canonical_dtype(want.dtype) != canonical_dtype(got.dtype)
        ) or (want.shape is not None and tuple(want.shape) != tuple(got.shape or ())):
            check_.status = DTYPE_OR_SHAPE_CHANGED
        elif want.digest is not None and (
            got.digest != want.digest
            or (want.digest_algorithm or "sha256") != (got.digest_algorithm or "sha256")
        ):
            check_.status = MISMATCH
        if check_.status == OK and check_.note is not None:
            check_.status = UNCHECKED  # equal only on the worker's word: no ok
    checks += [
        TensorCheck(
            key=t.key,
            file=file,
            status=EXTRA,
            actual=t.digest,
            actual_dtype=t.dtype,
            actual_shape=_shape(t.shape),
            note=None if t.unchecked is None else loader_word(t.unchecked),
        )
        for t in have.values()
    ]
    return checks


def _shape(shape: Iterable[int] | None) -> list[int] | None:
    return None if shape is None else list(shape)


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size if path.is_file() else None
    except OSError:
        return None
