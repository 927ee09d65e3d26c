"""A chart's time axis whose labels always read as a clock (10:02:15, 10:02:15.5)."""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pyqtgraph as pg

CLOCK_STEPS = (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200,
               10800, 21600, 43200)
"""Tick spacings (seconds) of a ClockAxis below a day, each a round step on a clock."""
CLOCK_LABEL_PX = 90
"""Room one clock label takes on the axis, its gap included."""


class ClockAxis(pg.DateAxisItem):
    """A time axis whose labels always read as a clock (10:02:15, or 10:02:15.5 below a
    second): pyqtgraph's own drops the hours and minutes when zoomed in to seconds, and picks
    its ticks for those narrower labels, so wider ones were all dropped as overlapping."""

    def tickValues(self, minVal, maxVal, size):
        """Ticks on round clock steps, as many as fit `size` pixels; days from two days up."""
        span = maxVal - minVal
        if span <= 0 or span >= 2 * 86400 or not np.isfinite(span):
            return super().tickValues(minVal, maxVal, size)
        fit = max(2.0, size / CLOCK_LABEL_PX)
        step = next((s for s in CLOCK_STEPS if span / s <= fit), CLOCK_STEPS[-1])
        offset = datetime.fromtimestamp(minVal).astimezone().utcoffset().total_seconds()
        first = np.ceil((minVal + offset) / step) * step - offset  # round in local time
        return [(step, list(np.arange(first, maxVal, step)))]

    def tickStrings(self, values, scale, spacing):
        """Clock labels for ticks `spacing` seconds apart; dates from a day apart up."""
        if spacing >= 86400:
            return super().tickStrings(values, scale, spacing)
        labels = []
        for value in values:
            try:
                text = datetime.fromtimestamp(value).strftime("%H:%M:%S.%f")
            except (OverflowError, OSError, ValueError):
                text = ""
            labels.append(text[:-5] if spacing < 1 else text[:-7])
        return labels
