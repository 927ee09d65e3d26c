"""The "GPU" pane: live NVML telemetry, a replayed log or a node's history from Prometheus, as
step plots with alerts.

A view over inspector.gpu.telemetry (TelemetryStore + Sampler), inspector.gpu.smi_csv and
inspector.gpu.prom_reader; the sampling, alert rules, log parsing and queries all live there.
Plots redraw from the store on a timer only when it changed. Each curve is one cached step path
(StepCurve) holding the visible window plus one window either side, peak-decimated to about a
point per pixel (telemetry.peak_decimate): panning within that is a pure view transform, and
the window is recomputed, a few curves per event-loop turn, at most every LOD_INTERVAL_MS while
the view moves, so hours of data pan and zoom smoothly.

The widgets are laid out by `gpu_layout` (on a laptop screen the plots keep MIN_PLOT_HEIGHT
each and scroll). Every plot marks the store's alerts (ECC, XID, temperature, lost GPU) and
throttle onsets as vertical lines; the temperature plot draws the alert threshold. A crosshair
shows every GPU's value at the time under the cursor, and in a replay the table shows the
values at that time. GPUs differ in line width as well as colour (`widgets.gpu_pens`), so
equal values never hide a GPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QPointF, Qt, QTimer, Signal
from PySide6.QtGui import QPainterPath
from PySide6.QtWidgets import QFileDialog, QTreeWidgetItem, QWidget

from inspector.core.badges import alert_look, shout
from inspector.core.termtext import counted
from inspector.core.vocabulary import AlertSeverity
from inspector.gpu.alerts import ingest, worst_alert
from inspector.gpu.events import THROTTLE, timeline
from inspector.gpu.prom_reader import RangeQuery
from inspector.gpu.sampler import Sampler
from inspector.gpu.telemetry import (
    DEFAULT_INTERVAL_S,
    DEFAULT_TEMP_THRESHOLD_C,
    FIELDS,
    Alert,
    GpuSample,
    TelemetrySource,
    TelemetryStore,
    peak_decimate,
)
from inspector.gui.jobs import Job, JobRunner
from inspector.gui.panes.gpu_layout import PLOTS, GpuPaneLayout
from inspector.gui.widgets import chart_style
from inspector.gui.widgets.event_marks import Mark
from inspector.gui.widgets.gpu_pens import GPU_WIDTHS, gpu_colour, gpu_pen
from inspector.gui.widgets.step_curve import StepCurve, step_path, value_at, y_range

MARKER_WORDS = {"temperature": "hot", "ecc_uncorrected": "ECC", "gpu_lost": "lost",
                "source_lost": "driver lost", "remapped_failure": "remap failed",
                "remapped_pending": "remap", "retired_pending": "retire"}
"""Short marker labels (the tooltip and the event log say it in full)."""
SEVERITY_ROLES = {AlertSeverity.CRITICAL: "bad", AlertSeverity.WARNING: "warn",
                  AlertSeverity.INFO: "mark"}
"""The theme's colour role of each alert severity (`ALERT_LOOKS` gives the word)."""
MARKER_HOVER_PX = 5
"""A marker's message shows as the tooltip within this many pixels of its line."""

MIN_SPANS = {"°C": 10.0, "W": 20.0, "%": 10.0, "MiB": 1024.0, "MHz": 100.0, "count": 4.0}
"""The least Y span a plot shows, by unit: a constant (or nearly constant) series stays a flat
line in a sensible range instead of being auto-scaled into noise."""
LIVE_WINDOW_S = 600.0
LOD_INTERVAL_MS = 150
LOD_BATCH = 4


def _reading(value: float | None) -> str:
    """A readout value: whole numbers from 1000 up (80123 MiB, not 8.012e+04), else 4 digits."""
    if value is None:
        return "n/a"
    return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.4g}"


