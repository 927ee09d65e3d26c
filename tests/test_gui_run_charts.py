"""The Run pane shows what the training guard recorded: loss and gradient norm over steps with
alarm and checkpoint marks, the alarms with their attribution and GPU state, and the data order
per rank; on a run folder written here by the real guard and ledger on a tiny CPU model."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from fake_pynvml import FakeGpu, FakeNvml, install
from guard_support import guarded_run
from gui_support import LOAD_TIMEOUT_MS
from PySide6.QtCore import QUrl
from PySide6.QtWidgets import QApplication

from inspector.guard.inject import BitFlip
from inspector.gui import app as appmod
from inspector.gui.panes import run_guard_model

pytest_plugins = ("gui_fixtures",)  # fixtures: window


def _open(window, qtbot, run):
    pane = window.open_run(run)
    qtbot.waitUntil(lambda: pane.metrics is not None and pane.model.rowCount() == 2
                    and pane.model.rows[0].state is not None, timeout=LOAD_TIMEOUT_MS)
    return pane


def _cells(table):
    return [[table.item(r, c).text() for c in range(table.columnCount())]
            for r in range(table.rowCount())]


def test_charts_show_loss_and_grad_norm_with_alarm_and_checkpoint_marks(window, qtbot,
                                                                        tmp_path, artifacts):
    pane = _open(window, qtbot, guarded_run(tmp_path / "run"))
    for signal in ("loss", "grad_norm"):
        [(rank, item)] = pane.charts.curves[signal]
        x, y = item.getData()
        assert rank == 0 and list(x) == list(range(12))
        assert math.isnan(y[6]) and all(math.isfinite(v) for i, v in enumerate(y) if i != 6)
        marks = {(m.time, m.role, m.label) for m in pane.charts.marks[signal].marks}
        assert marks == {(6.0, "bad", "loss-nonfinite"), (8.0, "warn", "sample-duplicated"),
                         (4.0, "mark", "ckpt"), (10.0, "mark", "ckpt")}
    nan_alarm, dup_alarm = _cells(pane.alarms)
    header = run_guard_model.ALARM_COLUMNS
    row = dict(zip(header, nan_alarm, strict=True))
    assert row["Step"] == "6" and row["Rule"] == "loss-nonfinite" and row["Value"] == "nan"
    assert row["Action"] == "skip" and row["Attribution"] == "reproducible"
    assert row["First non-finite parameters"].startswith("0.weight, 0.bias")
    assert dict(zip(header, dup_alarm, strict=True))["Rule"] == "sample-duplicated"
    # no GPU here and a reproducible alarm: the pane says so in one line
    assert pane.telemetry.text() == run_guard_model.NO_TELEMETRY
    [order] = _cells(pane.order)
    row = dict(zip(run_guard_model.ORDER_COLUMNS, order, strict=True))
    assert row["Steps recorded"] == "12" and row["Steps"] == "0–11"
    assert row["Worker seeds (torch)"] == "w0: 1234, w1: 1235"
    assert row["Duplicated"] == "1" and row["Wrong after resume"] == "0"
    assert "12 steps on 1 rank; 2 alarms, 1 of them on the data order" in \
        pane.guard_line.text()
    window.grab().save(str(artifacts / "gui" / "run-guard.png"))


def test_a_transient_alarm_shows_the_gpu_state_the_guard_recorded(window, qtbot, tmp_path,
                                                                  monkeypatch):
    install(monkeypatch, FakeNvml([FakeGpu(0)]))
    flip = BitFlip(step=5, param="0.bias", index=1, bit=30)  # first run only: transient
    pane = _open(window, qtbot, guarded_run(tmp_path / "run", faults=(flip,)))
    [row] = [r for r in _cells(pane.alarms) if r[0] == "5"]
    assert row[6] == "transient" and row[9].startswith("GPU 0 ")
    assert pane.telemetry.text().startswith("GPU telemetry at alarms: step 5: GPU 0 ")
    assert re.search(r"\b\d+ XIDs?\b", pane.telemetry.text())


def test_a_run_without_the_guard_says_so(window, qtbot, tmp_path):
    run = guarded_run(tmp_path / "run")
    for sub in ("guard", "order"):
        for f in (run / sub).iterdir():
            f.unlink()
    pane = _open(window, qtbot, run)
    # the journal still names the files: each missing one is a problem, not a crash
    assert "the guard's metrics file is missing" in pane.guard_line.text()
    assert pane.charts.curves["loss"] == [] and pane.order.rowCount() == 0
    assert pane.alarms.rowCount() == 2
    # no curve: no empty 0-1 axes in their place
    assert pane.charts.shown() == [] and not pane.charts.isVisible()


def test_a_run_the_guard_never_saw_hides_its_charts_and_links_the_guide(window, qtbot,
                                                                        tmp_path):
    import torch

    from inspector.ledger import save

    for step in (1, 2):  # a run with checkpoint saves only: the guard was never on
        save({"w": torch.ones(4) * step}, tmp_path / f"step-{step}.pt", step=step,
             run_dir=tmp_path)
    pane = _open(window, qtbot, tmp_path)
    assert not pane.metrics.recorded
    assert pane.charts.shown() == [] and not pane.charts.isVisible()
    assert not pane.alarms.isVisible() and not pane.order.isVisible()
    link = QUrl(re.search(r'href="([^"]+)"', pane.guard_line.text()).group(1))
    assert pane.guard_line.openExternalLinks()
    assert link.isLocalFile() and Path(link.toLocalFile()).read_text().startswith(
        "# Training guard")


@pytest.mark.timeout(300)
def test_run_pane_screenshots(window, qtbot, tmp_path, artifacts, monkeypatch):
    # a fake GPU and a transient fault at step 5, so the GPU-state line has something to show
    install(monkeypatch, FakeNvml([FakeGpu(0)]))
    flip = BitFlip(step=5, param="0.bias", index=1, bit=30)
    pane = _open(window, qtbot, guarded_run(tmp_path / "run", faults=(flip,)))
    shots = artifacts / "screens"
    shots.mkdir(parents=True, exist_ok=True)
    try:
        for theme in ("light", "dark"):
            appmod.set_theme(theme)
            for width, height in ((1280, 720), (1920, 1080)):
                window.resize(width, height)
                QApplication.processEvents()
                qtbot.wait(50)
                assert window.tabs.currentWidget() is pane
                assert window.grab().save(str(shots / f"run-guard-{width}x{height}-{theme}.png"))
    finally:
        appmod.set_theme("system")
