"""The Consistency pane's widgets, laid out: the file field across the top, the form (device,
runs, test, model settings, fault injection, Run and Cancel) beside the verdict, the charts and
the result table. `consistency_pane.ConsistencyPane` gives them behaviour."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QButtonGroup,
    QComboBox,
    QFormLayout,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QRadioButton,
    QScrollArea,
    QSpinBox,
    QSplitter,
    QTreeWidget,
    QVBoxLayout,
    QWidget,
)

from inspector.gui.widgets.toggle_button import ToggleButton

PLOT_MIN_HEIGHT = 150
X_LABEL = "seconds since the run started"
CHARTS = (("diff", "Max |diff| vs the first run", ""), ("count", "Mismatched elements", ""),
          ("temperature", "GPU temperature", "°C"), ("power", "GPU power", "W"))
"""(name, title, unit) of each chart, top to bottom."""
NO_TELEMETRY = ("GPU temperature and power charts are hidden: no GPU telemetry is being "
                "recorded (no NVIDIA driver on this machine, or the GPU tab is not sampling).")


class ConsistencyPaneLayout(QWidget):
    """The Consistency pane's widgets, built and placed; nothing here is connected or drawn."""

    def __init__(self, parent: QWidget | None) -> None:
        super().__init__(parent)
        self.setObjectName("consistencyPane")
        outer = QVBoxLayout(self)
        # the path spans the whole pane, above the form and the charts: in the form's column
        # a typical path was cut off on the left
        outer.addLayout(self._file_row())
        splitter = QSplitter(Qt.Orientation.Horizontal)
        outer.addWidget(splitter, 1)
        splitter.addWidget(self._form())
        splitter.addWidget(self._results())
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([340, 900])

    def _file_row(self) -> QHBoxLayout:
        self.file_edit = QLineEdit()
        self.file_edit.setPlaceholderText("checkpoint to test")
        self.browse_button = QPushButton("Browse…")
        file_row = QHBoxLayout()
        file_row.addWidget(QLabel("File"))
        file_row.addWidget(self.file_edit, 1)
        file_row.addWidget(self.browse_button)
        return file_row

    def _form(self) -> QWidget:
        """What to run: device, runs, which test and its settings, Run and Cancel."""
        form_box = QWidget()
        form_layout = QVBoxLayout(form_box)
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.device = QComboBox()
        self.device.setEditable(True)
        self.device.addItems(["auto", "cpu"] + [f"cuda:{i}" for i in range(8)])
        self.device.setToolTip("auto: cuda:0 when a CUDA device is present, else the CPU")
        form.addRow("Device", self.device)
        self.repeats = QSpinBox()
        self.repeats.setRange(2, 1_000_000)
        self.repeats.setValue(10)
        form.addRow("Runs", self.repeats)
        self.mode_probe = QRadioButton("Weights probe (any checkpoint)")
        self.mode_model = QRadioButton("Model run (your model code)")
        self.mode_probe.setChecked(True)
        modes = QButtonGroup(self)
        modes.addButton(self.mode_probe)
        modes.addButton(self.mode_model)
        form.addRow("Test", self.mode_probe)
        form.addRow("", self.mode_model)
        form_layout.addLayout(form)
        form_layout.addWidget(self._model_box())
        form_layout.addWidget(self._inject_box())
        buttons = QHBoxLayout()
        self.run_button = QPushButton("Run")
        self.run_button.setDefault(True)
        self.cancel_button = QPushButton("Cancel")
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.cancel_button)
        form_layout.addLayout(buttons)
        self.progress = QProgressBar()
        self.progress.setFormat("%v / %m runs")
        form_layout.addWidget(self.progress)
        form_layout.addStretch(1)
        return form_box

    def _model_box(self) -> QGroupBox:
        """A model run's settings, enabled while that test is chosen."""
        self.model_box = QGroupBox("Model")
        model_form = QFormLayout(self.model_box)
        self.factory = QLineEdit()
        self.factory.setPlaceholderText("package.module:callable")
        self.kwargs = QLineEdit("{}")
        self.model_path = QLineEdit()
        self.model_path.setPlaceholderText("folder holding the module")
        self.input_shape = QLineEdit("1,3,224,224")
        self.input_dtype = QComboBox()
        self.input_dtype.addItems(["float32", "float16", "bfloat16", "float64", "int64"])
        self.reload = ToggleButton("Reload check", "After the runs, load the checkpoint afresh"
                                   " and compare again", checked=True)
        model_form.addRow("Factory", self.factory)
        model_form.addRow("Kwargs (JSON)", self.kwargs)
        model_form.addRow("Module folder", self.model_path)
        model_form.addRow("Input shape", self.input_shape)
        model_form.addRow("Input dtype", self.input_dtype)
        model_form.addRow("", self.reload)
        self.model_box.setEnabled(False)
        return self.model_box

    def _inject_box(self) -> QGroupBox:
        self.inject_box = QGroupBox("Fault injection (prove the detector works)")
        self.inject_box.setCheckable(True)
        self.inject_box.setChecked(False)
        inject_form = QFormLayout(self.inject_box)
        self.inject_key = QLineEdit()
        self.inject_key.setPlaceholderText("weight name, e.g. conv.weight")
        self.inject_index = QSpinBox()
        self.inject_index.setRange(0, 2**31 - 1)
        self.inject_bit = QSpinBox()
        self.inject_bit.setRange(0, 63)
        self.inject_bit.setValue(22)
        self.inject_run = QSpinBox()
        # a fault asked after the last run would be a self-test of nothing: the box offers none
        self.inject_run.setRange(1, self.repeats.value())
        self.repeats.valueChanged.connect(self.inject_run.setMaximum)
        self.inject_run.setValue(2)
        inject_form.addRow("Tensor", self.inject_key)
        inject_form.addRow("Element", self.inject_index)
        inject_form.addRow("Bit", self.inject_bit)
        inject_form.addRow("Before run", self.inject_run)
        return self.inject_box

    def _results(self) -> QWidget:
        """The verdict and device lines above the charts and the result table."""
        right = QWidget()
        right_layout = QVBoxLayout(right)
        self.verdict = QLabel("Choose a checkpoint and press Run.")
        self.verdict.setObjectName("consistencyVerdict")
        self.verdict.setWordWrap(True)
        self.verdict.setMargin(6)
        self.device_label = QLabel("")
        self.gpu_note = QLabel(NO_TELEMETRY)
        self.gpu_note.setObjectName("consistencyNoTelemetry")
        self.gpu_note.setWordWrap(True)
        right_layout.addWidget(self.verdict)
        right_layout.addWidget(self.device_label)
        right_layout.addWidget(self.gpu_note)
        right_split = QSplitter(Qt.Orientation.Vertical)
        right_split.addWidget(self._charts())
        self.table = QTreeWidget()
        self.table.setHeaderLabels(["Tensor / output", "Result", "Detail"])
        self.table.header().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.header().setStretchLastSection(True)
        right_split.addWidget(self.table)
        right_split.setStretchFactor(0, 1)  # a taller window grows the charts, not the table
        right_split.setStretchFactor(1, 0)
        right_split.setSizes([560, 140])
        right_layout.addWidget(right_split, 1)
        return right

    def _charts(self) -> QScrollArea:
        """The charts (CHARTS), x-linked; they keep a readable height and scroll (a 720-pixel
        screen) rather than squash the last one out of view."""
        self.graphics = pg.GraphicsLayoutWidget()
        self.plots: dict[str, pg.PlotItem] = {}
        self.plot_titles: dict[str, str] = {}
        for row, (name, title, unit) in enumerate(CHARTS):
            plot = self.graphics.addPlot(row=row, col=0)
            plot.setLabel("left", unit)
            # one x unit for every chart, each axis labelled: the charts scroll, so a label
            # under the last alone left the others' numbers to guess
            plot.setLabel("bottom", X_LABEL)
            plot.showGrid(x=True, y=True, alpha=0.2)
            plot.getAxis("left").setWidth(56)
            plot.setMinimumHeight(PLOT_MIN_HEIGHT)
            if row:
                plot.setXLink(self.plots["diff"])
            self.plots[name], self.plot_titles[name] = plot, title
        self.diff_curve = self.plots["diff"].plot(symbol="o", symbolSize=6)
        self.count_curve = self.plots["count"].plot(symbol="o", symbolSize=6)
        charts = QScrollArea()
        charts.setWidgetResizable(True)
        charts.setFrameShape(QFrame.Shape.NoFrame)
        charts.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        charts.setWidget(self.graphics)
        return charts
