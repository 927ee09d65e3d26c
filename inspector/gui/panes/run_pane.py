"""The Run pane: a training run's ledgered checkpoints, checked against the disk.

The pane leads with the run's verdict: the checkpoint a resume should load, and every newer one
passed over with the reason (`run.checkpoints.resume_choice`, as `run latest` says it).
Opening a run folder (or its `journal.jsonl`) shows every checkpoint the ledger recorded:
step, time, size, the outcome when it was saved, whether its bytes still match now (intact,
changed with the tensor named, missing, removed by rotation) and the journal's chain. Reading
the journal and hashing the checkpoints run as one `gui.jobs` job; the rows appear as soon as
the journal is read and their state when the hashes are done. Activating a row asks the window
to open that checkpoint in the usual panes (`open_requested`).

Below the table, what the training guard recorded (`run.metrics`, read in the same job):
loss and gradient norm over steps with alarm and checkpoint marks (`run_charts`), the alarms
with their attribution and the GPU state recorded with them, and the data order per rank.
Rows, curves and lines come from `run_guard_model`.
"""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSplitter,
    QTableView,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from inspector.core.progress import CancelToken
from inspector.core.termtext import counted
from inspector.gui.jobs import EmitFn, Job, JobRunner
from inspector.gui.panes import run_guard_model as guard_model
from inspector.gui.panes.run_charts import RunCharts
from inspector.gui.panes.run_model import RunTableModel, chain_text, resume_html, run_rows
from inspector.gui.widgets import chart_style
from inspector.run.checkpoints import (
    CheckpointCheck,
    LedgerSummary,
    ResumeChoice,
    RunLedger,
    check_saves,
    read_ledger,
    resume_choice,
    summarize,
)
from inspector.run.metrics import RunMetrics, read_run_metrics


