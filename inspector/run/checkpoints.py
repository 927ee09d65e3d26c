"""A run folder's checkpoint ledger, read without torch: what was saved, and what is intact now.

The training process (`inspector.ledger`) appends one `ledger.save` record to the run journal
(`run.journal`) per checkpoint it saved and re-read, and one `ledger.rotate` record per
checkpoint it deleted to keep N. A save record holds the step, epoch, time, host, rank, the
checkpoint's path relative to the run folder, its size, its SHA-256 (a folder's is that of its
sha256sum listing), the outcome of the re-read and, under `files`, the files in this project's
JSON manifest format (`integrity.manifest.FileEntry`: path, size, sha256, format, tensors), so a
record is a manifest that `integrity.verify` checks unchanged.

`check_saves` re-checks records fast: sizes first, then file hashes on threads (hashlib
releases the GIL); only a file whose hash changed has its tensors digested (by the injected
`tensor_digests`, as in `integrity.verify`) to name what changed. `latest_valid` is the newest
verified record whose bytes still match: what a resume should load.

Nothing a journal line says is believed past its own checks: only lines whose own seal holds
(`Journal.sound`) are read as saves, and a save whose path (or any of its files') is absolute,
climbs out with `..`, or resolves outside the run folder is refused as a bad record, so no
record can name a file elsewhere as the checkpoint to resume from; a record whose path, size
or SHA-256 is not what its own files give (the files are what is hashed and signed, the path is
what a reader answers), or whose fields are not of the types a save writes, is refused too.
`resume_choice` says which newer checkpoints it passed over, and why.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from inspector.core.errors import CodedError
from inspector.core.progress import CancelToken, check
from inspector.core.vocabulary import CheckpointState, SaveOutcome, TensorCheckStatus
from inspector.integrity.hashing import sha256_file
from inspector.integrity.manifest import FileEntry, Manifest, format_sha256sum
from inspector.integrity.verify import TensorDigestFn, compare_tensors
from inspector.run import journal
from inspector.run import save_fields as fields
from inspector.run.metrics import Alarm, read_alarms

SAVE_KIND = "ledger.save"
ROTATE_KIND = "ledger.rotate"


class LedgerError(CodedError):
    """A ledger that cannot be read, or a save the ledger refused or could not prove."""


@dataclass(frozen=True)
class SaveRecord:
    """One ledgered checkpoint, as its `ledger.save` record holds it."""

    path: str
    size: int
    sha256: str | None
    files: tuple[FileEntry, ...]
    outcome: SaveOutcome
    step: int | None = None
    epoch: float | None = None
    time: str = ""
    host: str = ""
    rank: int = 0
    layout: str = "file"
    format: str | None = None
    writer: str = ""
    verified: bool = False
    warnings: tuple[str, ...] = ()
    detail: str | None = None
    seq: int = -1
    line: int = field(default=0, compare=False)
    """The 1-based journal line it was read from (0 for a record just appended)."""
    chain: str | None = field(default=None, compare=False)
    """The chain id its line carries (None on a journal's first line, whose hash is the id:
    `RunLedger.chain_of`)."""

    def to_fields(self) -> dict[str, Any]:
        """The record's fields as the journal stores them (without seq and line)."""
        return {
            "step": self.step, "epoch": self.epoch, "time": self.time, "host": self.host,
            "rank": self.rank, "path": self.path, "layout": self.layout, "format": self.format,
            "writer": self.writer, "size": self.size, "sha256": self.sha256,
            "verified": self.verified, "outcome": self.outcome,
            "warnings": list(self.warnings), "detail": self.detail,
            "files": [f.to_json() for f in self.files],
        }

    @classmethod
    def from_entry(cls, entry: journal.JournalEntry) -> SaveRecord:
        """Read one `ledger.save` journal entry: every field of the type a save writes
        (`run.save_fields`), else LedgerError `bad_record`."""
        rec = entry.record
        try:
            path = fields.file_name(fields.typed(rec, "path", str, required=True), "its path")
            return cls(
                path=path, size=fields.count(rec, "size"),
                sha256=fields.typed(rec, "sha256", str),
                files=fields.saved_files(rec, f"line {entry.line}"),
                outcome=fields.outcome(rec), step=fields.typed(rec, "step", int),
                epoch=fields.finite(rec, "epoch"), time=fields.typed(rec, "time", str) or "",
                host=fields.typed(rec, "host", str) or "",
                rank=fields.typed(rec, "rank", int) or 0,
                layout=fields.typed(rec, "layout", str) or "file",
                format=fields.typed(rec, "format", str),
                writer=fields.typed(rec, "writer", str) or "",
                verified=bool(fields.typed(rec, "verified", bool)),
                warnings=fields.texts(rec, "warnings"), detail=fields.typed(rec, "detail", str),
                seq=entry.seq, line=entry.line, chain=fields.typed(rec, "chain", str),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise LedgerError("bad_record", f"line {entry.line}: not a save record: {exc}") from exc

    def manifest(self, run_dir: Path, source: Path | None = None) -> Manifest:
        """The record as a manifest that `integrity.verify.verify` checks unchanged."""
        return Manifest(dialect="ledger", files=list(self.files), base_dir=run_dir, source=source)

    @property
    def strict(self) -> bool:
        """Whether a file its checkpoint holds that the record does not name fails a check
        through the record: a folder save's files are the folder's complete listing, and a
        resume loads what the folder holds, so `check_saves` calls such a file a change
        (`unwritten`) and `verify` and `report` through the record fail it as `--strict` does."""
        return self.layout == "folder"

    @property
    def label(self) -> str:
        """'step 12,000' or the path when no step was given."""
        return f"step {self.step:,}" if self.step is not None else self.path


@dataclass(frozen=True)
class RunLedger:
    """A run's journal read whole: its saves, which were rotated away, and every other kind."""

    run_dir: Path
    journal: journal.Journal
    saves: tuple[SaveRecord, ...]
    removed: Mapping[int, int] = field(default_factory=dict)
    """A save's line -> the line of the `ledger.rotate` record that deleted its checkpoint
    (keyed by line: a line is one place, where a seq is what a line claims)."""
    replaced: Mapping[int, int] = field(default_factory=dict)
    """A save's line -> the line of the later save that wrote over the same path (Lightning's
    `last.ckpt`, a `save_pretrained` into one folder): its bytes are gone on purpose."""
    bad_records: tuple[str, ...] = ()
    kinds: Mapping[str, int] = field(default_factory=dict)
    """How many records of each kind the journal holds (`guard.alarm` included)."""
    untrusted: tuple[SaveRecord, ...] = ()
    """Save records on lines whose seal failed, their paths inside the run folder: shown to
    the user, marked, and never chosen to resume from."""

    @property
    def path(self) -> Path:
        """The journal file."""
        return self.journal.path

    def live(self) -> list[SaveRecord]:
        """Saves neither rotated away nor written over, oldest first."""
        return [s for s in self.saves
                if s.line not in self.removed and s.line not in self.replaced]

    def gone(self, record: SaveRecord) -> CheckpointCheck | None:
        """The record's check as the journal tells it, when a line says its checkpoint is
        gone on purpose (rotated away, or written over by a later save); else None."""
        if record.line in self.removed:
            return CheckpointCheck(record, CheckpointState.REMOVED, detail=(
                f"deleted by rotation, as line {self.removed[record.line]} records"))
        if record.line in self.replaced:
            return CheckpointCheck(record, CheckpointState.REPLACED, detail=(
                f"written over by the save on line {self.replaced[record.line]}"))
        return None

    def doubts_gone(self, signed: bool) -> bool:
        """Whether a line saying a checkpoint is gone is checked against the disk rather than
        believed: on an unauthenticated journal (no seal key) anyone can append one, and where
        the caller checks signatures (`signed`) a checkpoint still present whose signature
        holds outweighs it (a real rotation deletes it, and never the newest valid save)."""
        return signed and not self.journal.authenticated

    def resolve(self, record: SaveRecord) -> Path:
        """Where a record's checkpoint lies."""
        return self.run_dir / Path(*record.path.split("/"))

    def chain_of(self, record: SaveRecord) -> str | None:
        """The chain id of the journal a record was read from, as its line names it (the
        first line's own hash for the first line): which run it is a save of."""
        return record.chain or (self.journal.head if record.seq == 0 else None)


def read_ledger(path: str | os.PathLike[str]) -> RunLedger:
    """Read the ledger of a run folder, or of a journal file named directly."""
    given = Path(path)
    source = given if given.is_file() else journal.journal_path(given)
    if not source.is_file():
        raise LedgerError("no_ledger", f"{given}: no {journal.JOURNAL_NAME} here; save "
                          "checkpoints through inspector.ledger to start one (docs/ledger.md)")
    try:
        read = journal.read(source)
    except OSError as exc:
        raise LedgerError("unreadable", f"{source}: {exc.strerror or exc}") from exc
    saves, untrusted, bad, rotations = [], [], [], {}
    root = source.parent
    sound = {e.line for e in read.sound}
    for entry in read.entries:
        if entry.kind == SAVE_KIND:
            trusted = entry.line in sound  # judged before any field of the line is read
            try:
                record = _read_save(root, entry)
            except LedgerError as exc:
                if trusted:  # an unsound line is already named, as not trusted
                    bad.append(exc.message)
                continue
            (saves if trusted else untrusted).append(record)
        elif (entry.line in sound and entry.kind == ROTATE_KIND
              and isinstance(entry.record.get("save_seq"), int)):
            rotations.setdefault(entry.record["save_seq"], entry.line)
    bad += [f"line {p.line}: {p.kind}, not trusted: {p.detail}" for p in read.unsound]
    kinds = Counter(e.kind for e in read.entries)
    return RunLedger(root, read, tuple(saves), _removed(saves, rotations), _replaced(saves),
                     tuple(bad), dict(kinds), tuple(untrusted))


def _read_save(root: Path, entry: journal.JournalEntry) -> SaveRecord:
    """A `ledger.save` line read as a record, its fields typed, its path and size agreeing
    with its files and every path inside the run folder; else LedgerError, whatever the
    line holds (no other exception leaves it)."""
    return _inside(root, _agrees(SaveRecord.from_entry(entry)))


def summary(layout: str, files: Sequence[FileEntry]) -> tuple[int, str | None]:
    """A save's size and SHA-256 as its files give them (a folder's: `folder_digest`)."""
    size = sum(f.size or 0 for f in files)
    return size, files[0].sha256 if layout == "file" and files else folder_digest(list(files))


def _agrees(record: SaveRecord) -> SaveRecord:
    """The record, when its path, size and SHA-256 are what its files say; else LedgerError.
    The files are what a check hashes and a signature covers, and the path is what a reader
    answers, so a record whose path names another file than its checked ones is refused."""
    where = f"line {record.line}"
    if record.layout == "file":
        own = len(record.files) == 1 and record.files[0].path == record.path
        why = "a file save lists exactly one file, its own path"
    elif record.layout == "folder":
        base = record.path.rstrip("/") + "/"
        own = all(f.path.startswith(base) for f in record.files)
        why = "a folder save lists only files inside its folder"
    else:
        raise LedgerError("bad_record", f"{where}: layout {record.layout!r} is neither a "
                          "file nor a folder save")
    if not own:
        named = ", ".join(f.path for f in record.files[:3]) or "none"
        raise LedgerError("bad_record", f"{where}: {record.path} is not what its files name "
                          f"({named}): {why}")
    if (record.size, record.sha256) != summary(record.layout, record.files):
        raise LedgerError("bad_record", f"{where}: {record.path}'s size or SHA-256 is not what "
                          "its files give")
    return record


def _inside(root: Path, record: SaveRecord) -> SaveRecord:
    """The record, when its path and every file's lie inside the run folder; else LedgerError."""
    base = root.resolve()
    for name in (record.path, *(f.path for f in record.files)):
        parts = name.replace("\\", "/").split("/")
        if not name or name.startswith("/") or ".." in parts:
            raise LedgerError("bad_record", f"line {record.line}: the path {name!r} leaves the "
                              "run folder; a record may only name files inside it")
        try:
            where = (root / Path(*parts)).resolve()
        except (OSError, RuntimeError) as exc:  # RuntimeError: a link loop (Python < 3.13)
            raise LedgerError("bad_record", f"line {record.line}: {name} cannot be followed "
                              f"to a file ({exc}); it is not read") from exc
        if not where.is_relative_to(base):  # the record is sound; what lies there now is not
            raise LedgerError("bad_record", f"line {record.line}: {name} is now a link to "
                              f"{where}, outside the run folder; it is not read")
    return record


def _removed(saves: list[SaveRecord], rotations: Mapping[int, int]) -> dict[int, int]:
    """The lines of the saves a `ledger.rotate` line names by seq (`rotations`: seq -> its
    line), each to that line; a seq two sound saves claim names neither (the journal reader
    calls such a fork unsound, so this is the second lock)."""
    claims = Counter(s.seq for s in saves)
    return {s.line: rotations[s.seq] for s in saves
            if s.seq in rotations and claims[s.seq] == 1}


def _replaced(saves: list[SaveRecord]) -> dict[int, int]:
    """Saves (by line) a later one wrote over: same path, and the later one was put in place
    (a mismatched save never replaces its target)."""
    newest: dict[str, SaveRecord] = {}
    replaced = {}
    for record in saves:
        earlier = newest.get(record.path)
        if record.outcome != SaveOutcome.MISMATCH:
            if earlier is not None:
                replaced[earlier.line] = record.line
            newest[record.path] = record
    return replaced


@dataclass(frozen=True)
class CheckpointCheck:
    """One record checked against the bytes on disk now."""

    record: SaveRecord
    state: CheckpointState
    changed_files: tuple[str, ...] = ()
    changed_tensors: tuple[str, ...] = ()
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        """The `run verify --json` record of one checkpoint."""
        r = self.record
        return {"path": r.path, "step": r.step, "epoch": r.epoch, "time": r.time,
                "rank": r.rank, "size": r.size, "outcome": r.outcome, "state": self.state,
                "changed_files": list(self.changed_files),
                "changed_tensors": list(self.changed_tensors), "detail": self.detail,
                "line": r.line}


def check_saves(
    ledger: RunLedger,
    records: Iterable[SaveRecord] | None = None,
    *,
    jobs: int | None = None,
    tensor_digests: TensorDigestFn | None = None,
    cancel: CancelToken | None = None,
    signed: bool = False,
) -> list[CheckpointCheck]:
    """Check records (default: every save) against the disk: sizes, then hashes in parallel.
    With `signed` (the caller checks signatures), a save the journal calls gone is checked
    too where `RunLedger.doubts_gone`: intact, it is named "yet present" (`_as_told`)."""
    chosen = list(ledger.saves if records is None else records)
    gone = {i: told for i, rec in enumerate(chosen) if (told := ledger.gone(rec)) is not None}
    results: dict[int, CheckpointCheck] = {}
    if not ledger.doubts_gone(signed):
        results.update(gone)
    to_hash: list[tuple[int, FileEntry, Path]] = []
    for i, rec in enumerate(chosen):
        if i in results:
            continue
        missing, resized = [], []
        for entry in rec.files:
            where = ledger.run_dir / Path(*entry.path.split("/"))
            try:
                size = where.stat().st_size
            except OSError:
                missing.append(entry.path)
                continue
            if entry.size is not None and size != entry.size:
                resized.append(entry.path)
            elif entry.sha256:
                to_hash.append((i, entry, where))
        added = unwritten(ledger, rec)
        if missing or not rec.files:
            results[i] = CheckpointCheck(rec, CheckpointState.MISSING, tuple(missing),
                                         detail=_named("missing", missing))
        elif resized:
            results[i] = CheckpointCheck(rec, CheckpointState.CHANGED, tuple(resized),
                                         detail=_named("size differs", resized))
        elif added:
            # a resume loads what the folder holds (a trainer's optional rng_state.pth,
            # scheduler.pt): a file put there since is not the checkpoint that was proven
            results[i] = CheckpointCheck(rec, CheckpointState.CHANGED, tuple(added),
                                         detail=_named("added since the save", added))
    pending = [(i, e, p) for i, e, p in to_hash if i not in results]
    workers = max(1, min(jobs or os.cpu_count() or 1, len(pending) or 1))
    with ThreadPoolExecutor(workers, thread_name_prefix="ledger-hash") as pool:
        hashes = list(pool.map(lambda item: _hash(item[2], cancel), pending))
    changed: dict[int, list[tuple[FileEntry, Path]]] = {}
    for (i, entry, where), actual in zip(pending, hashes, strict=True):
        if actual != entry.sha256:
            changed.setdefault(i, []).append((entry, where))
    for i, rec in enumerate(chosen):
        if i in results:
            continue
        if i not in changed:
            results[i] = CheckpointCheck(rec, CheckpointState.INTACT)
            continue
        files = [e.path for e, _ in changed[i]]
        tensors = _changed_tensors(changed[i], tensor_digests, cancel)
        what = _named("tensor", tensors) if tensors else _named("bytes differ", files)
        results[i] = CheckpointCheck(rec, CheckpointState.CHANGED, tuple(files), tuple(tensors),
                                     detail=what)
    return [_as_told(results[i], gone.get(i)) for i in range(len(chosen))]


def _as_told(check: CheckpointCheck, told: CheckpointCheck | None) -> CheckpointCheck:
    """A check of a save the journal calls gone (`told`): the journal's word when its bytes
    are not all there as recorded, else intact and named as present against that word."""
    if told is None or check is told:
        return check
    if check.state != CheckpointState.INTACT:
        return told
    return replace(check, detail=f"{told.detail}, yet present and intact")


def checkpoint_files(folder: Path, links: bool = False) -> list[Path]:
    """Every file of a checkpoint folder, sorted (hidden ones too: DCP's `.metadata`), as the
    ledger records them; with `links`, every link too, a dangling one included (a resume that
    opens it fails, so it is a file the save did not write)."""
    return sorted(p for p in folder.rglob("*") if p.is_file() or (links and p.is_symlink()))


def unwritten(ledger: RunLedger, rec: SaveRecord) -> list[str]:
    """The files in a checkpoint folder that its save record does not name, as the record
    names files (relative to the run folder); none for a record that is not `strict`."""
    if not rec.strict:
        return []
    folder = ledger.resolve(rec)
    named = {f.path for f in rec.files}
    base = rec.path.rstrip("/")
    try:
        found = checkpoint_files(folder, links=True)
    except OSError:
        return []
    return sorted(name for name in (f"{base}/{p.relative_to(folder).as_posix()}" for p in found)
                  if name not in named)


def _hash(path: Path, cancel: CancelToken | None) -> str | None:
    check(cancel)
    try:
        return sha256_file(path, cancel=cancel)
    except OSError:
        return None


def _changed_tensors(files: list[tuple[FileEntry, Path]], digests: TensorDigestFn | None,
                     cancel: CancelToken | None) -> list[str]:
    """The keys whose digest differs from the record, in the files whose hash changed. Only
    digests checked here name a tensor: where the user's process could not check the jailed
    loader's (`TensorEntry.unchecked`: a pickle holding more than tensors), which tensors it
    calls changed is its word alone, and a taken-over loader names whichever it likes; such a
    file is named by its SHA-256, computed here, instead ("bytes differ")."""
    if digests is None:
        return []
    names = []
    for entry, where in files:
        if not entry.tensors:
            continue
        try:
            actual = digests(where, cancel=cancel)
        except (CodedError, OSError):
            continue  # too damaged to load: the file is named instead
        checks = compare_tensors(entry.tensors, actual, entry.path)
        if any(t.note is not None for t in checks):
            continue  # the loader's word (its `unchecked` too): the file is named instead
        names += [t.key for t in checks if t.status != TensorCheckStatus.OK]
    return names


def _named(what: str, items: list[str], shown: int = 3) -> str:
    if not items:
        return what
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return f"{what}: {', '.join(items[:shown])}{more}"


@dataclass(frozen=True)
class ResumeChoice:
    """The checkpoint a resume should load, and each newer one passed over with the reason."""

    record: SaveRecord | None
    skipped: tuple[tuple[SaveRecord, str], ...] = ()
    untrusted: tuple[str, ...] = ()
    """Journal lines and records that were not read as saves (broken seals, bad paths)."""


def resume_choice(run_dir: str | os.PathLike[str], rank: int | None = None,
                  checks: Sequence[CheckpointCheck] = (),
                  refuse: Callable[[RunLedger, CheckpointCheck], str | None] | None = None
                  ) -> ResumeChoice:
    """The newest verified checkpoint (of `rank`, when given) whose bytes match its record,
    with every newer one it passed over and why. `checks` already made of the ledger's saves
    (the Run pane hashes them all) are used instead of hashing those files again; `refuse`
    says why an intact one must be passed over too (its signature, with a key given). With
    `refuse` on a journal without a seal key, a save a line calls gone is taken when it is
    present, intact and not refused, and that line is named (`RunLedger.doubts_gone`)."""
    ledger = read_ledger(run_dir)
    signed = refuse is not None
    known = {c.record.line: c for c in checks}
    skipped: list[tuple[SaveRecord, str]] = []
    for record in reversed(ledger.saves if ledger.doubts_gone(signed) else ledger.live()):
        if rank is not None and record.rank != rank:
            continue
        checked = known.get(record.line)
        told = ledger.gone(record)
        if told is not None:  # gone, as a line says, unless its bytes are all still there
            checked = checked or check_saves(ledger, [record], jobs=1, signed=signed)[0]
            if checked.state != CheckpointState.INTACT:
                continue
        if record.outcome == SaveOutcome.UNHEALTHY:
            skipped.append((record, record.detail or "unhealthy at save"))
            continue
        if record.outcome != SaveOutcome.VERIFIED:
            skipped.append((record, f"its save was not proven ({record.outcome})"))
            continue
        checked = checked or check_saves(ledger, [record], jobs=1, signed=signed)[0]
        refused = None if refuse is None or checked.state != CheckpointState.INTACT else refuse(
            ledger, checked)
        if refused is not None:
            skipped.append((record, refused))
            continue
        if checked.state == CheckpointState.INTACT:
            unbelieved = () if told is None else (
                f"the journal's word that {record.label} ({record.path}) is {told.detail}: it "
                "is present, intact and signed, and anyone can append such a line to a "
                "journal without a seal key",)
            return ResumeChoice(record, tuple(skipped), ledger.bad_records + unbelieved)
        # a missing file's detail already leads with the word ("missing: a.pt")
        said = checked.detail.startswith(str(checked.state))
        skipped.append((record, checked.detail if said else f"{checked.state}: {checked.detail}"))
    return ResumeChoice(None, tuple(skipped), ledger.bad_records)


def latest_valid(run_dir: str | os.PathLike[str], rank: int | None = None,
                 refuse: Callable[[RunLedger, CheckpointCheck], str | None] | None = None
                 ) -> SaveRecord | None:
    """The newest verified checkpoint (of `rank`, when given) whose bytes match its record and
    that `refuse` does not pass over (`signing.saves.signed_by(key)`: its signature)."""
    return resume_choice(run_dir, rank, refuse=refuse).record


def folder_digest(files: list[FileEntry]) -> str:
    """A folder checkpoint's SHA-256: that of its files' sha256sum listing, sorted by path."""
    listing = format_sha256sum(sorted(files, key=lambda f: f.path))
    return hashlib.sha256(listing.encode("utf-8", "surrogateescape")).hexdigest()


@dataclass(frozen=True)
class LedgerSummary:
    """A run's ledger in a few numbers, for the report and the app."""

    journal: str
    saves: int
    verified_at_save: int
    intact: int
    changed: int
    missing: int
    removed: int
    replaced: int
    latest_valid: SaveRecord | None
    chain_intact: bool
    problems: tuple[str, ...]
    kinds: Mapping[str, int]
    alarms: tuple[Alarm, ...] = ()
    """The training guard's alarms in the same journal, with their attribution."""
    sealed: bool = False
    """Every line's seal was made with the seal key (`journal.unauthenticated` otherwise)."""

    def to_json(self) -> dict[str, Any]:
        """The report's `ledger` section."""
        latest = self.latest_valid
        return {
            "journal": self.journal, "saves": self.saves,
            "verified_at_save": self.verified_at_save, "intact": self.intact,
            "changed": self.changed, "missing": self.missing, "removed": self.removed,
            "replaced": self.replaced,
            "latest_valid": None if latest is None else {
                "path": latest.path, "step": latest.step, "time": latest.time},
            "chain_intact": self.chain_intact, "sealed": self.sealed,
            "problems": list(self.problems),
            "records": dict(self.kinds),
            "alarms": [a.to_json() for a in self.alarms],
        }


def summarize(ledger: RunLedger, checks: list[CheckpointCheck]) -> LedgerSummary:
    """Sum up a ledger and the checks of its saves (`check_saves(ledger)`)."""
    states = Counter(c.state for c in checks)
    valid = [c.record for c in checks if c.state == CheckpointState.INTACT
             and c.record.outcome == SaveOutcome.VERIFIED]
    problems = tuple(f"line {p.line}: {p.kind}: {p.detail}" for p in ledger.journal.problems)
    return LedgerSummary(
        journal=str(ledger.path), saves=len(ledger.saves),
        verified_at_save=sum(s.outcome == SaveOutcome.VERIFIED for s in ledger.saves),
        intact=states[CheckpointState.INTACT], changed=states[CheckpointState.CHANGED],
        missing=states[CheckpointState.MISSING], removed=states[CheckpointState.REMOVED],
        replaced=states[CheckpointState.REPLACED],
        latest_valid=valid[-1] if valid else None, chain_intact=ledger.journal.intact,
        problems=problems + ledger.bad_records, kinds=ledger.kinds,
        alarms=read_alarms(ledger.journal), sealed=ledger.journal.authenticated,
    )
