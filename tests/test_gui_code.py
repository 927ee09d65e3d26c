"""The app shows the code a TorchScript archive carries (what torch.jit.load would run): the
Overview's Code row counts the files and flags, and its dialog shows each file as plain text
with flagged lines marked (screenshots in tests/artifacts/gui/).

The archives are built by a child Python (`gui_support.build(..., "code")`): a scripted
module, and copies whose code/ was edited to call `os.system` or to hold HTML and a BiDi
override in a comment.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from gui_support import build, each_theme, wait_loaded
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QApplication, QPlainTextEdit

pytest_plugins = ("gui_fixtures",)  # fixtures: window


@pytest.fixture(scope="module")
def archives(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("gui-code")
    build(folder, "code")
    return folder


def _open(window, qtbot, path: Path):
    (doc,) = window.open_paths([path])
    wait_loaded(qtbot, doc)
    window.overview.set_document(doc)
    return doc


def test_a_scripted_module_lists_its_code_files_without_flags(window, qtbot, archives):
    doc = _open(window, qtbot, archives / "scripted.pt")
    names = [c["name"] for c in doc.result.code]
    assert names and all(n.startswith("code/") for n in names)
    overview = window.overview
    assert overview.fields["code"].isVisible()
    assert overview.fields["code"].text().startswith(f"{len(names)} files · no flags")
    overview.code_button.click()
    dialog = overview.code_dialog
    assert [dialog.list.item(i).text().split(" (")[0] for i in range(dialog.list.count())] == names
    assert "def forward" in dialog.text.toPlainText()
    assert dialog.marked == [] and dialog.text.extraSelections() == []
    assert dialog.text.isReadOnly()
    dialog.close()
    # nothing was unpickled or run: the words say so instead of the pickle wording
    assert overview.banner.title.text().startswith("Suspicious — it carries code")
    assert "none of its code ran" in overview.fields["state"].text()
    assert overview.fields["weights_only"].text().startswith("not used")
    page = overview.findings.toPlainText()
    # TorchScript in words: the one plain finding, no list of its own torch.nn classes
    assert "named globals allowed" not in page and "Offending imports" not in page
    assert "no file, process or network operation found" in page


def test_os_system_in_code_is_flagged_at_a_glance_and_marked(window, qtbot, archives,
                                                            artifacts):
    doc = _open(window, qtbot, archives / "os_system.pt")
    flagged = next(c for c in doc.result.code if c["flags"])
    overview = window.overview
    assert overview.fields["code"].text().endswith(
        f"1 flag: {flagged['name']} names the Python module os")
    overview.code_button.click()
    dialog = overview.code_dialog
    # it opens on the flagged file, with the os.system line (and only that one) marked
    assert dialog.list.currentItem().text().startswith("⚠ 1 flag · " + flagged["name"])
    lines = dialog.text.toPlainText().split("\n")
    assert [lines[i].strip() for i in dialog.marked] == ['os.system("true")']
    assert len(dialog.text.extraSelections()) == 1
    assert "names the Python module os" in dialog.flags.text()
    # at the screenshot's size the flagged file's path fits the list whole (its size is in
    # the tooltip); a longer one is elided, never scrolled out of sight
    dialog.resize(900, 560)
    QApplication.processEvents()
    item = dialog.list.currentItem()
    assert not dialog.list.horizontalScrollBar().isVisible()
    assert dialog.list.fontMetrics().horizontalAdvance(item.text()) < (
        dialog.list.viewport().width())
    assert item.toolTip().split("\n") == [f"{flagged['name']} ({flagged['size']:,} bytes)",
                                           "names the Python module os"]
    shots = artifacts / "gui"
    window.resize(1280, 720)
    try:
        for theme in each_theme(qtbot):
            assert window.grab().save(str(shots / f"overview-code-{theme}-1280x720.png"))
            dialog.resize(900, 560)
            picture = window.grab()
            painter = QPainter(picture)  # offscreen, the dialog is its own window
            painter.drawPixmap((1280 - 900) // 2, (720 - 560) // 2, dialog.grab())
            painter.end()
            assert picture.save(str(shots / f"code-dialog-{theme}-1280x720.png"))
    finally:
        dialog.close()


def test_markup_and_bidi_in_code_are_shown_as_escaped_text(window, qtbot, archives):
    doc = _open(window, qtbot, archives / "tricky.pt")
    overview = window.overview
    overview.code_button.click()
    dialog = overview.code_dialog
    row = next(i for i, c in enumerate(doc.result.code) if "<b>bold</b>" in c["text"])
    dialog.list.setCurrentRow(row)
    shown = dialog.text.toPlainText()
    # the markup is literal text (a plain-text view), the override a visible escape
    assert "# <b>bold</b> \\u202e <script>x</script>" in shown
    assert "\u202e" not in shown
    assert isinstance(dialog.text, QPlainTextEdit)
    dialog.close()
