"""The Folder pane: one row per entry of each opened folder, the line `scan DIR` prints for it.

Rows come from `scan.advice.entry_line` (the word, the detail and the first flag of a scan
result); an entry whose scan has not ended shows as scanning. The pane holds no rule: what
an entry's line says is the scan's, how it looks is its badge's (`core.badges.LOOKS`).
"""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtWidgets import QLabel, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget

from inspector.core.badges import LOOKS, Badge
from inspector.core.termtext import counted
from inspector.gui.verdict_style import state_icon
from inspector.scan.advice import entry_line
from inspector.scan.result import ScanResult

COLUMNS = ("State", "Entry", "What it is", "First flag")
SCANNING = LOOKS[Badge.SCANNING]


class FolderPane(QWidget):
    """Every entry of the folders opened in this window, each with its scan's line."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.summary = QLabel("Open a folder to list every entry in it.")
        self.summary.setWordWrap(True)
        self.tree = QTreeWidget()
        self.tree.setColumnCount(len(COLUMNS))
        self.tree.setHeaderLabels(list(COLUMNS))
        self.tree.setRootIsDecorated(True)
        self.tree.setUniformRowHeights(True)
        self.tree.setColumnWidth(0, 150)
        self.tree.setColumnWidth(1, 300)
        self.tree.setColumnWidth(2, 360)
        layout = QVBoxLayout(self)
        layout.addWidget(self.summary)
        layout.addWidget(self.tree)
        self._rows: dict[str, QTreeWidgetItem] = {}
        self._roots: dict[str, QTreeWidgetItem] = {}
        self._states: dict[str, str] = {}
        """Each finished entry's state (`EntryLine.state`), by path."""

    def show_folder(self, root: Path, entries: list[Path]) -> None:
        """List `entries` of the folder `root`, each scanning until `set_result` fills it."""
        key = os.fspath(root)
        top = self._roots.get(key)
        if top is None:
            top = self._roots[key] = QTreeWidgetItem(self.tree, ["Folder", key])
        for path in entries:
            if os.fspath(path) in self._rows:
                continue
            row = QTreeWidgetItem(top, [SCANNING.word, _relative(path, root), "", ""])
            row.setIcon(0, state_icon(Badge.SCANNING))
            row.setToolTip(1, os.fspath(path))
            self._rows[os.fspath(path)] = row
        top.setExpanded(True)
        self._count()

    def set_result(self, path: Path, scan: ScanResult) -> None:
        """Show the line of the entry at `path` (nothing when no folder lists it)."""
        row = self._rows.get(os.fspath(path))
        if row is None:
            return
        line = entry_line(scan)
        row.setText(0, line.word)
        row.setText(2, line.detail)
        row.setText(3, line.why)
        row.setToolTip(2, line.detail)
        row.setToolTip(3, line.why)
        row.setIcon(0, state_icon(Badge(line.state)))
        row.setToolTip(0, LOOKS[Badge(line.state)].meaning)
        self._states[os.fspath(path)] = line.state
        self._count()

    def rows(self) -> list[tuple[str, str, str, str]]:
        """Every entry's row as text (the columns), in order: what the pane shows."""
        return [tuple(top.child(i).text(c) for c in range(len(COLUMNS)))
                for top in self._roots.values() for i in range(top.childCount())]

    def _count(self) -> None:
        skipped = sum(1 for state in self._states.values() if state == Badge.SKIPPED)
        scanning = len(self._rows) - len(self._states)
        self.summary.setText(
            f"{len(self._rows)} entries in {counted(len(self._roots), 'folder')}: "
            f"{len(self._states) - skipped} scanned, {skipped} skipped (not checkpoints)"
            + (f", {scanning} scanning" if scanning else "")
            + ". Every entry has a line, skipped ones with their reason, as "
            "`ckpt-inspector scan FOLDER` prints them.")


def _relative(path: Path, root: Path) -> str:
    """The entry's name under its folder (a model folder or a link keeps its own name)."""
    try:
        return os.fspath(Path(path).relative_to(root))
    except ValueError:
        return os.fspath(path)

