"""The corruption radar as a heatmap: a row per weight kind, a column per layer along the depth.

A view over `checkpoint.radar.Radar`: cells are coloured by one metric (absmax, std or NaN/Inf
share) on a perceptually uniform scale (viridis, readable on light and dark bases alike; the scale
carries data, so it is not a theme colour), cells named by a weights-health finding are
outlined in the palette's "bad" colour, the tooltip gives the key and exact values, and moving
to a cell (click or arrow keys) reports its tensor's key.
"""

from __future__ import annotations

from PySide6.QtCore import (
    QAbstractTableModel,
    QEvent,
    QItemSelectionModel,
    QModelIndex,
    QPersistentModelIndex,
    QRect,
    Qt,
    Signal,
)
from PySide6.QtGui import QColor, QLinearGradient, QPainter, QPen
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QStackedWidget,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from inspector.checkpoint.radar import ABSMAX, AFTER, BEFORE, NONFINITE, STD, Radar
from inspector.gui import roles
from inspector.gui.widgets import chart_style

COLOUR_MAP = "viridis"
LUT_SIZE = 256
FLAGGED = roles.USER + 2
"""Item-data role: True when a weights-health finding names the cell's tensor."""
KEY = roles.USER + 3
"""Item-data role: the key of the cell's tensor (None for an empty cell)."""
METRIC_NAMES = ((ABSMAX, "Abs max (log10)"), (STD, "Std (log10)"),
                (NONFINITE, "NaN/Inf share"))
ROW_LABEL_MAX = 260
"""The kind labels' widest column: long key patterns elide at the left, their tail stays."""
ROW_HEIGHT_MAX = 2.5
"""Tallest row, in lines of text: a few kinds on a tall screen stay blocks, not banners."""
MIN_COLUMN = 8
"""Narrowest layer column in pixels: an 80-layer model fits a 1280 px window without scrolling."""
LABEL_STEPS = (1, 2, 4, 5, 10, 20, 25, 50, 100)
NARROW = 16
"""Columns narrower than this many pixels are drawn without a gap between cells."""
NO_FILE = "Open a checkpoint to see its weights along the model's depth."
HOW = ("Outlined: a weights-health finding names the tensor. Click a cell (or move with the "
       "arrow keys) to select its tensor; double-click opens it in the table.")

_lut: list[QColor] = []


def colour_scale() -> list[QColor]:
    """The heatmap's colours, dark to bright (pyqtgraph's bundled map, loaded on first use)."""
    if not _lut:
        # pyqtgraph costs most of a second to import: paid when a radar is first drawn.
        import pyqtgraph as pg

        table = pg.colormap.get(COLOUR_MAP).getLookupTable(nPts=LUT_SIZE)
        _lut.extend(QColor(int(r), int(g), int(b)) for r, g, b in table[:, :3])
    return _lut


def colour_at(position: float) -> QColor:
    """The scale's colour at `position` in [0, 1]."""
    lut = colour_scale()
    return lut[round(position * (len(lut) - 1))]


class RadarModel(QAbstractTableModel):
    """Cells of a radar for one metric: colour, outline and tooltip per (kind, layer)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.radar = Radar()
        self.metric = ABSMAX
        self.label_step = 1
        """Every how many layers the top header names one (a deep model's columns are narrow)."""
        self._colours: dict[tuple[int, int], QColor] = {}

    def set_radar(self, radar: Radar, metric: str) -> None:
        """Show `radar` coloured by `metric`."""
        self.beginResetModel()
        self.radar, self.metric = radar, metric
        self._colours = {}
        for place, cell in radar.cells.items():
            position = radar.position(metric, cell.value(metric))
            if position is not None:
                self._colours[place] = colour_at(position)
        self.endResetModel()

    def rowCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: B008
        """Weight kinds."""
        return 0 if parent.isValid() else len(self.radar.rows)

    def columnCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: B008
        """Places along the depth."""
        return 0 if parent.isValid() else len(self.radar.columns)

    def data(self, index: QModelIndex, role: int = roles.DISPLAY):
        """Colour (background role), outline (FLAGGED) and tooltip of a cell."""
        place = (index.row(), index.column())
        if role == roles.BACKGROUND:
            return self._colours.get(place)
        if role == roles.TOOLTIP:
            return self.radar.describe(*place)
        if role == FLAGGED:
            cell = self.radar.cells.get(place)
            return bool(cell and cell.findings)
        if role == KEY:
            cell = self.radar.cells.get(place)
            return cell.key if cell else None
        return None

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = roles.DISPLAY):
        """Layer labels along the top, weight kinds down the side."""
        if role not in (roles.DISPLAY, roles.TOOLTIP):
            return None
        if orientation == roles.HORIZONTAL:
            label = self.radar.columns[section]
            if role == roles.DISPLAY:
                step = self.label_step
                return label if (int(label) % step == 0 if label.isdigit() else step == 1) else ""
            return {BEFORE: "Weights before the first layer (embeddings)",
                    AFTER: "Weights after the last layer (final norm, output head)"}.get(
                        label, f"Layer {label}")
        row = self.radar.rows[section]
        return row.label if role == roles.DISPLAY else f"{row.kind}: {row.pattern}"


