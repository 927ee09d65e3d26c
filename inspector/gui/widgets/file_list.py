"""The window's list of open files, with the button that opens its legend (`StateLegend`).

Each row's icon is its file's state (`verdict_style.document_icon`); the legend names every
state a row can show.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractItemView, QListWidget, QToolButton, QVBoxLayout, QWidget

from inspector.gui.widgets.state_legend import StateLegend

LEGEND_TEXT = "What the icons mean…"


class FileListPanel(QWidget):
    """The open files, one row each, above a button that explains the rows' icons."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.list = QListWidget()
        self.list.setAccessibleName("Open files")
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.list.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.legend_button = QToolButton()
        self.legend_button.setText(LEGEND_TEXT)
        self.legend_button.setToolTip("Each icon of the list, its word and what it means")
        self.legend_button.setAutoRaise(True)
        self.legend_button.clicked.connect(self.show_legend)
        self.legend: StateLegend | None = None
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.list, 1)
        layout.addWidget(self.legend_button, 0, Qt.AlignmentFlag.AlignLeft)
        self.setMinimumWidth(160)

    def show_legend(self) -> StateLegend:
        """Open the legend beside the list (one window, raised if already open)."""
        if self.legend is None:
            self.legend = StateLegend(self)
        self.legend.show()
        self.legend.raise_()
        return self.legend
