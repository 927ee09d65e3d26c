"""The app's Consistency pane shows only what `run_consistency` has checked: a lying worker's
device, fault and runs never stand beside a verdict (the answer is refused and what its events
drew is taken away), each run is marked the jailed worker's word while it arrives, and at the
end the runs plotted are the checked answer's and the device line is the answer's.

Lies run as hostile code inside a real `consistency` job (the jail's self-test hook); the
honest twin runs the same file; screenshots go to tests/artifacts/gui/.
"""

from __future__ import annotations

import threading

import pytest
import torch
from test_rt57_consistency_events import _lie, _raw_events

from inspector.gui.panes.consistency_pane import LIVE_WORD, WORKER_WORD, ConsistencyPane

pytest_plugins = ("gui_fixtures",)


@pytest.fixture
def ckpt(tmp_path):
    g = torch.Generator().manual_seed(0)
    path = tmp_path / "c.pt"
    torch.save({"w": torch.randn(16, 16, generator=g), "b": torch.randn(16, generator=g)}, path)
    return path


def _pane(qtbot, path, **options) -> ConsistencyPane:
    pane = ConsistencyPane(**options)
    qtbot.addWidget(pane)
    pane.resize(1100, 760)
    pane.show()
    pane.set_file(str(path))
    pane.device.setCurrentText("cpu")
    pane.repeats.setValue(3)
    return pane


def _run(qtbot, pane: ConsistencyPane) -> None:
    assert pane.start() is not None
    qtbot.waitUntil(lambda: pane.job is None, timeout=240_000)


def _plotted(pane: ConsistencyPane) -> list[float]:
    ys = pane.diff_curve.getData()[1]
    return [] if ys is None else [float(y) for y in ys]


def _shot(qtbot, pane: ConsistencyPane, path) -> None:
    """Save the pane once the word-wrapped verdict has the height its text needs."""
    label = pane.verdict
    qtbot.waitUntil(lambda: label.height() >= label.heightForWidth(label.width()))
    pane.grab().save(str(path))


def _title(pane: ConsistencyPane, name: str) -> str:
    return pane.plots[name].titleLabel.text


def test_a_lying_workers_events_never_stand_beside_a_verdict(qtbot, ckpt, hostile,
                                                               artifacts) -> None:
    hostile(_lie(device=True, inject=True, runs=True))
    raw = _raw_events(ckpt)
    assert any(e.get("type") == "injected" for e in raw)  # the lies, as the worker sends them
    assert any("H100" in str(e.get("label")) for e in raw)
    pane = _pane(qtbot, ckpt)
    _run(qtbot, pane)
    assert pane.result is None
    assert "live events do not agree" in pane.verdict.text()
    assert "CONSISTENT" not in pane.verdict.text()
    assert pane.device_label.text() == "" and pane._marks == [] and _plotted(pane) == []
    _shot(qtbot, pane, artifacts / "gui" / "consistency_events_refused.png")


def test_an_honest_run_plots_its_checked_runs_and_its_device(qtbot, ckpt, artifacts) -> None:
    pane = _pane(qtbot, ckpt)
    _run(qtbot, pane)
    assert pane.verdict.text().startswith("CONSISTENT: 3 runs on CPU"), pane.verdict.text()
    assert pane.device_label.text() == "Device: CPU"
    assert _plotted(pane) == [0.0, 0.0, 0.0]
    assert "jailed worker" not in _title(pane, "diff")  # 0 is what the checked rows say
    _shot(qtbot, pane, artifacts / "gui" / "consistency_events_honest.png")


def test_a_self_test_marks_the_fault_and_says_whose_runs_they_are(qtbot, ckpt,
                                                                   artifacts) -> None:
    pane = _pane(qtbot, ckpt)
    pane.inject_box.setChecked(True)
    pane.inject_key.setText("w")
    pane.inject_index.setValue(5)
    pane.inject_bit.setValue(30)
    pane.inject_run.setValue(2)
    _run(qtbot, pane)
    assert pane.verdict.text().startswith("SELF-TEST PASSED"), pane.verdict.text()
    assert len(pane._marks) == len(pane.plots)
    assert WORKER_WORD in _title(pane, "diff") and WORKER_WORD in _title(pane, "count")
    _shot(qtbot, pane, artifacts / "gui" / "consistency_events_self_test.png")


def _answer(spec, iterations: list[dict]) -> dict:
    row = {"key": "w", "status": "pass", "repeats": 3, "repeat_mismatches": 0,
           "max_abs_diff": 0.0, "roundtrip_ok": True}
    return {"mode": "probe", "consistent": True, "device": "cpu", "device_label": "CPU",
            "repeats": 3, "tensors": [row], "iterations": iterations,
            "claims": {"checked": True, "tensors": 2}}


def test_live_runs_are_marked_and_replaced_by_the_checked_ones(qtbot, ckpt) -> None:
    release = threading.Event()
    runs = [{"type": "iteration", "phase": "probe", "iteration": i, "mismatched": 0,
             "max_abs_diff": 0.0, "seconds": 0.001} for i in (1, 2, 3)]

    def run_fn(spec, on_event, cancel):
        on_event({"type": "device", "device": "cpu", "label": "CPU", "checked": True})
        for run in runs:  # the worker's word as it arrives: not the numbers checked at the end
            on_event({**run, "max_abs_diff": 2.0, "checked": False})
        release.wait(60)
        return _answer(spec, runs)

    pane = _pane(qtbot, ckpt, run_fn=run_fn)
    assert pane.start() is not None
    qtbot.waitUntil(lambda: _plotted(pane) == [2.0] * 3, timeout=60_000)
    assert LIVE_WORD in _title(pane, "diff") and LIVE_WORD in _title(pane, "count")
    release.set()
    qtbot.waitUntil(lambda: pane.job is None, timeout=60_000)
    assert _plotted(pane) == [0.0, 0.0, 0.0] and LIVE_WORD not in _title(pane, "diff")
