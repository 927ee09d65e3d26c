"""A GGUF file in the desktop app: the normal pipeline (scan, jailed load, statistics) fills
the Tensors pane with its dense tensors' statistics."""

from __future__ import annotations

import pytest
from gui_support import wait_loaded

pytest_plugins = ("gui_fixtures",)  # fixtures: window, gui_settings

gguf = pytest.importorskip("gguf", reason="gguf (llama.cpp's Python package) is in the dev extra")


def test_the_tensors_pane_shows_a_gguf_files_statistics(window, qtbot, tmp_path,
                                                        artifacts) -> None:
    from test_format_gguf import _write

    path = tmp_path / "model.gguf"
    dense = _write(path)
    (doc,) = window.open_paths([path])
    wait_loaded(qtbot, doc)
    pane = window.tensors
    qtbot.waitUntil(lambda: pane.model.rowCount() == len(dense) + 2, timeout=10_000)
    rows = {r["key"]: r for r in pane.model.visible_rows()}
    assert rows.keys() == {*dense, "q8", "q4"}  # quantized: raw blocks, a digest, no statistics
    assert rows["q4"].get("min") is None
    assert rows["i32"]["max"] == 5000 and rows["i32"]["min"] == 0
    assert rows["bf16"]["min"] == -2.0 and rows["bf16"]["max"] == 3.25
    window.resize(1280, 720)
    window.tabs.setCurrentWidget(pane)
    window.grab().save(str(artifacts / "gui" / "gguf-tensors.png"))
    # the overview's advice is GGUF's own, never torch.load's
    window.tabs.setCurrentWidget(window.overview)
    page = window.overview.findings.toPlainText()
    assert "llama.cpp" in page and "torch.load" not in page, page
    fields = window.overview.fields
    assert fields["weights_only"].text() == "not used: gguf is read without torch.load or pickle"
    assert "weights_only" not in fields["state"].text()
    window.grab().save(str(artifacts / "gui" / "gguf-overview.png"))
