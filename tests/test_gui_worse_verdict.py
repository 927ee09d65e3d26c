"""Every answer true at a glance (issue 24): a damaged file never shows a green check (list,
badges, What to do); safetensors gets its own words and no Convert; Compare With says "this
file / other file"; a parent folder of two models is one entry per model; a finding's CLI
advice is an action in the app; the first NaN's position in the Tensors pane.

The files are real: built by torch in a child process (`gui_support.build(..., "damage")`),
scanned and loaded by the real pipeline and sandbox worker."""

from __future__ import annotations

import shutil
from dataclasses import replace

import pytest
from gui_support import LOAD_TIMEOUT_MS, build, flip_exponent_bit, wait_loaded
from PySide6.QtCore import QUrl
from PySide6.QtGui import QColor

from inspector.gui import roles
from inspector.gui.action_reasons import ALREADY_SAFETENSORS
from inspector.gui.document import FileDocument, distinct_names
from inspector.gui.panes.integrity_pane import RESULT_COLUMNS
from inspector.gui.panes.tensors_pane import FIRST_NONFINITE, element_text
from inspector.gui.pipeline import expand_paths, model_folders
from inspector.gui.verdict_style import VERDICTS
from inspector.gui.widgets.evidence import actionable_message
from inspector.scan.result import Finding

pytest_plugins = ("gui_fixtures",)  # fixtures: window, small

GREEN = QColor(VERDICTS["safe"].colour)


@pytest.fixture(scope="module")
def damage(tmp_path_factory):
    """NaN, flipped-bit, CRC-damaged, truncated and safetensors files and a parent folder of
    two models (`parent/alpha/tiny-gpt`, `parent/beta/tiny-gpt`, two .bin shards each)."""
    folder = tmp_path_factory.mktemp("damage")
    build(folder, "damage")
    return folder


def green_share(icon) -> float:
    """The share of an icon's opaque pixels in the safe badge's green."""
    image = icon.pixmap(32, 32).toImage()
    opaque = green = 0
    for y in range(image.height()):
        for x in range(image.width()):
            c = image.pixelColor(x, y)
            if c.alpha() > 200:
                opaque += 1
                green += abs(c.red() - GREEN.red()) + abs(c.green() - GREEN.green()) + abs(
                    c.blue() - GREEN.blue()) < 40
    return green / max(1, opaque)


def open_one(window, qtbot, path, states=("loaded",)) -> FileDocument:
    (doc,) = window.open_paths([path])
    wait_loaded(qtbot, doc, states)
    return doc


def advice(window) -> str:
    """The Overview's first "What to do" paragraph."""
    return window.overview.findings.toPlainText().split("What to do", 1)[1].strip()


@pytest.mark.parametrize("name", ["nan.pt", "flipped.pt"])
def test_damaged_weights_never_show_a_green_check(window, qtbot, damage, name):
    doc = open_one(window, qtbot, damage / name)
    qtbot.waitUntil(lambda: doc.health is not None, timeout=LOAD_TIMEOUT_MS)
    assert doc.health.status == "problem" and doc.verdict == "safe"
    item = window.file_list.item(0)
    assert green_share(item.icon()) < 0.02  # the list: corrupted weights, no green at all
    assert item.toolTip().splitlines()[1].startswith("Weights corrupted")
    overview = window.overview
    assert overview.banner.accessibleName() == "Code safety: No code found"
    assert "✓" not in overview.banner.title.text() and "Safe" not in overview.banner.title.text()
    assert overview.health_banner.accessibleName() == "Weights health: Weights corrupted"
    words = advice(window)
    assert words.startswith("Do not use these weights")
    assert overview.findings.toPlainText().count("Do not use these weights") == 1  # said once
    assert "weights_only=True" not in words and "Convert it to safetensors" not in words


def test_a_crc_damaged_file_reads_damaged(window, qtbot, damage):
    doc = open_one(window, qtbot, damage / "crc.pt")
    assert [f.code for f in doc.scan.findings] == ["zip-crc-mismatch"]
    assert window.file_list.item(0).toolTip().splitlines()[1].startswith("Damaged")
    assert green_share(window.file_list.item(0).icon()) < 0.02
    assert window.overview.banner.accessibleName() == "Code safety: Damaged"
    assert advice(window).startswith("Get the file again")
    _findings_say_damaged(window, "zip-crc-mismatch")


def _findings_say_damaged(window, code: str) -> None:
    """The finding itself carries the damage word and the damage advice, never the code-risk
    word or the advice to allow globals."""
    text = window.overview.findings.toPlainText()
    assert f"DAMAGED {code}" in text
    assert "SUSPICIOUS" not in text and "named globals allowed" not in text


def test_a_truncated_file_is_not_called_clean(window, qtbot, damage):
    doc = open_one(window, qtbot, damage / "truncated.pt", ("error",))
    assert doc.verdict == "error"
    assert green_share(window.file_list.item(0).icon()) < 0.02
    text = window.overview.findings.toPlainText()
    assert "no structural problem" not in text
    assert window.overview.banner.accessibleName() == "Code safety: Damaged"
    assert advice(window).startswith("Get the file again")
    _findings_say_damaged(window, "zip-truncated")


