"""Why an action cannot run on the current file, in words for its disabled button's tooltip."""

from __future__ import annotations

from inspector.core.vocabulary import DocumentState, Verdict
from inspector.gui.document import FileDocument

NO_FILE = "Open a file first"
SCANNING = "Wait for the scan to finish"
DANGEROUS_COMPARE = "A dangerous file is never loaded, so it cannot be compared"


ALREADY_SAFETENSORS = "Already safetensors: there is nothing to convert"


def convert_blocker(doc: FileDocument | None) -> str | None:
    """Why `doc` cannot be converted now (it must be loaded in the sandbox, and not be
    safetensors already); None if it can."""
    if doc is None:
        return NO_FILE
    if doc.scan is not None and doc.scan.format == "safetensors":
        return ALREADY_SAFETENSORS
    if doc.state == DocumentState.LOADED:
        return None
    return f"Only a file loaded in the sandbox can be converted. This one: {doc.state_words()}"


def compare_blocker(doc: FileDocument | None) -> str | None:
    """Why `doc` cannot be compared now (a dangerous file is never loaded); None if it can."""
    if doc is None:
        return NO_FILE
    if doc.verdict is None:
        return SCANNING
    if doc.verdict == Verdict.DANGEROUS:
        return DANGEROUS_COMPARE
    return None


def file_blocker(doc: FileDocument | None) -> str | None:
    """Why a per-file action (close, report, manifest, verify) cannot run; None if it can."""
    return NO_FILE if doc is None else None
