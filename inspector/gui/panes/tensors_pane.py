"""Tensors: a table (or prefix tree) of every tensor, its statistics, and a histogram.

Laid out for a 1280 px window: the priority columns (tensor_models.PRIORITY) come first, the
others can be hidden from the header's context menu or the Columns button (remembered), and the
histogram panel collapses. The histogram follows the selection: when the filter hides the
selected tensor it says so instead of showing a stale chart. The Radar view
(`gui.widgets.radar_view` over `checkpoint.radar`) lays the weights along the model's depth; a
cell selects its tensor here. The widgets are laid out by `tensors_layout`.
"""

from __future__ import annotations

import csv
import html
import importlib
import io
import math
from typing import Any

from PySide6.QtCore import QEvent, QItemSelectionModel, QModelIndex, QPoint, Qt, QTimer
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QBoxLayout, QTableWidgetItem, QWidget

from inspector.checkpoint.contents import UNIQUE_WORD
from inspector.checkpoint.radar import build_radar
from inspector.core.vocabulary import HealthSeverity
from inspector.gui import app as appmod
from inspector.gui import roles
from inspector.gui.document import FileDocument
from inspector.gui.panes.tensor_models import (
    COLUMNS,
    Row,
    Summary,
    bad_brush,
    bytes_text,
    number_text,
    rows_summary,
    shape_text,
)
from inspector.gui.panes.tensors_layout import NO_SELECTION, TensorsPaneLayout
from inspector.gui.widgets import chart_style

FILTER_MS = 200
"""The filter applies once typing pauses, not on every keystroke."""
FLUSH_MS = 150
"""Streamed rows are shown in batches at most this often, so the view never thrashes."""

FIRST_NONFINITE = "First NaN/Inf at"
"""Where a tensor's first NaN or Inf is (the sandbox's `first_nonfinite`, a flat index),
shown as its position in the tensor's shape."""
STAT_LABELS = (
    ("key", "Key"), ("dtype", "Dtype"), ("shape", "Shape"), ("numel", "Elements"),
    ("nbytes", "Size"), ("min", "Min"), ("max", "Max"), ("mean", "Mean"),
    ("std", "Std (population)"), ("std_sample", "Std (sample, n-1; torch.std)"),
    ("absmax", "Abs max"), ("nan", "NaN"), ("inf", "Inf"),
    ("first_nonfinite", FIRST_NONFINITE), ("zeros", "Zeros"),
    ("stride", "Stride"), ("storage_offset", "Storage offset"), ("contiguous", "Contiguous"),
    ("shared_with", "Shares storage with"), ("flags", "Flags"), ("digest", "SHA-256"),
)
HIDDEN_STATS = {"histogram", "type", "exponents"}
KEY_WIDTH_MIN = 170
"""The key column's narrowest automatic size, when the table is short of room."""
CELL_SLACK = 4
"""Pixels added to a measured column: the first rows size it, a later value may be longer."""
LAST_COLUMN_MIN = 60
"""What the last (stretched) column keeps when the key column is fitted: a digest's start."""
KEY_WIDTH_MAX = 280
"""The key column's widest automatic size: long keys elide, the priority columns stay in view."""
SIDE_PANEL_MIN_WIDTH = 1200
"""Below this pane width the histogram panel sits under the table (histogram beside the
statistics) instead of beside it, so the table keeps its full width for the priority columns."""
DETAIL_MIN_HEIGHT = 220
"""The histogram panel's least height under the table: its chart stays readable."""
LOG_FLOOR = -0.5
"""Log-scale baseline (log10 of a count of about 0.3): empty bins sit on it, one count shows."""
VIEWS = ("table", "tree", "radar")
"""The views' names (QSettings `tensors/view`), in the order of their buttons."""


