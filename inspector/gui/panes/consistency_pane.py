"""The "Consistency" pane: run the repeat-inference check and watch it beside GPU telemetry.

A view over inspector.sandbox.host.consistency_job (which runs the check in the jailed worker); this
module never imports torch. Each run's max |diff| and mismatched elements are plotted as they
arrive (marked the jailed worker's word), on the same time axis as the GPU temperature and
power, so a mismatch can be matched to a thermal or power event; at the end they are replotted
from the checked answer, or taken away with the device line when no checked answer came.
Without GPU telemetry (a CPU machine) the GPU charts are hidden and a line says why; a file the
static scan calls dangerous cannot be run (the button says why).
The widgets are laid out by `consistency_layout`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt
from PySide6.QtWidgets import QFileDialog, QTreeWidgetItem, QWidget

from inspector.checkpoint.results import ConsistencyResult
from inspector.core.termtext import agree, counted
from inspector.core.vocabulary import CheckStatus, Format, Verdict
from inspector.formats import dialog_filter
from inspector.gpu.telemetry import TelemetryStore
from inspector.gui.jobs import Job, JobRunner
from inspector.gui.panes.consistency_layout import (
    NO_TELEMETRY,
    PLOT_MIN_HEIGHT,
    ConsistencyPaneLayout,
)
from inspector.gui.widgets import chart_style
from inspector.gui.widgets.gpu_pens import gpu_colour
from inspector.gui.widgets.step_curve import y_range
from inspector.report.sections import self_test_words
from inspector.sandbox.host.client import SandboxError
from inspector.sandbox.host.consistency_job import (
    ConsistencyRequest,
    describe_element,
    run_consistency,
)

RunFn = Callable[..., dict[str, Any]]
PASS_STYLE, FAIL_STYLE, WARN_STYLE, IDLE_STYLE = "good", "bad", "warn", "idle"  # banner looks
CHECKPOINT_FILTER = dialog_filter(Format.PYTORCH_ZIP, title="Checkpoints")
RUN_PLOTS = ("diff", "count")
"""The charts of the runs themselves (the others are the GPU's telemetry)."""
GPU_PLOTS = {"temperature": ("temperature_gpu", "temperature"), "power": ("power_draw", "power")}
"""GPU chart name: (telemetry field, what it shows)."""
LIVE_WORD = "live, the jailed worker's word until the run is checked"
WORKER_WORD = "as reported by the jailed worker"
"""What the run charts' titles add: whose word their points are (`_runs_word`)."""
DANGEROUS_TIP = ("Disabled: the static scan calls this file dangerous, so it is never loaded, "
                 "not even for this check.")


class ConsistencyPane(ConsistencyPaneLayout):
    """Form, live plots and result table of one consistency run at a time."""

    _built = False  # restyled on a theme switch only once its state exists

    def __init__(
        self,
        parent: QWidget | None = None,
        *,
        runner: JobRunner | None = None,
        telemetry: Callable[[], TelemetryStore | None] | None = None,
        run_fn: RunFn = run_consistency,
    ) -> None:
        super().__init__(parent)
        self._runner = runner or JobRunner(self)
        self._telemetry = telemetry
        self._run_fn = run_fn
        self.job: Job | None = None
        self.result: dict[str, Any] | None = None
        self._started = 0.0
        self._xs: list[float] = []
        self._diffs: list[float] = []
        self._counts: list[float] = []
        self._marks: list[tuple[pg.PlotItem, pg.InfiniteLine]] = []
        self._runs_word = ""
        self._verdicts: dict[str, str | None] = {}
        self._verdict_style = IDLE_STYLE
        self._connect()
        self._show_gpu_plots(set(), any_gpu=False)
        self._built = True
        self._restyle()
        self._set_running(False)

    # ---- construction --------------------------------------------------------------------

    def _connect(self) -> None:
        """The laid-out widgets' signals to what the pane does with them."""
        self.file_edit.textChanged.connect(lambda _text: self._set_running(self.job is not None))
        self.browse_button.clicked.connect(self._choose_file)
        self.mode_model.toggled.connect(self.model_box.setEnabled)
        self.run_button.clicked.connect(self.start)
        self.cancel_button.clicked.connect(self.cancel)

    def _restyle(self) -> None:
        """Give the charts, curves and verdict banner the current palette's colours."""
        palette = self.palette()
        text = chart_style.text_colour(palette)
        self.graphics.setBackground(chart_style.base_colour(palette))
        for name, plot in self.plots.items():
            word = f" <i>({self._runs_word})</i>" if self._runs_word and name in RUN_PLOTS else ""
            plot.setTitle(f"<b>{self.plot_titles[name]}</b>{word}", size="9pt",
                          color=text.name())
            for axis in ("left", "bottom"):
                plot.getAxis(axis).setPen(text)
                plot.getAxis(axis).setTextPen(text)
        for curve, role in ((self.diff_curve, "bad"), (self.count_curve, "mark")):
            colour = chart_style.role_colour(role, palette)
            curve.setPen(pg.mkPen(colour, width=1.5))
            curve.setSymbolBrush(colour)
        for _plot, line in self._marks:
            line.setPen(self._mark_pen())
        self._verdict(self.verdict.text(), self._verdict_style)
        self._draw_telemetry()

    def changeEvent(self, event: QEvent) -> None:
        """Recolour when the theme switches between light and dark."""
        if event.type() == QEvent.Type.PaletteChange and self._built:
            self._restyle()
        super().changeEvent(event)

    def _show_gpu_plots(self, shown: set[str], any_gpu: bool) -> None:
        """Lay out the GPU charts that have data and take the others out (a hidden item would
        keep its space); a line says why any is missing."""
        missing = [what for name, (_f, what) in GPU_PLOTS.items() if name not in shown]
        self.gpu_note.setText(NO_TELEMETRY if not any_gpu else
                              f"GPU {' and '.join(missing)} chart hidden: no GPU reports it.")
        self.gpu_note.setVisible(bool(missing))
        layout = self.graphics.ci
        for row, name in enumerate(GPU_PLOTS, start=2):
            plot, want = self.plots[name], name in shown
            if want != (plot in layout.items):
                if want:
                    layout.addItem(plot, row=row, col=0)
                else:
                    layout.removeItem(plot)
                plot.setVisible(want)
        laid_out = [plot for plot in self.plots.values() if plot in layout.items]
        self.graphics.setMinimumHeight(len(laid_out) * PLOT_MIN_HEIGHT + 40)

    # ---- inputs --------------------------------------------------------------------------

    def set_file(self, path: str, verdict: str | None = None) -> None:
        """Point the pane at a checkpoint (the main window calls this on selection), with the
        static scan's verdict when known."""
        self._verdicts[path] = verdict
        self.file_edit.setText(path)
        self.file_edit.setToolTip(path)
        self._set_running(self.job is not None)

    def set_verdict(self, path: str, verdict: str | None) -> None:
        """The static scan's verdict of `path` (it may arrive after set_file)."""
        self._verdicts[path] = verdict
        self._set_running(self.job is not None)

    def blocked_reason(self) -> str | None:
        """Why Run is disabled for the chosen file, or None."""
        if self._verdicts.get(self.file_edit.text().strip()) == Verdict.DANGEROUS:
            return DANGEROUS_TIP
        return None

    def _choose_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Checkpoint to test", "",
                                              CHECKPOINT_FILTER)
        if path:
            self.set_file(path)

    def request(self) -> ConsistencyRequest:
        """The form as a request; ValueError with a one-line message when it is incomplete."""
        path = self.file_edit.text().strip()
        if not path:
            raise ValueError("choose a checkpoint first")
        spec = ConsistencyRequest(path=path, device=self.device.currentText().strip() or "auto",
                                  repeats=self.repeats.value())
        if self.inject_box.isChecked():
            key = self.inject_key.text().strip()
            if not key:
                raise ValueError("fault injection needs a tensor name")
            spec.inject = {"key": key, "index": self.inject_index.value(),
                           "bit": self.inject_bit.value(), "iteration": self.inject_run.value()}
        if self.mode_model.isChecked():
            factory = self.factory.text().strip()
            if ":" not in factory:
                raise ValueError("the model factory must look like package.module:callable")
            try:
                kwargs = json.loads(self.kwargs.text() or "{}")
                shape = [int(p) for p in self.input_shape.text().replace("x", ",").split(",")
                         if p.strip()]
            except ValueError as exc:
                raise ValueError(f"model settings: {exc}") from None
            if not isinstance(kwargs, dict) or not shape:
                raise ValueError("kwargs must be a JSON object and the input shape non-empty")
            spec.model, spec.model_kwargs, spec.input_shape = factory, kwargs, shape
            spec.input_dtype = self.input_dtype.currentText()
            spec.reload = self.reload.isChecked()
            folder = self.model_path.text().strip()
            spec.python_path = [folder] if folder else []
        refusal = spec.refusal()  # a fault after the last run would be a self-test of nothing
        if refusal is not None:
            raise ValueError(refusal)
        return spec

    # ---- running -------------------------------------------------------------------------

    def start(self) -> Job | None:
        """Start a run in the background; None (and a message) when the form is incomplete."""
        if self.job is not None:
            return None
        try:
            spec = self.request()
        except ValueError as exc:
            self._verdict(str(exc), FAIL_STYLE)
            return None
        self._clear()
        self.progress.setRange(0, spec.repeats)
        self.progress.setValue(0)
        self._started = time.time()
        run_fn = self._run_fn

        def work(emit, cancel):
            def stamped(event: dict) -> None:
                emit({**event, "received": time.time()})

            try:
                return run_fn(spec, on_event=stamped, cancel=cancel)
            except SandboxError as exc:
                if exc.code != "refused_dangerous":
                    raise
                # The engine's message offers the CLI's override; the app has none.
                raise RuntimeError("not run: the static scan calls this file dangerous, and the"
                                   " app never loads such a file") from None

        job = Job("consistency", work, self)
        job.events.connect(self._on_events)
        job.finished.connect(self._on_finished)
        job.failed.connect(lambda message: self._unchecked(message, FAIL_STYLE))
        job.cancelled.connect(lambda: self._unchecked("Cancelled.", IDLE_STYLE))
        self.job = job
        self._set_running(True)
        self._verdict(f"Running {spec.repeats} runs on {spec.device}…", IDLE_STYLE)
        return self._runner.start(job)

    def cancel(self) -> None:
        """Cancel the running check; the worker process is killed."""
        if self.job is not None:
            self.job.cancel()

    def _set_running(self, running: bool) -> None:
        blocked = self.blocked_reason()
        self.run_button.setEnabled(not running and blocked is None)
        self.run_button.setToolTip(blocked or "Run the check in the jailed worker")
        self.cancel_button.setEnabled(running)

    def _clear(self) -> None:
        self.result = None
        self._clear_runs()
        for name in ("temperature", "power"):
            for item in list(self.plots[name].listDataItems()):
                self.plots[name].removeItem(item)
        self.table.clear()

    def _clear_runs(self) -> None:
        """Take away everything the worker's events drew: the runs, the fault's marks and the
        device line."""
        self._xs, self._diffs, self._counts = [], [], []
        self.diff_curve.setData([], [])
        self.count_curve.setData([], [])
        for plot, line in self._marks:
            plot.removeItem(line)
        self._marks = []
        self.device_label.setText("")
        self._set_runs_word("")

    def _set_runs_word(self, word: str) -> None:
        self._runs_word = word
        self._restyle()

    def _unchecked(self, message: str, style: str) -> None:
        """A run that ends with no checked answer (refused, failed, cancelled): what its
        events drew was never checked, so it goes."""
        self._clear_runs()
        self._ended(message, style)

    def _on_events(self, events: list[dict]) -> None:
        """Draw the events `run_consistency` hands on: the device and the fault checked as
        they came, each run the worker's word until the end (`_on_finished` replots it)."""
        for event in events:
            kind = event.get("type")
            if kind == "device":
                self.device_label.setText(f"Device: {event['label']}")
            elif kind == "iteration":
                if not self._runs_word:
                    self._set_runs_word(LIVE_WORD)
                self._xs.append(event["received"] - self._started)
                # non-finite numbers arrive as 'inf' / 'nan' strings (JSON has none)
                self._diffs.append(float(event["max_abs_diff"]))
                self._counts.append(float(event["mismatched"]))
                if event["phase"] != "reload":
                    self.progress.setValue(min(self.progress.maximum(), int(event["iteration"])))
            elif kind == "injected":
                self._mark(event["received"] - self._started,
                           f"bit {event['bit']} flipped in {event['key']}")
        self._plot_runs()

    def _plot_runs(self) -> None:
        xs = np.asarray(self._xs)
        diffs = np.nan_to_num(np.asarray(self._diffs), posinf=np.nan)
        counts = np.asarray(self._counts)
        self.diff_curve.setData(xs, diffs)
        self.count_curve.setData(xs, counts)
        # all-zero (identical runs) stays a flat line at 0, not one centred in -0.5..0.5
        largest = float(np.abs(diffs[np.isfinite(diffs)]).max(initial=0.0))
        for name, values, span in (("diff", diffs, largest * 0.2 or 1.0),
                                   ("count", counts, 4.0)):
            found = y_range([values], span)
            if found is not None:
                self.plots[name].setYRange(*found, padding=0.08)
        self._draw_telemetry()

    def _mark(self, x: float, label: str) -> None:
        for row, plot in enumerate(self.plots.values()):
            line = pg.InfiniteLine(pos=x, angle=90, movable=False, pen=self._mark_pen(),
                                   label=label if row == 0 else None,
                                   labelOpts={"position": 0.8, "color": self._mark_pen().color()})
            plot.addItem(line, ignoreBounds=True)
            self._marks.append((plot, line))

    def _mark_pen(self):
        return pg.mkPen(chart_style.role_colour("warn", self.palette()), width=1.5,
                        style=Qt.PenStyle.DashLine)

    def _draw_telemetry(self) -> None:
        store = self._telemetry() if self._telemetry else None
        gpus = store.gpus() if store is not None else []
        self._show_gpu_plots({name for name, (field, _what) in GPU_PLOTS.items()
                              if any(np.isfinite(store.series(g, field)[1]).any() for g in gpus)},
                             any_gpu=bool(gpus))
        for name, (field, _what) in GPU_PLOTS.items():
            plot = self.plots[name]
            for item in list(plot.listDataItems()):
                plot.removeItem(item)
            for gpu in gpus:
                times, values = store.series(gpu, field)
                window = times >= self._started - 1.0
                if window.any() and np.isfinite(values[window]).any():
                    plot.plot(times[window] - self._started, values[window], stepMode="left",
                              connect="finite", pen=pg.mkPen(gpu_colour(gpu, self.palette()),
                                                             width=1.5))

    def _on_finished(self, result: dict[str, Any]) -> None:
        self.result = result
        typed = ConsistencyResult.from_json(result)
        self._checked_runs(typed)
        self._draw_telemetry()
        fault = typed.injected
        # a self-test wants the results to differ: that is the detector seeing its bit
        passed = bool(typed.consistent) != bool(fault)
        style = PASS_STYLE if passed else FAIL_STYLE
        if fault:
            verdict = (f"SELF-TEST {'PASSED' if passed else 'FAILED'}: "
                       f"{self_test_words(fault)}, {'' if passed else 'NOT '}detected")
        else:
            verdict = typed.word
            style = WARN_STYLE if typed.nonfinite_rows and passed else style
        detail = (f"{verdict}: {typed.repeats} runs on {typed.device_label} "
                  f"({'weights probe' if typed.mode == 'probe' else 'model run'})")
        if typed.weights_gb_per_s:
            detail += f", {typed.weights_gb_per_s:.3g} GB/s of weights"
        self._fill_table(result)
        self._ended(f"{detail}\nChecked here: {typed.checked_words}", style)

    def _checked_runs(self, typed: ConsistencyResult) -> None:
        """Replot the runs from the checked answer (the events that agreed with it), at the
        times they arrived, and say whose word they are; the device line is the answer's."""
        runs = typed.iterations
        self._xs = self._xs[:len(runs)] + [self._xs[-1] if self._xs else 0.0] * (
            len(runs) - len(self._xs))
        self._diffs = [float(r["max_abs_diff"]) for r in runs]
        self._counts = [float(r["mismatched"]) for r in runs]
        self._plot_runs()
        checked = typed.claims is not None and typed.claims.checked
        self._set_runs_word("" if checked and not any(self._counts) else WORKER_WORD)
        self.device_label.setText(f"Device: {typed.device_label}")

    def _ended(self, message: str, style: str) -> None:
        self.job = None
        self._set_running(False)
        self._verdict(message, style)

    def _verdict(self, text: str, style: str) -> None:
        self.verdict.setText(text)
        self._verdict_style = style
        palette = self.palette()
        css = (f"color: {chart_style.text_colour(palette).name()}; border: 1px solid "
               f"{palette.mid().color().name()};" if style == IDLE_STYLE
               else chart_style.banner_css(style, palette))
        self.verdict.setStyleSheet(f"#consistencyVerdict {{ {css} }}")

    def _fill_table(self, result: dict[str, Any]) -> None:
        rows = result["tensors"] if result["mode"] == "probe" else result["outputs"]
        resident = {r["key"]: r for r in result.get("resident_mismatches", [])}
        rows = sorted(rows, key=lambda r: (r["status"] != CheckStatus.FAIL,
                                           not r.get("nonfinite"), r["key"]))
        for row in rows:
            unjudged = bool(row.get("nonfinite")) and row["status"] != CheckStatus.FAIL
            word = "NOT JUDGED" if unjudged else row["status"].upper()
            item = QTreeWidgetItem([row["key"], word, _detail(row)])
            item.setToolTip(2, item.text(2))
            role = "warn" if unjudged else {CheckStatus.FAIL: "bad",
                                             CheckStatus.PASS: "good"}.get(row["status"])
            if role:
                item.setForeground(1, chart_style.role_colour(role, self.palette()))
            flips = resident.get(row["key"])
            for element in (flips or {}).get("elements", []):
                text = describe_element(row["key"], element) + " vs the checkpoint"
                QTreeWidgetItem(item, ["", "device copy", text]).setToolTip(2, text)
            self.table.addTopLevelItem(item)
            item.setExpanded(bool(flips))
        if result["mode"] == "model":
            keys = (f"missing keys: {', '.join(result['missing_keys']) or 'none'}; unexpected "
                    f"keys: {', '.join(result['unexpected_keys']) or 'none'}")
            self.table.addTopLevelItem(QTreeWidgetItem(["load_state_dict", "", keys]))
            if result.get("reload") is not None:
                same = result["reload"]["consistent"]
                self.table.addTopLevelItem(QTreeWidgetItem(
                    ["reload check", "PASS" if same else "FAIL",
                     "same output after a fresh load" if same else "output differs after reload"]))


def _detail(row: dict[str, Any]) -> str:
    parts = []
    if row.get("nonfinite"):
        parts.append(f"holds {counted(row['nonfinite'], 'NaN/Inf value')} (first at element "
                     f"{row.get('first_nonfinite')}): the device cannot be judged on it")
    runs = row.get("repeat_mismatches") or row.get("runs_mismatched")
    if runs:
        parts.append(f"{counted(runs, 'run')} {agree(runs, 'differs', 'differ')}, max |diff| "
                     f"{float(row['max_abs_diff']):.4g}")
        first = row.get("first_mismatch")
        if first and "bits" in first:
            parts.append(f"first in run {first['iteration']}: "
                         + describe_element("output", first))
    if row.get("reference_ok") is False:
        parts.append(f"float64 reference off by {row['reference_error_ratio']:.3g}× tolerance")
    if row.get("roundtrip_ok") is False:
        parts.append("host→device→host copy changed the bytes")
    if not parts and "reference_error_ratio" in row:
        parts.append(f"bit-identical runs; reference error {row['reference_error_ratio']:.2g}×"
                     " tolerance")
    elif not parts and row.get("sha256"):
        parts.append(f"round trip ok, sha256 {row['sha256'][:12]}…")
    return "; ".join(parts)
