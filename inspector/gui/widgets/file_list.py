"""The window's list of open files, with the button that opens its legend (`StateLegend`).

Each row's icon is its file's state (`verdict_style.document_icon`); the legend names every
state a row can show. A name too long for the list wraps at its separators (`/ _ - .`), never
in the middle of a word, and the list keeps the width the user gave it whatever the pane
beside it asks for (the window's splitter gives it no stretch; `SIDE_WIDTH` to start).
"""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QListView,
    QListWidget,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from inspector.gui.widgets.state_legend import StateLegend

LEGEND_TEXT = "What the icons mean…"
SIDE_WIDTH = 230
"""The list's width in a new window; the user's own width is kept with the window's state."""
MIN_WIDTH = 160
SEPARATORS = "/_-."
BREAK = "\u200b"
"""A zero-width space: a line may break there and nothing is drawn."""


def break_at_separators(text: str) -> str:
    """`text` with a line-break opportunity after each separator, so a long name wraps at
    `model-00001-of-00010` / `.safetensors` boundaries instead of mid-word."""
    return "".join(c + BREAK if c in SEPARATORS else c for c in text)


class SeparatorWrap(QStyledItemDelegate):
    """Draws each row's text wrapped at its separators (the item's own text is unchanged, so
    tooltips, accessibility and tests read the plain name)."""

    def initStyleOption(self, option: QStyleOptionViewItem, index: QModelIndex) -> None:
        """The item's option, with break opportunities in its text and wrapping on."""
        super().initStyleOption(option, index)
        option.text = break_at_separators(option.text)
        option.features |= QStyleOptionViewItem.ViewItemFeature.WrapText


class FileListPanel(QWidget):
    """The open files, one row each, above a button that explains the rows' icons."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.list = QListWidget()
        self.list.setAccessibleName("Open files")
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.list.setTextElideMode(Qt.TextElideMode.ElideNone)
        self.list.setWordWrap(True)
        self.list.setResizeMode(QListView.ResizeMode.Adjust)  # rows re-wrap as it is resized
        self.list.setItemDelegate(SeparatorWrap(self.list))
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
        self.setMinimumWidth(MIN_WIDTH)

    def show_legend(self) -> StateLegend:
        """Open the legend beside the list (one window, raised if already open)."""
        if self.legend is None:
            self.legend = StateLegend(self)
        self.legend.show()
        self.legend.raise_()
        return self.legend
