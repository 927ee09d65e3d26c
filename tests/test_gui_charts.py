"""GPU and Consistency charts on a laptop screen (pytest-qt, offscreen): readable plot heights
with scrolling, threshold and event markers on every chart, a hover readout of every GPU, line
widths per GPU, a replay table that follows the cursor, the Consistency pane on a CPU machine
and for a dangerous file; screenshots at 1280×720 and 1920×1080, light and dark."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pynvml
import pytest
from fake_pynvml import FakeGpu, FakeNvml, install
from PySide6.QtCore import QPoint, QPointF

from inspector.core.samples import write_samples
from inspector.gpu.events import throttle_onsets
from inspector.gpu.smi_csv import write_log
from inspector.gpu.telemetry import GpuSample, TelemetryStore
from inspector.gui import app as appmod
from inspector.gui.panes.consistency_pane import DANGEROUS_TIP, ConsistencyPane
from inspector.gui.panes.gpu_layout import MIN_PLOT_HEIGHT, PLOTS
from inspector.gui.panes.gpu_pane import GpuPane
from inspector.gui.widgets.step_curve import value_at

pytest_plugins = ("gui_fixtures",)  # fixtures: gui_settings

START = 1_790_000_000.0
SECONDS = 600
SIZES = ((1280, 720), (1920, 1080))


def _events_log(path: Path) -> Path:
    """Two GPUs at equal temperatures that cross the 85 °C line; GPU1 throttles (hardware
    thermal slowdown) at 300 s, GPU0 gets an uncorrected ECC error at 400 s, GPU1 an XID at
    450 s; GPU0's power is 100 W + 1 W per second, so each second has its own value."""
    samples = []
    for i in range(SECONDS):
        temp = 60 + (30 if 200 <= i < 260 else 0) + (i % 5)
        for g in range(2):
            samples.append(GpuSample(
                START + i, g, "NVIDIA H100 80GB HBM3", temperature_gpu=temp,
                power_draw=100.0 + i if g == 0 else 400.0, power_limit=700.0,
                utilization_gpu=50, memory_used=1000 + g, memory_total=81_559,
                clock_sm=1980, clock_memory=2619,
                clocks_event_reasons=0x040 if (g == 1 and 300 <= i < 320) else 0,
                ecc_uncorrected_volatile=int(g == 0 and i >= 400), ecc_corrected_volatile=0,
                pcie_replay=0, xids=(79,) if (g == 1 and i == 450) else ()))
    write_log(path, samples)
    return path


@pytest.fixture
def theme(gui_settings, qapp):
    """Set a theme for one test; the system theme comes back afterwards."""
    appmod.settings().clear()
    yield appmod.set_theme
    appmod.set_theme("system")


