"""View → Theme (System, Light, Dark): applied at once, remembered, and no hard-coded colours
in the chart and table panes (they take theirs from the palette through chart_style)."""

from __future__ import annotations

import gc
import re
from pathlib import Path

import pytest
from PySide6.QtCore import QEvent
from PySide6.QtWidgets import QApplication

from inspector.gui import app as appmod
from inspector.gui.main_window import MainWindow
from inspector.gui.widgets import chart_style

pytest_plugins = ("gui_fixtures",)  # fixtures: window, gui_settings

GUI = Path(appmod.__file__).parent
HARD_CODED = re.compile(
    r"#[0-9a-fA-F]{6}\b"  # "#c0392b"
    r"|QColor\(\"|mk(?:Pen|Brush)\(\""  # QColor("red"), mkPen("r")
    r"|(?:brush|fill|colou?r)=\(\d"  # brush=(47, 101, 202, 150)
)
PALETTE_PANES = ("panes/gpu_pane.py", "panes/consistency_pane.py", "panes/tensors_pane.py",
                 "panes/tensor_models.py", "widgets/radar_view.py", "panes/overview_pane.py")


def theme_actions(window: MainWindow) -> dict[str, object]:
    return {a.data(): a for a in window.theme_menu.actions()}


@pytest.fixture
def restore_theme():
    # A theme change reaches every widget alive: widgets earlier tests of this process left
    # for deferred deletion are deleted first, so the change never reaches a half-freed one.
    _delete_deferred()
    yield
    appmod.set_theme("system")
    _delete_deferred()


def _delete_deferred() -> None:
    QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    gc.collect()


def test_view_theme_menu_switches_and_remembers(window, qtbot, restore_theme):
    view = next(a.menu() for a in window.menuBar().actions() if a.text() == "&View")
    assert window.theme_menu.menuAction() in view.actions()
    actions = theme_actions(window)
    assert list(actions) == ["system", "light", "dark"] and actions["system"].isChecked()
    actions["dark"].trigger()
    assert appmod.settings().value("view/theme") == "dark"
    assert chart_style.is_dark(QApplication.palette())
    qtbot.waitUntil(lambda: chart_style.is_dark(window.palette()))  # delivered as an event
    assert actions["dark"].isChecked() and not actions["system"].isChecked()

    again = MainWindow()  # a new window (or the next start) shows the remembered choice
    qtbot.addWidget(again)
    assert theme_actions(again)["dark"].isChecked()
    theme_actions(again)["light"].trigger()
    assert not chart_style.is_dark(QApplication.palette())
    assert appmod.theme() == "light"


def test_system_theme_follows_the_scheme_and_bad_values_read_as_system(gui_settings, qapp,
                                                                        restore_theme):
    appmod.settings().setValue("view/theme", "sepia")
    assert appmod.theme() == "system"
    with pytest.raises(ValueError):
        appmod.set_theme("sepia")
    appmod.set_theme("system")
    dark_system = qapp.styleHints().colorScheme().name == "Dark"
    assert chart_style.is_dark(QApplication.palette()) == dark_system


def test_series_and_role_colours_differ_between_light_and_dark(qapp):
    light, dark = qapp.style().standardPalette(), appmod.dark_palette()
    for i in range(8):
        assert chart_style.series_colour(i, dark).lightness() > 100
        assert chart_style.series_colour(i, light) != chart_style.series_colour(i, dark)
    for role in ("bad", "good", "warn", "mark"):
        assert chart_style.role_colour(role, dark).lightness() > 100
    assert "background: " in chart_style.banner_css("bad", dark)


@pytest.mark.parametrize("name", PALETTE_PANES)
def test_panes_hard_code_no_colours(name):
    source = (GUI / name).read_text()
    found = re.findall(HARD_CODED, source)
    assert found == [], f"{name} hard-codes colours {found}; use chart_style"
