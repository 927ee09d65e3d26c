"""The main window's actions, menu bar (File with Open Recent, View → Theme, Tools, Help),
toolbar and shortcuts; an action that cannot run on the selected file says why in its tooltip.

`build_menus(window)` gives the window its actions as `act_*` attributes and its menus as
`file_menu`, `recent_menu`, `theme_menu`, `tools_menu` and `jail_menu`. Most actions trigger
the window's commands (`open_dialog`, `convert_current`, ...); the Integrity tools and the
About box, which only a menu starts, run from here.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMenu, QMenuBar, QStyle, QWidget

from inspector.gui import app as appmod
from inspector.gui.action_reasons import compare_blocker, convert_blocker, file_blocker
from inspector.gui.pipeline import JAIL_CHOICES, required_jail_setting, set_required_jail_setting


def add_choice_menu(parent: QMenu, title: str, choices: tuple[tuple[str, str], ...],
                    current: str, choose: Callable[[str], None]) -> QMenu:
    """A submenu of exclusive checkable (value, text) choices; `choose(value)` on a pick."""
    menu = parent.addMenu(title)
    group = QActionGroup(menu)
    for value, text in choices:
        action = QAction(text, menu, checkable=True, checked=value == current)
        action.setData(value)
        action.triggered.connect(lambda _checked=False, v=value: choose(v))
        group.addAction(action)
        menu.addAction(action)
    return menu


def add_theme_menu(menu_bar: QMenuBar) -> QMenu:
    """Add View → Theme (System, Light, Dark) to a window's menu bar, checked as remembered."""
    view = next((a.menu() for a in menu_bar.actions()
                 if a.menu() is not None and a.text().replace("&", "") == "View"), None)
    if view is None:
        view = menu_bar.addMenu("&View")
    return add_choice_menu(view, "&Theme", appmod.THEMES, appmod.theme(), appmod.set_theme)


class RecentMenu(QMenu):
    """File → Open Recent: the remembered paths, read afresh each time the menu opens."""

    def __init__(self, title: str, open_paths: Callable[[list[str]], object],
                 parent: QWidget | None = None) -> None:
        super().__init__(title, parent)
        self._open_paths = open_paths
        self.aboutToShow.connect(self._fill)

    def _fill(self) -> None:
        self.clear()
        paths = appmod.recent_files()
        for path in paths:
            action = self.addAction(path)
            action.triggered.connect(lambda _=False, p=path: self._open_paths([p]))
        if not paths:
            self.addAction("No recent files").setEnabled(False)
        else:
            self.addSeparator()
            self.addAction("Clear List", appmod.clear_recent_files)


def build_menus(window: QMainWindow) -> None:
    """Give `window` its actions, menu bar and toolbar."""
    _add_actions(window)
    _add_menu_bar(window)
    _add_toolbar(window)


def update_actions(window: QMainWindow) -> None:
    """Enable each file action for the window's selected document, or say in its tooltip
    why it cannot run on that file."""
    doc = window.current
    for action, blocked in ((window.act_close, file_blocker(doc)),
                            (window.act_report, report_blocker(window)),
                            (window.act_convert, convert_blocker(doc)),
                            (window.act_manifest, file_blocker(doc)),
                            (window.act_verify, file_blocker(doc)),
                            (window.act_compare, compare_blocker(doc))):
        action.setEnabled(blocked is None)
        action.setToolTip(blocked or action.statusTip() or action.text())


def report_blocker(window: QMainWindow) -> str | None:
    """Why Export Report cannot run: no file open and no checked training run."""
    run = getattr(window, "run_pane", None)
    return None if run is not None and run.summary() is not None else file_blocker(window.current)


def _action(window: QMainWindow, text: str, slot: Callable[[], object], shortcut=None,
            tip: str = "", icon: QStyle.StandardPixmap | None = None) -> QAction:
    action = QAction(text, window)
    if shortcut is not None:
        action.setShortcut(QKeySequence(shortcut))
    if tip:
        action.setStatusTip(tip)
        action.setToolTip(tip)
    if icon is not None:
        action.setIcon(window.style().standardIcon(icon))
    action.triggered.connect(slot)
    return action


