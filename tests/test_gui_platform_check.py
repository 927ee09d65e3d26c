"""Start-up on a desktop missing the xcb plugin's libraries: one line naming them and their
packages, printed before Qt is loaded, instead of Qt's abort.

The libraries are hidden from the dynamic loader for real: the plugin is copied beside a
library folder that lacks one of them, so its `$ORIGIN` run path finds all but that one."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from inspector.gui import platform_check
from inspector.gui.platform_check import (
    PACKAGES,
    family,
    install_hint,
    missing_libraries,
    startup_problem,
    xcb_plugin,
    xcb_will_load,
)

REPO = Path(__file__).resolve().parent.parent
HIDDEN = "libQt6XcbQpa.so.6"
DEBIAN = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n'
UBUNTU = 'NAME="Ubuntu"\nID=ubuntu\nID_LIKE=debian\n'
FEDORA = 'NAME="Fedora Linux"\nID=fedora\n'
ROCKY = 'ID="rocky"\nID_LIKE="rhel centos fedora"\n'

needs_ldd = pytest.mark.skipif(shutil.which("ldd") is None or not sys.platform.startswith("linux"),
                               reason="needs Linux and its ldd")


def real_plugin() -> Path:
    """PySide6's own xcb plugin."""
    plugin = xcb_plugin({})
    if plugin is None:
        pytest.skip("this PySide6 has no xcb platform plugin")
    return plugin


def hide_from_loader(tmp_path: Path, hidden: str) -> Path:
    """A copy of the xcb plugin in TMP/qt/plugins/platforms whose `$ORIGIN/../../lib` holds
    links to every Qt library PySide6 ships except `hidden`; returns the platforms folder."""
    plugin = real_plugin()
    qt = plugin.parent.parent.parent
    platforms = tmp_path / "qt" / "plugins" / "platforms"
    platforms.mkdir(parents=True)
    shutil.copy(plugin, platforms / plugin.name)
    lib = tmp_path / "qt" / "lib"
    lib.mkdir()
    for found in (qt / "lib").iterdir():
        if found.name != hidden:
            (lib / found.name).symlink_to(found)
    return platforms


@needs_ldd
def test_a_library_hidden_from_the_loader_is_named(tmp_path):
    real = missing_libraries(real_plugin())
    assert HIDDEN not in real  # PySide6 ships it beside the plugin
    platforms = hide_from_loader(tmp_path, HIDDEN)
    missing = missing_libraries(platforms / "libqxcb.so")
    # what the system lacks for the real plugin is still lacking; the hidden one is added
    assert set(missing) == {*real, HIDDEN}
    assert missing_libraries(hide_from_loader(tmp_path / "all", "none") / "libqxcb.so") == real


