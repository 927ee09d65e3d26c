"""The corruption radar in the Tensors pane: one flipped exponent bit in a 6-layer model is the
brightest, outlined cell; its tooltip names the key; a click selects it in the Tensors table;
screenshots at 1280x720 and 1920x1080, light and dark."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from gui_support import build, wait_loaded
from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QHelpEvent
from PySide6.QtWidgets import QApplication, QToolTip

from inspector.checkpoint.health import Health, HealthFinding
from inspector.checkpoint.radar import ABSMAX, NONFINITE, STD
from inspector.checkpoint.results import InspectResult
from inspector.core.vocabulary import HealthSeverity, HealthStatus
from inspector.gui import app as appmod
from inspector.gui import roles
from inspector.gui.document import FileDocument
from inspector.gui.panes.tensors_pane import LOG_FLOOR, TensorsPane
from inspector.gui.widgets.radar_view import FLAGGED, NO_FILE, colour_at

pytest_plugins = ("gui_fixtures",)  # fixtures: window, make_window, gui_settings

FLIPPED = "model.layers.3.self_attn.k_proj.weight"  # tests/factories.py RADAR_FLIP


@pytest.fixture(scope="module")
def flipped(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("gui-radar")
    build(folder, "radar")
    return folder / "flipped.pt"


def cells(view) -> dict[str, object]:
    """key -> model index of every filled cell."""
    model = view.model
    return {model.radar.cells[(r, c)].key: model.index(r, c) for r, c in model.radar.cells}


def test_flipped_exponent_lights_up_its_cell_and_a_click_selects_it(window, qtbot, flipped,
                                                                    artifacts):
    (doc,) = window.open_paths([flipped])
    wait_loaded(qtbot, doc)
    qtbot.waitUntil(lambda: doc.health is not None)
    window.tabs.setCurrentWidget(window.tensors)
    pane = window.tensors
    pane.radar_button.click()
    view = pane.radar
    assert pane.views.currentWidget() is view and view.pages.currentIndex() == 1
    radar = view.radar
    assert radar.columns == ["in", "0", "1", "2", "3", "4", "5", "out"]
    assert view.model.headerData(4, Qt.Orientation.Horizontal) == "3"

    # The brightest colour on the whole radar is painted in one cell: the flipped tensor's.
    by_key = cells(view)
    brightest = colour_at(1.0)
    lit = [k for k, i in by_key.items() if view.model.data(i, roles.BACKGROUND) == brightest]
    assert lit == [FLIPPED]
    index = by_key[FLIPPED]
    assert view.model.headerData(index.row(), Qt.Orientation.Vertical) == "self_attn.k_proj.weight"
    assert radar.columns[index.column()] == "3"
    assert radar.brightest(STD, index.row()) == index.column()
    # Weights health names it (magnitude outlier): outlined, and only it.
    assert [k for k, i in by_key.items() if view.model.data(i, FLAGGED)] == [FLIPPED]

    # Hovering gives the key and the exact value.
    tip = view.model.data(index, roles.TOOLTIP)
    absmax = next(t["absmax"] for t in doc.tensors if t["key"] == FLIPPED)
    assert tip.splitlines()[0] == FLIPPED and f"absmax {absmax:.6g}" in tip
    centre = view.table.visualRect(index).center()
    help_event = QHelpEvent(QEvent.Type.ToolTip, centre,
                            view.table.viewport().mapToGlobal(centre))
    QApplication.sendEvent(view.table.viewport(), help_event)
    qtbot.waitUntil(lambda: FLIPPED in QToolTip.text())
    QToolTip.hideText()

    # A click selects that tensor in the Tensors table; its histogram shows the outlier on
    # a log count axis as one value in the top bin.
    centre = view.table.visualRect(index).center()  # where it is now the layout has settled
    qtbot.mouseClick(view.table.viewport(), Qt.MouseButton.LeftButton, pos=centre)
    assert pane.table.currentIndex().data(roles.ROW)["key"] == FLIPPED
    assert pane.selected["key"] == FLIPPED and pane._plot.isVisible()
    if not pane.log_scale.isChecked():
        pane.log_scale.click()
    (item,) = pane._plot.getPlotItem().listDataItems()
    heights = sorted(item.getData()[1])  # the outlier's end bin and the bulk's, either way
    assert heights[-1] == pytest.approx(math.log10(255)) and heights[-2] == 0.0
    assert set(heights[:-2]) == {LOG_FLOOR}

    # Selecting another tensor in the table moves the radar's cell with it.
    pane.select_key("model.layers.1.mlp.up_proj.weight")
    assert view.table.currentIndex() == by_key["model.layers.1.mlp.up_proj.weight"]

    # By NaN/Inf share nothing lights up: the flip gave a finite value.
    view.metric_box.setCurrentIndex(2)
    assert view.metric == NONFINITE
    assert {view.model.data(i, roles.BACKGROUND).name() for i in by_key.values()} == {
        colour_at(0.0).name()}
    assert "NaN/Inf" in view.legend.text()
    view.metric_box.setCurrentIndex(0)
    assert view.metric == ABSMAX and view.high.text() == f"{absmax:.3g}"

    pane.select_key(FLIPPED)
    try:
        for scheme in ("light", "dark"):
            appmod.set_theme(scheme)
            for width, height in ((1280, 720), (1920, 1080)):
                window.resize(width, height)
                qtbot.wait(50)
                right = view.table.mapTo(window, view.table.rect().topRight()).x()
                assert view.isVisible() and right <= window.width()
                assert view.table.visualRect(by_key[FLIPPED]).height() > 0
                window.grab().save(str(artifacts / f"radar-{width}x{height}-{scheme}.png"))
        view.metric_box.setCurrentIndex(1)  # the std: the loader's word, said in the legend
        assert "as reported by the jailed loader" in view.legend.text()
        qtbot.wait(50)
        window.grab().save(str(artifacts / "radar-std-1920x1080-dark.png"))
    finally:
        appmod.set_theme("system")


def fake(key: str, absmax: float = 0.5) -> dict:
    return {"type": "tensor", "key": key, "dtype": "float32", "shape": [4], "numel": 4,
            "nbytes": 16, "absmax": absmax, "std": 0.1, "nan": 0, "inf": 0}


def _health_problem(doc: FileDocument, code: str, key: str) -> InspectResult:
    """A finished inspection whose weights health names one problem."""
    return InspectResult(str(doc.path), health=Health(HealthStatus.PROBLEM, [
        HealthFinding(code, key, HealthSeverity.PROBLEM, "")]))


@pytest.fixture
def pane(qtbot, tmp_path, gui_settings) -> TensorsPane:
    appmod.settings().clear()
    pane = TensorsPane()
    qtbot.addWidget(pane)
    pane.resize(1280, 720)
    pane.show()
    qtbot.waitExposed(pane)
    return pane


def test_empty_state_in_words_and_the_view_is_remembered(pane, qtbot, tmp_path):
    pane.radar_button.click()
    assert pane.radar.pages.currentIndex() == 0 and pane.radar.empty.text() == NO_FILE
    doc = FileDocument(tmp_path / "mlp.pt")
    pane.set_document(doc)
    doc.apply_events([fake("fc1.weight"), fake("fc2.weight")])
    qtbot.waitUntil(lambda: pane.model.rowCount() == 2)
    assert pane.radar.pages.currentIndex() == 0
    assert "No layered weights" in pane.radar.empty.text()
    assert pane.radar.empty.isVisible()

    # Layered rows streaming in fill the radar; a filter hiding the clicked key is cleared.
    doc.apply_events([fake(f"blocks.{i}.weight", absmax=10.0 ** i) for i in range(4)])
    qtbot.waitUntil(lambda: pane.radar.pages.currentIndex() == 1)
    assert pane.radar.radar.columns == ["in", "0", "1", "2", "3"]
    pane.filter.setText("fc1")
    pane._filter_timer.timeout.emit()
    index = pane.radar.index_of("blocks.2.weight")
    qtbot.mouseClick(pane.radar.table.viewport(), Qt.MouseButton.LeftButton,
                     pos=pane.radar.table.visualRect(index).center())
    assert pane.filter.text() == "" and pane.selected["key"] == "blocks.2.weight"
    # A double-click opens the tensor in the table view.
    other = pane.radar.table.visualRect(pane.radar.index_of("blocks.3.weight")).center()
    # As a mouse sends it: press and release, then the double-click on the same cell.
    qtbot.mouseClick(pane.radar.table.viewport(), Qt.MouseButton.LeftButton, pos=other)
    qtbot.mouseDClick(pane.radar.table.viewport(), Qt.MouseButton.LeftButton, pos=other)
    assert pane.views.currentWidget() is pane.table
    assert pane.table.currentIndex().data(roles.ROW)["key"] == "blocks.3.weight"

    pane.radar_button.click()
    again = TensorsPane()
    qtbot.addWidget(again)
    assert again.radar_button.isChecked() and again.views.currentWidget() is again.radar


def test_radar_is_built_only_while_shown(pane, qtbot, tmp_path, monkeypatch):
    from inspector.gui.panes import tensors_pane

    built = []
    real = tensors_pane.build_radar
    monkeypatch.setattr(tensors_pane, "build_radar", lambda *a: built.append(1) or real(*a))
    doc = FileDocument(tmp_path / "m.pt")
    pane.set_document(doc)
    doc.apply_events([fake(f"layers.{i}.w") for i in range(3)])
    qtbot.waitUntil(lambda: pane.model.rowCount() == 3)
    assert built == []
    pane.radar_button.click()
    assert built == [1]
    doc.changed.emit()  # nothing new: not rebuilt
    assert built == [1]
    doc.result = _health_problem(doc, "nonfinite-weights", "layers.1.w")
    doc.changed.emit()
    assert built == [1, 1]
    index = pane.radar.index_of("layers.1.w")
    assert pane.radar.model.data(index, FLAGGED)
    assert "weights health: nonfinite-weights" in pane.radar.model.data(index, roles.TOOLTIP)


def test_an_80_layer_model_fits_1280_without_scrolling(pane, qtbot, tmp_path, artifacts):
    doc = FileDocument(tmp_path / "deep.pt")
    pane.set_document(doc)
    kinds = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "mlp.up_proj.weight",
             "input_layernorm.weight")
    flipped = "model.layers.41.mlp.up_proj.weight"
    doc.apply_events([fake("model.embed_tokens.weight")]
                     + [fake(key, absmax=3e37 if key == flipped else 0.1 + i / 1000)
                        for i in range(80) for k in kinds if (key := f"model.layers.{i}.{k}")]
                     + [fake("lm_head.weight")])
    qtbot.waitUntil(lambda: pane.model.rowCount() == 322)
    pane.radar_button.click()
    view = pane.radar
    assert view.model.columnCount() == 82
    assert view.table.horizontalScrollBar().maximum() == 0
    assert view.table.verticalScrollBar().maximum() == 0
    step = view.model.label_step
    assert step > 1  # 82 narrow columns: not every layer is named
    shown = [view.model.headerData(c, Qt.Orientation.Horizontal) for c in range(82)]
    assert shown[1] == "0" and shown[2] == "" and shown[1 + step] == str(step)
    assert shown[0] == shown[-1] == ""  # "in" and "out" would elide to "…"; tooltips say
    assert view.model.headerData(2, Qt.Orientation.Horizontal, roles.TOOLTIP) == "Layer 1"
    index = view.index_of(flipped)
    assert index.column() == 42 and view.table.visualRect(index).width() >= 8
    assert view.model.data(index, roles.BACKGROUND) == colour_at(1.0)
    for scheme in ("light", "dark"):
        appmod.set_theme(scheme)
        qtbot.wait(50)
        pane.grab().save(str(artifacts / f"radar-deep-1280x720-{scheme}.png"))
    appmod.set_theme("system")


def test_every_row_fits_a_1280x720_window_and_a_finding_is_in_view(window, qtbot, flipped,
                                                                    artifacts):
    """At 1280x720, histogram panel under the views, the 12 kinds of the 6-layer model all
    show at a readable height (the radar takes the height it needs, the panel keeps its least)."""
    (doc,) = window.open_paths([flipped])
    wait_loaded(qtbot, doc)
    qtbot.waitUntil(lambda: doc.health is not None)
    window.resize(1280, 720)
    window.tabs.setCurrentWidget(window.tensors)
    pane, view = window.tensors, window.tensors.radar
    pane.radar_button.click()
    try:
        appmod.set_theme("dark")
        qtbot.wait(50)
        assert not pane.side_panel and pane.detail.isVisible()
        assert view.model.rowCount() == 12
        header = view.table.verticalHeader()
        viewport = view.table.viewport().rect()
        for row in range(12):
            # as tall as the header needs to draw the kind's label whole (underscores were cut)
            rect = view.table.visualRect(view.model.index(row, 0))
            assert rect.height() >= header.sectionSizeHint(row) and viewport.contains(rect), (
                row, rect, header.sectionSizeHint(row), viewport)
        assert pane.detail.height() >= 200
        window.grab().save(str(artifacts / "radar-12-rows-1280x720-dark.png"))
    finally:
        appmod.set_theme("system")


def test_rows_that_cannot_fit_scroll_with_the_finding_in_view(pane, qtbot, tmp_path):
    doc = FileDocument(tmp_path / "wide.pt")
    pane.set_document(doc)
    kinds = [f"block{k}.weight" for k in range(40)]
    flagged = "layers.2.block37.weight"
    doc.apply_events([fake(f"layers.{i}.{kind}") for i in range(4) for kind in kinds])
    qtbot.waitUntil(lambda: pane.model.rowCount() == 160)
    doc.result = _health_problem(doc, "magnitude-outlier", flagged)
    pane.radar_button.click()
    view = pane.radar
    qtbot.waitUntil(lambda: view.pages.currentIndex() == 1)
    assert view.table.verticalScrollBar().isVisible()
    assert view.table.verticalScrollBar().maximum() > 0
    index = view.index_of(flagged)
    assert view.model.data(index, FLAGGED)
    assert view.table.viewport().rect().contains(view.table.visualRect(index))
    assert view.table.visualRect(index).height() >= view.table.verticalHeader().sectionSizeHint(
        index.row())
