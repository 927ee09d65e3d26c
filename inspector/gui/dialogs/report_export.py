"""File → Export Report: the session's evidence handed to the report package, off the UI thread."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QRadioButton, QVBoxLayout, QWidget

from inspector.core.progress import CancelToken
from inspector.gui.document import FileDocument
from inspector.gui.jobs import EmitFn, JobFn
from inspector.run.checkpoints import LedgerSummary

REPORT_FILTER = "HTML report (*.html);;PDF report (*.pdf);;JSON report (*.json)"


class ScopeDialog(QDialog):
    """Which open files go into the report: this one, the selected ones, or all."""

    def __init__(self, current: FileDocument | None, selected: list[FileDocument],
                 everything: list[FileDocument], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Export report")
        self.choices: list[tuple[QRadioButton, list[FileDocument]]] = []
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Each file gets its own verdict line; which files to include?"))
        for text, docs in (
            (f"This file ({current.name})" if current else "This file", [current] if current
             else []),
            (f"Selected files ({len(selected)})", selected),
            (f"All open files ({len(everything)})", everything),
        ):
            button = QRadioButton(text)
            button.setEnabled(bool(docs))
            layout.addWidget(button)
            self.choices.append((button, docs))
        next(b for b, docs in self.choices if docs).setChecked(True)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

    def chosen(self) -> list[FileDocument]:
        """The documents of the checked choice."""
        return next(docs for b, docs in self.choices if b.isChecked())


def choose_scope(parent: QWidget, current: FileDocument | None, selected: list[FileDocument],
                 everything: list[FileDocument]) -> list[FileDocument] | None:
    """Ask which files to report when there is a choice; None when the user cancels."""
    if len(everything) <= 1:
        return list(everything)
    dialog = ScopeDialog(current, selected, everything, parent)
    return dialog.chosen() if dialog.exec() == QDialog.DialogCode.Accepted else None


def evidence(docs: list[FileDocument], consistency: dict[str, Any] | None = None,
             consistency_file: str | None = None, telemetry=None, telemetry_source: str = "nvml",
             runs: list[LedgerSummary] | None = None):
    """A report.SessionEvidence of what the window learned about each open file and about
    the training runs it checked (`runs`)."""
    from inspector.report import FileEvidence, SessionEvidence

    files = [
        FileEvidence(
            path=str(d.path), scan=d.scan, inspect=d.result, diff=d.diff,
            verify=d.verify.result if d.verify else None,
            manifest=d.verify.manifest if d.verify else None, conversion=d.conversion,
            consistency=consistency if consistency_file == str(d.path) else None,
        )
        for d in docs
    ]
    return SessionEvidence(files=files, telemetry=telemetry, telemetry_source=telemetry_source,
                           command="ckpt-inspector (desktop app)", runs=list(runs or []))


def export_fn(session, path: Path) -> JobFn:
    """A job that builds the report and writes it; the save dialog already asked to replace."""

    def run(emit: EmitFn, cancel: CancelToken) -> str:
        from inspector.report import export

        def progress(done: int, total: int) -> None:
            emit({"type": "progress", "stage": "report", "done": done, "total": total})

        export(session, path, overwrite=True, progress=progress, cancel=cancel)
        return str(path)

    return run
