"""QApplication set-up: names, the theme (System, Light or Dark; View → Theme), settings."""

from __future__ import annotations

from functools import cache

from PySide6.QtCore import QCoreApplication, QSettings, Qt
from PySide6.QtGui import QColor, QGuiApplication, QIcon, QPalette
from PySide6.QtWidgets import QApplication

from inspector import __version__
from inspector.gui import ui_gc
from inspector.resources_path import APP_ID

ORGANIZATION = "checkpoint-inspector"
APPLICATION = "Checkpoint Inspector"
MAX_RECENT = 10
THEMES = (("system", "&System"), ("light", "&Light"), ("dark", "&Dark"))
"""View → Theme choices: (QSettings value of `view/theme`, menu text)."""


def create_application(argv: list[str]) -> QApplication:
    """Return the QApplication, creating and configuring it on first call."""
    app = QApplication.instance()
    if app is None:
        QCoreApplication.setOrganizationName(ORGANIZATION)
        QCoreApplication.setApplicationName(APPLICATION)
        QCoreApplication.setApplicationVersion(__version__)
        QGuiApplication.setDesktopFileName(APP_ID)
        app = QApplication(argv)
    ui_gc.install(app)
    app.setStyle("Fusion")
    app.setWindowIcon(app_icon())
    apply_palette(app)
    app.styleHints().colorSchemeChanged.connect(lambda _scheme: apply_palette(app))
    return app


@cache
def settings() -> QSettings:
    """The app's persistent settings (geometry, recent files, options), read once per process."""
    return QSettings(ORGANIZATION, APPLICATION)


def recent_files() -> list[str]:
    """Most recently opened paths, newest first."""
    value = settings().value("recent_files", [])
    if isinstance(value, str):
        value = [value]
    return [str(v) for v in value or []]


def add_recent_file(path: str) -> None:
    """Move `path` to the front of the recent list."""
    paths = [path] + [p for p in recent_files() if p != path]
    settings().setValue("recent_files", paths[:MAX_RECENT])


def clear_recent_files() -> None:
    """Forget all recent paths."""
    settings().setValue("recent_files", [])


def theme() -> str:
    """The chosen theme: "system", "light" or "dark" (an unknown stored value reads as system)."""
    value = str(settings().value("view/theme", "system"))
    return value if value in dict(THEMES) else "system"


def set_theme(name: str) -> None:
    """Remember `name` (one of THEMES) and repaint the running application with it."""
    if name not in dict(THEMES):
        raise ValueError(f"unknown theme {name!r}")
    settings().setValue("view/theme", name)
    app = QApplication.instance()
    if app is not None:
        apply_palette(app)


def apply_palette(app: QApplication) -> None:
    """Dark palette for the Dark theme, or for System while the system scheme is dark; Fusion's
    light one otherwise."""
    chosen = theme()
    system_dark = app.styleHints().colorScheme() == Qt.ColorScheme.Dark
    if chosen == "dark" or (chosen == "system" and system_dark):
        app.setPalette(dark_palette())
    else:
        app.setPalette(app.style().standardPalette())


def dark_palette() -> QPalette:
    """The palette used when the system scheme is dark."""
    pal = QPalette()
    role = QPalette.ColorRole
    colours = {
        role.Window: "#2b2d30",
        role.WindowText: "#e6e6e6",
        role.Base: "#1e1f22",
        role.AlternateBase: "#26282b",
        role.ToolTipBase: "#3c3f41",
        role.ToolTipText: "#e6e6e6",
        role.PlaceholderText: "#8c8c8c",
        role.Text: "#e6e6e6",
        role.Button: "#3c3f41",
        role.ButtonText: "#e6e6e6",
        role.BrightText: "#ff6b68",
        role.Link: "#6ea8fe",
        role.Highlight: "#2f65ca",
        role.HighlightedText: "#ffffff",
    }
    for r, c in colours.items():
        pal.setColor(r, QColor(c))
    disabled = QPalette.ColorGroup.Disabled
    for r in (role.WindowText, role.Text, role.ButtonText):
        pal.setColor(disabled, r, QColor("#7a7a7a"))
    return pal


def app_icon() -> QIcon:
    """The window icon: a shield drawn at run time (packaging ships the SVG)."""
    from inspector.gui.verdict_style import shield_icon

    return shield_icon("#2f65ca")
