"""Event markers on a chart: a dashed vertical line per event, all drawn by one item.

One item per plot paints only the events in view, in one call: an InfiniteLine per event
would each recompute its bounds and label on every pan step, which adds milliseconds per step
once a long recording has dozens of events, and hundreds in a long live session.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPen

LABEL_ROWS = 3
"""Labels of neighbouring events take these many text rows in turn, so they do not collide."""


@dataclass(frozen=True)
class Mark:
    """One event: when, its colour role ("bad", "warn", "mark"), a short label, the message."""

    time: float
    role: str
    label: str
    message: str


class EventMarks(pg.GraphicsObject):
    """Vertical dashed lines at event times across a plot, labelled when `labelled`."""

    def __init__(self, labelled: bool = False) -> None:
        super().__init__()
        self.labelled = labelled
        self.marks: list[Mark] = []
        self.times = np.empty(0)
        self.colours: dict[str, QColor] = {}
        self.label_fill = QColor()
        self.setZValue(500)

    def set_marks(self, marks: list[Mark]) -> None:
        """Show these events (any order)."""
        self.marks = sorted(marks, key=lambda m: m.time)
        self.times = np.array([m.time for m in self.marks], dtype=np.float64)
        self.update()

    def set_colours(self, colours: dict[str, QColor], label_fill: QColor) -> None:
        """Colours per role, and the background behind labels (the chart's base colour)."""
        self.colours, self.label_fill = colours, label_fill
        self.update()

    def near(self, t: float, tolerance: float) -> Mark | None:
        """The event closest to time t, if within `tolerance` (same units)."""
        if not self.times.size:
            return None
        i = int(np.searchsorted(self.times, t))
        best = min((j for j in (i - 1, i) if 0 <= j < self.times.size),
                   key=lambda j: abs(self.times[j] - t))
        return self.marks[best] if abs(self.times[best] - t) <= tolerance else None

    def boundingRect(self) -> QRectF:
        """The visible part of the plot (the lines span it whatever the range)."""
        view = self.getViewBox()
        return QRectF() if view is None else view.viewRect()

    def viewRangeChanged(self) -> None:
        """The bounding rect follows the view."""
        self.prepareGeometryChange()

    def paint(self, painter: QPainter, *_args) -> None:
        """Draw the events in view, in device pixels (crisp lines, unscaled labels)."""
        rect = self.boundingRect()
        if rect.isNull() or not self.times.size:
            return
        lo, hi = np.searchsorted(self.times, [rect.left(), rect.right()], side="right")
        if lo == hi:
            return
        to_device = painter.transform()
        area = to_device.mapRect(rect)
        painter.save()
        painter.resetTransform()
        metrics = painter.fontMetrics()
        row_height = metrics.height() + 2
        for n in range(int(lo), int(hi)):
            mark = self.marks[n]
            x = to_device.map(QPointF(mark.time, rect.top())).x()
            colour = self.colours.get(mark.role, QColor(Qt.GlobalColor.gray))
            pen = QPen(colour, 1.5, Qt.PenStyle.DashLine)
            pen.setCosmetic(True)
            painter.setPen(pen)
            painter.drawLine(QPointF(x, area.top()), QPointF(x, area.bottom()))
            if self.labelled:
                baseline = area.top() + 2 + (n % LABEL_ROWS) * row_height + metrics.ascent()
                box = metrics.boundingRect(mark.label).translated(int(x) + 3, int(baseline))
                painter.fillRect(box.adjusted(-2, 0, 2, 0), self.label_fill)
                painter.drawText(QPointF(x + 3, baseline), mark.label)
        painter.restore()
