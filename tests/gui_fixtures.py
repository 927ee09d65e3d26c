"""Fixtures of the GUI tests, loaded with `pytest_plugins = ("gui_fixtures",)`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from gui_support import build
from PySide6.QtCore import QSettings

from inspector.gui import app as appmod
from inspector.gui.app import create_application
from inspector.gui.main_window import MainWindow


@pytest.fixture(scope="session")
def gui_settings(tmp_path_factory) -> None:
    """Point the app's settings at a throw-away folder for the whole session."""
    QSettings.setPath(QSettings.Format.NativeFormat, QSettings.Scope.UserScope,
                      str(tmp_path_factory.mktemp("settings")))
    appmod.settings.cache_clear()


@pytest.fixture(scope="session")
def small(tmp_path_factory) -> tuple[Path, dict]:
    """Benign, NaN, suspicious, training and many-prefix checkpoints, with expected stats."""
    folder = tmp_path_factory.mktemp("gui-small")
    return folder, build(folder, "small")


@pytest.fixture
def window(make_window) -> MainWindow:
    """A shown main window with fresh settings and its own cache folder."""
    return make_window()


@pytest.fixture
def make_window(qtbot, tmp_path, monkeypatch, gui_settings) -> Callable[..., MainWindow]:
    """`make_window(**options)`: a shown MainWindow(**options), as the `window` fixture's."""

    def make(**options) -> MainWindow:
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
        create_application([])
        appmod.settings().clear()
        w = MainWindow(**options)
        qtbot.addWidget(w)
        w.resize(1280, 820)
        w.show()
        qtbot.waitExposed(w)
        return w

    return make


@pytest.fixture
def worker_requests(monkeypatch) -> list[dict]:
    """Every request sent to a sandbox worker to load or read a checkpoint during the test.
    The scan's jailed dry-run readings (`op` "dry-run": the loaders' own parsers over the
    bytes, with inert stand-ins, so nothing is loaded) are left out."""
    from inspector.sandbox.host import operations

    seen: list[dict] = []
    real = operations.run_job

    def spy(request, *args, **kwargs):
        if request.get("op") != "dry-run":
            seen.append(request)
        return real(request, *args, **kwargs)

    monkeypatch.setattr(operations, "run_job", spy)
    return seen