class RunPane(QWidget):
    """The checkpoints of one training run."""

    open_requested = Signal(str)
    checked = Signal()  # the run's checkpoints were checked: summary() has its numbers

    def __init__(self, runner: JobRunner, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.runner = runner
        self.run_path: Path | None = None
        self.ledger: RunLedger | None = None
        self.checks: list[CheckpointCheck] | None = None
        self.choice: ResumeChoice | None = None
        self.verdict_role: str | None = None
        """The verdict banner's chart_style role: good, bad, or None while checking."""
        self.job: Job | None = None
        self.title = QLabel("No training run open. Open a run folder (one with a journal.jsonl).")
        self.title.setTextFormat(Qt.TextFormat.RichText)
        self.title.setWordWrap(True)
        self.verdict = QLabel("")
        self.verdict.setObjectName("resumeVerdict")
        self.verdict.setTextFormat(Qt.TextFormat.RichText)
        self.verdict.setWordWrap(True)
        self.verdict.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.verdict.setAccessibleName("Resume verdict")
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
        self.metrics: RunMetrics | None = None
        self.guard_line = QLabel("")
        self.guard_line.setTextFormat(Qt.TextFormat.RichText)
        self.guard_line.setOpenExternalLinks(True)
        self.guard_line.setWordWrap(True)
        self.charts = RunCharts()
        self.telemetry = QLabel("")
        self.telemetry.setWordWrap(True)
        self.telemetry.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.alarms = _text_table(guard_model.ALARM_COLUMNS, "Guard alarms")
        self.order = _text_table(guard_model.ORDER_COLUMNS, "Data order per rank")
        top = QHBoxLayout()
        top.addWidget(self.chain, 1)
        top.addWidget(self.verify_button)
        lower = QSplitter(Qt.Orientation.Horizontal)
        lower.addWidget(self.alarms)
        lower.addWidget(self.order)
        guard = QWidget()
        guard_layout = QVBoxLayout(guard)
        guard_layout.setContentsMargins(0, 0, 0, 0)
        guard_layout.addWidget(self.guard_line)
        guard_layout.addWidget(self.telemetry)
        guard_layout.addWidget(lower, 1)
        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.addWidget(self.table)
        self.splitter.addWidget(self.charts)
        self.splitter.addWidget(guard)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([110, 280, 210])  # a run has few checkpoints, more alarms
        layout = QVBoxLayout(self)
        layout.addWidget(self.title)
        layout.addWidget(self.verdict)
        layout.addLayout(top)
        layout.addWidget(self.splitter, 1)

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
        self.checks = self.choice = self.verdict_role = None
        self.verdict.setText("Finding the checkpoint to resume from…")
        self._style_verdict()
        path = self.run_path

        def work(emit: EmitFn, cancel: CancelToken):
            from inspector.sandbox.host.client import tensor_digests

            ledger = read_ledger(path)
            emit({"type": "ledger", "ledger": ledger,
                  "metrics": read_run_metrics(ledger.journal, ledger.run_dir)})
            checks = check_saves(ledger, (*ledger.saves, *ledger.untrusted),
                                 tensor_digests=tensor_digests, cancel=cancel)
            return ledger, checks, resume_choice(path, checks=checks)

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
                self._show_guard(event["metrics"])
                self.chain.setText(f"{counted(len(self.ledger.saves), 'checkpoint')} · "
                                   f"{chain_text(self.ledger)} · checking the bytes…")

    def _on_checked(self, result) -> None:
        ledger, checks, choice = result
        self.ledger, self.checks, self.choice = ledger, checks, choice
        self.verdict.setText(resume_html(choice, ledger))
        self.verdict_role = "good" if choice.record is not None else "bad"
        self._style_verdict()
        self.checked.emit()
        self.model.set_rows(run_rows(ledger, checks))
        states: dict[str, int] = {}
        for c in checks:
            states[c.state.value] = states.get(c.state.value, 0) + 1
        counts = ", ".join(f"{n} {s}" for s, n in states.items()) or "no checkpoints"
        self.chain.setText(f"{counts} · {chain_text(ledger)}")

    def _on_failed(self, message: str) -> None:
        self.model.set_rows([])
        self.chain.setText(message)
        self.verdict.setText(f"<b>No verdict</b>: {html.escape(message)}")
        self.verdict_role = "bad"
        self._style_verdict()

    def _style_verdict(self) -> None:
        """The verdict as a banner: good with a checkpoint to resume from, bad without one."""
        role = self.verdict_role
        if role is None:
            self.verdict.setStyleSheet("")
            return
        self.verdict.setStyleSheet(
            f"#resumeVerdict {{ {chart_style.banner_css(role, self.palette())} padding: 6px; }}")

    def changeEvent(self, event: QEvent) -> None:
        """Recolour the verdict banner when the theme switches."""
        if event.type() == QEvent.Type.PaletteChange and hasattr(self, "verdict"):
            self._style_verdict()
        super().changeEvent(event)

    def summary(self) -> LedgerSummary | None:
        """The checked run in a few numbers, for a report; None until the check is done."""
        if self.ledger is None or self.checks is None:
            return None
        return summarize(self.ledger, self.checks)

    def _show_guard(self, metrics: RunMetrics) -> None:
        """Draw what the guard recorded: charts, alarms, GPU telemetry, data order."""
        self.metrics = metrics
        self.guard_line.setText(guard_model.guard_text(metrics))
        self.telemetry.setText(guard_model.telemetry_text(metrics))
        self.charts.show_run({signal: guard_model.curves(metrics, signal)
                              for signal in ("loss", "grad_norm")},
                             guard_model.chart_marks(self.ledger, metrics))
        _fill(self.alarms, [guard_model.alarm_cells(a) for a in metrics.alarms])
        _fill(self.order, guard_model.order_rows(metrics))
        for table in (self.alarms, self.order):  # an empty table's header reads as data too
            table.setVisible(table.rowCount() > 0)

    def _activated(self, index) -> None:
        if 0 <= index.row() < len(self.model.rows):
            row = self.model.rows[index.row()]
            if row.location.exists():
                self.open_requested.emit(str(row.location))


def _text_table(columns: tuple[str, ...], name: str) -> QTableWidget:
    """A read-only table of text rows."""
    table = QTableWidget(0, len(columns))
    table.setHorizontalHeaderLabels(list(columns))
    table.setAccessibleName(name)
    table.verticalHeader().hide()
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    table.horizontalHeader().setStretchLastSection(True)
    return table


def _fill(table: QTableWidget, rows: list[tuple[str, ...]]) -> None:
    """Replace a text table's rows; each cell's tooltip is its whole text."""
    table.setRowCount(len(rows))
    for r, row in enumerate(rows):
        for c, text in enumerate(row):
            item = QTableWidgetItem(text)
            item.setToolTip(text)
            table.setItem(r, c, item)
