"""The GPU pane's widgets, laid out: source buttons, alert banner, the no-driver placeholder,
the scrolling step plots (one per PLOTS entry, each with its crosshair, readout and event
marks), the current-values table and the event log. `gpu_pane.GpuPane` gives them behaviour."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QScrollArea,
    QSplitter,
    QStackedWidget,
    QTreeWidget,
    QVBoxLayout,
    QWidget,
)

from inspector.gui.widgets.clock_axis import ClockAxis
from inspector.gui.widgets.event_marks import EventMarks
from inspector.gui.widgets.gpu_table import GpuTable

MIN_PLOT_HEIGHT = 170
"""Each plot (its own time axis included) keeps at least this height; below it the charts
scroll instead of squashing."""

# (title, unit, fields): one curve per GPU per field; 2nd/3rd fields are dashed/dotted.
# Constant references (power limit, memory total) are in the table, not drawn: every curve
# costs on each pan step.
PLOTS: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = (
    ("Temperature", "°C", (("temperature_gpu", "GPU"), ("temperature_memory", "memory"))),
    ("Power", "W", (("power_draw", "draw"),)),
    ("Utilisation", "%", (("utilization_gpu", "GPU"), ("utilization_memory", "memory"))),
    ("Memory used", "MiB", (("memory_used", "used"),)),
    ("Clocks", "MHz", (("clock_sm", "SM"), ("clock_memory", "memory"))),
    ("ECC / PCIe", "count", (("ecc_uncorrected_volatile", "ECC uncorrected"),
                              ("ecc_corrected_volatile", "ECC corrected"),
                              ("pcie_replay", "PCIe replays"))),
)
TIME_LABEL = "time (local clock)"


class GpuPaneLayout(QWidget):
    """The GPU pane's widgets, built and placed; nothing here is connected or drawn."""

    def __init__(self, parent: QWidget | None, temp_threshold: float) -> None:
        super().__init__(parent)
        self.setObjectName("gpuPane")
        layout = QVBoxLayout(self)
        layout.addLayout(self._header())
        layout.addWidget(self._banner())
        self.stack = QStackedWidget()
        self.stack.addWidget(self._placeholder())
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self._charts(temp_threshold))
        splitter.addWidget(self._lower())
        splitter.setStretchFactor(0, 1)  # a taller window grows the charts, not the table
        splitter.setStretchFactor(1, 0)
        splitter.setSizes([700, 200])
        self.stack.addWidget(splitter)
        layout.addWidget(self.stack, 1)

    def _header(self) -> QHBoxLayout:
        header = QHBoxLayout()
        self.status = QLabel("")
        self.status.setObjectName("gpuStatus")
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        # a long replay path wraps instead of widening the window past a 1280-pixel screen
        self.status.setWordWrap(True)
        self.open_button = QPushButton("Open recorded log…")
        self.open_button.setToolTip("nvidia-smi --query-gpu … --format=csv logs, or a recording"
                                    " made with ckpt-inspector telemetry --csv")
        self.prometheus_button = QPushButton("From Prometheus…")
        self.prometheus_button.setToolTip("A node's GPU history from a Prometheus server")
        self.live_button = QPushButton("Live")
        self.live_button.setToolTip("Sample this machine's GPUs through NVML")
        self.key = QLabel("")
        self.key.setObjectName("gpuColourKey")
        header.addWidget(self.status, 1)
        for widget in (self.key, self.live_button, self.open_button, self.prometheus_button):
            header.addWidget(widget)
        return header

    def _banner(self) -> QFrame:
        self.banner = QFrame()
        self.banner.setObjectName("gpuAlertBanner")
        banner_layout = QHBoxLayout(self.banner)
        banner_layout.setContentsMargins(8, 4, 8, 4)
        self.banner_text = QLabel("")
        self.banner_text.setWordWrap(True)
        self.dismiss_button = QPushButton("Dismiss")
        banner_layout.addWidget(self.banner_text, 1)
        banner_layout.addWidget(self.dismiss_button)
        self.banner.hide()
        return self.banner

    def _placeholder(self) -> QWidget:
        """What shows instead of the charts on a machine without a driver."""
        self.placeholder = QWidget()
        place = QVBoxLayout(self.placeholder)
        place.addStretch(1)
        self.placeholder_text = QLabel("")
        self.placeholder_text.setObjectName("gpuNoDriver")
        self.placeholder_text.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.placeholder_text.setWordWrap(True)
        place.addWidget(self.placeholder_text)
        self.open_here_button = QPushButton("Open a recorded log…")
        self.open_here_button.setToolTip(self.open_button.toolTip())
        self.sample_button = QPushButton("Open the sample log")
        self.sample_button.setToolTip("Two GPUs for two minutes, shipped with the app: one "
                                      "throttles as it runs hot, the other takes an "
                                      "uncorrected ECC error")
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.open_here_button)
        buttons.addWidget(self.sample_button)
        buttons.addStretch(1)
        place.addLayout(buttons)
        place.addStretch(2)
        return self.placeholder

    def _charts(self, temp_threshold: float) -> QWidget:
        """The readout line above the plots, which scroll (laptop screens) rather than squash."""
        self.graphics = pg.GraphicsLayoutWidget()
        self.plots: dict[str, pg.PlotItem] = {}
        self.crosshairs: dict[str, pg.InfiniteLine] = {}
        self.marks: dict[str, EventMarks] = {}
        self.readouts: dict[str, pg.TextItem] = {}
        for row, (title, unit, _fields) in enumerate(PLOTS):
            self.plots[title] = self._plot(row, unit)
            self.marks[title] = EventMarks(labelled=row == 0)
            self.crosshairs[title] = pg.InfiniteLine(angle=90, movable=False)
            self.crosshairs[title].hide()
            self.readouts[title] = pg.TextItem("", anchor=(0, 0))
            self.readouts[title].setZValue(1000)
            self.readouts[title].hide()
            for item in (self.marks[title], self.crosshairs[title], self.readouts[title]):
                self.plots[title].addItem(item, ignoreBounds=True)
        self.threshold = pg.InfiniteLine(pos=temp_threshold, angle=0, movable=False,
                                         label=f"alert above {temp_threshold:g} °C",
                                         labelOpts={"position": 0.02, "anchors": [(0, 1), (0, 1)]})
        self.threshold.setToolTip("Temperature alert threshold")
        self.plots[PLOTS[0][0]].addItem(self.threshold, ignoreBounds=True)
        self.graphics.setMinimumHeight(len(PLOTS) * MIN_PLOT_HEIGHT + 40)
        self.scroll = QScrollArea()
        self.scroll.setObjectName("gpuCharts")
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.scroll.setWidget(self.graphics)
        charts = QWidget()
        charts_layout = QVBoxLayout(charts)
        charts_layout.setContentsMargins(0, 0, 0, 0)
        self.readout = QLabel("Point at a chart to read every GPU's values at that time.")
        self.readout.setObjectName("gpuReadout")
        self.readout.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        charts_layout.addWidget(self.readout)
        charts_layout.addWidget(self.scroll, 1)
        return charts

    def _plot(self, row: int, unit: str) -> pg.PlotItem:
        """One plot in `row`, its time axis linked to the first plot's."""
        plot = self.graphics.addPlot(row=row, col=0, axisItems={"bottom": ClockAxis()})
        plot.setLabel("left", unit)
        # every plot has its own labelled time axis: the plots scroll, so one axis under
        # the last would be out of view on a small screen
        plot.setLabel("bottom", TIME_LABEL)
        plot.getAxis("left").setWidth(56)
        plot.setMinimumHeight(MIN_PLOT_HEIGHT)
        if self.plots:
            plot.setXLink(next(iter(self.plots.values())))
        return plot

    def _lower(self) -> QSplitter:
        """The current-values table beside the event log."""
        lower = QSplitter(Qt.Orientation.Horizontal)
        self.table = GpuTable()
        self.log = QTreeWidget()
        self.log.setHeaderLabels(["Time", "GPU", "Severity", "Event"])
        self.log.setRootIsDecorated(False)
        self.log.header().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.log.header().setStretchLastSection(True)
        lower.addWidget(self.table)
        lower.addWidget(self.log)
        lower.setSizes([820, 440])
        return lower