class TensorsPane(TensorsPaneLayout):
    """View over a document's tensor rows."""

    _built = False  # restyled on a theme switch only once its state exists

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.doc: FileDocument | None = None
        self.summary = Summary()
        self._pending: list[tuple[int, int]] = []
        self._flush_timer = QTimer(self)
        self._flush_timer.setSingleShot(True)
        self._flush_timer.setInterval(FLUSH_MS)
        self._flush_timer.timeout.connect(self._flush)
        self._filter_timer = QTimer(self)
        self._filter_timer.setSingleShot(True)
        self._filter_timer.setInterval(FILTER_MS)
        self._filter_timer.timeout.connect(self._filter_changed)
        self._tree_stale = True
        self._plot = None
        self.selected: Row | None = None
        self._sized = False
        self._key_wanted = KEY_WIDTH_MAX
        self._radar_source: tuple | None = None
        self.side_panel = True  # the histogram panel beside the views, not under them
        self._restore_choices()
        self._connect()
        view = appmod.settings().value("tensors/view", "table")
        if view in VIEWS[1:]:
            self.view_buttons.button(VIEWS.index(view)).setChecked(True)
            self._set_mode(VIEWS.index(view))
        self._built = True
        self.set_document(None)

    def _connect(self) -> None:
        """The laid-out widgets' signals to what the pane does with them."""
        self.filter.textChanged.connect(self._filter_timer.start)
        self.view_buttons.idClicked.connect(self._set_mode)
        self.copy_button.clicked.connect(self.copy_csv)
        self.problems_button.clicked.connect(self.problems_first)
        for action, column in zip(self.column_menu.actions(), COLUMNS, strict=True):
            action.toggled.connect(lambda on, f=column.field: self.set_column_visible(f, on))
        self.table.horizontalHeader().customContextMenuRequested.connect(self._header_menu)
        self.table.selectionModel().currentRowChanged.connect(self._table_current)
        self.model.modelReset.connect(self._follow_selection)
        self.tree.selectionModel().currentChanged.connect(self._tree_current)
        self.radar.key_selected.connect(self._radar_selected)
        self.radar.key_opened.connect(self._radar_opened)
        self.log_scale.toggled.connect(self._log_scale_changed)
        self.details_button.toggled.connect(self._toggle_details)

    def _restore_choices(self) -> None:
        """The hidden columns, log scale and histogram panel the user last chose; before the
        signals are connected, as restoring them is no change to remember or redraw."""
        hidden = appmod.settings().value("tensors/hidden_columns", [])
        self._apply_hidden([hidden] if isinstance(hidden, str) else list(hidden or []))
        self.log_scale.setChecked(appmod.settings().value("tensors/histogram_log", False,
                                                          type=bool))
        shown = appmod.settings().value("tensors/details", True, type=bool)
        self.details_button.setChecked(shown)
        self.detail.setVisible(shown)

    # --- document ----------------------------------------------------------------------

    def set_document(self, doc: FileDocument | None) -> None:
        """Show `doc`'s tensors and follow new ones as they stream in."""
        if self.doc is not None:
            self.doc.tensors_appended.disconnect(self._appended)
            self.doc.tensors_reset.disconnect(self._reset)
            self.doc.changed.disconnect(self._update_summary)
            self.doc.changed.disconnect(self._refresh_radar)
            self.doc.changed.disconnect(self._update_flagged)
        self.doc = doc
        self._pending.clear()
        self.selected = None  # another document's tensor of the same name is another tensor
        if doc is not None:
            doc.tensors_appended.connect(self._appended)
            doc.tensors_reset.connect(self._reset)
            doc.changed.connect(self._update_summary)
            doc.changed.connect(self._refresh_radar)
            doc.changed.connect(self._update_flagged)
        self._sized = False
        self._reset()

    def _reset(self) -> None:
        rows = self.doc.tensors if self.doc else []
        self._pending.clear()
        self.summary = Summary()
        self.summary.add(rows)
        self._update_flagged()
        self.model.set_rows(rows)
        # A reset of the same document (the final, authoritative list) keeps its column widths:
        # measuring every cell again stalls the UI thread just as the load completes.
        self._fit_columns()
        self._tree_stale = True
        self._refresh_tree()
        self._refresh_radar()
        self._update_summary()
        # the final rows of the same load keep the selected tensor (`_follow_selection`)
        if self.selected is None or self.model.view_row_of(self.selected.get("key")) < 0:
            self._show_detail(None)

    def _appended(self, first: int, count: int) -> None:
        self._pending.append((first, count))
        if not self._flush_timer.isActive():
            self._flush_timer.start()

    def _flush(self) -> None:
        if not self.doc or not self._pending:
            return
        first = self._pending[0][0]
        last = self._pending[-1][0] + self._pending[-1][1]
        self._pending.clear()
        self.summary.add(self.doc.tensors[first:last])
        self.model.rows_appended(first, last - first)
        self._fit_columns()
        self._tree_stale = True
        self._refresh_tree()
        self._refresh_radar()
        self._update_summary()

    def _fit_columns(self) -> None:
        """Size columns to the first rows once per document (later rows rarely differ)."""
        if self._sized or not self.model.rowCount():
            return
        self._sized = True
        self.table.resizeColumnsToContents()
        for logical in range(1, self.model.columnCount()):  # room for a longer later value
            self.table.setColumnWidth(logical, self.table.columnWidth(logical) + CELL_SLACK)
        self._key_wanted = min(self.table.columnWidth(0) + 12, KEY_WIDTH_MAX)
        self._fit_key()

    def _fit_key(self) -> None:
        """Give the key column what the other columns leave of the table's width (between
        KEY_WIDTH_MIN and what its keys want), so every column fits a 1280 px window; a key
        too long for it is elided at its start, keeping its distinctive end."""
        if not self._sized:
            return
        header = self.table.horizontalHeader()
        shown = [i for i in range(1, self.model.columnCount()) if not self.table.isColumnHidden(i)]
        last = max(shown, key=header.visualIndex, default=None)
        others = sum(header.sectionSize(i) for i in shown if i != last) + LAST_COLUMN_MIN
        room = self.table.viewport().width() - others
        self.table.setColumnWidth(0, max(KEY_WIDTH_MIN, min(self._key_wanted, room)))
        if last is not None:  # the stretched last column fills what is left, no more
            header.resizeSection(last, LAST_COLUMN_MIN)

    # --- layout ------------------------------------------------------------------------

    def set_column_visible(self, field: str, visible: bool) -> None:
        """Show or hide one table column (not the key), and remember the choice."""
        hidden = {c.field for i, c in enumerate(COLUMNS) if self.table.isColumnHidden(i)}
        hidden = (hidden - {field}) if visible else (hidden | {field})
        self._apply_hidden(sorted(hidden))
        appmod.settings().setValue("tensors/hidden_columns", sorted(hidden))

    def _apply_hidden(self, hidden: list[str]) -> None:
        for logical, column in enumerate(COLUMNS):
            off = column.field in hidden and column.field != "key"
            self.table.setColumnHidden(logical, off)
            action = self.column_menu.actions()[logical]
            action.blockSignals(True)
            action.setChecked(not off)
            action.blockSignals(False)
        self._fit_key()

    def _header_menu(self, pos: QPoint) -> None:
        self.column_menu.popup(self.table.horizontalHeader().mapToGlobal(pos))

    def problems_first(self) -> None:
        """The default order: NaN / Inf and flagged tensors on top, the rest in file order."""
        self.table.sortByColumn(-1, Qt.SortOrder.AscendingOrder)

    def _update_flagged(self) -> None:
        """Rank the tensors the weights-health check flagged first (0 problem, 1 warning)."""
        flagged: dict[str, int] = {}
        health = self.doc.health if self.doc is not None else None
        for f in health.findings if health is not None else ():
            if f.severity in (HealthSeverity.PROBLEM, HealthSeverity.WARNING):
                rank = 0 if f.severity == HealthSeverity.PROBLEM else 1
                flagged[f.key] = min(rank, flagged.get(f.key, rank))
        self.model.set_flagged(flagged)

    def _toggle_details(self, shown: bool) -> None:
        self.detail.setVisible(shown)
        appmod.settings().setValue("tensors/details", shown)

    def _follow_selection(self) -> None:
        """After the table's rows change (filter, sort, new rows), keep the selected tensor
        selected, or clear the detail when the filter hides it."""
        row = self.selected
        if row is None:
            return
        view_row = self.model.view_row_of(row.get("key"))
        if view_row >= 0:
            index = self.model.index(view_row, 0)
            self.table.selectionModel().setCurrentIndex(
                index, QItemSelectionModel.SelectionFlag.ClearAndSelect
                | QItemSelectionModel.SelectionFlag.Rows)
        else:
            self._show_detail(None, f"No selection: the filter hides {row.get('key')}.")

    def _update_summary(self) -> None:
        doc = self.doc
        text = rows_summary(doc, self.summary.text())
        unique = doc.result.unique_storage if doc and doc.result and doc.result.loaded else None
        if unique:
            # short beside the counts (a second line would take the table's height); the
            # tooltip says whose word it is in full
            text += (f"  — unique storage {unique['numel']:,} elements, "
                     f"{unique['nbytes']:,} bytes (the loader's count, not checked here)")
        shown = self.model.rowCount()
        if doc and shown != self.summary.count:
            text += f"  — {shown:,} shown by the filter"
        self.summary_label.setText(text)
        self.summary_label.setToolTip(f"Unique storage (tied weights counted once): "
                                      f"{UNIQUE_WORD}." if unique else "")

    # --- views -------------------------------------------------------------------------

    def _set_mode(self, mode: int) -> None:
        self.views.setCurrentIndex(mode)
        appmod.settings().setValue("tensors/view", VIEWS[mode])
        self._refresh_tree()
        self._refresh_radar()
        self._fit_radar()
        # The selected tensor stays selected, and in view, in whichever view is shown.
        key = self.selected.get("key") if self.selected is not None else None
        if mode == 0 and key is not None:
            self.select_key(key)
        elif mode == 1:
            self._reveal_in_tree()

    def _refresh_radar(self) -> None:
        """Rebuild the radar, while it is shown, when the tensors or the health findings changed."""
        if self.views.currentIndex() != 2:
            return
        doc = self.doc
        health = doc.health if doc else None
        source = (id(doc), len(doc.tensors), health) if doc else None
        if source == self._radar_source:
            return
        self._radar_source = source
        self.radar.set_radar(build_radar(doc.tensors, health.findings if health else ())
                             if doc else None)
        self._fit_radar()
        if self.selected is not None:
            self.radar.show_key(self.selected.get("key"))

    def _fit_radar(self) -> None:
        """With the histogram panel under the views (a narrow pane), grow the radar to the
        height that shows every row, the panel keeping DETAIL_MIN_HEIGHT; rows left over
        scroll."""
        if self.views.currentIndex() != 2 or self.side_panel or not self.detail.isVisible():
            return
        sizes = self.splitter.sizes()
        wanted = min(self.radar.full_height(), sum(sizes) - DETAIL_MIN_HEIGHT)
        if wanted > sizes[0]:
            self.splitter.setSizes([wanted, sum(sizes) - wanted])

    def _radar_selected(self, key: str) -> None:
        """A radar cell picks its tensor in the table (clearing a filter that hides it)."""
        if not self.select_key(key) and self.filter.text():
            self.filter.clear()
            self._filter_changed()
            self.select_key(key)

    def _radar_opened(self, key: str) -> None:
        self._radar_selected(key)
        self.table_button.click()
        self.table.scrollTo(self.table.currentIndex())

    def _refresh_tree(self) -> None:
        if self.views.currentIndex() == 1 and self._tree_stale:
            self.tree_model.set_rows(self.model.visible_rows())
            self.tree.expandToDepth(0)
            self._tree_stale = False
            self._reveal_in_tree()

    def _reveal_in_tree(self) -> None:
        """Expand the tree down to the selected tensor, select it and scroll it into view."""
        key = self.selected.get("key") if self.selected is not None else None
        index = self.tree_model.index_of(str(key)) if key is not None else QModelIndex()
        if not index.isValid():
            return
        parent = index.parent()
        while parent.isValid():
            self.tree.expand(parent)
            parent = parent.parent()
        self.tree.selectionModel().setCurrentIndex(
            index, QItemSelectionModel.SelectionFlag.ClearAndSelect
            | QItemSelectionModel.SelectionFlag.Rows)
        self.tree.scrollTo(index)

    def _filter_changed(self) -> None:
        self.model.set_filter(self.filter.text())
        self._tree_stale = True
        self._refresh_tree()
        self._update_summary()

    def select_key(self, key: str) -> bool:
        """Select the tensor `key` in the table; False when it is not shown."""
        # rows streamed in but not yet flushed to the table are on the radar already
        self._flush()
        row = self.model.view_row_of(key)
        if row < 0:
            return False
        index = self.model.index(row, 0)
        self.table.selectionModel().setCurrentIndex(
            index, QItemSelectionModel.SelectionFlag.ClearAndSelect
            | QItemSelectionModel.SelectionFlag.Rows,
        )
        self.table.scrollTo(index)
        return True

    def _table_current(self, current: QModelIndex, _previous: QModelIndex) -> None:
        row = current.data(roles.ROW) if current.isValid() else None
        if row is not None and row is self.selected:
            return  # the same tensor re-selected after a sort or filter: nothing changed
        self._show_detail(row)

    def _tree_current(self, current: QModelIndex, _previous: QModelIndex) -> None:
        row = current.data(roles.ROW) if current.isValid() else None
        if row is not None and row is self.selected:
            return  # the selected tensor revealed in the tree: nothing changed
        self._show_detail(row)

    # --- detail ------------------------------------------------------------------------

    def _show_detail(self, row: Row | None, why: str = NO_SELECTION) -> None:
        self.selected = row
        self.radar.show_key(row.get("key") if row is not None else None)
        if row is None:
            self.detail_title.setText(why)
            self.stats.setRowCount(0)
            if self._plot is not None:
                self._plot.hide()
            return
        key = html.escape(str(row.get("key")))
        # A zero-width space after each dot lets a long key wrap at its dots, not be clipped.
        self.detail_title.setText(f"<b>{key.replace('.', '.&#8203;')}</b>")
        items = [(label, row[k]) for k, label in STAT_LABELS if k in row]
        known = {k for k, _ in STAT_LABELS} | HIDDEN_STATS
        items += [(k, v) for k, v in row.items() if k not in known]
        self.stats.setRowCount(len(items))
        for i, (label, value) in enumerate(items):
            self.stats.setItem(i, 0, QTableWidgetItem(label))
            text = (element_text(value, row.get("shape")) if label == FIRST_NONFINITE
                    else _stat_text(label, value))
            cell = QTableWidgetItem(text)
            cell.setToolTip(text)
            self.stats.setItem(i, 1, cell)
        self.stats.resizeColumnToContents(0)
        self._draw_histogram(row)

    def _draw_histogram(self, row: Row) -> None:
        hist = histogram_of(row)
        plot = self._ensure_plot()
        plot.show()
        plot.clear()
        log = self.log_scale.isChecked()
        axis = plot.getPlotItem().getAxis("left")
        axis.setLogMode(False, log)
        axis.setLabel("count (log scale)" if log else "count")
        if hist is None:
            # Short titles: a title's text width is the chart's minimum width.
            plot.setTitle("No finite values to plot", size="9pt")
            return
        edges, counts = hist
        import pyqtgraph as pg

        heights = [math.log10(c) if c > 0 else LOG_FLOOR for c in counts] if log else counts
        colour = chart_style.series_colour(0, self.palette())
        fill = chart_style.series_colour(0, self.palette())
        fill.setAlpha(150)
        plot.setTitle(f"Finite values, {len(counts)} bins" + (", log count" if log else ""),
                      size="9pt")
        plot.addItem(pg.PlotDataItem(edges, heights, stepMode="center",
                                     fillLevel=LOG_FLOOR if log else 0, brush=fill,
                                     pen=pg.mkPen(colour)))
        plot.getPlotItem().enableAutoRange()

    def _log_scale_changed(self, log: bool) -> None:
        appmod.settings().setValue("tensors/histogram_log", log)
        if self.selected is not None:
            self._draw_histogram(self.selected)

    def _ensure_plot(self):
        # pyqtgraph costs most of a second to import; pay it on first use, not at start-up.
        if self._plot is None:
            import pyqtgraph as pg

            self._plot = pg.PlotWidget()
            self._plot.setMinimumHeight(140)
            self._style_plot()
            self._plot.setMouseEnabled(x=True, y=False)
            self._plot.getPlotItem().setLabel("left", "count")
            self.plot_holder.addWidget(self._plot)
        return self._plot

    def _style_plot(self) -> None:
        """Give the chart the palette's colours (light or dark, as the system is)."""
        palette = self.palette()
        text = palette.color(palette.ColorRole.Text)
        self._plot.setBackground(palette.color(palette.ColorRole.Base))
        item = self._plot.getPlotItem()
        for axis in ("left", "bottom"):
            item.getAxis(axis).setTextPen(text)
            item.getAxis(axis).setPen(text)
        item.titleLabel.setAttr("color", text)
        item.titleLabel.setText(item.titleLabel.text)

    def resizeEvent(self, event) -> None:
        """Put the histogram panel beside the table on a wide pane, under it on a narrow one;
        refit the key column to the width left."""
        super().resizeEvent(event)
        QTimer.singleShot(0, self._fit_key)  # once the splitter has laid the table out
        side = self.width() >= SIDE_PANEL_MIN_WIDTH
        if side == self.side_panel:
            return
        self.side_panel = side
        self.splitter.setOrientation(Qt.Orientation.Horizontal if side
                                     else Qt.Orientation.Vertical)
        self.detail_body.setDirection(QBoxLayout.Direction.TopToBottom if side
                                      else QBoxLayout.Direction.LeftToRight)
        total = self.width() if side else self.splitter.height()
        detail = 320 if side else max(DETAIL_MIN_HEIGHT, total * 2 // 5)
        self.splitter.setSizes([total - detail, detail])
        self._fit_radar()

    def changeEvent(self, event: QEvent) -> None:
        """Restyle the chart and row marks when the theme switches between light and dark."""
        if event.type() == QEvent.Type.PaletteChange and self._built:
            self.model.bad_brush = self.tree_model.bad_brush = bad_brush(self.palette())
            if self._plot is not None:
                self._style_plot()
                if self.selected is not None:
                    self._draw_histogram(self.selected)
        super().changeEvent(event)

    def copy_csv(self) -> str:
        """Copy selected rows (or all shown) as CSV to the clipboard; returns the text."""
        if self.views.currentIndex() == 0:
            picked = sorted({i.row() for i in self.table.selectionModel().selectedRows()})
            rows = [self.model.row_at(r) for r in picked] or self.model.visible_rows()
        else:
            rows = self.model.visible_rows()
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([c.field for c in COLUMNS])
        for row in rows:
            writer.writerow([_csv_value(row.get(c.field)) for c in COLUMNS])
        text = out.getvalue()
        QGuiApplication.clipboard().setText(text)
        return text


def warm_up_charts() -> None:
    """Import pyqtgraph now, while nothing runs, so the first histogram does not stall the UI.

    On the UI thread, though it costs about 0.35 s once: importing it creates Qt GUI objects,
    and from another thread, beside the running event loop, that crashed the app (a
    segmentation fault seen once in the test suite).
    """
    importlib.import_module("pyqtgraph")


def histogram_of(row: Row) -> tuple[list[float], list[int]] | None:
    """(bin edges, counts) of the worker's histogram of finite values, or None."""
    hist = row.get("histogram")
    if not hist or not any(hist.get("counts") or ()):
        return None
    counts = [int(c) for c in hist["counts"]]
    lo, hi = float(hist["lo"]), float(hist["hi"])
    step = (hi - lo) / len(counts)
    return [lo + i * step for i in range(len(counts) + 1)], counts


def element_text(index: Any, shape: Any) -> str:
    """A flat element index as its position in `shape`: '[3, 5] (element 53)'."""
    if not isinstance(index, int) or index < 0:
        return number_text(index)
    dims = [int(d) for d in shape or []]
    if not dims or index >= math.prod(dims):
        return f"element {index:,}"
    position, rest = [], index
    for size in reversed(dims):
        rest, at = divmod(rest, size)
        position.append(at)
    return f"[{', '.join(map(str, reversed(position)))}] (element {index:,})"


def _stat_text(label: str, value: Any) -> str:
    if label == "Shape":
        return shape_text(value)
    if label == "Size":
        return f"{bytes_text(value)} ({value:,} bytes)" if isinstance(value, int) else str(value)
    if isinstance(value, list | tuple):
        return ", ".join(map(str, value)) if value else "—"
    return number_text(value)


def _csv_value(value: Any) -> str:
    if isinstance(value, list | tuple):
        return "x".join(map(str, value))
    return "" if value is None else str(value)
