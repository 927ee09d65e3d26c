"""Step series on a chart: drawn as one path, read at a time, and given a Y range that keeps
a least span."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtGui import QPainterPath, QPen
from PySide6.QtWidgets import QGraphicsPathItem


class StepCurve(QGraphicsPathItem):
    """A step plot ("left" steps: a value holds until the next sample) drawn as one path.

    pyqtgraph's PlotDataItem recomputes bounds, clipping and its path in Python on every view
    change; a plain path item is only re-transformed by Qt when the view pans.
    """

    def __init__(self, pen: QPen) -> None:
        super().__init__()
        pen.setCosmetic(True)
        self.setPen(pen)
        self.times = np.empty(0)
        self.values = np.empty(0)

    def set_series(self, times: np.ndarray, values: np.ndarray,
                   path: QPainterPath | None = None) -> None:
        """Draw these samples (NaN = n/a breaks the line); `path` if already built for them."""
        self.times, self.values = times, values
        self.setPath(step_path(times, values) if path is None else path)


def step_path(times: np.ndarray, values: np.ndarray) -> QPainterPath:
    """The path of a "left" step plot through these samples."""
    if times.size == 0:
        return QPainterPath()
    x = np.repeat(times, 2)[1:]
    y = np.repeat(values.astype(np.float64), 2)[:-1]
    return pg.arrayToQPath(x, y, connect="finite")


def value_at(times: np.ndarray, values: np.ndarray, t: float) -> float | None:
    """A step series' value at time t (the last sample at or before it); None if n/a."""
    i = int(np.searchsorted(times, t, side="right")) - 1
    if i < 0 or not np.isfinite(values[i]):
        return None
    return float(values[i])


def y_range(values: list[np.ndarray], min_span: float) -> tuple[float, float] | None:
    """The Y range of a plot's finite values, widened about its middle to at least `min_span`
    (a count never below 0); None without any finite value."""
    finite = [v[np.isfinite(v)] for v in values]
    finite = [v for v in finite if v.size]
    if not finite:
        return None
    low = min(float(v.min()) for v in finite)
    high = max(float(v.max()) for v in finite)
    if high - low < min_span:
        middle = (low + high) / 2
        low, high = middle - min_span / 2, middle + min_span / 2
        if low < 0 <= min(float(v.min()) for v in finite):
            low, high = 0.0, min_span
    return low, high
