"""File drops: files and folders dropped anywhere on the window open, even on a widget that
takes drops itself (a text box would paste the path), except on one that handles its own."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QMimeData, QObject, Qt
from PySide6.QtWidgets import QWidget

DROP_OWNER = "ownsFileDrops"
"""Widgets with this property set handle their own file drops (e.g. the manifest zone)."""
DRAG_EVENTS = (QEvent.Type.DragEnter, QEvent.Type.DragMove, QEvent.Type.Drop)


def local_paths(mime: QMimeData | None) -> list[str]:
    """Local file paths carried by a drag's mime data."""
    if mime is None or not mime.hasUrls():
        return []
    return [u.toLocalFile() for u in mime.urls() if u.isLocalFile()]


def owned_by_drop_zone(widget: QWidget | None) -> bool:
    """Whether `widget` or a widget holding it handles its own file drops (`DROP_OWNER`)."""
    while widget is not None:
        if widget.property(DROP_OWNER):
            return True
        widget = widget.parentWidget()
    return False


class FileDrops(QObject):
    """Opens the local files of a drag dropped on `window`, or on any widget in it that takes
    drops (`route`), with `open_paths`."""

    def __init__(self, window: QWidget, open_paths: Callable[[list[str]], object]) -> None:
        super().__init__(window)
        self._window = window
        self._open_paths = open_paths
        window.setAcceptDrops(True)
        window.installEventFilter(self)

    def route(self) -> None:
        """Filter the drops of every widget in the window that takes drops itself.

        Widgets that do not take drops pass them up to the window by themselves; only the
        ones that do (text boxes, text views) get the filter. Call again after adding panes.
        """
        for widget in self._window.findChildren(QWidget):
            if widget.acceptDrops() and not owned_by_drop_zone(widget):
                widget.installEventFilter(self)

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:
        """Take a drag that carries local files; open them on the drop."""
        kind = event.type()
        if kind not in DRAG_EVENTS:
            return False
        paths = local_paths(event.mimeData())
        if not paths:
            return False
        if obj is self._window:
            if kind == QEvent.Type.DragMove:
                return False  # the window keeps Qt's own handling of a move
            event.acceptProposedAction()
        else:
            # a widget that takes drops would otherwise paste the path (or move the file)
            event.setDropAction(Qt.DropAction.CopyAction)
            event.accept()
        if kind == QEvent.Type.Drop:
            self._open_paths(paths)
        return True
