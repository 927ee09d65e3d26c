"""Layout (issue 37): the file list keeps the width it was given whatever the selection and the
window's size, and wraps long names at their separators, never mid-word; the Tensors pane
puts problem rows first by default and its columns fit a 1280×720 window, as do the Compare
results' columns.

The files are real: torch.save's bytes scanned and loaded by the real pipeline and worker
(`gui_support.build`), a NaN tensor placed last in the file so file order hides it."""

from __future__ import annotations

import shutil

import pytest
from gui_support import LOAD_TIMEOUT_MS, build, flip_exponent_bit, wait_loaded
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from inspector.gui.widgets.file_list import BREAK, break_at_separators

pytest_plugins = ("gui_fixtures",)  # fixtures: window, small

SIZES = ((1280, 720), (1920, 1080))


@pytest.fixture(scope="module")
def damage(tmp_path_factory):
    folder = tmp_path_factory.mktemp("layout")
    build(folder, "damage")
    return folder


def key(i: int) -> str:
    return f"model.decoder.layers.{i:02d}.self_attn.q_proj.weight"


def nan_last(path):
    """Forty healthy tensors with a transformer's long keys and six-digit element counts,
    then one holding a NaN: the problem row is last in file order."""
    import torch

    g = torch.Generator().manual_seed(37)
    tensors = {key(i): torch.randn(320, 320, generator=g) * 1e3 for i in range(40)}
    tensors["zz_head.weight"] = torch.randn(320, 320, generator=g)
    tensors["zz_head.weight"][2, 3] = float("nan")
    torch.save(tensors, path)
    return path


def settle(qtbot, ms: int = 80) -> None:
    QApplication.processEvents()
    qtbot.wait(ms)


def test_the_file_list_keeps_its_width_whatever_is_selected(window, qtbot, damage, small,
                                                            tmp_path, artifacts):
    folder, _ = small
    long_name = tmp_path / "model-00001-of-00010_final-run.checkpoint.pt"
    shutil.copy(folder / "benign.pt", long_name)
    docs = window.open_paths([damage / "nan.pt", damage / "crc.pt", damage / "model.safetensors",
                              long_name, folder / "wide.pt"])
    for doc in docs:
        wait_loaded(qtbot, doc)
    window.resize(1024, 640)
    settle(qtbot)
    start = window.files.width()
    assert start >= 200
    widths = set()
    for tab in range(window.tabs.count()):
        window.tabs.setCurrentIndex(tab)
        for row in range(len(docs)):
            window.file_list.setCurrentRow(row)
            settle(qtbot, 30)
            widths.add(window.files.width())
    assert widths == {start}
    window.resize(1920, 1080)
    settle(qtbot)
    assert window.files.width() == start  # a bigger window widens the panes, not the list
    # the user's own width holds too
    window.splitter.setSizes([300, 1920 - 300])
    settle(qtbot)
    window.file_list.setCurrentRow(0)
    window.tabs.setCurrentWidget(window.tensors)
    settle(qtbot)
    assert window.files.width() == 300
    window.splitter.setSizes([start, 1920 - start])
    # a long name wraps at its separators: its row is taller than a short one's, and the
    # text drawn has break opportunities only after / _ - .
    row = docs.index(next(d for d in docs if d.path == long_name))
    assert (window.file_list.visualItemRect(window.file_list.item(row)).height()
            > window.file_list.visualItemRect(window.file_list.item(0)).height())
    drawn = break_at_separators(long_name.name)
    assert all(drawn[i - 1] in "/_-." for i, c in enumerate(drawn) if c == BREAK)
    window.file_list.setCurrentRow(row)
    window.tabs.setCurrentWidget(window.overview)
    shots = artifacts / "screens"
    shots.mkdir(parents=True, exist_ok=True)
    for width, height in SIZES:
        window.resize(width, height)
        settle(qtbot)
        assert window.grab().save(str(shots / f"layout-list-{width}x{height}-light.png"))


def test_tensors_pane_puts_problem_rows_first_and_fits_1280(window, qtbot, tmp_path, small,
                                                           artifacts):
    (doc,) = window.open_paths([nan_last(tmp_path / "nan-last.pt")])
    wait_loaded(qtbot, doc)
    qtbot.waitUntil(lambda: len(doc.tensors) == 41 and doc.health is not None,
                    timeout=LOAD_TIMEOUT_MS)
    window.resize(1280, 720)
    window.tabs.setCurrentWidget(window.tensors)
    settle(qtbot, 150)
    pane = window.tensors
    model = pane.model
    assert doc.tensors[-1]["key"] == "zz_head.weight"  # last in the file
    keys = [r["key"] for r in model.visible_rows()]
    assert keys[0] == "zz_head.weight"  # first on screen
    assert keys[1:] == [key(i) for i in range(40)]  # the rest in file order
    # a header click still sorts by that column, and the default comes back
    pane.table.sortByColumn(0, Qt.SortOrder.DescendingOrder)
    assert model.visible_rows()[0]["key"] == "zz_head.weight"  # descending by key
    pane.table.sortByColumn(0, Qt.SortOrder.AscendingOrder)
    assert model.visible_rows()[0]["key"] == key(0)
    pane.problems_button.click()
    assert model.visible_rows()[0]["key"] == "zz_head.weight"
    # every column but the last (the digest, stretched) ends inside the viewport
    header = pane.table.horizontalHeader()
    viewport = pane.table.viewport().width()
    assert header.length() <= viewport, [header.sectionSize(i) for i in range(13)]
    assert not pane.table.horizontalScrollBar().isVisible()
    shown = [i for i in range(model.columnCount()) if not pane.table.isColumnHidden(i)]
    last = max(shown, key=header.visualIndex)
    for logical in shown:
        if logical != last:
            right = header.sectionViewportPosition(logical) + header.sectionSize(logical)
            assert right <= viewport, model.headerData(logical, 1)
    shots = artifacts / "screens"
    shots.mkdir(parents=True, exist_ok=True)
    for width, height in SIZES:
        window.resize(width, height)
        settle(qtbot, 150)
        assert window.grab().save(str(shots / f"layout-tensors-{width}x{height}-light.png"))


def test_compare_results_columns_fit_1280(window, qtbot, small, tmp_path, artifacts):
    folder, _ = small
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(folder / "benign.pt", work / "model.pt")
    flip_exponent_bit(folder / "benign.pt", work / "good-copy.pt")
    (doc,) = window.open_paths([work / "model.pt"])
    wait_loaded(qtbot, doc)
    window.resize(1280, 720)
    window.tabs.setCurrentWidget(window.integrity)
    window.integrity.compare_with(work / "good-copy.pt")
    qtbot.waitUntil(lambda: doc.diff is not None, timeout=LOAD_TIMEOUT_MS)
    settle(qtbot, 150)
    table = window.integrity.table
    header = table.horizontalHeader()
    viewport = table.viewport().width()
    columns = table.model().columnCount()
    last = max(range(columns), key=header.visualIndex)
    for logical in range(columns):
        right = header.sectionViewportPosition(logical) + header.sectionSize(logical)
        assert right <= viewport or logical == last, table.model().headerData(logical, 1)
    assert header.sectionViewportPosition(last) + 120 <= viewport  # the details are readable
    shots = artifacts / "screens"
    shots.mkdir(parents=True, exist_ok=True)
    for width, height in SIZES:
        window.resize(width, height)
        settle(qtbot, 150)
        assert window.grab().save(str(shots / f"layout-compare-{width}x{height}-light.png"))
