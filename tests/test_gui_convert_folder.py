"""Convert in the app takes a sharded folder as the CLI's `convert DIR` does (issue 37): a folder
of two torch shards and their index becomes two verified safetensors shards and a checked
`model.safetensors.index.json`, the same bytes the CLI writes, with progress by shard; Cancel
stops it and leaves no file behind.

The folder is real: torch.save shards and a transformers-style index
(`gui_support.build(..., "damage")`, `parent/alpha/tiny-gpt`), loaded by the real pipeline and
converted by the real jailed worker."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading

import pytest
from gui_support import LOAD_TIMEOUT_MS, build
from PySide6.QtCore import QPoint
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QApplication

from inspector.checkpoint.results import FolderConversion
from inspector.gui.dialogs.convert_dialog import ConvertDialog

pytest_plugins = ("gui_fixtures",)  # fixtures: window

SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
INDEX = "model.safetensors.index.json"


@pytest.fixture
def model(tmp_path_factory, tmp_path):
    """A fresh copy of a folder of two .bin shards and pytorch_model.bin.index.json."""
    built = tmp_path_factory.mktemp("convert-folder")
    build(built, "damage")
    folder = tmp_path / "tiny-gpt"
    shutil.copytree(built / "parent" / "alpha" / "tiny-gpt", folder)
    return folder


def open_folder(window, qtbot, folder):
    (doc,) = window.open_paths([folder])
    # a sharded model has no one SHA-256 (each shard's is in its result): wait for the load
    qtbot.waitUntil(lambda: doc.state == "loaded" and doc.result is not None,
                    timeout=LOAD_TIMEOUT_MS)
    assert window.act_convert.isEnabled()
    return doc


def test_a_sharded_folder_converts_to_verified_shards_and_an_index(window, qtbot, model,
                                                                   tmp_path, artifacts):
    doc = open_folder(window, qtbot, model)
    dialog = ConvertDialog(doc, window.pipeline, window)
    assert dialog.sharded and dialog.output.text() == str(model)  # beside the shards
    seen: list[dict] = []
    job = dialog.start()
    job.events.connect(seen.extend)
    qtbot.waitUntil(lambda: dialog.result is not None, timeout=LOAD_TIMEOUT_MS * 2)
    result = dialog.result
    assert isinstance(result, FolderConversion)
    assert [p.split("/")[-1] for p in result.outputs] == list(SHARDS)
    assert result.output_index == str(model / INDEX) and (model / INDEX).is_file()
    assert all(s.verified for s in result.shards) and result.tensors_written == 4
    assert [e["number"] for e in seen if e.get("type") == "shard"] == [1, 2]
    assert dialog.stage.text() == "Done" and "Verified" in dialog.report.toPlainText()
    assert dialog._output_path() == str(model / INDEX)  # Open Result opens the new index
    # the CLI on the same input writes the same shards and the same index, byte for byte
    cli_out = tmp_path / "cli"
    run = subprocess.run([sys.executable, "-m", "inspector", "convert", str(model / (
        "pytorch_model.bin.index.json")), "-o", str(cli_out)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    for name in (*SHARDS, INDEX):
        assert (cli_out / name).read_bytes() == (model / name).read_bytes(), name
    # the folder's report carries the conversion, in words
    report = tmp_path / "report.html"
    window.write_report(report, [doc])
    qtbot.waitUntil(report.exists, timeout=LOAD_TIMEOUT_MS)
    section = report.read_text().split('data-section="conversion"', 1)[1].split("</section>")[0]
    text = re.sub(r"<[^>]+>", " ", section.replace("<wbr>", ""))
    assert "Index written" in text and str(model / INDEX) in text
    assert all(name in text for name in SHARDS) and text.count("yes, checked here") == 2
    assert "No conversion was run" not in text
    assert not re.search(r"\b(True|False|None|output_index|tensors_written)\b", text), text
    window.resize(1280, 720)
    for width, height in ((1280, 720), (1920, 1080)):
        window.resize(width, height)
        QApplication.processEvents()
        qtbot.wait(80)
        picture = window.grab()
        dialog.adjustSize()
        painter = QPainter(picture)
        painter.drawPixmap(QPoint((width - dialog.width()) // 2, (height - dialog.height()) // 2),
                           dialog.grab())
        painter.end()
        shots = artifacts / "screens"
        shots.mkdir(parents=True, exist_ok=True)
        assert picture.save(str(shots / f"convert-folder-{width}x{height}-light.png"))


def test_cancel_stops_a_folder_conversion_and_leaves_no_file(window, qtbot, model,
                                                            monkeypatch):
    from inspector.sandbox.host import client

    doc = open_folder(window, qtbot, model)
    before = sorted(p.name for p in model.iterdir())
    # each shard converts for real; after the first the job waits until Cancel was pressed,
    # so the cancel lands between two shards whatever the machine's speed
    pressed = threading.Event()
    real = client.convert_file

    def convert_then_wait(*args, **kwargs):
        result = real(*args, **kwargs)
        pressed.wait(60)
        return result

    monkeypatch.setattr(client, "convert_file", convert_then_wait)
    dialog = ConvertDialog(doc, window.pipeline, window)
    job = dialog.start()
    qtbot.waitUntil(lambda: dialog.shard[0] >= 1, timeout=LOAD_TIMEOUT_MS)
    qtbot.waitUntil(lambda: (model / SHARDS[0]).exists(), timeout=LOAD_TIMEOUT_MS)
    dialog.cancel_button.click()
    pressed.set()
    qtbot.waitUntil(lambda: not job.running, timeout=LOAD_TIMEOUT_MS)
    assert dialog.result is None and dialog.stage.text() == "Failed"
    assert "Cancelled" in dialog.report.toPlainText()
    assert sorted(p.name for p in model.iterdir()) == before  # the first shard is gone too
    assert dialog.convert_button.isEnabled()  # it can be started again
