"""The Tensors pane's widgets, laid out: the filter and view buttons, the table, tree and radar
views over the tensor models, the histogram and statistics panel, and the summary line.
`tensors_pane.TensorsPane` gives them behaviour."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QBoxLayout,
    QButtonGroup,
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMenu,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QTableView,
    QTableWidget,
    QToolButton,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from inspector.gui.panes.tensor_models import (
    COLUMNS,
    TensorTableModel,
    TensorTreeModel,
    display_order,
)
from inspector.gui.widgets.radar_view import RadarView
from inspector.gui.widgets.toggle_button import ToggleButton

NO_SELECTION = "Select a tensor to see its histogram and statistics."


class TensorsPaneLayout(QWidget):
    """The Tensors pane's widgets, built and placed; nothing here is connected or filled."""

    def __init__(self, parent: QWidget | None) -> None:
        super().__init__(parent)
        top = self._top_row()
        self.model = TensorTableModel(self)
        self._table()
        self.tree_model = TensorTreeModel(self)
        self.tree = QTreeView()
        self.tree.setModel(self.tree_model)
        self.tree.setUniformRowHeights(True)
        self.tree.setAlternatingRowColors(True)
        self.tree.setAccessibleName("Tensors by prefix")
        self.tree.header().resizeSection(0, 280)
        self.radar = RadarView()
        self.views = QStackedWidget()
        self.views.addWidget(self.table)
        self.views.addWidget(self.tree)
        self.views.addWidget(self.radar)

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.views)
        self.splitter.addWidget(self._detail())
        self.splitter.setCollapsible(0, False)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([860, 320])

        self.summary_label = QLabel()
        self.summary_label.setWordWrap(True)
        self.summary_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.splitter, 1)
        layout.addWidget(self.summary_label)

    def _top_row(self) -> QHBoxLayout:
        """The filter, the view buttons (`view_buttons`, ids in `VIEWS` order) and the tools."""
        self.filter = QLineEdit()
        self.filter.setPlaceholderText("Filter keys (text, or a glob such as *.bias)")
        self.filter.setClearButtonEnabled(True)
        self.table_button = ToggleButton("Table", "One row per tensor", checked=True)
        self.tree_button = ToggleButton("Tree", "Tensors grouped by dotted prefix")
        self.radar_button = ToggleButton("Radar", "Corruption radar: absmax, std and NaN/Inf"
                                         " share of every weight along the model's depth (a"
                                         " flipped exponent bit lights up)")
        self.view_buttons = QButtonGroup(self)
        self.view_buttons.addButton(self.table_button, 0)
        self.view_buttons.addButton(self.tree_button, 1)
        self.view_buttons.addButton(self.radar_button, 2)
        self.problems_button = QPushButton("Problems first")
        self.problems_button.setToolTip("The default order: tensors holding NaN or Inf or "
                                        "flagged by the weights-health check on top, the rest "
                                        "in file order (a header click sorts by its column)")
        self.copy_button = QPushButton("Copy as CSV")
        self.copy_button.setToolTip("Copy the selected rows (or all shown rows) as CSV")
        self.columns_button = QToolButton(text="Columns")
        self.columns_button.setToolTip("Choose the table's columns (also on the header's"
                                       " right-click menu)")
        self.columns_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.details_button = ToggleButton("Histogram",
                                           "Show or hide the histogram and statistics panel")
        top = QHBoxLayout()
        top.addWidget(self.filter, 1)
        for button in (self.table_button, self.tree_button, self.radar_button,
                       self.problems_button, self.columns_button, self.details_button,
                       self.copy_button):
            top.addWidget(button)
        return top

    def _table(self) -> None:
        """The table view, its priority columns first, and its Columns menu (one checkable
        action per column, its field as the action's data)."""
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(-1, Qt.SortOrder.AscendingOrder)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setAlternatingRowColors(True)
        self.table.setWordWrap(False)
        # a dotted key's end tells it apart (`…layers.07.self_attn.q_proj.weight`)
        self.table.setTextElideMode(Qt.TextElideMode.ElideLeft)
        self.table.setAccessibleName("Tensors")
        vh = self.table.verticalHeader()
        vh.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        vh.setDefaultSectionSize(self.fontMetrics().height() + 8)
        vh.hide()
        hh = self.table.horizontalHeader()
        hh.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        hh.setStretchLastSection(True)
        hh.setResizeContentsPrecision(200)
        hh.setSectionsMovable(True)
        for visual, logical in enumerate(display_order()):
            hh.moveSection(hh.visualIndex(logical), visual)
        self.column_menu = QMenu("Columns", self)
        for column in COLUMNS:
            action = self.column_menu.addAction(column.title)
            action.setCheckable(True)
            action.setData(column.field)
            action.setEnabled(column.field != "key")  # a row needs its name
        self.columns_button.setMenu(self.column_menu)
        hh.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)

    def _detail(self) -> QWidget:
        """The selected tensor's panel: its name, the histogram (added on first use into
        `plot_holder`) and its statistics."""
        self.detail_title = QLabel(NO_SELECTION)
        self.detail_title.setWordWrap(True)
        self.log_scale = QCheckBox("Log scale")
        self.log_scale.setToolTip("Counts on a log axis: a few outliers (one flipped exponent)"
                                  " stay visible beside millions of ordinary values")
        self.plot_holder = QVBoxLayout()
        self.stats = QTableWidget(0, 2)
        self.stats.setHorizontalHeaderLabels(["Statistic", "Value"])
        self.stats.verticalHeader().hide()
        self.stats.horizontalHeader().setStretchLastSection(True)
        self.stats.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.stats.setAccessibleName("Statistics of the selected tensor")
        self.detail = QWidget()
        self.detail.setMinimumWidth(240)
        dl = QVBoxLayout(self.detail)
        dl.setContentsMargins(0, 0, 0, 0)
        title_row = QHBoxLayout()
        title_row.addWidget(self.detail_title, 1)
        title_row.addWidget(self.log_scale, 0, Qt.AlignmentFlag.AlignTop)
        dl.addLayout(title_row)
        self.detail_body = QBoxLayout(QBoxLayout.Direction.TopToBottom)
        self.detail_body.addLayout(self.plot_holder, 1)
        self.detail_body.addWidget(self.stats, 1)
        dl.addLayout(self.detail_body, 1)
        return self.detail
