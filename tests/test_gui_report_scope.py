"""File → Export Report asks what goes in (issue 37): each open checkpoint, the GPU telemetry
and the training run are checkboxes; a telemetry log opened to look at starts unticked, so it
never joins a checkpoint report as a failing problem unless asked for.

Real files: the built-in samples, a replayed nvidia-smi log with an uncorrected ECC error
(`test_gpu_alerts.ecc_then_hot_log`) and a run folder saved by the real ledger."""

from __future__ import annotations

import json

import pytest
from gui_support import LOAD_TIMEOUT_MS
from PySide6.QtWidgets import QApplication, QDialog, QFileDialog
from test_gpu_alerts import ecc_then_hot_log

from inspector.gui.dialogs.report_export import ScopeDialog

pytest_plugins = ("gui_fixtures",)  # fixtures: window


@pytest.fixture
def session(window, qtbot, tmp_path):
    """Two samples open, a telemetry log replayed in the GPU pane, a checked run."""
    import torch

    from inspector.ledger import save

    docs = window.open_samples()
    for doc in docs:
        qtbot.waitUntil(lambda d=doc: d.state in ("loaded", "blocked") and bool(d.sha256),
                        timeout=LOAD_TIMEOUT_MS)
    run = tmp_path / "run"
    save({"w": torch.ones(4)}, run / "step-1.pt", step=1, run_dir=run)
    pane = window.open_run(run)
    qtbot.waitUntil(lambda: pane.summary() is not None, timeout=LOAD_TIMEOUT_MS)
    log = tmp_path / "ecc.csv"
    log.write_text(ecc_then_hot_log())
    window.tabs.setCurrentIndex(next(i for i in range(window.tabs.count())
                                     if window.tabs.tabText(i) == "GPU"))
    qtbot.waitUntil(lambda: window.gpu is not None, timeout=LOAD_TIMEOUT_MS)
    window.gpu.open_log(str(log))
    qtbot.waitUntil(lambda: window.gpu.source_label == str(log), timeout=LOAD_TIMEOUT_MS)
    yield docs, log, run
    window.gpu.shutdown()


def _export(window, qtbot, monkeypatch, out, pick):
    seen: list[ScopeDialog] = []

    def exec_(dialog: ScopeDialog) -> int:
        seen.append(dialog)
        pick(dialog)
        return QDialog.DialogCode.Accepted

    monkeypatch.setattr(ScopeDialog, "exec", exec_)
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(out), ""))
    job = window.export_report()
    qtbot.waitUntil(lambda: not job.running, timeout=LOAD_TIMEOUT_MS)
    return seen[0], json.loads(out.read_text())


def test_the_scope_dialog_lists_checkpoints_telemetry_and_run_as_checkboxes(
        window, qtbot, session, tmp_path, monkeypatch, artifacts):
    docs, log, run = session

    def defaults(dialog):
        texts = [box.text() for box, _doc in dialog.files]
        assert texts == [d.name for d in docs]
        assert dialog.telemetry.isEnabled() and not dialog.telemetry.isChecked()
        assert str(log) in dialog.telemetry.text()
        assert dialog.run.isEnabled() and dialog.run.isChecked()
        dialog.files[1][0].setChecked(False)  # leave the malicious demo out
        for width, height in ((1280, 720), (1920, 1080)):
            window.resize(width, height)
            dialog.show()
            QApplication.processEvents()
            shots = artifacts / "screens"
            shots.mkdir(parents=True, exist_ok=True)
            assert dialog.grab().save(str(shots / f"report-scope-{width}x{height}-light.png"))

    _dialog, report = _export(window, qtbot, monkeypatch, tmp_path / "a.json", defaults)
    assert [f["file"]["name"] for f in report["files"]] == [docs[0].name]
    assert report["telemetry"] is None  # the replayed log stayed out
    assert not any(p.startswith("GPU") for p in report["problems"])
    assert [r["journal"] for r in report["runs"]] == [str(run / "journal.jsonl")]

    def everything(dialog):
        dialog.telemetry.setChecked(True)
        dialog.run.setChecked(False)

    _dialog, report = _export(window, qtbot, monkeypatch, tmp_path / "b.json", everything)
    assert report["runs"] == []
    assert len(report["telemetry"]["gpus"]) == 2  # asked for: both GPUs of the log are in
