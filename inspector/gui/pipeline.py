"""What happens to a dropped file: static scan at once, then hash and jailed load in turn.

A dangerous file is only hashed, never handed to the sandbox; a suspicious one waits for
the user to allow exactly the globals it needs. Heavy jobs (hash, load, convert, verify,
diff) run one at a time so two big checkpoints never fight for memory and disk.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from inspector.checkpoint.results import InspectResult, LoadError
from inspector.core.progress import CancelToken
from inspector.core.vocabulary import (
    DEFAULT_REQUIRED_JAIL,
    DocumentState,
    JailRequirement,
    Severity,
    Verdict,
)
from inspector.gui.document import FileDocument
from inspector.gui.jobs import EmitFn, Job, JobFn, JobRunner
from inspector.integrity.shard_index import has_one_sha256
from inspector.scan.dcp_folder import is_dcp_folder, scan_folder
from inspector.scan.discover import Found, discover_entries
from inspector.scan.pickles.policy import classify
from inspector.scan.result import ScanResult
from inspector.shards.inspect import scan_set, sharded_set

WORKER_NICE = 10

STAGE_WORDS = {
    "scan": "Scanning",
    "hash": "Hashing (SHA-256)",
    "sha256": "Hashing (SHA-256)",
    "jail": "Starting the sandbox",
    "load": "Loading with weights_only=True",
    "shards": "Loading shards",
    "stats": "Computing tensor statistics",
    "tensors": "Computing tensor statistics",
    "convert": "Converting to safetensors",
    "write": "Writing safetensors",
    "verify": "Verifying",
    "diff": "Comparing tensors",
    "manifest": "Creating manifest",
    "full_check": "Checking every record's CRC-32",
    "digests": "Computing tensor digests",
    "round trip": "Checking the device's round trip",
    "dry-run": "Reading the pickles (dry run)",
}
UNNAMED_STAGE = "Working in the sandbox"
"""What a stage this app does not name shows: a worker's progress event is its word, and its
own text could pose as a verdict in the status bar ("every tensor checked: SAFE")."""


def stage_text(stage: str) -> str:
    """Human words for a progress event's stage: only the app's own words."""
    return STAGE_WORDS.get(stage, UNNAMED_STAGE)


@dataclass(frozen=True)
class Opened:
    """What opening `paths` opens: `files`, one document each, and each plain folder among
    them with every entry the Folder pane lists for it (`folders`: its documents and each
    folder entry the walk did not enter, whose line says why)."""

    files: list[Found]
    folders: list[tuple[Path, list[Found]]]


def open_list(paths: Iterable[str | os.PathLike[str]]) -> Opened:
    """Files to open, as `scan.discover` lists them for `scan DIR`: folders walked (hidden files
    included), each real file once. A folder's file that is no checkpoint at all is dropped by
    its scan (`Pipeline.skipped`), by the same rule `scan DIR` uses. A model folder of shards
    (or its `*.index.json`), or a torch.distributed.checkpoint folder, is one document, first:
    `inspect` reads it as one checkpoint. Each folder is walked once."""
    paths = list(paths)
    whole = [Path(os.path.abspath(p)) for p in paths if _is_model_folder(Path(p))]
    rest = [p for p in paths if Path(os.path.abspath(p)) not in whole]
    # a parent folder of models: one document per model folder under it, not its shards
    inner = [m for p in rest if Path(p).is_dir() for m in model_folders(Path(p))]
    entries = [f for f in discover_entries(rest) if (f.in_folder or f.path.exists())
               and not any(f.path.is_relative_to(m) for m in inner)]
    files = [Found(p, False) for p in [*whole, *inner]] + [
        f for f in entries if f.unwalked is None]
    folders = []
    for p in rest:
        root = Path(os.path.abspath(p))
        if root.is_dir():
            under = [f for f in [*(Found(m, False) for m in inner), *entries]
                     if Path(os.path.abspath(f.path)).is_relative_to(root)]
            folders.append((root, under))
    return Opened(files, folders)


def expand_paths(paths: Iterable[str | os.PathLike[str]]) -> list[Found]:
    """The documents opening `paths` opens (`open_list`)."""
    return open_list(paths).files


def _is_model_folder(path: Path) -> bool:
    """A sharded folder or index, or a torch.distributed.checkpoint folder: one checkpoint."""
    return is_dcp_folder(path) or sharded_set(path) is not None


def model_folders(root: Path) -> list[Path]:
    """The model folders below `root` (not `root` itself), each read as one checkpoint as
    `inspect` reads it (`_is_model_folder`), sorted; nothing below a model folder is walked."""
    found: list[Path] = []
    for folder, dirs, _files in os.walk(os.path.abspath(root)):
        dirs.sort()
        kept = []
        for name in dirs:
            sub = Path(folder) / name
            if sub.is_symlink():
                continue  # as `discover`: links to folders are not followed
            (found if _is_model_folder(sub) else kept).append(sub)
        dirs[:] = [d.name for d in kept]
    return sorted(found)


class Pipeline(QObject):
    """Runs the scan → hash → load sequence for documents and reports progress."""

    progress = Signal(str, int, int)  # stage text, done, total (0 = unknown)
    job_started = Signal(object)  # Job
    skipped = Signal(object)  # a FileDocument from a folder that is no checkpoint at all

    def __init__(self, runner: JobRunner, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.runner = runner
        self._heavy: list[tuple[Job, FileDocument | None, str]] = []
        self._heavy_running: Job | None = None

    # --- entry points -------------------------------------------------------------------

    def open(self, doc: FileDocument) -> None:
        """Scan `doc` now (in a thread); what follows depends on the verdict."""
        doc.set_state(DocumentState.SCANNING)
        job = Job(f"scan {doc.name}", _scan_fn(Found(doc.path, doc.in_folder)), self, doc=doc)
        job.finished.connect(lambda scan: self._scanned(doc, scan))
        job.failed.connect(lambda msg: self._scan_failed(doc, msg))
        self._start(job)

    def load(self, doc: FileDocument, allow_globals: tuple[str, ...] = ()) -> None:
        """Queue the jailed load of `doc`, allowing exactly `allow_globals`. The inspection
        admits a file (or a sharded set's every shard) on the scan `doc` already has rather
        than a second one."""
        doc.allowed_globals = tuple(allow_globals)
        doc.set_state(DocumentState.QUEUED)
        job = Job(f"inspect {doc.name}", _inspect_fn(doc.path, doc.allowed_globals, doc.scan),
                  self, doc=doc)
        job.events.connect(doc.apply_events)
        job.finished.connect(lambda result: self._inspected(doc, result))
        job.failed.connect(lambda msg: self._unanswered(doc, DocumentState.LOAD_FAILED, msg))
        job.cancelled.connect(lambda: self._unanswered(doc, DocumentState.CANCELLED))
        self.run_heavy(job, doc, DocumentState.LOADING)

    def full_check(self, doc: FileDocument) -> Job:
        """Scan `doc` again checking the CRC-32 of every tensor record, however large (the
        first scan checks a budget of them); the new scan replaces the old one."""
        path = doc.path

        def run(emit: EmitFn, cancel: CancelToken) -> ScanResult:
            from inspector.scan.engine import scan_file

            emit({"type": "progress", "stage": "full_check", "done": 0, "total": 0})
            return scan_file(path, crc_budget=max(1, path.stat().st_size))

        job = Job(f"full check {doc.name}", run, self, doc=doc)
        job.finished.connect(doc.set_scan)
        return self.run_heavy(job, doc)

    def decline(self, doc: FileDocument) -> None:
        """The user refused to allow a suspicious file's globals: hash it, do not load it."""
        self._hash(doc, DocumentState.DECLINED)

    def run_heavy(self, job: Job, doc: FileDocument | None = None, state: str = "") -> Job:
        """Queue a job that reads a whole checkpoint; it starts when the previous one ends.

        `doc` moves to `state` when the job starts (it waits in the queue until then).
        """
        self.runner.adopt(job)
        self._heavy.append((job, doc, state))
        self._next_heavy()
        return job

    def close(self, doc: FileDocument) -> None:
        """`doc` was closed: drop its queued jobs and discard its running ones."""
        for entry in [e for e in self._heavy if doc in (e[1], e[0].doc)]:
            self._heavy.remove(entry)
            entry[0].deleteLater()
        self.runner.discard_for(doc)

    def cancel_all(self) -> None:
        """Stop the running jobs and drop the queued ones."""
        for job, doc, _state in self._heavy:
            if doc is not None:
                doc.set_state(DocumentState.CANCELLED)
            job.deleteLater()
        self._heavy.clear()
        self.runner.cancel_all()

    # --- internals ----------------------------------------------------------------------

    def _start(self, job: Job) -> None:
        job.events.connect(self._forward_progress)
        self.job_started.emit(job)
        self.runner.start(job)

    def _next_heavy(self) -> None:
        if self._heavy_running is not None or not self._heavy:
            return
        job, doc, state = self._heavy.pop(0)
        self._heavy_running = job
        job.ended.connect(self._heavy_ended)
        if doc is not None and state:
            doc.set_state(state)
        self._start(job)

    def _heavy_ended(self) -> None:
        self._heavy_running = None
        self._next_heavy()

    def _forward_progress(self, events: list[dict[str, Any]]) -> None:
        for e in reversed(events):
            if e.get("type") == "progress":
                self.progress.emit(
                    stage_text(str(e.get("stage", ""))), int(e.get("done") or 0),
                    int(e.get("total") or 0),
                )
                return

    def _scanned(self, doc: FileDocument, scan: ScanResult) -> None:
        doc.set_scan(scan)
        verdict = scan.verdict
        if verdict == Verdict.SKIPPED:
            doc.set_state(DocumentState.SKIPPED)
            self.skipped.emit(doc)
        elif verdict == Verdict.SAFE:
            self.load(doc)
        elif verdict == Verdict.SUSPICIOUS and doc.globals_to_allow():
            doc.set_state(DocumentState.NEEDS_DECISION)
        elif verdict == Verdict.SUSPICIOUS:
            # nothing to allow (a damaged record, say): load it as `inspect` does
            self.load(doc)
        elif verdict == Verdict.DANGEROUS:
            self._hash(doc, DocumentState.BLOCKED)
        else:
            self._hash(doc, DocumentState.ERROR, scan.error or "")

    def _scan_failed(self, doc: FileDocument, message: str) -> None:
        doc.set_scan(ScanResult(str(doc.path), verdict=Verdict.ERROR, error=message))
        doc.set_state(DocumentState.ERROR, message)

    def _hash(self, doc: FileDocument, final_state: str, message: str = "") -> None:
        """Hash without loading (a dangerous, declined or unreadable file)."""
        doc.set_state(final_state, message)
        job = Job(f"hash {doc.name}", _hash_fn(doc.path), self, doc=doc)

        def done(digest: str) -> None:
            doc.sha256 = digest
            doc.changed.emit()

        job.finished.connect(done)
        job.failed.connect(lambda msg: doc.set_state(DocumentState.ERROR, msg))
        self.run_heavy(job)

    def _unanswered(self, doc: FileDocument, state: str, message: str = "") -> None:
        """A load that ended with no answer: the rows it streamed are unchecked, so dropped,
        and an earlier load's result (a refusal that asked for globals) is no answer either."""
        doc.result = None
        doc.drop_rows()
        doc.set_state(state, message)

    def _inspected(self, doc: FileDocument, typed: InspectResult) -> None:
        doc.set_inspect(typed)
        more = _more_to_allow(typed.error, doc.allowed_globals)
        if more:
            # The load needs globals the user was not asked about: ask, and retry on yes.
            doc.refused_globals = more
            doc.set_state(DocumentState.NEEDS_DECISION)
        elif typed.error is not None:
            doc.set_state(DocumentState.LOAD_FAILED, typed.error.message or typed.error.code)
        else:
            doc.set_state(DocumentState.LOADED)


def _more_to_allow(error: LoadError | None, allowed: tuple[str, ...]) -> list[str]:
    """Globals a weights_only refusal names beyond `allowed`; none when one is dangerous."""
    if error is None or error.code != "weights_only_refused":
        return []
    names = [str(g) for g in error.globals if g not in allowed]
    if any(classify(name.rpartition(".")[0], name.rpartition(".")[2]).severity == Severity.DANGEROUS
           for name in names):
        return []
    return names


def _scan_fn(found: Found) -> JobFn:
    def run(emit: EmitFn, cancel: CancelToken) -> ScanResult:
        from inspector.scan.engine import scan_found

        emit({"type": "progress", "stage": "scan", "done": 0, "total": 0})
        if not found.in_folder and is_dcp_folder(found.path):
            return scan_folder(found.path)
        shards = None if found.in_folder else sharded_set(found.path)
        return scan_set(shards)[1] if shards is not None else scan_found(found)

    return run


def _hash_fn(path: Path) -> JobFn:
    def run(emit: EmitFn, cancel: CancelToken) -> str | None:
        from inspector.integrity.hashing import sha256_file

        if not has_one_sha256(path):
            return None
        def progress(done: int, total: int) -> None:
            emit({"type": "progress", "stage": "hash", "done": done, "total": total})

        return sha256_file(path, progress=progress, cancel=cancel)

    return run


REQUIRED_JAIL_KEY = "sandbox/require_jail"
JAIL_MENU_TEXT = {
    JailRequirement.FULL: "&Full: namespaces, Landlock and seccomp all active",
    JailRequirement.PARTIAL: "&Partial: isolation that keeps your files out of reach (default)",
    JailRequirement.ANY: "&Any: resource limits alone are enough",
}
"""Tools → Required sandbox: each requirement `--require-jail` takes, and its menu text."""
JAIL_CHOICES = tuple((required.value, text) for required, text in JAIL_MENU_TEXT.items())
"""The menu's (QSettings value, menu text) pairs."""


def required_jail_setting() -> str:
    """The weakest jail the app loads in: QSettings `sandbox/require_jail`, default partial."""
    from inspector.gui.app import settings

    value = str(settings().value(REQUIRED_JAIL_KEY, DEFAULT_REQUIRED_JAIL.value))
    return value if value in set(JailRequirement) else DEFAULT_REQUIRED_JAIL.value


def set_required_jail_setting(level: str) -> None:
    """Remember the weakest jail the app loads in; the next load follows it."""
    from inspector.gui.app import settings

    settings().setValue(REQUIRED_JAIL_KEY, level)


def _inspect_fn(path: Path, allow_globals: tuple[str, ...], scan: ScanResult | None
                ) -> JobFn:
    required = required_jail_setting()

    def run(emit: EmitFn, cancel: CancelToken) -> InspectResult:
        from inspector.sandbox.host.client import inspect_file, set_required_jail

        # Process-wide, so the app's conversions and integrity checks follow it too.
        set_required_jail(required)

        # The jailed worker yields the cores to this process, so the UI stays responsive.
        # typed on this job's thread, off the UI thread (a 16,000-tensor result takes a tenth
        # of a second); its contract stays beside it for the panes that read records
        return inspect_file(path, allow_globals=allow_globals, on_event=emit, cancel=cancel,
                            limits={"nice": WORKER_NICE}, scan=scan)

    return run