class HeatDelegate(QStyledItemDelegate):
    """Paints a cell as a block of its colour, outlined when a health finding names it."""

    def paint(self, painter: QPainter, option: QStyleOptionViewItem,
              index: QModelIndex | QPersistentModelIndex) -> None:
        """Fill, finding outline and selection frame; an empty cell stays the base colour."""
        palette = option.palette
        # Narrow columns (a deep model) touch: a gap there would stripe the row.
        gap = 1 if option.rect.width() >= NARROW else 0
        rect = QRect(option.rect).adjusted(gap, 1, -gap, -1)
        painter.save()
        colour = index.data(roles.BACKGROUND)
        if colour is not None:
            painter.fillRect(rect, colour)
        if index.data(FLAGGED):
            painter.setPen(QPen(chart_style.role_colour("bad", palette), 3))
            painter.drawRect(rect.adjusted(1, 1, -2, -2))
        if option.state & QStyle.StateFlag.State_Selected:
            painter.setPen(QPen(chart_style.text_colour(palette), 2, Qt.PenStyle.DotLine))
            painter.drawRect(rect.adjusted(3, 3, -4, -4))
        painter.restore()


class DepthHeader(QHeaderView):
    """The layer header; when columns are too narrow for a number each, it names every
    `label_step`-th layer centred over its column, spilling onto its neighbours."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(Qt.Orientation.Horizontal, parent)

    def paintEvent(self, event: QEvent) -> None:
        """The native header while every column is named, else a plain strip of numbers."""
        model = self.model()
        step = getattr(model, "label_step", 1)
        if step == 1:
            super().paintEvent(event)
            return
        painter = QPainter(self.viewport())
        palette = self.palette()
        painter.fillRect(self.viewport().rect(), palette.button())
        painter.setPen(palette.color(palette.ColorRole.ButtonText))
        width = self.fontMetrics().horizontalAdvance("0000")
        height = self.viewport().height()
        for section in range(self.count()):
            label = model.headerData(section, roles.HORIZONTAL)
            if label:
                centre = self.sectionViewportPosition(section) + self.sectionSize(section) // 2
                painter.drawText(QRect(centre - width // 2, 0, width, height),
                                 Qt.AlignmentFlag.AlignCenter, label)
        painter.setPen(palette.color(palette.ColorRole.Mid))
        painter.drawLine(0, height - 1, self.viewport().width(), height - 1)
        painter.end()


class ColourBar(QWidget):
    """The colour scale as a horizontal bar, dark (low) at the left."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFixedHeight(self.fontMetrics().height())
        self.setMinimumWidth(120)
        self.setAccessibleName("Colour scale, low to high")

    def paintEvent(self, _event: QEvent) -> None:
        """Draw the gradient and a frame in the text colour."""
        painter = QPainter(self)
        gradient = QLinearGradient(0, 0, self.width(), 0)
        lut = colour_scale()
        for i in range(0, len(lut), 16):
            gradient.setColorAt(i / (len(lut) - 1), lut[i])
        gradient.setColorAt(1.0, lut[-1])
        painter.fillRect(self.rect(), gradient)
        painter.setPen(chart_style.text_colour(self.palette()))
        painter.drawRect(self.rect().adjusted(0, 0, -1, -1))
        painter.end()


