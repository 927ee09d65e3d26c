"""The code a TorchScript or torch.export archive carries, for a person to read and judge:
torch.jit.load would compile and run it, so it is shown here and never run.

The worker already escaped every file's name and text (`core.termtext.escape`: control
characters and BiDi overrides made visible), and this module shows them as plain text only,
so markup in a file stays literal text."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QPalette, QTextCursor, QTextFormat
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QSplitter,
    QTextEdit,
    QVBoxLayout,
    QWidget,
)

from inspector.checkpoint.results import InspectResult
from inspector.core.termtext import counted
from inspector.layout.torchscript import judge_code


def code_summary(result: InspectResult | None) -> str | None:
    """'3 files · 1 flag: code/__torch__/x.py names the Python module os'; None without code."""
    files = result.code if result is not None else None
    if files is None:
        return None
    text = counted(len(files), "file")
    flagged = [(f, flag) for f in files for flag in f.get("flags") or []]
    if not flagged:
        return text + " · no flags (nothing beyond tensor maths found)"
    first, flag = flagged[0]
    return (f"{text} · {counted(len(flagged), 'flag')}: "
            f"{first.get('name')} {flag}")


def flagged_lines(text: str) -> list[int]:
    """Zero-based numbers of the lines that `judge_code` flags on their own."""
    return [i for i, line in enumerate(text.split("\n")) if judge_code(line)]


def _item_text(entry: dict) -> str:
    """Its flag count and path; the size goes in the tooltip, leaving the path the room."""
    flags = entry.get("flags") or []
    mark = f"⚠ {counted(len(flags), 'flag')} · " if flags else ""
    return f"{mark}{entry.get('name')}"


def _item_tip(entry: dict) -> str:
    """Path, size and each flag, one a line."""
    size = f"{int(entry.get('size') or 0):,} bytes"
    return "\n".join([f"{entry.get('name')} ({size})", *(entry.get("flags") or ["No flags"])])


class CodeDialog(QDialog):
    """Every code file of one archive: a list with their flags, the selected one's text."""

    def __init__(self, name: str, files: list[dict], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Code carried by {name}")
        self.files = files
        self.marked: list[int] = []
        """Zero-based lines of the shown file that are highlighted."""
        note = QLabel("Loading this archive with torch.jit.load or torch.export.load would run "
                      "this code. It is shown as text and never run; flagged lines are "
                      "highlighted.")
        note.setWordWrap(True)
        self.list = QListWidget()
        self.list.setAccessibleName("Code files")
        # a long path loses its middle, not its file name, and never scrolls out of sight
        self.list.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        for entry in files:
            item = QListWidgetItem(_item_text(entry))
            item.setToolTip(_item_tip(entry))
            self.list.addItem(item)
        self.flags = QLabel()
        self.flags.setTextFormat(Qt.TextFormat.PlainText)  # flags name things from the file
        self.flags.setWordWrap(True)
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.text.setAccessibleName("Code text")
        mono = QFont("monospace")
        mono.setStyleHint(QFont.StyleHint.Monospace)
        self.text.setFont(mono)
        right = QWidget()
        side = QVBoxLayout(right)
        side.setContentsMargins(0, 0, 0, 0)
        side.addWidget(self.flags)
        side.addWidget(self.text, 1)
        split = QSplitter()
        split.addWidget(self.list)
        split.addWidget(right)
        split.setSizes([400, 600])  # the list wide enough to read a file's path
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(note)
        layout.addWidget(split, 1)
        layout.addWidget(buttons)
        self.list.currentRowChanged.connect(self.show_file)
        flagged = next((i for i, f in enumerate(files) if f.get("flags")), 0)
        if files:
            self.list.setCurrentRow(flagged)  # open on the first flagged file
        self.resize(1000, 640)

    def show_file(self, row: int) -> None:
        """Show file `row`'s text with its flagged lines highlighted."""
        if not 0 <= row < len(self.files):
            return
        entry = self.files[row]
        flags = entry.get("flags") or []
        self.flags.setText(("Flags: " + "; ".join(flags)) if flags else "No flags.")
        text = str(entry.get("text") or "")
        if entry.get("truncated"):
            text += "\n… (truncated: the inspect result carries the first 64 KiB)"
        self.text.setPlainText(text)
        self.marked = flagged_lines(text)
        self.text.setExtraSelections(self._marks(self.marked))

    def _marks(self, lines: list[int]) -> list[QTextEdit.ExtraSelection]:
        """A palette-coloured background on each flagged line (no fixed colour: themes)."""
        doc = self.text.document()
        marks = []
        for number in lines:
            mark = QTextEdit.ExtraSelection()
            mark.cursor = QTextCursor(doc.findBlockByNumber(number))
            mark.format.setBackground(self.palette().color(QPalette.ColorRole.Highlight))
            mark.format.setForeground(self.palette().color(QPalette.ColorRole.HighlightedText))
            mark.format.setProperty(QTextFormat.Property.FullWidthSelection, True)
            marks.append(mark)
        return marks