class GpuPane(GpuPaneLayout):
    """Telemetry charts, current values, alert banner and event log for every GPU."""

    alert_raised = Signal(object)  # Alert; also emitted from the sampler thread (queued)
    _built = False  # restyled on a theme switch only once its state exists

    def __init__(
        self,
        parent: QWidget | None = None,
        *,
        open_source: Callable[[], TelemetrySource] | None = None,
        interval: float = DEFAULT_INTERVAL_S,
        runner: JobRunner | None = None,
        autostart: bool = True,
        temp_threshold: float = DEFAULT_TEMP_THRESHOLD_C,
    ) -> None:
        super().__init__(parent, temp_threshold)
        self.store = TelemetryStore()
        self.sampler: Sampler | None = None
        self.interval = interval
        self.temp_threshold = temp_threshold
        self.cursor_time: float | None = None
        self.source_label = ""
        self._open_source = open_source
        self._runner = runner or JobRunner(self)
        self._drawn_version = -1
        self._curves: dict[tuple[int, str], StepCurve] = {}
        self._series: dict[tuple[int, str], tuple[np.ndarray, np.ndarray]] = {}
        self._lod_window = (0.0, 0.0, 0.0)  # (from, to, visible span) the curves now hold
        self._lod_points = 0
        self._lod_queue: list[tuple[int, str]] = []
        self._lod_ready: dict[tuple[int, str], tuple[np.ndarray, np.ndarray, QPainterPath]] = {}
        self.marked: list[Mark] = []
        self._follow = True
        self._banner_alerts: list[Alert] = []
        self.banner_alert: Alert | None = None
        self._connect()
        self._built = True
        self._restyle()
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

    def _connect(self) -> None:
        """The laid-out widgets' signals to what the pane does with them."""
        self.open_button.clicked.connect(self._choose_log)
        self.open_here_button.clicked.connect(self._choose_log)
        self.sample_button.clicked.connect(self.open_sample)
        self.prometheus_button.clicked.connect(self._choose_prometheus)
        self.live_button.clicked.connect(self.start_live)
        self.dismiss_button.clicked.connect(self.dismiss_banner)
        for title, plot in self.plots.items():
            plot.getViewBox().sigRangeChangedManually.connect(self._stop_following)
            plot.getViewBox().sigRangeChanged.connect(lambda *_a, t=title: self._place_readout(t))
        self.plots[PLOTS[0][0]].getViewBox().sigXRangeChanged.connect(self._view_moved)
        self.graphics.scene().sigMouseMoved.connect(self._mouse_moved)

    def _restyle(self) -> None:
        """Give charts, curves, markers and the banner the current palette's colours."""
        palette = self.palette()
        text = chart_style.text_colour(palette)
        self.graphics.setBackground(chart_style.base_colour(palette))
        for title, _unit, fields in PLOTS:
            plot = self.plots[title]
            styles = ", ".join(f"{style} {label}" for style, (_, label)
                               in zip(("solid", "dashed", "dotted"), fields, strict=False))
            plot.setTitle(f"<b>{title}</b>" + (f" ({styles})" if len(fields) > 1 else ""),
                          size="9pt", color=text.name())
            for axis in ("left", "bottom"):
                plot.getAxis(axis).setPen(text)
                plot.getAxis(axis).setTextPen(text)
            self.crosshairs[title].setPen(pg.mkPen(text, width=1, style=Qt.PenStyle.DotLine))
            self.readouts[title].setColor(text)
            self.readouts[title].fill = pg.mkBrush(chart_style.base_colour(palette))
            self.readouts[title].border = pg.mkPen(text)
        warn = chart_style.role_colour("warn", palette)
        self.threshold.setPen(pg.mkPen(warn, width=1.5, style=Qt.PenStyle.DashLine))
        self.threshold.label.setColor(warn)
        for (gpu, field), curve in self._curves.items():
            curve.setPen(gpu_pen(gpu, self._field_style(field), palette))
        roles = {role: chart_style.role_colour(role, palette) for role in ("bad", "warn", "mark")}
        for marks in self.marks.values():
            marks.set_colours(roles, chart_style.base_colour(palette))
        self._update_table(self.cursor_time if self.sampler is None else None)
        self._style_banner()
        self._update_key()

    def changeEvent(self, event: QEvent) -> None:
        """Recolour the charts when the theme switches between light and dark."""
        if event.type() == QEvent.Type.PaletteChange and self._built:
            self._restyle()
        super().changeEvent(event)

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
        self.status.setText(f"Live: {counted(len(names), 'GPU')}, every {self.interval:g} s"
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
        self._lod_timer.stop()
        self.stop()

    def _choose_log(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open telemetry log", "",
                                              "CSV logs (*.csv *.log *.txt);;All files (*)")
        if path:
            self.open_log(path)

    def open_sample(self) -> Job:
        """Replay the shipped sample log (`gpu.sample_log`): something to look at without a
        GPU."""
        from inspector.gpu import sample_log

        return self.open_log(str(sample_log.path()))

    def open_log(self, path: str) -> Job:
        """Replay a recorded log; it is read in the background and then shown whole."""
        def read() -> list[GpuSample]:
            from inspector.gpu.smi_csv import read_log

            return read_log(path).samples

        return self._load_history(path, read, "Cannot open log")

    def _choose_prometheus(self) -> None:
        from inspector.gui.dialogs.prometheus_dialog import PrometheusDialog

        dialog = PrometheusDialog(self)
        if dialog.exec() and dialog.query:
            self.open_prometheus(dialog.query)

    def open_prometheus(self, query: RangeQuery) -> Job:
        """Load a node's GPU history from Prometheus in the background, shown as a replay."""
        def read() -> list[GpuSample]:
            from inspector.gpu.prom_reader import read_range

            return read_range(query)

        return self._load_history(f"{query.node or 'the node'} from {query.url}", read,
                                  "Cannot load from Prometheus")

    def _load_history(self, label: str, read: Callable[[], list[GpuSample]],
                      failure: str) -> Job:
        """Read samples off the UI thread, run the alert rules over them, show them whole."""
        self.status.setText(f"Reading {label}…")

        def load(emit, cancel) -> tuple[TelemetryStore, list[Alert], int]:
            samples = read()
            per_gpu: dict[int, int] = {}
            for s in samples:
                per_gpu[s.index] = per_gpu.get(s.index, 0) + 1
            store = TelemetryStore(capacity=max(per_gpu.values(), default=1))
            return store, ingest(store, samples), len(samples)

        job = Job("replay", load, self)
        job.finished.connect(lambda payload: self._show_replay(label, *payload))
        job.failed.connect(lambda message: self.status.setText(f"{failure}: {message}"))
        return self._runner.start(job)

    def _show_replay(self, path: str, store: TelemetryStore, alerts: list[Alert],
                     rows: int) -> None:
        self.stop()
        self._reset(store)
        self.stack.setCurrentIndex(1)
        self.source_label = path
        self.status.setText(f"Replay of {path}: {counted(rows, 'row')}, "
                            f"{counted(len(store.gpus()), 'GPU')}")
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
        self.marked = []
        for title, plot in self.plots.items():
            self.marks[title].set_marks([])
            plot.addItem(self.marks[title], ignoreBounds=True)
            plot.addItem(self.crosshairs[title], ignoreBounds=True)
            plot.addItem(self.readouts[title], ignoreBounds=True)
            self.crosshairs[title].hide()
            self.readouts[title].hide()
        self.plots[PLOTS[0][0]].addItem(self.threshold, ignoreBounds=True)
        self.cursor_time = None
        self._drawn_version = -1
        self._follow = True
        self.table.setRowCount(0)
        self.log.clear()
        self.dismiss_banner()

    # ---- drawing -------------------------------------------------------------------------

    def _fit_all(self) -> None:
        """Show the whole recording, each plot's Y range fitted to its data, then hold: a
        replay does not change, so nothing recomputes bounds while the user pans."""
        spans = [t for t, _ in self._series.values() if t.size]
        if not spans:
            return
        self.plots[PLOTS[0][0]].setXRange(min(t[0] for t in spans), max(t[-1] for t in spans),
                                          padding=0.01)
        for title, _unit, _fields in PLOTS:
            self.plots[title].disableAutoRange()
        self._fit_y()

    def _fit_y(self, since: float = -np.inf) -> None:
        """Each plot's Y range over its samples from `since` on, never narrower than its
        unit's MIN_SPANS (pyqtgraph's auto range would blow a constant series up into noise)."""
        for title, unit, fields in PLOTS:
            names = {field for field, _ in fields}
            found = y_range([v[t >= since] for (_, f), (t, v) in self._series.items()
                             if f in names], MIN_SPANS.get(unit, 1.0))
            if found is not None:
                self.plots[title].setYRange(*found, padding=0.08)

    def _stop_following(self) -> None:
        self._follow = False

    @staticmethod
    def _field_style(field: str) -> int:
        return next(i for _t, _u, fields in PLOTS for i, (f, _) in enumerate(fields) if f == field)

    def _curve(self, gpu: int, title: str, field: str, style: int, label: str) -> StepCurve:
        key = (gpu, field)
        curve = self._curves.get(key)
        if curve is None:
            curve = StepCurve(gpu_pen(gpu, style, self.palette()))
            curve.setZValue(gpu)  # later (thinner) GPUs on top of earlier (wider) ones
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
        self._draw_markers()
        self._update_table(self.cursor_time if self.sampler is None else None)
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
        self._fit_y(since=start)

    def events(self) -> list[Alert]:
        """What the charts mark: every alert in the store and every throttle onset in the
        samples, oldest first (`gpu.events.timeline`, which the report lists too)."""
        return timeline(self.store)

    def _draw_markers(self) -> None:
        """Mark every event on every plot (the first plot labels them)."""
        marks = []
        for event in self.events():
            kind, gpu = event.kind, event.gpu
            short = event.message.split(": ", 1)[-1].split(" (")[0] if kind == "xid" else (
                MARKER_WORDS.get(kind, kind.replace("_", " ")))
            role = "mark" if kind == THROTTLE else SEVERITY_ROLES.get(event.severity, "warn")
            marks.append(Mark(event.timestamp, role,
                              f"{short} GPU{gpu}" if gpu is not None else short, event.message))
        if marks != self.marked:
            self.marked = marks
            for item in self.marks.values():
                item.set_marks(marks)

    # ---- cursor --------------------------------------------------------------------------

    def _mouse_moved(self, pos: QPointF) -> None:
        for title, plot in self.plots.items():
            if plot.sceneBoundingRect().contains(pos):
                view = plot.getViewBox()
                t = view.mapSceneToView(pos).x()
                self.hover_at(t)
                per_px = view.viewPixelSize()[0]
                mark = self.marks[title].near(t, MARKER_HOVER_PX * per_px)
                self.graphics.setToolTip(mark.message if mark else "")
                return

    def hover_at(self, t: float) -> None:
        """Crosshair at time t on every plot, each with every GPU's value there; in a replay
        the table shows the values at t too."""
        self.cursor_time = t
        gpus = self.store.gpus()
        stamp = datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")
        self.readout.setText(f"At {stamp}" + (" (the table shows this time)"
                                              if self.sampler is None else ""))
        for title, unit, fields in PLOTS:
            lines = []
            for gpu in gpus:
                values = [value_at(*self._series[(gpu, f)], t) if (gpu, f) in self._series
                          else None for f, _ in fields]
                if any(v is not None for v in values):
                    shown = " / ".join(_reading(v) for v in values)
                    lines.append(f"GPU{gpu} {shown} {unit}")
            cross, readout = self.crosshairs[title], self.readouts[title]
            cross.setPos(t)
            cross.show()
            readout.setText("\n".join(lines))
            readout.setVisible(bool(lines))
            self._place_readout(title)
        if self.sampler is None:
            self._update_table(t)

    def _place_readout(self, title: str) -> None:
        """Pin a plot's readout to the top of its view beside the crosshair (live views move)."""
        readout = self.readouts[title]
        if self.cursor_time is None or not readout.isVisible():
            return
        (left, right), (_bottom, top) = self.plots[title].getViewBox().viewRange()
        on_right = self.cursor_time > (left + right) / 2
        readout.setAnchor((1, 0) if on_right else (0, 0))
        readout.setPos(self.cursor_time, top)
        if title == PLOTS[0][0]:
            # the threshold's label goes to the far end of its line, out of the readout's way
            label = self.threshold.label
            label.anchors = [(0, 1), (0, 1)] if on_right else [(1, 1), (1, 1)]
            label.setPosition(0.02 if on_right else 0.98)

    def _sample_at(self, gpu: int, t: float) -> GpuSample | None:
        """One GPU's reading in force at time t, rebuilt from the store's series."""
        latest = self.store.latest(gpu)
        times, _ = self.store.series(gpu, FIELDS[0].name)
        i = int(np.searchsorted(times, t, side="right")) - 1
        if latest is None or i < 0:
            return None
        values = {}
        for f in FIELDS:
            v = self.store.series(gpu, f.name)[1][i]
            if not np.isfinite(v):
                values[f.name] = None
            else:
                values[f.name] = bool(v) if f.kind == "bool" else (
                    int(v) if f.kind == "mask" else float(v))
        return GpuSample(float(times[i]), gpu, latest.name, latest.uuid, **values)

    def _update_key(self) -> None:
        palette = self.palette()
        entries = [f'<span style="color:{gpu_colour(g, palette).name()}">'
                   f'{"━" if GPU_WIDTHS[g % len(GPU_WIDTHS)] >= 2 else "─"} GPU{g}</span>'
                   for g in self.store.gpus()]
        self.key.setText("&nbsp;&nbsp;".join(entries))
        self.key.setToolTip("Each GPU has its own colour and line width; a later GPU is drawn"
                            " thinner on top, so matching values never hide a GPU")

    def _update_table(self, at: float | None = None) -> None:
        """Current values: each GPU's latest sample, or (replay cursor) those in force at `at`."""
        source = self.sampler.source if self.sampler is not None else None
        self.table.show_samples(
            [(gpu, self.store.latest(gpu) if at is None else self._sample_at(gpu, at))
             for gpu in self.store.gpus()], self.palette(),
            getattr(source, "unavailable", None))

    # ---- alerts --------------------------------------------------------------------------

    def _show_alert(self, alert: Alert) -> None:
        when = datetime.fromtimestamp(alert.timestamp).strftime("%Y-%m-%d %H:%M:%S")
        look = alert_look(alert.severity)
        item = QTreeWidgetItem([when, "" if alert.gpu is None else str(alert.gpu),
                                look.word, alert.message])
        item.setToolTip(2, look.meaning)
        item.setToolTip(3, alert.message)
        item.setForeground(2, chart_style.role_colour(self._role(alert), self.palette()))
        self.log.insertTopLevelItem(0, item)
        self._banner_alerts.append(alert)
        self._show_banner()

    def _show_banner(self) -> None:
        """The worst alert since the banner was last dismissed: a critical ECC error on one GPU
        is never hidden behind a later temperature warning on another."""
        worst = worst_alert(self._banner_alerts)
        if worst is None:
            self.banner.hide()
            return
        count = self.log.topLevelItemCount()
        when = datetime.fromtimestamp(worst.timestamp).strftime("%H:%M:%S")
        self.banner_alert = worst
        self.banner_text.setText(
            f"⚠ {shout(alert_look(worst.severity).word)} at {when}: {worst.message}"
            + (f"  ({count} alerts in the event log)" if count > 1 else ""))
        self._style_banner()
        self.banner.show()

    def _style_banner(self) -> None:
        role = "bad" if self.banner_alert is None else self._role(self.banner_alert)
        self.banner.setStyleSheet(
            f"#gpuAlertBanner {{ {chart_style.banner_css(role, self.palette())} }}"
            " QLabel { border: none; background: transparent; }")

    @staticmethod
    def _role(alert: Alert) -> str:
        """The chart style's role (a colour in both themes) of an alert's severity."""
        return SEVERITY_ROLES.get(alert.severity, "warn")

    def dismiss_banner(self) -> None:
        """Hide the banner until the next alert (the event log keeps every one)."""
        self._banner_alerts = []
        self.banner.hide()