def test_safetensors_gets_its_own_words_and_no_convert(window, qtbot, damage):
    open_one(window, qtbot, damage / "model.safetensors")
    overview = window.overview
    assert overview.banner.title.text() == "Safe — safetensors holds no code"
    words = advice(window)
    assert "safetensors.torch.load_file" in words
    assert "torch.load" not in words.replace("safetensors.torch.load_file", "")
    assert "pickle" not in overview.banner.subtitle.text().replace("no pickle", "")
    assert overview.fields["weights_only"].text().startswith("not used: safetensors")
    assert "no risky import" not in overview.findings.toPlainText()
    assert not window.act_convert.isEnabled()
    assert window.act_convert.toolTip() == ALREADY_SAFETENSORS
    tools = {a.text(): a for a in window.tools_menu.actions()}
    assert not tools["Convert to &safetensors…"].isEnabled()


def test_compare_with_says_this_file_and_other_file(window, qtbot, small, tmp_path):
    folder, _ = small
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(folder / "benign.pt", work / "model.pt")
    flip_exponent_bit(folder / "benign.pt", work / "good-copy.pt")
    doc = open_one(window, qtbot, work / "model.pt")
    window.tabs.setCurrentWidget(window.integrity)
    assert "Not verified yet" in window.integrity.summary.toPlainText()
    window.integrity.compare_with(work / "good-copy.pt")
    qtbot.waitUntil(lambda: doc.diff is not None, timeout=LOAD_TIMEOUT_MS)
    text = window.integrity.summary.toPlainText()
    assert "Differs from" in text and "Not verified yet" not in text  # no stale line above
    headers = [window.integrity.model.headerData(i, roles.HORIZONTAL)
               for i in range(len(RESULT_COLUMNS))]
    assert headers[3:5] == ["This file", "Manifest / other file"]
    assert not any("xpected" in str(h) or h in ("A", "B") for h in headers)
    flip = next(r for r in window.integrity.model.rows if r[1].startswith("bit "))
    assert "of this file" in flip[5] and "of the other file" in flip[5]


def test_a_parent_folder_of_two_models_is_one_entry_per_model(window, qtbot, damage):
    parent = damage / "parent"
    found = expand_paths([parent])
    assert [f.path for f in found] == [parent / "alpha" / "tiny-gpt", parent / "beta" / "tiny-gpt"]
    assert model_folders(parent) == [f.path for f in found]
    docs = window.open_paths([parent])
    assert [d.name for d in docs] == ["alpha/tiny-gpt", "beta/tiny-gpt"]
    # a sharded model has no one SHA-256 (each shard's is in its result): wait for the load
    qtbot.waitUntil(lambda: all(d.state == "loaded" and d.result is not None for d in docs),
                    timeout=LOAD_TIMEOUT_MS)
    rows = [window.file_list.item(i).text() for i in range(window.file_list.count())]
    assert rows == ["alpha/tiny-gpt (2 shards)", "beta/tiny-gpt (2 shards)"]
    assert "every key in exactly one shard" in window.file_list.item(0).toolTip()
    assert all(len(d.tensors) == 4 for d in docs)
    # never elided: a long name wraps at its separators, so folder and name both stay in view
    assert window.file_list.textElideMode().name == "ElideNone" and window.file_list.wordWrap()


def test_distinct_names_keep_alike_file_names_apart(tmp_path):
    a, b, c = tmp_path / "x" / "gpt2", tmp_path / "y" / "gpt2", tmp_path / "y" / "other.pt"
    assert distinct_names([a, b, c]) == ["x/gpt2", "y/gpt2", "other.pt"]
    assert distinct_names([a]) == ["gpt2"]


def test_cli_advice_in_a_finding_becomes_an_action(window, qtbot, small, monkeypatch):
    message = ("CRC-32 of 2 large tensor records not checked (scan budget); run "
               "`ckpt-inspector inspect` for a full check")
    shown = actionable_message(message)
    assert "ckpt-inspector" not in shown and "action:inspect" in shown
    assert "not checked (scan budget)" in shown
    assert actionable_message("run `ckpt-inspector frobnicate` now") == ""
    folder, _ = small
    doc = open_one(window, qtbot, folder / "benign.pt")
    doc.set_scan(replace(doc.scan, findings=[Finding("info", "zip-crc-skipped", message)]))
    page = window.overview.findings.toHtml()
    assert "action:inspect" in page and "ckpt-inspector inspect" not in page
    before = doc.scan
    window.overview.findings.anchorClicked.emit(QUrl("action:inspect"))
    # the full check scans again with every record's CRC-32: the real scan replaces the edit
    qtbot.waitUntil(lambda: doc.scan is not before, timeout=LOAD_TIMEOUT_MS)
    assert doc.scan.verdict == "safe" and doc.scan.findings == []


def test_the_first_nan_position_is_shown_where_the_record_has_it(window, qtbot, small):
    assert element_text(53, [16, 16]) == "[3, 5] (element 53)"
    assert element_text(7, []) == "element 7"
    folder, _ = small
    doc = open_one(window, qtbot, folder / "with_nan.pt")
    window.tabs.setCurrentWidget(window.tensors)
    row = next(r for r in doc.tensors if r["key"] == "bad.weight")
    first = row["first_nonfinite"]  # the sandbox's own record, as it came from the worker
    window.tensors._show_detail(row)
    stats = window.tensors.stats
    labels = {stats.item(i, 0).text(): stats.item(i, 1).text() for i in range(stats.rowCount())}
    assert first == 1  # [1.0, nan, inf, -2.0]
    assert labels[FIRST_NONFINITE] == "[1] (element 1)"
