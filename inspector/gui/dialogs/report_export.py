"""File → Export Report: the session's evidence handed to the report package, off the UI thread."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QRadioButton,
    QVBoxLayout,
    QWidget,
)

from inspector.core.progress import CancelToken
from inspector.gui.document import FileDocument
from inspector.gui.jobs import EmitFn, JobFn
from inspector.run.checkpoints import LedgerSummary

REPORT_FILTER = "HTML report (*.html);;PDF report (*.pdf);;JSON report (*.json)"


@dataclass(frozen=True)
class Scope:
    """What goes into a report: these checkpoints, and whether the GPU telemetry and the
    checked training run go in too."""

    docs: list[FileDocument]
    telemetry: bool = False
    run: bool = False


class ScopeDialog(QDialog):
    """What goes into the report, each item a checkbox: every open checkpoint (the presets
    this / selected / all tick them), the GPU telemetry and the training run, where there are
    any. A replayed or fetched telemetry log starts unticked: opened to look at, it is no
    evidence about the checkpoints."""

    def __init__(self, current: FileDocument | None, selected: list[FileDocument],
                 everything: list[FileDocument], parent: QWidget | None = None,
                 telemetry: str | None = None, run: str | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Export report")
        self.choices: list[tuple[QRadioButton, list[FileDocument]]] = []
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("<b>What goes into the report?</b> Each checkpoint gets its "
                                "own verdict line."))
        presets = QHBoxLayout()
        for text, docs in (
            (f"This file ({current.name})" if current else "This file", [current] if current
             else []),
            (f"Selected files ({len(selected)})", selected),
            (f"All open files ({len(everything)})", everything),
        ):
            button = QRadioButton(text)
            button.setEnabled(bool(docs))
            button.toggled.connect(lambda on, d=docs: on and self._tick(d))
            presets.addWidget(button)
            self.choices.append((button, docs))
        presets.addStretch(1)
        layout.addWidget(QLabel("Checkpoints:"))
        layout.addLayout(presets)
        self.files: list[tuple[QCheckBox, FileDocument]] = []
        for doc in everything:
            box = QCheckBox(doc.name)
            box.setToolTip(str(doc.path))
            layout.addWidget(box)
            self.files.append((box, doc))
        self.telemetry = QCheckBox(f"GPU telemetry ({telemetry})" if telemetry
                                   else "GPU telemetry (none recorded)")
        self.telemetry.setEnabled(telemetry is not None)
        self.telemetry.setChecked(telemetry == LIVE)
        self.run = QCheckBox(f"Training run ({run})" if run else "Training run (none open)")
        self.run.setEnabled(run is not None)
        self.run.setChecked(run is not None)
        layout.addWidget(QLabel("Also:"))
        layout.addWidget(self.telemetry)
        layout.addWidget(self.run)
        choice = next((b for b, docs in self.choices if docs), None)
        if choice is not None:
            choice.setChecked(True)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

    def _tick(self, docs: list[FileDocument]) -> None:
        """A preset: tick exactly these checkpoints."""
        for box, doc in self.files:
            box.setChecked(doc in docs)

    def chosen(self) -> list[FileDocument]:
        """The ticked checkpoints, in the list's order."""
        return [doc for box, doc in self.files if box.isChecked()]

    def scope(self) -> Scope:
        """Everything ticked."""
        return Scope(self.chosen(), self.telemetry.isChecked(), self.run.isChecked())


LIVE = "live NVML"
"""The telemetry label of the GPUs read live in this session (ticked by default)."""


def choose_scope(parent: QWidget, current: FileDocument | None, selected: list[FileDocument],
                 everything: list[FileDocument], telemetry: str | None = None,
                 run: str | None = None) -> Scope | None:
    """Ask what goes into the report when there is a choice; None when the user cancels."""
    if len(everything) <= 1 and telemetry is None and run is None:
        return Scope(list(everything))
    dialog = ScopeDialog(current, selected, everything, parent, telemetry, run)
    return dialog.scope() if dialog.exec() == QDialog.DialogCode.Accepted else None


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
