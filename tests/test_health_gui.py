"""The window's two badges: NaN weights are safe code with a weights problem; a CRC-damaged
file is shown as damaged, never as a permissions question (screenshots in tests/artifacts/gui/)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import factories
import pytest
import torch
from gui_support import wait_loaded

pytest_plugins = ("gui_fixtures",)  # fixtures: window


def _nan_checkpoint(path: Path) -> Path:
    weight = torch.randn(16, 16)
    weight[3, 3] = float("nan")
    torch.save({"fc.weight": weight, "fc.bias": torch.zeros(16)}, path)
    return path


def test_nan_checkpoint_is_safe_code_and_a_weights_problem(window, qtbot, tmp_path, artifacts):
    (doc,) = window.open_paths([_nan_checkpoint(tmp_path / "nan.pt")])
    wait_loaded(qtbot, doc)
    qtbot.waitUntil(lambda: doc.health is not None, timeout=5000)
    overview = window.overview
    # no code, but no green check beside damaged weights: the worse verdict leads
    assert overview.banner.title.text() == "No code found — but the weights are damaged"
    assert overview.banner.accessibleName() == "Code safety: No code found"
    assert overview.health_banner.accessibleName() == "Weights health: Weights corrupted"
    assert overview.health_banner.title.text() == "Weights are corrupted or diverged"
    assert "fc.weight" in overview.health_banner.subtitle.text()
    findings = overview.findings.toPlainText()
    assert "NaN" in findings
    advice = findings.split("What to do", 1)[1].strip()
    assert advice.startswith("Do not use these weights") and "weights_only=True" not in advice
    assert "unique storage 272 elements, 1,088 bytes" in window.tensors.summary_label.text()
    item = window.file_list.item(0)
    assert "Weights corrupted; No code found" in item.toolTip()
    window.resize(1100, 700)
    assert window.grab().save(str(artifacts / "gui" / "health-nan-window.png"))


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_crc_damaged_file_is_named_damaged_not_asked_about(window, qtbot, tmp_path, artifacts):
    path = factories.crc_damaged(tmp_path / "damaged.pt")
    (doc,) = window.open_paths([path])
    wait_loaded(qtbot, doc)
    overview = window.overview
    assert doc.scan.verdict == "suspicious"
    assert not overview.decision.isVisible()
    assert overview.banner.title.text().startswith("Damaged")
    assert overview.banner.accessibleName() == "Code safety: Damaged"
    detail = overview.banner.subtitle.text()
    assert "CRC-32" in detail and "does not match" in detail and "damaged/data/0" in detail
    text = overview.findings.toPlainText()
    assert "allow" not in text.lower() and "decision" not in text.lower()
    assert overview.fields["sha256"].text() == hashlib.sha256(path.read_bytes()).hexdigest()
    window.resize(1100, 700)
    assert window.grab().save(str(artifacts / "gui" / "health-crc-damaged-window.png"))
