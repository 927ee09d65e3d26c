"""The shipped sample telemetry log (issue 37): made by the project (`gpu.sample_log`), with a
throttle and an uncorrected ECC error; `telemetry --replay` and the GPU pane offer it where
there is no GPU. The GPU pane is real; "no GPU" is the stand-in pynvml refusing to start."""

from __future__ import annotations

import subprocess
import sys

import pynvml
import pytest
from fake_pynvml import FakeNvml, install
from PySide6.QtWidgets import QApplication

from inspector.gpu import sample_log
from inspector.gpu.smi_csv import read_log
from inspector.gpu.telemetry import FIELDS, decode_clock_reasons


def test_the_shipped_log_is_what_the_project_makes():
    log = read_log(sample_log.path())
    made = sample_log.samples()
    assert log.bad_cells == 0 and len(log.samples) == len(made) == 240
    start = log.samples[0].timestamp
    for got, want in zip(log.samples, made, strict=True):
        assert (got.index, got.name, got.uuid) == (want.index, want.name, want.uuid)
        assert got.timestamp - start == pytest.approx(want.timestamp - made[0].timestamp)
        for f in FIELDS:
            assert getattr(got, f.name) == pytest.approx(getattr(want, f.name)), f.name


def test_replaying_it_shows_the_throttle_and_the_ecc_error():
    run = subprocess.run([sys.executable, "-m", "inspector", "telemetry", "--replay",
                          str(sample_log.path())], capture_output=True, text=True)
    assert run.returncode == 1, run.stderr  # alerts were raised
    assert "GPU 1: uncorrected ECC errors (volatile) rose from 0 to 1" in run.stdout
    assert "GPU 1: the driver asks to reset the GPU" in run.stdout
    assert "GPU 0: temperature" in run.stdout
    # the throttle is listed as the GPU pane marks it, and is not an alert
    assert "THROTTLE [WARNING] GPU 0: clocks slowed (software thermal slowdown, hardware " \
        "thermal slowdown)" in run.stdout
    assert "ALERT [WARNING] GPU 0: clocks slowed" not in run.stdout
    hot = [s for s in read_log(sample_log.path()).samples if s.index == 0
           and "hardware thermal slowdown" in decode_clock_reasons(s.clocks_event_reasons)]
    assert len(hot) == sample_log.COOL_FROM - sample_log.THROTTLE_FROM


def test_the_gpu_pane_offers_it_when_there_is_no_gpu(qtbot, monkeypatch, artifacts):
    from inspector.gui.panes.gpu_pane import GpuPane

    install(monkeypatch, FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    pane = GpuPane()
    qtbot.addWidget(pane)
    pane.resize(1280, 680)
    pane.show()
    try:
        qtbot.waitUntil(lambda: pane.stack.currentWidget() is pane.placeholder)
        assert pane.sample_button.isVisible()
        shots = artifacts / "screens"
        shots.mkdir(parents=True, exist_ok=True)
        assert pane.grab().save(str(shots / "gpu-no-gpu-offers-sample-1280x720-light.png"))
        pane.sample_button.click()
        qtbot.waitUntil(lambda: pane.source_label == str(sample_log.path()), timeout=30_000)
        assert pane.store.gpus() == [0, 1]
        kinds = {a.kind for a in pane.store.alerts}
        assert {"ecc_uncorrected", "recovery_action", "temperature"} <= kinds
        assert "CRITICAL" in pane.banner_text.text()
        assert any(e.kind == "throttle" and "thermal" in e.message for e in pane.events())
        for width, height in ((1280, 720), (1920, 1080)):
            pane.resize(width, height - 40)
            QApplication.processEvents()
            qtbot.wait(100)
            assert pane.grab().save(str(shots / f"gpu-sample-log-{width}x{height}-light.png"))
    finally:
        pane.shutdown()
