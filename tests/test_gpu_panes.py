"""GPU and Consistency panes (pytest-qt, offscreen): no-driver line, hours of replay, live fake
NVML, a real consistency run in the jailed worker, cancel, and screenshots of both panes."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time
from pathlib import Path

import consistency_models
import numpy as np
import pynvml
import pytest
import torch
from fake_pynvml import FakeGpu, FakeNvml, install
from PySide6.QtCore import QElapsedTimer, Qt, QTimer

from inspector.gpu.smi_csv import write_log
from inspector.gpu.telemetry import GpuSample
from inspector.gui.panes.consistency_pane import ConsistencyPane
from inspector.gui.panes.gpu_layout import PLOTS
from inspector.gui.panes.gpu_pane import GpuPane

HOURS, GPUS = 3, 4
START = 1_790_000_000.0
PAN_STEPS = 60  # with a zoom every 10th: three out and three back in


def _void_qt_calls_drop_none() -> bool:
    from PySide6.QtCore import QRectF

    rect, before = QRectF(), sys.getrefcount(None)
    for _ in range(100):
        rect.setWidth(1.0)
    return sys.getrefcount(None) < before - 50


def test_qt_binding_keeps_none_alive():
    """PySide6 6.12.0 on CPython 3.11 dropped a reference to None per void call, which
    aborted the interpreter after a few hundred pyqtgraph repaints; constraints.txt pins a
    build without the leak, and this guards the pin."""
    assert not _void_qt_calls_drop_none()


def _hours_log(path: Path) -> Path:
    """A 1 Hz recording of 4 GPUs over 3 hours: load cycles, an ECC error, an XID."""
    rng = np.random.default_rng(0)
    n = HOURS * 3600
    samples = []
    for g in range(GPUS):
        load = np.sin(np.arange(n) / 900 + g) > -0.3
        temp = 38 + 40 * load + rng.normal(0, 1, n) + 2 * g
        power = 90 + 520 * load + rng.normal(0, 15, n)
        for i in range(n):
            samples.append(GpuSample(
                START + i, g, "NVIDIA H100 80GB HBM3", temperature_gpu=round(temp[i]),
                temperature_memory=round(temp[i]) + 6, power_draw=round(power[i], 1),
                power_limit=700.0, utilization_gpu=98 if load[i] else 0,
                memory_used=70_000 if load[i] else 1_200, memory_total=81_559,
                clock_sm=1980 if load[i] else 345, clock_memory=2619,
                ecc_uncorrected_volatile=int(g == 2 and i > n // 2),
                ecc_corrected_volatile=i // 2000,
                pcie_replay=0, xids=(79,) if (g == 1 and i == 2 * n // 3) else ()))
    write_log(path, samples)
    return path


def _no_driver(monkeypatch) -> None:
    install(monkeypatch, FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))


def test_no_driver_says_so_in_one_line_and_offers_a_log(qtbot, monkeypatch, artifacts):
    _no_driver(monkeypatch)
    pane = GpuPane()
    qtbot.addWidget(pane)
    pane.resize(1200, 800)
    pane.show()
    assert pane.stack.currentWidget() is pane.placeholder
    text = pane.placeholder_text.text()
    assert "\n" not in text
    assert text == "No NVIDIA driver found (NVML: NVML Shared Library Not Found)."
    assert pane.open_button.isVisible() and pane.sampler is None
    pane.grab().save(str(artifacts / "gpu_pane_no_driver.png"))


def test_hours_of_replay_render_and_pan_without_stalling_the_ui(qtbot, tmp_path, artifacts,
                                                               monkeypatch):
    _no_driver(monkeypatch)
    log = _hours_log(tmp_path / "h.csv")
    pane = GpuPane()
    qtbot.addWidget(pane)
    pane.resize(1280, 900)
    pane.show()
    pane.open_log(str(log))
    qtbot.waitUntil(lambda: pane.status.text().startswith("Replay of"), timeout=120_000)
    qtbot.waitUntil(lambda: not pane._lod_queue)
    assert pane.status.text().endswith(f"{HOURS * 3600 * GPUS:,} rows, {GPUS} GPUs")
    assert pane.stack.currentIndex() == 1
    _, temps = pane.store.series(3, "temperature_gpu")
    assert temps.size == HOURS * 3600
    temperature = pane._curves[(3, "temperature_gpu")]
    # Drawn peak-decimated: far fewer points than samples, and the hottest sample survives.
    assert temperature.times.size <= 2 * pane.width()
    assert np.nanmax(temperature.values) == temps.max() and temperature.times[0] == START
    assert temperature.pen().color().name() == "#d62728" and temperature.pen().isCosmetic()
    assert temperature.path().elementCount() == 2 * temperature.times.size - 1  # steps
    assert (0, "pcie_replay") in pane._curves and (0, "temperature_memory") in pane._curves
    assert (0, "fan_speed") not in pane._curves  # never reported: no empty curve
    assert "XID 79 GPU1" in {m.label for m in pane.marked}
    events = [pane.log.topLevelItem(i).text(3) for i in range(pane.log.topLevelItemCount())]
    assert "GPU 1: XID 79 (GPU has fallen off the bus)" in events
    assert "GPU 2: uncorrected ECC errors (volatile) rose from 0 to 1" in events
    assert pane.banner.isVisible() and pane.table.rowCount() == GPUS
    pane.grab().save(str(artifacts / "gpu_pane_replay.png"))

    # Pan and zoom across the hours while a UI-thread timer measures its own lateness (wall
    # time) and how much CPU the UI thread spent between two of its ticks (our work, whatever
    # else the machine is doing).
    view = pane.plots[PLOTS[0][0]].getViewBox()
    view.setXRange(START, START + 1800, padding=0)
    clock, gaps, busy, steps = QElapsedTimer(), [], [], []
    clock.start()
    last = [clock.elapsed(), time.thread_time()]

    def tick():
        now, cpu = clock.elapsed(), time.thread_time()
        gaps.append(now - last[0])
        busy.append((cpu - last[1]) * 1000)
        last[:] = [now, cpu]

    def pan():
        steps.append(1)
        view.translateBy(x=240)
        if len(steps) % 10 == 0:
            view.scaleBy(x=1.6 if len(steps) % 20 else 0.625)

    ticker, panner = QTimer(), QTimer()
    ticker.timeout.connect(tick)
    panner.timeout.connect(pan)
    # The app's GUI process never imports torch; this test process does (other tests), and a
    # full collection over torch's objects pauses for hundreds of ms. Freezing what exists
    # now keeps the collector to the objects panning creates, as in the app.
    gc.freeze()
    try:
        ticker.start(10)
        panner.start(30)
        # a count of pans, not a span of time: on a busy machine the timer fires less often
        qtbot.waitUntil(lambda: len(steps) >= PAN_STEPS, timeout=120_000)
        panner.stop()
        ticker.stop()
    finally:
        gc.unfreeze()
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    print(f"pan steps {len(steps)}, timer gap max {max(gaps)} ms, UI-thread CPU per gap max "
          f"{max(busy):.0f} ms, load {load:.1f} per core")
    # A regression bound on the UI thread's own work (34 ms measured); wall-time gaps measure
    # the scheduler on a busy machine, so they are printed, not asserted.
    assert max(busy) < 250, f"the UI thread worked {max(busy):.0f} ms without a break"
    left, right = view.viewRange()[0]
    assert left > START + 1800  # the view really moved
    qtbot.waitUntil(lambda: not pane._lod_queue)
    shown = temperature.times
    assert shown[0] <= left and shown[-1] >= min(right, START + HOURS * 3600 - 1)


def test_unreadable_log_is_one_line_and_keeps_the_pane_usable(qtbot, tmp_path, monkeypatch):
    _no_driver(monkeypatch)
    pane = GpuPane()
    qtbot.addWidget(pane)
    bad = tmp_path / "weights.bin"
    bad.write_bytes(b"\x00\x01 definitely not a CSV log")
    job = pane.open_log(str(bad))
    qtbot.waitUntil(lambda: not job.running, timeout=30_000)
    assert pane.status.text().startswith("Cannot open log: ")
    assert "is not an nvidia-smi CSV header" in pane.status.text()
    assert pane.stack.currentWidget() is pane.placeholder and pane.open_button.isEnabled()


def test_live_fake_nvml_shows_xids_and_a_vanishing_driver(qtbot, monkeypatch):
    fake = install(monkeypatch, FakeNvml([FakeGpu(0), FakeGpu(1, temperature=61)]))
    pane = GpuPane(interval=0.1)
    qtbot.addWidget(pane)
    pane.show()
    qtbot.waitUntil(lambda: pane.store.count(1) >= 3, timeout=10_000)
    assert pane.status.text() == "Live: 2 GPUs, every 0.1 s, driver 580.95.05"
    qtbot.waitUntil(lambda: pane.table.rowCount() == 2 and pane.table.item(1, 1) is not None)
    assert pane.table.item(1, 1).text() == "61 °C"
    assert pane.table.item(0, 6).text() == "software power cap"
    fake.inject_xid(1, 48)
    qtbot.waitUntil(lambda: "XID 48 GPU1" in {m.label for m in pane.marked}, timeout=10_000)
    assert "GPU 1: XID 48 (double-bit ECC error)" in pane.banner_text.text()
    fake.driver_gone = True
    qtbot.waitUntil(lambda: "driver stopped answering" in pane.banner_text.text(), timeout=10_000)
    pane.shutdown()
    assert pane.sampler is None and fake.event_sets_open == 0


@pytest.fixture
def checkpoint(tmp_path) -> Path:
    torch.manual_seed(0)
    path = tmp_path / "model.pt"
    torch.save({"model": consistency_models.tiny_mlp(width=64).state_dict(),
                "conv.weight": torch.randn(16, 3, 3, 3)}, path)
    return path


def _cpu_pane(qtbot, path: Path, repeats: int, **options) -> ConsistencyPane:
    """A Consistency pane shown at 1280x860, set to run `repeats` runs of `path` on the CPU."""
    pane = ConsistencyPane(**options)
    qtbot.addWidget(pane)
    pane.resize(1280, 860)
    pane.show()
    pane.set_file(str(path))
    pane.device.setCurrentText("cpu")
    pane.repeats.setValue(repeats)
    return pane


def test_consistency_pane_runs_in_the_worker_and_localises_a_flip(qtbot, monkeypatch,
                                                                  checkpoint, artifacts):
    install(monkeypatch, FakeNvml([FakeGpu(0), FakeGpu(1, temperature=58, power_mw=250_000)]))
    gpu = GpuPane(interval=0.2)
    qtbot.addWidget(gpu)
    pane = _cpu_pane(qtbot, checkpoint, 6, telemetry=lambda: gpu.store)
    pane.inject_box.setChecked(True)
    pane.inject_key.setText("conv.weight")
    pane.inject_index.setValue(100)
    pane.inject_bit.setValue(22)
    pane.inject_run.setValue(4)
    assert pane.start() is not None
    assert not pane.run_button.isEnabled() and pane.cancel_button.isEnabled()
    qtbot.waitUntil(lambda: pane.job is None, timeout=240_000)
    assert pane.result is not None, pane.verdict.text()
    assert pane.verdict.text().startswith(
        "SELF-TEST PASSED: bit 22 of conv.weight[100] flipped on purpose before iteration 4, "
        "detected: 6 runs on CPU")
    assert ("\nChecked here: the 9 tensors the device was given are the file's bytes "
            "(SHA-256 recomputed here)") in pane.verdict.text()
    top = pane.table.topLevelItem(0)
    assert (top.text(0), top.text(1)) == ("conv.weight", "FAIL")
    assert "3 runs differ" in top.text(2)
    child = top.child(0).text(2)
    assert child.startswith("conv.weight[3,2,0,1] (element 100): ")
    assert "bit 22 (mantissa)" in child
    assert pane.progress.value() == 6 and pane.device_label.text().startswith("Device: CPU")
    xs, counts = pane.count_curve.getData()
    assert len(xs) == 6 and list(counts[:3]) == [0, 0, 0] and all(counts[3:] > 0)
    assert pane.plots["temperature"].listDataItems(), "no telemetry beside the diff plot"
    assert len(pane._marks) == len(pane.plots)  # the injection is marked on every plot
    _laid_out(qtbot, pane.verdict)
    pane.grab().save(str(artifacts / "consistency_pane.png"))
    gpu.shutdown()


def test_consistency_pane_leaves_the_device_unjudged_on_nan_weights(qtbot, tmp_path, artifacts):
    state = consistency_models.tiny_mlp().state_dict()
    state["2.weight"][1, 2] = float("nan")
    path = tmp_path / "nan.pt"
    torch.save(state, path)
    pane = _cpu_pane(qtbot, path, 2)
    assert pane.start() is not None
    qtbot.waitUntil(lambda: pane.job is None, timeout=240_000)
    text = pane.verdict.text()
    assert text.startswith("NOT JUDGED: 2 runs on CPU (weights probe)"), text
    assert pane._verdict_style == "warn"
    row = pane.table.findItems("2.weight", Qt.MatchFlag.MatchExactly)[0]
    assert row.text(1) == "NOT JUDGED"
    assert row.text(2).startswith("holds 1 NaN/Inf value (first at element 34)")
    _laid_out(qtbot, pane.verdict)
    pane.grab().save(str(artifacts / "consistency_pane_nan.png"))


def _laid_out(qtbot, label) -> None:
    """Until the layout has given a word-wrapped label the height its new text needs."""
    qtbot.waitUntil(lambda: label.height() >= label.heightForWidth(label.width()))


def _worker_children() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes()
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if b"inspector.sandbox.worker.main" in cmd and int(stat[1]) == os.getpid():
                pids.append(int(entry.name))
    return pids


def test_consistency_pane_cancel_kills_the_worker(qtbot, monkeypatch, checkpoint, cold_workers):
    _no_driver(monkeypatch)
    pane = ConsistencyPane()
    qtbot.addWidget(pane)
    pane.set_file(str(checkpoint))
    pane.device.setCurrentText("cpu")
    pane.repeats.setValue(1_000_000)
    pane.start()
    qtbot.waitUntil(lambda: pane.progress.value() >= 2, timeout=120_000)
    assert _worker_children()
    pane.cancel()
    qtbot.waitUntil(lambda: pane.job is None, timeout=30_000)
    assert pane.verdict.text() == "Cancelled." and pane.run_button.isEnabled()
    assert _worker_children() == []


def test_incomplete_form_says_what_is_missing(qtbot):
    pane = ConsistencyPane()
    qtbot.addWidget(pane)
    assert pane.start() is None and pane.verdict.text() == "choose a checkpoint first"
    pane.set_file("/nowhere/model.pt")
    pane.mode_model.setChecked(True)
    pane.factory.setText("no colon")
    assert pane.start() is None
    assert pane.verdict.text() == "the model factory must look like package.module:callable"


def test_panes_never_import_torch(python_exe):
    code = ("import sys, inspector.gui.panes.gpu_pane, inspector.gui.panes.consistency_pane; "
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([python_exe, "-I", "-c", code], timeout=120).returncode == 0