@pytest.fixture
def replay(qtbot, tmp_path, monkeypatch) -> GpuPane:
    install(monkeypatch, FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    pane = GpuPane()
    qtbot.addWidget(pane)
    pane.resize(1280, 720)
    pane.show()
    pane.open_log(str(_events_log(tmp_path / "events.csv")))
    qtbot.waitUntil(lambda: pane.status.text().startswith("Replay of"), timeout=60_000)
    qtbot.waitUntil(lambda: not pane._lod_queue)
    yield pane
    pane.shutdown()


def test_value_at_and_throttle_onsets_read_step_series():
    times = np.array([10.0, 20.0, 30.0])
    values = np.array([1.0, np.nan, 3.0], dtype=np.float32)
    assert value_at(times, values, 9.9) is None
    assert value_at(times, values, 15.0) == 1.0
    assert value_at(times, values, 25.0) is None  # n/a in that sample
    assert value_at(times, values, 99.0) == 3.0
    reasons = np.array([0, 0x004, 0x044, 0x044, np.nan, 0x008], dtype=np.float32)
    # a power cap (0x004) is not a slowdown; the thermal slowdown starts once, then 0x008
    assert throttle_onsets(np.arange(6.0), reasons) == [(2.0, 0x040), (5.0, 0x008)]


def test_plots_keep_a_readable_height_and_scroll_on_a_laptop_screen(replay, qtbot):
    for width, height in SIZES:
        replay.resize(width, height)
        qtbot.wait(50)
        heights = [plot.geometry().height() for plot in replay.plots.values()]
        assert min(heights) >= MIN_PLOT_HEIGHT, (width, height, heights)
    replay.resize(1280, 720)
    qtbot.wait(50)
    assert replay.scroll.verticalScrollBar().maximum() > 0  # it scrolls rather than squashes
    # Each plot has its own labelled time axis: on a laptop screen only some are in view.
    shown = [t for t, plot in replay.plots.items() if plot.getAxis("bottom").isVisible()]
    assert shown == [title for title, _unit, _fields in PLOTS]


def test_threshold_and_every_event_are_marked_on_every_chart(replay, qtbot):
    temperature = replay.plots["Temperature"]
    assert replay.threshold in temperature.items and replay.threshold.value() == 85.0
    events = replay.events()
    kinds = {e.kind for e in events}
    assert {"temperature", "throttle", "ecc_uncorrected", "xid"} <= kinds
    assert (START + 300, 1, "throttle") in {(e.timestamp, e.gpu, e.kind) for e in events}
    for title, plot in replay.plots.items():
        marks = replay.marks[title]
        assert marks in plot.items and list(marks.times) == [e.timestamp for e in events]
        assert marks.labelled == (title == PLOTS[0][0])  # labels once, on the top chart
    messages = {m.message: m for m in replay.marked}
    xid = messages["GPU 1: XID 79 (GPU has fallen off the bus)"]
    assert xid.label == "XID 79 GPU1" and xid.role == "bad"
    assert messages["GPU 1: clocks slowed (hardware thermal slowdown)"].role == "mark"

    # The line is really drawn: the XID's column of the power chart holds its colour.
    power = replay.plots["Power"]
    replay.scroll.ensureWidgetVisible(replay.graphics, 0, 0)
    view = power.getViewBox()
    (_left, _right), (low, high) = view.viewRange()
    top = replay.graphics.mapFromScene(view.mapViewToScene(QPointF(xid.time, high)))
    bottom = replay.graphics.mapFromScene(view.mapViewToScene(QPointF(xid.time, low)))
    image = replay.graphics.grab().toImage()
    colour = replay.marks["Power"].colours["bad"]
    near = {image.pixelColor(x, y).name() for x in range(top.x() - 2, top.x() + 3)
            for y in range(top.y() + 2, bottom.y() - 2)}
    assert colour.name() in near, (colour.name(), near)
    # Pointing at the line shows its message.
    qtbot.mouseMove(replay.graphics.viewport(), QPoint(top.x(), (top.y() + bottom.y()) // 2))
    qtbot.waitUntil(lambda: replay.graphics.toolTip() == xid.message)


def test_equal_values_never_hide_a_gpu(replay):
    gpu0, gpu1 = replay._curves[(0, "temperature_gpu")], replay._curves[(1, "temperature_gpu")]
    assert np.array_equal(gpu0.values, gpu1.values)  # the two lines coincide everywhere
    assert gpu0.pen().widthF() > gpu1.pen().widthF() and gpu1.zValue() > gpu0.zValue()
    assert gpu0.pen().color() != gpu1.pen().color()
    assert "━ GPU0" in replay.key.text() and "GPU1" in replay.key.text()


def test_hover_reads_every_gpu_and_the_replay_table_follows_the_cursor(replay, qtbot,
                                                                       artifacts, theme):
    last = replay.table.item(0, 2).text()
    assert last.startswith(f"{100 + SECONDS - 1:.0f} / ")  # the log's last row until a hover
    replay.hover_at(START + 100.5)
    assert replay.readouts["Power"].toPlainText() == "GPU0 200 W\nGPU1 400 W"
    assert replay.readouts["Temperature"].toPlainText().startswith("GPU0 60 / n/a °C\nGPU1 60")
    assert all(replay.crosshairs[t].value() == START + 100.5 for t, *_ in PLOTS)
    assert replay.table.item(0, 2).text().startswith("200 / 700")
    assert replay.table.item(1, 6).text() == "none"
    replay.hover_at(START + 305)
    assert replay.table.item(1, 6).text() == "hardware thermal slowdown"
    assert replay.table.item(0, 7).text() == "0"
    replay.hover_at(START + 405)
    assert replay.table.item(0, 7).text() == "1"
    assert "the table shows this time" in replay.readout.text()

    # A real mouse move over the power chart moves the crosshair there.
    power = replay.plots["Power"]
    replay.scroll.ensureWidgetVisible(replay.graphics, 0, 0)
    centre = power.mapToScene(power.boundingRect().center())
    point = replay.graphics.mapFromScene(centre)
    qtbot.mouseMove(replay.graphics.viewport(), QPoint(point.x(), point.y()))
    qtbot.waitUntil(lambda: replay.cursor_time is not None
                    and abs(replay.cursor_time - (START + 405)) > 1)
    (left, right), _ = power.getViewBox().viewRange()
    assert left < replay.cursor_time < right

    replay.hover_at(START + 230)
    for scheme in ("light", "dark"):
        theme(scheme)
        for width, height in SIZES:
            replay.resize(width, height)
            qtbot.wait(50)
            replay.grab().save(str(artifacts / f"gpu-replay-{width}x{height}-{scheme}.png"))
    base = replay.palette().base().color()
    assert replay.graphics.backgroundBrush().color() == base  # the charts follow the theme
    assert replay._curves[(0, "power_draw")].pen().color().lightness() > 100


def test_consistency_pane_on_cpu_hides_gpu_charts_and_says_why(qtbot, monkeypatch, artifacts,
                                                               theme):
    install(monkeypatch, FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    store = TelemetryStore()
    pane = ConsistencyPane(telemetry=lambda: store)
    qtbot.addWidget(pane)
    pane.resize(1280, 720)
    pane.show()
    layout_items = pane.graphics.ci.items
    assert pane.plots["temperature"] not in layout_items and pane.plots["power"] not in layout_items
    assert pane.gpu_note.isVisible() and "no GPU telemetry" in pane.gpu_note.text()
    for scheme in ("light", "dark"):
        theme(scheme)
        for width, height in SIZES:
            pane.resize(width, height)
            qtbot.wait(50)
            pane.grab().save(str(artifacts / f"consistency-cpu-{width}x{height}-{scheme}.png"))
    # A GPU that reports its temperature but not its power: only the power chart stays hidden.
    pane._started = START
    store.add(GpuSample(START + 1, 0, "GPU", temperature_gpu=60.0))
    pane._draw_telemetry()
    assert pane.plots["temperature"] in pane.graphics.ci.items
    assert pane.plots["power"] not in pane.graphics.ci.items
    assert pane.gpu_note.text() == "GPU power chart hidden: no GPU reports it."
    store.add(GpuSample(START + 2, 0, "GPU", temperature_gpu=61.0, power_draw=110.0))
    pane._draw_telemetry()
    assert pane.plots["power"] in pane.graphics.ci.items and not pane.gpu_note.isVisible()
    assert pane.plots["temperature"].listDataItems() and pane.plots["power"].listDataItems()
    assert pane.plots["power"].getAxis("bottom").labelText == "seconds since the run started"
    qtbot.wait(50)
    pane.grab().save(str(artifacts / "consistency-with-telemetry-1920x1080-dark.png"))


def test_consistency_run_is_disabled_for_a_dangerous_file(qtbot, tmp_path):
    samples = write_samples(tmp_path)
    pane = ConsistencyPane()
    qtbot.addWidget(pane)
    pane.set_file(str(samples.malicious), "dangerous")
    assert not pane.run_button.isEnabled() and pane.run_button.toolTip() == DANGEROUS_TIP
    assert "override" not in DANGEROUS_TIP
    pane.set_file(str(samples.benign), "safe")
    assert pane.run_button.isEnabled()
    pane.set_verdict(str(samples.benign), "dangerous")  # the verdict can arrive later
    assert not pane.run_button.isEnabled()

    # A path typed by hand has no verdict here: the engine refuses the file, and the message
    # offers nothing the app cannot do.
    typed = tmp_path / "typed-by-hand.pt"
    typed.write_bytes(samples.malicious.read_bytes())
    pane.file_edit.setText(str(typed))
    assert pane.run_button.isEnabled()
    pane.device.setCurrentText("cpu")
    assert pane.start() is not None
    qtbot.waitUntil(lambda: pane.job is None, timeout=60_000)
    text = pane.verdict.text()
    assert text.startswith("not run: the static scan calls this file dangerous"), text
    assert "override" not in text and not samples.marker.exists()


def test_main_window_disables_consistency_for_a_dangerous_file(window, qtbot, tmp_path):
    samples = write_samples(tmp_path)
    (bad,) = window.open_paths([samples.malicious])
    qtbot.waitUntil(lambda: bad.verdict == "dangerous", timeout=60_000)
    window.tabs.setCurrentIndex(window.tabs.indexOf(
        next(window.tabs.widget(i) for i in range(window.tabs.count())
             if window.tabs.tabText(i) == "Consistency")))
    qtbot.waitUntil(lambda: window.consistency is not None, timeout=10_000)
    assert window.consistency.file_edit.text() == str(samples.malicious)
    assert not window.consistency.run_button.isEnabled()
    assert window.consistency.run_button.toolTip() == DANGEROUS_TIP
    assert not samples.marker.exists()


def test_the_readout_never_covers_the_threshold_label(replay, qtbot):
    """The temperature readout is pinned to the top beside the crosshair; the threshold's
    label moves to the other end of its line, at either edge of the chart."""
    label, readout = replay.threshold.label, replay.readouts["Temperature"]
    for t in (START + 1, START + SECONDS / 2 - 5, START + SECONDS / 2 + 5, START + SECONDS - 2):
        replay.hover_at(t)
        qtbot.wait(20)
        assert readout.isVisible() and label.isVisible()
        assert not label.sceneBoundingRect().intersects(readout.sceneBoundingRect()), t


def test_live_charts_follow_the_latest_sample_whatever_the_cursor(qtbot, monkeypatch, artifacts,
                                                                  theme):
    fake = install(monkeypatch, FakeNvml([FakeGpu(0), FakeGpu(1, temperature=61)]))
    pane = GpuPane(interval=0.1)
    qtbot.addWidget(pane)
    pane.resize(1280, 720)
    pane.show()
    try:
        qtbot.waitUntil(lambda: pane.store.count(1) >= 3, timeout=10_000)
        first = pane.store.series(1, "temperature_gpu")[0][0]
        fake.gpus[1].temperature = 88  # above the threshold: an alert and a marker
        fake.gpus[1].reasons = 0x040  # hardware thermal slowdown: a throttle marker
        qtbot.waitUntil(lambda: {"hot GPU1", "throttle GPU1"} <= {m.label for m in pane.marked},
                        timeout=10_000)
        pane.hover_at(first)  # live: the readout shows that time, the table stays on the latest
        assert pane.readouts["Temperature"].toPlainText().startswith("GPU0 45 / 52 °C\nGPU1 61")
        assert "GPU1 80123 MiB" in pane.readouts["Memory used"].toPlainText()
        qtbot.waitUntil(lambda: pane.table.item(1, 1).text() == "88 °C")
        # The live view keeps moving; the readout stays pinned to the top of the chart.
        view = pane.plots["Temperature"].getViewBox()
        qtbot.waitUntil(lambda: pane.readouts["Temperature"].pos().y() == view.viewRange()[1][1])
        assert "the table shows this time" not in pane.readout.text()
        for scheme in ("light", "dark"):
            theme(scheme)
            for width, height in SIZES:
                pane.resize(width, height)
                qtbot.wait(100)
                pane.grab().save(str(artifacts / f"gpu-live-{width}x{height}-{scheme}.png"))
    finally:
        pane.shutdown()
    assert pane.sampler is None and fake.event_sets_open == 0