class RadarView(QWidget):
    """The radar heatmap with its metric choice, colour legend and empty state in words."""

    key_selected = Signal(str)
    """A cell was moved to (click or keys): the key of its tensor."""
    key_opened = Signal(str)
    """A cell was double-clicked: show its tensor in the table."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._quiet = False
        self.metric_box = QComboBox()
        for metric, name in METRIC_NAMES:
            self.metric_box.addItem(name, metric)
        self.metric_box.setToolTip("What colours the cells")
        self.metric_box.currentIndexChanged.connect(self._metric_changed)
        self.low = QLabel()
        self.high = QLabel()
        self.bar = ColourBar()
        top = QHBoxLayout()
        top.addWidget(QLabel("Colour by"))
        top.addWidget(self.metric_box)
        top.addSpacing(12)
        top.addWidget(self.low)
        top.addWidget(self.bar, 1)
        top.addWidget(self.high)
        self.legend = QLabel()
        self.legend.setWordWrap(True)
        self.depth_caption = QLabel("Layer index along the model's depth →   (rows: weight kind)")

        self.model = RadarModel(self)
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setItemDelegate(HeatDelegate(self.table))
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setShowGrid(False)
        self.table.setAccessibleName("Corruption radar")
        self.table.setHorizontalHeader(DepthHeader(self.table))
        hh = self.table.horizontalHeader()
        hh.setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        hh.setMinimumSectionSize(MIN_COLUMN)
        vh = self.table.verticalHeader()
        vh.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        vh.setMinimumSectionSize(self.shortest_row())
        vh.setDefaultSectionSize(self.shortest_row())
        vh.setTextElideMode(Qt.TextElideMode.ElideLeft)
        vh.setMaximumWidth(ROW_LABEL_MAX)
        self.table.selectionModel().currentChanged.connect(self._current_changed)
        self.table.doubleClicked.connect(self._double_clicked)

        self.empty = QLabel(NO_FILE)
        self.empty.setWordWrap(True)
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.pages = QStackedWidget()
        self.pages.addWidget(self.empty)
        body = QWidget()
        bl = QVBoxLayout(body)
        bl.setContentsMargins(0, 0, 0, 0)
        bl.addLayout(top)
        bl.addWidget(self.legend)
        bl.addWidget(self.depth_caption)
        bl.addWidget(self.table, 1)
        self.pages.addWidget(body)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.pages)

    @property
    def metric(self) -> str:
        """The metric colouring the cells."""
        return self.metric_box.currentData()

    @property
    def radar(self) -> Radar:
        """The radar shown."""
        return self.model.radar

    def set_radar(self, radar: Radar | None) -> None:
        """Show `radar`; None (no file, or nothing loaded yet) shows the no-file words."""
        if radar is None or radar.empty:
            self.empty.setText(NO_FILE if radar is None else radar.reason)
            self.pages.setCurrentIndex(0)
            self.model.set_radar(Radar(), self.metric)
            return
        self.model.set_radar(radar, self.metric)
        self._show_scale()
        self.pages.setCurrentIndex(1)
        self._fit_cells()
        flagged = radar.flagged()
        if flagged:  # rows that scroll: the finding's row is the one to see first
            self.table.scrollTo(self.model.index(*flagged[0]))

    def shortest_row(self) -> int:
        """The shortest row whose kind label the header draws in full, underscores and
        descenders included: a line of the header's font and the style's margins around it."""
        vh = self.table.verticalHeader()
        margin = vh.style().pixelMetric(QStyle.PixelMetric.PM_HeaderMargin, None, vh)
        return vh.fontMetrics().height() + 2 * margin

    def full_height(self) -> int:
        """The view's height with every row shown at its shortest readable height."""
        header = self.table.horizontalHeader().sizeHint().height()
        rows = self.model.rowCount() * self.shortest_row()
        above = self.table.mapTo(self, self.table.rect().topLeft()).y()
        return above + header + rows + 2 * self.table.frameWidth()

    def _fit_cells(self) -> None:
        """Rows share the table's height, up to ROW_HEIGHT_MAX lines each (then they scroll);
        columns share its width, and the top header names every layer it has room for."""
        rows, columns = self.model.rowCount(), self.model.columnCount()
        if not rows:
            return
        line = self.fontMetrics().height()
        room = self.table.viewport().height() // rows
        self.table.verticalHeader().setDefaultSectionSize(
            max(self.shortest_row(), min(room, int(line * ROW_HEIGHT_MAX))))
        width = max(MIN_COLUMN, self.table.viewport().width() // columns)
        label = self.fontMetrics().horizontalAdvance("0000")
        step = next((s for s in LABEL_STEPS if s * width >= label), LABEL_STEPS[-1])
        if step != self.model.label_step:
            self.model.label_step = step
            self.model.headerDataChanged.emit(roles.HORIZONTAL, 0, columns - 1)

    def resizeEvent(self, event: QEvent) -> None:
        """Refit the cells to the new size."""
        super().resizeEvent(event)
        self._fit_cells()

    def show_key(self, key: str | None) -> None:
        """Move to the cell of `key` (none when it is not on the radar) without reporting it."""
        place = self.radar.locate(key) if key else None
        self._quiet = True
        try:
            if place is None:
                self.table.selectionModel().clear()
            else:
                index = self.model.index(*place)
                self.table.selectionModel().setCurrentIndex(
                    index, QItemSelectionModel.SelectionFlag.ClearAndSelect)
                self.table.scrollTo(index)
        finally:
            self._quiet = False

    def index_of(self, key: str) -> QModelIndex:
        """The model index of the cell holding `key` (invalid when none does)."""
        place = self.radar.locate(key)
        return self.model.index(*place) if place else QModelIndex()

    def _show_scale(self) -> None:
        radar, metric = self.radar, self.metric
        lo, hi = radar.scale(metric)
        if metric == NONFINITE:
            self.low.setText("none")
            self.high.setText("all")
        else:
            self.low.setText(f"{10 ** lo:.3g}")
            self.high.setText(f"{10 ** hi:.3g}")
        self.legend.setText(f"{radar.legend(metric)} {HOW}")

    def _metric_changed(self) -> None:
        if not self.radar.empty:
            current = self.table.currentIndex()
            self.model.set_radar(self.radar, self.metric)
            self._show_scale()
            if current.isValid():
                self.show_key(self.model.data(self.model.index(current.row(),
                                                               current.column()), KEY))

    def _current_changed(self, current: QModelIndex, _previous: QModelIndex) -> None:
        key = current.data(KEY) if current.isValid() else None
        if key and not self._quiet:
            self.key_selected.emit(key)

    def _double_clicked(self, index: QModelIndex) -> None:
        key = index.data(KEY)
        if key:
            self.key_opened.emit(key)
