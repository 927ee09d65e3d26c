"""Find the application's data files (icon, PNG sizes) through importlib.resources.

The top-level `resources/` folder is installed as the package `inspector.resources` (see
pyproject.toml), so the same call works from a checkout, an editable install, a wheel and a
PyInstaller build. Qt is imported only by `app_icon()`.
"""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from PySide6.QtGui import QIcon

PACKAGE = "inspector.resources"
APP_ID = "io.github.ckptinspector.CheckpointInspector"
"""Desktop-entry / AppStream id (packaging/linux/APP_ID.desktop); pass it to
QGuiApplication.setDesktopFileName so Wayland shells match windows to the entry and icon."""
ICON_NAME = "checkpoint-inspector"
ICON_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)


def resource(name: str) -> Traversable:
    """A file under resources/, by its relative path with forward slashes."""
    node = resources.files(PACKAGE)
    for part in name.split("/"):
        node = node.joinpath(part)
    return node


def icon_svg() -> bytes:
    """The application icon as SVG."""
    return resource(f"{ICON_NAME}.svg").read_bytes()


def icon_png(size: int) -> bytes:
    """The application icon rendered at one of ICON_SIZES pixels."""
    if size not in ICON_SIZES:
        raise ValueError(f"no {size} px icon; sizes are {ICON_SIZES}")
    return resource(f"icons/{ICON_NAME}-{size}.png").read_bytes()


def app_icon() -> QIcon:
    """A QIcon holding every PNG size, for the window and the taskbar (needs a Qt GUI app)."""
    from PySide6.QtGui import QIcon, QPixmap

    icon = QIcon()
    for size in ICON_SIZES:
        pixmap = QPixmap()
        pixmap.loadFromData(icon_png(size), "PNG")
        icon.addPixmap(pixmap)
    return icon
