"""Redraw the README's screenshots (docs/screenshots/) from the app on its built-in samples.

    QT_QPA_PLATFORM=offscreen .venv/bin/python scripts/readme_screenshots.py

The window is 1280x800 in the light theme; settings and the samples' cache live in a temp
folder, so the user's own settings are untouched. Each picture is written to a temp file and
renamed over the old one.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication

OUT = Path(__file__).resolve().parent.parent / "docs" / "screenshots"
SETTLED = ("loaded", "blocked")
TIMEOUT_S = 120


def wait_for(done: Callable[[], bool], what: str) -> None:
    """Run the event loop until `done()` holds; stop with an error after TIMEOUT_S."""
    end = time.monotonic() + TIMEOUT_S
    while not done():
        if time.monotonic() > end:
            raise SystemExit(f"timed out waiting for {what}")
        QApplication.processEvents()
        time.sleep(0.01)


def settle(seconds: float = 0.3) -> None:
    """Let pending paints and timers run."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        QApplication.processEvents()
        time.sleep(0.01)


def save(widget, name: str) -> None:
    """Grab `widget` into OUT/name through a temp file renamed over the old picture."""
    OUT.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".png", dir=OUT)
    os.close(fd)
    try:
        if not widget.grab().save(tmp, "PNG"):
            raise SystemExit(f"could not write {name}")
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, OUT / name)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    print(OUT / name)


def main() -> None:
    """Open the samples and save the Overview of the malicious one and the benign Tensors."""
    scratch = Path(tempfile.mkdtemp(prefix="readme-shots-"))
    os.environ["XDG_CACHE_HOME"] = str(scratch / "cache")
    QSettings.setPath(QSettings.Format.NativeFormat, QSettings.Scope.UserScope,
                      str(scratch / "settings"))
    from inspector.gui import app as appmod
    from inspector.gui.main_window import MainWindow

    appmod.create_application(sys.argv[:1])
    appmod.set_theme("light")
    window = MainWindow()
    window.resize(1280, 800)
    window.show()
    benign, malicious = window.open_samples()
    wait_for(lambda: benign.state in SETTLED and malicious.state in SETTLED
             and not window.runner.active(), "the samples to load")

    window.file_list.setCurrentRow(window.docs.index(malicious))
    window.tabs.setCurrentWidget(window.overview)
    settle()
    save(window, "main-window.png")

    window.file_list.setCurrentRow(window.docs.index(benign))
    window.tabs.setCurrentWidget(window.tensors)
    wait_for(lambda: window.tensors.select_key("model.decoder.weight"), "the tensor rows")
    settle()
    save(window, "tensors-pane.png")
    window.close()


if __name__ == "__main__":
    main()
