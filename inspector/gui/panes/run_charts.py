"""The Run pane's charts: loss and gradient norm over steps, one curve per rank, with the
guard's alarms and the ledger's checkpoint saves marked at their steps (`event_marks`). A
chart with no curve is hidden (an empty 0-1 axis reads as data), and so is the whole widget
when the guard recorded nothing.

A view only: curves and marks come from `run_guard_model`; colours from `chart_style`.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import QEvent
from PySide6.QtWidgets import QHBoxLayout, QWidget

from inspector.gui.panes.run_guard_model import Curve
from inspector.gui.widgets import chart_style
from inspector.gui.widgets.event_marks import EventMarks, Mark

PLOTS = (("loss", "Loss"), ("grad_norm", "Gradient norm"))
MIN_PLOT_HEIGHT = 150


class RunCharts(QWidget):
    """Two charts side by side over the step axis, x-linked; only those with a curve shown."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.views: dict[str, pg.PlotWidget] = {}
        self.plots: dict[str, pg.PlotItem] = {}
        self.marks: dict[str, EventMarks] = {}
        self.curves: dict[str, list[tuple[int, pg.PlotDataItem]]] = {}
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for col, (signal, _title) in enumerate(PLOTS):
            view = pg.PlotWidget()
            view.setMinimumHeight(MIN_PLOT_HEIGHT)
            plot = view.getPlotItem()
            plot.setLabel("bottom", "step")
            plot.showGrid(x=True, y=True, alpha=0.15)
            if col:
                plot.setXLink(self.plots[PLOTS[0][0]])
            marks = EventMarks(labelled=True)
            plot.addItem(marks, ignoreBounds=True)
            layout.addWidget(view)
            self.views[signal], self.plots[signal] = view, plot
            self.marks[signal], self.curves[signal] = marks, []
        self._restyle()

    def show_run(self, curves: dict[str, list[Curve]], marks: list[Mark]) -> None:
        """Draw these curves (per signal) and marks, replacing what was there; a signal with
        no curve is hidden."""
        for signal, _title in PLOTS:
            plot = self.plots[signal]
            for _rank, item in self.curves[signal]:
                plot.removeItem(item)
            self.curves[signal] = []
            for curve in curves.get(signal, []):
                item = pg.PlotDataItem(curve.steps, curve.values, connect="finite",
                                       symbol="o" if len(curve.steps) < 80 else None,
                                       symbolSize=4, name=f"rank {curve.rank}")
                plot.addItem(item)
                self.curves[signal].append((curve.rank, item))
            self.marks[signal].set_marks(marks)
            plot.enableAutoRange()
            self.views[signal].setVisible(bool(self.curves[signal]))
        self.setVisible(bool(self.shown()))
        self._restyle()

    def shown(self) -> list[str]:
        """The signals whose chart is laid out (those with a curve)."""
        return [signal for signal, _title in PLOTS if self.curves[signal]]

    def _restyle(self) -> None:
        """Curves, marks, axes and background in the current palette's colours."""
        palette = self.palette()
        text = chart_style.text_colour(palette)
        roles = {role: chart_style.role_colour(role, palette) for role in ("bad", "warn", "mark")}
        for signal, title in PLOTS:
            self.views[signal].setBackground(chart_style.base_colour(palette))
            plot = self.plots[signal]
            plot.setTitle(f"<b>{title}</b>", size="9pt", color=text.name())
            for axis in ("left", "bottom"):
                plot.getAxis(axis).setPen(text)
                plot.getAxis(axis).setTextPen(text)
            for rank, item in self.curves[signal]:
                colour = chart_style.series_colour(rank, palette)
                item.setPen(pg.mkPen(colour, width=1.5))
                item.setSymbolPen(pg.mkPen(colour))
                item.setSymbolBrush(pg.mkBrush(colour))
            self.marks[signal].set_colours(roles, chart_style.base_colour(palette))

    def changeEvent(self, event: QEvent) -> None:
        """Recolour when the theme switches between light and dark."""
        if event.type() == QEvent.Type.PaletteChange and hasattr(self, "marks"):
            self._restyle()
        super().changeEvent(event)

