"""The loader's unique-storage count is said to be its word in every view that shows it.

Nothing in the user's process reads a torch file's storages (they are its pickle's), so the
count of elements and bytes with tied or shared storage counted once is the jailed loader's
alone (`checkpoint.contents.UNIQUE_WORD`): the report's JSON carries that beside the figures,
its HTML (and so its PDF) row says it, and so do the app's Overview and Tensors panes
(screenshots in tests/artifacts/gui/).
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import torch
from gui_support import wait_loaded

from inspector.checkpoint.contents import UNIQUE_WORD
from inspector.cli import main
from inspector.gui.panes.overview_pane import Row
from inspector.report.render_json import load_schema

pytest_plugins = ("gui_fixtures",)  # fixtures: window


def _tied(path: Path) -> Path:
    """Two keys sharing one 16x16 weight's storage, and a bias: 272 unique of 528 elements."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(16, 16, generator=g)
    torch.save({"embed.weight": w, "head.weight": w, "head.bias": torch.randn(16, generator=g)},
               path)
    return path


def test_the_report_says_whose_word_the_unique_storage_is(tmp_path, fast_env) -> None:
    path = _tied(tmp_path / "tied.pt")
    out, html = tmp_path / "r.json", tmp_path / "r.html"
    main(["report", str(path), "-o", str(out), "--quiet"])
    doc = json.loads(out.read_text())
    jsonschema.Draft202012Validator(load_schema()).validate(doc)
    tensors = doc["files"][0]["tensors"]
    assert (tensors["parameters"], tensors["unique_parameters"]) == (528, 272)
    assert tensors["unique_unchecked"] == UNIQUE_WORD
    main(["report", str(path), "-o", str(html), "--quiet"])
    row = html.read_text().split("Unique storage (tied weights once)", 1)[1].split("</tr>")[0]
    assert "272 elements" in row and UNIQUE_WORD in row


def test_the_app_says_whose_word_the_unique_storage_is(window, qtbot, tmp_path, artifacts):
    (doc,) = window.open_paths([_tied(tmp_path / "tied.pt")])
    wait_loaded(qtbot, doc)
    window.resize(1200, 760)
    contents = window.overview.fields[Row.CONTENTS].text()
    assert "272 unique: tied or shared storage counted once" in contents
    assert UNIQUE_WORD in contents
    window.tabs.setCurrentWidget(window.overview)
    # the document is whole before the pipeline's last job ends: grab the window at rest
    qtbot.waitUntil(lambda: window.stage_label.text() == "Ready", timeout=20000)
    assert window.grab().save(str(artifacts / "gui" / "unique-storage-overview.png"))
    window.tabs.setCurrentWidget(window.tensors)
    qtbot.waitUntil(lambda: "3 tensors" in window.tensors.summary_label.text(), timeout=10000)
    summary = window.tensors.summary_label.text()
    # one line beside the counts (a second would take the table's height), in full on hover
    assert "unique storage 272 elements, 1,088 bytes (the loader's count, not checked here)" in (
        summary)
    assert UNIQUE_WORD in window.tensors.summary_label.toolTip()
    label = window.tensors.summary_label
    qtbot.waitUntil(lambda: label.height() >= label.heightForWidth(label.width()))  # wrapped
    assert window.grab().save(str(artifacts / "gui" / "unique-storage-tensors.png"))