def _add_actions(w: QMainWindow) -> None:
    sp = QStyle.StandardPixmap
    w.act_open = _action(w, "&Open…", w.open_dialog, QKeySequence.StandardKey.Open,
                         "Open checkpoint files", sp.SP_DialogOpenButton)
    w.act_open_folder = _action(w, "Open &Folder…", w.open_folder_dialog, "Ctrl+Shift+O",
                                "Open a folder of shards", sp.SP_DirOpenIcon)
    w.act_sample = _action(w, "Open &Sample", w.open_samples, None,
                           "Write and open the built-in samples")
    w.act_close = _action(w, "&Close", w.close_current, QKeySequence.StandardKey.Close,
                          "Close the selected file")
    w.act_report = _action(w, "&Export Report…", w.export_report, "Ctrl+E",
                           "Write a JSON, HTML or PDF verification report")
    w.act_quit = _action(w, "&Quit", w.close, QKeySequence.StandardKey.Quit)
    w.act_convert = _action(w, "Convert to &safetensors…", w.convert_current, "Ctrl+Shift+S",
                            "Convert the selected file to safetensors, verified tensor by "
                            "tensor", sp.SP_DialogSaveButton)
    w.act_manifest = _action(w, "Create &Manifest…", lambda: _integrity(w).create_manifest(),
                             "Ctrl+M", "Write a manifest of the selected files")
    w.act_verify = _action(w, "&Verify Against Manifest…",
                           lambda: _integrity(w).choose_manifest(), "Ctrl+Shift+V",
                           "Check files and tensors against a manifest", sp.SP_DialogApplyButton)
    w.act_compare = _action(w, "Compare &With…", lambda: _integrity(w).choose_compare(), "Ctrl+D",
                            "Diff against another checkpoint, with bit-flip forensics",
                            sp.SP_FileDialogContentsView)
    w.act_cancel = _action(w, "Cancel", w.cancel_jobs, Qt.Key.Key_Escape,
                           "Stop the running job", sp.SP_BrowserStop)
    w.act_cancel.setEnabled(False)  # until a job runs (the window's `_set_busy`)
    w.act_about = _action(w, "&About Checkpoint Inspector", lambda: _show_about(w))


def _integrity(w: QMainWindow) -> QWidget:
    """The Integrity pane, brought to the front for a Tools command that runs there."""
    w.tabs.setCurrentWidget(w.integrity)
    return w.integrity


def _show_about(w: QMainWindow) -> None:
    """The About box with the environment a bug report needs."""
    from inspector.gui.dialogs.about_dialog import AboutDialog

    AboutDialog(w.runner, w).show()


def _add_menu_bar(w: QMainWindow) -> None:
    menu = w.menuBar().addMenu("&File")
    menu.addAction(w.act_open)
    menu.addAction(w.act_open_folder)
    w.recent_menu = RecentMenu("Open &Recent", w.open_paths, menu)
    menu.addMenu(w.recent_menu)
    menu.addAction(w.act_sample)
    menu.addSeparator()
    menu.addAction(w.act_report)
    menu.addAction(w.act_close)
    menu.addSeparator()
    menu.addAction(w.act_quit)
    w.file_menu = menu
    w.theme_menu = add_theme_menu(w.menuBar())

    tools = w.menuBar().addMenu("&Tools")
    tools.setToolTipsVisible(True)  # a disabled tool's tooltip says why
    for a in (w.act_convert, w.act_manifest, w.act_verify, w.act_compare):
        tools.addAction(a)
    tools.addSeparator()
    w.jail_menu = add_choice_menu(tools, "Required &sandbox", JAIL_CHOICES,
                                  required_jail_setting(), set_required_jail_setting)
    tools.addSeparator()
    tools.addAction(w.act_cancel)
    w.tools_menu = tools

    help_menu = w.menuBar().addMenu("&Help")
    help_menu.addAction(w.act_about)


def _add_toolbar(w: QMainWindow) -> None:
    toolbar = w.addToolBar("Main")
    toolbar.setObjectName("mainToolbar")
    toolbar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
    toolbar.addAction(w.act_open)
    toolbar.addSeparator()
    toolbar.addAction(w.act_convert)
    toolbar.addAction(w.act_verify)
    toolbar.addAction(w.act_compare)
