"""Pickle: the globals a file imports and its opcode disassembly, offending opcodes marked."""

from __future__ import annotations

import ast
import bisect
import mmap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import (
    QItemSelectionModel,
    QModelIndex,
    QObject,
    QSortFilterProxyModel,
    Qt,
)
from PySide6.QtGui import QFont, QStandardItem, QStandardItemModel
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSplitter,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from inspector.core.progress import CancelToken
from inspector.gui import roles
from inspector.gui.document import FileDocument
from inspector.gui.jobs import EmitFn, Job, JobRunner
from inspector.gui.verdict_style import tint, verdict_style
from inspector.scan.indicators import FLAGGED, location
from inspector.scan.result import GlobalUse, ScanResult

OPCODE_LIMIT = 200_000
"""Opcodes shown per pickle: plenty for 20,000-tensor checkpoints, bounded for hostile ones."""
MAX_PICKLE_BYTES = 1 << 30
GLOBAL_COLUMNS = ("Module", "Name", "Count", "Severity", "Why")


@dataclass(frozen=True)
class OpRow:
    """One disassembled opcode; `severity` is the scanner's mark on offending opcodes, and
    `calls` the offset of the flagged import that an opcode making a call (REDUCE, ...) calls."""

    offset: int
    opcode: str
    arg: str
    imports: str | None
    severity: str | None
    calls: int | None = None


@dataclass
class Stream:
    """One pickle inside the file (a zip member, or one pickle of a legacy stream); `member`,
    `start` and `end` place it as the scan does (offsets in the member, or in the file)."""

    label: str
    rows: list[OpRow]
    truncated: bool
    member: str | None = None
    start: int = 0
    end: int | None = None

    def holds(self, member: str | None, offset: int) -> bool:
        """Whether the scan's `offset` in `member` falls inside this pickle."""
        return member == self.member and self.start <= offset and (
            self.end is None or offset < self.end)


class OpcodeModel(roles.RowsModel):
    """Offset, opcode and argument of each opcode; flagged imports and the opcodes that call
    them tinted by severity."""

    HEADERS = ("Offset", "Opcode", "Argument")
    rows: list[OpRow]

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.mono = QFont("monospace")
        self.mono.setStyleHint(QFont.StyleHint.Monospace)

    def data(self, index: QModelIndex, role: int = roles.DISPLAY):
        row = self.rows[index.row()]
        if role == roles.DISPLAY:
            return (str(row.offset), row.opcode, row.arg)[index.column()]
        if role == roles.FONT:
            return self.mono
        if role == roles.BACKGROUND and row.severity in FLAGGED:
            return tint(verdict_style(row.severity).colour, 90)
        if role == roles.TOOLTIP and row.severity:
            if row.imports:
                return f"{row.severity}: imports {row.imports}"
            callee = self.callee_of(row)
            if callee >= 0:
                target = self.rows[callee]
                return f"{row.severity}: calls {target.imports} (imported at {target.offset})"
            return row.severity
        return None

    def callee_of(self, row: OpRow) -> int:
        """Row of the flagged import that `row` calls; -1 when it calls none shown here."""
        if row.calls is None:
            return -1
        found = self.at_offset(row.calls)
        return found if found >= 0 and self.rows[found].offset == row.calls else -1

    def find(self, text: str, start: int) -> int:
        """First row at or after `start` (wrapping) whose text contains `text`; -1 if none."""
        needle = text.lower()
        n = len(self.rows)
        for k in range(n):
            i = (start + k) % n
            r = self.rows[i]
            if needle in r.opcode.lower() or needle in r.arg.lower() or needle == str(r.offset):
                return i
        return -1

    def at_offset(self, offset: int) -> int:
        """Row of the opcode that starts at or holds `offset`; -1 if it precedes every row."""
        return bisect.bisect_right(self.rows, offset, key=lambda r: r.offset) - 1

    def first_use(self, dotted: str) -> int:
        """Row of the first opcode that imports `module.name`; -1 if none."""
        return next((i for i, r in enumerate(self.rows) if r.imports == dotted), -1)


