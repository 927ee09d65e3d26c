"""The Run pane: a training run's ledgered checkpoints, checked against the disk.

Opening a run folder (or its `journal.jsonl`) shows every checkpoint the ledger recorded:
step, time, size, the outcome when it was saved, whether its bytes still match now (intact,
changed with the tensor named, missing, removed by rotation) and the journal's chain. Reading
the journal and hashing the checkpoints run as one `gui.jobs` job; the rows appear as soon as
the journal is read and their state when the hashes are done. Activating a row asks the window
to open that checkpoint in the usual panes (`open_requested`).
"""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from inspector.core.progress import CancelToken
from inspector.core.run_ledger import RunLedger, check_saves, read_ledger
from inspector.gui.jobs import EmitFn, Job, JobRunner
from inspector.gui.run_model import RunTableModel, chain_text, run_rows


def is_run_path(path: str | Path) -> bool:
    """A run folder (one holding a journal) or a journal file."""
    from inspector.core.journal import JOURNAL_NAME, journal_path

    p = Path(path)
    return (p.is_dir() and journal_path(p).is_file()) or (p.is_file() and p.name == JOURNAL_NAME)


class RunPane(QWidget):
    """The checkpoints of one training run."""

    open_requested = Signal(str)

    def __init__(self, runner: JobRunner, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.runner = runner
        self.run_path: Path | None = None
        self.ledger: RunLedger | None = None
        self.job: Job | None = None
        self.title = QLabel("No training run open. Open a run folder (one with a journal.jsonl).")
        self.title.setTextFormat(Qt.TextFormat.RichText)
        self.title.setWordWrap(True)
        self.chain = QLabel("")
        self.verify_button = QPushButton("Check again")
        self.verify_button.clicked.connect(self.refresh)
        self.verify_button.setEnabled(False)
        self.model = RunTableModel(self)
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setAccessibleName("Ledgered checkpoints")
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.horizontalHeader().setSectionResizeMode(
            QHeaderView.ResizeMode.ResizeToContents)
        self.table.activated.connect(self._activated)
        self.table.doubleClicked.connect(self._activated)
        top = QHBoxLayout()
        top.addWidget(self.chain, 1)
        top.addWidget(self.verify_button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.title)
        layout.addLayout(top)
        layout.addWidget(self.table, 1)

    def open_run(self, path: str | Path) -> Job:
        """Show the run at `path` (a run folder or its journal) and check its checkpoints."""
        self.run_path = Path(path)
        return self.refresh()

    def refresh(self) -> Job:
        """Read the journal again and re-check every checkpoint, off the UI thread."""
        if self.job is not None:
            self.job.discard()
        self.verify_button.setEnabled(False)
        self.title.setText(f"<b>Training run</b> {html.escape(str(self.run_path))}")
        self.chain.setText("reading the ledger…")
        path = self.run_path

        def work(emit: EmitFn, cancel: CancelToken):
            from inspector.sandbox.client import tensor_digests

            ledger = read_ledger(path)
            emit({"type": "ledger", "ledger": ledger})
            return ledger, check_saves(ledger, tensor_digests=tensor_digests, cancel=cancel)

        job = Job("check run", work, parent=self)
        job.events.connect(self._on_events)
        job.finished.connect(self._on_checked)
        job.failed.connect(self._on_failed)
        job.ended.connect(lambda: self.verify_button.setEnabled(True))
        self.job = job
        return self.runner.start(job)

    def _on_events(self, events: list[dict]) -> None:
        for event in events:
            if event.get("type") == "ledger":
                self.ledger = event["ledger"]
                self.model.set_rows(run_rows(self.ledger))
                self.chain.setText(f"{len(self.ledger.saves)} checkpoint(s) · "
                                   f"{chain_text(self.ledger)} · checking the bytes…")

    def _on_checked(self, result) -> None:
        ledger, checks = result
        self.ledger = ledger
        self.model.set_rows(run_rows(ledger, checks))
        states: dict[str, int] = {}
        for c in checks:
            states[c.state.value] = states.get(c.state.value, 0) + 1
        counts = ", ".join(f"{n} {s}" for s, n in states.items()) or "no checkpoints"
        self.chain.setText(f"{counts} · {chain_text(ledger)}")

    def _on_failed(self, message: str) -> None:
        self.model.set_rows([])
        self.chain.setText(message)

    def _activated(self, index) -> None:
        if 0 <= index.row() < len(self.model.rows):
            row = self.model.rows[index.row()]
            if row.location.exists():
                self.open_requested.emit(str(row.location))
