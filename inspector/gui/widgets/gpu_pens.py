"""Each GPU's colour and line width in every chart, and each field's dash style: GPUs differ
in width as well as colour (the first drawn widest, beneath), so equal values never hide one."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPalette, QPen
from PySide6.QtWidgets import QApplication

from inspector.gui.widgets import chart_style

FIELD_STYLES = (Qt.PenStyle.SolidLine, Qt.PenStyle.DashLine, Qt.PenStyle.DotLine)
"""A chart's 1st, 2nd and 3rd field: solid, dashed, dotted."""
GPU_WIDTHS = (4.5, 2.5, 1.5, 0.8)
"""Line width per GPU (cycled): a later GPU is drawn thinner and on top of an earlier one."""


def gpu_colour(index: int, palette: QPalette | None = None) -> QColor:
    """The colour of one GPU in every chart, for `palette` (the application's by default)."""
    return chart_style.series_colour(index, palette or QApplication.palette())


def gpu_pen(gpu: int, style: int, palette: QPalette | None = None) -> QPen:
    """The pen of one GPU's curve: its colour and width, the field's dash style."""
    pen = pg.mkPen(gpu_colour(gpu, palette), width=GPU_WIDTHS[gpu % len(GPU_WIDTHS)],
                   style=FIELD_STYLES[style])
    pen.setCosmetic(True)
    return pen
