"""The "GPU" pane: live NVML telemetry or a replayed log, as step plots with alerts.

A view over inspector.gpu.telemetry (TelemetryStore + Sampler) and inspector.gpu.smi_csv; the
sampling, alert rules and log parsing all live there. Plots redraw from the store on a timer
only when it changed. Each curve is one cached step path (StepCurve) holding the visible
window plus one window either side, peak-decimated to about a point per pixel
(telemetry.peak_decimate): panning within that is a pure view transform, and the window is
recomputed, a few curves per event-loop turn, at most every LOD_INTERVAL_MS while the view
moves, so hours of data pan and zoom smoothly.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor, QPainterPath, QPen
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QGraphicsPathItem,
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
    peak_decimate,
)
from inspector.gui.jobs import Job, JobRunner

GPU_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
               "#9467bd", "#8c564b", "#e377c2", "#17becf")
XID_COLOUR = "#c0392b"
_STYLES = (Qt.PenStyle.SolidLine, Qt.PenStyle.DashLine, Qt.PenStyle.DotLine)

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
LIVE_WINDOW_S = 600.0
LOD_INTERVAL_MS = 150
LOD_BATCH = 4
_TABLE_COLUMNS = ("GPU", "Temp", "Power", "Util", "Memory", "SM clock", "Clock events",
                  "ECC unc.", "Retire/remap")


def gpu_colour(index: int) -> str:
    """The colour of one GPU in every chart."""
    return GPU_COLOURS[index % len(GPU_COLOURS)]


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
        self._curves: dict[tuple[int, str], StepCurve] = {}
        self._series: dict[tuple[int, str], tuple[np.ndarray, np.ndarray]] = {}
        self._lod_window = (0.0, 0.0, 0.0)  # (from, to, visible span) the curves now hold
        self._lod_points = 0
        self._lod_queue: list[tuple[int, str]] = []
        self._lod_ready: dict[tuple[int, str], tuple[np.ndarray, np.ndarray, QPainterPath]] = {}
        self._xid_lines: list[pg.InfiniteLine] = []
        self._follow = True
        self._build()
        self.alert_raised.connect(self._show_alert)
        self._timer = QTimer(self)
        self._timer.setInterval(500)
        self._timer.timeout.connect(self.refresh)
        self._timer.start()
        self._lod_timer = QTimer(self)
        self._lod_timer.setSingleShot(True)
        self._lod_timer.setInterval(LOD_INTERVAL_MS)
        self._lod_timer.timeout.connect(self._apply_lod)
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
        open_here = QPushButton("Open a recorded log…")
        open_here.setToolTip(self.open_button.toolTip())
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
            plot.setTitle(f"<b>{title}</b>" + (f" ({styles})" if len(fields) > 1 else ""),
                          size="9pt", color=self._foreground.name())
            plot.setLabel("left", unit)
            plot.getAxis("left").setWidth(56)
            if first is None:
                first = plot
            else:
                plot.setXLink(first)
            if row < len(PLOTS) - 1:
                # One time axis, under the last plot: each one re-lays its ticks on every pan.
                plot.hideAxis("bottom")
            plot.getViewBox().sigRangeChangedManually.connect(self._stop_following)
            self.plots[title] = plot
        first.getViewBox().sigXRangeChanged.connect(self._view_moved)
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
        lower.setSizes([820, 440])
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
            line = f"{text[:1].upper()}{text[1:]}."
            if self.store.gpus():  # a replay is on screen: keep it, say why live failed
                self.status.setText(line)
            else:
                self.status.setText("")
                self.placeholder_text.setText(line)
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
        self._fit_all()

    def _reset(self, store: TelemetryStore) -> None:
        self.store = store
        for plot in self.plots.values():
            plot.clear()
        self._curves.clear()
        self._series.clear()
        self._lod_window, self._lod_queue, self._lod_ready = (0.0, 0.0, 0.0), [], {}
        self._xid_lines.clear()
        self._drawn_version, self._drawn_xids = -1, 0
        self._follow = True
        self.table.setRowCount(0)
        self.log.clear()
        self.banner.hide()

    # ---- drawing -------------------------------------------------------------------------

    def _fit_all(self) -> None:
        """Show the whole recording, each plot's Y range fitted to its data, then hold: a
        replay does not change, so nothing recomputes bounds while the user pans."""
        spans = [t for t, _ in self._series.values() if t.size]
        if not spans:
            return
        self.plots[PLOTS[0][0]].setXRange(min(t[0] for t in spans), max(t[-1] for t in spans),
                                          padding=0.01)
        for title, _unit, fields in PLOTS:
            names = {field for field, _ in fields}
            finite = [v[np.isfinite(v)] for (_, f), (_, v) in self._series.items() if f in names]
            finite = [v for v in finite if v.size]
            plot = self.plots[title]
            plot.disableAutoRange()
            if finite:
                low = min(float(v.min()) for v in finite)
                high = max(float(v.max()) for v in finite)
                plot.setYRange(low, high if high > low else low + 1, padding=0.08)

    def _stop_following(self) -> None:
        self._follow = False

    def _curve(self, gpu: int, title: str, field: str, style: int, label: str) -> StepCurve:
        key = (gpu, field)
        curve = self._curves.get(key)
        if curve is None:
            curve = StepCurve(pg.mkPen(gpu_colour(gpu), width=1, style=_STYLES[style]))
            curve.setToolTip(f"GPU{gpu} {label}")
            self.plots[title].addItem(curve)
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
                        continue  # this GPU never reported the field: no empty curve
                    self._curve(gpu, title, field, style, label)
                    self._series[(gpu, field)] = (times, values)
        if self.sampler is not None and self._follow:
            self._scroll_to_latest()
        self._apply_lod()
        self._draw_xids()
        self._update_table()
        self._update_key()

    def _view_moved(self) -> None:
        (left, right), _ = self.plots[PLOTS[0][0]].getViewBox().viewRange()
        lo, hi, span = self._lod_window
        inside = lo <= left and right <= hi
        same_zoom = span > 0 and 0.6 < (right - left) / span < 1.6
        if not (inside and same_zoom) and not self._lod_timer.isActive():
            self._lod_timer.start()  # throttled: a long pan keeps updating

    def _apply_lod(self) -> None:
        """Queue every curve for its visible window (plus one either side), peak-decimated."""
        view = self.plots[PLOTS[0][0]].getViewBox()
        (left, right), _ = view.viewRange()
        span = right - left
        if self.sampler is None and not self._lod_window[2]:
            left, right, span = -np.inf, np.inf, 0.0  # first draw of a replay: everything
        self._lod_window = (left - span, right + span, span)
        self._lod_points = max(200, int(view.width()))
        self._lod_queue, self._lod_ready = list(self._series), {}
        self._lod_step()

    def _lod_step(self) -> None:
        """Build a few curves' paths per event-loop turn, then swap them all in at once: no
        turn does much work, and the scene repaints once per window change, not per batch."""
        lo, hi, _ = self._lod_window
        for key in self._lod_queue[:LOD_BATCH]:
            times, values = peak_decimate(*self._series[key], lo, hi, self._lod_points)
            self._lod_ready[key] = (times, values, step_path(times, values))
        del self._lod_queue[:LOD_BATCH]
        if self._lod_queue:
            QTimer.singleShot(0, self, self._lod_step)
            return
        for key, (times, values, path) in self._lod_ready.items():
            self._curves[key].set_series(times, values, path)
        self._lod_ready = {}

    def _scroll_to_latest(self) -> None:
        """Live: show the last LIVE_WINDOW_S seconds, or everything while there is less."""
        latest = max((s.timestamp for g in self.store.gpus() if (s := self.store.latest(g))),
                     default=time.time())
        oldest = min((t[0] for t, _ in self._series.values() if t.size), default=latest)
        start = max(oldest, latest - LIVE_WINDOW_S)
        first = self.plots[PLOTS[0][0]]
        first.setXRange(start, max(latest, start + 10 * self.interval), padding=0.01)
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
                f"GPU{gpu} {(s.name or '').removeprefix('NVIDIA ')}".strip()
                + (" (LOST)" if s.lost else ""),
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
        item.setToolTip(3, alert.message)
        if alert.severity == "critical":
            item.setForeground(2, QColor("#c0392b"))
        self.log.insertTopLevelItem(0, item)
        count = self.log.topLevelItemCount()
        self.banner_text.setText(f"⚠ {alert.message}" + (f"  ({count} alerts in the event log)"
                                                         if count > 1 else ""))
        self.banner.show()
