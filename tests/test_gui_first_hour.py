"""The first hour without friction (issue 24): the window fits a 1280×720 screen with its
status bar, progress and Cancel in view; Tools → Cancel only while a job runs; an export is
confirmed in the window with an "Open report" button; the empty window's shield makes no
promise; clear button words; the Consistency pane's file field and chart axes."""

from __future__ import annotations

import numpy as np
from gui_support import LOAD_TIMEOUT_MS, wait_loaded
from PySide6.QtCore import QRect, QSize
from PySide6.QtWidgets import QApplication

from inspector.gui.explain import INDICATORS_LABEL
from inspector.gui.main_window import DEFAULT_SIZE, WINDOW_FRAME, default_size
from inspector.gui.panes.consistency_layout import X_LABEL
from inspector.gui.panes.consistency_pane import ConsistencyPane
from inspector.gui.verdict_style import shield_icon

pytest_plugins = ("gui_fixtures",)  # fixtures: window, small


def test_the_default_size_fits_the_screen():
    assert default_size(QSize(1920, 1050)) == DEFAULT_SIZE
    w, h = default_size(QSize(1280, 720 - 27))  # a 1280×720 screen less a 27-pixel panel
    assert (w, h) == (1200, 720 - 27 - WINDOW_FRAME[1])
    assert default_size(QSize(1024, 600)) == (1024 - WINDOW_FRAME[0], 600 - WINDOW_FRAME[1])


def inside(window, widget) -> bool:
    """True when `widget` is shown wholly inside the window."""
    top_left = widget.mapTo(window, widget.rect().topLeft())
    return widget.isVisible() and window.rect().contains(QRect(top_left, widget.size()))


def test_status_bar_progress_and_cancel_in_view_at_1280x720(window, qtbot, small):
    w, h = default_size(QSize(1280, 720))
    window.resize(w, h)
    qtbot.wait(50)
    assert (window.width(), window.height()) == (w, h)  # no pane forces a taller window
    folder, _ = small
    (doc,) = window.open_paths([folder / "benign.pt"])
    window.build_panes()
    qtbot.waitUntil(lambda: window.cancel_button.isVisible(), timeout=LOAD_TIMEOUT_MS)
    assert inside(window, window.statusBar())
    assert inside(window, window.cancel_button) and inside(window, window.progress)
    assert window.act_cancel.isEnabled()
    wait_loaded(qtbot, doc)
    qtbot.waitUntil(lambda: not window.act_cancel.isEnabled(), timeout=LOAD_TIMEOUT_MS)
    assert (window.width(), window.height()) == (w, h)


def test_tools_cancel_is_disabled_while_nothing_runs(window):
    assert not window.act_cancel.isEnabled()
    cancel = next(a for a in window.tools_menu.actions() if a.text() == "Cancel")
    assert cancel is window.act_cancel


def test_an_export_is_confirmed_with_an_open_report_button(window, qtbot, small, tmp_path,
                                                           monkeypatch):
    from PySide6.QtGui import QDesktopServices

    opened = []
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url) or True)
    folder, _ = small
    (doc,) = window.open_paths([folder / "benign.pt"])
    wait_loaded(qtbot, doc)
    assert not window.report_button.isVisibleTo(window)
    out = tmp_path / "report.html"
    window.write_report(out, [doc])
    qtbot.waitUntil(lambda: window.report_button.isVisible(), timeout=LOAD_TIMEOUT_MS)
    assert out.is_file() and window.report_path == out
    assert "Report written" in window.statusBar().currentMessage()
    w, h = default_size(QSize(1280, 720))
    window.resize(w, h)
    qtbot.wait(50)
    assert inside(window, window.report_button)
    window.report_button.click()
    assert [u.toLocalFile() for u in opened] == [str(out)]


def test_the_empty_window_shield_has_no_check(window):
    shown = window.empty.logo.pixmap().toImage()
    plain = shield_icon("#2f65ca", checked=False).pixmap(96, 96).toImage()
    checked = shield_icon("#2f65ca").pixmap(96, 96).toImage()
    assert shown.size() == plain.size()
    assert shown == plain and shown != checked


def test_copy_threat_summary_is_named_for_what_it_copies(window):
    window.open_samples()
    assert window.overview.indicators_button.text() == INDICATORS_LABEL == "Copy threat summary"


def test_the_consistency_file_field_shows_a_typical_path_whole(window, qtbot, tmp_path):
    w, h = default_size(QSize(1280, 720))
    window.resize(w, h)
    window.build_panes()
    window.stack.setCurrentWidget(window.splitter)  # the panes, as with a file open
    window.tabs.setCurrentIndex(window.tabs.count() - 1)  # the Consistency tab
    qtbot.waitUntil(lambda: window.consistency is not None, timeout=30_000)
    path = "/home/someone/models/llama-3-8b-instruct/pytorch_model-00001-of-00004.bin"
    window.consistency.set_file(path)
    QApplication.processEvents()
    edit = window.consistency.file_edit
    assert edit.fontMetrics().horizontalAdvance(path) < edit.width() - 8
    assert edit.toolTip() == path


def test_consistency_charts_share_a_labelled_x_axis_and_start_at_zero(qtbot):
    pane = ConsistencyPane()
    qtbot.addWidget(pane)
    pane.resize(1200, 700)
    pane.show()
    pane._started = 1000.0
    pane._on_events([{"type": "iteration", "received": 1000.5 + i, "max_abs_diff": 0.0,
                      "mismatched": 0, "phase": "repeat", "iteration": i + 1}
                     for i in range(5)])
    for name in ("diff", "count"):
        plot = pane.plots[name]
        assert plot.getAxis("bottom").labelText == X_LABEL
        assert plot.getAxis("bottom").isVisible()
        _, (low, high) = plot.getViewBox().viewRange()
        # identical runs: a flat line on 0, not centred in -0.5..0.5 (no negative counts)
        assert -0.4 < low < 0 and high >= 1
    xs_diff, _ = pane.diff_curve.getData()
    xs_count, _ = pane.count_curve.getData()
    assert np.array_equal(xs_diff, xs_count) and xs_diff.tolist() == [0.5, 1.5, 2.5, 3.5, 4.5]