class PicklePane(QWidget):
    """Globals table (sortable, filterable) above the searchable opcode disassembly."""

    def __init__(self, runner: JobRunner, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.runner = runner
        self.doc: FileDocument | None = None
        self.streams: list[Stream] = []
        self._job: Job | None = None
        self._wanted: tuple[str | None, int] | None = None  # an opcode asked for before ready

        self.globals_model = QStandardItemModel(0, len(GLOBAL_COLUMNS), self)
        self.globals_model.setHorizontalHeaderLabels(list(GLOBAL_COLUMNS))
        self.proxy = QSortFilterProxyModel(self)
        self.proxy.setSourceModel(self.globals_model)
        self.proxy.setFilterKeyColumn(-1)
        self.proxy.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.proxy.setSortRole(Qt.ItemDataRole.UserRole)
        self.global_filter = QLineEdit()
        self.global_filter.setPlaceholderText("Filter globals (module, name, severity)")
        self.global_filter.setClearButtonEnabled(True)
        self.global_filter.textChanged.connect(self.proxy.setFilterFixedString)
        self.globals_view = QTableView()
        self.globals_view.setModel(self.proxy)
        self.globals_view.setSortingEnabled(True)
        self.globals_view.sortByColumn(3, Qt.SortOrder.DescendingOrder)
        self.globals_view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.globals_view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.globals_view.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.globals_view.verticalHeader().hide()
        self.globals_view.horizontalHeader().setStretchLastSection(True)
        self.globals_view.setAccessibleName("Imported globals")
        self.globals_view.setWordWrap(False)
        self.globals_view.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        self.globals_view.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)
        self.globals_view.selectionModel().currentRowChanged.connect(self._global_selected)

        self.stream_box = QComboBox()
        self.stream_box.setAccessibleName("Pickle stream")
        self.stream_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.stream_box.currentIndexChanged.connect(self._show_stream)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Find opcode, argument or offset")
        self.search.setClearButtonEnabled(True)
        self.search.returnPressed.connect(self.find_next)
        find = QPushButton("Find Next")
        find.clicked.connect(self.find_next)
        self.op_status = QLabel()
        self.op_model = OpcodeModel(self)
        self.op_view = roles.rows_view(self.op_model, "Opcode disassembly",
                                       self.fontMetrics().height() + 6)
        self.op_view.setColumnWidth(0, 90)
        self.op_view.setColumnWidth(1, 150)
        self.op_view.selectionModel().currentChanged.connect(self._op_current)

        top = QWidget()
        tl = QVBoxLayout(top)
        tl.setContentsMargins(0, 0, 0, 0)
        tl.addWidget(QLabel("<b>Imported globals</b> — select one to jump to its first use"))
        tl.addWidget(self.global_filter)
        tl.addWidget(self.globals_view)
        bottom = QWidget()
        bl = QVBoxLayout(bottom)
        bl.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        row.addWidget(QLabel("<b>Opcodes</b>"))
        row.addWidget(self.stream_box)
        row.addWidget(self.search, 1)
        row.addWidget(find)
        bl.addLayout(row)
        bl.addWidget(self.op_view, 1)
        bl.addWidget(self.op_status)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(top)
        split.addWidget(bottom)
        split.setSizes([260, 440])
        layout = QVBoxLayout(self)
        layout.addWidget(split)
        self.set_document(None)

    def set_document(self, doc: FileDocument | None) -> None:
        """Show `doc`'s globals; disassemble its pickles in the background."""
        if self.doc is not None:
            self.doc.changed.disconnect(self._doc_changed)
        if self._job is not None:
            self._job.discard()  # its disassembly is of the previous document
            self._job = None
        self.doc = doc
        self._scan_shown = None
        self._wanted = None
        self.streams = []
        self.stream_box.clear()
        self.op_model.set_rows([])
        if doc is not None:
            doc.changed.connect(self._doc_changed)
        self._doc_changed()

    def _doc_changed(self) -> None:
        doc = self.doc
        scan = doc.scan if doc else None
        if scan is self._scan_shown:
            return
        self._scan_shown = scan
        self._fill_globals(scan.globals if scan else [])
        if scan is None:
            self.op_status.setText("Scanning…" if doc else "No file open.")
            return
        if not scan.pickles:
            self.op_status.setText(f"No pickle in this file (format {scan.format}).")
            return
        self.op_status.setText("Disassembling…")
        if self._job is not None:
            self._job.discard()  # a newer scan of the document replaces its result
        self._job = Job(f"disassemble {doc.name}", _disassemble_fn(doc.path, scan), self,
                        doc=doc)
        self._job.finished.connect(self._streams_ready)
        self._job.failed.connect(lambda msg: self.op_status.setText(f"Disassembly failed: {msg}"))
        self.runner.start(self._job)

    def _fill_globals(self, globals_: list[GlobalUse]) -> None:
        self.globals_model.setRowCount(0)
        rank = {"dangerous": 3, "suspicious": 2, "safe": 1}
        for g in globals_:
            severity = g.severity
            items = [
                _item(g.module, g.module),
                _item(g.name, g.name),
                _item(str(g.count), g.count),
                _item(verdict_style(severity).word if severity in rank else severity,
                      rank.get(severity, 0)),
                _item(g.reason, g.reason),
            ]
            if severity in FLAGGED:
                for it in items:
                    it.setBackground(tint(verdict_style(severity).colour, 90))
            items[0].setData(f"{g.module}.{g.name}", Qt.ItemDataRole.UserRole + 1)
            self.globals_model.appendRow(items)
        self.proxy.sort(self.proxy.sortColumn(), self.proxy.sortOrder())
        for column in range(len(GLOBAL_COLUMNS) - 1):
            self.globals_view.resizeColumnToContents(column)
            width = self.globals_view.columnWidth(column)
            self.globals_view.setColumnWidth(column, min(max(width + 16, 70), 260))

    def _streams_ready(self, streams: list[Stream]) -> None:
        self.streams = streams
        self.stream_box.blockSignals(True)
        self.stream_box.clear()
        for s in streams:
            flagged = sum(r.severity in FLAGGED for r in s.rows)
            self.stream_box.addItem(f"{s.label} — {len(s.rows):,} opcodes"
                                    + (f", {flagged} flagged" if flagged else ""))
        self.stream_box.blockSignals(False)
        if streams:
            self._show_stream(0)
        if self._wanted is not None:
            self.show_opcode(*self._wanted)

    def _show_stream(self, index: int) -> None:
        if not 0 <= index < len(self.streams):
            return
        stream = self.streams[index]
        self.op_model.set_rows(stream.rows)
        flagged = sum(r.severity in FLAGGED for r in stream.rows)
        note = f" (first {OPCODE_LIMIT:,} shown)" if stream.truncated else ""
        self.op_status.setText(
            f"{len(stream.rows):,} opcodes{note}; {flagged} import or call a flagged global"
            + (" — highlighted." if flagged else "."))

    def find_next(self) -> int:
        """Select the next opcode matching the search text; returns its row or -1."""
        text = self.search.text().strip()
        if not text or not self.op_model.rows:
            return -1
        current = self.op_view.currentIndex()
        start = current.row() + 1 if current.isValid() else 0
        row = self.op_model.find(text, start)
        if row < 0:
            self.op_status.setText(f"“{text}” not found.")
        else:
            self._select_op(row)
        return row

    def _global_selected(self, current: QModelIndex, _previous: QModelIndex) -> None:
        if not current.isValid():
            return
        dotted = self.proxy.index(current.row(), 0).data(Qt.ItemDataRole.UserRole + 1)
        for si, stream in enumerate(self.streams):
            row = next((i for i, r in enumerate(stream.rows) if r.imports == dotted), -1)
            if row >= 0:
                if self.stream_box.currentIndex() != si:
                    self.stream_box.setCurrentIndex(si)
                self._select_op(row)
                return

    def show_opcode(self, member: str | None, offset: int) -> int:
        """Select the opcode at the scan's `offset` in `member` (None outside a zip), showing
        its pickle; asked before the disassembly is ready, it is shown once it is. Returns the
        selected row, or -1."""
        if self._job is not None and self._job.running:
            self._wanted = (member, offset)
            self.op_status.setText(f"Disassembling… then showing the opcode at offset {offset}.")
            return -1
        self._wanted = None
        where = location(member, offset)
        si = next((i for i, s in enumerate(self.streams) if s.holds(member, offset)), -1)
        if si >= 0 and self.stream_box.currentIndex() != si:
            self.stream_box.setCurrentIndex(si)
        row = self.op_model.at_offset(offset) if si >= 0 else -1
        if row < 0:
            self.op_status.setText(f"No disassembled opcode at {where}.")
            return -1
        self._select_op(row)
        shown = self.op_model.rows[row]
        text = (f"Opcode at {where}." if shown.offset == offset else
                f"The opcode at offset {shown.offset} holds {where}.")
        callee = self.op_model.callee_of(shown)
        if callee >= 0:  # a call is only half the story without what it calls
            self.op_view.selectionModel().select(
                self.op_model.index(callee, 0),
                QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows)
            target = self.op_model.rows[callee]
            text += (f" {shown.opcode} calls {target.imports}, imported by the {target.opcode}"
                     f" at offset {target.offset}: both selected.")
        self.op_status.setText(text)
        return row

    def _op_current(self, current: QModelIndex, _previous: QModelIndex) -> None:
        """A row moved to (click, keys, search) is the one the status line describes, so a
        jump's "both selected" never stays under another row."""
        if not current.isValid():
            return
        shown = self.op_model.rows[current.row()]
        what = self.op_model.data(current, roles.TOOLTIP)
        self.op_status.setText(f"{shown.opcode} at offset {shown.offset}"
                               + (f" — {what}." if what else "."))

    def _select_op(self, row: int) -> None:
        index = self.op_model.index(row, 0)
        self.op_view.selectionModel().setCurrentIndex(
            index, QItemSelectionModel.SelectionFlag.ClearAndSelect
            | QItemSelectionModel.SelectionFlag.Rows)
        self.op_view.scrollTo(index, QAbstractItemView.ScrollHint.PositionAtCenter)


