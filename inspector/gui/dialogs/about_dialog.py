"""Help → About: versions of the app and of the environment a bug report needs."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from inspector import __version__
from inspector.core.progress import CancelToken
from inspector.gui.app import APPLICATION
from inspector.gui.jobs import EmitFn, Job, JobRunner


def _collect(emit: EmitFn, cancel: CancelToken) -> list[tuple[str, str]]:
    # torch's CUDA and cuDNN versions come from a subprocess: this process never imports torch.
    from inspector.core.envinfo import collect

    return collect(probe_torch=True).lines()


class AboutDialog(QDialog):
    """Shows the app version and, once gathered off the UI thread, the environment."""

    def __init__(self, runner: JobRunner, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"About {APPLICATION}")
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.resize(620, 520)
        intro = QLabel(
            f"<h2>{APPLICATION} {__version__}</h2>"
            "<p>Opens PyTorch checkpoints safely — static pickle scan, then a jailed "
            "<code>weights_only=True</code> loader — and proves their contents are intact.</p>"
        )
        intro.setWordWrap(True)
        self.table = QTableWidget(0, 2)
        self.table.setHorizontalHeaderLabels(["Component", "Version"])
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setAccessibleName("Environment")
        self.status = QLabel("Collecting the environment (torch is asked in a subprocess)…")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.copy_button = QPushButton("Copy for a Bug Report")
        self.copy_button.setEnabled(False)
        self.copy_button.clicked.connect(self.copy)
        buttons.addButton(self.copy_button, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.status)
        layout.addWidget(buttons)
        self.rows: list[tuple[str, str]] = []
        self.job = Job("environment", _collect, self)
        self.job.finished.connect(self._show_rows)
        self.job.failed.connect(lambda msg: self.status.setText(f"Could not collect: {msg}"))
        runner.start(self.job)

    def _show_rows(self, rows: list[tuple[str, str]]) -> None:
        self.rows = rows
        self.table.setRowCount(len(rows))
        for i, (label, value) in enumerate(rows):
            self.table.setItem(i, 0, QTableWidgetItem(label))
            self.table.setItem(i, 1, QTableWidgetItem(value))
        self.table.resizeColumnToContents(0)
        self.status.setText("")
        self.copy_button.setEnabled(True)

    def copy(self) -> None:
        """Copy the environment as plain text."""
        text = f"{APPLICATION} {__version__}\n" + "".join(f"{k}: {v}\n" for k, v in self.rows)
        QGuiApplication.clipboard().setText(text)
