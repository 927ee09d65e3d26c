"""The "GPU" pane: live NVML telemetry or a replayed log, as step plots with alerts.

A view over inspector.gpu.telemetry (TelemetryStore + Sampler) and inspector.gpu.smi_csv; the
sampling, alert rules and log parsing all live there. Plots redraw from the store on a timer
only when it changed, with downsampling and clip-to-view, so hours of data pan smoothly.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from inspector.gpu.telemetry import (
    DEFAULT_INTERVAL_S,
    Alert,
    Sampler,
    TelemetrySource,
    TelemetryStore,
    XidEvent,
    decode_clock_reasons,
    ingest,
)
from inspector.gui.jobs import Job, JobRunner

GPU_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
               "#9467bd", "#8c564b", "#e377c2", "#17becf")
XID_COLOUR = "#c0392b"
_STYLES = (Qt.PenStyle.SolidLine, Qt.PenStyle.DashLine, Qt.PenStyle.DotLine)

# (title, unit, fields): one curve per GPU per field; 2nd/3rd fields are dashed/dotted.
PLOTS: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = (
    ("Temperature", "°C", (("temperature_gpu", "GPU"), ("temperature_memory", "memory"))),
    ("Power", "W", (("power_draw", "draw"), ("power_limit", "limit"))),
    ("Utilisation", "%", (("utilization_gpu", "GPU"), ("utilization_memory", "memory"))),
    ("Memory", "MiB", (("memory_used", "used"), ("memory_total", "total"))),
    ("Clocks", "MHz", (("clock_sm", "SM"), ("clock_memory", "memory"))),
    ("ECC / PCIe", "count", (("ecc_uncorrected_volatile", "ECC uncorrected"),
                              ("ecc_corrected_volatile", "ECC corrected"),
                              ("pcie_replay", "PCIe replays"))),
)
LIVE_WINDOW_S = 600.0
_TABLE_COLUMNS = ("GPU", "Temp", "Power", "Util", "Memory", "SM clock", "Clock events",
                  "ECC unc.", "Retire/remap")


def gpu_colour(index: int) -> str:
    """The colour of one GPU in every chart."""
    return GPU_COLOURS[index % len(GPU_COLOURS)]


def _num(value: float | None, unit: str) -> str:
    return "n/a" if value is None else f"{value:.0f} {unit}".rstrip()


class GpuPane(QWidget):
    """Telemetry charts, current values, alert banner and event log for every GPU."""

    alert_raised = Signal(object)  # Alert; also emitted from the sampler thread (queued)

    def __init__(
        self,
        parent: QWidget | None = None,
        *,
        open_source: Callable[[], TelemetrySource] | None = None,
        interval: float = DEFAULT_INTERVAL_S,
        runner: JobRunner | None = None,
        autostart: bool = True,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("gpuPane")
        self.store = TelemetryStore()
        self.sampler: Sampler | None = None
        self.interval = interval
        self.source_label = ""
        self._open_source = open_source
        self._runner = runner or JobRunner(self)
        self._drawn_version = -1
        self._drawn_xids = 0
        self._curves: dict[tuple[int, str], pg.PlotDataItem] = {}
        self._xid_lines: list[pg.InfiniteLine] = []
        self._follow = True
        self._build()
        self.alert_raised.connect(self._show_alert)
        self._timer = QTimer(self)
        self._timer.setInterval(500)
        self._timer.timeout.connect(self.refresh)
        self._timer.start()
        if autostart:
            self.start_live()

    # ---- construction --------------------------------------------------------------------

    def _build(self) -> None:
        layout = QVBoxLayout(self)
        header = QHBoxLayout()
        self.status = QLabel("")
        self.status.setObjectName("gpuStatus")
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.open_button = QPushButton("Open recorded log…")
        self.open_button.setToolTip("nvidia-smi --query-gpu … --format=csv logs, or a recording"
                                    " made with ckpt-inspector telemetry --csv")
        self.open_button.clicked.connect(self._choose_log)
        self.live_button = QPushButton("Live")
        self.live_button.setToolTip("Sample this machine's GPUs through NVML")
        self.live_button.clicked.connect(self.start_live)
        self.key = QLabel("")
        self.key.setObjectName("gpuColourKey")
        header.addWidget(self.status, 1)
        header.addWidget(self.key)
        header.addWidget(self.live_button)
        header.addWidget(self.open_button)
        layout.addLayout(header)

        self.banner = QFrame()
        self.banner.setObjectName("gpuAlertBanner")
        self.banner.setStyleSheet("#gpuAlertBanner { background: #fdecea; border: 1px solid "
                                  "#c0392b; border-radius: 4px; } QLabel { color: #7b1d14; }")
        banner_layout = QHBoxLayout(self.banner)
        banner_layout.setContentsMargins(8, 4, 8, 4)
        self.banner_text = QLabel("")
        self.banner_text.setWordWrap(True)
        dismiss = QPushButton("Dismiss")
        dismiss.clicked.connect(self.banner.hide)
        banner_layout.addWidget(self.banner_text, 1)
        banner_layout.addWidget(dismiss)
        self.banner.hide()
        layout.addWidget(self.banner)

        self.placeholder = QWidget()
        place = QVBoxLayout(self.placeholder)
        place.addStretch(1)
        self.placeholder_text = QLabel("")
        self.placeholder_text.setObjectName("gpuNoDriver")
        self.placeholder_text.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.placeholder_text.setWordWrap(True)
        place.addWidget(self.placeholder_text)
        open_here = QPushButton("Open recorded log…")
        open_here.clicked.connect(self._choose_log)
        place.addWidget(open_here, 0, Qt.AlignmentFlag.AlignCenter)
        place.addStretch(2)

        splitter = QSplitter(Qt.Orientation.Vertical)
        self.graphics = pg.GraphicsLayoutWidget()
        self._style_graphics()
        self.plots: dict[str, pg.PlotItem] = {}
        first: pg.PlotItem | None = None
        for row, (title, unit, fields) in enumerate(PLOTS):
            plot = self.graphics.addPlot(row=row, col=0,
                                         axisItems={"bottom": pg.DateAxisItem()})
            styles = ", ".join(f"{style} {label}" for style, (_, label)
                               in zip(("solid", "dashed", "dotted"), fields, strict=False))
            plot.setTitle(f"<b>{title}</b> ({styles})", size="9pt",
                          color=self._foreground.name())
            plot.setLabel("left", unit)
            plot.showGrid(x=True, y=True, alpha=0.2)
            plot.setDownsampling(auto=True, mode="peak")
            plot.setClipToView(True)
            plot.getAxis("left").setWidth(56)
            if first is None:
                first = plot
            else:
                plot.setXLink(first)
            plot.getViewBox().sigRangeChangedManually.connect(self._stop_following)
            self.plots[title] = plot
        splitter.addWidget(self.graphics)

        lower = QSplitter(Qt.Orientation.Horizontal)
        self.table = QTableWidget(0, len(_TABLE_COLUMNS))
        self.table.setHorizontalHeaderLabels(_TABLE_COLUMNS)
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.log = QTreeWidget()
        self.log.setHeaderLabels(["Time", "GPU", "Severity", "Event"])
        self.log.setRootIsDecorated(False)
        self.log.header().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.log.header().setStretchLastSection(True)
        lower.addWidget(self.table)
        lower.addWidget(self.log)
        lower.setSizes([700, 500])
        splitter.addWidget(lower)
        splitter.setSizes([700, 200])
        self.stack = QStackedWidget()
        self.stack.addWidget(self.placeholder)
        self.stack.addWidget(splitter)
        layout.addWidget(self.stack, 1)

    def _style_graphics(self) -> None:
        palette = self.palette()
        self.graphics.setBackground(palette.base().color())
        self._foreground = palette.text().color()

    # ---- sources -------------------------------------------------------------------------

    def start_live(self) -> bool:
        """Start sampling NVML; on a machine without a driver, say so in one line."""
        self.stop()
        try:
            source = self._open()
        except Exception as exc:  # NvmlUnavailable or a broken binding: one line for the user
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            self.status.setText(f"{text[:1].upper()}{text[1:]}.")
            if not self.store.gpus():
                self.placeholder_text.setText(
                    f"{text[:1].upper()}{text[1:]}.\nOpen a log recorded on a GPU machine "
                    "(nvidia-smi --format=csv, or ckpt-inspector telemetry --csv) to view it.")
                self.stack.setCurrentWidget(self.placeholder)
            self.live_button.setEnabled(True)
            return False
        self._reset(TelemetryStore())
        self.stack.setCurrentIndex(1)
        self.sampler = Sampler(source, self.store, self.interval,
                               on_alert=self.alert_raised.emit)
        self.sampler.start()
        names = getattr(source, "names", [])
        driver = getattr(source, "driver_version", None)
        self.source_label = "live"
        self.status.setText(f"Live: {len(names)} GPU(s), every {self.interval:g} s"
                            + (f", driver {driver}" if driver else ""))
        self.live_button.setEnabled(False)
        return True

    def _open(self) -> TelemetrySource:
        if self._open_source is not None:
            return self._open_source()
        from inspector.gpu.nvml_source import NvmlSource

        return NvmlSource.open()

    def stop(self) -> None:
        """Stop live sampling (the data stays on screen)."""
        if self.sampler is not None:
            self.sampler.stop()
            self.sampler.source.close()
            self.sampler = None
        self.live_button.setEnabled(True)

    def shutdown(self) -> None:
        """Stop everything; call when the window closes."""
        self._timer.stop()
        self.stop()

    def _choose_log(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open telemetry log", "",
                                              "CSV logs (*.csv *.log *.txt);;All files (*)")
        if path:
            self.open_log(path)

    def open_log(self, path: str) -> Job:
        """Replay a recorded log; it is read in the background and then shown whole."""
        self.status.setText(f"Reading {path}…")

        def load(emit, cancel) -> tuple[TelemetryStore, list[Alert], int]:
            from inspector.gpu.smi_csv import read_log

            log = read_log(path)
            per_gpu: dict[int, int] = {}
            for s in log.samples:
                per_gpu[s.index] = per_gpu.get(s.index, 0) + 1
            store = TelemetryStore(capacity=max(per_gpu.values(), default=1))
            return store, ingest(store, log.samples), len(log.samples)

        job = Job("replay", load, self)
        job.finished.connect(lambda payload: self._show_replay(path, *payload))
        job.failed.connect(lambda message: self.status.setText(f"Cannot open log: {message}"))
        return self._runner.start(job)

    def _show_replay(self, path: str, store: TelemetryStore, alerts: list[Alert],
                     rows: int) -> None:
        self.stop()
        self._reset(store)
        self.stack.setCurrentIndex(1)
        self.source_label = path
        self.status.setText(f"Replay of {path}: {rows} rows, {len(store.gpus())} GPU(s)")
        for alert in alerts:
            self._show_alert(alert)
        self.refresh()
        for plot in self.plots.values():
            plot.enableAutoRange()

    def _reset(self, store: TelemetryStore) -> None:
        self.store = store
        for plot in self.plots.values():
            plot.clear()
        self._curves.clear()
        self._xid_lines.clear()
        self._drawn_version, self._drawn_xids = -1, 0
        self._follow = True
        self.table.setRowCount(0)
        self.log.clear()
        self.banner.hide()

    # ---- drawing -------------------------------------------------------------------------

    def _stop_following(self) -> None:
        self._follow = False

    def _curve(self, gpu: int, title: str, field: str, style: int, label: str) -> pg.PlotDataItem:
        key = (gpu, field)
        curve = self._curves.get(key)
        if curve is None:
            pen = pg.mkPen(gpu_colour(gpu), width=1.5, style=_STYLES[style])
            curve = self.plots[title].plot(stepMode="left", pen=pen, connect="finite")
            curve.setToolTip(f"GPU{gpu} {label}")
            self._curves[key] = curve
        return curve

    def refresh(self) -> None:
        """Redraw from the store if it changed since the last redraw (UI timer)."""
        version = self.store.version
        if version == self._drawn_version:
            return
        self._drawn_version = version
        for gpu in self.store.gpus():
            for title, _unit, fields in PLOTS:
                for style, (field, label) in enumerate(fields):
                    times, values = self.store.series(gpu, field)
                    if not np.isfinite(values).any():
                        continue  # this GPU never reported the field: no empty legend entry
                    self._curve(gpu, title, field, style, label).setData(times, values)
        self._draw_xids()
        self._update_table()
        self._update_key()
        if self.sampler is not None and self._follow:
            self._scroll_to_latest()

    def _scroll_to_latest(self) -> None:
        latest = max((s.timestamp for g in self.store.gpus() if (s := self.store.latest(g))),
                     default=time.time())
        first = self.plots[PLOTS[0][0]]
        first.setXRange(latest - LIVE_WINDOW_S, latest, padding=0.01)
        for plot in self.plots.values():
            plot.enableAutoRange(axis="y")

    def _draw_xids(self) -> None:
        events: list[XidEvent] = list(self.store.xids)
        for event in events[self._drawn_xids:]:
            for row, plot in enumerate(self.plots.values()):
                label = f"XID {event.xid} GPU{event.gpu}" if row == 0 else None
                line = pg.InfiniteLine(
                    pos=event.timestamp, angle=90, movable=False, label=label,
                    pen=pg.mkPen(XID_COLOUR, width=1.5, style=Qt.PenStyle.DashLine),
                    labelOpts={"position": 0.85, "color": XID_COLOUR, "fill": (255, 255, 255, 200)},
                )
                line.setToolTip(event.describe())
                plot.addItem(line, ignoreBounds=True)
                self._xid_lines.append(line)
        self._drawn_xids = len(events)

    def _update_key(self) -> None:
        entries = [f'<span style="color:{gpu_colour(g)}">■ GPU{g}</span>'
                   for g in self.store.gpus()]
        self.key.setText("&nbsp;&nbsp;".join(entries))

    def _update_table(self) -> None:
        gpus = self.store.gpus()
        self.table.setRowCount(len(gpus))
        for row, gpu in enumerate(gpus):
            s = self.store.latest(gpu)
            if s is None:
                continue
            state = []
            if s.retired_pending:
                state.append("retirement pending")
            if s.remapped_pending:
                state.append("remap pending")
            if s.remapped_failure:
                state.append("REMAP FAILED")
            reasons = decode_clock_reasons(s.clocks_event_reasons)
            cells = (
                f"GPU{gpu} {s.name or ''}".strip() + (" (LOST)" if s.lost else ""),
                _num(s.temperature_gpu, "°C"),
                f"{_num(s.power_draw, '')} / {_num(s.power_limit, 'W')}",
                _num(s.utilization_gpu, "%"),
                f"{_num(s.memory_used, '')} / {_num(s.memory_total, 'MiB')}",
                _num(s.clock_sm, "MHz"),
                ", ".join(reasons) or ("n/a" if s.clocks_event_reasons is None else "none"),
                _num(s.ecc_uncorrected_volatile, ""),
                ", ".join(state) or "ok",
            )
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if col == 0:
                    item.setForeground(QColor(gpu_colour(gpu)))
                self.table.setItem(row, col, item)

    # ---- alerts --------------------------------------------------------------------------

    def _show_alert(self, alert: Alert) -> None:
        when = datetime.fromtimestamp(alert.timestamp).strftime("%Y-%m-%d %H:%M:%S")
        item = QTreeWidgetItem([when, "" if alert.gpu is None else str(alert.gpu),
                                alert.severity, alert.message])
        if alert.severity == "critical":
            item.setForeground(2, QColor("#c0392b"))
        self.log.insertTopLevelItem(0, item)
        count = self.log.topLevelItemCount()
        self.banner_text.setText(f"⚠ {alert.message}" + (f"  ({count} alerts in the event log)"
                                                         if count > 1 else ""))
        self.banner.show()