@needs_ldd
def test_the_app_prints_one_line_instead_of_qt_aborting(tmp_path):
    platforms = hide_from_loader(tmp_path, HIDDEN)
    env = {k: v for k, v in os.environ.items()
           if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY", "XDG_SESSION_TYPE")}
    env.update(DISPLAY=":97", QT_QPA_PLATFORM_PLUGIN_PATH=str(platforms),
               XDG_CACHE_HOME=str(tmp_path / "cache"))
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from inspector.cli.gui_cmd import run_gui; "
         "assert 'PySide6.QtCore' not in sys.modules; code = run_gui([]); "
         "assert 'PySide6.QtWidgets' not in sys.modules; sys.exit(code)"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == platform_check.EXIT_MISSING_LIBRARIES, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert HIDDEN in lines[0] and "reinstall PySide6" in lines[0]
    assert "qt.qpa" not in done.stderr and "Aborted" not in done.stderr


@needs_ldd
def test_the_real_plugin_check_agrees_with_the_loader():
    """On this machine (a stock Debian lacks libxcb-icccm4 and libxcb-keysyms1) the one line
    names exactly what ldd says is missing, with its packages; with nothing missing, none."""
    env = {"DISPLAY": ":97"}
    missing = missing_libraries(real_plugin())
    problem = startup_problem(env)
    if not missing:
        assert problem is None
        return
    assert problem is not None and "\n" not in problem
    for lib in missing:
        assert lib in problem
        if lib in PACKAGES:
            assert any(name in problem for name in PACKAGES[lib])


def test_install_hint_names_the_packages_of_the_distribution():
    missing = ["libxcb-icccm.so.4", "libxcb-keysyms.so.1"]
    debian = install_hint(missing, family(DEBIAN))
    assert "sudo apt-get install libxcb-icccm4 libxcb-keysyms1" in debian
    assert debian.startswith("ckpt-inspector: the desktop app cannot start") and "\n" not in debian
    assert "sudo apt-get install libxcb-icccm4" in install_hint(missing, family(UBUNTU))
    assert "sudo dnf install xcb-util-wm xcb-util-keysyms" in install_hint(missing, family(FEDORA))
    assert family(ROCKY).name == "fedora"
    unknown = install_hint(missing, family("ID=plan9\n"))
    assert "libxcb-icccm4 libxcb-keysyms1 (their Debian/Ubuntu names)" in unknown
    # the same package once, however many of its libraries are missing
    assert install_hint(["libxcb-randr.so.0", "libxcb-shape.so.0"], family(FEDORA)).count(
        "libxcb") == 3  # two sonames, one package


def test_the_check_runs_only_where_qt_would_load_xcb(monkeypatch):
    monkeypatch.setattr(platform_check.sys, "platform", "linux")
    assert xcb_will_load({"DISPLAY": ":0"})
    assert not xcb_will_load({})
    assert not xcb_will_load({"DISPLAY": ":0", "QT_QPA_PLATFORM": "offscreen"})
    assert xcb_will_load({"QT_QPA_PLATFORM": "xcb"})
    assert not xcb_will_load({"DISPLAY": ":0", "WAYLAND_DISPLAY": "wayland-0",
                              "XDG_SESSION_TYPE": "wayland"})
    assert startup_problem({"QT_QPA_PLATFORM": "offscreen"}) is None
    monkeypatch.setattr(platform_check.sys, "platform", "darwin")
    assert not xcb_will_load({"DISPLAY": ":0"})


def test_the_troubleshooting_page_lists_every_library_and_package():
    page = (REPO / "docs" / "troubleshooting-desktop.md").read_text()
    for lib, packages in PACKAGES.items():
        row = f"| `{lib}` | " + " | ".join(f"`{p}`" for p in packages) + " |"
        assert row in page, lib
    sample = re.search(r"```\n(ckpt-inspector: .*)\n```", page).group(1)
    assert sample == install_hint(["libxcb-icccm.so.4", "libxcb-keysyms.so.1"], family(DEBIAN))


@pytest.mark.parametrize("entry", ["ckpt-inspector-gui", "ckpt-inspector"])
def test_both_entry_points_open_the_app_with_the_loaders_jailed_readings(entry, monkeypatch):
    """`ckpt-inspector-gui` and `ckpt-inspector` start the same app, and its scans (in any
    thread) run the loaders' own readings in the jail, not the static walk alone."""
    import threading

    from inspector import cli
    from inspector.cli import gui_cmd
    from inspector.scan import readings

    seen = []

    def app(argv):
        worker = threading.Thread(target=lambda: seen.append(readings.current_reader()))
        worker.start()
        worker.join()
        return 0

    monkeypatch.setattr(gui_cmd, "run_gui", app)
    monkeypatch.setattr(sys, "argv", ["ckpt-inspector"])
    if entry == "ckpt-inspector-gui":
        with pytest.raises(SystemExit) as done:
            gui_cmd.main()
        assert done.value.code == 0
    else:
        assert cli.main([]) == 0
    assert seen == [cli._jailed]
    assert readings.current_reader() is None  # restored once the app has quit