def _item(text: str, sort_value: Any) -> QStandardItem:
    item = QStandardItem(text)
    item.setData(sort_value, Qt.ItemDataRole.UserRole)
    item.setToolTip(text)
    return item


def imported_name(opcode: str, argument: str) -> str | None:
    """`module.name` an import opcode row refers to (the row's argument is a repr)."""
    if opcode not in ("GLOBAL", "INST", "STACK_GLOBAL"):
        return None
    try:
        text = ast.literal_eval(argument)
    except (ValueError, SyntaxError):
        return None
    if not isinstance(text, str):
        return None
    return text.replace(" ", ".", 1) if opcode != "STACK_GLOBAL" else text


def _stream_bytes(path: Path, info: dict[str, Any]) -> tuple[bytes, int]:
    """The bytes holding one scanned pickle and the file offset they start at."""
    from inspector.formats.archives import zipread

    start, end = int(info.get("offset") or 0), info.get("end")
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        member = info.get("member")
        if member is None:
            return bytes(buf[start:end]), start
        found = next(m for m in zipread.read_zip(buf).members if m.name == member)
        return zipread.member_bytes(buf, found, MAX_PICKLE_BYTES)[start:end], start


def _disassemble_fn(path: Path, scan: ScanResult):
    def run(emit: EmitFn, cancel: CancelToken) -> list[Stream]:
        from inspector.scan.pickles.walker import disassemble

        streams = []
        for info in scan.pickles:
            cancel.check()
            where = info.get("member") or f"pickle at byte {info.get('offset', 0)}"
            place = {"member": info.get("member"), "start": int(info.get("offset") or 0),
                     "end": info.get("end")}
            if scan.format == "compressed-pickle":
                streams.append(Stream(f"{where} (compressed; not disassembled)", [], False,
                                      **place))
                continue
            data, base = _stream_bytes(path, info)
            rows = [
                OpRow(base + r.offset, r.opcode, r.argument,
                      imported_name(r.opcode, r.argument), r.severity,
                      None if r.calls is None else base + r.calls)
                for r in disassemble(data, OPCODE_LIMIT + 1)
            ]
            streams.append(Stream(where, rows[:OPCODE_LIMIT], len(rows) > OPCODE_LIMIT,
                                  **place))
        return streams

    return run
