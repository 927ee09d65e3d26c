"""Item-data roles and alignments as plain ints, and the flat tables built on them: `RowsModel`,
what every flat table model answers alike, and `rows_view`, the view that shows one.

Item models answer data() thousands of times per paint; comparing PySide's enum objects costs
twenty times an int comparison, and OR-ing alignment flags builds a new enum each time.
"""

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QObject, Qt
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableView

DISPLAY = Qt.ItemDataRole.DisplayRole.value
TOOLTIP = Qt.ItemDataRole.ToolTipRole.value
FONT = Qt.ItemDataRole.FontRole.value
ALIGNMENT = Qt.ItemDataRole.TextAlignmentRole.value
BACKGROUND = Qt.ItemDataRole.BackgroundRole.value
USER = Qt.ItemDataRole.UserRole.value
ROW = USER + 1
"""The row dict behind an index (None for a tree's prefix nodes)."""

RIGHT = (Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter).value
HORIZONTAL = Qt.Orientation.Horizontal


class RowsModel(QAbstractTableModel):
    """A flat table: one row per item of `rows`, one column per name in `HEADERS`; a subclass
    names its columns and answers `data`."""

    HEADERS: tuple[str, ...] = ()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.rows: list = []

    def set_rows(self, rows: list) -> None:
        """Show these rows."""
        self.beginResetModel()
        self.rows = rows
        self.endResetModel()

    def rowCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.HEADERS)

    def headerData(self, section, orientation, role=DISPLAY):
        if orientation == HORIZONTAL and role == DISPLAY:
            return self.HEADERS[section]
        return None


def rows_view(model: RowsModel, name: str, row_height: int) -> QTableView:
    """A view of the model's rows: whole rows selected, no row numbers, rows `row_height`
    pixels high, the last column stretched; `name` is what a screen reader says."""
    view = QTableView()
    view.setModel(model)
    view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    rows = view.verticalHeader()
    rows.hide()
    rows.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
    rows.setDefaultSectionSize(row_height)
    view.horizontalHeader().setStretchLastSection(True)
    view.setAccessibleName(name)
    return view
