"""One opened file and everything learned about it; the panes are views over this model."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from inspector.checkpoint.health import Health
from inspector.checkpoint.results import (
    ConversionResult,
    DiffResult,
    FolderConversion,
    InspectResult,
)
from inspector.core.termtext import counted
from inspector.core.vocabulary import DocumentState, Severity
from inspector.formats import read_without_pickle
from inspector.integrity.verify import VerifyResult
from inspector.layout.torchscript import CODE_ARCHIVES
from inspector.scan.result import ScanResult

STATE_WORDS = {
    DocumentState.SCANNING: "Scanning the pickle opcodes (no code runs)…",
    DocumentState.QUEUED: "Waiting for the sandbox…",
    DocumentState.LOADING: "Loading in the sandbox…",
    DocumentState.NEEDS_DECISION: "Not loaded yet: it needs globals that weights_only=True refuses",
    DocumentState.BLOCKED: "Not loaded: the static scan found code that would run when unpickled",
    DocumentState.DECLINED: "Not loaded: you chose not to allow its globals",
    DocumentState.LOADED: "Loaded in the sandbox with weights_only=True",
    DocumentState.LOAD_FAILED: "The sandbox could not load it",
    DocumentState.CANCELLED: "Cancelled; the sandbox worker was stopped",
    DocumentState.ERROR: "Could not be read",
    DocumentState.SKIPPED: "Not a checkpoint (skipped, as the scan command skips it in a folder)",
}


CODE_ARCHIVE_LOADED = "Weights read in the sandbox from their records; none of its code ran"
"""A TorchScript or torch.export archive is never unpickled, so it is not 'loaded'."""
REFUSED_WORDS = "Read in the sandbox, but its answer was refused here"
"""A load whose answer the check here refuted: the sandbox read it; none of its answer stands."""
PLAIN_LOADED = "Read in the sandbox (its format holds no pickle: no torch.load)"
"""A safetensors, GGUF or ONNX file is not loaded with weights_only=True."""


@dataclass
class Verification:
    """A check of the file against a manifest: the result, that manifest, and a note."""

    result: VerifyResult
    manifest: str
    note: str = ""


def distinct_names(paths: list[Path]) -> list[str]:
    """Each path's shortest tail of folders that no other path in the list shares
    ('org-a/gpt2' and 'org-b/gpt2'), so equal file names stay distinguishable in a list."""
    names = []
    for path in paths:
        depth = 1
        while depth < len(path.parts) and any(
                other != path and other.parts[-depth:] == path.parts[-depth:] for other in paths):
            depth += 1
        names.append("/".join(path.parts[-depth:]))
    return names


class FileDocument(QObject):
    """Scan, hash, sandbox load and integrity results of one file, filled in progressively."""

    changed = Signal()
    tensors_appended = Signal(int, int)  # first new row, number of new rows
    tensors_reset = Signal()

    def __init__(self, path: str | Path, parent: QObject | None = None,
                 in_folder: bool = False) -> None:
        super().__init__(parent)
        self.path = Path(path)
        self.in_folder = in_folder  # found by walking a dropped folder, not named directly
        self.state = DocumentState.SCANNING
        self.message = ""
        self.scan: ScanResult | None = None
        self.result: InspectResult | None = None
        """The final inspection, typed."""
        self.sha256: str | None = None
        self.sandbox: dict[str, Any] | None = None
        self.allowed_globals: tuple[str, ...] = ()
        self.refused_globals: list[str] = []  # what a load refused beyond the scan's list
        self.tensors: list[dict[str, Any]] = []
        self.objects: list[dict[str, Any]] = []
        self.verify: Verification | None = None
        self.diff: DiffResult | None = None
        self.conversion: ConversionResult | FolderConversion | None = None
        self.worker_started = False
        self.label: str | None = None
        """A longer name, set while another open document has the same file name."""

    @property
    def name(self) -> str:
        """File name shown in lists and titles: `label` when set (names that would be alike)."""
        return self.label or self.path.name

    @property
    def verdict(self) -> str | None:
        """The static scan's verdict, or None while scanning."""
        return self.scan.verdict if self.scan else None

    @property
    def health(self) -> Health | None:
        """The weights-health verdict, None until the weights were judged."""
        return self.result.health if self.result is not None else None

    @property
    def size(self) -> int | None:
        """File size in bytes, from the inspection or the file system."""
        if self.result is not None and self.result.size is not None:
            return self.result.size
        try:
            return self.path.stat().st_size
        except OSError:
            return None

    def globals_to_allow(self) -> list[str]:
        """Dotted names of the globals weights_only=True refuses (for the user to allow): the
        scan's, then any a load refused that the scan did not list."""
        if not self.scan or self.scan.format in CODE_ARCHIVES:
            return []  # never unpickled: its weights are read from their records, not loaded
        names = [f"{g.module}.{g.name}" for g in self.scan.globals
                 if g.severity not in (Severity.SAFE, "allowed", None)]
        return names + [n for n in self.refused_globals if n not in names]

    def state_words(self) -> str:
        """The pipeline state in words."""
        if self.state == DocumentState.LOAD_FAILED and self.refused:
            return REFUSED_WORDS
        if self.state == DocumentState.LOADED and self.scan:
            if self.scan.format in CODE_ARCHIVES:
                return CODE_ARCHIVE_LOADED
            if read_without_pickle(self.scan.format) is not None:
                return PLAIN_LOADED
        return STATE_WORDS.get(self.state, self.state)

    def set_state(self, state: str, message: str = "") -> None:
        """Move to a new pipeline state with an optional one-line message."""
        self.state, self.message = state, message
        self.changed.emit()

    def set_scan(self, scan: ScanResult) -> None:
        """Record the static scan result."""
        self.scan = scan
        self.changed.emit()

    def apply_events(self, events: list[dict[str, Any]]) -> None:
        """Fold a batch of sandbox events into the model."""
        new_tensors = [e for e in events if e.get("type") == "tensor"]
        for e in events:
            kind = e.get("type")
            if kind == "jail":
                self.sandbox = {k: v for k, v in e.items() if k != "type"}
                self.worker_started = True
                self.changed.emit()
            elif kind == "object":
                self.objects.append({k: v for k, v in e.items() if k != "type"})
        if new_tensors:
            self.worker_started = True
            first = len(self.tensors)
            self.tensors.extend(new_tensors)  # the event itself is the row: no copy per tensor
            self.tensors_appended.emit(first, len(new_tensors))

    def set_inspect(self, typed: InspectResult) -> None:
        """Record the final inspection, typed off the UI thread. The rows streamed in are the
        worker's records before the host checked them (`operations.inspect_reply` copies each),
        so they never stand as the answer: an answer that stands replaces them with its
        contract's records (the checked ones, where the check replaced a count), and one with
        an error (refused by the check, or cut short) leaves no rows at all (`drop_rows`)."""
        result = typed.contract or {}
        self.result = typed
        self.sha256 = typed.sha256 or self.sha256
        self.sandbox = result.get("sandbox") or self.sandbox
        if typed.scan:
            self.scan = typed.scan
        if typed.error is not None:
            self.drop_rows()
            return
        self.tensors = list(result["tensors"])
        self.objects = list(result["objects"])
        self.tensors_reset.emit()
        self.changed.emit()

    def drop_rows(self) -> None:
        """Forget the rows streamed in: a load that ended without an answer that stands (an
        error, a refusal, a cancel) leaves only the worker's unchecked word in them."""
        self.tensors, self.objects = [], []
        self.tensors_reset.emit()
        self.changed.emit()

    def rows_note(self) -> str:
        """Whose word the tensor rows are, for the views that show them: nothing when they are
        the answer the host checked; else while they stream in, or why they were not checked
        here (`claims.reason`)."""
        if self.state in (DocumentState.LOADING, DocumentState.QUEUED) and self.tensors:
            return "the jailed loader's rows, not yet checked here"
        result = self.result
        if result is None or not result.loaded or not self.tensors:
            return ""
        claims = result.claims
        if claims is not None and claims.checked:
            return ""
        why = claims.reason if claims is not None and claims.reason else "no check was made"
        return f"as reported by the jailed loader, not checked here ({why})"

    @property
    def refused(self) -> bool:
        """The check here refused the jailed loader's answer (`claim_refuted`)."""
        error = self.result.error if self.result is not None else None
        if error is None:
            return False
        from inspector.sandbox.host.client import REFUTED  # the app starts without the host

        return error.code == REFUTED

    def refusal_words(self) -> str | None:
        """Why an inspection that ended has no answer to show (its error), or None."""
        error = self.result.error if self.result is not None else None
        if error is None:
            return None
        if self.refused:  # its message says what the file's bytes disagree with
            return f"refused: {error.message}"
        return f"the load ended without an answer: {error.message or error.code}"

def list_text(doc: FileDocument) -> str:
    """A document's row in the file list: its name and, for a sharded model, its coverage
    in a few words, short enough to stay unelided: 'gpt2 (2 shards)', or '(2 shards,
    incomplete)' when the shards do not cover their index (the tooltip has `coverage_text`)."""
    result = doc.result
    if result is None or not result.index or result.shards is None:
        return doc.name
    shards = result.shards
    fatal = [p for p in result.problems or [] if p.get("fatal")]
    return f"{doc.name} ({counted(len(shards), 'shard')}{', incomplete' if fatal else ''})"
